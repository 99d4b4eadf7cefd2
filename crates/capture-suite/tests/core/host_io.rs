//! Typed and borrowed host I/O: writes from any bytes or plain-old-data slice, reads into
//! the caller's buffer, and their refusals (typed, naming what was wrong, the stream
//! usable after).

use capture_core::ServerError;

use crate::{S0, S1, add_one, device, kernels, suite_lock};

/// A `#[repr(C)]` value of the caller's own, plain old data by bytemuck's derive.
#[derive(Clone, Copy, Debug, PartialEq, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Pair {
    position: u32,
    token: f32,
}

#[test]
fn a_write_takes_borrowed_and_owned_bytes() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = dev.alloc(S0, 8).unwrap();
    let host = vec![1u8, 2, 3, 4];
    dev.write(S0, &x, 0, &host[..]).unwrap(); // a borrowed slice
    dev.write(S0, &x, 4, &host).unwrap(); // a borrowed Vec
    assert_eq!(host.len(), 4, "the caller keeps its buffer");
    assert_eq!(dev.read(S0, &x).unwrap(), [1, 2, 3, 4, 1, 2, 3, 4]);
    dev.write(S0, &x, 0, [9u8; 2]).unwrap(); // an array
    dev.write(S0, &x, 2, bytes::Bytes::from_static(&[8, 8]))
        .unwrap(); // Bytes
    dev.write(S0, &x, 4, vec![7u8; 4]).unwrap(); // an owned Vec
    assert_eq!(dev.read(S0, &x).unwrap(), [9, 9, 8, 8, 7, 7, 7, 7]);
}

#[test]
fn typed_values_round_trip_in_the_hosts_byte_order() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = dev.alloc(S0, 16).unwrap();
    let pairs = [
        Pair {
            position: 3,
            token: 1.5,
        },
        Pair {
            position: 4,
            token: -2.0,
        },
    ];
    dev.write_values(S0, &x, 0, &pairs).unwrap();
    assert_eq!(dev.read_values::<Pair>(S0, &x).unwrap(), pairs);
    // The same bytes, seen as words and as raw bytes.
    assert_eq!(
        dev.read_values::<u32>(S0, &x).unwrap(),
        [3, 1.5f32.to_bits(), 4, (-2.0f32).to_bits()]
    );
    assert_eq!(dev.read_range(S0, &x, 0, 4).unwrap(), 3u32.to_ne_bytes());
    let mut second = [Pair::default()];
    dev.read_values_into(S0, &x, 8, &mut second).unwrap();
    assert_eq!(second, [pairs[1]]);
}

#[test]
fn a_read_into_fills_only_the_callers_range() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = dev.alloc(S0, 16).unwrap();
    dev.write_values(S0, &x, 0, &[10u32, 11, 12, 13]).unwrap();
    let mut host = [0u8; 8];
    dev.read_into(S0, &x, 4, &mut host).unwrap();
    assert_eq!(host[..4], 11u32.to_ne_bytes());
    assert_eq!(host[4..], 12u32.to_ne_bytes());
    // An empty range is refused, as an empty write is.
    let err = dev.read_into(S0, &x, 4, &mut []).unwrap_err();
    assert!(matches!(err, ServerError::InvalidBinding { .. }), "{err:?}");
}

#[test]
fn a_read_past_the_end_is_refused_naming_the_buffer_and_the_stream_goes_on() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = dev.alloc(S0, 16).unwrap();
    dev.write_values(S0, &x, 0, &[1u32; 4]).unwrap();
    let mut host = [0u32; 3];
    let err = dev.read_values_into(S0, &x, 8, &mut host).unwrap_err();
    assert!(matches!(err, ServerError::InvalidBinding { .. }), "{err:?}");
    assert!(err.to_string().contains(&x.id().to_string()), "{err}");
    assert_eq!(
        host, [0; 3],
        "a refused read writes nothing into the caller's buffer"
    );
    // Nothing was lost: the buffer reads back, the stream takes more work.
    assert_eq!(dev.read_values::<u32>(S0, &x).unwrap(), [1; 4]);
}

#[test]
fn a_typed_read_of_a_size_that_is_not_whole_values_is_refused_naming_the_type() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = dev.alloc(S0, 12).unwrap();
    dev.write_values(S0, &x, 0, &[1u32, 2, 3]).unwrap();
    let err = dev.read_values::<u64>(S0, &x).unwrap_err();
    assert!(
        matches!(err, ServerError::InvalidArgument { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("12 bytes") && text.contains("u64"),
        "the refusal names the size and the type: {text}"
    );
    assert_eq!(dev.read_values::<u32>(S0, &x).unwrap(), [1, 2, 3]);
}

#[test]
fn a_typed_write_past_the_end_is_refused_and_writes_nothing() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = dev.alloc(S0, 8).unwrap();
    dev.write_values(S0, &x, 0, &[5u32, 6]).unwrap();
    let err = dev.write_values(S0, &x, 4, &[7u32, 8]).unwrap_err();
    assert!(matches!(err, ServerError::InvalidBinding { .. }), "{err:?}");
    assert_eq!(dev.read_values::<u32>(S0, &x).unwrap(), [5, 6]);
}

/// A write inside a window copies the caller's bytes into staging the graph keeps: the
/// caller may reuse its own buffer at once, and every replay copies what was written.
#[test]
fn a_recorded_write_from_a_borrowed_buffer_keeps_the_bytes_it_was_given() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = dev.alloc(S0, 16).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    let mut host = [40u32; 4];
    let g = dev
        .capture(S0, |d| {
            d.write_values(S0, &x, 0, &host)?;
            add_one(d, &k, S0, &x, &y)
        })
        .unwrap();
    host = [0; 4]; // the caller reuses its buffer
    dev.write_values(S0, &x, 0, &host).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(dev.read_values::<u32>(S0, &y).unwrap(), [41; 4]);
    assert_eq!(dev.graph(&g).unwrap().copies, 1);
    dev.drop_graph(g).unwrap();
}

/// A read into the caller's buffer on another stream than the buffer's waits for the
/// writer first (rule 18), as the allocating read does.
#[test]
fn a_read_into_on_another_stream_waits_for_the_writer() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = dev.alloc(S0, 16).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    dev.write_values(S0, &x, 0, &[1u32, 2, 3, 4]).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    let mut host = [0u32; 4];
    dev.read_values_into(S1, &y, 0, &mut host).unwrap();
    assert_eq!(host, [2, 3, 4, 5]);
}
