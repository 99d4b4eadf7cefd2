//! The mock: the whole scenario suite on it, and its own behaviour (deferred work,
//! poisoning, process-wide capture legality, named faults, the fault wrapper).

mod mock;

mod suite {
    capture_suite::suite!(capture_mock::MockBackend::new());
}

#[test]
fn the_core_refuses_a_launch_that_does_not_fit_before_the_mock_sees_it() {
    let refusals =
        capture_suite::launch_check::refused_launches(capture_mock::MockBackend::new()).unwrap();
    let launches: Vec<_> = refusals.iter().map(|r| r.launch).collect();
    assert_eq!(
        launches,
        [
            "one argument too many",
            "access beyond the declaration",
            "block beyond the device",
            "shared memory beyond the device",
            "empty grid",
            "programmatic launch",
            "misaligned range"
        ]
    );
}
