//! A judged run as documents.
