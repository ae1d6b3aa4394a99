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
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let alt_names: Vec<String> = alt_names.iter().map(|name| name.to_string()).collect();
    let mut params = CertificateParams::new(alt_names).expect("leaf parameters");
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
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
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) = leaf(
            &ca,
            "tern test client",
            &["client.test"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let (other_client_cert, other_client_key) = leaf(
            &other,
            "tern test other client",
            &["other-client.test"],
            ExtendedKeyUsagePurpose::ClientAuth,
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
