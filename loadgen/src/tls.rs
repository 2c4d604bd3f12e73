//! TLS for `https://` targets: rustls on the ring provider (no system
//! OpenSSL), trusting the Mozilla roots of `webpki-roots` plus the CA
//! certificates of a PEM file (`--ca-file`, a private CA), or, when asked
//! for explicitly, any certificate at all (`--insecure`, self-signed
//! staging).
//!
//! One [`rustls::ClientConfig`] serves a whole run: each new connection
//! makes its own handshake (resuming a session from the config's cache when
//! the server offers tickets), and a kept-alive connection keeps its
//! session for every request it carries.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How the certificates of `https://` targets are checked. The default
/// trusts the public roots alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// A PEM file of CA certificates trusted in addition to the public
    /// roots: a private CA's, or a self-signed certificate itself.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate, for any name: the connection is encrypted
    /// but the server is not authenticated. For self-signed staging only.
    pub insecure: bool,
}

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA file could not be read, or holds no usable certificate.
    #[error("--ca-file {path}: {cause}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        cause: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// What `--insecure` makes the tools say on stderr when they start.
pub const INSECURE_WARNING: &str = "warning: --insecure: TLS certificates are not checked \
     (any certificate is accepted for any name); use it for self-signed staging only";

impl TlsOptions {
    /// The client configuration these options describe: the ring provider,
    /// TLS 1.2 and 1.3, no ALPN (the client speaks HTTP/1.1 only).
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let config = if self.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(self.roots()?)
                .with_no_client_auth()
        };
        Ok(Arc::new(config))
    }

    /// The public roots, plus the CA file's certificates.
    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let Some(path) = &self.ca_file else {
            return Ok(roots);
        };
        let bad = |cause: String| TlsError::CaFile {
            path: path.clone(),
            cause,
        };
        let mut added = 0;
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
            let cert = cert.map_err(|e| bad(format!("not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
            added += 1;
        }
        if added == 0 {
            return Err(bad("no CERTIFICATE block in it".into()));
        }
        Ok(roots)
    }
}

/// The name a target's certificate must carry (and the SNI sent): its
/// host, a DNS name or an IP address.
pub(crate) fn server_name(host: &str) -> Option<ServerName<'static>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).ok()
}

/// Whether `e` (from a handshake) says the server's certificate was refused.
pub(crate) fn is_certificate_error(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        })
}

/// `--insecure`: every certificate is accepted; the handshake's signatures
/// are still checked against the certificate presented (so the session is
/// at least with the holder of that certificate's key).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_trusts_the_public_roots() {
        let roots = TlsOptions::default().roots().unwrap();
        assert!(roots.len() > 100, "{} roots", roots.len());
        assert!(TlsOptions::default().client_config().is_ok());
        let insecure = TlsOptions {
            insecure: true,
            ..TlsOptions::default()
        };
        assert!(insecure.client_config().is_ok());
    }

    #[test]
    fn a_ca_file_adds_its_certificates_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = test_support::tls::TestCa::new().write_ca(dir.path());
        let with = |p: &std::path::Path| TlsOptions {
            ca_file: Some(p.to_path_buf()),
            insecure: false,
        };
        let public = TlsOptions::default().roots().unwrap().len();
        assert_eq!(with(&good).roots().unwrap().len(), public + 1);

        let missing = dir.path().join("missing.pem");
        let e = with(&missing).client_config().unwrap_err().to_string();
        assert!(
            e.starts_with("--ca-file ") && e.contains("missing.pem"),
            "{e}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "just text\n").unwrap();
        let e = with(&empty).client_config().unwrap_err().to_string();
        assert!(e.contains("no CERTIFICATE"), "{e}");
        let garbled = dir.path().join("garbled.pem");
        std::fs::write(
            &garbled,
            "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        assert!(with(&garbled).client_config().is_err());
    }

    #[test]
    fn server_names_are_dns_names_or_addresses() {
        assert!(matches!(
            server_name("localhost"),
            Some(ServerName::DnsName(_))
        ));
        assert!(matches!(
            server_name("127.0.0.1"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("[::1]"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(server_name("bad name!").is_none());
    }
}
