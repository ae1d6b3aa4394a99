//! The connection flags that carry credentials, against servers that ask
//! for them: `--user`/`--password`, `--nkey <seed file>` and `--token` on
//! tern and nats-server with the same users; `--tlsca`, `--tlscert` and
//! `--tlskey` on both with TLS and client certificates required (tern's
//! `[tls]` table, nats-server's `tls {}` block, the same settings); the
//! `NATS_*` environment in place of the flags.

use std::path::Path;
use std::process::Command;

use super::{on_both, run_command, tern, tern_command, Flavor, Run, Server};

/// An NKey user pair from `tern nkey gen user`: (public key, seed file).
pub(super) fn nkey_user(directory: &Path) -> (String, std::path::PathBuf) {
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
                // `tern bench` connects its clients with the same flags.
                let out = tempfile::tempdir().expect("temp dir");
                let bench = |flags: &[&str]| {
                    let mut args = vec!["-s", &url];
                    args.extend_from_slice(flags);
                    args.extend_from_slice(&[
                        "bench",
                        "run",
                        "--quiet",
                        "--url",
                        &url,
                        "--workload",
                        concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/workloads/smoke.toml"),
                        "--duration-secs",
                        "0.3",
                        "--warmup-secs",
                        "0.1",
                        "--out",
                        out.path().to_str().expect("UTF-8 path"),
                    ]);
                    tern(&args)
                };
                let run = bench(&["--nkey", seed]);
                assert_eq!(run.code, Some(0), "{flavor:?}: {run:?}");
                let refused = bench(&[]);
                assert_eq!(refused.code, Some(1), "{flavor:?}: {refused:?}");
                assert!(
                    refused.stdout.to_lowercase().contains("authorization violation"),
                    "{flavor:?}: {refused:?}"
                );
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
pub(super) fn certificates(directory: &Path) {
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
fn tls_flags_with_client_certificates_on_both_servers() {
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
    let (server_cert, server_key, ca) = (path("server.pem"), path("server.key"), path("ca.pem"));
    let (cert, key) = (path("client.pem"), path("client.key"));
    std::thread::scope(|scope| {
        for flavor in [Flavor::Tern, Flavor::Nats] {
            let (server_cert, server_key, ca, cert, key) =
                (&server_cert, &server_key, &ca, &cert, &key);
            scope.spawn(move || {
                let config = match flavor {
                    Flavor::Tern => format!(
                        "[tls]\ncert_file = {server_cert:?}\nkey_file = {server_key:?}\nca_file = {ca:?}\nverify = true\n"
                    ),
                    Flavor::Nats => format!(
                        "tls {{\n  cert_file: {server_cert:?}\n  key_file: {server_key:?}\n  ca_file: {ca:?}\n  verify: true\n}}\n"
                    ),
                };
                let server = Server::start_with(flavor, &config);
                let url = server.url().replace("nats://", "tls://");
                let (code, line) =
                    check(&url, &["--tlsca", ca, "--tlscert", cert, "--tlskey", key]);
                assert_eq!(code, Some(0), "{flavor:?}: {line}");
                assert!(line.starts_with("OK: "), "{flavor:?}: {line}");
                // A JetStream command over the same connection options.
                let listed = tern(&[
                    "-s", &url, "--tlsca", ca, "--tlscert", cert, "--tlskey", key, "stream", "ls", "-n",
                ]);
                listed.ok();
                // The same through the environment (NATS_CA, NATS_CERT, NATS_KEY).
                let run = tern_env(
                    &[("NATS_URL", url.as_str()), ("NATS_CA", ca), ("NATS_CERT", cert), ("NATS_KEY", key)],
                    &["server", "check", "connection"],
                );
                assert_eq!(run.code, Some(0), "{flavor:?}: {run:?}");
                // Without the client certificate the server refuses the
                // handshake; without the CA the server's certificate is
                // not trusted; without TLS the server wants it.
                for flags in [
                    vec!["--tlsca", ca.as_str()],
                    vec!["--tlscert", cert, "--tlskey", key],
                ] {
                    let (code, line) = check(&url, &flags);
                    assert_ne!(code, Some(0), "{flavor:?} {flags:?}: {line}");
                    assert_eq!(line.lines().count(), 1, "{flavor:?} {flags:?}: {line}");
                }
                let (code, line) = check(&server.url(), &[]);
                assert_ne!(code, Some(0), "{flavor:?} plain: {line}");
                assert_eq!(line.lines().count(), 1, "{flavor:?} plain: {line}");
            });
        }
    });
}

/// `tern args…` with `environment` set (the rest of NATS_* cleared).
fn tern_env(environment: &[(&str, &str)], args: &[&str]) -> Run {
    let mut command = tern_command(args);
    command.envs(environment.iter().copied());
    run_command(command, args)
}

#[test]
fn nats_url_and_nats_user_from_the_environment() {
    let (tern_seen, nats_seen) = on_both(|server| {
        let flavor = server.flavor;
        let url = server.url();
        // A free port, never the default 4222: only NATS_URL can lead there.
        assert!(!url.ends_with(":4222"), "{url}");
        server
            .tern(&["stream", "add", "ENV", "--subjects", "env.>", "--defaults"])
            .ok();
        let listed = tern_env(&[("NATS_URL", url.as_str())], &["stream", "ls", "-n"]);
        assert_eq!(listed.ok().trim(), "ENV", "{flavor:?}: {listed:?}");
        let checked = tern_env(
            &[("NATS_URL", url.as_str())],
            &["server", "check", "connection"],
        );
        assert!(
            checked.ok().starts_with(&format!("OK: connected to {url}")),
            "{flavor:?}: {checked:?}"
        );
        // -s wins over NATS_URL, as in the nats CLI.
        let flag = tern_env(
            &[("NATS_URL", "nats://127.0.0.1:1")],
            &["-s", &url, "stream", "ls", "-n"],
        );
        assert_eq!(flag.ok().trim(), "ENV", "{flavor:?}: {flag:?}");
        let wrong = tern_env(&[("NATS_URL", "nats://127.0.0.1:1")], &["stream", "ls"]);
        assert!(
            wrong
                .one_line_error(1)
                .starts_with("tern: cannot connect to nats://127.0.0.1:1: "),
            "{flavor:?}: {wrong:?}"
        );
        listed.stdout
    });
    assert_eq!(tern_seen, nats_seen);

    // NATS_USER and NATS_PASSWORD in place of --user and --password.
    std::thread::scope(|scope| {
        for flavor in [Flavor::Tern, Flavor::Nats] {
            scope.spawn(move || {
                let users = match flavor {
                    Flavor::Tern => {
                        "[authorization]\nusers = [ { user = \"alice\", password = \"s3cret\" } ]\n"
                    }
                    Flavor::Nats => {
                        "authorization {\n  users = [ {user: alice, password: s3cret} ]\n}\n"
                    }
                };
                let server = Server::start_with(flavor, users);
                let url = server.url();
                let good = tern_env(
                    &[
                        ("NATS_URL", url.as_str()),
                        ("NATS_USER", "alice"),
                        ("NATS_PASSWORD", "s3cret"),
                    ],
                    &["server", "check", "connection"],
                );
                assert_eq!(good.code, Some(0), "{flavor:?}: {good:?}");
                let bad = tern_env(
                    &[
                        ("NATS_URL", url.as_str()),
                        ("NATS_USER", "alice"),
                        ("NATS_PASSWORD", "wrong"),
                    ],
                    &["stream", "ls"],
                );
                let error = bad.one_line_error(1);
                assert!(
                    error.to_lowercase().contains("authorization"),
                    "{flavor:?}: {bad:?}"
                );
            });
        }
    });
}
