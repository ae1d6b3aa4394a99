//! The simulated network: messages in flight with seeded delay (hence
//! reordering), loss and duplication, and partitions as a set of blocked
//! directed links (symmetric splits, one-way cuts, an isolated node). A
//! partition drops a message when it would be delivered, so cutting a link
//! also cuts what is already on it. Messages travel encoded by [`wire`],
//! so every simulated delivery also round-trips the codec.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Bytes, BytesMut};

use crate::message::Envelope;
use crate::sim::random::Random;
use crate::types::NodeId;
use crate::wire;

/// A message on the simulated wire.
#[derive(Debug, Clone)]
struct Packet {
    from: NodeId,
    to: NodeId,
    encoded: Bytes,
}

/// Per-message faults, in simulator steps for delays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetworkFaults {
    pub loss: f64,
    pub duplicate: f64,
    pub min_delay_steps: u64,
    pub max_delay_steps: u64,
    /// Chance a message is held much longer than usual (a reordering spike).
    pub long_delay: f64,
    pub long_delay_steps: u64,
}

impl NetworkFaults {
    /// A healed network: no loss, no duplication, short delays.
    pub fn calm(max_delay_steps: u64) -> NetworkFaults {
        NetworkFaults {
            loss: 0.0,
            duplicate: 0.0,
            min_delay_steps: 1,
            max_delay_steps: max_delay_steps.max(1),
            long_delay: 0.0,
            long_delay_steps: 0,
        }
    }
}

/// What happened to a message handed to the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Lost,
    Sent { copies: u32 },
}

#[derive(Debug)]
pub struct Network {
    in_flight: BTreeMap<(u64, u64), Packet>,
    next_sequence: u64,
    blocked: BTreeSet<(NodeId, NodeId)>,
    faults: NetworkFaults,
}

impl Network {
    pub fn new(faults: NetworkFaults) -> Network {
        Network {
            in_flight: BTreeMap::new(),
            next_sequence: 0,
            blocked: BTreeSet::new(),
            faults,
        }
    }

    pub fn set_faults(&mut self, faults: NetworkFaults) {
        self.faults = faults;
    }

    pub fn send(&mut self, now: u64, envelope: Envelope, random: &mut Random) -> Fate {
        if random.chance(self.faults.loss) {
            return Fate::Lost;
        }
        let mut encoded = BytesMut::with_capacity(wire::encoded_size_bytes(&envelope.message));
        wire::encode(&envelope.message, &mut encoded);
        let envelope = Packet {
            from: envelope.from,
            to: envelope.to,
            encoded: encoded.freeze(),
        };
        let copies = if random.chance(self.faults.duplicate) {
            2
        } else {
            1
        };
        if copies == 2 {
            self.schedule(now, envelope.clone(), random);
        }
        self.schedule(now, envelope, random);
        Fate::Sent { copies }
    }

    fn schedule(&mut self, now: u64, envelope: Packet, random: &mut Random) {
        let due = now + self.delay(random);
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.in_flight.insert((due, sequence), envelope);
    }

    fn delay(&self, random: &mut Random) -> u64 {
        let faults = &self.faults;
        let mut delay = random.between(faults.min_delay_steps, faults.max_delay_steps);
        if random.chance(faults.long_delay) {
            delay += random.between(1, faults.long_delay_steps.max(1));
        }
        delay
    }

    /// When the next message is due, if any.
    pub fn next_due(&self) -> Option<u64> {
        self.in_flight.keys().next().map(|(due, _)| *due)
    }

    /// The next message due at or before `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<Envelope> {
        let (&key, _) = self.in_flight.iter().next()?;
        if key.0 > now {
            return None;
        }
        let packet = self.in_flight.remove(&key)?;
        let message = wire::decode(&packet.encoded, &wire::DecodeLimits::default())
            .unwrap_or_else(|error| panic!("simulated wire: {error}"));
        Some(Envelope {
            from: packet.from,
            to: packet.to,
            message,
        })
    }

    pub fn is_blocked(&self, from: NodeId, to: NodeId) -> bool {
        self.blocked.contains(&(from, to))
    }

    /// A crashed node loses what was on the wire to and from it.
    pub fn drop_node(&mut self, node: NodeId) -> usize {
        let before = self.in_flight.len();
        self.in_flight
            .retain(|_, envelope| envelope.from != node && envelope.to != node);
        before - self.in_flight.len()
    }

    pub fn block(&mut self, from: NodeId, to: NodeId) {
        if from != to {
            self.blocked.insert((from, to));
        }
    }

    /// Cuts every link between `side` and `rest`, both ways.
    pub fn split(&mut self, side: &[NodeId], rest: &[NodeId]) {
        for &one in side {
            for &other in rest {
                self.block(one, other);
                self.block(other, one);
            }
        }
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    pub fn is_partitioned(&self) -> bool {
        !self.blocked.is_empty()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    fn envelope(from: NodeId, to: NodeId) -> Envelope {
        Envelope {
            from,
            to,
            message: Message::TimeoutNow { term: 1 },
        }
    }

    #[test]
    fn messages_arrive_in_due_order_and_crashes_drop_them() {
        let mut network = Network::new(NetworkFaults::calm(5));
        let mut random = Random::new(3);
        for _ in 0..20 {
            network.send(0, envelope(1, 2), &mut random);
            network.send(0, envelope(2, 3), &mut random);
        }
        assert_eq!(network.drop_node(3), 20);
        let mut last_due = 0;
        while let Some(due) = network.next_due() {
            assert!(due >= last_due);
            last_due = due;
            let delivered = network.pop_due(due).expect("due");
            assert_eq!(delivered.to, 2);
        }
        network.split(&[1], &[2, 3]);
        assert!(network.is_blocked(2, 1) && network.is_blocked(1, 3));
        assert!(!network.is_blocked(2, 3));
    }
}
