//! A graph's ledger splits the device bytes it pins, as the handles stand when asked:
//! the user's buffers it holds, the bytes only it keeps alive, and its info words.

use capture_core::{Arg, GraphLedger};

use crate::{S0, add_one, device, filled, kernels, read};

/// The device-byte split of `ledger`, checked to add up.
fn split(ledger: &GraphLedger) -> (u64, u64, u64) {
    assert_eq!(
        ledger.user_bytes + ledger.graph_only_bytes + ledger.info_bytes,
        ledger.device_bytes,
        "{ledger}"
    );
    (
        ledger.user_bytes,
        ledger.graph_only_bytes,
        ledger.info_bytes,
    )
}

#[test]
fn the_ledger_tells_the_user_s_buffers_from_what_only_the_graph_keeps_alive() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let weight = filled(&dev, S0, &[1; 16]);
    let mid = dev.alloc(S0, 64).unwrap();
    let out = dev.alloc(S0, 64).unwrap();
    let kept = out.clone();
    let g = dev
        .capture(S0, |d| {
            // Dropped inside the window: only the graph holds it from the start.
            let scratch = d.alloc(S0, 64)?;
            add_one(d, &k, S0, &weight, &scratch)?;
            add_one(d, &k, S0, &scratch, &mid)?;
            // One info word (8 B), an entry of the info cache pinned to the graph.
            d.launch(S0, &k.add_scalar, [1, 1, 1], &[Arg::read_write(&mid)], &[5])?;
            d.launch(
                S0,
                &k.add,
                [1, 1, 1],
                &[Arg::read(&weight), Arg::read(&mid), Arg::write(&out)],
                &[],
            )
        })
        .unwrap();

    // Weight, intermediate and output are still the user's; the scratch is not.
    let sealed = dev.graph(&g).unwrap();
    assert_eq!(split(&sealed), (3 * 64, 64, 8), "{sealed}");
    // The info word's recorded upload reads its staging on every replay.
    assert_eq!((sealed.host_bytes, sealed.info_entries), (8, 1));
    assert_eq!(sealed.launches, 4);
    assert_eq!(dev.memory_report().graphs, vec![sealed.clone()]);
    assert_eq!(
        sealed.to_string(),
        "graph#0: device 264 B (user 192 B, graph only 64 B, info 8 B), host staging 8 B, \
         1 info entries, 4 launches; 72 B marginal"
    );

    // The intermediate's handle goes after the capture: its bytes become the graph's.
    drop(mid);
    let now = dev.graph(&g).unwrap();
    assert_eq!(split(&now), (2 * 64, 2 * 64, 8), "{now}");
    assert_eq!(now.device_bytes, sealed.device_bytes);
    assert_eq!(dev.memory_report().graphs, vec![now]);

    // One clone of the output dropped: the other still owns it.
    drop(out);
    assert_eq!(split(&dev.graph(&g).unwrap()), (2 * 64, 2 * 64, 8));

    // The graph still replays over what it alone holds.
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(
        read(&dev, S0, &kept).unwrap(),
        vec![1 + (1 + 1 + 1 + 5); 16]
    );

    drop(weight);
    assert_eq!(split(&dev.graph(&g).unwrap()), (64, 3 * 64, 8));
    drop(kept);
    assert_eq!(split(&dev.graph(&g).unwrap()), (0, 4 * 64, 8));
    dev.drop_graph(g).unwrap();
    dev.sync(S0).unwrap();
    assert!(dev.memory_report().graphs.is_empty());
}

#[test]
fn marginal_bytes_count_what_each_graph_alone_keeps_and_shared_bytes_count_once() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 64]);
    let shared = dev.alloc(S0, 256).unwrap();
    let (ya, yb) = (dev.alloc(S0, 256).unwrap(), dev.alloc(S0, 256).unwrap());
    // Two graphs over one intermediate of the caller's, each with one of its own.
    let capture = |y: &capture_core::Buffer| {
        dev.capture(S0, |d| {
            add_one(d, &k, S0, &x, &shared)?;
            let own = d.alloc(S0, 256)?;
            add_one(d, &k, S0, &shared, &own)?;
            add_one(d, &k, S0, &own, y)
        })
        .unwrap()
    };
    let (ga, gb) = (capture(&ya), capture(&yb));
    drop(shared); // now only the two graphs keep it
    let report = dev.memory_report();
    let (a, b) = (dev.graph(&ga).unwrap(), dev.graph(&gb).unwrap());
    for g in [&a, &b] {
        assert_eq!(
            split(g),
            (512, 512, 0),
            "x and y the user's; shared and own"
        );
        assert_eq!(g.marginal_bytes, 256, "its own intermediate alone: {g}");
    }
    assert_eq!(report.graphs, vec![a, b]);
    assert_eq!(
        report.graph_shared_bytes, 256,
        "the shared intermediate, once"
    );
    assert_eq!(
        report.graph_held_bytes(),
        768,
        "not 1024, summing graph-only"
    );
    assert!(
        report.to_string().contains(
            "graphs hold 768 B only for graphs: 256 B shared by several (counted once) + \
             512 B marginal"
        ),
        "{report}"
    );
    // With one graph left, what they shared is its alone; dropping it frees exactly
    // its marginal bytes.
    drop(ga);
    dev.sync(S0).unwrap();
    dev.cleanup().unwrap();
    let b = dev.graph(&gb).unwrap();
    assert_eq!(b.marginal_bytes, 512, "{b}");
    let report = dev.memory_report();
    assert_eq!(report.graph_shared_bytes, 0);
    let in_use = report.streams[0].device.in_use();
    drop(gb);
    dev.sync(S0).unwrap();
    dev.cleanup().unwrap();
    assert_eq!(
        in_use - dev.memory_report().streams[0].device.in_use(),
        512,
        "dropping the last graph freed its marginal bytes"
    );
    assert_eq!(read(&dev, S0, &ya).unwrap(), vec![4; 64]);
}
