//! What a provider process (`rehearse provider`) reads from outside its
//! config: the admin token, by precedence, and the test-only clock offset.
//!
//! The token is never taken from the command line, where `ps` shows it:
//! `--admin-token-file FILE` first, else the environment variable
//! [`ADMIN_TOKEN_ENV`], else the config's `admin_token`.

use std::ffi::OsString;
use std::path::Path;

use crate::config::{check_admin_token, ProviderConfig};

/// The environment variable holding the admin token.
pub const ADMIN_TOKEN_ENV: &str = "REHEARSE_ADMIN_TOKEN";

/// The environment variable shifting the provider's clock by whole
/// milliseconds, for tests only ([`crate::FakeProvider::clock_offset_ms`]).
pub const CLOCK_OFFSET_ENV: &str = "REHEARSE_TEST_CLOCK_OFFSET_MS";

/// Where the admin token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// `--admin-token-file`.
    File,
    /// [`ADMIN_TOKEN_ENV`].
    Env,
    /// The config's `admin_token`.
    Config,
}

impl TokenSource {
    /// How a banner names it.
    pub fn describe(self) -> &'static str {
        match self {
            TokenSource::File => "--admin-token-file",
            TokenSource::Env => ADMIN_TOKEN_ENV,
            TokenSource::Config => "the config's admin_token",
        }
    }
}

/// A setting a provider process cannot start with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingError(pub String);

/// The admin token by precedence: the file's (surrounding whitespace
/// ignored), else `env`'s (the value of [`ADMIN_TOKEN_ENV`]), else the
/// config's (checked with the config); each checked, `None` when none is
/// given.
pub fn admin_token(
    file: Option<&Path>,
    env: Option<OsString>,
    config: Option<String>,
) -> Result<Option<(String, TokenSource)>, SettingError> {
    let check = |token: String, what: &str| {
        check_admin_token(&token)
            .map(|()| token)
            .map_err(|m| SettingError(format!("{what}: {m}")))
    };
    if let Some(path) = file {
        let what = format!("--admin-token-file {}", path.display());
        let text = std::fs::read_to_string(path)
            .map_err(|e| SettingError(format!("{what}: cannot read it: {e}")))?;
        let token = check(text.trim().to_string(), &what)?;
        return Ok(Some((token, TokenSource::File)));
    }
    if let Some(value) = env {
        let Some(value) = value.to_str() else {
            return Err(SettingError(format!("{ADMIN_TOKEN_ENV} is not UTF-8 text")));
        };
        let token = check(value.to_string(), ADMIN_TOKEN_ENV)?;
        return Ok(Some((token, TokenSource::Env)));
    }
    Ok(config.map(|t| (t, TokenSource::Config)))
}

/// The test-only clock offset in ms from `env` (the value of
/// [`CLOCK_OFFSET_ENV`]): 0 when unset; a whole number within a day.
pub fn test_clock_offset_ms(env: Option<OsString>) -> Result<i64, SettingError> {
    let Some(value) = env else { return Ok(0) };
    value
        .to_str()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|ms| ms.unsigned_abs() <= 24 * 3600 * 1000)
        .ok_or_else(|| {
            SettingError(format!(
                "{CLOCK_OFFSET_ENV} must be a whole number of milliseconds within a day, not {value:?}"
            ))
        })
}

/// The lines of a provider process's banner after its addresses: where
/// its admin token came from (or that it has none), its clock's shift if
/// any, its config's timeline.
pub fn banner(token: Option<TokenSource>, clock_offset_ms: i64, config: &ProviderConfig) -> String {
    let mut said = match token {
        Some(from) => format!(
            "  token:     from {}: every admin call needs Authorization: Bearer TOKEN\n",
            from.describe()
        ),
        None => "  token:     none: the admin API answers loopback callers only\n".into(),
    };
    if clock_offset_ms != 0 {
        said.push_str(&format!(
            "  clock:     shifted by {clock_offset_ms} ms ({CLOCK_OFFSET_ENV}, for tests only)\n"
        ));
    }
    if !config.timeline.is_empty() {
        let names: Vec<&str> = config.timeline.iter().map(|p| p.name.as_str()).collect();
        said.push_str(&format!("  timeline:  {}\n", names.join(", ")));
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_file(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("rehearse-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_token_file_comes_first_then_the_environment_then_the_config() {
        let file = token_file("good", "from-file\n");
        let env = || Some(OsString::from("from-env"));
        let config = || Some("from-config".to_string());
        let pick = |f: Option<&Path>, e, c| admin_token(f, e, c).unwrap();
        assert_eq!(
            pick(Some(&file), env(), config()),
            Some(("from-file".into(), TokenSource::File))
        );
        assert_eq!(
            pick(None, env(), config()),
            Some(("from-env".into(), TokenSource::Env))
        );
        assert_eq!(
            pick(None, None, config()),
            Some(("from-config".into(), TokenSource::Config))
        );
        assert_eq!(pick(None, None, None), None);
    }

    #[test]
    fn an_empty_or_unreadable_token_is_refused() {
        let empty = token_file("empty", " \n");
        let err = admin_token(Some(&empty), None, None).unwrap_err();
        assert!(err.0.contains("--admin-token-file"), "{err}");
        let missing = Path::new("/nonexistent/token");
        let err = admin_token(Some(missing), None, None).unwrap_err();
        assert!(err.0.contains("/nonexistent/token"), "{err}");
        let err = admin_token(None, Some("".into()), None).unwrap_err();
        assert!(err.0.contains(ADMIN_TOKEN_ENV), "{err}");
        assert!(admin_token(None, Some("a b".into()), None).is_err());
    }

    #[test]
    fn the_clock_offset_is_whole_milliseconds_within_a_day() {
        assert_eq!(test_clock_offset_ms(None).unwrap(), 0);
        assert_eq!(test_clock_offset_ms(Some("-250".into())).unwrap(), -250);
        assert!(test_clock_offset_ms(Some("0.5".into())).is_err());
        assert!(test_clock_offset_ms(Some("99999999999".into())).is_err());
    }
}
