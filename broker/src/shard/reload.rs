//! A configuration reload across the node's shards: shard 0's task that
//! turns each collected SIGHUP into [`crate::reload::Settings`] and sends
//! them to every shard, and what each shard does with them.

use std::rc::Rc;
use std::sync::Arc;
use std::time::SystemTime;

use super::message::ShardMessage;
use super::Shard;
use crate::nats::conn::{self, Client};
use crate::reload::Settings;

/// Shard 0's task: one reload per collected SIGHUP (signals that come
/// while one runs are folded into the next), until shutdown.
pub async fn serve(shard: Rc<Shard>) {
    assert_eq!(shard.index, 0, "shard 0 collects the signals");
    let mut running = shard.config.clone();
    let mut seen = shard.shutdown.reload_requests();
    loop {
        seen = shard.shutdown.wait_reload_request(seen).await;
        if shard.shutdown.is_triggered() {
            return;
        }
        match crate::reload::prepare(&running) {
            Err(error) => {
                log::error!(target: "tern::server", "Failed to reload server configuration: {error}");
            }
            Ok((next, changes, settings)) => {
                for name in &changes.fixed {
                    log::warn!(target: "tern::server", "Reload: {name} cannot change while the server runs; keeping the running value");
                }
                if changes.authorization {
                    log::info!(target: "tern::server", "Reloaded: authorization ({})", settings.authorization.describe());
                    if settings.authorization.has_plain_passwords() {
                        log::warn!(target: "tern::server", "Plaintext passwords detected, use nkeys or bcrypt");
                    }
                }
                if changes.tls {
                    log::info!(target: "tern::server", "Reloaded: tls");
                }
                // Shard 0 first: whatever a peer shows, shard 0 (and its
                // monitor) shows already.
                let settings = Arc::new(settings);
                apply(&shard, &settings);
                shard
                    .links
                    .broadcast(|| ShardMessage::Reload(settings.clone()));
                running = next;
                log::info!(target: "tern::server", "Reloaded server configuration");
            }
        }
    }
}

/// Swaps in what a reload built (on every shard, shard 0 included):
/// new connections use it at once; with new authorization settings,
/// each open connection is checked again (`conn::reauthorize`).
pub fn apply(shard: &Rc<Shard>, settings: &Settings) {
    *shard.tls.borrow_mut() = settings.tls.clone();
    shard.config_load_time.set(SystemTime::now());
    let previous = shard.authorization.replace(settings.authorization.clone());
    if !settings.authorization_changed {
        // Unchanged settings travel as the very `Arc` that runs.
        assert!(Arc::ptr_eq(&previous, &settings.authorization));
        return;
    }
    let clients: Vec<Rc<Client>> = shard.clients.borrow().values().cloned().collect();
    for client in &clients {
        conn::reauthorize(shard, client, &previous, &settings.authorization);
    }
}
