//! Helpers shared by the end-to-end tests of several crates, kept here
//! once instead of copied into each test file. A dev-dependency only.

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod hostile;
pub mod suite;
pub mod tls;
