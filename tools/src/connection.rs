//! How `tern` reaches a server: the `nats` CLI's global flags and
//! environment variables (`-s/--server`/`NATS_URL`, `--user`,
//! `--password`, `--token`, `--creds`, `--nkey` seed file, `--jwt` and
//! `--seed`, `--tlscert`, `--tlskey`, `--tlsca`, `--tlsfirst`,
//! `--timeout`, `--connection-name`, `--inbox-prefix`, `--js-api-prefix`,
//! `--js-domain`, `--context`, `--trace`, …), turned into one async-nats
//! connection and the JetStream API prefix. A `nats` context
//! (`~/.config/nats/context/NAME.json`, the selected one in
//! `context.txt`) fills in what neither a flag nor the environment gave.
//! The first connection attempt is the only one: an unreachable server is
//! an error within `--timeout`, not a retry loop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::api::Api;
use crate::error::CliError;
use crate::units;

/// The default server, as the `nats` CLI's.
pub const DEFAULT_SERVER: &str = "nats://127.0.0.1:4222";
/// The JetStream API's subject prefix when no domain or prefix is given.
pub const DEFAULT_API_PREFIX: &str = "$JS.API";
/// A context file read at most (they are a few hundred bytes).
const CONTEXT_BYTES_MAX: u64 = 1 << 20;

/// The `nats` CLI's table styles (`--colors`): tern's tables are plain
/// columns, so every style prints the same.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ColorScheme {
    Rounded,
    Double,
    Yellow,
    Blue,
    Cyan,
    Green,
    Magenta,
    Red,
}

#[derive(Debug, Args, Clone, Default)]
pub struct ConnectionArgs {
    /// NATS server URL(s), comma separated [default: nats://127.0.0.1:4222]
    #[arg(
        short = 's',
        long = "server",
        global = true,
        env = "NATS_URL",
        value_name = "URL"
    )]
    pub server: Option<String>,
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
    /// Name of the connection, as the server's monitoring shows it
    #[arg(long, global = true, value_name = "NAME")]
    pub connection_name: Option<String>,
    /// A user credentials file (JWT and NKey seed, as `nsc` writes it)
    #[arg(long, global = true, env = "NATS_CREDS", value_name = "FILE")]
    pub creds: Option<PathBuf>,
    /// Path to a file holding an NKey seed (SU...)
    #[arg(long, global = true, env = "NATS_NKEY", value_name = "FILE")]
    pub nkey: Option<PathBuf>,
    /// A user JWT (the value, or file://PATH)
    #[arg(long, global = true, env = "NATS_JWT", value_name = "JWT")]
    pub jwt: Option<String>,
    /// The user NKey seed that signs for --jwt (the value, or file://PATH)
    #[arg(long, global = true, env = "NATS_SEED", value_name = "SEED")]
    pub seed: Option<String>,
    /// TLS client certificate file
    #[arg(long, global = true, env = "NATS_CERT", value_name = "FILE")]
    pub tlscert: Option<PathBuf>,
    /// TLS client private key file
    #[arg(long, global = true, env = "NATS_KEY", value_name = "FILE")]
    pub tlskey: Option<PathBuf>,
    /// TLS certificate authority chain file
    #[arg(long, global = true, env = "NATS_CA", value_name = "FILE")]
    pub tlsca: Option<PathBuf>,
    /// TLS handshake before the server's greeting (the server's
    /// handshake_first)
    #[arg(
        long,
        alias = "tls-first",
        global = true,
        overrides_with = "no_tlsfirst"
    )]
    pub tlsfirst: bool,
    #[arg(
        long,
        alias = "no-tls-first",
        global = true,
        hide = true,
        overrides_with = "tlsfirst"
    )]
    pub no_tlsfirst: bool,
    /// Time to wait for the connection and for each request (e.g. 5s, 500ms)
    #[arg(long, global = true, env = "NATS_TIMEOUT", value_name = "DURATION")]
    pub timeout: Option<String>,
    /// A SOCKS5 proxy (refused: the client library has no SOCKS support)
    #[arg(long, global = true, env = "NATS_SOCKS_PROXY", value_name = "PROXY")]
    pub socks_proxy: Option<String>,
    /// Subject prefix of the JetStream API (instead of $JS.API)
    #[arg(long, global = true, value_name = "PREFIX")]
    pub js_api_prefix: Option<String>,
    /// Subject prefix of JetStream advisories (no tern command reads them)
    #[arg(long, global = true, value_name = "PREFIX")]
    pub js_event_prefix: Option<String>,
    /// JetStream domain: the API at $JS.<DOMAIN>.API
    #[arg(long, alias = "domain", global = true, value_name = "DOMAIN")]
    pub js_domain: Option<String>,
    /// Prefix of the connection's reply inboxes (instead of _INBOX)
    #[arg(long, global = true, value_name = "PREFIX")]
    pub inbox_prefix: Option<String>,
    /// The nats CLI's table style (tern's tables are plain: no effect)
    #[arg(
        long,
        global = true,
        env = "NATS_COLOR",
        value_name = "SCHEME",
        value_enum
    )]
    pub colors: Option<ColorScheme>,
    /// A nats CLI context (~/.config/nats/context/NAME.json) for what no
    /// flag gives
    #[arg(long, global = true, env = "NATS_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
    /// Print every JetStream API request and answer on stderr
    #[arg(long, global = true)]
    pub trace: bool,
    /// Read no context, not even the selected one (context.txt)
    #[arg(long, global = true)]
    pub no_context: bool,
}

impl ConnectionArgs {
    /// The servers to try (comma separated).
    pub fn server(&self) -> &str {
        self.server.as_deref().unwrap_or(DEFAULT_SERVER)
    }

    pub fn timeout(&self) -> Result<Duration, CliError> {
        let text = self.timeout.as_deref().unwrap_or("5s");
        let timeout = units::parse_duration(text).map_err(CliError::unit("--timeout"))?;
        if timeout.is_zero() {
            return Err(CliError::Usage("--timeout: must be more than 0".into()));
        }
        Ok(timeout)
    }

    /// The JetStream API's subject prefix: `$JS.<domain>.API` for a
    /// domain (which wins, as in the nats CLI), else `--js-api-prefix`,
    /// else `$JS.API`.
    pub fn api_prefix(&self) -> String {
        if let Some(domain) = self.js_domain.as_deref().filter(|d| !d.is_empty()) {
            return format!("$JS.{domain}.API");
        }
        match self.js_api_prefix.as_deref().filter(|p| !p.is_empty()) {
            Some(prefix) => prefix.trim_end_matches('.').to_string(),
            None => DEFAULT_API_PREFIX.to_string(),
        }
    }

    /// Fills in what no flag or environment variable gave from the nats
    /// CLI context named by `--context` (or `NATS_CONTEXT`), else from the
    /// selected one (`context.txt`) unless `--no-context`.
    pub fn apply_context(&mut self) -> Result<(), CliError> {
        match nats_config_directory() {
            Some(directory) => self.apply_context_in(&directory),
            None => Ok(()),
        }
    }

    /// [`ConnectionArgs::apply_context`] with the nats CLI's configuration
    /// directory given (`~/.config/nats`).
    fn apply_context_in(&mut self, directory: &Path) -> Result<(), CliError> {
        let name = match (&self.context, self.no_context) {
            (Some(name), _) => name.clone(),
            (None, true) => return Ok(()),
            (None, false) => match std::fs::read_to_string(directory.join("context.txt")) {
                Ok(text) if !text.trim().is_empty() => text.trim().to_string(),
                _ => return Ok(()),
            },
        };
        if name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(CliError::Usage(format!(
                "--context {name}: not a context name"
            )));
        }
        let path = directory.join("context").join(format!("{name}.json"));
        let text = read_bounded(&path, "the context")?;
        let settings: Value = serde_json::from_str(&text).map_err(|error| {
            CliError::Usage(format!("context {}: not JSON: {error}", path.display()))
        })?;
        self.fill_from(&settings);
        Ok(())
    }

    /// Fields still unset take the context's values (`~` expanded in paths).
    fn fill_from(&mut self, settings: &Value) {
        let text = |key: &str| {
            settings[key]
                .as_str()
                .filter(|value| !value.is_empty())
                .map(String::from)
        };
        let path = |key: &str| text(key).map(|value| PathBuf::from(expand_home(&value)));
        fn fill<T>(slot: &mut Option<T>, value: Option<T>) {
            if slot.is_none() {
                *slot = value;
            }
        }
        fill(&mut self.server, text("url"));
        fill(&mut self.user, text("user"));
        fill(&mut self.password, text("password"));
        fill(&mut self.token, text("token"));
        fill(&mut self.creds, path("creds"));
        fill(&mut self.nkey, path("nkey"));
        fill(&mut self.jwt, text("user_jwt"));
        fill(&mut self.seed, text("user_seed"));
        fill(&mut self.tlscert, path("cert"));
        fill(&mut self.tlskey, path("key"));
        fill(&mut self.tlsca, path("ca"));
        fill(&mut self.socks_proxy, text("socks_proxy"));
        fill(&mut self.js_domain, text("jetstream_domain"));
        fill(&mut self.js_api_prefix, text("jetstream_api_prefix"));
        fill(&mut self.js_event_prefix, text("jetstream_event_prefix"));
        fill(&mut self.inbox_prefix, text("inbox_prefix"));
        if settings["tls_first"].as_bool() == Some(true) && !self.no_tlsfirst {
            self.tlsfirst = true;
        }
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
    pub async fn options(&self) -> Result<async_nats::ConnectOptions, CliError> {
        let timeout = self.timeout()?;
        if let Some(proxy) = &self.socks_proxy {
            return Err(CliError::Usage(format!(
                "--socks-proxy {proxy}: tern's client library (async-nats) cannot connect through a SOCKS proxy"
            )));
        }
        let mut options = async_nats::ConnectOptions::new()
            .name(self.connection_name.as_deref().unwrap_or("tern"))
            .connection_timeout(timeout)
            .request_timeout(Some(timeout))
            .max_reconnects(Some(1));
        if let Some(prefix) = &self.inbox_prefix {
            options = options.custom_inbox_prefix(prefix.trim_end_matches('.'));
        }
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
        if let Some(path) = &self.creds {
            require_file("the credentials", path)?;
            options =
                options
                    .credentials_file(path)
                    .await
                    .map_err(|source| CliError::ReadFile {
                        what: "the credentials",
                        path: path.display().to_string(),
                        source,
                    })?;
        }
        if let Some(path) = &self.nkey {
            options = options.nkey(read_seed(path)?);
        }
        match (&self.jwt, &self.seed) {
            (Some(jwt), seed) => {
                let jwt = literal_or_file("--jwt", jwt)?;
                let signer = match seed {
                    Some(seed) => {
                        let seed = literal_or_file("--seed", seed)?;
                        Some(std::sync::Arc::new(
                            nkeys::KeyPair::from_seed(&seed).map_err(|error| {
                                CliError::Usage(format!("--seed: not an NKey seed: {error}"))
                            })?,
                        ))
                    }
                    None => None,
                };
                options = options.jwt(jwt, move |nonce| {
                    let signer = signer.clone();
                    async move {
                        match signer {
                            Some(signer) => signer.sign(&nonce).map_err(async_nats::AuthError::new),
                            None => Ok(Vec::new()),
                        }
                    }
                });
            }
            (None, Some(_)) => return Err(CliError::Usage("--seed needs --jwt".into())),
            (None, None) => {}
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
        if self.tlsfirst {
            options = options.tls_first();
        }
        Ok(options)
    }

    /// Connects, or says which server could not be reached and why.
    pub async fn connect(&self) -> Result<async_nats::Client, CliError> {
        let timeout = self.timeout()?;
        let options = self.options().await?;
        let server = self.server();
        let servers: Vec<String> = server
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
            .map_err(|error| CliError::Usage(format!("--server {server}: {error}")))?;
        match tokio::time::timeout(timeout, options.connect(addresses)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(source)) => Err(CliError::Connect {
                server: server.to_string(),
                source,
            }),
            Err(_) => Err(CliError::ConnectTimeout {
                server: server.to_string(),
                timeout,
            }),
        }
    }

    /// A connection and the JetStream API over it (prefix, `--trace`).
    pub async fn api(&self) -> Result<Api, CliError> {
        let timeout = self.timeout()?;
        let client = self.connect().await?;
        Ok(Api::new(client, timeout)
            .with_prefix(self.api_prefix())
            .with_trace(self.trace))
    }
}

/// `$XDG_CONFIG_HOME/nats`, else `~/.config/nats` (where the nats CLI
/// keeps its contexts).
fn nats_config_directory() -> Option<PathBuf> {
    match std::env::var_os("XDG_CONFIG_HOME").filter(|value| !value.is_empty()) {
        Some(base) => Some(PathBuf::from(base).join("nats")),
        None => std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config/nats")),
    }
}

fn expand_home(path: &str) -> String {
    match (path.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(rest), Ok(home)) => format!("{home}/{rest}"),
        _ => path.to_string(),
    }
}

fn read_bounded(path: &Path, what: &'static str) -> Result<String, CliError> {
    use std::io::Read;
    let read_error = |source| CliError::ReadFile {
        what,
        path: path.display().to_string(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(read_error)?
        .take(CONTEXT_BYTES_MAX)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    Ok(text)
}

/// A `--jwt`/`--seed` value: the value itself, or `file://PATH`'s content.
fn literal_or_file(flag: &'static str, value: &str) -> Result<String, CliError> {
    match value.strip_prefix("file://") {
        Some(path) => Ok(read_bounded(Path::new(&expand_home(path)), flag)?
            .trim()
            .to_string()),
        None => Ok(value.trim().to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_api_prefix_follows_the_domain_then_the_prefix() {
        let mut args = ConnectionArgs::default();
        assert_eq!(args.api_prefix(), "$JS.API");
        args.js_api_prefix = Some("$JS.hub.API.".into());
        assert_eq!(args.api_prefix(), "$JS.hub.API");
        args.js_domain = Some("leaf".into());
        assert_eq!(args.api_prefix(), "$JS.leaf.API");
    }

    #[test]
    fn a_context_fills_only_what_is_not_given() {
        let mut args = ConnectionArgs {
            server: Some("nats://flag:4222".into()),
            ..ConnectionArgs::default()
        };
        args.fill_from(&json!({
            "url": "nats://context:4222",
            "user": "alice",
            "password": "s3cret",
            "ca": "/etc/ca.pem",
            "jetstream_domain": "hub",
            "tls_first": true,
            "token": "",
        }));
        assert_eq!(args.server(), "nats://flag:4222");
        assert_eq!(args.user.as_deref(), Some("alice"));
        assert_eq!(args.tlsca.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(args.token, None);
        assert!(args.tlsfirst);
        assert_eq!(args.api_prefix(), "$JS.hub.API");
    }

    #[test]
    fn a_context_is_read_from_the_nats_config_directory() {
        let directory = tempfile::tempdir().expect("temp dir");
        let contexts = directory.path().join("nats/context");
        std::fs::create_dir_all(&contexts).expect("mkdir");
        std::fs::write(
            contexts.join("prod.json"),
            r#"{"url": "nats://prod:4222", "inbox_prefix": "_I"}"#,
        )
        .expect("write");
        let nats = directory.path().join("nats");
        let mut named = ConnectionArgs {
            context: Some("prod".into()),
            ..ConnectionArgs::default()
        };
        named.apply_context_in(&nats).unwrap();
        assert_eq!(named.server(), "nats://prod:4222");
        assert_eq!(named.inbox_prefix.as_deref(), Some("_I"));
        let mut missing = ConnectionArgs {
            context: Some("staging".into()),
            ..ConnectionArgs::default()
        };
        let error = missing.apply_context_in(&nats).unwrap_err().to_string();
        assert!(error.starts_with("cannot read the context "), "{error}");
        std::fs::write(directory.path().join("nats/context.txt"), "prod\n").expect("write");
        let mut selected = ConnectionArgs::default();
        selected.apply_context_in(&nats).unwrap();
        assert_eq!(selected.server(), "nats://prod:4222");
        let mut skipped = ConnectionArgs {
            no_context: true,
            ..ConnectionArgs::default()
        };
        skipped.apply_context_in(&nats).unwrap();
        assert_eq!(skipped.server(), DEFAULT_SERVER);
    }
}
