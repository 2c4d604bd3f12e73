//! Helpers shared by the end-to-end tests of several crates, kept here
//! once instead of copied into each test file. A dev-dependency only.

pub mod hostile;
pub mod suite;
