//! The canary: misuse the validation layer must report, so a silent layer cannot pass
//! for a clean run.

use capture_vulkan::MemoryMode;

use crate::support;

#[test]
fn executing_a_non_simultaneous_secondary_twice_is_reported() {
    let _suite = capture_mock::scenarios::suite_lock();
    let backend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: canary: {why}");
            return;
        }
    };
    if !backend.validation_enabled() {
        println!("SKIP: canary: the validation layer is not installed");
        return;
    }
    let messages = backend.canary_execute_twice().expect("the canary records");
    assert!(
        messages
            .iter()
            .any(|m| m.contains("VUID-vkCmdExecuteCommands-pCommandBuffers-00092")),
        "the layer did not report the canary:\n{}",
        messages.join("\n")
    );
}
