//! The frames nodes exchange on a route connection (sans-IO: encoders
//! append to a buffer, [`decode`] reads one frame from the front of one).
//!
//! Byte layout (all integers little-endian; `docs/cluster-transport.md`):
//!
//! ```text
//! frame   = length:u32  crc:u32  body[length]
//!           length: 1..=body_max (the receiver's limit, checked before the
//!           body is read); crc: CRC-32C of the body
//! body    = kind:u8 fields
//! string  = length:u16 bytes[length]
//!
//! kind 1 Hello     magic "TERN" version:u16 cluster:string server_id:string
//!                  server_name:string node_id:u64
//!                  shard_count:u16 shard_index:u16
//!                  client_url:string route_url:string
//!                  known_count:u16 known_route_url:string * known_count
//! kind 2 Refuse    reason:string
//! kind 3 Interest  weight:u32 subject:string queue:string   (queue "" = none,
//!                  weight 0 = no more interest)
//! kind 4 Message   header_bytes:u32 flags:u8 subject:string reply:string
//!                  routing:string (the subject interest matches, when it
//!                  differs: JetStream deliveries to an inbox; "" = subject)
//!                  queue_count:u16 queue:string * queue_count  message[rest]
//!                  flags: bit 0 has a reply; bit 1 for the named queue
//!                  groups only (not plain subscribers); others zero
//! kind 5 Routes    count:u16 route_url:string * count   (gossip)
//! kind 6 Ping      (empty)
//! kind 7 Pong      (empty)
//! kind 8 Raft      from:u64 to:u64 count:u32
//!                  (group:u64 length:u32 message[length]) * count
//!                  (Raft node ids; each message in `tern_raft::wire`
//!                  encoding, decoded by the receiver with its limits)
//! kind 9 Api       hops:u8 subject:string reply:string payload[rest]
//!                  (a JetStream API request handed to the node that
//!                  serves it: the meta leader, or a stream's host; the
//!                  receiver answers on `reply` through core routing)
//! ```
//!
//! A Message names the queue groups the sender chose this node for; the
//! receiver picks one local member of each.

use bytes::Bytes;

/// Bytes before a frame's body.
pub const FRAME_HEADER_BYTES: usize = 8;
/// First bytes of every Hello: garbage on the cluster port fails here.
pub const HELLO_MAGIC: &[u8; 4] = b"TERN";
pub const PROTOCOL_VERSION: u16 = 3;
/// Meta group voters a Hello names at most.
pub const META_VOTERS_MAX: usize = 64;
/// Longest name or URL in a Hello or Routes frame.
pub const NAME_BYTES_MAX: usize = 256;
/// Longest reason a Refuse carries.
pub const REFUSE_BYTES_MAX: usize = 1024;
/// Most route URLs one Hello or Routes frame carries.
pub const ROUTE_URLS_MAX: usize = 256;
/// Nodes a forwarded API request may pass: to the meta leader, then to
/// the node holding the stream.
pub const API_HOPS_MAX: u8 = 2;
/// A frame body's size beyond a message's payload: subject, reply and the
/// queue names it carries (the encoder splits a message over frames rather
/// than exceed it).
pub const MESSAGE_OVERHEAD_BYTES_MAX: usize = 256 * 1024;

/// Most (subject, queue) keys of one other node a shard keeps: what the
/// Interest frames of one route may make it hold.
pub const NODE_KEYS_MAX: usize = 1 << 20;

/// An Interest frame the receiving shard refused (the sending node's protocol
/// error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeInterestError {
    InvalidSubject,
    /// The node is at [`NODE_KEYS_MAX`].
    TooManyKeys,
}

const KIND_HELLO: u8 = 1;
const KIND_REFUSE: u8 = 2;
const KIND_INTEREST: u8 = 3;
const KIND_MESSAGE: u8 = 4;
const KIND_ROUTES: u8 = 5;
const KIND_PING: u8 = 6;
const KIND_PONG: u8 = 7;
const KIND_RAFT: u8 = 8;
const KIND_API: u8 = 9;

const MESSAGE_HAS_REPLY: u8 = 1;
const MESSAGE_QUEUES_ONLY: u8 = 2;

/// Who a node is, sent first on every route connection by both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub cluster: String,
    pub server_id: String,
    pub server_name: String,
    /// The Raft node id: its store's (`jetstream::identity`), the same
    /// across restarts; a new store, a new id.
    pub node_id: u64,
    pub shard_count: u16,
    pub shard_index: u16,
    /// `host:port` clients reach this node on (for INFO `connect_urls`).
    pub client_url: String,
    /// `host:port` other nodes reach this node's cluster port on; a host of
    /// `0.0.0.0` or `::` means "the address you see me from".
    pub route_url: String,
    /// The voters of the sender's JetStream meta group as its state holds
    /// them; empty while it has none. A node with a new store that sees a
    /// group it is not a voter of joins it instead of forming one of its
    /// own, and one it is a voter of it forms with those voters
    /// (`jetstream::cluster`).
    pub meta_voters: Vec<u64>,
    /// Route URLs of the other nodes the sender knows (gossip).
    pub known_routes: Vec<String>,
}

/// A message as carried between nodes, borrowed from the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutedFrame<'a> {
    pub subject: &'a [u8],
    /// What interest is matched against (the subject unless it differs).
    pub routing: &'a [u8],
    pub reply: Option<&'a [u8]>,
    pub header_bytes: usize,
    pub queues: Vec<&'a [u8]>,
    /// For the named queue groups only: a continuation frame of a message
    /// whose queue names did not fit in one.
    pub queues_only: bool,
    /// Header block then payload.
    pub message: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    Hello(Hello),
    Refuse(String),
    Interest {
        subject: &'a [u8],
        queue: Option<&'a [u8]>,
        weight: u32,
    },
    Message(RoutedFrame<'a>),
    Routes(Vec<String>),
    Ping,
    Pong,
    /// Raft messages from node `from` to node `to`, per group, still in
    /// wire encoding.
    Raft {
        from: u64,
        to: u64,
        messages: Vec<(u64, &'a [u8])>,
    },
    /// A JetStream API request forwarded to this node.
    Api {
        /// Nodes it passed through before this one (1 or 2).
        hops: u8,
        subject: &'a [u8],
        reply: Option<&'a [u8]>,
        payload: &'a [u8],
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {length} bytes is over the limit of {limit}")]
    TooLarge { length: usize, limit: usize },
    #[error("empty frame")]
    Empty,
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("malformed {0} frame")]
    Malformed(&'static str),
    #[error("not a tern route (bad magic)")]
    Magic,
    #[error("route protocol version {0} is not supported (this node speaks {PROTOCOL_VERSION})")]
    Version(u16),
}

/// Reads one frame from the front of `buffer`: `Ok(None)` if more bytes are
/// needed, else the frame and the bytes it took. `body_max` bounds the
/// length field before anything is buffered for it.
pub fn decode(buffer: &[u8], body_max: usize) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if buffer.len() < FRAME_HEADER_BYTES {
        return Ok(None);
    }
    let length = u32::from_le_bytes(buffer[0..4].try_into().expect("4 bytes")) as usize;
    if length == 0 {
        return Err(FrameError::Empty);
    }
    if length > body_max {
        return Err(FrameError::TooLarge {
            length,
            limit: body_max,
        });
    }
    let total = FRAME_HEADER_BYTES + length;
    if buffer.len() < total {
        return Ok(None);
    }
    let checksum = u32::from_le_bytes(buffer[4..8].try_into().expect("4 bytes"));
    let body = &buffer[FRAME_HEADER_BYTES..total];
    if crc32c::crc32c(body) != checksum {
        return Err(FrameError::Checksum);
    }
    Ok(Some((decode_body(body)?, total)))
}

/// How many bytes the frame at the front of `buffer` needs in all, once its
/// header is there (for sizing the read buffer).
pub fn frame_bytes(buffer: &[u8]) -> Option<usize> {
    (buffer.len() >= FRAME_HEADER_BYTES).then(|| {
        FRAME_HEADER_BYTES + u32::from_le_bytes(buffer[0..4].try_into().expect("4 bytes")) as usize
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    kind: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], FrameError> {
        if self.bytes.len() < count {
            return Err(FrameError::Malformed(self.kind));
        }
        let (taken, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn bytes(&mut self) -> Result<&'a [u8], FrameError> {
        let length = self.u16()? as usize;
        self.take(length)
    }

    /// A UTF-8 name or URL of at most [`NAME_BYTES_MAX`].
    fn name(&mut self) -> Result<String, FrameError> {
        let bytes = self.bytes()?;
        if bytes.len() > NAME_BYTES_MAX {
            return Err(FrameError::Malformed(self.kind));
        }
        String::from_utf8(bytes.to_vec()).map_err(|_| FrameError::Malformed(self.kind))
    }

    fn names(&mut self) -> Result<Vec<String>, FrameError> {
        let count = self.u16()? as usize;
        if count > ROUTE_URLS_MAX {
            return Err(FrameError::Malformed(self.kind));
        }
        (0..count).map(|_| self.name()).collect()
    }

    fn end(&self) -> Result<(), FrameError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Malformed(self.kind))
        }
    }
}

fn decode_body(body: &[u8]) -> Result<Frame<'_>, FrameError> {
    let kind = body[0];
    let fields = &body[1..];
    match kind {
        KIND_HELLO => {
            let mut reader = Reader {
                bytes: fields,
                kind: "hello",
            };
            if reader.take(4).map_err(|_| FrameError::Magic)? != HELLO_MAGIC {
                return Err(FrameError::Magic);
            }
            let version = reader.u16()?;
            if version != PROTOCOL_VERSION {
                return Err(FrameError::Version(version));
            }
            let hello = Hello {
                cluster: reader.name()?,
                server_id: reader.name()?,
                server_name: reader.name()?,
                node_id: reader.u64()?,
                shard_count: reader.u16()?,
                shard_index: reader.u16()?,
                client_url: reader.name()?,
                route_url: reader.name()?,
                known_routes: reader.names()?,
                meta_voters: Vec::new(),
            };
            let voters = reader.u16()? as usize;
            if voters > META_VOTERS_MAX {
                return Err(FrameError::Malformed("hello"));
            }
            let meta_voters = (0..voters)
                .map(|_| reader.u64())
                .collect::<Result<Vec<u64>, FrameError>>()?;
            if meta_voters.contains(&0) {
                return Err(FrameError::Malformed("hello"));
            }
            let hello = Hello {
                meta_voters,
                ..hello
            };
            reader.end()?;
            if hello.shard_count == 0 || hello.shard_index >= hello.shard_count {
                return Err(FrameError::Malformed("hello"));
            }
            Ok(Frame::Hello(hello))
        }
        KIND_REFUSE => {
            let mut reader = Reader {
                bytes: fields,
                kind: "refuse",
            };
            let reason = reader.bytes()?;
            reader.end()?;
            if reason.len() > REFUSE_BYTES_MAX {
                return Err(FrameError::Malformed("refuse"));
            }
            let reason =
                String::from_utf8(reason.to_vec()).map_err(|_| FrameError::Malformed("refuse"))?;
            Ok(Frame::Refuse(reason))
        }
        KIND_INTEREST => {
            let mut reader = Reader {
                bytes: fields,
                kind: "interest",
            };
            let weight = reader.u32()?;
            let subject = reader.bytes()?;
            let queue = reader.bytes()?;
            reader.end()?;
            if subject.is_empty() {
                return Err(FrameError::Malformed("interest"));
            }
            Ok(Frame::Interest {
                subject,
                queue: (!queue.is_empty()).then_some(queue),
                weight,
            })
        }
        KIND_MESSAGE => {
            let mut reader = Reader {
                bytes: fields,
                kind: "message",
            };
            let header_bytes = reader.u32()? as usize;
            let flags = reader.u8()?;
            if flags & !(MESSAGE_HAS_REPLY | MESSAGE_QUEUES_ONLY) != 0 {
                return Err(FrameError::Malformed("message"));
            }
            let has_reply = flags & MESSAGE_HAS_REPLY != 0;
            let subject = reader.bytes()?;
            let reply = reader.bytes()?;
            let routing = reader.bytes()?;
            let queue_count = reader.u16()? as usize;
            let mut queues = Vec::with_capacity(queue_count.min(64));
            for _ in 0..queue_count {
                let queue = reader.bytes()?;
                if queue.is_empty() {
                    return Err(FrameError::Malformed("message"));
                }
                queues.push(queue);
            }
            let message = reader.bytes;
            if subject.is_empty()
                || header_bytes > message.len()
                || (!has_reply && !reply.is_empty())
            {
                return Err(FrameError::Malformed("message"));
            }
            Ok(Frame::Message(RoutedFrame {
                subject,
                routing: if routing.is_empty() { subject } else { routing },
                reply: has_reply.then_some(reply),
                header_bytes,
                queues,
                queues_only: flags & MESSAGE_QUEUES_ONLY != 0,
                message,
            }))
        }
        KIND_API => {
            let mut reader = Reader {
                bytes: fields,
                kind: "api",
            };
            let hops = reader.u8()?;
            let subject = reader.bytes()?;
            let reply = reader.bytes()?;
            if subject.is_empty() || hops == 0 || hops > API_HOPS_MAX {
                return Err(FrameError::Malformed("api"));
            }
            Ok(Frame::Api {
                hops,
                subject,
                reply: (!reply.is_empty()).then_some(reply),
                payload: reader.bytes,
            })
        }
        KIND_ROUTES => {
            let mut reader = Reader {
                bytes: fields,
                kind: "routes",
            };
            let routes = reader.names()?;
            reader.end()?;
            Ok(Frame::Routes(routes))
        }
        KIND_RAFT => {
            let mut reader = Reader {
                bytes: fields,
                kind: "raft",
            };
            let from = reader.u64()?;
            let to = reader.u64()?;
            let count = reader.u32()? as usize;
            // Each message takes at least 12 bytes: a count beyond that is a lie.
            if count > reader.bytes.len() / 12 {
                return Err(FrameError::Malformed("raft"));
            }
            let mut messages = Vec::with_capacity(count);
            for _ in 0..count {
                let group = reader.u64()?;
                let length = reader.u32()? as usize;
                messages.push((group, reader.take(length)?));
            }
            reader.end()?;
            Ok(Frame::Raft { from, to, messages })
        }
        KIND_PING | KIND_PONG => {
            if !fields.is_empty() {
                return Err(FrameError::Malformed("ping"));
            }
            Ok(if kind == KIND_PING {
                Frame::Ping
            } else {
                Frame::Pong
            })
        }
        other => Err(FrameError::UnknownKind(other)),
    }
}

/// Appends one frame: reserves the header, lets `body` append the body,
/// then fills in length and checksum.
fn push_frame(buffer: &mut Vec<u8>, kind: u8, body: impl FnOnce(&mut Vec<u8>)) {
    let start = buffer.len();
    buffer.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    buffer.push(kind);
    body(buffer);
    let body_start = start + FRAME_HEADER_BYTES;
    let length = buffer.len() - body_start;
    let length = u32::try_from(length).expect("a frame body fits in u32");
    let checksum = crc32c::crc32c(&buffer[body_start..]);
    buffer[start..start + 4].copy_from_slice(&length.to_le_bytes());
    buffer[start + 4..start + 8].copy_from_slice(&checksum.to_le_bytes());
}

fn push_bytes(buffer: &mut Vec<u8>, bytes: &[u8]) {
    let length = u16::try_from(bytes.len()).expect("a frame string fits in u16");
    buffer.extend_from_slice(&length.to_le_bytes());
    buffer.extend_from_slice(bytes);
}

fn push_names(buffer: &mut Vec<u8>, names: &[String]) {
    let names = &names[..names.len().min(ROUTE_URLS_MAX)];
    buffer.extend_from_slice(&(names.len() as u16).to_le_bytes());
    for name in names {
        assert!(name.len() <= NAME_BYTES_MAX, "name {name:?} too long");
        push_bytes(buffer, name.as_bytes());
    }
}

pub fn push_hello(buffer: &mut Vec<u8>, hello: &Hello) {
    assert!(hello.shard_index < hello.shard_count);
    push_frame(buffer, KIND_HELLO, |buffer| {
        buffer.extend_from_slice(HELLO_MAGIC);
        buffer.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        for name in [&hello.cluster, &hello.server_id, &hello.server_name] {
            assert!(name.len() <= NAME_BYTES_MAX, "name {name:?} too long");
            push_bytes(buffer, name.as_bytes());
        }
        buffer.extend_from_slice(&hello.node_id.to_le_bytes());
        buffer.extend_from_slice(&hello.shard_count.to_le_bytes());
        buffer.extend_from_slice(&hello.shard_index.to_le_bytes());
        push_bytes(buffer, hello.client_url.as_bytes());
        push_bytes(buffer, hello.route_url.as_bytes());
        push_names(buffer, &hello.known_routes);
        let voters = &hello.meta_voters[..hello.meta_voters.len().min(META_VOTERS_MAX)];
        buffer.extend_from_slice(&(voters.len() as u16).to_le_bytes());
        for voter in voters {
            buffer.extend_from_slice(&voter.to_le_bytes());
        }
    });
}

pub fn push_refuse(buffer: &mut Vec<u8>, reason: &str) {
    let mut end = reason.len().min(REFUSE_BYTES_MAX);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let reason = &reason.as_bytes()[..end];
    push_frame(buffer, KIND_REFUSE, |buffer| push_bytes(buffer, reason));
}

pub fn push_interest(buffer: &mut Vec<u8>, subject: &[u8], queue: Option<&Bytes>, weight: u32) {
    assert!(!subject.is_empty());
    push_frame(buffer, KIND_INTEREST, |buffer| {
        buffer.extend_from_slice(&weight.to_le_bytes());
        push_bytes(buffer, subject);
        push_bytes(buffer, queue.map_or(&[][..], |queue| &queue[..]));
    });
}

/// Appends a message naming `queues`; when the names would pass
/// [`MESSAGE_OVERHEAD_BYTES_MAX`], the message goes in several frames,
/// each naming some of the groups (the first also for plain subscribers,
/// the others flagged for their groups only).
pub fn push_message(
    buffer: &mut Vec<u8>,
    routing: &[u8],
    subject: &[u8],
    reply: Option<&[u8]>,
    header_bytes: usize,
    message: &[u8],
    queues: &[Bytes],
) {
    assert!(header_bytes <= message.len());
    let mut rest = queues;
    let mut flags = if reply.is_some() {
        MESSAGE_HAS_REPLY
    } else {
        0
    };
    loop {
        let mut budget = MESSAGE_OVERHEAD_BYTES_MAX
            .saturating_sub(subject.len() + routing.len() + reply.map_or(0, <[u8]>::len) + 64);
        let mut count = 0;
        while count < rest.len() && count < u16::MAX as usize && rest[count].len() + 2 <= budget {
            budget -= rest[count].len() + 2;
            count += 1;
        }
        let (these, later) = rest.split_at(count);
        push_frame(buffer, KIND_MESSAGE, |buffer| {
            buffer.extend_from_slice(&(header_bytes as u32).to_le_bytes());
            buffer.push(flags);
            push_bytes(buffer, subject);
            push_bytes(buffer, reply.unwrap_or(&[]));
            push_bytes(buffer, if routing == subject { &[] } else { routing });
            buffer.extend_from_slice(&(these.len() as u16).to_le_bytes());
            for queue in these {
                push_bytes(buffer, queue);
            }
            buffer.extend_from_slice(message);
        });
        if later.is_empty() || count == 0 {
            return;
        }
        rest = later;
        flags |= MESSAGE_QUEUES_ONLY;
    }
}

pub fn push_routes(buffer: &mut Vec<u8>, routes: &[String]) {
    push_frame(buffer, KIND_ROUTES, |buffer| push_names(buffer, routes));
}

/// Appends Raft messages (`(group, wire bytes)`) from `from` to `to`, in
/// as many frames as keep each body within `body_max_bytes` (a message
/// larger than that on its own is a caller bug: Raft's limits keep them
/// smaller).
pub fn push_raft(
    buffer: &mut Vec<u8>,
    from: u64,
    to: u64,
    messages: &[(u64, Bytes)],
    body_max_bytes: usize,
) {
    const HEAD_BYTES: usize = 1 + 8 + 8 + 4;
    let mut rest = messages;
    while !rest.is_empty() {
        let mut bytes = HEAD_BYTES;
        let mut count = 0;
        while count < rest.len() && bytes + 12 + rest[count].1.len() <= body_max_bytes {
            bytes += 12 + rest[count].1.len();
            count += 1;
        }
        assert!(count > 0, "a Raft message larger than a frame");
        let (these, later) = rest.split_at(count);
        push_frame(buffer, KIND_RAFT, |buffer| {
            buffer.extend_from_slice(&from.to_le_bytes());
            buffer.extend_from_slice(&to.to_le_bytes());
            buffer.extend_from_slice(&(these.len() as u32).to_le_bytes());
            for (group, message) in these {
                buffer.extend_from_slice(&group.to_le_bytes());
                buffer.extend_from_slice(&(message.len() as u32).to_le_bytes());
                buffer.extend_from_slice(message);
            }
        });
        rest = later;
    }
}

/// Appends a forwarded JetStream API request (`reply` empty: none) that
/// has now passed `hops` nodes.
pub fn push_api(buffer: &mut Vec<u8>, hops: u8, subject: &[u8], reply: &[u8], payload: &[u8]) {
    assert!(!subject.is_empty() && (1..=API_HOPS_MAX).contains(&hops));
    push_frame(buffer, KIND_API, |buffer| {
        buffer.push(hops);
        push_bytes(buffer, subject);
        push_bytes(buffer, reply);
        buffer.extend_from_slice(payload);
    });
}

pub fn push_ping(buffer: &mut Vec<u8>) {
    push_frame(buffer, KIND_PING, |_| {});
}

pub fn push_pong(buffer: &mut Vec<u8>) {
    push_frame(buffer, KIND_PONG, |_| {});
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 1 << 20;

    fn hello() -> Hello {
        Hello {
            cluster: "orders".into(),
            server_id: "NABC".into(),
            server_name: "n1".into(),
            node_id: crate::cluster::node_id("n1"),
            shard_count: 4,
            shard_index: 2,
            client_url: "127.0.0.1:4222".into(),
            route_url: "0.0.0.0:6222".into(),
            known_routes: vec!["10.0.0.2:6222".into(), "10.0.0.3:6222".into()],
            meta_voters: vec![3, 1, 2],
        }
    }

    fn only(buffer: &[u8]) -> Frame<'_> {
        let (frame, used) = decode(buffer, LIMIT).unwrap().expect("a whole frame");
        assert_eq!(used, buffer.len());
        frame
    }

    #[test]
    fn every_kind_round_trips() {
        let mut buffer = Vec::new();
        push_hello(&mut buffer, &hello());
        assert_eq!(only(&buffer), Frame::Hello(hello()));

        buffer.clear();
        push_refuse(&mut buffer, "cluster name mismatch");
        assert_eq!(only(&buffer), Frame::Refuse("cluster name mismatch".into()));

        buffer.clear();
        push_interest(&mut buffer, b"a.*", Some(&Bytes::from_static(b"q")), 3);
        assert_eq!(
            only(&buffer),
            Frame::Interest {
                subject: b"a.*",
                queue: Some(b"q"),
                weight: 3
            }
        );
        buffer.clear();
        push_interest(&mut buffer, b"a.>", None, 0);
        assert_eq!(
            only(&buffer),
            Frame::Interest {
                subject: b"a.>",
                queue: None,
                weight: 0
            }
        );

        buffer.clear();
        let queues = [Bytes::from_static(b"q1"), Bytes::from_static(b"q2")];
        push_message(
            &mut buffer,
            b"a.b",
            b"a.b",
            Some(b"_INBOX.1"),
            5,
            b"h:xy\rpay",
            &queues,
        );
        assert_eq!(
            only(&buffer),
            Frame::Message(RoutedFrame {
                subject: b"a.b",
                routing: b"a.b",
                reply: Some(b"_INBOX.1"),
                header_bytes: 5,
                queues: vec![b"q1", b"q2"],
                queues_only: false,
                message: b"h:xy\rpay",
            })
        );
        buffer.clear();
        push_message(&mut buffer, b"_INBOX.9", b"a", Some(b""), 0, b"", &[]);
        let Frame::Message(message) = only(&buffer) else {
            panic!("a message");
        };
        assert_eq!(message.reply, Some(&b""[..]));
        assert_eq!(message.routing, b"_INBOX.9");
        assert_eq!(message.subject, b"a");

        buffer.clear();
        push_routes(&mut buffer, &["h:1".to_string()]);
        assert_eq!(only(&buffer), Frame::Routes(vec!["h:1".into()]));
        buffer.clear();
        push_ping(&mut buffer);
        push_pong(&mut buffer);
        let (first, used) = decode(&buffer, LIMIT).unwrap().unwrap();
        assert_eq!(first, Frame::Ping);
        assert_eq!(only(&buffer[used..]), Frame::Pong);

        buffer.clear();
        push_api(&mut buffer, 1, b"$JS.API.STREAM.INFO.S", b"_INBOX.2", b"{}");
        assert_eq!(
            only(&buffer),
            Frame::Api {
                hops: 1,
                subject: b"$JS.API.STREAM.INFO.S",
                reply: Some(b"_INBOX.2"),
                payload: b"{}"
            }
        );
        buffer.clear();
        push_api(&mut buffer, 2, b"$JS.API.INFO", b"", b"");
        assert_eq!(
            only(&buffer),
            Frame::Api {
                hops: 2,
                subject: b"$JS.API.INFO",
                reply: None,
                payload: b""
            }
        );
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let mut buffer = Vec::new();
        push_hello(&mut buffer, &hello());
        for cut in 0..buffer.len() {
            assert_eq!(decode(&buffer[..cut], LIMIT), Ok(None), "cut at {cut}");
        }
        assert_eq!(frame_bytes(&buffer[..8]), Some(buffer.len()));
    }

    #[test]
    fn damage_and_garbage_are_refused() {
        let mut buffer = Vec::new();
        push_interest(&mut buffer, b"a", None, 1);
        for bit in 64..buffer.len() * 8 {
            let mut damaged = buffer.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                decode(&damaged, LIMIT),
                Err(FrameError::Checksum),
                "bit {bit}"
            );
        }
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], LIMIT),
            Err(FrameError::TooLarge {
                length: u32::MAX as usize,
                limit: LIMIT
            })
        );
        assert_eq!(decode(&[0; 8], LIMIT), Err(FrameError::Empty));
        // A valid frame whose hello lacks the magic, and an unknown kind.
        let mut wrong = Vec::new();
        push_frame(&mut wrong, KIND_HELLO, |buffer| {
            buffer.extend_from_slice(b"NATS\x01\x00")
        });
        assert_eq!(decode(&wrong, LIMIT), Err(FrameError::Magic));
        wrong.clear();
        push_frame(&mut wrong, 99, |_| {});
        assert_eq!(decode(&wrong, LIMIT), Err(FrameError::UnknownKind(99)));
        wrong.clear();
        push_frame(&mut wrong, KIND_HELLO, |buffer| {
            buffer.extend_from_slice(b"TERN\x01\x00")
        });
        assert_eq!(decode(&wrong, LIMIT), Err(FrameError::Version(1)));
        // Truncated fields inside a checksummed body.
        wrong.clear();
        push_frame(&mut wrong, KIND_INTEREST, |buffer| {
            buffer.extend_from_slice(&[1, 0])
        });
        assert_eq!(
            decode(&wrong, LIMIT),
            Err(FrameError::Malformed("interest"))
        );
    }

    #[test]
    fn raft_batches_split_to_fit_the_limit() {
        let messages: Vec<(u64, Bytes)> = (0..100u64)
            .map(|group| (group, Bytes::from(vec![group as u8; 1000])))
            .collect();
        let mut buffer = Vec::new();
        push_raft(&mut buffer, 7, 9, &messages, 10_000);
        let mut seen = Vec::new();
        let mut offset = 0;
        while offset < buffer.len() {
            let (frame, used) = decode(&buffer[offset..], 10_000).unwrap().unwrap();
            let Frame::Raft { from, to, messages } = frame else {
                panic!("raft");
            };
            assert_eq!((from, to), (7, 9));
            seen.extend(
                messages
                    .iter()
                    .map(|(group, bytes)| (*group, bytes.to_vec())),
            );
            offset += used;
        }
        assert_eq!(seen.len(), 100);
        assert!(seen
            .iter()
            .zip(&messages)
            .all(|(a, b)| a.0 == b.0 && a.1[..] == b.1[..]));
        // A count no body could hold is refused before allocating for it.
        let mut lie = Vec::new();
        push_frame(&mut lie, KIND_RAFT, |buffer| {
            buffer.extend_from_slice(&[0; 16]);
            buffer.extend_from_slice(&u32::MAX.to_le_bytes());
        });
        assert_eq!(decode(&lie, LIMIT), Err(FrameError::Malformed("raft")));
    }

    #[test]
    fn many_queue_names_split_over_frames() {
        let queues: Vec<Bytes> = (0..20_000)
            .map(|index| Bytes::from(format!("queue-group-number-{index:08}")))
            .collect();
        let mut buffer = Vec::new();
        push_message(&mut buffer, b"a", b"a", None, 0, b"payload", &queues);
        let mut named = Vec::new();
        let mut offset = 0;
        while offset < buffer.len() {
            let (frame, used) = decode(&buffer[offset..], LIMIT).unwrap().unwrap();
            assert!(used - FRAME_HEADER_BYTES <= MESSAGE_OVERHEAD_BYTES_MAX + 64);
            let Frame::Message(message) = frame else {
                panic!("a message");
            };
            assert_eq!(message.message, b"payload");
            assert_eq!(message.queues_only, offset > 0);
            named.extend(message.queues.iter().map(|queue| queue.to_vec()));
            offset += used;
        }
        assert_eq!(named.len(), queues.len());
        assert!(named.iter().zip(&queues).all(|(a, b)| a[..] == b[..]));
    }
}
