//! Host names to addresses without the C library's name service switch.
//!
//! `rehearse` is shipped as one statically linked binary in a `FROM
//! scratch` image: there is no `/etc/nsswitch.conf` and no NSS module for
//! glibc's `getaddrinfo` to load, yet a target or a provider is named by a
//! host name (a Kubernetes Service). Every name the harness and the load
//! generator connect to goes through [`resolve`]: an IP literal as it is,
//! `localhost` as loopback, any other name by `/etc/hosts`, then the DNS
//! servers, search domains and `ndots` of `/etc/resolv.conf` (hickory's
//! stub resolver), both read afresh at each call (a call is made once per
//! run or per new connection, never per request).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hickory_resolver::config::ResolverConfig;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;

/// The addresses of `host` (a name, an IPv4 literal or an IPv6 literal,
/// bracketed or not), each with `port`, in the resolver's order.
pub async fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let name = bare.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        // RFC 6761: loopback, whatever a hosts file says.
        return Ok(vec![
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port),
        ]);
    }
    let lookup = resolver()
        .lookup_ip(bare)
        .await
        .map_err(|e| io::Error::other(format!("cannot resolve `{bare}`: {e}")))?;
    let addrs: Vec<SocketAddr> = lookup.iter().map(|ip| SocketAddr::new(ip, port)).collect();
    if addrs.is_empty() {
        return Err(io::Error::other(format!("`{bare}` has no address")));
    }
    Ok(addrs)
}

/// [`resolve`] for `host:port` (`[v6]:port` for an IPv6 literal).
pub async fn resolve_authority(host_port: &str) -> io::Result<Vec<SocketAddr>> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{host_port}` is not host:port"),
        )
    };
    let (host, port) = host_port.rsplit_once(':').ok_or_else(invalid)?;
    let port = port.parse().map_err(|_| invalid())?;
    resolve(host, port).await
}

/// A stub resolver from `/etc/resolv.conf` and `/etc/hosts`; without a
/// usable `resolv.conf`, one that knows only the hosts file.
fn resolver() -> TokioResolver {
    let builder = TokioResolver::builder_tokio().unwrap_or_else(|_| {
        TokioResolver::builder_with_config(
            ResolverConfig::from_parts(None, vec![], vec![]),
            TokioRuntimeProvider::default(),
        )
    });
    builder.build().unwrap_or_else(|_| {
        TokioResolver::builder_with_config(
            ResolverConfig::from_parts(None, vec![], vec![]),
            TokioRuntimeProvider::default(),
        )
        .build()
        .expect("a resolver without name servers builds")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn literals_and_localhost_need_no_lookup() {
        let v4: SocketAddr = "10.0.0.7:80".parse().unwrap();
        assert_eq!(resolve("10.0.0.7", 80).await.unwrap(), [v4]);
        let v6: SocketAddr = "[fd00::1]:8080".parse().unwrap();
        assert_eq!(resolve("[fd00::1]", 8080).await.unwrap(), [v6]);
        assert_eq!(resolve("fd00::1", 8080).await.unwrap(), [v6]);
        assert_eq!(resolve_authority("[fd00::1]:8080").await.unwrap(), [v6]);
        let local = resolve_authority("localhost:9").await.unwrap();
        assert_eq!(local[0], "127.0.0.1:9".parse::<SocketAddr>().unwrap());
        assert!(resolve_authority("no-port").await.is_err());
    }

    /// A name from /etc/hosts (every machine names itself there, and
    /// Debian writes `localhost` and `ip6-localhost`).
    #[tokio::test]
    async fn names_in_the_hosts_file_resolve() {
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let Some((ip, name)) = hosts.lines().find_map(|l| {
            let mut words = l.split('#').next()?.split_whitespace();
            let ip: IpAddr = words.next()?.parse().ok()?;
            let name = words.find(|n| !n.contains("localhost"))?;
            Some((ip, name.to_string()))
        }) else {
            panic!("/etc/hosts names no host but localhost");
        };
        let addrs = resolve(&name, 443).await.unwrap();
        assert!(
            addrs.contains(&SocketAddr::new(ip, 443)),
            "{name}: {addrs:?}"
        );
    }
}
