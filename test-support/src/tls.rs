//! TLS in front of a plain server, for tests and benchmarks on loopback: a
//! private CA made on the spot ([`TestCa`], with rcgen), a server
//! certificate it signed for `localhost` and `127.0.0.1`, and a relay that
//! accepts TLS connections and carries each one's plaintext to an upstream
//! address ([`relay`]), as a TLS-terminating proxy in front of a staging
//! gateway does.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// A private CA and a server certificate it signed.
pub struct TestCa {
    /// The CA's certificate, PEM: what a client is given as `--ca-file`.
    pub ca_pem: String,
    /// A server configuration presenting the signed certificate (and the
    /// CA's after it), for `localhost` and `127.0.0.1`.
    pub server: Arc<rustls::ServerConfig>,
}

impl TestCa {
    /// A new CA (ECDSA P-256) and a server certificate for `localhost` and
    /// `127.0.0.1`, valid from now for a year.
    pub fn new() -> TestCa {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "rehearse test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("a CA key");
        let ca_cert = ca.self_signed(&ca_key).expect("the CA certificate");

        let mut leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()])
            .expect("server params");
        leaf.distinguished_name
            .push(DnType::CommonName, "localhost");
        let leaf_key = KeyPair::generate().expect("a server key");
        let leaf_cert = leaf
            .signed_by(&leaf_key, &ca_cert, &ca_key)
            .expect("the server certificate");

        let chain = vec![leaf_cert.der().clone(), ca_cert.der().clone()];
        TestCa {
            ca_pem: ca_cert.pem(),
            server: server_config(chain, &leaf_key),
        }
    }

    /// No CA: a self-signed certificate for `localhost` and `127.0.0.1`,
    /// as a staging server often has; `ca_pem` is that certificate.
    pub fn self_signed() -> TestCa {
        let key = KeyPair::generate().expect("a key");
        let cert = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()])
            .expect("params")
            .self_signed(&key)
            .expect("a self-signed certificate");
        TestCa {
            ca_pem: cert.pem(),
            server: server_config(vec![cert.der().clone()], &key),
        }
    }

    /// Writes the CA's PEM into `dir` as `ca.pem`; returns its path.
    pub fn write_ca(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.ca_pem).expect("write ca.pem");
        path
    }
}

/// A server configuration presenting `chain`, signed for by `key`.
fn server_config(chain: Vec<CertificateDer<'static>>, key: &KeyPair) -> Arc<rustls::ServerConfig> {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("a server configuration");
    Arc::new(server)
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

/// A relay serving until dropped.
pub struct Relay {
    /// Where it listens.
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Relay {
    /// `https://localhost:PORT` (the certificate's name) for a TLS relay.
    pub fn https_url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    /// Connections accepted so far (one TLS handshake each).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listens on 127.0.0.1:0 and relays every connection to `upstream`: over
/// TLS with `tls`'s certificate when given, else as plain TCP (the same
/// path without the TLS, for comparison).
pub async fn relay(tls: Option<&TestCa>, upstream: SocketAddr) -> io::Result<Relay> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let acceptor = tls.map(|ca| TlsAcceptor::from(ca.server.clone()));
    let accepted = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(serve(listener, acceptor, upstream, accepted.clone()));
    Ok(Relay {
        addr,
        accepted,
        task,
    })
}

/// Accepts on `listener` until the task is dropped, counting connections
/// in `accepted`.
pub async fn serve(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    upstream: SocketAddr,
    accepted: Arc<AtomicUsize>,
) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            // Out of descriptors, say: let the ones open finish first.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _ = socket.set_nodelay(true);
            let Ok(mut up) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = up.set_nodelay(true);
            match acceptor {
                // A failed handshake (the client refused the certificate)
                // just ends the connection.
                Some(a) => {
                    if let Ok(mut tls) = a.accept(socket).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                    }
                }
                None => {
                    let mut socket = socket;
                    let _ = tokio::io::copy_bidirectional(&mut socket, &mut up).await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_relay_carries_bytes_both_ways_over_tls() {
        for ca in [TestCa::new(), TestCa::self_signed()] {
            echo_through_relay(&ca).await;
        }
    }

    /// A client trusting `ca.ca_pem` alone (the CA, or the self-signed
    /// certificate itself) speaks through the relay.
    async fn echo_through_relay(ca: &TestCa) {
        // An upstream that echoes.
        let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up_addr = up.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = up.accept().await.unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(&b).await.unwrap();
        });
        let r = relay(Some(ca), up_addr).await.unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::pem::PemObject::pem_slice_iter(ca.ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let socket = TcpStream::connect(r.addr).await.unwrap();
        let mut tls = connector
            .connect("localhost".try_into().unwrap(), socket)
            .await
            .unwrap();
        tls.write_all(b"hello").await.unwrap();
        let mut b = [0u8; 5];
        tls.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hello");
        assert!(r.https_url().starts_with("https://localhost:"));
        assert_eq!(r.accepted(), 1);
    }
}
