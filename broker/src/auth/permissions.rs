//! A user's permissions, with nats-server's semantics (`client.go`
//! `setPermissions`, `pubAllowedFullCheck`, `canSubscribe`,
//! `checkDenySub`, `responseAllowed`):
//!
//! - publish: an allow list, when present (even empty), admits only what it
//!   matches; a deny list refuses what it matches. `allow_responses` turns
//!   the blanket allow off (an empty allow list) and lets the user publish
//!   to the reply subject of each request delivered to it, `max` times
//!   within `expires`.
//! - subscribe: an allow list (present only when non-empty) and a deny
//!   list; rules may name a queue (`"subject queue"`) and then decide for
//!   queue subscriptions only. A wildcard or queue subscription that a deny
//!   rule overlaps is filtered at delivery: a denied subject never reaches it.
//!
//! [`Permissions`] is the compiled, immutable rule set (shared by every
//! connection of the user, on every shard). [`ConnectionPermissions`] is one
//! connection's view: its caches and the reply subjects it may answer.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::subjects::SubjectSet;

/// nats-server `DEFAULT_ALLOW_RESPONSE_MAX_MSGS`.
pub const DEFAULT_RESPONSE_MAX_MESSAGES: i64 = 1;
/// nats-server `DEFAULT_ALLOW_RESPONSE_EXPIRATION`.
pub const DEFAULT_RESPONSE_EXPIRES: Duration = Duration::from_secs(120);

/// Publish verdicts a connection remembers (nats-server `maxPermCacheSize`).
pub const PUBLISH_CACHE_ENTRIES_MAX: usize = 128;
/// Delivery-filter verdicts a connection remembers (nats-server
/// `maxDenyPermCacheSize`).
pub const DENY_CACHE_ENTRIES_MAX: usize = 256;
/// Verdicts dropped at once when a cache is full (nats-server `pruneSize`).
pub const CACHE_PRUNE_ENTRIES: usize = 32;
/// Reply subjects one connection may hold permission to answer at once. A
/// request delivered past it is not answerable (its response is refused as
/// a publish violation) until older grants are used or expire.
pub const RESPONSE_GRANTS_MAX: usize = 65_536;
/// Grants are swept for used and expired ones after this many new ones, or
/// this long after the last sweep (nats-server `replyPermLimit`, `replyPruneTime`).
pub const RESPONSE_SWEEP_GRANTS: usize = 4096;
pub const RESPONSE_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// `allow_responses`: how often and how long a received request's reply
/// subject may be published to. `None` means without limit (nats-server: a
/// negative value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePermission {
    pub max_messages: Option<u64>,
    pub expires: Option<Duration>,
}

impl Default for ResponsePermission {
    fn default() -> Self {
        ResponsePermission {
            max_messages: Some(DEFAULT_RESPONSE_MAX_MESSAGES as u64),
            expires: Some(DEFAULT_RESPONSE_EXPIRES),
        }
    }
}

/// One user's compiled permissions.
#[derive(Debug, Default)]
pub struct Permissions {
    pub publish_allow: Option<SubjectSet>,
    pub publish_deny: Option<SubjectSet>,
    pub subscribe_allow: Option<SubjectSet>,
    pub subscribe_deny: Option<SubjectSet>,
    pub responses: Option<ResponsePermission>,
}

impl Permissions {
    /// Whether publishes are checked at all (nats-server: allow or deny set).
    pub fn restricts_publish(&self) -> bool {
        self.publish_allow.is_some() || self.publish_deny.is_some()
    }

    /// The static publish rules (without granted responses).
    pub fn publish_allowed(&self, subject: &[u8]) -> bool {
        let allowed = self
            .publish_allow
            .as_ref()
            .is_none_or(|allow| allow.has_match(subject));
        allowed
            && self
                .publish_deny
                .as_ref()
                .is_none_or(|deny| !deny.has_match(subject))
    }

    /// nats-server `canSubscribeInternal` for a client connection.
    pub fn subscribe_allowed(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        let mut allowed = true;
        if let Some(allow) = &self.subscribe_allow {
            let found = allow.matches(subject, queue);
            allowed = found.plain;
            if queue.is_some() && found.queue_rules {
                allowed = found.queue_matched;
            }
        }
        if allowed {
            if let Some(deny) = &self.subscribe_deny {
                let found = deny.matches(subject, queue);
                allowed = !found.plain;
                if allowed && queue.is_some() && found.queue_rules {
                    allowed = !found.queue_matched;
                }
            }
        }
        allowed
    }

    /// Whether deliveries to a subscription on `subject` must be checked
    /// against the deny rules: it may receive subjects other than its own
    /// (a wildcard) or is a queue subscription, and there are deny rules.
    /// (nats-server loads its delivery filter when such a subscription
    /// collides with a deny rule; checking every such subscription gives
    /// the same answers, as a delivery that no deny rule overlaps passes.)
    pub fn filters_delivery(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        self.subscribe_deny.is_some()
            && (queue.is_some() || crate::proto::subject::has_wildcard(subject))
    }

    /// nats-server `checkDenySub`: a delivery the deny rules refuse.
    pub fn delivery_denied(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        let Some(deny) = &self.subscribe_deny else {
            return false;
        };
        let found = deny.matches(subject, queue);
        found.plain || (queue.is_some() && found.queue_rules && found.queue_matched)
    }
}

/// One granted reply subject.
#[derive(Debug, Clone, Copy)]
struct ResponseGrant {
    granted: Instant,
    used: u64,
}

/// One connection's permissions: the user's rules plus this connection's
/// caches and response grants. Lives on the connection's shard only.
#[derive(Debug)]
pub struct ConnectionPermissions {
    rules: Arc<Permissions>,
    /// Publish verdicts by subject. Why a cache: a publisher sends to few
    /// subjects over and over, and one hash lookup replaces walking the
    /// allow and deny tries (a branch per wildcard level) on every message;
    /// bounded, so a client publishing to ever new subjects (inboxes)
    /// costs a walk and a small allocation per miss, never memory. Only
    /// verdicts that do not depend on response grants are kept.
    publish_cache: RefCell<FxHashMap<Box<[u8]>, bool>>,
    /// Delivery-filter verdicts by `subject` or `subject queue`.
    deny_cache: RefCell<FxHashMap<Box<[u8]>, bool>>,
    /// Builds `subject queue` keys without allocating per lookup.
    deny_key: RefCell<Vec<u8>>,
    grants: RefCell<FxHashMap<Box<[u8]>, ResponseGrant>>,
    grants_since_sweep: Cell<usize>,
    last_sweep: Cell<Instant>,
}

impl ConnectionPermissions {
    pub fn new(rules: Arc<Permissions>, now: Instant) -> ConnectionPermissions {
        ConnectionPermissions {
            rules,
            publish_cache: RefCell::new(FxHashMap::default()),
            deny_cache: RefCell::new(FxHashMap::default()),
            deny_key: RefCell::new(Vec::new()),
            grants: RefCell::new(FxHashMap::default()),
            grants_since_sweep: Cell::new(0),
            last_sweep: Cell::new(now),
        }
    }

    pub fn rules(&self) -> &Permissions {
        &self.rules
    }

    /// Whether this connection may publish to `subject` now. Uses up one
    /// use of a response grant when only a grant allows it.
    pub fn publish_allowed(&self, subject: &[u8], now: Instant) -> bool {
        if let Some(&verdict) = self.publish_cache.borrow().get(subject) {
            return verdict;
        }
        let allowed = self.rules.publish_allowed(subject);
        if !allowed && self.rules.responses.is_some() {
            // nats-server keeps such verdicts out of the cache: a grant may
            // come or go with the next delivery.
            return self.use_grant(subject, now);
        }
        remember(
            &mut self.publish_cache.borrow_mut(),
            subject,
            allowed,
            PUBLISH_CACHE_ENTRIES_MAX,
        );
        allowed
    }

    /// Whether responses are granted per delivered request.
    pub fn tracks_responses(&self) -> bool {
        self.rules.responses.is_some()
    }

    /// A request with `reply` was delivered to this connection: it may
    /// answer it (nats-server `deliverMsg`), unless it already may publish
    /// there anyway.
    pub fn grant_response(&self, reply: &[u8], now: Instant) {
        let Some(responses) = self.rules.responses else {
            return;
        };
        if self.rules.publish_allowed(reply) {
            return;
        }
        let since = self.grants_since_sweep.get() + 1;
        self.grants_since_sweep.set(since);
        if since > RESPONSE_SWEEP_GRANTS
            || now.saturating_duration_since(self.last_sweep.get()) > RESPONSE_SWEEP_INTERVAL
        {
            self.sweep_grants(responses, now);
        }
        let mut grants = self.grants.borrow_mut();
        let grant = ResponseGrant {
            granted: now,
            used: 0,
        };
        if let Some(existing) = grants.get_mut(reply) {
            *existing = grant;
        } else if grants.len() < RESPONSE_GRANTS_MAX {
            grants.insert(reply.into(), grant);
        } else {
            log::debug!(target: "tern::auth", "response grants full ({RESPONSE_GRANTS_MAX}): {:?} not granted", String::from_utf8_lossy(reply));
        }
    }

    /// Response grants held now.
    pub fn grant_count(&self) -> usize {
        self.grants.borrow().len()
    }

    fn use_grant(&self, subject: &[u8], now: Instant) -> bool {
        let responses = self.rules.responses.expect("checked by the caller");
        let mut grants = self.grants.borrow_mut();
        let Some(grant) = grants.get_mut(subject) else {
            return false;
        };
        grant.used += 1;
        let exhausted = responses.max_messages.is_some_and(|max| grant.used > max);
        let expired = responses
            .expires
            .is_some_and(|expires| now.saturating_duration_since(grant.granted) > expires);
        if exhausted || expired {
            grants.remove(subject);
            return false;
        }
        true
    }

    /// nats-server `pruneReplyPerms`: drops used-up and expired grants.
    fn sweep_grants(&self, responses: ResponsePermission, now: Instant) {
        self.grants.borrow_mut().retain(|_, grant| {
            let exhausted = responses.max_messages.is_some_and(|max| grant.used >= max);
            let expired = responses
                .expires
                .is_some_and(|expires| now.saturating_duration_since(grant.granted) > expires);
            !(exhausted || expired)
        });
        self.grants_since_sweep.set(0);
        self.last_sweep.set(now);
    }

    /// Whether a delivery of `subject` to a filtered subscription (see
    /// [`Permissions::filters_delivery`]) with `queue` is refused.
    pub fn delivery_denied(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        let mut key = self.deny_key.borrow_mut();
        key.clear();
        key.extend_from_slice(subject);
        if let Some(queue) = queue {
            // A space never appears in a subject or a queue name.
            key.push(b' ');
            key.extend_from_slice(queue);
        }
        if let Some(&denied) = self.deny_cache.borrow().get(&key[..]) {
            return denied;
        }
        let denied = self.rules.delivery_denied(subject, queue);
        remember(
            &mut self.deny_cache.borrow_mut(),
            &key,
            denied,
            DENY_CACHE_ENTRIES_MAX,
        );
        denied
    }
}

/// Adds a verdict, first dropping [`CACHE_PRUNE_ENTRIES`] of them when the
/// cache is full (nats-server drops random ones; the hash order is as good).
fn remember(cache: &mut FxHashMap<Box<[u8]>, bool>, key: &[u8], verdict: bool, max: usize) {
    if cache.len() >= max {
        let mut dropped = 0;
        cache.retain(|_, _| {
            dropped += 1;
            dropped > CACHE_PRUNE_ENTRIES
        });
    }
    assert!(cache.len() < max);
    cache.insert(key.into(), verdict);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(rules: &[&str], subscribe: bool) -> SubjectSet {
        let mut set = SubjectSet::new();
        for rule in rules {
            if subscribe {
                set.insert_subscribe_rule(rule).unwrap();
            } else {
                set.insert_subject(rule).unwrap();
            }
        }
        set
    }

    #[test]
    fn publish_allow_then_deny() {
        let rules = Permissions {
            publish_allow: Some(set(&["orders.>", "$JS.API.>"], false)),
            publish_deny: Some(set(&["orders.secret", "$JS.API.STREAM.DELETE.>"], false)),
            ..Permissions::default()
        };
        assert!(rules.restricts_publish());
        assert!(rules.publish_allowed(b"orders.new"));
        assert!(rules.publish_allowed(b"$JS.API.STREAM.INFO.S"));
        assert!(!rules.publish_allowed(b"orders.secret"));
        assert!(!rules.publish_allowed(b"$JS.API.STREAM.DELETE.S"));
        assert!(!rules.publish_allowed(b"billing.x"));
        // An empty allow list admits nothing; no lists admit everything.
        let closed = Permissions {
            publish_allow: Some(SubjectSet::new()),
            ..Permissions::default()
        };
        assert!(!closed.publish_allowed(b"anything"));
        assert!(!Permissions::default().restricts_publish());
        assert!(Permissions::default().publish_allowed(b"anything"));
    }

    #[test]
    fn subscribe_rules_with_queues_follow_nats_server() {
        // allow = ["foo"]            -> sub or queue sub to foo, any queue
        // allow = ["foo v1"]         -> only queue sub to foo with v1
        // allow = ["foo", "foo v1"]  -> sub to foo, queue sub only with v1
        let any_queue = Permissions {
            subscribe_allow: Some(set(&["foo"], true)),
            ..Permissions::default()
        };
        assert!(any_queue.subscribe_allowed(b"foo", None));
        assert!(any_queue.subscribe_allowed(b"foo", Some(b"q")));
        let only_v1 = Permissions {
            subscribe_allow: Some(set(&["foo v1"], true)),
            ..Permissions::default()
        };
        assert!(!only_v1.subscribe_allowed(b"foo", None));
        assert!(only_v1.subscribe_allowed(b"foo", Some(b"v1")));
        assert!(!only_v1.subscribe_allowed(b"foo", Some(b"v2")));
        let both = Permissions {
            subscribe_allow: Some(set(&["foo", "foo v1"], true)),
            ..Permissions::default()
        };
        assert!(both.subscribe_allowed(b"foo", None));
        assert!(both.subscribe_allowed(b"foo", Some(b"v1")));
        assert!(!both.subscribe_allowed(b"foo", Some(b"v2")));
        let deny_queue = Permissions {
            subscribe_deny: Some(set(&["foo.* bad"], true)),
            ..Permissions::default()
        };
        assert!(deny_queue.subscribe_allowed(b"foo.a", None));
        assert!(deny_queue.subscribe_allowed(b"foo.a", Some(b"good")));
        assert!(!deny_queue.subscribe_allowed(b"foo.a", Some(b"bad")));
    }

    #[test]
    fn wildcard_subscriptions_are_filtered_at_delivery() {
        let rules = Permissions {
            subscribe_deny: Some(set(&["secret.>", "jobs.* drainers"], true)),
            ..Permissions::default()
        };
        // `>` itself is allowed (it is not denied as a whole) ...
        assert!(rules.subscribe_allowed(b">", None));
        assert!(!rules.subscribe_allowed(b"secret.plans", None));
        assert!(rules.filters_delivery(b">", None));
        assert!(!rules.filters_delivery(b"public.news", None));
        assert!(rules.filters_delivery(b"jobs.a", Some(b"drainers")));
        // ... but what it denies never reaches it.
        let connection = ConnectionPermissions::new(Arc::new(rules), Instant::now());
        assert!(connection.delivery_denied(b"secret.plans", None));
        assert!(!connection.delivery_denied(b"public.news", None));
        assert!(connection.delivery_denied(b"jobs.x", Some(b"drainers")));
        assert!(!connection.delivery_denied(b"jobs.x", Some(b"others")));
        // Cached answers are the same.
        assert!(connection.delivery_denied(b"secret.plans", None));
        assert!(!connection.delivery_denied(b"jobs.x", Some(b"others")));
    }

    #[test]
    fn response_grants_allow_max_replies_within_expiry() {
        let rules = Permissions {
            publish_allow: Some(set(&["api.>"], false)),
            responses: Some(ResponsePermission {
                max_messages: Some(2),
                expires: Some(Duration::from_secs(10)),
            }),
            ..Permissions::default()
        };
        let start = Instant::now();
        let connection = ConnectionPermissions::new(Arc::new(rules), start);
        assert!(connection.tracks_responses());
        assert!(!connection.publish_allowed(b"_INBOX.a", start));
        connection.grant_response(b"_INBOX.a", start);
        // A reply that is publishable anyway is not tracked.
        connection.grant_response(b"api.reply", start);
        assert_eq!(connection.grant_count(), 1);
        assert!(connection.publish_allowed(b"_INBOX.a", start));
        assert!(connection.publish_allowed(b"_INBOX.a", start));
        assert!(!connection.publish_allowed(b"_INBOX.a", start), "max 2");
        assert_eq!(connection.grant_count(), 0);
        connection.grant_response(b"_INBOX.b", start);
        let later = start + Duration::from_secs(11);
        assert!(!connection.publish_allowed(b"_INBOX.b", later), "expired");
        // Allowed subjects stay allowed and are cached.
        assert!(connection.publish_allowed(b"api.x", later));
        assert!(connection.publish_allowed(b"api.x", later));
    }

    #[test]
    fn grants_are_swept_and_bounded() {
        let rules = Permissions {
            publish_allow: Some(SubjectSet::new()),
            responses: Some(ResponsePermission {
                max_messages: Some(1),
                expires: Some(Duration::from_millis(100)),
            }),
            ..Permissions::default()
        };
        let start = Instant::now();
        let connection = ConnectionPermissions::new(Arc::new(rules), start);
        for index in 0..1000u32 {
            connection.grant_response(format!("_INBOX.{index}").as_bytes(), start);
        }
        assert_eq!(connection.grant_count(), 1000);
        // A second later every old grant has expired: the next grant sweeps.
        connection.grant_response(b"_INBOX.new", start + Duration::from_secs(2));
        assert_eq!(connection.grant_count(), 1);
    }

    #[test]
    fn the_publish_cache_stays_bounded() {
        let rules = Permissions {
            publish_deny: Some(set(&["secret.>"], false)),
            ..Permissions::default()
        };
        let now = Instant::now();
        let connection = ConnectionPermissions::new(Arc::new(rules), now);
        for index in 0..10 * PUBLISH_CACHE_ENTRIES_MAX {
            let subject = format!("inbox.{index}");
            assert!(connection.publish_allowed(subject.as_bytes(), now));
            assert!(connection.publish_cache.borrow().len() <= PUBLISH_CACHE_ENTRIES_MAX);
        }
        assert!(!connection.publish_allowed(b"secret.x", now));
        assert!(!connection.publish_allowed(b"secret.x", now));
    }
}
