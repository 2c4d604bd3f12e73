//! The two providers' dialects a rehearsal speaks, and the four APIs in them.

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

/// Which of the provider's APIs a call is to: in a scenario's
/// `[load.request]` (`api = "responses"`) and in every
/// [`ProviderRecord`](crate::ProviderRecord). Chat is OpenAI's chat
/// completions, messages Anthropic's; responses and embeddings are
/// OpenAI's.
///
/// ```
/// use wire::{Api, Dialect};
/// assert_eq!(Api::Responses.path(), "/v1/responses");
/// assert_eq!(Api::Messages.dialect(), Dialect::Anthropic);
/// assert_eq!(Api::of_dialect(Dialect::OpenAi), Api::Chat);
/// assert_eq!(serde_json::to_string(&Api::Embeddings).unwrap(), "\"embeddings\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// OpenAI's `POST /v1/chat/completions`.
    #[default]
    Chat,
    /// Anthropic's `POST /v1/messages`.
    Messages,
    /// OpenAI's `POST /v1/responses`.
    Responses,
    /// OpenAI's `POST /v1/embeddings`.
    Embeddings,
}

impl Api {
    /// All four.
    pub const ALL: [Api; 4] = [Api::Chat, Api::Messages, Api::Responses, Api::Embeddings];

    /// The path a request to this API is posted to.
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
            Api::Embeddings => "/v1/embeddings",
        }
    }

    /// The API whose requests are posted to `path`, if any.
    pub fn of_path(path: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.path() == path)
    }

    /// The name used in configs and records (`"chat"`, `"messages"`,
    /// `"responses"`, `"embeddings"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Messages => "messages",
            Api::Responses => "responses",
            Api::Embeddings => "embeddings",
        }
    }

    /// The provider whose API this is: its headers (rate limits, keys) and
    /// error bodies.
    pub fn dialect(self) -> Dialect {
        match self {
            Api::Messages => Dialect::Anthropic,
            Api::Chat | Api::Responses | Api::Embeddings => Dialect::OpenAi,
        }
    }

    /// The dialect's chat API (`dialect = "..."` without an `api`).
    pub fn of_dialect(dialect: Dialect) -> Api {
        match dialect {
            Dialect::OpenAi => Api::Chat,
            Dialect::Anthropic => Api::Messages,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apis_round_trip_and_belong_to_their_dialect() {
        for a in Api::ALL {
            let json = serde_json::to_string(&a).unwrap();
            assert_eq!(json, format!("\"{}\"", a.as_str()));
            assert_eq!(serde_json::from_str::<Api>(&json).unwrap(), a);
            assert_eq!(Api::of_path(a.path()), Some(a));
        }
        for d in Dialect::ALL {
            assert_eq!(Api::of_dialect(d).dialect(), d);
            assert_eq!(Api::of_dialect(d).path(), d.path());
        }
    }

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
