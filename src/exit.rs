//! How `rehearse` ends: one error type, one mapping to an exit code (0
//! pass, 1 a check failed, 2 bad input, 3 invalid, partial or not made;
//! `rehearse --help` says when, and 130 is a second signal's: `runtime`).

use std::process::ExitCode;

/// How a subcommand that did its work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every check passed, or a server ended cleanly.
    Pass,
    /// A check failed.
    Fail,
    /// The run cannot be trusted: the harness missed its schedule, or it
    /// was interrupted (partial).
    Invalid,
}

impl From<assertions::Status> for Ended {
    fn from(status: assertions::Status) -> Self {
        match status {
            assertions::Status::Pass => Ended::Pass,
            assertions::Status::Fail => Ended::Fail,
            assertions::Status::Invalid | assertions::Status::Skipped | assertions::Status::Off => {
                Ended::Invalid
            }
        }
    }
}

/// What kind of failure an [`Error`] is, which fixes its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A scenario, a config file or a flag is wrong (exit 2).
    BadInput,
    /// The work could not be done: a runtime, a listener, a gateway, a run
    /// directory (exit 3).
    Invalid,
}

/// Why a subcommand could not do its work: the one error type of the binary.
#[derive(Debug)]
pub struct Error {
    /// Its exit-code class.
    pub kind: Kind,
    /// What went wrong, with its context.
    pub cause: anyhow::Error,
}

impl Error {
    /// A bad-input error (exit 2).
    pub fn bad_input(cause: impl Into<anyhow::Error>) -> Error {
        Error {
            kind: Kind::BadInput,
            cause: cause.into(),
        }
    }

    /// A could-not-run error (exit 3).
    pub fn invalid(cause: impl Into<anyhow::Error>) -> Error {
        Error {
            kind: Kind::Invalid,
            cause: cause.into(),
        }
    }
}

impl From<harness::RunError> for Error {
    fn from(e: harness::RunError) -> Self {
        match e.kind() {
            harness::RunErrorKind::BadInput => Error::bad_input(e),
            harness::RunErrorKind::Invalid => Error::invalid(e),
        }
    }
}

impl From<harness::ScenarioError> for Error {
    fn from(e: harness::ScenarioError) -> Self {
        Error::bad_input(e)
    }
}

/// Classes a library's error as [`Error`]: `.bad_input()?` or `.invalid()?`.
pub trait Classify<T> {
    /// The error is bad input (exit 2).
    fn bad_input(self) -> Result<T, Error>;
    /// The error means the work could not be done (exit 3).
    fn invalid(self) -> Result<T, Error>;
}

impl<T, E: Into<anyhow::Error>> Classify<T> for Result<T, E> {
    fn bad_input(self) -> Result<T, Error> {
        self.map_err(Error::bad_input)
    }

    fn invalid(self) -> Result<T, Error> {
        self.map_err(Error::invalid)
    }
}

/// The exit code of a subcommand's result; an error is printed here, once,
/// as `error: {:#}` (the context and its causes on one line).
pub fn exit_code(result: Result<Ended, Error>) -> ExitCode {
    ExitCode::from(code(result))
}

fn code(result: Result<Ended, Error>) -> u8 {
    match result {
        Ok(Ended::Pass) => 0,
        Ok(Ended::Fail) => 1,
        Ok(Ended::Invalid) => 3,
        Err(e) => {
            eprintln!("error: {}", one_line(&e.cause));
            match e.kind {
                Kind::BadInput => 2,
                Kind::Invalid => 3,
            }
        }
    }
}

/// `{:#}`, except that a cause whose text already ends the line is not
/// repeated: several library errors print their source and also expose it
/// (`cannot read x.toml: No such file…`, then `No such file…` again).
fn one_line(cause: &anyhow::Error) -> String {
    let mut line = String::new();
    for c in cause.chain() {
        let text = c.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_and_error_kind_has_its_code() {
        assert_eq!(code(Ok(Ended::Pass)), 0);
        assert_eq!(code(Ok(Ended::Fail)), 1);
        assert_eq!(code(Ok(Ended::Invalid)), 3);
        assert_eq!(code(Err(anyhow::anyhow!("x")).bad_input()), 2);
        assert_eq!(code(Err(anyhow::anyhow!("x")).invalid()), 3);
        let run = harness::RunError::Exists {
            path: "x.toml".into(),
        };
        assert_eq!(code(Err(run.into())), 2);
        let run = harness::RunError::NoFreePort(std::io::Error::other("x"));
        assert_eq!(code(Err(run.into())), 3);
    }

    #[test]
    fn a_cause_already_printed_is_not_repeated() {
        let io = std::io::Error::other("gone");
        let e = anyhow::Error::new(io).context("cannot read x.toml: gone");
        assert_eq!(
            one_line(&e.context("--config")),
            "--config: cannot read x.toml: gone"
        );
        let e = anyhow::Error::new(std::io::Error::other("gone")).context("cannot read x.toml");
        assert_eq!(one_line(&e), format!("{e:#}"));
    }
}
