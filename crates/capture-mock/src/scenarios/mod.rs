//! The scenario suite.
