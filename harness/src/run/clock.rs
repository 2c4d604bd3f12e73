//! Wall-clock microseconds, as the records' times are written.

/// Microseconds since the Unix epoch now.
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
