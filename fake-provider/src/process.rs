//! What a provider process (`rehearse provider`) reads besides its flags:
//! its config (a file, or a scenario's `[provider]` table), the admin token
//! by precedence and the test-only clock offset; where its records go when
//! it is told nowhere; and what its banner says.
//!
//! The token is never taken from the command line, where `ps` shows it:
//! `--admin-token-file FILE` first, else the environment variable
//! `REHEARSE_ADMIN_TOKEN`, else the config's `admin_token`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::{check_admin_token, ConfigError, ProviderConfig};

/// What `rehearse provider --help` says after its flags: where the
/// records go and how they rotate, and who may call the admin API.
pub const AFTER_HELP: &str = "\
Records: each call's record (one JSON line, the ProviderRecord of provider.jsonl) is
written to --records within 10 ms of the call's end, and before GET /_fake/records answers
or the provider stops (SIGTERM); none is kept in memory longer. GET /_fake/records?after=N
streams the records after the first N (in write order, not arrival order) up to the
current end, and gives that end in the header x-fake-records-next: ask ?after=THAT next.

Rotation: at start an existing non-empty FILE becomes FILE.1 (FILE.1 becomes FILE.2,
and so on); FILE starts empty. --records-max-bytes caps FILE and FILE.1, FILE.2, ...
together: past it the oldest run's file is deleted first; once FILE alone would pass
it, the provider stops writing records, counts each one dropped (records_dropped in
/_fake/stats, fake_provider_records_dropped_total in /metrics) and warns once on stderr.

Admin token (never in argv): --admin-token-file, else REHEARSE_ADMIN_TOKEN, else the
config's admin_token. With one, every admin call needs Authorization: Bearer TOKEN (401);
without, loopback callers only (403). POST /_fake/reset starts a run: docs/fake-provider-admin.md, \"The fake
provider's admin API\". Tests only: REHEARSE_TEST_CLOCK_OFFSET_MS=N shifts its clock.";

/// The environment variable holding the admin token.
pub(crate) const ADMIN_TOKEN_ENV: &str = "REHEARSE_ADMIN_TOKEN";

/// The environment variable shifting the provider's clock by whole
/// milliseconds, for tests only ([`crate::FakeProvider::clock_offset_ms`]).
pub(crate) const CLOCK_OFFSET_ENV: &str = "REHEARSE_TEST_CLOCK_OFFSET_MS";

/// Where the admin token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenSource {
    /// `--admin-token-file`.
    File,
    /// [`ADMIN_TOKEN_ENV`].
    Env,
    /// The config's `admin_token`.
    Config,
}

impl TokenSource {
    /// How a banner names it.
    fn describe(self) -> &'static str {
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
pub(crate) fn admin_token(
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
pub(crate) fn test_clock_offset_ms(env: Option<OsString>) -> Result<i64, SettingError> {
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
pub(crate) fn banner(
    token: Option<TokenSource>,
    clock_offset_ms: i64,
    config: &ProviderConfig,
) -> String {
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

/// The configs of a provider process: the provider config file at
/// `config` (one provider, named by its `name` if it has one), else the
/// `[provider]` table or the `[[providers]]` of the scenario at
/// `scenario` (its other tables belong to other subcommands, which check
/// them; see [`crate::config::providers_in`]), else one at the defaults;
/// validated, errors at their line.
pub fn load_configs(
    config: Option<&Path>,
    scenario: Option<&Path>,
) -> Result<Vec<ProviderConfig>, ConfigError> {
    if let Some(path) = config {
        let origin = path.display().to_string();
        return Ok(vec![ProviderConfig::from_toml(
            &read(path, &origin)?,
            &origin,
        )?]);
    }
    let Some(path) = scenario else {
        return Ok(vec![ProviderConfig::default()]);
    };
    let origin = path.display().to_string();
    let text = read(path, &origin)?;
    let src = toml_located::Source::new(&text, &origin);
    // Deserialized in place so errors keep their lines.
    #[derive(serde::Deserialize)]
    struct Section {
        provider: Option<ProviderConfig>,
        providers: Option<Vec<ProviderConfig>>,
        #[serde(flatten)]
        _rest: toml::Table,
    }
    let section: Section = src.parse()?;
    crate::config::providers_in(section.provider, section.providers, &src)
}

/// With neither a config nor a scenario: the providers the `--listen`
/// flags name (`NAME=ADDR` each), each at the defaults and named so (a
/// harness uploads each one's table, `PUT /_fake/config`, before a run);
/// one default provider when they name none.
///
/// ```
/// use fake_provider::process::configs_named_by;
/// let flags = ["primary=0.0.0.0:8080".to_string(), "backup=0.0.0.0:8081".to_string()];
/// let configs = configs_named_by(&flags).unwrap();
/// assert_eq!(configs[1].name.as_deref(), Some("backup"));
/// assert_eq!(configs_named_by(&["127.0.0.1:8080".to_string()]).unwrap().len(), 1);
/// ```
pub fn configs_named_by(flags: &[String]) -> Result<Vec<ProviderConfig>, SettingError> {
    let named: Vec<&str> = flags
        .iter()
        .filter_map(|f| f.split_once('=').map(|(n, _)| n))
        .collect();
    if named.is_empty() {
        return Ok(vec![ProviderConfig::default()]);
    }
    named
        .into_iter()
        .map(|n| match wire::is_provider_name(n) {
            true => Ok(ProviderConfig {
                name: (n != wire::DEFAULT_PROVIDER).then(|| n.to_string()),
                ..ProviderConfig::default()
            }),
            false => Err(SettingError(format!(
                "--listen {n}=...: a provider's name is 1 to 64 of a-z, 0-9, _ and -"
            ))),
        })
        .collect()
}

/// Where each of `names` (a process's providers, in order) listens, from
/// the `--listen` flags: `NAME=ADDR` for each, or one `ADDR` (a bare port
/// is loopback's) from which they take consecutive ports, the first
/// `ADDR`'s own (port 0: each a free port of its own). One port each,
/// not one port with a name prefix: an SDK or a gateway takes a base URL
/// per deployment, and a prefix would change every path it builds.
///
/// ```
/// use fake_provider::process::listen_addrs;
/// let flags = ["127.0.0.1:8080".to_string()];
/// assert_eq!(listen_addrs(&flags, &["a", "b"]).unwrap(), ["127.0.0.1:8080", "127.0.0.1:8081"]);
/// let flags = ["b=0.0.0.0:9000".to_string(), "a=127.0.0.1:7000".to_string()];
/// assert_eq!(listen_addrs(&flags, &["a", "b"]).unwrap(), ["127.0.0.1:7000", "0.0.0.0:9000"]);
/// assert!(listen_addrs(&flags, &["a"]).is_err());
/// ```
pub fn listen_addrs(flags: &[String], names: &[&str]) -> Result<Vec<String>, SettingError> {
    let bare = |a: &str| match a.parse::<u16>() {
        Ok(port) => format!("127.0.0.1:{port}"),
        Err(_) => a.to_string(),
    };
    let listed = names.join(", ");
    if let [one] = flags {
        if !one.contains('=') {
            let addr = bare(one);
            let Some((host, Ok(port))) = addr.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()))
            else {
                return Err(SettingError(format!(
                    "--listen {one}: expected HOST:PORT, a port, or NAME=HOST:PORT"
                )));
            };
            return (0..names.len())
                .map(|i| match port {
                    0 => Ok(addr.clone()),
                    p => u16::try_from(usize::from(p) + i)
                        .map(|p| format!("{host}:{p}"))
                        .map_err(|_| {
                            SettingError(format!(
                                "--listen {one}: no room for {} consecutive ports",
                                names.len()
                            ))
                        }),
                })
                .collect();
        }
    }
    let mut by_name = Vec::new();
    for flag in flags {
        let Some((name, addr)) = flag.split_once('=') else {
            return Err(SettingError(format!(
                "--listen {flag}: with several --listen flags each is NAME=ADDR (the providers: {listed})"
            )));
        };
        if !names.contains(&name) {
            return Err(SettingError(format!(
                "--listen {flag}: no provider is named {name:?} (the providers: {listed})"
            )));
        }
        if by_name.iter().any(|(n, _)| *n == name) {
            return Err(SettingError(format!(
                "--listen {flag}: {name:?} is given twice"
            )));
        }
        by_name.push((name, bare(addr)));
    }
    names
        .iter()
        .map(|n| {
            by_name
                .iter()
                .find(|(name, _)| name == n)
                .map(|(_, a)| a.clone())
                .ok_or_else(|| SettingError(format!("--listen: no address for provider {n:?}: give NAME=ADDR for each of {listed}")))
        })
        .collect()
}

/// Where provider `name` of a process serving `count` writes its records,
/// when told `records`: that file for one; for several, `-NAME` put
/// before its extension (`provider.jsonl` → `provider-east.jsonl`), each
/// rotated and capped on its own.
///
/// ```
/// use std::path::Path;
/// use fake_provider::process::records_path_of;
/// assert_eq!(records_path_of(Path::new("/r/provider.jsonl"), "east", 2), Path::new("/r/provider-east.jsonl"));
/// assert_eq!(records_path_of(Path::new("/r/provider.jsonl"), "default", 1), Path::new("/r/provider.jsonl"));
/// ```
pub fn records_path_of(records: &Path, name: &str, count: usize) -> PathBuf {
    if count <= 1 {
        return records.to_path_buf();
    }
    let stem = records
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    let file = match records.extension() {
        Some(ext) => format!("{stem}-{name}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{name}"),
    };
    records.with_file_name(file)
}

fn read(path: &Path, origin: &str) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        origin: origin.to_string(),
        line: 0,
        column: 0,
        field: String::new(),
        message: format!("cannot read the file: {e}"),
    })
}

/// Sets `config`'s admin token by precedence (the file at `token_file`,
/// else `REHEARSE_ADMIN_TOKEN`, else the config's) and reads the clock
/// offset from `REHEARSE_TEST_CLOCK_OFFSET_MS`; returns the offset and the
/// banner's lines about both.
pub fn apply_environment(
    config: &mut ProviderConfig,
    token_file: Option<&Path>,
) -> Result<(i64, String), SettingError> {
    let token = admin_token(
        token_file,
        std::env::var_os(ADMIN_TOKEN_ENV),
        config.admin_token.take(),
    )?;
    let offset_ms = test_clock_offset_ms(std::env::var_os(CLOCK_OFFSET_ENV))?;
    let said = banner(token.as_ref().map(|t| t.1), offset_ms, config);
    config.admin_token = token.map(|(t, _)| t);
    Ok((offset_ms, said))
}

/// `$TMPDIR/rehearse-provider-PID/provider.jsonl`, its directory made:
/// where a provider process told no records file writes its records.
pub fn default_records_path() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("rehearse-provider-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir.join(wire::files::PROVIDER_RECORDS))
}

/// Reads a size (`--records-max-bytes`): bytes, or a number with a binary
/// (KiB, MiB, GiB, TiB) or decimal (kB, MB, GB, TB) unit.
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_bytes: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "unknown unit `{other}` (KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ))
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_bytes))
        .ok_or_else(|| format!("`{text}` is not a size in bytes (such as 1073741824 or 1GiB)"))
}

/// The banner of a provider (`name`: `None` for the default one)
/// listening at `base`: its endpoints, then `said` (the lines
/// [`apply_environment`] returns), then where its records go.
pub fn listening_banner(
    name: Option<&str>,
    base: &str,
    said: &str,
    records: &Path,
    records_max_bytes: u64,
) -> String {
    let who = name.map(|n| format!(" {n}")).unwrap_or_default();
    let mut banner = format!(
        "fake provider{who} listening on {base}\n  OpenAI:    {base}/v1/chat/completions   (SDK base_url: {base}/v1)\n  Anthropic: {base}/v1/messages           (SDK base_url: {base})\n  admin:     {base}/_fake/  time  run  stats  records  config  reset  lease  phase  overrides;  {base}/metrics\n"
    );
    banner.push_str(said);
    banner.push_str(&format!(
        "  records:   {} (earlier runs' rotated to .1, .2, ...; at most {} bytes together)\n",
        records.display(),
        records_max_bytes
    ));
    banner
}

/// What a provider process says on stderr once it has stopped: the
/// records written to `records`, and those dropped over its size cap.
///
/// ```
/// let note = fake_provider::process::stopped_note(7, 0, std::path::Path::new("p.jsonl"));
/// assert_eq!(note, "7 records in p.jsonl");
/// ```
pub fn stopped_note(written: u64, dropped: u64, records: &Path) -> String {
    let mut note = format!("{written} records in {}", records.display());
    if dropped > 0 {
        note.push_str(&format!("; {dropped} dropped (over --records-max-bytes)"));
    }
    note
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

    #[test]
    fn a_size_is_bytes_or_a_number_with_a_unit() {
        assert_eq!(parse_byte_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_byte_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_byte_size(" 2 MB "), Ok(2_000_000));
        assert_eq!(parse_byte_size("5B"), Ok(5));
        assert!(parse_byte_size("1 parsec")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_byte_size("GiB").is_err());
        assert!(parse_byte_size("99999999999TiB").is_err(), "overflow");
    }

    #[test]
    fn the_config_comes_from_its_file_else_the_scenario_s_provider_table() {
        let dir = std::env::temp_dir().join(format!("rehearse-pconf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let config = file("p.toml", "seed = 7\n");
        let scenario = file("s.toml", "[load]\nwhatever = 1\n[provider]\nseed = 9\n");
        let none = file("none.toml", "[load]\nwhatever = 1\n");
        let bad = file("bad.toml", "[load]\n[provider]\nsed = 9\n");
        let seed = |r: Result<Vec<ProviderConfig>, ConfigError>| r.unwrap()[0].seed;
        assert_eq!(seed(load_configs(Some(&config), None)), 7);
        assert_eq!(seed(load_configs(None, Some(&scenario))), 9);
        let default = ProviderConfig::default();
        assert_eq!(seed(load_configs(None, Some(&none))), default.seed);
        assert_eq!(seed(load_configs(None, None)), default.seed);
        let err = load_configs(None, Some(&bad)).unwrap_err();
        assert_eq!((err.line, err.field.as_str()), (3, "provider.sed"), "{err}");
        let several = file(
            "several.toml",
            "[load]\n[[providers]]\nname = \"a\"\n[[providers]]\nname = \"b\"\nseed = 4\n",
        );
        let configs = load_configs(None, Some(&several)).unwrap();
        let names: Vec<_> = configs
            .iter()
            .map(ProviderConfig::name_or_default)
            .collect();
        assert_eq!((names, configs[1].seed), (vec!["a", "b"], 4));
        let twice = file(
            "twice.toml",
            "[[providers]]\nname = \"a\"\n[[providers]]\nname = \"a\"\n",
        );
        let err = load_configs(None, Some(&twice)).unwrap_err();
        assert_eq!(
            (err.line, err.field.as_str()),
            (4, "providers[1].name"),
            "{err}"
        );
        let both = file(
            "both.toml",
            "[provider]\nseed = 1\n[[providers]]\nname = \"a\"\n",
        );
        let err = load_configs(None, Some(&both)).unwrap_err();
        assert_eq!(err.line, 4, "{err}");
        let err = load_configs(Some(&dir.join("missing.toml")), None).unwrap_err();
        assert!(err.to_string().contains("cannot read the file"), "{err}");
    }
}
