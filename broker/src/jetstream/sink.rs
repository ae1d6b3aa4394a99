//! JetStream's internal sinks: what the router hands a message an internal
//! subscription of JetStream matched (`crate::internal`). Each sink names
//! its role; the router sees only `InternalSink`.

use std::rc::{Rc, Weak};

use crate::internal::InternalSink;
use crate::proto::encode::Delivery;

use super::stream::StreamHandle;
use super::JetStream;

/// What a JetStream subscription is for.
pub(super) enum Role {
    /// `$JS.API.>` on every shard: requests are handled or forwarded from here.
    Api,
    /// A stream's subjects on its owner shard: the message is stored.
    Stream(Rc<StreamHandle>),
    /// `$JS.API.DIRECT.GET.<stream>` (and `.>`) on the owner shard, when the
    /// stream allows direct gets.
    DirectGet(Rc<StreamHandle>),
    /// `$JS.ACK.<stream>.>` and `$JS.FC.<stream>.>` on the owner shard:
    /// acks and flow control replies for its consumers.
    Ack(Rc<StreamHandle>),
    /// `$JSC.R.<node>.>` on shard 0 of a clustered node: answers to the
    /// meta leader's listings (`jetstream::listing`).
    GatherReply,
}

pub(super) struct JetStreamSink {
    pub(super) js: Weak<JetStream>,
    pub(super) role: Role,
}

impl InternalSink for JetStreamSink {
    fn receive(&self, delivery: &Delivery<'_>, local: bool) -> bool {
        let Some(js) = self.js.upgrade() else {
            return false;
        };
        let body = &delivery.message[delivery.header_bytes..];
        match &self.role {
            // The API subscription is on every shard, so a message another
            // shard forwarded (`local` false) never reaches it twice.
            Role::Api => {
                local
                    && js.on_api(
                        delivery.subject,
                        delivery.reply,
                        delivery.header_bytes,
                        delivery.message,
                    )
            }
            Role::Stream(handle) => {
                js.on_stream_publish(
                    handle,
                    delivery.subject,
                    delivery.reply,
                    delivery.header_bytes,
                    delivery.message,
                );
                true
            }
            Role::Ack(handle) => {
                js.on_ack(handle, delivery.subject, delivery.reply, body);
                true
            }
            Role::GatherReply => {
                js.on_gather_reply(delivery.subject, body);
                true
            }
            Role::DirectGet(handle) => {
                js.on_direct_get(
                    handle,
                    delivery.subject,
                    delivery.reply,
                    delivery.header_bytes,
                    delivery.message,
                );
                true
            }
        }
    }

    fn kind(&self) -> &'static str {
        match self.role {
            Role::Api => "jetstream-api",
            Role::Stream(_) => "stream",
            Role::DirectGet(_) => "direct-get",
            Role::Ack(_) => "ack",
            Role::GatherReply => "gather-reply",
        }
    }
}
