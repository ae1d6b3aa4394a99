//! What the layers below the node need of a shard, implemented by it: the
//! shard's routes ([`RouteHost`]) and its client connections
//! ([`ClientHost`]). They never name the shard.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tern_shard::Shutdown;

use super::Shard;
use crate::auth::Authorization;
use crate::cluster::frame::{NodeInterestError, RoutedFrame};
use crate::cluster::link::RouteLink;
use crate::cluster::routes::{RouteHost, Routes};
use crate::config::Limits;
use crate::nats::conn::{Client, ClientHost, Subscription};
use crate::proto::info::ServerInfo;
use crate::proto::parser::Publish;
use crate::proto::subject::InvalidSubject;
use crate::stats::ShardCounters;
use crate::tls::{RouteTls, TlsServer};

impl RouteHost for Shard {
    fn routes(&self) -> &Routes {
        self.routes
            .as_ref()
            .expect("routes run on a clustered shard")
    }

    fn shard_index(&self) -> usize {
        self.index
    }

    fn shard_count(&self) -> usize {
        self.shard_count
    }

    fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    fn write_deadline(&self) -> Duration {
        self.config.limits.write_deadline
    }

    fn route_tls(&self) -> Option<&RouteTls> {
        self.shared.route_tls.as_ref()
    }

    fn link_opened(&self, link: &Rc<RouteLink>) {
        self.routing.route_link_opened(link);
    }

    fn link_closed(&self, link: &Rc<RouteLink>) {
        self.routing.node_link_closed(link.peer.node_id, link.id);
    }

    fn cluster_changed(&self) {
        Shard::cluster_changed(self);
    }

    fn deliver(&self, message: &RoutedFrame<'_>) {
        self.routing.deliver_from_route(message);
    }

    fn apply_interest(
        &self,
        node_id: u64,
        subject: &[u8],
        queue: Option<&[u8]>,
        weight: u32,
    ) -> Result<(), NodeInterestError> {
        self.routing
            .apply_node_interest(node_id, subject, queue, weight)
    }

    fn has_jetstream(&self) -> bool {
        self.jetstream.get().is_some()
    }

    fn raft_message(&self, group: u64, envelope: tern_raft::Envelope) {
        if let Some(jetstream) = self.jetstream.get() {
            jetstream.raft_message(group, envelope);
        }
    }

    fn forwarded_api(&self, hops: u8, subject: &[u8], reply: Option<&[u8]>, payload: &[u8]) {
        if let Some(jetstream) = self.jetstream.get() {
            jetstream.on_forwarded_api(hops, subject, reply, payload);
        }
    }

    async fn frames_handled(&self) {
        self.routing.flush_inline();
        self.routing.stall_for_consumers().await;
    }

    async fn catch_up_with_peers(&self) {
        Shard::catch_up_with_peers(self).await;
    }
}

impl ClientHost for Shard {
    fn shard_index(&self) -> usize {
        self.index
    }

    fn limits(&self) -> &Limits {
        &self.config.limits
    }

    fn counters(&self) -> &ShardCounters {
        &self.counters
    }

    fn server_info(&self, client: &Client) -> ServerInfo {
        Shard::server_info(self, client)
    }

    fn tls(&self) -> Option<TlsServer> {
        Shard::tls(self)
    }

    fn authorization(&self) -> Arc<Authorization> {
        Shard::authorization(self)
    }

    fn remove_client(&self, client: &Client) {
        Shard::remove_client(self, client);
    }

    fn random_below(&self, bound: u64) -> u64 {
        self.routing.router.borrow().random_below(bound)
    }

    fn route_publish(&self, client: &Rc<Client>, publish: &Publish<'_>) {
        self.routing.route_publish(client, publish);
    }

    fn subscribe(&self, subscription: &Rc<Subscription>) -> Result<Option<u64>, InvalidSubject> {
        self.routing.subscribe(subscription)
    }

    fn unsubscribe(&self, client: &Client, subscription: &Rc<Subscription>) {
        self.routing.unsubscribe(client, subscription);
    }

    fn pong_now_or_defer(&self, needed: u64, client: &Rc<Client>) -> bool {
        self.routing.pong_now_or_defer(needed, client)
    }

    async fn catch_up_with_peers(&self) {
        Shard::catch_up_with_peers(self).await;
    }

    async fn input_handled(&self) {
        self.routing.flush_inline();
        self.routing.stall_for_consumers().await;
        if self.links.congested() {
            self.links.wait_for_space().await;
        }
    }
}
