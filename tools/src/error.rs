//! `CliError`: why a networked `tern` command failed, worded for the
//! operator (what was being done, against what, and the server's or the
//! system's reason). `main` prints it on one line and exits 1.

use std::time::Duration;

use crate::units::UnitError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot connect to {server}: {source}")]
    Connect {
        server: String,
        source: async_nats::ConnectError,
    },
    #[error("cannot connect to {server}: no connection within {}", crate::units::format_duration(*timeout))]
    ConnectTimeout { server: String, timeout: Duration },
    #[error("cannot read {what} {path}: {source}")]
    ReadFile {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{flag}: {source}")]
    Unit {
        flag: &'static str,
        source: UnitError,
    },
    #[error("{0}")]
    Usage(String),
    /// The JetStream API answered with an error object.
    #[error("{action}: {description} (code {code}, err_code {err_code})")]
    Api {
        action: String,
        code: i64,
        err_code: i64,
        description: String,
    },
    #[error("{action}: no responders on {subject}{hint}")]
    NoResponders {
        action: String,
        subject: String,
        /// What missing responders mean on this subject, if known.
        hint: &'static str,
    },
    #[error("{action}: no answer within {}", crate::units::format_duration(*timeout))]
    Timeout { action: String, timeout: Duration },
    #[error("{action}: {source}")]
    Request {
        action: String,
        source: async_nats::RequestError,
    },
    #[error("{action}: the server's answer is not the JSON expected: {detail}")]
    BadAnswer { action: String, detail: String },
    #[error("{action}: {source}")]
    Client {
        action: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{action}: {source}")]
    Io {
        action: String,
        source: std::io::Error,
    },
    #[error("{action}: {reason}")]
    Failed { action: String, reason: String },
}

impl CliError {
    pub fn unit(flag: &'static str) -> impl FnOnce(UnitError) -> CliError {
        move |source| CliError::Unit { flag, source }
    }

    pub fn client<E>(action: impl Into<String>) -> impl FnOnce(E) -> CliError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let action = action.into();
        move |source| CliError::Client {
            action,
            source: Box::new(source),
        }
    }

    pub fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
        let action = action.into();
        move |source| CliError::Io { action, source }
    }
}
