//! The two provider APIs a rehearsal speaks.

use serde::{Deserialize, Serialize};

/// Which provider's API a request uses: in a scenario's `[load.request]`
/// (`dialect = "anthropic"`) and in every [`ProviderRecord`](crate::ProviderRecord).
///
/// ```
/// use wire::Dialect;
/// assert_eq!(Dialect::default(), Dialect::OpenAi);
/// assert_eq!(Dialect::Anthropic.path(), "/v1/messages");
/// assert_eq!(serde_json::to_string(&Dialect::OpenAi).unwrap(), "\"openai\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// OpenAI's `POST /v1/chat/completions`.
    #[default]
    OpenAi,
    /// Anthropic's `POST /v1/messages`.
    Anthropic,
}

impl Dialect {
    /// Both dialects.
    pub const ALL: [Dialect; 2] = [Dialect::OpenAi, Dialect::Anthropic];

    /// The path a chat request of this dialect is posted to.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::OpenAi => "/v1/chat/completions",
            Dialect::Anthropic => "/v1/messages",
        }
    }

    /// The dialect whose chat requests are posted to `path`, if any.
    pub fn of_path(path: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.path() == path)
    }

    /// The name used in configs and records (`"openai"`, `"anthropic"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_round_trip() {
        for d in Dialect::ALL {
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.as_str()));
            assert_eq!(serde_json::from_str::<Dialect>(&json).unwrap(), d);
            assert_eq!(Dialect::of_path(d.path()), Some(d));
        }
        assert_eq!(Dialect::of_path("/v1/completions"), None);
    }
}
