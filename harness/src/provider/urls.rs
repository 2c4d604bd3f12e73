//! The providers' base URLs by name, as a gateway under test is told
//! them: `{provider_url}` and `{provider_url:NAME}` in a `[gateway]
//! command`, `REHEARSE_PROVIDER_URL` and `REHEARSE_PROVIDER_URL_<NAME>` in
//! its environment, and (through [`ProviderUrls::url_of`]) the reference
//! gateway's upstreams.

use std::net::SocketAddr;

/// The placeholder of the first provider's base URL.
const FIRST: &str = "{provider_url}";
/// A named provider's: `{provider_url:NAME}`.
const NAMED_OPEN: &str = "{provider_url:";

/// Every provider's base URL, in the scenario's order (the first is the
/// one `{provider_url}` names). Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUrls {
    /// (name, base URL), names as the scenario gives them (`default` for
    /// its one `[provider]`).
    urls: Vec<(String, String)>,
}

impl ProviderUrls {
    /// The URLs of `urls` (name, base URL), the first being
    /// `{provider_url}`'s. Returns `None` when `urls` is empty.
    ///
    /// ```
    /// let urls = harness::ProviderUrls::new(vec![
    ///     ("primary".into(), "http://127.0.0.1:9001".into()),
    ///     ("backup-eu".into(), "http://127.0.0.1:9002".into()),
    /// ]).unwrap();
    /// assert_eq!(urls.first(), "http://127.0.0.1:9001");
    /// assert_eq!(urls.url_of("backup-eu"), Some("http://127.0.0.1:9002"));
    /// let listen = "127.0.0.1:8000".parse().unwrap();
    /// assert_eq!(
    ///     urls.fill("--upstream={provider_url:backup-eu} --listen {listen}", &listen),
    ///     "--upstream=http://127.0.0.1:9002 --listen 127.0.0.1:8000"
    /// );
    /// assert!(urls.env().contains(&("REHEARSE_PROVIDER_URL_BACKUP_EU".into(), "http://127.0.0.1:9002".into())));
    /// ```
    pub fn new(urls: Vec<(String, String)>) -> Option<ProviderUrls> {
        (!urls.is_empty()).then_some(ProviderUrls { urls })
    }

    /// One provider, named `default`, at `url`.
    pub fn one(url: impl Into<String>) -> ProviderUrls {
        ProviderUrls {
            urls: vec![(wire::DEFAULT_PROVIDER.to_string(), url.into())],
        }
    }

    /// The first provider's base URL: `{provider_url}`.
    pub fn first(&self) -> &str {
        &self.urls[0].1
    }

    /// Provider `name`'s base URL, if there is one of that name. This is
    /// what the reference gateway's upstreams resolve by.
    pub fn url_of(&self, name: &str) -> Option<&str> {
        self.urls
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, u)| u.as_str())
    }

    /// Every (name, base URL), in the scenario's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.urls.iter().map(|(n, u)| (n.as_str(), u.as_str()))
    }

    /// How many providers.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Always false: there is at least one provider.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `arg` with `{provider_url}`, `{provider_url:NAME}` and `{listen}`
    /// replaced (a name the scenario does not have was refused when it
    /// loaded; here it stays as written).
    pub fn fill(&self, arg: &str, listen: &SocketAddr) -> String {
        let mut out = arg
            .replace(FIRST, self.first())
            .replace("{listen}", &listen.to_string());
        for (name, url) in &self.urls {
            out = out.replace(&format!("{NAMED_OPEN}{name}}}"), url);
        }
        out
    }

    /// The environment a spawned gateway gets them in:
    /// `REHEARSE_PROVIDER_URL` (the first) and, for each,
    /// `REHEARSE_PROVIDER_URL_<NAME>` (upper-cased, `-` as `_`).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![(
            "REHEARSE_PROVIDER_URL".to_string(),
            self.first().to_string(),
        )];
        env.extend(
            self.urls
                .iter()
                .map(|(name, url)| (env_name(name), url.clone())),
        );
        env
    }
}

/// `REHEARSE_PROVIDER_URL_<NAME>`: the name upper-cased, `-` as `_`.
fn env_name(name: &str) -> String {
    let mut out = String::from("REHEARSE_PROVIDER_URL_");
    out.extend(name.chars().map(|c| {
        if c == '-' {
            '_'
        } else {
            c.to_ascii_uppercase()
        }
    }));
    out
}

/// The NAMEs of the `{provider_url:NAME}` placeholders in `arg`.
pub(crate) fn placeholder_names(arg: &str) -> impl Iterator<Item = &str> {
    arg.match_indices(NAMED_OPEN).filter_map(move |(at, open)| {
        let rest = &arg[at + open.len()..];
        rest.find('}').map(|end| &rest[..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two() -> ProviderUrls {
        ProviderUrls::new(vec![
            ("primary".into(), "http://127.0.0.1:1".into()),
            ("azure-eu_2".into(), "http://127.0.0.1:2".into()),
        ])
        .unwrap()
    }

    #[test]
    fn placeholders_are_filled_by_name_and_the_first_is_provider_url() {
        let listen: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let urls = two();
        assert_eq!(
            urls.fill(
                "{provider_url}|{provider_url:azure-eu_2}|{provider_url:primary}|{listen}",
                &listen
            ),
            "http://127.0.0.1:1|http://127.0.0.1:2|http://127.0.0.1:1|127.0.0.1:9"
        );
        // One provider: as before there were several.
        let one = ProviderUrls::one("http://x");
        assert_eq!(one.fill("--u {provider_url}", &listen), "--u http://x");
        assert_eq!(one.fill("{provider_url:default}", &listen), "http://x");
    }

    #[test]
    fn the_environment_names_each_provider_upper_cased() {
        assert_eq!(
            two().env(),
            vec![
                (
                    "REHEARSE_PROVIDER_URL".to_string(),
                    "http://127.0.0.1:1".to_string()
                ),
                (
                    "REHEARSE_PROVIDER_URL_PRIMARY".to_string(),
                    "http://127.0.0.1:1".to_string()
                ),
                (
                    "REHEARSE_PROVIDER_URL_AZURE_EU_2".to_string(),
                    "http://127.0.0.1:2".to_string()
                ),
            ]
        );
        assert_eq!(ProviderUrls::new(Vec::new()), None);
    }

    #[test]
    fn placeholder_names_are_read_from_an_argument() {
        let names: Vec<_> = placeholder_names(
            "a={provider_url:p1},b={provider_url:x-y}{provider_url}{provider_url:",
        )
        .collect();
        assert_eq!(names, ["p1", "x-y"]);
    }
}
