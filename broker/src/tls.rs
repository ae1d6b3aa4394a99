//! TLS on the client port: the `[tls]` table and its flags as nats-server
//! names them, the certificates loaded into a rustls server configuration,
//! and the handshake a connection's shard runs before it serves the
//! connection (docs/security.md §TLS). And mutual TLS between cluster nodes
//! (`[cluster.tls]`): both ends present a certificate signed by the
//! cluster's CA, and both verify the other's (docs/security.md §Routes).
//!
//! The handshake and the record layer run on the connection's own shard
//! (rustls is a state machine; `futures-rustls` drives it over glommio's
//! socket), so TLS keeps the shard-per-connection design: no thread pool,
//! nothing shared between shards but the read-only `ServerConfig`.
//!
//! nats-server's two modes:
//! - classic: the server writes INFO in plaintext (with `tls_required`),
//!   then the client starts the handshake. No handshake within `timeout`,
//!   or plaintext instead of a ClientHello: the connection closes without
//!   an `-ERR` (nats-server 2.15.1 means to send `Secure Connection - TLS
//!   Required` on a timeout, but writes it into the failed session, so
//!   nothing reaches the wire; measured in `it::tls`).
//! - `handshake_first`: nothing is written before the client's ClientHello;
//!   INFO comes after the handshake, inside TLS.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use glommio::net::TcpStream;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// nats-server's default TLS handshake timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest handshake timeout accepted (a typo like `timeout = 2000` is
/// refused rather than holding half-open connections for half an hour).
pub const TIMEOUT_MAX: Duration = Duration::from_secs(60);
/// Largest PEM file read (certificate chains and CA bundles are far smaller).
const PEM_FILE_BYTES_MAX: u64 = 4 << 20;

/// The `[tls]` table of the TOML file (nats-server's `tls { … }` block).
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    /// Client certificates required (and verified against `ca_file`).
    pub verify: Option<bool>,
    /// Seconds (a float, as nats-server) or a duration text like `"500ms"`.
    pub timeout: Option<TimeoutValue>,
    pub handshake_first: Option<bool>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum TimeoutValue {
    Seconds(f64),
    Text(String),
}

/// The TLS flags (nats-server's names), over the `[tls]` table.
#[derive(Debug, Default, Clone)]
pub struct TlsFlags {
    pub tls: bool,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub verify: bool,
    pub ca_file: Option<PathBuf>,
}

/// TLS on the client port, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_file: Option<PathBuf>,
    pub verify: bool,
    pub timeout: Duration,
    pub handshake_first: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls: {0}")]
    Invalid(String),
    #[error("tls: reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tls: {path}: {message}")]
    Pem { path: PathBuf, message: String },
    #[error("tls: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("tls: client certificate verification: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// `None` when neither the flags nor the file ask for TLS.
pub fn resolve(flags: TlsFlags, file: Option<TlsFile>) -> Result<Option<TlsConfig>, TlsError> {
    let enabled = flags.tls
        || flags.cert_file.is_some()
        || flags.key_file.is_some()
        || flags.verify
        || flags.ca_file.is_some()
        || file.is_some();
    if !enabled {
        return Ok(None);
    }
    let file = file.unwrap_or_default();
    let cert_file = flags.cert_file.or(file.cert_file).ok_or_else(|| {
        TlsError::Invalid("a certificate is needed (--tlscert or [tls] cert_file)".into())
    })?;
    let key_file = flags.key_file.or(file.key_file).ok_or_else(|| {
        TlsError::Invalid("a private key is needed (--tlskey or [tls] key_file)".into())
    })?;
    let ca_file = flags.ca_file.or(file.ca_file);
    let verify = flags.verify || file.verify.unwrap_or(false);
    if verify && ca_file.is_none() {
        return Err(TlsError::Invalid(
            "verify needs the CA that signs client certificates (--tlscacert or [tls] ca_file)"
                .into(),
        ));
    }
    let timeout = resolve_timeout(file.timeout)?;
    Ok(Some(TlsConfig {
        cert_file,
        key_file,
        ca_file,
        verify,
        timeout,
        handshake_first: file.handshake_first.unwrap_or(false),
    }))
}

/// Reads a PEM file (bounded).
fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let read_error = |source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > PEM_FILE_BYTES_MAX {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            message: format!("larger than {PEM_FILE_BYTES_MAX} bytes"),
        });
    }
    Ok(bytes)
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem(path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::Pem {
            path: path.to_path_buf(),
            message: error.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            message: "no CERTIFICATE in it".into(),
        });
    }
    Ok(certificates)
}

/// A certificate chain and its private key, from their PEM files.
fn identity(
    cert_file: &Path,
    key_file: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let chain = certificates(cert_file)?;
    let key_bytes = read_pem(key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|error| TlsError::Pem {
        path: key_file.to_path_buf(),
        message: format!("no private key: {error}"),
    })?;
    Ok((chain, key))
}

/// The rustls server configuration of `config`: its certificate chain and
/// key, and, with `verify`, client certificates checked against `ca_file`.
pub fn server_config(config: &TlsConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let (chain, key) = identity(&config.cert_file, &config.key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match (&config.ca_file, config.verify) {
        (Some(ca_file), true) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates(ca_file)? {
                roots.add(certificate)?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let server = builder.with_single_cert(chain, key)?;
    Ok(Arc::new(server))
}

/// The server side of `config` (its certificates read now), or `None`
/// for a plaintext client port.
pub fn server(config: Option<&TlsConfig>) -> Result<Option<TlsServer>, TlsError> {
    let Some(config) = config else {
        return Ok(None);
    };
    Ok(Some(TlsServer {
        config: server_config(config)?,
        timeout: config.timeout,
        handshake_first: config.handshake_first,
        verify: config.verify,
    }))
}

/// A connection's TLS settings as its shard holds them (swapped by a
/// reload; a connection keeps the one it started with).
#[derive(Clone)]
pub struct TlsServer {
    pub config: Arc<ServerConfig>,
    pub timeout: Duration,
    pub handshake_first: bool,
    pub verify: bool,
}

/// A glommio socket shared by the TLS session and the code that writes
/// plaintext around it (the classic INFO, the timeout's `-ERR`); each poll
/// borrows it only for its own duration.
#[derive(Clone)]
pub struct SharedTcp(Rc<RefCell<TcpStream>>);

impl SharedTcp {
    pub fn new(stream: TcpStream) -> SharedTcp {
        SharedTcp(Rc::new(RefCell::new(stream)))
    }
}

impl futures_lite::AsyncRead for SharedTcp {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut stream = self.0.borrow_mut();
        std::pin::Pin::new(&mut *stream).poll_read(context, buffer)
    }
}

impl futures_lite::AsyncWrite for SharedTcp {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut stream = self.0.borrow_mut();
        std::pin::Pin::new(&mut *stream).poll_write(context, buffer)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        let mut stream = self.0.borrow_mut();
        std::pin::Pin::new(&mut *stream).poll_flush(context)
    }

    fn poll_close(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        let mut stream = self.0.borrow_mut();
        std::pin::Pin::new(&mut *stream).poll_close(context)
    }
}

pub type TlsStream = futures_rustls::server::TlsStream<SharedTcp>;
/// Either end's session (a route dials or accepts).
pub type AnyTlsStream = futures_rustls::TlsStream<SharedTcp>;

/// How a handshake ended without a session.
#[derive(Debug)]
pub enum HandshakeFailure {
    /// Not finished within the TLS timeout.
    TimedOut,
    /// The client sent something else, or its certificate was refused.
    Failed(std::io::Error),
}

/// Runs the server side of the handshake on `tcp`, bounded by the TLS
/// timeout.
pub async fn handshake(server: &TlsServer, tcp: SharedTcp) -> Result<TlsStream, HandshakeFailure> {
    let acceptor = futures_rustls::TlsAcceptor::from(server.config.clone());
    match tern_shard::timer::timeout(server.timeout, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => Err(HandshakeFailure::Failed(error)),
        Err(_) => Err(HandshakeFailure::TimedOut),
    }
}

/// The `[cluster.tls]` table (nats-server's `cluster { tls { … } }`).
/// Routes always verify both ways, as nats-server's do: `ca_file` is the
/// cluster's own CA, required.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RouteTlsFile {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    /// Accepted for nats-server configs; routes are verified whatever it says.
    pub verify: Option<bool>,
    pub timeout: Option<TimeoutValue>,
}

/// Mutual TLS between nodes, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_file: PathBuf,
    pub timeout: Duration,
}

fn resolve_timeout(value: Option<TimeoutValue>) -> Result<Duration, TlsError> {
    let timeout = match value {
        None => DEFAULT_TIMEOUT,
        Some(TimeoutValue::Seconds(seconds)) if seconds.is_finite() && seconds > 0.0 => {
            Duration::from_secs_f64(seconds.min(TIMEOUT_MAX.as_secs_f64() + 1.0))
        }
        Some(TimeoutValue::Seconds(seconds)) => {
            return Err(TlsError::Invalid(format!(
                "timeout: {seconds} is not a positive number of seconds"
            )))
        }
        Some(TimeoutValue::Text(text)) => crate::duration::parse_duration(&text)
            .map_err(|message| TlsError::Invalid(format!("timeout: {message}")))?,
    };
    if timeout.is_zero() || timeout > TIMEOUT_MAX {
        return Err(TlsError::Invalid(format!(
            "timeout: {timeout:?} is outside (0, {TIMEOUT_MAX:?}]"
        )));
    }
    Ok(timeout)
}

/// `[cluster.tls]` resolved: every file named (a route without its CA
/// would accept any certificate).
pub fn resolve_route(file: RouteTlsFile) -> Result<RouteTlsConfig, TlsError> {
    let needed = |value: Option<PathBuf>, key: &str| {
        value.ok_or_else(|| TlsError::Invalid(format!("[cluster.tls] needs {key}")))
    };
    if file.verify == Some(false) {
        return Err(TlsError::Invalid(
            "[cluster.tls] verify = false: routes always verify the peer's certificate".into(),
        ));
    }
    Ok(RouteTlsConfig {
        cert_file: needed(file.cert_file, "cert_file")?,
        key_file: needed(file.key_file, "key_file")?,
        ca_file: needed(
            file.ca_file,
            "ca_file (the CA that signs every node's certificate)",
        )?,
        timeout: resolve_timeout(file.timeout)?,
    })
}

/// Both ends of mutual TLS between nodes, as each shard holds them.
#[derive(Clone)]
pub struct RouteTls {
    /// Accepting: the peer must present a certificate the cluster CA signed.
    pub server: Arc<ServerConfig>,
    /// Dialing: the peer's certificate must be the cluster CA's and name the
    /// host dialed; this node presents its own.
    pub client: Arc<ClientConfig>,
    pub timeout: Duration,
}

/// Loads `[cluster.tls]`'s certificates into both rustls configurations.
pub fn route_tls(config: &RouteTlsConfig) -> Result<RouteTls, TlsError> {
    let (chain, key) = identity(&config.cert_file, &config.key_file)?;
    let mut roots = RootCertStore::empty();
    for certificate in certificates(&config.ca_file)? {
        roots.add(certificate)?;
    }
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone()).build()?;
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())?;
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    Ok(RouteTls {
        server: Arc::new(server),
        client: Arc::new(client),
        timeout: config.timeout,
    })
}

/// How a route's handshake ended without a session.
#[derive(Debug, thiserror::Error)]
pub enum RouteHandshakeError {
    #[error("TLS handshake timed out")]
    TimedOut,
    #[error("TLS handshake: {0}")]
    Failed(std::io::Error),
    #[error("TLS: {0:?} is not a host name or address a certificate can name")]
    ServerName(String),
}

/// The accepting side of a route's handshake: the peer's certificate is
/// verified against the cluster CA.
pub async fn accept_route(
    tls: &RouteTls,
    tcp: SharedTcp,
) -> Result<AnyTlsStream, RouteHandshakeError> {
    let acceptor = futures_rustls::TlsAcceptor::from(tls.server.clone());
    match tern_shard::timer::timeout(tls.timeout, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Ok(stream.into()),
        Ok(Err(error)) => Err(RouteHandshakeError::Failed(error)),
        Err(_) => Err(RouteHandshakeError::TimedOut),
    }
}

/// The dialing side: `host` (the route URL's) must be named by the peer's
/// certificate, which the cluster CA must have signed.
pub async fn dial_route(
    tls: &RouteTls,
    host: &str,
    tcp: SharedTcp,
) -> Result<AnyTlsStream, RouteHandshakeError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls_pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| RouteHandshakeError::ServerName(host.to_string()))?;
    let connector = futures_rustls::TlsConnector::from(tls.client.clone());
    match tern_shard::timer::timeout(tls.timeout, connector.connect(name, tcp)).await {
        Ok(Ok(stream)) => Ok(stream.into()),
        Ok(Err(error)) => Err(RouteHandshakeError::Failed(error)),
        Err(_) => Err(RouteHandshakeError::TimedOut),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> TlsFile {
        toml::from_str(text).expect("a [tls] table")
    }

    #[test]
    fn nothing_asked_is_no_tls() {
        assert_eq!(resolve(TlsFlags::default(), None).unwrap(), None);
    }

    #[test]
    fn the_table_resolves_with_nats_server_defaults() {
        let resolved = resolve(
            TlsFlags::default(),
            Some(file("cert_file = \"c.pem\"\nkey_file = \"k.pem\"\n")),
        )
        .unwrap()
        .unwrap();
        assert_eq!(resolved.timeout, DEFAULT_TIMEOUT);
        assert!(!resolved.verify && !resolved.handshake_first);
        let resolved = resolve(
            TlsFlags::default(),
            Some(file(
                "cert_file = \"c.pem\"\nkey_file = \"k.pem\"\nca_file = \"ca.pem\"\nverify = true\ntimeout = 0.5\nhandshake_first = true\n",
            )),
        )
        .unwrap()
        .unwrap();
        assert_eq!(resolved.timeout, Duration::from_millis(500));
        assert!(resolved.verify && resolved.handshake_first);
    }

    #[test]
    fn flags_override_the_table() {
        let flags = TlsFlags {
            tls: true,
            cert_file: Some("flag.pem".into()),
            key_file: None,
            verify: false,
            ca_file: None,
        };
        let resolved = resolve(
            flags,
            Some(file("cert_file = \"c.pem\"\nkey_file = \"k.pem\"\n")),
        )
        .unwrap()
        .unwrap();
        assert_eq!(resolved.cert_file, PathBuf::from("flag.pem"));
        assert_eq!(resolved.key_file, PathBuf::from("k.pem"));
    }

    #[test]
    fn mistakes_are_named() {
        let no_key = resolve(
            TlsFlags {
                tls: true,
                cert_file: Some("c.pem".into()),
                ..TlsFlags::default()
            },
            None,
        );
        assert!(no_key.unwrap_err().to_string().contains("private key"));
        let verify_without_ca = resolve(
            TlsFlags::default(),
            Some(file("cert_file = \"c\"\nkey_file = \"k\"\nverify = true\n")),
        );
        assert!(verify_without_ca
            .unwrap_err()
            .to_string()
            .contains("ca_file"));
        for timeout in ["0", "-1", "3600"] {
            let text = format!("cert_file = \"c\"\nkey_file = \"k\"\ntimeout = {timeout}\n");
            assert!(
                resolve(TlsFlags::default(), Some(file(&text))).is_err(),
                "timeout {timeout}"
            );
        }
        assert!(toml::from_str::<TlsFile>("certfile = \"c\"\n").is_err());
    }

    #[test]
    fn route_tls_needs_every_file_and_always_verifies() {
        let route =
            |text: &str| resolve_route(toml::from_str(text).expect("a [cluster.tls] table"));
        let resolved =
            route("cert_file = \"n.pem\"\nkey_file = \"k.pem\"\nca_file = \"ca.pem\"\n").unwrap();
        assert_eq!(resolved.ca_file, PathBuf::from("ca.pem"));
        assert_eq!(resolved.timeout, DEFAULT_TIMEOUT);
        let no_ca = route("cert_file = \"n.pem\"\nkey_file = \"k.pem\"\n").unwrap_err();
        assert!(no_ca.to_string().contains("ca_file"), "{no_ca}");
        let no_key = route("cert_file = \"n.pem\"\nca_file = \"ca.pem\"\n").unwrap_err();
        assert!(no_key.to_string().contains("key_file"), "{no_key}");
        let unverified =
            route("cert_file = \"n\"\nkey_file = \"k\"\nca_file = \"c\"\nverify = false\n")
                .unwrap_err();
        assert!(
            unverified.to_string().contains("always verify"),
            "{unverified}"
        );
    }

    #[test]
    fn missing_files_are_named() {
        let config = TlsConfig {
            cert_file: "/nonexistent/cert.pem".into(),
            key_file: "/nonexistent/key.pem".into(),
            ca_file: None,
            verify: false,
            timeout: DEFAULT_TIMEOUT,
            handshake_first: false,
        };
        let error = server_config(&config)
            .expect_err("no such file")
            .to_string();
        assert!(error.contains("/nonexistent/cert.pem"), "{error}");
    }
}
