//! Helpers shared by the end-to-end tests of several crates, kept here
//! once instead of copied into each test file. A dev-dependency only.
//!
//! The rooms:
//! - `hostile`: hostile clients from raw sockets (connect, send some
//!   bytes, then idle, drip or flood) and what the server did about it;
//! - `strings`: strings with every kind of character a JSON writer
//!   treats apart;
//! - `suite`: the hostile-client suite every server that takes chat
//!   requests is put through;
//! - `tls`: TLS in front of a plain server on loopback, with a private CA
//!   made on the spot.

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod hostile;
pub mod strings;
pub mod suite;
pub mod tls;
