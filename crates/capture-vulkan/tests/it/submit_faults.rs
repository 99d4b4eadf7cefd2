//! A failed `vkEndCommandBuffer` or `vkQueueSubmit` (the backend's own fault hook, at
//! that call): the error comes back typed, the batch is dropped (its command buffer freed,
//! its descriptor pools reset), and the stream stays usable: a later launch and read give
//! the right bytes, and the validation layer says nothing.

use ash::vk;
use capture_core::{Arg, ServerError, StreamId};
use capture_suite::scenarios::{Harness, N, assert_contains, map, ramp, suite_lock};
use capture_vulkan::{MemoryMode, VulkanBackend, VulkanCall, VulkanError};

use crate::support;

const S: StreamId = StreamId::new(0);

/// The Vulkan result code a driver error carries.
fn code(error: &ServerError) -> Option<vk::Result> {
    match error {
        ServerError::Driver { source, .. } => source
            .downcast_ref::<VulkanError>()
            .map(|VulkanError(code)| *code),
        _ => None,
    }
}

/// Queues a write and a launch, makes `call` fail at the sync that submits them, then
/// checks the error, a later launch's bytes and the validation log.
fn fault_at_sync(memory: MemoryMode, call: VulkanCall, op: &str) {
    let backend: VulkanBackend = match support::backend(memory) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: submit faults: {why}");
            return;
        }
    };
    let keep = backend.clone();
    let h = Harness::new(backend).expect("device");
    let x = h.buffer(S, &ramp(1.0)).expect("x");
    let y = h.dev.alloc(S, N * 4).expect("y");
    h.dev.sync(S).expect("settled");
    h.add(S, &x, &y, 1.0).expect("queued");
    keep.fail_call(call, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    let err = h.dev.sync(S).unwrap_err();
    assert_contains(&err, op);
    assert_eq!(
        code(&err),
        Some(vk::Result::ERROR_OUT_OF_HOST_MEMORY),
        "{err:?}"
    );
    // The launch never ran: its output is claimed, naming the failure.
    h.expect_unreadable(S, &y, op);
    // The stream goes on.
    h.write(S, &x, &ramp(10.0)).expect("write");
    h.add(S, &x, &y, 2.0).expect("launch");
    h.expect(S, &y, &map(&ramp(10.0), |v| v + 2.0));
    drop(h);
    support::assert_no_validation_messages(&keep);
}

#[test]
fn a_failed_queue_submit_drops_the_batch_and_the_stream_goes_on() {
    let _suite = suite_lock();
    for memory in [MemoryMode::HostVisible, MemoryMode::ForcedStaging] {
        fault_at_sync(memory, VulkanCall::QueueSubmit, "vkQueueSubmit");
    }
}

#[test]
fn a_failed_end_command_buffer_drops_the_batch_and_the_stream_goes_on() {
    let _suite = suite_lock();
    for memory in [MemoryMode::HostVisible, MemoryMode::ForcedStaging] {
        fault_at_sync(memory, VulkanCall::EndCommandBuffer, "vkEndCommandBuffer");
    }
}

/// A replay's own submission fails: the replay call is accepted, the next sync reports
/// the failure (the core taints what the stream wrote since its last good fence), and the
/// graph replays again with the right bytes.
#[test]
fn a_failed_replay_submission_is_reported_at_the_next_sync_and_the_graph_replays_again() {
    let _suite = suite_lock();
    let backend: VulkanBackend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: submit faults: {why}");
            return;
        }
    };
    let keep = backend.clone();
    let h = Harness::new(backend).expect("device");
    let x = h.buffer(S, &ramp(1.0)).expect("x");
    let y = h.dev.alloc(S, N * 4).expect("y");
    let g = h
        .dev
        .capture(S, |d| {
            d.launch(
                S,
                h.kernel(capture_core::Builtin::AddScalar),
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&y)],
                &capture_core::Builtin::AddScalar.info(N, 5.0),
            )
        })
        .expect("graph");
    h.dev.sync(S).expect("settled");
    keep.fail_call(
        VulkanCall::QueueSubmit,
        0,
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
    );
    h.dev.replay(S, &g, 3).expect("the replay is recorded");
    let err = h.dev.sync(S).unwrap_err();
    assert_contains(&err, "vkQueueSubmit");
    assert_eq!(code(&err), Some(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY));
    h.expect_unreadable(S, &y, "vkQueueSubmit");
    h.write(S, &x, &ramp(2.0)).expect("write");
    h.dev.replay(S, &g, 1).expect("replay");
    h.expect(S, &y, &map(&ramp(2.0), |v| v + 5.0));
    h.dev.drop_graph(g).expect("drop");
    drop(h);
    support::assert_no_validation_messages(&keep);
}

/// Issue 23, item 8: a submission that fails drops its batch, and with it the uploads of
/// the info words its launches cached. A later launch with the same words uploads them
/// again instead of reading a buffer the dropped batch never wrote.
#[test]
fn a_failed_submit_forgets_the_info_uploads_its_batch_held() {
    let _suite = suite_lock();
    for memory in [MemoryMode::HostVisible, MemoryMode::ForcedStaging] {
        let backend: VulkanBackend = match support::backend(memory) {
            Ok(b) => b,
            Err(why) => {
                println!("SKIP: submit faults: {why}");
                return;
            }
        };
        let keep = backend.clone();
        let h = Harness::new(backend).expect("device");
        let x = h.buffer(S, &ramp(1.0)).expect("x");
        let y = h.dev.alloc(S, N * 4).expect("y");
        h.dev.sync(S).expect("settled");
        // Fresh words [N, 1.0]: cached, their upload queued in this batch.
        h.add(S, &x, &y, 1.0).expect("queued");
        keep.fail_call(
            VulkanCall::QueueSubmit,
            0,
            vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        );
        assert!(h.dev.sync(S).is_err());
        h.write(S, &x, &ramp(5.0)).expect("write");
        // The same words again: a hit on an entry whose upload was lost.
        h.add(S, &x, &y, 1.0).expect("launch");
        h.expect(S, &y, &map(&ramp(5.0), |v| v + 1.0));
        drop(h);
        support::assert_no_validation_messages(&keep);
    }
}
