//! The harness's own HTTP clients resolve host names as the load generator
//! does ([`loadgen::resolve`]: `/etc/hosts`, then `/etc/resolv.conf`'s
//! DNS), never through glibc's NSS, which a static binary in a scratch
//! image does not have. Every `reqwest` client of the harness is made by
//! [`client`].

use std::sync::Arc;

/// `reqwest`'s name lookups through [`loadgen::resolve`].
struct NssFree;

impl reqwest::dns::Resolve for NssFree {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            // reqwest sets the URL's port on each address itself.
            let addrs = loadgen::resolve(&host, 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A `reqwest` client builder whose name lookups need no NSS.
pub(crate) fn client() -> reqwest::ClientBuilder {
    reqwest::Client::builder().dns_resolver(Arc::new(NssFree))
}
