//! The reference gateway (see issue 4).
