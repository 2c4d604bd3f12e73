//! The binary's end-to-end tests, one test binary (STYLE.md: one
//! integration binary per crate, topic modules inside): one link instead
//! of one per file, and the short tests run beside the rehearsals, which
//! take turns ([`common::one_at_a_time`]). Each topic is a file beside
//! this one; `tests/architecture.rs` checks that every file is listed here
//! (the package sets `autotests = false`, so an unlisted file would never
//! run).

mod common;

mod amplification;
mod architecture;
mod calibrate;
mod cancel_on_hangup;
mod checklist;
mod cli;
mod compare;
mod deploy;
mod doc_links;
mod docs;
mod external;
mod failover;
mod flash;
mod frontdoor;
mod gateways;
mod incidents;
mod kubernetes;
mod memory;
mod metrics;
mod multihost;
mod partial;
mod provider_admin;
mod providers;
mod recovery;
mod refusals;
mod routers;
mod staging;
mod stream_intact;
mod terminal;
mod tls;
mod verdicts;
