//! The rehearsal engine.
