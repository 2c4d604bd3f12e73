//! The open-loop load generator (see issue 3).
