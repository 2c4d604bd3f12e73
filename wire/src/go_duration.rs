//! Go's `time.Duration` text (`6m0s`, `1m30.5s`, `12ms`), the form of
//! OpenAI's `x-ratelimit-reset-*` headers: written by the fake provider,
//! readable by anything that reads those headers.

use std::time::Duration;

/// Formats a duration as Go's `time.Duration.String()` does, at millisecond
/// precision (microseconds below one millisecond): `1s`, `6m0s`, `12ms`,
/// `1m30.5s`, `0s`. OpenAI's `x-ratelimit-reset-*` headers use this form.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(wire::go_duration(Duration::from_secs(360)), "6m0s");
/// assert_eq!(wire::go_duration(Duration::from_millis(90_500)), "1m30.5s");
/// ```
pub fn go_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us == 0 {
        return "0s".to_string();
    }
    if us < 1000 {
        return format!("{us}µs");
    }
    // Round to the millisecond, as the headers do.
    let ms = (us + 500) / 1000;
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let h = ms / 3_600_000;
    let m = (ms / 60_000) % 60;
    let s = (ms / 1000) % 60;
    let frac = ms % 1000;
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:03}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

/// Parses a Go `time.Duration` string (`6m0s`, `1m30.5s`, `12ms`, `250µs`,
/// `1.5h`, `0`), as found in OpenAI's `x-ratelimit-reset-*` headers: the
/// inverse of [`go_duration`]. Units are `ns`, `us`, `µs`, `μs`, `ms`, `s`,
/// `m` and `h`; fractions are truncated to the nanosecond. Returns `None` for
/// anything else, for a negative duration, and for one beyond Go's range
/// (2^63 − 1 ns, about 292 years).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(wire::parse_go_duration("1m30.5s"), Some(Duration::from_millis(90_500)));
/// assert_eq!(wire::parse_go_duration("-1s"), None);
/// ```
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    const LIMIT: u128 = i64::MAX as u128;
    let mut total: u128 = 0;
    let mut s = rest;
    while !s.is_empty() {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = s.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(n)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        let per: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        // Digits past what can matter are ignored, as Go does; the integer
        // part must fit on its own.
        let mut whole: u128 = 0;
        for d in int_part.bytes() {
            whole = whole.checked_mul(10)?.checked_add(u128::from(d - b'0'))?;
            if whole > LIMIT {
                return None;
            }
        }
        let mut value = whole.checked_mul(per)?;
        let (mut num, mut scale): (u128, u128) = (0, 1);
        for d in frac_part.bytes() {
            if scale > LIMIT {
                break;
            }
            num = num * 10 + u128::from(d - b'0');
            scale *= 10;
        }
        value = value.checked_add(num * per / scale)?;
        total = total.checked_add(value)?;
        if total > LIMIT {
            return None;
        }
        s = after;
    }
    Some(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_back() {
        for ms in [
            0u64, 1, 12, 999, 1000, 1500, 59_999, 60_000, 90_500, 3_600_000, 3_723_004,
        ] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_go_duration(&go_duration(d)), Some(d), "{ms} ms");
        }
        assert_eq!(parse_go_duration("250µs"), Some(Duration::from_micros(250)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(
            parse_go_duration("1h2m3s4ms5us6ns"),
            Some(Duration::new(3723, 4_005_006))
        );
        for bad in [
            "",
            "-1s",
            "1",
            "s",
            ".s",
            "1x",
            "1.2.3s",
            "3000000h",
            "9223372036854775808ns",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_go_duration("9223372036854775807ns"),
            Some(Duration::from_nanos(i64::MAX as u64))
        );
    }

    #[test]
    fn go_durations_match_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(12), "12ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(360), "6m0s"),
            (Duration::from_millis(90_500), "1m30.5s"),
            (Duration::from_millis(17_280), "17.28s"),
            (Duration::from_secs(3600 + 61), "1h1m1s"),
            (Duration::from_micros(250), "250µs"),
            (Duration::from_micros(1_999_600), "2s"),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }
}
