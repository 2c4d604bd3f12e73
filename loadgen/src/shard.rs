//! Load from several processes or machines: shard `I/N` plays exactly the
//! arrivals of the one seeded schedule whose person index is `I` modulo
//! `N`, with the same request ids, the same draws and the same intended
//! offsets as the unsharded run; the N shards together are that run. They
//! agree on when offset 0 is by a wall-clock instant (`--start-at`).

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One shard of a schedule: `index` of `count` (`0/1` is the whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, from 0.
    pub index: u32,
    /// How many shards share the schedule.
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

impl Shard {
    /// Returns true if and only if the person of schedule index `person`
    /// arrives in this shard.
    ///
    /// ```
    /// let s: loadgen::Shard = "1/3".parse().unwrap();
    /// assert!(s.owns(1) && s.owns(4) && !s.owns(3));
    /// ```
    pub fn owns(&self, person: u64) -> bool {
        self.count <= 1 || person % u64::from(self.count) == u64::from(self.index)
    }

    /// Returns true if and only if this is the whole schedule.
    pub fn is_whole(&self) -> bool {
        self.count <= 1
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Why a shard or a start instant could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShardError(String);

impl FromStr for Shard {
    type Err = ShardError;

    /// Reads `I/N` with `0 <= I < N`.
    fn from_str(s: &str) -> Result<Shard, ShardError> {
        let bad = || {
            ShardError(format!(
                "{s:?} is not a shard: write I/N with 0 <= I < N, e.g. 0/4"
            ))
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// Reads an agreed start instant: RFC 3339 (`2026-12-01T10:00:00Z`, with
/// fractions of a second if wanted) or Unix time in seconds (`1764583200`,
/// or `1764583200.25`).
///
/// ```
/// let t = loadgen::parse_start_at("1764583200.5").unwrap();
/// assert_eq!(t, loadgen::parse_start_at("2025-12-01T10:00:00.5Z").unwrap());
/// ```
pub fn parse_start_at(s: &str) -> Result<SystemTime, ShardError> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_rfc3339_weak(s).map_err(|e| {
        ShardError(format!(
            "{s:?} is not a start time ({e}): write RFC 3339 (2026-12-01T10:00:00Z) or Unix seconds"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_people() {
        let shards: Vec<Shard> = (0..3).map(|i| format!("{i}/3").parse().unwrap()).collect();
        for person in 0..1_000u64 {
            assert_eq!(shards.iter().filter(|s| s.owns(person)).count(), 1);
        }
        assert!(Shard::default().owns(7) && Shard::default().is_whole());
    }

    #[test]
    fn bad_shards_say_how_to_write_one() {
        for bad in ["3/3", "1", "a/2", "0/0", "-1/2"] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.to_string().contains("I/N"), "{bad}: {e}");
        }
        assert_eq!("2/5".parse::<Shard>().unwrap().to_string(), "2/5");
    }

    #[test]
    fn start_times_read_both_ways() {
        let a = parse_start_at("2026-12-01T10:00:00Z").unwrap();
        assert_eq!(a, UNIX_EPOCH + Duration::from_secs(1_796_119_200));
        assert!(parse_start_at("tomorrow")
            .unwrap_err()
            .to_string()
            .contains("RFC 3339"));
    }
}
