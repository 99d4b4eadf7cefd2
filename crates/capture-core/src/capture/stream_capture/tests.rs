//! Unit tests of the capture lifecycle.
