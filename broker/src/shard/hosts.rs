//! What the layers below the node need of a shard, implemented by it: the
//! shard's routes ([`RouteHost`]). They never name the shard.

use std::rc::Rc;
use std::time::Duration;

use tern_shard::Shutdown;

use super::Shard;
use crate::cluster::frame::{NodeInterestError, RoutedFrame};
use crate::cluster::link::RouteLink;
use crate::cluster::routes::{RouteHost, Routes};
use crate::tls::RouteTls;

impl RouteHost for Shard {
    fn routes(&self) -> &Routes {
        self.routes.as_ref().expect("routes run on a clustered shard")
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
