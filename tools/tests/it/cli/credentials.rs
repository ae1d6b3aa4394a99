//! The connection flags that carry credentials, against servers that ask
//! for them: `--user`/`--password`, `--nkey <seed file>` and `--token` on
//! tern and nats-server with the same users; `--tlsca`, `--tlscert` and
//! `--tlskey` on nats-server with TLS (tern's client port has no TLS yet).

use std::path::Path;
use std::process::Command;

use super::{tern, Flavor, Server};

/// An NKey user pair from `tern nkey gen user`: (public key, seed file).
fn nkey_user(directory: &Path) -> (String, std::path::PathBuf) {
    let seed = directory.join("user.nk");
    let run = tern(&[
        "nkey",
        "gen",
        "user",
        "--seed_file",
        seed.to_str().expect("UTF-8 path"),
    ]);
    let public = run.ok().trim().to_string();
    assert!(public.starts_with('U'), "{run:?}");
    (public, seed)
}

/// `server check connection` through `url` with `flags`: its exit code and
/// the one line it printed.
fn check(url: &str, flags: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["-s", url, "--timeout", "2s"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["server", "check", "connection"]);
    let run = tern(&args);
    // The check's status line is on stdout (CRITICAL when it cannot
    // connect); a usage error would be on stderr.
    let text = if run.stdout.trim().is_empty() {
        run.stderr
    } else {
        run.stdout
    };
    (run.code, text.trim().to_string())
}

#[test]
fn users_nkeys_and_tokens_on_both_servers() {
    let directory = tempfile::tempdir().expect("temp dir");
    let (public, seed) = nkey_user(directory.path());
    let seed = seed.to_str().expect("UTF-8 path");
    std::thread::scope(|scope| {
        for flavor in [Flavor::Tern, Flavor::Nats] {
            let public = public.clone();
            scope.spawn(move || {
                let users = match flavor {
                    Flavor::Tern => format!(
                        "[authorization]\nusers = [ {{ user = \"alice\", password = \"s3cret\" }}, {{ nkey = \"{public}\" }} ]\n"
                    ),
                    Flavor::Nats => format!(
                        "authorization {{\n  users = [ {{user: alice, password: s3cret}}, {{nkey: {public}}} ]\n}}\n"
                    ),
                };
                let server = Server::start_with(flavor, &users);
                let url = server.url();
                let (code, line) = check(&url, &["--user", "alice", "--password", "s3cret"]);
                assert_eq!(code, Some(0), "{flavor:?}: {line}");
                assert!(line.starts_with("OK: "), "{flavor:?}: {line}");
                let (code, line) = check(&url, &["--nkey", seed]);
                assert_eq!(code, Some(0), "{flavor:?}: {line}");
                // Refusals: one line naming what failed, a non-zero exit.
                for flags in [
                    vec!["--user", "alice", "--password", "wrong"],
                    vec![],
                ] {
                    let (code, line) = check(&url, &flags);
                    assert_ne!(code, Some(0), "{flavor:?} {flags:?}: {line}");
                    assert_eq!(line.lines().count(), 1, "{flavor:?}: {line}");
                    assert!(
                        line.to_lowercase().contains("authorization"),
                        "{flavor:?} {flags:?}: {line}"
                    );
                }

                let token = match flavor {
                    Flavor::Tern => "[authorization]\ntoken = \"t0ken\"\n".to_string(),
                    Flavor::Nats => "authorization {\n  token: t0ken\n}\n".to_string(),
                };
                let server = Server::start_with(flavor, &token);
                let (code, line) = check(&server.url(), &["--token", "t0ken"]);
                assert_eq!(code, Some(0), "{flavor:?}: {line}");
                let (code, line) = check(&server.url(), &["--token", "other"]);
                assert_ne!(code, Some(0), "{flavor:?}: {line}");
            });
        }
    });
}

/// Runs `openssl` with `args` in `directory`.
fn openssl(directory: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(directory)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success(), "openssl {args:?}");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate,
/// both signed by it (PEM files in `directory`).
fn certificates(directory: &Path) {
    openssl(
        directory,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=test ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    std::fs::write(
        directory.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .expect("extensions");
    std::fs::write(
        directory.join("client.ext"),
        "extendedKeyUsage=clientAuth\n",
    )
    .expect("extensions");
    for (name, subject) in [("server", "/CN=127.0.0.1"), ("client", "/CN=client")] {
        openssl(
            directory,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                subject,
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            directory,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }
}

#[test]
fn tls_flags_against_nats_server_with_client_certificates() {
    let directory = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| {
        directory
            .path()
            .join(name)
            .to_str()
            .expect("UTF-8 path")
            .to_string()
    };
    certificates(directory.path());
    let config = format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}\n",
        path("server.pem"),
        path("server.key"),
        path("ca.pem")
    );
    let server = Server::start_with(Flavor::Nats, &config);
    let url = server.url().replace("nats://", "tls://");
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));
    let (code, line) = check(
        &url,
        &["--tlsca", &ca, "--tlscert", &cert, "--tlskey", &key],
    );
    assert_eq!(code, Some(0), "{line}");
    assert!(line.starts_with("OK: "), "{line}");
    // Without the client certificate the server refuses the handshake;
    // without the CA the server's certificate is not trusted.
    for flags in [
        vec!["--tlsca", ca.as_str()],
        vec!["--tlscert", &cert, "--tlskey", &key],
    ] {
        let (code, line) = check(&url, &flags);
        assert_ne!(code, Some(0), "{flags:?}: {line}");
        assert_eq!(line.lines().count(), 1, "{flags:?}: {line}");
    }
}
