//! Why a rehearsal could not be made, planned or judged.

use report::ReportError;

/// Why a run could not be made or finished.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The input is wrong (exit 2).
    #[error("{0}")]
    BadInput(String),
    /// The run could not be made (exit 3): the gateway did not start, the
    /// provider could not listen, the run directory could not be written.
    #[error("{0}")]
    Invalid(String),
}

impl From<ReportError> for RunError {
    fn from(e: ReportError) -> Self {
        RunError::Invalid(e.to_string())
    }
}
