//! Certificates for TLS tests, made in the test (rcgen, ECDSA P-256) and
//! written as PEM files into a temporary directory, plus the server
//! settings that use them for tern (`[tls]` in its TOML) and nats-server
//! (`tls { }` in its config), so one test runs against both.
//!
//! The PKI: a CA; a server certificate it signs, with the SANs `127.0.0.1`
//! and `localhost` (the harness connects to `nats://127.0.0.1:PORT`); a
//! client certificate it signs; and a second, unrelated CA with a client
//! certificate of its own (refused by a server that trusts only the first).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::Options;

/// PEM files of one test's PKI; the directory lives as long as this value
/// (keep it alive while a server or client may read the files).
pub struct Pki {
    _dir: tempfile::TempDir,
    /// The CA that signs the server and the client certificates.
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A client certificate signed by [`Pki::ca`].
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A second CA, unknown to the server.
    pub other_ca: PathBuf,
    /// A client certificate signed by [`Pki::other_ca`].
    pub other_client_cert: PathBuf,
    pub other_client_key: PathBuf,
    /// A cluster node's certificate signed by [`Pki::ca`], for both ends of
    /// a route (server and client use), naming `127.0.0.1` and `localhost`.
    pub node_cert: PathBuf,
    pub node_key: PathBuf,
    /// The same, signed by [`Pki::other_ca`] (a node the cluster refuses).
    pub other_node_cert: PathBuf,
    pub other_node_key: PathBuf,
}

/// How the server's TLS is configured beyond its certificate and key.
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsSettings {
    /// `verify`: client certificates required, checked against [`Pki::ca`]
    /// (`ca_file`).
    pub verify: bool,
    /// `timeout` in seconds (both servers default to 2).
    pub timeout_seconds: Option<f64>,
    /// `handshake_first`: the client starts TLS before any INFO.
    pub handshake_first: bool,
}

struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn authority(name: &str) -> Authority {
    let mut params = CertificateParams::new(Vec::new()).expect("CA parameters");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    let key = KeyPair::generate().expect("CA key");
    let pem = params.self_signed(&key).expect("self-signed CA").pem();
    Authority {
        issuer: Issuer::new(params, key),
        pem,
    }
}

/// A leaf certificate signed by `authority`: (certificate PEM, key PEM).
fn leaf(
    authority: &Authority,
    name: &str,
    alt_names: &[&str],
    usages: &[ExtendedKeyUsagePurpose],
) -> (String, String) {
    let alt_names: Vec<String> = alt_names.iter().map(|name| name.to_string()).collect();
    let mut params = CertificateParams::new(alt_names).expect("leaf parameters");
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = usages.to_vec();
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().expect("leaf key");
    let certificate = params
        .signed_by(&key, &authority.issuer)
        .expect("sign leaf");
    (certificate.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap_or_else(|error| panic!("write {path:?}: {error}"));
    path
}

impl Pki {
    /// Generates every certificate and writes the PEM files.
    pub fn generate() -> Pki {
        let dir = tempfile::tempdir().expect("temp dir for certificates");
        let ca = authority("tern test CA");
        let other = authority("tern test other CA");
        let (server_cert, server_key) = leaf(
            &ca,
            "tern test server",
            &["127.0.0.1", "localhost"],
            &[ExtendedKeyUsagePurpose::ServerAuth],
        );
        let (client_cert, client_key) = leaf(
            &ca,
            "tern test client",
            &["client.test"],
            &[ExtendedKeyUsagePurpose::ClientAuth],
        );
        let (other_client_cert, other_client_key) = leaf(
            &other,
            "tern test other client",
            &["other-client.test"],
            &[ExtendedKeyUsagePurpose::ClientAuth],
        );
        let node_usages = [
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let (node_cert, node_key) = leaf(
            &ca,
            "tern test node",
            &["127.0.0.1", "localhost"],
            &node_usages,
        );
        let (other_node_cert, other_node_key) = leaf(
            &other,
            "tern test other node",
            &["127.0.0.1", "localhost"],
            &node_usages,
        );
        let path = dir.path();
        Pki {
            ca: write(path, "ca.pem", &ca.pem),
            server_cert: write(path, "server.pem", &server_cert),
            server_key: write(path, "server-key.pem", &server_key),
            client_cert: write(path, "client.pem", &client_cert),
            client_key: write(path, "client-key.pem", &client_key),
            other_ca: write(path, "other-ca.pem", &other.pem),
            other_client_cert: write(path, "other-client.pem", &other_client_cert),
            other_client_key: write(path, "other-client-key.pem", &other_client_key),
            node_cert: write(path, "node.pem", &node_cert),
            node_key: write(path, "node-key.pem", &node_key),
            other_node_cert: write(path, "other-node.pem", &other_node_cert),
            other_node_key: write(path, "other-node-key.pem", &other_node_key),
            _dir: dir,
        }
    }

    /// Server options with TLS on the client port, for both flavors.
    pub fn options(&self, settings: TlsSettings) -> Options {
        Options {
            tern_config: self.tern_config(settings),
            nats_config: self.nats_config(settings),
            ..Options::default()
        }
    }

    /// tern's `[tls]` table.
    pub fn tern_config(&self, settings: TlsSettings) -> String {
        let mut lines = vec![
            "[tls]".to_string(),
            format!("cert_file = {:?}", path_text(&self.server_cert)),
            format!("key_file = {:?}", path_text(&self.server_key)),
        ];
        if settings.verify {
            lines.push(format!("ca_file = {:?}", path_text(&self.ca)));
            lines.push("verify = true".into());
        }
        if let Some(seconds) = settings.timeout_seconds {
            // `{:?}` keeps the decimal point: `2.0`, a TOML float.
            lines.push(format!("timeout = {seconds:?}"));
        }
        if settings.handshake_first {
            lines.push("handshake_first = true".into());
        }
        lines.push(String::new());
        lines.join("\n")
    }

    /// nats-server's `tls { }` block.
    pub fn nats_config(&self, settings: TlsSettings) -> String {
        let mut lines = vec![
            "tls {".to_string(),
            format!("  cert_file: {:?}", path_text(&self.server_cert)),
            format!("  key_file: {:?}", path_text(&self.server_key)),
        ];
        if settings.verify {
            lines.push(format!("  ca_file: {:?}", path_text(&self.ca)));
            lines.push("  verify: true".into());
        }
        if let Some(seconds) = settings.timeout_seconds {
            lines.push(format!("  timeout: {seconds:?}"));
        }
        if settings.handshake_first {
            lines.push("  handshake_first: true".into());
        }
        lines.push("}".into());
        lines.push(String::new());
        lines.join("\n")
    }

    /// Mutual TLS between cluster nodes, for both flavors: the node
    /// certificate signed by [`Pki::ca`] (`other_ca`: the one signed by
    /// [`Pki::other_ca`], trusting that CA), `[cluster.tls]` for tern and
    /// `cluster { tls { } }` for nats-server (whose listen address and
    /// routes come from the command line).
    pub fn cluster_options(&self, other_ca: bool) -> Options {
        let (cert, key, ca) = if other_ca {
            (&self.other_node_cert, &self.other_node_key, &self.other_ca)
        } else {
            (&self.node_cert, &self.node_key, &self.ca)
        };
        let (cert, key, ca) = (path_text(cert), path_text(key), path_text(ca));
        Options {
            tern_config: format!(
                "[cluster.tls]\ncert_file = {cert:?}\nkey_file = {key:?}\nca_file = {ca:?}\n"
            ),
            nats_config: format!(
                "cluster {{\n  tls {{\n    cert_file: {cert:?}\n    key_file: {key:?}\n    ca_file: {ca:?}\n  }}\n}}\n"
            ),
            ..Options::default()
        }
    }

    /// async-nats options that trust [`Pki::ca`] and require TLS, without
    /// a client certificate.
    pub fn client_options(&self) -> async_nats::ConnectOptions {
        install_crypto_provider();
        async_nats::ConnectOptions::new()
            .add_root_certificates(self.ca.clone())
            .require_tls(true)
    }

    /// [`Pki::client_options`] presenting the client certificate signed by
    /// [`Pki::ca`].
    pub fn client_options_with_certificate(&self) -> async_nats::ConnectOptions {
        self.client_options()
            .add_client_certificate(self.client_cert.clone(), self.client_key.clone())
    }
}

fn path_text(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

/// async-nats builds its rustls `ClientConfig` with the process-wide
/// default crypto provider; install ring explicitly so the tests do not
/// depend on which rustls backends feature unification happens to enable.
pub fn install_crypto_provider() {
    // Err means one is installed already (another test got there first).
    let _ = rustls::crypto::ring::default_provider().install_default();
}
