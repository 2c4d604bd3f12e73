//! A rate of arrivals as a person writes it, in a scenario (`rate =
//! "2000/min"`) and on `rehearse init`'s command line (`--peak-rate
//! 2000/min`): one reading for both, so that what init accepts a scenario
//! accepts too.

use serde::{Deserialize, Serialize};

/// The unit of a phase's `rate` (its `per`, or the unit a rate names).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RateUnit {
    /// Arrivals per second.
    #[default]
    Second,
    /// Arrivals per minute.
    Minute,
    /// Arrivals per hour.
    Hour,
}

impl RateUnit {
    /// Seconds in one unit.
    pub fn seconds(self) -> f64 {
        match self {
            RateUnit::Second => 1.0,
            RateUnit::Minute => 60.0,
            RateUnit::Hour => 3600.0,
        }
    }

    /// How a rate in this unit ends: `s`, `min`, `h`.
    pub fn suffix(self) -> &'static str {
        match self {
            RateUnit::Second => "s",
            RateUnit::Minute => "min",
            RateUnit::Hour => "h",
        }
    }

    /// The unit a rate's suffix names (`s`, `min`, `hour`, ...).
    fn of_suffix(text: &str) -> Option<RateUnit> {
        match text.trim() {
            "s" | "sec" | "second" => Some(RateUnit::Second),
            "m" | "min" | "minute" => Some(RateUnit::Minute),
            "h" | "hr" | "hour" => Some(RateUnit::Hour),
            _ => None,
        }
    }
}

/// A rate of arrivals: a number, per the unit it names (`"2000/min"`) or,
/// a bare number, per its phase's `per` (seconds by default).
///
/// ```
/// use loadgen::{Rate, RateUnit};
/// let r: Rate = "2000/min".parse().unwrap();
/// assert_eq!((r.value, r.unit), (2000.0, Some(RateUnit::Minute)));
/// assert_eq!(r.per_second(RateUnit::Second), 2000.0 / 60.0);
/// assert_eq!("3.5".parse::<Rate>().unwrap().per_second(RateUnit::Minute), 3.5 / 60.0);
/// assert_eq!("7200/h".parse::<Rate>().unwrap().per_second(RateUnit::Second), 2.0);
/// assert!("2000/fortnight".parse::<Rate>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Arrivals per `unit`.
    pub value: f64,
    /// The unit written with it; `None` for a bare number.
    pub unit: Option<RateUnit>,
}

/// What a rate may be, said by every error about one.
const EXPECTED: &str = "expected a rate: N, N/s, N/min or N/h (N a number >= 0)";

impl std::str::FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Rate, String> {
        let t = text.trim();
        let (number, unit) = match t.split_once('/') {
            None => (t, None),
            Some((n, unit)) => match RateUnit::of_suffix(unit) {
                Some(u) => (n, Some(u)),
                None => {
                    return Err(format!(
                        "`{t}`: `/{}` is not a unit: {EXPECTED}",
                        unit.trim()
                    ))
                }
            },
        };
        match number.trim().parse::<f64>() {
            Ok(value) if value.is_finite() && value >= 0.0 => Ok(Rate { value, unit }),
            _ => Err(format!("`{t}`: {EXPECTED}")),
        }
    }
}

impl Rate {
    /// Arrivals per second, `per` being the unit of a bare number.
    pub fn per_second(self, per: RateUnit) -> f64 {
        self.value / self.unit.unwrap_or(per).seconds()
    }

    /// A bare number (per its phase's `per`).
    pub fn bare(value: f64) -> Rate {
        Rate { value, unit: None }
    }
}

impl std::fmt::Display for Rate {
    /// `2000/min` (a bare number as it is: `2000`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.value;
        let number = if v.fract() == 0.0 && v.abs() < 1e15 {
            format!("{}", v as i64)
        } else {
            format!("{v}")
        };
        match self.unit {
            Some(u) => write!(f, "{number}/{}", u.suffix()),
            None => f.write_str(&number),
        }
    }
}

impl Serialize for Rate {
    /// A bare number as a number, one with its unit as the string it was.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.unit {
            None => s.serialize_f64(self.value),
            Some(_) => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Rate;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, or a string N/s, N/min or N/h")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Rate, E> {
                Ok(Rate::bare(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Rate, E> {
                Ok(Rate::bare(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Rate, E> {
                Ok(Rate::bare(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Rate, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_with_or_without_their_unit() {
        let r = |t: &str| t.parse::<Rate>();
        assert_eq!(
            r("2000/min"),
            Ok(Rate {
                value: 2000.0,
                unit: Some(RateUnit::Minute)
            })
        );
        assert_eq!(
            r(" 2.5 / s "),
            Ok(Rate {
                value: 2.5,
                unit: Some(RateUnit::Second)
            })
        );
        assert_eq!(
            r("60/hour").unwrap().per_second(RateUnit::Second),
            60.0 / 3600.0
        );
        assert_eq!(r("0"), Ok(Rate::bare(0.0)));
        let bad_unit = r("2000/fortnight").unwrap_err();
        assert!(
            bad_unit.contains("`/fortnight` is not a unit"),
            "{bad_unit}"
        );
        assert!(bad_unit.contains("N/min"), "{bad_unit}");
        for bad in ["-1/s", "fast", "inf", "NaN/min", ""] {
            assert!(r(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_rate_reads_back_as_written() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Phase {
            rate: Rate,
        }
        for text in ["rate = \"2000/min\"\n", "rate = 2.5\n", "rate = \"3/h\"\n"] {
            let p: Phase = toml::from_str(text).unwrap();
            assert_eq!(toml::to_string(&p).unwrap(), text);
        }
        let p: Phase = toml::from_str("rate = 200\n").unwrap();
        assert_eq!(p.rate, Rate::bare(200.0));
        let e = toml::from_str::<Phase>("rate = \"2/fortnight\"\n").unwrap_err();
        assert!(e.to_string().contains("is not a unit"), "{e}");
    }
}
