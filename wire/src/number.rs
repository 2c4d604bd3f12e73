//! Numbers as a person reads them (`9,360`, `1,234.6`), and the one
//! statistical constant every lognormal in a scenario is built from.
//!
//! The checklist's sentences, the terminal report, the plan and the HTML
//! report all print counts and quantities; they print them with these
//! functions so that the same number reads the same everywhere.

/// The z-score of the 99th percentile of a standard normal distribution.
/// A lognormal given by its median and p99 (latencies, patience, prompt
/// sizes) has `sigma = ln(p99 / median) / Z_P99`.
///
/// ```
/// let (median, p99) = (1.0_f64, 10.0_f64);
/// let sigma = (p99 / median).ln() / wire::number::Z_P99;
/// assert!((sigma - 0.9898).abs() < 1e-4);
/// ```
pub const Z_P99: f64 = 2.326_347_874_040_841;

/// An integer with thousands separators: `9360` → `"9,360"`.
///
/// ```
/// assert_eq!(wire::number::count(1_234_567), "1,234,567");
/// assert_eq!(wire::number::count(174), "174");
/// ```
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A quantity rounded to the nearest integer, with its sign and thousands
/// separators: `1234567.8` → `"1,234,568"`, `-1000.0` → `"-1,000"`. An
/// infinite one reads `"∞"` or `"-∞"`, NaN `"–"`.
///
/// ```
/// assert_eq!(wire::number::thousands(9360.0), "9,360");
/// assert_eq!(wire::number::thousands(174.2), "174");
/// assert_eq!(wire::number::thousands(-1000.0), "-1,000");
/// assert_eq!(wire::number::thousands(f64::INFINITY), "∞");
/// ```
pub fn thousands(v: f64) -> String {
    if v.is_nan() {
        return NO_VALUE.into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞" } else { "-∞" }.into();
    }
    // Past u64's range the cast saturates: no finite quantity a rehearsal
    // prints comes near it.
    let n = v.abs().round() as u64;
    if v < 0.0 && n > 0 {
        format!("-{}", count(n))
    } else {
        count(n)
    }
}

/// A number with at most `decimals` decimals, trailing zeros dropped, and
/// thousands separators in its integer part: `25.0` → `"25"`, `1234.56` →
/// `"1,234.6"` (with 1 decimal). A value that rounds to zero has no sign
/// (`-0.04` → `"0"`). A non-finite one reads `"–"`: a cell with no value.
///
/// ```
/// use wire::number::num;
/// assert_eq!(num(25.0, 1), "25");
/// assert_eq!(num(1234.56, 1), "1,234.6");
/// assert_eq!(num(-2.5, 1), "-2.5");
/// assert_eq!(num(f64::NAN, 1), "–");
/// ```
pub fn num(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return NO_VALUE.into();
    }
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f.trim_end_matches('0')),
        None => (s.as_str(), ""),
    };
    // At most u64::MAX after the formatting above for any quantity a
    // rehearsal prints; a larger one shows its integer part as 0 rather
    // than panic.
    let int: u64 = int.parse().unwrap_or(0);
    let sign = if x < 0.0 && (int > 0 || !frac.is_empty()) {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{}", count(int))
    } else {
        format!("{sign}{}.{frac}", count(int))
    }
}

/// What a number that is not one (NaN, or infinite where a finite value
/// was expected) is printed as.
const NO_VALUE: &str = "–";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_a_person_writes_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(174), "174");
        assert_eq!(count(9_360), "9,360");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(thousands(9360.0), "9,360");
        assert_eq!(thousands(174.2), "174");
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(thousands(-1000.0), "-1,000");
        assert_eq!(thousands(-0.4), "0");
        assert_eq!(thousands(f64::NEG_INFINITY), "-∞");
        assert_eq!(thousands(f64::NAN), "–");
        assert_eq!(num(25.0, 1), "25");
        assert_eq!(num(1234.56, 1), "1,234.6");
        assert_eq!(num(-0.04, 1), "0");
        assert_eq!(num(-2.5, 1), "-2.5");
        assert_eq!(num(0.125, 3), "0.125");
        assert_eq!(num(1e6, 0), "1,000,000");
        assert_eq!(num(f64::INFINITY, 1), "–");
    }
}
