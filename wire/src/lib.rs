//! What rehearse's parts say to each other (no tokio, no hyper).
//!
//! The rooms:
//! - `scale`: [`Scale`], the one rule that shrinks an event to a rehearsal.

mod scale;

pub use scale::Scale;
