//! Bad input: every public runtime function that takes an id, binding, size or stream
//! refuses a bad value with a typed error naming it, and the stream stays usable.

use rstest::rstest;

use capture_core::{
    Arg, Buffer, CachePolicy, Chain, DeviceConfig, FlushingPolicy, GraphHandle,
    MAX_ALLOCATION_BYTES, MemoryConfig, ServerError, StreamId,
};

use crate::bytes_of;
use crate::{Dev, S0, S1, S2, device, filled, kernels, read};

/// The error and its sources, as a user's report would show it.
fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

/// The variant's name, for the table.
fn kind(e: &ServerError) -> &'static str {
    match e {
        ServerError::GraphState { .. } => "GraphState",
        ServerError::InvalidArgument { .. } => "InvalidArgument",
        ServerError::InvalidBinding { .. } => "InvalidBinding",
        ServerError::UnknownGraph(_) => "UnknownGraph",
        ServerError::UnknownMemory(_) => "UnknownMemory",
        ServerError::NeighbourRefused { .. } => "NeighbourRefused",
        _ => "another variant",
    }
}

/// What a bad call returned, and what its error must name.
type Outcome = (Result<(), ServerError>, String);

/// A buffer of a second device, numbered apart from the first device's buffers.
fn foreign_buffer() -> Buffer {
    let (other, _) = device();
    for _ in 0..3 {
        drop(other.alloc(S0, 4).unwrap());
    }
    filled(&other, S0, &[7, 8])
}

/// A graph of a second device, which is gone: its handle outlives it, refused by any
/// other device, and its drop does nothing.
fn foreign_graph() -> GraphHandle {
    let (other, _) = device();
    graph(&other, S0)
}

/// A graph of one launch captured on `stream`.
fn graph(dev: &Dev, stream: StreamId) -> GraphHandle {
    let k = kernels(dev);
    let x = filled(dev, stream, &[1, 2, 3]);
    let y = dev.alloc(stream, 12).unwrap();
    dev.capture(stream, |d| {
        d.launch(
            stream,
            &k.add_one,
            [1, 1, 1],
            &[Arg::read(&x), Arg::write(&y)],
            &[],
        )
    })
    .unwrap()
}

fn alloc_zero(dev: &Dev) -> Outcome {
    (dev.alloc(S0, 0).map(drop), "allocation size 0".into())
}

fn alloc_above_the_maximum(dev: &Dev) -> Outcome {
    let size = MAX_ALLOCATION_BYTES + 1;
    (
        dev.alloc(S0, size).map(drop),
        format!("allocation size {size}"),
    )
}

fn write_past_the_end(dev: &Dev) -> Outcome {
    let b = dev.alloc(S0, 8).unwrap();
    (
        dev.write(S0, &b, 8, bytes_of(&[1])),
        format!("invalid binding {}[8+4] (8 B)", b.id()),
    )
}

fn write_at_an_overflowing_offset(dev: &Dev) -> Outcome {
    let b = dev.alloc(S0, 8).unwrap();
    (
        dev.write(S0, &b, u64::MAX, bytes_of(&[1])),
        format!("invalid binding {}[{}+4] (8 B)", b.id(), u64::MAX),
    )
}

fn write_no_bytes(dev: &Dev) -> Outcome {
    let b = dev.alloc(S0, 8).unwrap();
    (
        dev.write(S0, &b, 0, Vec::<u8>::new()),
        format!("invalid binding {}[0+0] (8 B)", b.id()),
    )
}

fn write_a_buffer_of_another_device(dev: &Dev) -> Outcome {
    let b = foreign_buffer();
    (
        dev.write(S0, &b, 0, bytes_of(&[1, 2])),
        format!(
            "invalid binding {}: the buffer belongs to another device",
            b.id()
        ),
    )
}

fn read_a_buffer_of_another_device(dev: &Dev) -> Outcome {
    let b = foreign_buffer();
    (
        dev.read(S0, &b).map(drop),
        format!(
            "invalid binding {}: the buffer belongs to another device",
            b.id()
        ),
    )
}

fn read_range_past_the_end(dev: &Dev) -> Outcome {
    let b = filled(dev, S0, &[1, 2]);
    (
        dev.read_range(S0, &b, 4, 8).map(drop),
        format!("invalid binding {}[4+8] (8 B)", b.id()),
    )
}

fn read_range_of_no_bytes(dev: &Dev) -> Outcome {
    let b = filled(dev, S0, &[1, 2]);
    (
        dev.read_range(S0, &b, 0, 0).map(drop),
        format!("invalid binding {}[0+0] (8 B)", b.id()),
    )
}

fn launch_an_arg_range_past_the_end(dev: &Dev) -> Outcome {
    let k = kernels(dev);
    let x = filled(dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    let args = [Arg::read(&x), Arg::write(&y).range(4, 8)];
    (
        dev.launch(S0, &k.add_one, [1, 1, 1], &args, &[]),
        format!("invalid binding {}[4+8] (8 B)", y.id()),
    )
}

fn launch_a_kernel_of_another_device(dev: &Dev) -> Outcome {
    let (other, _) = device();
    let _first = kernels(&other);
    let foreign = kernels(&other).add_one;
    let _own = kernels(dev);
    let x = filled(dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    let args = [Arg::read(&x), Arg::write(&y)];
    (
        dev.launch(S0, &foreign, [1, 1, 1], &args, &[]),
        format!(
            "invalid kernel kernel#{}: the kernel was registered with another device",
            foreign.id().index()
        ),
    )
}

fn launch_a_buffer_of_another_device(dev: &Dev) -> Outcome {
    let k = kernels(dev);
    let x = foreign_buffer();
    let y = dev.alloc(S0, 8).unwrap();
    let args = [Arg::read(&x), Arg::write(&y)];
    (
        dev.launch(S0, &k.add_one, [1, 1, 1], &args, &[]),
        format!(
            "invalid binding {}: the buffer belongs to another device",
            x.id()
        ),
    )
}

fn replay_zero_times(dev: &Dev) -> Outcome {
    let g = graph(dev, S0);
    (dev.replay(S0, &g, 0), "invalid replay count 0".into())
}

fn replay_a_graph_of_another_device(dev: &Dev) -> Outcome {
    let g = foreign_graph();
    (
        dev.replay(S0, &g, 1),
        format!("invalid graph {g}: the graph belongs to another device"),
    )
}

fn replay_on_another_pooled_stream(dev: &Dev) -> Outcome {
    let g = graph(dev, S0);
    (
        dev.replay(S1, &g, 1),
        format!(
            "invalid replay stream stream#1 of {g}: a graph replays only on the stream that captured it"
        ),
    )
}

fn replay_on_a_stream_sharing_the_pooled_stream(dev: &Dev) -> Outcome {
    let g = graph(dev, S0);
    (
        dev.replay(S2, &g, 1),
        format!(
            "invalid replay stream stream#2 of {g}: the graph was captured on stream#0 and replays only there"
        ),
    )
}

fn drop_a_graph_of_another_device(dev: &Dev) -> Outcome {
    let g = foreign_graph();
    let named = format!("invalid graph {g}: the graph belongs to another device");
    (dev.drop_graph(g), named)
}

fn begin_with_nothing_prepared(dev: &Dev) -> Outcome {
    (
        dev.begin(S0),
        "begin stream#0: no capture is prepared".into(),
    )
}

fn end_with_nothing_prepared(dev: &Dev) -> Outcome {
    (
        dev.end(S0).map(drop),
        "end stream#0: nothing is recording on this stream".into(),
    )
}

fn no_streams(_: &Dev) -> Outcome {
    (
        DeviceConfig::new().streams(0).map(drop),
        "invalid stream count 0".into(),
    )
}

fn too_many_streams(_: &Dev) -> Outcome {
    (
        DeviceConfig::new().streams(65).map(drop),
        "invalid stream count 65".into(),
    )
}

fn a_memory_limit_of_zero(_: &Dev) -> Outcome {
    (
        MemoryConfig::limited(0).map(drop),
        "invalid memory limit 0".into(),
    )
}

fn a_flush_of_no_items(_: &Dev) -> Outcome {
    (
        FlushingPolicy::new(0, 1).map(drop),
        "invalid drop queue max_items 0".into(),
    )
}

fn a_flush_of_no_bytes(_: &Dev) -> Outcome {
    (
        FlushingPolicy::new(1, 0).map(drop),
        "invalid drop queue max_bytes 0".into(),
    )
}

fn a_cache_of_no_entries(_: &Dev) -> Outcome {
    (
        CachePolicy::new(0, 64).map(drop),
        "invalid info cache max_entries 0".into(),
    )
}

#[rstest]
#[case::alloc_zero(alloc_zero, "InvalidArgument", S0)]
#[case::alloc_above_the_maximum(alloc_above_the_maximum, "InvalidArgument", S0)]
#[case::write_past_the_end(write_past_the_end, "InvalidBinding", S0)]
#[case::write_at_an_overflowing_offset(write_at_an_overflowing_offset, "InvalidBinding", S0)]
#[case::write_no_bytes(write_no_bytes, "InvalidBinding", S0)]
#[case::write_a_buffer_of_another_device(write_a_buffer_of_another_device, "InvalidBinding", S0)]
#[case::read_a_buffer_of_another_device(read_a_buffer_of_another_device, "InvalidBinding", S0)]
#[case::read_range_past_the_end(read_range_past_the_end, "InvalidBinding", S0)]
#[case::read_range_of_no_bytes(read_range_of_no_bytes, "InvalidBinding", S0)]
#[case::launch_an_arg_range_past_the_end(launch_an_arg_range_past_the_end, "InvalidBinding", S0)]
#[case::launch_a_kernel_of_another_device(launch_a_kernel_of_another_device, "InvalidArgument", S0)]
#[case::launch_a_buffer_of_another_device(launch_a_buffer_of_another_device, "InvalidBinding", S0)]
#[case::replay_zero_times(replay_zero_times, "InvalidArgument", S0)]
#[case::replay_a_graph_of_another_device(replay_a_graph_of_another_device, "InvalidArgument", S0)]
#[case::replay_on_another_pooled_stream(replay_on_another_pooled_stream, "InvalidArgument", S1)]
#[case::replay_on_a_stream_sharing_the_pooled_stream(
    replay_on_a_stream_sharing_the_pooled_stream,
    "InvalidArgument",
    S2
)]
#[case::drop_a_graph_of_another_device(drop_a_graph_of_another_device, "InvalidArgument", S0)]
#[case::begin_with_nothing_prepared(begin_with_nothing_prepared, "GraphState", S0)]
#[case::end_with_nothing_prepared(end_with_nothing_prepared, "GraphState", S0)]
#[case::no_streams(no_streams, "InvalidArgument", S0)]
#[case::too_many_streams(too_many_streams, "InvalidArgument", S0)]
#[case::a_memory_limit_of_zero(a_memory_limit_of_zero, "InvalidArgument", S0)]
#[case::a_flush_of_no_items(a_flush_of_no_items, "InvalidArgument", S0)]
#[case::a_flush_of_no_bytes(a_flush_of_no_bytes, "InvalidArgument", S0)]
#[case::a_cache_of_no_entries(a_cache_of_no_entries, "InvalidArgument", S0)]
fn bad_input_is_a_typed_error_naming_the_value(
    #[case] call: fn(&Dev) -> Outcome,
    #[case] variant: &str,
    #[case] stream: StreamId,
) {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let (result, names) = call(&dev);
    let err = result.expect_err("bad input must be refused");
    assert_eq!(kind(&err), variant, "{err:?}");
    assert!(text(&err).contains(&names), "{} lacks {names}", text(&err));
    // The stream is usable afterwards: no window is left open on it, and memory
    // round-trips.
    assert!(dev.captures().recording().is_empty());
    dev.prepare(stream).expect("no window left open");
    dev.abort(stream).unwrap();
    let b = dev.alloc(stream, 12).unwrap();
    dev.write(stream, &b, 0, bytes_of(&[1, 2, 3])).unwrap();
    assert_eq!(read(&dev, stream, &b).unwrap(), vec![1, 2, 3]);
}
