//! fake provider
