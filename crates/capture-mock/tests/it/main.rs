//! capture-mock integration tests: the scenario suite on the mock.
