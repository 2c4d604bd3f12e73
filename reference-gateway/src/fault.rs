//! Faults the reference gateway can be given on purpose (`--fault KIND`,
//! `fault = "KIND"` in a config or a scenario's `[gateway.reference]`), so
//! that each check of the checklist can be shown failing on a gateway that
//! has the mistake it looks for. Never for a real rehearsal.
//!
//! Each fault is one mistake gateways in use are reported to make, applied
//! on top of whatever mode runs:
//! - `buffer-stream`: the upstream answer is read whole, then sent with the
//!   upstream's status and content type (a relay doing `r = await
//!   client.post(...)`, then `Response(r.content)`);
//! - `buffer-body`: the head goes out at once, the body is held until the
//!   upstream answer is complete, then sent in one piece;
//! - `leak-slots[=N]`: a call that ends by the upstream timeout, or by its
//!   caller hanging up while it runs, never gives its concurrency slot (and
//!   its pooled connection) back; at most N in all when N is given;
//! - `retry-storm`: a provider's 429 or 503 is retried at once, with no
//!   wait, up to 5 more times, before the caller is answered;
//! - `no-cancel`: a caller hanging up neither drops its queued job nor
//!   cancels its upstream call, which runs to its end for nobody;
//! - `hoard`: a copy of every request body is kept forever;
//! - `refuse-408`: every request is answered 408 at once, the provider
//!   never called;
//! - `refuse-500-after=DURATION`: every request is held DURATION, then
//!   answered 500, the provider never called.
//!
//! A gateway without a fault pays one branch on a field at each hook; the
//! hooks are in the proxy's path (before admission, after the answer's
//! head, at the call's end) and in the upstream client's refusal branch.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;

/// The fault kinds, as `--fault` and `fault = ...` spell them.
pub const FAULT_KINDS: &str =
    "buffer-stream, buffer-body, leak-slots[=N], retry-storm, no-cancel, \
     hoard, refuse-408, refuse-500-after=DURATION";

/// How many more times `retry-storm` sends a refused call.
pub(crate) const STORM_RETRIES: u32 = 5;

/// One fault given to the gateway, to show a check failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Read the whole upstream answer, then send it (status and content
    /// type only).
    BufferStream,
    /// Send the head at once, hold the body until it is complete.
    BufferBody,
    /// Never give back the slot of a call that timed out or whose caller
    /// hung up; at most this many in all when given.
    LeakSlots(Option<u64>),
    /// Retry every 429 and 503 at once, up to 5 more times.
    RetryStorm,
    /// A caller hanging up cancels nothing.
    NoCancel,
    /// Keep a copy of every request body, forever.
    Hoard,
    /// Answer every request 408 at once, without calling the provider.
    Refuse408,
    /// Hold every request this long, then answer 500 without calling the
    /// provider.
    Refuse500After(Duration),
}

impl Fault {
    /// The kind's name, without its value.
    pub fn kind(self) -> &'static str {
        match self {
            Fault::BufferStream => "buffer-stream",
            Fault::BufferBody => "buffer-body",
            Fault::LeakSlots(_) => "leak-slots",
            Fault::RetryStorm => "retry-storm",
            Fault::NoCancel => "no-cancel",
            Fault::Hoard => "hoard",
            Fault::Refuse408 => "refuse-408",
            Fault::Refuse500After(_) => "refuse-500-after",
        }
    }

    /// The fault with its duration scaled by `scale` (only
    /// `refuse-500-after` has one).
    pub(crate) fn scaled(self, scale: impl Fn(Duration) -> Duration) -> Fault {
        match self {
            Fault::Refuse500After(d) => Fault::Refuse500After(scale(d)),
            other => other,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::LeakSlots(Some(n)) => write!(f, "leak-slots={n}"),
            Fault::Refuse500After(d) => {
                write!(f, "refuse-500-after={}", humantime::format_duration(*d))
            }
            other => f.write_str(other.kind()),
        }
    }
}

impl FromStr for Fault {
    type Err = String;

    /// Reads `KIND` or `KIND=VALUE`.
    ///
    /// ```
    /// use reference_gateway::Fault;
    /// use std::time::Duration;
    ///
    /// assert_eq!("leak-slots=3".parse(), Ok(Fault::LeakSlots(Some(3))));
    /// assert_eq!("refuse-500-after=2s".parse(), Ok(Fault::Refuse500After(Duration::from_secs(2))));
    /// assert!("slow".parse::<Fault>().unwrap_err().contains("buffer-stream"));
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, value) = match s.trim().split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (s.trim(), None),
        };
        let plain = |f: Fault| match value {
            None => Ok(f),
            Some(_) => Err(format!("`{s}`: {kind} takes no value")),
        };
        match kind {
            "buffer-stream" => plain(Fault::BufferStream),
            "buffer-body" => plain(Fault::BufferBody),
            "retry-storm" => plain(Fault::RetryStorm),
            "no-cancel" => plain(Fault::NoCancel),
            "hoard" => plain(Fault::Hoard),
            "refuse-408" => plain(Fault::Refuse408),
            "leak-slots" => match value {
                None => Ok(Fault::LeakSlots(None)),
                Some(v) => match v.parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Fault::LeakSlots(Some(n))),
                    _ => Err(format!(
                        "`{s}`: leak-slots=N takes a whole number of slots above 0"
                    )),
                },
            },
            "refuse-500-after" => match value {
                Some(v) => humantime::parse_duration(v)
                    .map(Fault::Refuse500After)
                    .map_err(|e| format!("`{s}`: `{v}` is not a duration ({e}), e.g. 2s")),
                None => Err(format!(
                    "`{s}`: refuse-500-after takes a duration: refuse-500-after=2s"
                )),
            },
            _ => Err(format!(
                "unknown fault `{s}`: expected one of {FAULT_KINDS}"
            )),
        }
    }
}

/// `fault` in a config: one kind as a string, or a list of them; written
/// back as a list.
pub(crate) mod list {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(faults: &[Fault], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(faults.iter().map(ToString::to_string))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Fault>, D::Error> {
        struct Faults;
        impl<'de> Visitor<'de> for Faults {
            type Value = Vec<Fault>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a fault or a list of faults ({FAULT_KINDS})")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map(|f| vec![f]).map_err(E::custom)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(text) = seq.next_element::<String>()? {
                    out.push(text.parse().map_err(de::Error::custom)?);
                }
                Ok(out)
            }
        }
        d.deserialize_any(Faults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_written() {
        for text in [
            "buffer-stream",
            "buffer-body",
            "leak-slots",
            "leak-slots=3",
            "retry-storm",
            "no-cancel",
            "hoard",
            "refuse-408",
            "refuse-500-after=1s 500ms",
        ] {
            let f: Fault = text.parse().unwrap();
            assert_eq!(f.to_string(), text);
        }
        assert_eq!(" hoard ".parse(), Ok(Fault::Hoard));
    }

    #[test]
    fn bad_faults_say_what_is_expected() {
        for (text, says) in [
            ("slow", "expected one of buffer-stream"),
            ("leak-slots=0", "above 0"),
            ("leak-slots=many", "whole number"),
            ("hoard=2", "takes no value"),
            ("refuse-500-after", "takes a duration"),
            ("refuse-500-after=soon", "not a duration"),
        ] {
            let err = text.parse::<Fault>().unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
