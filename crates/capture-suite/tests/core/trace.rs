//! The trace: a capture's lifecycle as the core's own renderer writes it, one event per
//! line with logical ids only, snapshotted.

use capture_core::Arg;
use capture_mock::FaultOp;

use crate::bytes_of;
use crate::{S0, S2, add_one, device, filled, kernels, read};

#[test]
fn a_capture_lifecycle_trace() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    let g = dev
        .capture(S0, |d| {
            let tmp = d.alloc(S0, 8)?;
            add_one(d, &k, S0, &x, &tmp)?;
            d.launch(
                S0,
                &k.add_scalar,
                [1, 1, 1],
                &[Arg::read_write(&tmp)],
                &[10],
            )?;
            add_one(d, &k, S0, &tmp, &y)?;
            // A neighbour is refused while the window is active; not a failure.
            assert!(d.alloc(S2, 4).is_err());
            Ok::<(), capture_core::ServerError>(())
        })
        .unwrap();
    dev.write(S0, &x, 0, bytes_of(&[5, 6])).unwrap();
    dev.replay(S0, &g, 2).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![17, 18]);
    world.fail(FaultOp::Replay, 1);
    dev.replay(S0, &g, 1).unwrap_err();
    dev.drop_graph(g).unwrap();
    insta::assert_snapshot!("capture_lifecycle", dev.trace().render());
}
