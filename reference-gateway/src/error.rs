//! The errors this library returns.

pub use toml_located::ConfigError;

/// Why a gateway could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A configuration value is unusable; `field` names it.
    #[error("invalid configuration: field `{field}`: {message}")]
    InvalidConfig {
        /// Dotted path of the offending field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The listener handed to the gateway has no local address.
    #[error("the listener has no local address: {0}")]
    Listener(#[source] std::io::Error),
}
