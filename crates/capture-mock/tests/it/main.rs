//! capture-mock integration tests: the whole scenario suite on the mock, and the mock's
//! own behaviour (deferred work, poisoning, process-wide capture legality, named faults,
//! the fault wrapper).

mod mock;

mod suite {
    capture_mock::suite!(capture_mock::MockBackend::new());
}
