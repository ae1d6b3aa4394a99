//! SIGHUP: the configuration file read again while the server runs
//! (nats-server's `Reload`; docs/security.md §Reload).
//!
//! Shard 0 collects the signal (`tern_shard::Shutdown::wait_reload_request`),
//! resolves the same flags over the file again, and compares the result
//! with what runs ([`changes`], pure). What can change live — the
//! `[authorization]` settings and the client port's TLS certificates — is
//! built once into [`Settings`] and sent to every shard as a mesh message;
//! each shard swaps it in and re-checks its own connections
//! (`shard::reload::apply`). What cannot change (ports, cores, directories,
//! limits, cluster, JetStream) keeps its running value, named in a warning.
//! A file that fails to read, parse or validate changes nothing: the error
//! is logged and the server goes on with what it has, as nats-server does.

use std::sync::Arc;

use crate::auth::Authorization;
use crate::config::{Config, ConfigError};
use crate::tls::{TlsError, TlsServer};

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// nats-server's text.
    #[error("can only reload config when a file is provided using -c or --config")]
    NoConfigFile,
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Tls(#[from] TlsError),
}

/// What every shard swaps in (built once, on shard 0; crosses the mesh by
/// `Arc`).
pub struct Settings {
    pub authorization: Arc<Authorization>,
    /// The `[authorization]` settings differ from the running ones:
    /// connections are re-checked (nats-server re-checks only then too).
    pub authorization_changed: bool,
    /// The client port's TLS for new connections (`None`: plaintext).
    pub tls: Option<TlsServer>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Settings")
            .field("authorization", &self.authorization.describe())
            .field("authorization_changed", &self.authorization_changed)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// How a new configuration differs from the running one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The `[authorization]` table or its flags differ.
    pub authorization: bool,
    /// The `[tls]` settings differ (the certificate files are read again
    /// on every reload, changed or not: a rotated certificate keeps its
    /// path).
    pub tls: bool,
    /// Options that differ but cannot change while the server runs; they
    /// keep their running values.
    pub fixed: Vec<&'static str>,
}

/// Compares `new` with `running` (pure). Both have absolute data paths.
pub fn changes(running: &Config, new: &Config) -> Changes {
    let mut fixed = Vec::new();
    let mut compare = |name: &'static str, differ: bool| {
        if differ {
            fixed.push(name);
        }
    };
    compare("host", running.host != new.host);
    compare("port", running.port != new.port);
    compare("http_port", running.http_port != new.http_port);
    compare("http_host", running.http_host != new.http_host);
    compare("server_name", running.server_name != new.server_name);
    compare("store_dir", running.store_dir != new.store_dir);
    compare("cores", running.cores != new.cores);
    compare("unpinned", running.unpinned != new.unpinned);
    let (limits, new_limits) = (&running.limits, &new.limits);
    compare(
        "max_payload",
        limits.max_payload_bytes != new_limits.max_payload_bytes,
    );
    compare(
        "max_pending",
        limits.max_pending_bytes != new_limits.max_pending_bytes,
    );
    compare(
        "max_connections",
        limits.max_connections != new_limits.max_connections,
    );
    compare(
        "max_subscriptions",
        limits.max_subscriptions != new_limits.max_subscriptions,
    );
    compare(
        "max_control_line",
        limits.max_control_line_bytes != new_limits.max_control_line_bytes,
    );
    compare(
        "ping_interval",
        limits.ping_interval != new_limits.ping_interval,
    );
    compare("ping_max", limits.ping_max != new_limits.ping_max);
    compare(
        "write_deadline",
        limits.write_deadline != new_limits.write_deadline,
    );
    compare("io_memory", running.io_memory_bytes != new.io_memory_bytes);
    compare(
        "spin_before_park",
        running.spin_before_park != new.spin_before_park,
    );
    compare(
        "spin_awaiting_reply",
        running.spin_awaiting_reply != new.spin_awaiting_reply,
    );
    compare("debug", running.debug != new.debug);
    compare("cluster", running.cluster != new.cluster);
    // The journal ids come from the store's layout at start, not the file.
    let jetstream_differs = match (&running.jetstream, &new.jetstream) {
        (Some(running), Some(new)) => {
            let mut new = new.clone();
            new.journal_ids.clone_from(&running.journal_ids);
            new.journal_regions.clone_from(&running.journal_regions);
            new.io_settings = running.io_settings;
            *running != new
        }
        (None, None) => false,
        _ => true,
    };
    compare("jetstream", jetstream_differs);
    Changes {
        authorization: authorization_source(running) != authorization_source(new),
        tls: running.tls != new.tls,
        fixed,
    }
}

/// The `[authorization]` table and the credential flags over it.
fn authorization_source(
    config: &Config,
) -> (
    Option<&toml::Value>,
    Option<&str>,
    Option<&str>,
    Option<&str>,
) {
    let source = &config.source;
    (
        source.authorization.as_ref(),
        source.flags.user.as_deref(),
        source.flags.pass.as_deref(),
        source.flags.auth.as_deref(),
    )
}

/// Reads the file again with the running flags; data paths made absolute
/// as at start.
fn read(running: &Config) -> Result<Config, ReloadError> {
    if running.config_file.is_none() {
        return Err(ReloadError::NoConfigFile);
    }
    let mut new = Config::resolve(running.source.flags.clone())?;
    crate::config::absolute_data_paths(&mut new);
    Ok(new)
}

/// The running configuration with what changed live, and the settings
/// every shard swaps in; nothing is applied yet.
pub fn prepare(running: &Config) -> Result<(Config, Changes, Settings), ReloadError> {
    let new = read(running)?;
    let changes = changes(running, &new);
    let tls = crate::tls::server(new.tls.as_ref())?;
    let mut next = running.clone();
    next.authorization = if changes.authorization {
        new.authorization.clone()
    } else {
        running.authorization.clone()
    };
    next.tls.clone_from(&new.tls);
    next.source = new.source.clone();
    let settings = Settings {
        authorization: next.authorization.clone(),
        authorization_changed: changes.authorization,
        tls,
    };
    Ok((next, changes, settings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_file, Flags};

    fn config(text: &str) -> Config {
        let flags = Flags {
            config: Some("tern.toml".into()),
            ..Flags::default()
        };
        Config::resolve_with(flags, parse_file(text).expect("valid TOML")).expect("valid config")
    }

    #[test]
    fn the_same_file_changes_nothing() {
        let text = "port = 4333\n[authorization]\nuser = \"a\"\npassword = \"b\"\n";
        assert_eq!(changes(&config(text), &config(text)), Changes::default());
    }

    #[test]
    fn authorization_and_tls_change_live() {
        let running = config("[authorization]\nuser = \"a\"\npassword = \"b\"\n");
        let new = config(
            "[authorization]\nuser = \"a\"\npassword = \"c\"\n[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n",
        );
        let found = changes(&running, &new);
        assert!(found.authorization && found.tls);
        assert!(found.fixed.is_empty(), "{:?}", found.fixed);
    }

    #[test]
    fn fixed_options_are_named() {
        let running = config("port = 4333\nmax_payload = 1024\n");
        let new = config("port = 4334\nmax_payload = 2048\nserver_name = \"n\"\n");
        let found = changes(&running, &new);
        assert_eq!(found.fixed, vec!["port", "server_name", "max_payload"]);
        assert!(!found.authorization && !found.tls);
    }

    #[test]
    fn journal_ids_are_not_a_change() {
        let text = "[jetstream]\nenabled = true\n";
        let mut running = config(text);
        running
            .jetstream
            .as_mut()
            .expect("jetstream on")
            .journal_ids = vec![7];
        assert!(changes(&running, &config(text)).fixed.is_empty());
        let found = changes(&running, &config(""));
        assert_eq!(found.fixed, vec!["jetstream"]);
    }
}
