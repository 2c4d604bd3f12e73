//! The async runtime every subcommand that serves or sends runs on, and how
//! Ctrl-C and SIGTERM stop it.
//!
//! [`block_on`] builds the runtime and registers for both signals before
//! the subcommand's work starts (before any address is printed: whoever
//! reads it may signal at once). The first signal cancels the work's
//! [`CancellationToken`]: the load stops and a partial report is written,
//! a server drains and exits 0. A second one exits at once with 130, after
//! ending the gateway's process group if a run had started one.

use std::future::Future;

use anyhow::Context as _;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::exit::{Classify as _, Error};

/// Builds the runtime (multi-thread, `threads` workers or one per core),
/// registers for Ctrl-C and SIGTERM, and runs `work` with the token the
/// first signal cancels; `note` is printed on stderr when it comes. Tasks
/// left when `work` returns are dropped, not waited for (a hanging
/// connection must not hold the exit).
pub fn block_on<F, T>(
    threads: Option<usize>,
    note: Option<String>,
    work: impl FnOnce(CancellationToken) -> F,
) -> Result<T, Error>
where
    F: Future<Output = Result<T, Error>>,
{
    // The multi-thread scheduler even for one worker: measured against the
    // current-thread one (bench/gateway), it adds less latency per hop.
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = threads {
        builder.worker_threads(n);
    }
    let runtime = builder
        .build()
        .context("cannot start the async runtime")
        .invalid()?;
    let cancel = CancellationToken::new();
    let result = runtime.block_on(async {
        stop_on_signals(cancel.clone(), note)?;
        work(cancel).await
    });
    runtime.shutdown_background();
    result
}

/// Registers for Ctrl-C and SIGTERM now (so a signal from here on is
/// never the default action, which would kill the process), then watches
/// them: the first cancels `cancel`, the second exits with 130.
fn stop_on_signals(cancel: CancellationToken, note: Option<String>) -> Result<(), Error> {
    let listen = |kind: SignalKind, name: &str| {
        signal(kind)
            .with_context(|| format!("cannot listen for {name}"))
            .invalid()
    };
    let mut term = listen(SignalKind::terminate(), "SIGTERM")?;
    let mut int = listen(SignalKind::interrupt(), "Ctrl-C")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        if let Some(note) = note {
            eprintln!("\n{note}");
        }
        cancel.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        // Exit now, but leave no gateway behind.
        harness::kill_live_group();
        std::process::exit(130);
    });
    Ok(())
}
