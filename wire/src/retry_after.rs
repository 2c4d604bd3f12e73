//! Retry-After, both ways: the one rounding rule every part that sheds
//! writes it with, and the one reader the load generator (and anything
//! else) reads it back with, which also says which header the value came
//! from ([`RetryAfterHeader`]: how finely it can say a wait).

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// Which header gave an answer's Retry-After, and so the finest wait it
/// can say: what `retry_after` allows a value to be off by at the least.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfterHeader {
    /// `retry-after-ms`: milliseconds.
    RetryAfterMs,
    /// `retry-after` as a number of seconds.
    RetryAfter,
    /// `retry-after` as an HTTP date: whole seconds.
    HttpDate,
}

impl RetryAfterHeader {
    /// The name used in records (`"retry_after_ms"`).
    pub fn as_str(self) -> &'static str {
        match self {
            RetryAfterHeader::RetryAfterMs => "retry_after_ms",
            RetryAfterHeader::RetryAfter => "retry_after",
            RetryAfterHeader::HttpDate => "http_date",
        }
    }

    /// The finest wait the header says, in milliseconds: 1 for
    /// `retry-after-ms`, a second for `retry-after` (its seconds are whole
    /// as the standard writes them) and for a date.
    ///
    /// ```
    /// assert_eq!(wire::RetryAfterHeader::RetryAfterMs.granularity_ms(), 1);
    /// assert_eq!(wire::RetryAfterHeader::HttpDate.granularity_ms(), 1000);
    /// ```
    pub fn granularity_ms(self) -> u64 {
        match self {
            RetryAfterHeader::RetryAfterMs => 1,
            RetryAfterHeader::RetryAfter | RetryAfterHeader::HttpDate => 1000,
        }
    }
}

/// The granularity of a Retry-After whose header was not recorded (a run
/// directory written before records said it), in milliseconds: a second,
/// the coarsest header's.
pub const UNRECORDED_GRANULARITY_MS: u64 = 1000;

/// The two header values for a wait: `retry-after` in whole seconds rounded
/// up and at least 1 (a client told "0" retries at once, into the same
/// overload), and `retry-after-ms` rounded up to the millisecond (never 0
/// for a nonzero wait).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(wire::retry_after_values(Duration::from_millis(2_345)), (3, 2_345));
/// assert_eq!(wire::retry_after_values(Duration::from_millis(10)), (1, 10));
/// assert_eq!(wire::retry_after_values(Duration::ZERO), (1, 0));
/// ```
pub fn retry_after_values(wait: Duration) -> (u64, u64) {
    let ms = u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    let secs = ms.div_ceil(1000).max(1);
    (secs, ms)
}

/// Returns the wait an answer asks for, from the value of `retry-after-ms`
/// (milliseconds, fractions allowed) or else of `retry-after` (whole or
/// fractional seconds, or an HTTP date, taken relative to `now`). Returns
/// `None` when neither is given or readable. A date in the past means no
/// wait. A negative value, NaN, or one too large for a `Duration` (`1e300`)
/// is unreadable (it used to panic the attempt's task), and an unreadable
/// `retry-after-ms` falls back to `retry-after`.
///
/// Header values are taken as text: a caller holding an
/// `http::HeaderValue` passes `value.to_str().ok()`.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// let now = SystemTime::now();
/// assert_eq!(wire::parse_retry_after(Some("1500"), Some("9"), now), Some(Duration::from_millis(1500)));
/// assert_eq!(wire::parse_retry_after(None, Some("0.5"), now), Some(Duration::from_millis(500)));
/// assert_eq!(wire::parse_retry_after(Some("x"), Some("soon"), now), None);
/// ```
pub fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: SystemTime,
) -> Option<Duration> {
    read_retry_after(retry_after_ms, retry_after, now).map(|(wait, _)| wait)
}

/// [`parse_retry_after`], with the header the wait was read from.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use wire::RetryAfterHeader;
/// let now = SystemTime::now();
/// assert_eq!(
///     wire::read_retry_after(Some("x"), Some("2"), now),
///     Some((Duration::from_secs(2), RetryAfterHeader::RetryAfter))
/// );
/// ```
pub fn read_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: SystemTime,
) -> Option<(Duration, RetryAfterHeader)> {
    if let Some(ms) = retry_after_ms
        .and_then(|s| s.trim().parse::<f64>().ok())
        .and_then(|v| Duration::try_from_secs_f64(v / 1000.0).ok())
    {
        return Some((ms, RetryAfterHeader::RetryAfterMs));
    }
    let value = retry_after?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .ok()
            .map(|d| (d, RetryAfterHeader::RetryAfter));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some((
        date.duration_since(now).unwrap_or(Duration::ZERO),
        RetryAfterHeader::HttpDate,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_up_and_say_at_least_a_second() {
        assert_eq!(retry_after_values(Duration::from_millis(200)), (1, 200));
        assert_eq!(retry_after_values(Duration::from_millis(1000)), (1, 1000));
        assert_eq!(retry_after_values(Duration::from_millis(1001)), (2, 1001));
        assert_eq!(retry_after_values(Duration::from_micros(1500)), (1, 2));
        assert_eq!(retry_after_values(Duration::from_micros(1)), (1, 1));
        assert_eq!(retry_after_values(Duration::from_nanos(1)), (1, 1));
        assert_eq!(
            retry_after_values(Duration::from_micros(1_000_001)),
            (2, 1001)
        );
        assert_eq!(retry_after_values(Duration::ZERO), (1, 0));
        assert_eq!(retry_after_values(Duration::MAX).1, u64::MAX);
    }

    #[test]
    fn retry_after_ms_seconds_date_and_garbage() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let p = |ms: Option<&str>, s: Option<&str>| parse_retry_after(ms, s, now);
        assert_eq!(p(Some("1500"), None), Some(Duration::from_millis(1500)));
        assert_eq!(p(Some("12.5"), None), Some(Duration::from_micros(12_500)));
        // retry-after-ms wins over retry-after.
        assert_eq!(p(Some("250"), Some("9")), Some(Duration::from_millis(250)));
        assert_eq!(p(None, Some("7")), Some(Duration::from_secs(7)));
        assert_eq!(p(None, Some(" 7 ")), Some(Duration::from_secs(7)));
        assert_eq!(p(None, Some("0.5")), Some(Duration::from_millis(500)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(p(None, Some(&later)), Some(Duration::from_secs(30)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(p(None, Some(&earlier)), Some(Duration::ZERO));
        assert_eq!(p(None, Some("soon")), None);
        assert_eq!(p(None, Some("-3")), None);
        // Too large for a Duration: unreadable, not a panic (found by fuzzing).
        assert_eq!(p(None, Some("1e300")), None);
        assert_eq!(p(Some("1e30"), Some("NaN")), None);
        assert_eq!(
            p(None, Some("1000000000000")),
            Some(Duration::from_secs(1_000_000_000_000))
        );
        // Garbage in retry-after-ms falls back to retry-after.
        assert_eq!(p(Some("x"), Some("2")), Some(Duration::from_secs(2)));
        assert_eq!(p(None, None), None);
    }

    #[test]
    fn the_header_read_is_said() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let h = |ms: Option<&str>, s: Option<&str>| read_retry_after(ms, s, now).map(|(_, h)| h);
        assert_eq!(
            h(Some("250"), Some("9")),
            Some(RetryAfterHeader::RetryAfterMs)
        );
        assert_eq!(h(Some("x"), Some("9")), Some(RetryAfterHeader::RetryAfter));
        assert_eq!(h(None, Some("0.5")), Some(RetryAfterHeader::RetryAfter));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(h(None, Some(&later)), Some(RetryAfterHeader::HttpDate));
        assert_eq!(h(None, Some("soon")), None);
        for header in [
            RetryAfterHeader::RetryAfterMs,
            RetryAfterHeader::RetryAfter,
            RetryAfterHeader::HttpDate,
        ] {
            let json = serde_json::to_string(&header).unwrap();
            assert_eq!(json, format!("\"{}\"", header.as_str()));
        }
    }

    #[test]
    fn what_is_written_reads_back_no_shorter() {
        for ms in [0u64, 1, 999, 1000, 1001, 2_345, 60_000] {
            let wait = Duration::from_millis(ms);
            let (secs, ms_value) = retry_after_values(wait);
            let now = SystemTime::now();
            let read = parse_retry_after(Some(&ms_value.to_string()), None, now).unwrap();
            assert_eq!(read, wait);
            let read = parse_retry_after(None, Some(&secs.to_string()), now).unwrap();
            assert!(read >= wait, "{ms} ms read back as {read:?}");
        }
    }
}
