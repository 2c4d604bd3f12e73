//! The harness's own HTTP calls (the gateway's readiness, its memory
//! metric) trust what the load generator trusts: the same
//! [`loadgen::TlsOptions`] (the public roots plus `--ca-file`, or anything
//! under `--insecure`), as one rustls configuration handed to `reqwest`.

use loadgen::TlsOptions;

/// A `reqwest` client builder made to check certificates as `tls` says.
pub(crate) trait Trusting {
    /// The builder, its TLS configuration from `tls`. A CA file that cannot
    /// be read was refused before the run (`prepare`); here it leaves the
    /// builder as it was (trusting nothing), so a call fails rather than
    /// trusting more than was asked.
    fn trusting(self, tls: &TlsOptions) -> Self;
}

impl Trusting for reqwest::ClientBuilder {
    fn trusting(self, tls: &TlsOptions) -> Self {
        match tls.client_config() {
            Ok(config) => self.use_preconfigured_tls((*config).clone()),
            Err(_) => self,
        }
    }
}

/// `host:port` of a base URL, the port by its scheme when not written.
pub(crate) fn host_port(base: &str) -> Option<String> {
    let uri: http::Uri = base.parse().ok()?;
    let authority = uri.authority()?;
    let default = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    Some(format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(default)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_of_base_urls() {
        assert_eq!(
            host_port("http://127.0.0.1:9000/v1").as_deref(),
            Some("127.0.0.1:9000")
        );
        assert_eq!(
            host_port("https://gw.staging").as_deref(),
            Some("gw.staging:443")
        );
        assert_eq!(
            host_port("http://gw.staging/").as_deref(),
            Some("gw.staging:80")
        );
        assert_eq!(
            host_port("https://[::1]:8443").as_deref(),
            Some("[::1]:8443")
        );
        assert_eq!(host_port("not a url"), None);
    }

    #[tokio::test]
    async fn a_client_trusting_a_ca_file_reaches_a_tls_server() {
        use test_support::tls::{relay, TestCa};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // A plain server answering one request, behind a TLS relay.
        let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up_addr = up.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = up.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    let _ = s.read(&mut b).await;
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        let ca = TestCa::new();
        let r = relay(Some(&ca), up_addr).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("{}/ready", r.https_url());
        let get = |tls: TlsOptions| {
            let url = url.clone();
            async move {
                reqwest::Client::builder()
                    .trusting(&tls)
                    .build()
                    .unwrap()
                    .get(url)
                    .send()
                    .await
            }
        };
        let with_ca = TlsOptions {
            ca_file: Some(ca.write_ca(dir.path())),
            insecure: false,
        };
        assert_eq!(get(with_ca).await.unwrap().status(), 200);
        let e = get(TlsOptions::default()).await.unwrap_err();
        assert!(format!("{e:?}").contains("UnknownIssuer"), "{e:?}");
        let insecure = TlsOptions {
            ca_file: None,
            insecure: true,
        };
        assert_eq!(get(insecure).await.unwrap().status(), 200);
    }
}
