//! A request's head: how the API key is sent ([`Auth`]), the path, and the
//! scenario's own headers with their placeholders (`{tenant}`,
//! `{request_id}`, `{attempt}`, and `{provider_url}`: the fake provider's
//! base URL in a rehearsal, for a gateway that is told its upstream per
//! request, as Portkey is; `{provider_url:NAME}`: provider NAME's, for one
//! told several, as Portkey's fallback config is).
//!
//! The send path is hot, so a header value is split at its placeholders
//! once, when the scenario is read ([`HeaderTemplate`]); when the run
//! starts, each tenant's head is made ([`Head`]): every header that needs
//! nothing of the request (no placeholder, or only `{tenant}`) is written
//! into the fixed prefix, and the rest into a few pieces where the request
//! id and attempt number are put as each request is written. No text is
//! searched or parsed per request.

use std::collections::BTreeMap;

use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use wire::Dialect;

/// What `{tenant}` is in a run without `[[load.tenants]]`.
pub(crate) const DEFAULT_TENANT: &str = "default";

/// How the API key is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Auth {
    /// `authorization: Bearer KEY` (OpenAI's).
    Bearer,
    /// `api-key: KEY` (Azure OpenAI's).
    ApiKey,
    /// `x-api-key: KEY` (Anthropic's).
    XApiKey,
}

impl Auth {
    /// The dialect's own way.
    pub(crate) fn of_dialect(dialect: Dialect) -> Auth {
        match dialect {
            Dialect::OpenAi => Auth::Bearer,
            Dialect::Anthropic => Auth::XApiKey,
        }
    }

    /// The header that carries the key.
    pub(crate) fn header(self) -> &'static str {
        match self {
            Auth::Bearer => "authorization",
            Auth::ApiKey => "api-key",
            Auth::XApiKey => wire::headers::X_API_KEY,
        }
    }

    /// The header's value for `key`.
    pub(crate) fn value(self, key: &str) -> String {
        match self {
            Auth::Bearer => format!("Bearer {key}"),
            Auth::ApiKey | Auth::XApiKey => key.to_string(),
        }
    }

    /// The header's line, CRLF included.
    pub(crate) fn line(self, key: &str) -> String {
        match self {
            Auth::Bearer => format!("authorization: Bearer {key}\r\n"),
            Auth::ApiKey | Auth::XApiKey => format!("{}: {key}\r\n", self.header()),
        }
    }
}

/// A piece of a header value as written in the scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Text(String),
    Tenant,
    /// `{provider_url}` (`None`: the first provider's) or
    /// `{provider_url:NAME}`.
    ProviderUrl(Option<String>),
    RequestId,
    Attempt,
}

/// A scenario header, its value split at its placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderTemplate {
    /// Lowercase, as HTTP/1.1 sends it here.
    pub(crate) name: HeaderName,
    pub(crate) parts: Vec<Part>,
}

/// The placeholders, each with what it stands for; a brace not opening
/// one of these is text (a header may carry JSON, as Portkey's config
/// header does).
const PLACEHOLDERS: [(&str, Part); 4] = [
    ("{tenant}", Part::Tenant),
    ("{provider_url}", Part::ProviderUrl(None)),
    ("{request_id}", Part::RequestId),
    ("{attempt}", Part::Attempt),
];

/// A named provider's placeholder opens so: `{provider_url:NAME}`.
const NAMED_OPEN: &str = "{provider_url:";

/// The placeholder `rest` begins with, and its length.
fn placeholder(rest: &str) -> Option<(Part, usize)> {
    if let Some((p, part)) = PLACEHOLDERS.iter().find(|(p, _)| rest.starts_with(p)) {
        return Some((part.clone(), p.len()));
    }
    let (name, _) = rest.strip_prefix(NAMED_OPEN)?.split_once('}')?;
    wire::is_provider_name(name).then(|| {
        (
            Part::ProviderUrl(Some(name.to_string())),
            NAMED_OPEN.len() + name.len() + 1,
        )
    })
}

/// Splits `value` at its placeholders.
fn split(value: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = value;
    while !rest.is_empty() {
        if let Some((part, len)) = placeholder(rest) {
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            parts.push(part);
            rest = &rest[len..];
        } else {
            let c = rest.chars().next().expect("rest is not empty");
            text.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    parts
}

/// The scenario's headers, checked and split: each name a valid header
/// name and none of `own` (the headers the load generator sets itself),
/// each value free of CR, LF and other bytes a header value cannot hold
/// (its placeholders are filled with ids, digits and tenant names, which
/// are checked when the head is made). An error names the header and
/// what is wrong.
pub(crate) fn templates(
    headers: &BTreeMap<String, String>,
    own: &[&str],
) -> Result<Vec<HeaderTemplate>, (String, String)> {
    let mut out: Vec<HeaderTemplate> = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let fail = |m: String| Err((name.clone(), m));
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            return fail(format!("{name:?} is not a header name"));
        };
        if let Some(o) = own.iter().find(|o| header.as_str() == **o) {
            return fail(format!(
                "the load generator sets `{o}` itself; a scenario header may not"
            ));
        }
        if out.iter().any(|t| t.name == header) {
            return fail(format!(
                "`{header}` is given twice (names are not case-sensitive)"
            ));
        }
        if value.contains(['\r', '\n']) {
            return fail("a header value may not hold CR or LF".into());
        }
        if HeaderValue::from_str(value).is_err() {
            return fail("is not a valid header value (control characters or non-ASCII)".into());
        }
        let parts = split(value);
        // A `{provider_url:` left in the text opens no placeholder: a typo
        // that would otherwise be sent as it is.
        if parts
            .iter()
            .any(|p| matches!(p, Part::Text(t) if t.contains(NAMED_OPEN)))
        {
            return fail(format!(
                "`{NAMED_OPEN}` opens no placeholder: it is `{NAMED_OPEN}NAME}}`, NAME 1 to 64 of a-z, 0-9, _ and - (a scenario's provider)"
            ));
        }
        out.push(HeaderTemplate {
            name: header,
            parts,
        });
    }
    Ok(out)
}

impl HeaderTemplate {
    /// The value for one request, its placeholders filled, for a client
    /// that sends headers by name (the calibration sweep's). Errors with
    /// the placeholder (`{provider_url}` or `{provider_url:NAME}`) when it
    /// needs a provider URL that `urls` does not have.
    pub(crate) fn value(
        &self,
        tenant: &str,
        (id, attempt): (&str, u32),
        urls: &[(String, String)],
    ) -> Result<String, String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Tenant => out.push_str(tenant),
                Part::ProviderUrl(name) => match url_of(urls, name.as_deref()) {
                    Some(url) => out.push_str(url),
                    None => {
                        return Err(match name {
                            None => "{provider_url}".to_string(),
                            Some(n) => format!("{NAMED_OPEN}{n}}}"),
                        })
                    }
                },
                Part::RequestId => out.push_str(id),
                Part::Attempt => out.push_str(itoa::Buffer::new().format(attempt)),
            }
        }
        Ok(out)
    }
}

/// A path given in the scenario: it must begin with `/`, and it and its
/// query string must be valid in a request line.
pub(crate) fn check_path(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} must begin with `/`"));
    }
    match path.parse::<http::uri::PathAndQuery>() {
        Ok(p) if p.as_str() == path => Ok(path.to_string()),
        _ => Err(format!(
            "{path:?} is not a valid path (spaces, control characters?)"
        )),
    }
}

/// The request target: the target's base path, `path`, and the query
/// strings of both (the path's first, the target's after it).
pub(crate) fn request_target(base_path: &str, path: &str, target_query: Option<&str>) -> String {
    let mut out = format!("{base_path}{path}");
    if let Some(q) = target_query.filter(|q| !q.is_empty()) {
        out.push(if path.contains('?') { '&' } else { '?' });
        out.push_str(q);
    }
    out
}

/// The URL a provider placeholder stands for in `urls` (name, base URL;
/// the first is `{provider_url}`'s): `name`'s, or the first's.
fn url_of<'a>(urls: &'a [(String, String)], name: Option<&str>) -> Option<&'a str> {
    match name {
        None => urls.first(),
        Some(n) => urls.iter().find(|(k, _)| k == n),
    }
    .map(|(_, u)| u.as_str())
}

/// Why a header's provider placeholder has no URL in `urls`.
fn no_url(header: &HeaderName, name: Option<&str>, urls: &[(String, String)]) -> String {
    let how = "it is filled in a rehearsal, or by `rehearse load --provider-url [NAME=]URL`";
    match (name, urls.is_empty()) {
        (None, _) | (Some(_), true) => format!(
            "header `{header}` needs {{provider_url{}}}, and this load knows no provider ({how})",
            name.map(|n| format!(":{n}")).unwrap_or_default()
        ),
        (Some(n), false) => format!(
            "header `{header}` needs {{provider_url:{n}}}, and this load knows no provider {n:?} (it knows {}; {how})",
            urls.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// A piece of the per-request part of a head.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Bytes(Box<[u8]>),
    RequestId,
    Attempt,
}

/// One shape's head for one tenant, made once when the run starts: the
/// fixed prefix (request line, host, content type, the key, the headers
/// that need nothing of the request) and the pieces of the headers that
/// need the request id or the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) prefix: Vec<u8>,
    pieces: Vec<Piece>,
}

impl Head {
    /// The head of `headers` for `tenant`, after `prefix` (whose lines end
    /// in CRLF), the provider placeholders filled from `urls` (name, base
    /// URL; the first is `{provider_url}`'s). Errors if `tenant` or a URL
    /// cannot be written in a header value, or a header needs a URL that
    /// `urls` does not have.
    pub(crate) fn new(
        mut prefix: Vec<u8>,
        headers: &[HeaderTemplate],
        tenant: &str,
        urls: &[(String, String)],
    ) -> Result<Head, String> {
        let mut pieces = Vec::new();
        for h in headers {
            let per_request = h
                .parts
                .iter()
                .any(|p| matches!(p, Part::RequestId | Part::Attempt));
            let mut line = Vec::new();
            line.extend_from_slice(h.name.as_str().as_bytes());
            line.extend_from_slice(b": ");
            for p in &h.parts {
                match p {
                    Part::Text(t) => line.extend_from_slice(t.as_bytes()),
                    Part::Tenant => {
                        if HeaderValue::from_str(tenant).is_err() {
                            return Err(format!(
                                "header `{}`: the tenant name {tenant:?} cannot be sent in a header",
                                h.name
                            ));
                        }
                        line.extend_from_slice(tenant.as_bytes());
                    }
                    Part::ProviderUrl(name) => match url_of(urls, name.as_deref()) {
                        Some(url) if HeaderValue::from_str(url).is_ok() => {
                            line.extend_from_slice(url.as_bytes());
                        }
                        Some(url) => {
                            return Err(format!(
                                "header `{}`: the provider URL {url:?} cannot be sent in a header",
                                h.name
                            ))
                        }
                        None => return Err(no_url(&h.name, name.as_deref(), urls)),
                    },
                    Part::RequestId | Part::Attempt => {
                        pieces.push(Piece::Bytes(std::mem::take(&mut line).into()));
                        pieces.push(match p {
                            Part::RequestId => Piece::RequestId,
                            _ => Piece::Attempt,
                        });
                    }
                }
            }
            line.extend_from_slice(b"\r\n");
            if per_request {
                pieces.push(Piece::Bytes(line.into()));
            } else {
                prefix.extend_from_slice(&line);
            }
        }
        // Neighbouring bytes merged: fewer copies per request.
        let mut merged: Vec<Piece> = Vec::with_capacity(pieces.len());
        for p in pieces {
            match (merged.last_mut(), p) {
                (_, Piece::Bytes(b)) if b.is_empty() => {}
                (Some(Piece::Bytes(a)), Piece::Bytes(b)) => {
                    let mut v = std::mem::take(a).into_vec();
                    v.extend_from_slice(&b);
                    *a = v.into();
                }
                (_, p) => merged.push(p),
            }
        }
        Ok(Head {
            prefix,
            pieces: merged,
        })
    }

    /// The length the per-request headers add beyond their pieces' bytes'
    /// upper bound: for the buffer's capacity.
    pub(crate) fn pieces_len(&self, id: &str) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Bytes(b) => b.len(),
                Piece::RequestId => id.len(),
                Piece::Attempt => 10,
            })
            .sum()
    }

    /// Appends the per-request headers of attempt `attempt` of `id`.
    pub(crate) fn put_pieces(&self, out: &mut Vec<u8>, id: &str, attempt: u32) {
        for p in &self.pieces {
            match p {
                Piece::Bytes(b) => out.extend_from_slice(b),
                // Request ids are validated header-safe (wire::is_request_id).
                Piece::RequestId => out.extend_from_slice(id.as_bytes()),
                Piece::Attempt => {
                    out.extend_from_slice(itoa::Buffer::new().format(attempt).as_bytes())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn values_are_split_at_their_placeholders_only() {
        assert_eq!(
            split("app-{tenant}/{request_id}#{attempt}{x}"),
            vec![
                Part::Text("app-".into()),
                Part::Tenant,
                Part::Text("/".into()),
                Part::RequestId,
                Part::Text("#".into()),
                Part::Attempt,
                Part::Text("{x}".into()),
            ]
        );
        assert_eq!(split(r#"{"provider":"openai"}"#).len(), 1);
        assert!(split("").is_empty());
    }

    #[test]
    fn bad_names_values_and_clashes_are_refused() {
        let own = ["host", "content-length", "x-request-id", "authorization"];
        let refused = |pairs: &[(&str, &str)]| templates(&headers(pairs), &own).unwrap_err();
        assert!(refused(&[("bad name", "v")])
            .1
            .contains("not a header name"));
        assert!(refused(&[("x-a", "v\r\nx-b: w")]).1.contains("CR or LF"));
        assert!(refused(&[("x-a", "v\u{7}")])
            .1
            .contains("not a valid header value"));
        for clash in ["Host", "content-length", "X-Request-Id", "authorization"] {
            let (name, m) = refused(&[(clash, "v")]);
            assert_eq!(name, clash);
            assert!(m.contains("sets"), "{m}");
        }
        assert!(refused(&[("X-A", "1"), ("x-a", "2")]).1.contains("twice"));
        let ok = templates(&headers(&[("X-Portkey-Provider", "openai")]), &own).unwrap();
        assert_eq!(ok[0].name.as_str(), "x-portkey-provider");
    }

    #[test]
    fn heads_put_fixed_headers_in_the_prefix_and_fill_the_rest() {
        let t = templates(
            &headers(&[
                ("x-app", "{tenant}"),
                ("x-trace", "t-{request_id}-{attempt}"),
                ("x-plain", "v"),
            ]),
            &[],
        )
        .unwrap();
        let head = Head::new(b"POST / HTTP/1.1\r\n".to_vec(), &t, "shop", &[]).unwrap();
        assert_eq!(
            String::from_utf8(head.prefix.clone()).unwrap(),
            "POST / HTTP/1.1\r\nx-app: shop\r\nx-plain: v\r\n"
        );
        let mut out = Vec::new();
        head.put_pieces(&mut out, "r000007", 2);
        assert_eq!(String::from_utf8(out).unwrap(), "x-trace: t-r000007-2\r\n");
        assert_eq!(head.pieces.len(), 5, "{:?}", head.pieces);
        assert!(head.pieces_len("r000007") >= "x-trace: t-r000007-2\r\n".len());
        assert!(Head::new(Vec::new(), &t, "caf\u{e9}\n", &[]).is_err());
        let t = templates(
            &headers(&[("x-portkey-custom-host", "{provider_url}/v1")]),
            &[],
        )
        .unwrap();
        assert_eq!(
            t[0].parts,
            vec![Part::ProviderUrl(None), Part::Text("/v1".into())]
        );
        let one = [("default".to_string(), "http://127.0.0.1:9".to_string())];
        let head = Head::new(Vec::new(), &t, "default", &one).unwrap();
        assert_eq!(
            head.prefix,
            b"x-portkey-custom-host: http://127.0.0.1:9/v1\r\n"
        );
        assert!(Head::new(Vec::new(), &t, "default", &[])
            .unwrap_err()
            .contains("needs {provider_url}"));
    }

    /// `{provider_url:NAME}` is provider NAME's URL (a Portkey fallback
    /// config names each target's host), `{provider_url}` the first's; a
    /// name the load does not know is an error naming the ones it does,
    /// and a `{provider_url:` that opens no placeholder is refused.
    #[test]
    fn named_provider_urls_fill_their_placeholders() {
        let config = r#"{"strategy":{"mode":"fallback"},"targets":[{"custom_host":"{provider_url:primary}/v1"},{"custom_host":"{provider_url:backup-eu}/v1"}]}"#;
        let t = templates(
            &headers(&[("x-portkey-config", config), ("x-first", "{provider_url}")]),
            &[],
        )
        .unwrap();
        // In name order: x-first, then x-portkey-config.
        assert_eq!(t[0].parts, [Part::ProviderUrl(None)]);
        assert!(t[1]
            .parts
            .contains(&Part::ProviderUrl(Some("backup-eu".into()))));
        let urls = [
            ("primary".to_string(), "http://127.0.0.1:1".to_string()),
            ("backup-eu".to_string(), "http://127.0.0.1:2".to_string()),
        ];
        let head = Head::new(Vec::new(), &t, "default", &urls).unwrap();
        let text = String::from_utf8(head.prefix).unwrap();
        assert!(
            text.contains(
                r#""custom_host":"http://127.0.0.1:1/v1"},{"custom_host":"http://127.0.0.1:2/v1"}"#
            ),
            "{text}"
        );
        assert!(text.contains("x-first: http://127.0.0.1:1\r\n"), "{text}");
        assert_eq!(
            t[0].value("default", ("r1", 1), &urls).as_deref(),
            Ok("http://127.0.0.1:1")
        );
        // Without the URLs: the placeholder that needs one, as written.
        assert_eq!(
            t[0].value("default", ("r1", 1), &[]).unwrap_err(),
            "{provider_url}"
        );
        assert_eq!(
            t[1].value("default", ("r1", 1), &urls[..1]).unwrap_err(),
            "{provider_url:backup-eu}"
        );
        let err = Head::new(Vec::new(), &t, "default", &urls[..1]).unwrap_err();
        assert!(err.contains("needs {provider_url:backup-eu}"), "{err}");
        assert!(err.contains("it knows primary"), "{err}");
        let err = Head::new(Vec::new(), &t, "default", &[]).unwrap_err();
        assert!(err.contains("knows no provider ("), "{err}");
        for bad in [
            "{provider_url:Primary}",
            "{provider_url:primary",
            "{provider_url:}",
        ] {
            let err = templates(&headers(&[("x-h", bad)]), &[]).unwrap_err();
            assert_eq!(err.0, "x-h");
            assert!(err.1.contains("opens no placeholder"), "{bad}: {}", err.1);
        }
    }

    #[test]
    fn paths_keep_their_query_and_the_targets() {
        assert!(check_path("v1/chat").is_err());
        assert!(check_path("/v1/a b").is_err());
        let p =
            check_path("/openai/deployments/m/chat/completions?api-version=2024-10-21").unwrap();
        assert_eq!(
            request_target("/base", &p, Some("x=1")),
            "/base/openai/deployments/m/chat/completions?api-version=2024-10-21&x=1"
        );
        assert_eq!(
            request_target("", "/v1/responses", Some("k=v")),
            "/v1/responses?k=v"
        );
        assert_eq!(request_target("", "/v1/responses", None), "/v1/responses");
    }
}
