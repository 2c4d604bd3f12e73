//! Where the load goes: a [`Target`] parsed from its URL, and the probes
//! that check it accepts connections (and TLS sessions) before a run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Uri;

use super::LoadRunError;
use crate::http1::TlsTarget;
use crate::tls::TlsOptions;

/// Where requests go: an `http://` or `https://host:port[/base]` URL.
#[derive(Debug, Clone)]
pub struct Target {
    pub(super) authority: String,
    pub(super) base_path: String,
    /// The URL's query string, sent after the path's own.
    pub(super) query: Option<String>,
    host_port: String,
    /// `https://`: the host, as the certificate must name it (and as SNI).
    tls_host: Option<String>,
}

/// Why a target URL is not usable.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Not a URL.
    #[error("`{url}` is not a URL: {cause}")]
    NotAUrl {
        /// The text given.
        url: String,
        /// The parser's complaint.
        cause: String,
    },
    /// Neither HTTP nor HTTPS.
    #[error("`{url}`: only http:// and https:// targets are supported")]
    Scheme {
        /// The text given.
        url: String,
    },
}

impl Target {
    /// Parses `http[s]://host[:port][/base/path]`; request paths
    /// (`/v1/chat/completions`) are appended to the base path.
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| TargetError::NotAUrl {
                url: url.into(),
                cause: e.to_string(),
            })?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(TargetError::Scheme { url: url.into() }),
        };
        let authority = uri.authority().ok_or_else(|| TargetError::NotAUrl {
            url: url.into(),
            cause: "no host".into(),
        })?;
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let host = authority.host();
        let tls_host = match tls {
            true if crate::tls::server_name(host).is_none() => {
                return Err(TargetError::NotAUrl {
                    url: url.into(),
                    cause: format!("`{host}` cannot be a TLS server name"),
                })
            }
            true => Some(host.to_string()),
            false => None,
        };
        let base_path = uri.path().trim_end_matches('/');
        Ok(Target {
            authority: authority.as_str().to_string(),
            base_path: base_path.to_string(),
            query: uri.query().map(str::to_owned),
            host_port: format!("{host}:{port}"),
            tls_host,
        })
    }

    /// The full URL of `path` at this target.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.is_tls() { "https" } else { "http" };
        format!("{scheme}://{}{}{}", self.authority, self.base_path, path)
    }

    /// Whether this is an `https://` target.
    pub fn is_tls(&self) -> bool {
        self.tls_host.is_some()
    }

    /// How to open sessions with an `https://` target under `config`.
    pub(super) fn tls_target(&self, config: Arc<rustls::ClientConfig>) -> Option<TlsTarget> {
        let name = crate::tls::server_name(self.tls_host.as_deref()?)?;
        Some(TlsTarget {
            connector: config.into(),
            name,
        })
    }
}

/// Checks that the target accepts connections, within `within`; returns
/// the address that did (names are resolved once, here).
pub async fn probe(target: &Target, within: Duration) -> Result<SocketAddr, LoadRunError> {
    let unreachable = |cause: String| LoadRunError::Unreachable {
        target: target.host_port.clone(),
        cause,
    };
    let attempt = async {
        let mut last = None;
        for addr in crate::resolve::resolve_authority(&target.host_port).await? {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(_) => return Ok(addr),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("the name has no address")))
    };
    match tokio::time::timeout(within, attempt).await {
        Ok(Ok(addr)) => Ok(addr),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!(
            "no answer to a connect within {within:?}"
        ))),
    }
}

/// Checks that an `https://` target makes a TLS session under `tls`
/// within `within` (a TCP probe first); a plain target only gets the TCP
/// probe. A refused certificate fails at once, naming the problem.
pub async fn probe_tls(
    target: &Target,
    tls: &TlsOptions,
    within: Duration,
) -> Result<SocketAddr, LoadRunError> {
    let config = tls.client_config()?;
    let addr = probe(target, within).await?;
    if let Some(t) = target.tls_target(config) {
        handshake_probe(target, &t, addr, within).await?;
    }
    Ok(addr)
}

/// One TLS handshake with `addr`, within `within`.
pub(super) async fn handshake_probe(
    target: &Target,
    tls: &TlsTarget,
    addr: SocketAddr,
    within: Duration,
) -> Result<(), LoadRunError> {
    let failed = |cause: String| LoadRunError::Handshake {
        target: target.host_port.clone(),
        cause,
    };
    let attempt = async {
        let socket = tokio::net::TcpStream::connect(addr).await?;
        tls.handshake(socket).await
    };
    match tokio::time::timeout(within, attempt).await {
        Ok(Ok(_session)) => Ok(()),
        Ok(Err(e)) if crate::tls::is_certificate_error(&e) => Err(failed(format!(
            "{e}: the target's certificate is not trusted here (--ca-file PEM trusts a \
             private CA; --insecure accepts any certificate)"
        ))),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(_) => Err(failed(format!("no handshake within {within:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn target_urls() {
        let t = Target::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(t.url("/v1/messages"), "http://127.0.0.1:9000/v1/messages");
        assert_eq!(t.host_port, "127.0.0.1:9000");
        let t = Target::parse("http://gw.local/openai/").unwrap();
        assert_eq!(t.url("/v1/x"), "http://gw.local/openai/v1/x");
        assert_eq!(t.host_port, "gw.local:80");
        assert!(!t.is_tls());
        let t = Target::parse("https://a.b").unwrap();
        assert!(t.is_tls());
        assert_eq!(t.host_port, "a.b:443");
        assert_eq!(t.tls_host.as_deref(), Some("a.b"));
        assert_eq!(t.url("/v1/x"), "https://a.b/v1/x");
        let t = Target::parse("https://127.0.0.1:8443/gw").unwrap();
        assert_eq!(t.host_port, "127.0.0.1:8443");
        assert_eq!(t.url("/v1/x"), "https://127.0.0.1:8443/gw/v1/x");
        assert!(Target::parse("https://[::1]:8443").unwrap().is_tls());
        assert!(matches!(
            Target::parse("ftp://a.b"),
            Err(TargetError::Scheme { .. })
        ));
        assert!(Target::parse("not a url").is_err());
    }

    #[tokio::test]
    async fn unreachable_target_fails_fast() {
        // Bind then drop a listener: its port is now closed.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let t = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let began = Instant::now();
        let e = probe(&t, Duration::from_secs(3)).await.unwrap_err();
        assert!(began.elapsed() < Duration::from_secs(3));
        assert!(e.to_string().contains("unreachable"), "{e}");
    }
}
