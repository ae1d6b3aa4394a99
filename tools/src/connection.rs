//! How `tern` reaches a server: the `nats` CLI's connection flags and
//! environment variables (`-s/--server`/`NATS_URL`, `--user`, `--password`,
//! `--token`, `--nkey` seed file, `--tlscert`, `--tlskey`, `--tlsca`,
//! `--timeout`), turned into one async-nats connection. The first
//! connection attempt is the only one: an unreachable server is an error
//! within `--timeout`, not a retry loop.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::error::CliError;
use crate::units;

/// The default server, as the `nats` CLI's.
pub const DEFAULT_SERVER: &str = "nats://127.0.0.1:4222";

#[derive(Debug, Args, Clone)]
pub struct ConnectionArgs {
    /// NATS server URL(s), comma separated
    #[arg(short = 's', long = "server", global = true, env = "NATS_URL", value_name = "URL", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Username or NKey public key for user/password authentication
    #[arg(long, global = true, env = "NATS_USER", value_name = "USER")]
    pub user: Option<String>,
    /// Password for user/password authentication
    #[arg(
        long,
        alias = "pass",
        global = true,
        env = "NATS_PASSWORD",
        value_name = "PASSWORD"
    )]
    pub password: Option<String>,
    /// Token authentication
    #[arg(long, global = true, env = "NATS_TOKEN", value_name = "TOKEN")]
    pub token: Option<String>,
    /// Path to a file holding an NKey seed (SU...)
    #[arg(long, global = true, env = "NATS_NKEY", value_name = "FILE")]
    pub nkey: Option<PathBuf>,
    /// TLS client certificate file
    #[arg(long, global = true, env = "NATS_CERT", value_name = "FILE")]
    pub tlscert: Option<PathBuf>,
    /// TLS client private key file
    #[arg(long, global = true, env = "NATS_KEY", value_name = "FILE")]
    pub tlskey: Option<PathBuf>,
    /// TLS certificate authority chain file
    #[arg(long, global = true, env = "NATS_CA", value_name = "FILE")]
    pub tlsca: Option<PathBuf>,
    /// Time to wait for the connection and for each request (e.g. 5s, 500ms)
    #[arg(
        long,
        global = true,
        env = "NATS_TIMEOUT",
        value_name = "DURATION",
        default_value = "5s"
    )]
    pub timeout: String,
}

impl ConnectionArgs {
    pub fn timeout(&self) -> Result<Duration, CliError> {
        let timeout = units::parse_duration(&self.timeout).map_err(CliError::unit("--timeout"))?;
        if timeout.is_zero() {
            return Err(CliError::Usage("--timeout: must be more than 0".into()));
        }
        Ok(timeout)
    }

    /// The credentials `tern bench` gives every client it connects (its
    /// connections are its own: TLS from its `--tls-ca`).
    pub fn bench_credentials(&self) -> Result<tern_bench::measure::Credentials, CliError> {
        use tern_bench::measure::Credentials;
        if let Some(path) = &self.nkey {
            return Ok(Credentials::NkeySeed(read_seed(path)?));
        }
        if let Some(token) = &self.token {
            return Ok(Credentials::Token(token.clone()));
        }
        match (&self.user, &self.password) {
            (Some(user), password) => Ok(Credentials::UserPassword {
                user: user.clone(),
                password: password.clone().unwrap_or_default(),
            }),
            (None, Some(_)) => Err(CliError::Usage("--password needs --user".into())),
            (None, None) => Ok(Credentials::None),
        }
    }

    /// The client options these flags ask for (files read here, so a
    /// missing seed or certificate is named before any connection).
    pub fn options(&self) -> Result<async_nats::ConnectOptions, CliError> {
        let timeout = self.timeout()?;
        let mut options = async_nats::ConnectOptions::new()
            .name("tern")
            .connection_timeout(timeout)
            .request_timeout(Some(timeout))
            .max_reconnects(Some(1));
        match (&self.user, &self.password) {
            (Some(user), password) => {
                options =
                    options.user_and_password(user.clone(), password.clone().unwrap_or_default())
            }
            (None, Some(_)) => return Err(CliError::Usage("--password needs --user".into())),
            (None, None) => {}
        }
        if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        if let Some(path) = &self.nkey {
            options = options.nkey(read_seed(path)?);
        }
        match (&self.tlscert, &self.tlskey) {
            (Some(cert), Some(key)) => {
                for (what, path) in [("the TLS certificate", cert), ("the TLS key", key)] {
                    require_file(what, path)?;
                }
                options = options
                    .add_client_certificate(cert.clone(), key.clone())
                    .require_tls(true);
            }
            (None, None) => {}
            _ => return Err(CliError::Usage("--tlscert and --tlskey go together".into())),
        }
        if let Some(ca) = &self.tlsca {
            require_file("the TLS CA", ca)?;
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        Ok(options)
    }

    /// Connects, or says which server could not be reached and why.
    pub async fn connect(&self) -> Result<async_nats::Client, CliError> {
        let timeout = self.timeout()?;
        let options = self.options()?;
        let servers: Vec<String> = self
            .server
            .split(',')
            .map(str::trim)
            .filter(|server| !server.is_empty())
            .map(String::from)
            .collect();
        if servers.is_empty() {
            return Err(CliError::Usage("--server: no URL given".into()));
        }
        let addresses = servers
            .iter()
            .map(|server| server.parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| CliError::Usage(format!("--server {}: {error}", self.server)))?;
        match tokio::time::timeout(timeout, options.connect(addresses)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(source)) => Err(CliError::Connect {
                server: self.server.clone(),
                source,
            }),
            Err(_) => Err(CliError::ConnectTimeout {
                server: self.server.clone(),
                timeout,
            }),
        }
    }
}

fn require_file(what: &'static str, path: &std::path::Path) -> Result<(), CliError> {
    std::fs::metadata(path)
        .map(|_| ())
        .map_err(|source| CliError::ReadFile {
            what,
            path: path.display().to_string(),
            source,
        })
}

/// An NKey seed file's seed (surrounding white space trimmed).
fn read_seed(path: &std::path::Path) -> Result<String, CliError> {
    std::fs::read_to_string(path)
        .map(|seed| seed.trim().to_string())
        .map_err(|source| CliError::ReadFile {
            what: "the NKey seed",
            path: path.display().to_string(),
            source,
        })
}
