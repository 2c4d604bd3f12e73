//! The harness's own HTTP clients (the gateway's readiness and memory
//! metric, a remote provider's admin API): they trust what the load
//! generator trusts and resolve names as it does.
//!
//! The rooms:
//! - `tls`: the trust (the public roots plus `--ca-file`, or anything with
//!   `--insecure`) and client of the harness's own calls;
//! - `resolve`: host names resolved as the load generator resolves them,
//!   never through glibc's NSS.

pub(crate) mod resolve;
pub(crate) mod tls;
