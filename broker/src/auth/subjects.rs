//! `SubjectSet`: the subject patterns of one permission list (a user's
//! publish allow, subscribe deny, …), as a token trie, matched the way
//! nats-server's sublist matches them (`Sublist.Match`):
//!
//! - the tested subject's tokens are taken literally: a `*` or `>` in it
//!   only meets a pattern's `*`/`>` (which match any token) or a literal
//!   `*`/`>` token, so a SUB to `foo.*` is allowed by `foo.*` or `foo.>`,
//!   not by `foo.bar`;
//! - a subject with an empty token (`a..b`, `.a`) matches nothing;
//! - a subscribe entry may name a queue (`"orders.* workers"`): such entries
//!   decide for queue subscriptions only (nats-server's `qsubs`), and a
//!   queue name with wildcards matches queue names it covers.
//!
//! Immutable once built, `Send + Sync`: one compiled set serves every shard.

use rustc_hash::FxHashMap;

use crate::proto::subject;

/// What a subscribe rule may say besides its subject: a queue group.
#[derive(Debug, Default)]
struct Entries {
    /// A rule without a queue ends here.
    plain: bool,
    /// Queue names of the rules with a queue that end here.
    queues: Vec<Box<[u8]>>,
}

#[derive(Debug, Default)]
struct Node {
    literals: FxHashMap<Box<[u8]>, Node>,
    /// The `*` child.
    single: Option<Box<Node>>,
    /// Rules whose `>` is the token after this node.
    full: Option<Entries>,
    /// Rules that end at this node.
    end: Option<Entries>,
}

/// What matching one subject found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SetMatch {
    /// A rule without a queue matched.
    pub plain: bool,
    /// A rule with a queue matched (whatever its queue).
    pub queue_rules: bool,
    /// A rule with a queue matched and its queue matches the tested queue.
    pub queue_matched: bool,
}

/// A set of subject patterns (see the module comment).
#[derive(Debug, Default)]
pub struct SubjectSet {
    root: Node,
    len: usize,
}

/// Why a pattern cannot go into a set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("subject {0:?} is not a valid subject")]
    InvalidSubject(String),
    #[error("queue {0:?} is not a valid queue")]
    InvalidQueue(String),
}

impl SubjectSet {
    pub fn new() -> SubjectSet {
        SubjectSet::default()
    }

    /// Rules in the set.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a publish rule: a subject pattern.
    pub fn insert_subject(&mut self, pattern: &str) -> Result<(), PatternError> {
        if !subject::is_valid_subject(pattern.as_bytes()) {
            return Err(PatternError::InvalidSubject(pattern.to_string()));
        }
        self.insert(pattern.as_bytes(), None);
        Ok(())
    }

    /// Adds a subscribe rule: `subject` or `subject queue` (nats-server's
    /// `splitSubjectQueue`: split on whitespace, both parts valid subjects).
    pub fn insert_subscribe_rule(&mut self, rule: &str) -> Result<(), PatternError> {
        let parts: Vec<&str> = rule.split_whitespace().collect();
        match parts[..] {
            [pattern] if subject::is_valid_subject(pattern.as_bytes()) => {
                self.insert(pattern.as_bytes(), None)
            }
            [pattern, queue] => {
                if !subject::is_valid_subject(pattern.as_bytes()) {
                    return Err(PatternError::InvalidSubject(pattern.to_string()));
                }
                if !subject::is_valid_subject(queue.as_bytes()) {
                    return Err(PatternError::InvalidQueue(queue.to_string()));
                }
                self.insert(pattern.as_bytes(), Some(queue.as_bytes()))
            }
            _ => return Err(PatternError::InvalidSubject(rule.to_string())),
        }
        Ok(())
    }

    fn insert(&mut self, pattern: &[u8], queue: Option<&[u8]>) {
        assert!(subject::is_valid_subject(pattern));
        let mut node = &mut self.root;
        let mut tokens = subject::tokens(pattern).peekable();
        let entries = loop {
            let token = tokens.next().expect("a valid subject has a token");
            let last = tokens.peek().is_none();
            if subject::is_full_wildcard(token) {
                assert!(last, "`>` is the last token of a valid subject");
                break node.full.get_or_insert_with(Entries::default);
            }
            node = if subject::is_single_wildcard(token) {
                node.single.get_or_insert_with(Box::default)
            } else {
                node.literals.entry(token.into()).or_default()
            };
            if last {
                break node.end.get_or_insert_with(Entries::default);
            }
        };
        match queue {
            None => entries.plain = true,
            Some(queue) => {
                if !entries.queues.iter().any(|known| &known[..] == queue) {
                    entries.queues.push(queue.into());
                }
            }
        }
        self.len += 1;
    }

    /// Matches `subject` (its tokens taken literally); `queue` is the
    /// queue a subscription asks for, to test queue rules against.
    pub fn matches(&self, subject: &[u8], queue: Option<&[u8]>) -> SetMatch {
        let mut found = SetMatch::default();
        if subject.is_empty() || subject::tokens(subject).any(<[u8]>::is_empty) {
            return found;
        }
        visit(&self.root, Some(subject), &mut |entries: &Entries| {
            found.plain |= entries.plain;
            if !entries.queues.is_empty() {
                found.queue_rules = true;
                if let Some(queue) = queue {
                    found.queue_matched |= entries
                        .queues
                        .iter()
                        .any(|rule_queue| queue_matches(queue, rule_queue));
                }
            }
        });
        found
    }

    /// Whether any rule without a queue matches `subject` (publish rules).
    pub fn has_match(&self, subject: &[u8]) -> bool {
        self.matches(subject, None).plain
    }
}

/// Walks the trie along `rest` (the subject's remaining tokens; `None` once
/// all are consumed), reporting every rule that matches.
fn visit(node: &Node, rest: Option<&[u8]>, report: &mut impl FnMut(&Entries)) {
    let Some(rest) = rest else {
        if let Some(end) = &node.end {
            report(end);
        }
        return;
    };
    // `>` matches one or more tokens: whatever is left.
    if let Some(full) = &node.full {
        report(full);
    }
    let (token, after) = match rest.iter().position(|&byte| byte == subject::SEPARATOR) {
        Some(dot) => (&rest[..dot], Some(&rest[dot + 1..])),
        None => (rest, None),
    };
    if let Some(single) = &node.single {
        visit(single, after, report);
    }
    if let Some(child) = node.literals.get(token) {
        visit(child, after, report);
    }
}

/// nats-server's `queueMatches` for one rule: the same name, or a rule
/// queue with wildcards that covers the asked queue (`isSubsetMatch`).
pub fn queue_matches(queue: &[u8], rule_queue: &[u8]) -> bool {
    queue == rule_queue || (subject::has_wildcard(rule_queue) && is_subset_match(queue, rule_queue))
}

/// nats-server's `isSubsetMatchTokenized`: whether everything `tested`
/// (which may itself hold wildcards) stands for is covered by `pattern`.
pub fn is_subset_match(tested: &[u8], pattern: &[u8]) -> bool {
    let tested_tokens: smallvec::SmallVec<[&[u8]; 16]> = subject::tokens(tested).collect();
    let mut count = 0;
    for (index, pattern_token) in subject::tokens(pattern).enumerate() {
        count = index + 1;
        let Some(&tested_token) = tested_tokens.get(index) else {
            return false;
        };
        if pattern_token.is_empty() {
            return false;
        }
        if subject::is_full_wildcard(pattern_token) {
            return true;
        }
        if tested_token.is_empty() || subject::is_full_wildcard(tested_token) {
            return false;
        }
        if subject::is_single_wildcard(tested_token) {
            if !subject::is_single_wildcard(pattern_token) {
                return false;
            }
            continue;
        }
        if !subject::is_single_wildcard(pattern_token) && tested_token != pattern_token {
            return false;
        }
    }
    tested_tokens.len() == count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish_set(patterns: &[&str]) -> SubjectSet {
        let mut set = SubjectSet::new();
        for pattern in patterns {
            set.insert_subject(pattern).unwrap();
        }
        set
    }

    fn subscribe_set(rules: &[&str]) -> SubjectSet {
        let mut set = SubjectSet::new();
        for rule in rules {
            set.insert_subscribe_rule(rule).unwrap();
        }
        set
    }

    #[test]
    fn literal_and_wildcard_patterns_match_like_the_sublist() {
        let set = publish_set(&["orders.created", "metrics.*", "events.>", "a.*.c"]);
        assert_eq!(set.len(), 4);
        for allowed in [
            "orders.created",
            "metrics.cpu",
            "events.a",
            "events.a.b.c",
            "a.b.c",
            "a.*.c",
        ] {
            assert!(set.has_match(allowed.as_bytes()), "{allowed}");
        }
        for refused in [
            "orders",
            "orders.created.x",
            "orders.updated",
            "metrics",
            "metrics.cpu.user",
            "events",
            "a.b",
            "a.b.c.d",
            "",
            "events..x",
            ".events.a",
        ] {
            assert!(!set.has_match(refused.as_bytes()), "{refused}");
        }
    }

    #[test]
    fn a_tested_subject_with_wildcards_meets_only_wildcard_rules() {
        // nats-server: allow `foo.*` lets a client subscribe to `foo.*`
        // (and, as its sublist treats `>` as a token, to `foo.>`), `foo.bar`
        // does not.
        let exact = publish_set(&["foo.bar"]);
        assert!(!exact.has_match(b"foo.*"));
        assert!(!exact.has_match(b"foo.>"));
        let single = publish_set(&["foo.*"]);
        assert!(single.has_match(b"foo.*"));
        assert!(single.has_match(b"foo.>"));
        let full = publish_set(&["foo.>"]);
        assert!(full.has_match(b"foo.*.baz"));
        assert!(publish_set(&[">"]).has_match(b">"));
    }

    #[test]
    fn queue_rules_decide_for_queue_subscriptions_only() {
        let set = subscribe_set(&["orders.* workers", "orders.eu", "jobs.> pool.*"]);
        let plain = set.matches(b"orders.us", None);
        assert_eq!(
            plain,
            SetMatch {
                plain: false,
                queue_rules: true,
                queue_matched: false
            }
        );
        let workers = set.matches(b"orders.us", Some(b"workers"));
        assert!(workers.queue_matched && !workers.plain);
        assert!(!set.matches(b"orders.us", Some(b"others")).queue_matched);
        let eu = set.matches(b"orders.eu", Some(b"others"));
        assert!(eu.plain && eu.queue_rules && !eu.queue_matched);
        assert!(set.matches(b"jobs.a.b", Some(b"pool.one")).queue_matched);
        assert!(
            !set.matches(b"jobs.a.b", Some(b"pool.one.two"))
                .queue_matched
        );
    }

    #[test]
    fn bad_rules_are_refused_with_what_is_wrong() {
        let mut set = SubjectSet::new();
        assert_eq!(
            set.insert_subject("a..b"),
            Err(PatternError::InvalidSubject("a..b".into()))
        );
        assert!(set.insert_subject("a.>.b").is_err());
        assert!(set.insert_subject("").is_err());
        assert!(set.insert_subject("foo q").is_err());
        assert_eq!(
            set.insert_subscribe_rule("foo a..b"),
            Err(PatternError::InvalidQueue("a..b".into()))
        );
        assert!(set.insert_subscribe_rule("foo q extra").is_err());
        assert!(set.insert_subscribe_rule("  ").is_err());
        assert!(set.is_empty());
    }

    #[test]
    fn subset_matching_follows_nats_server() {
        assert!(is_subset_match(b"foo.bar", b"foo.*"));
        assert!(is_subset_match(b"foo.*", b"foo.*"));
        assert!(is_subset_match(b"foo.*", b">"));
        assert!(is_subset_match(b"foo.*", b"*.*"));
        assert!(!is_subset_match(b"foo.*", b"foo.bar"));
        assert!(!is_subset_match(b"foo.>", b"foo.*"));
        assert!(!is_subset_match(b"foo", b"foo.*"));
        assert!(!is_subset_match(b"foo.bar.baz", b"foo.*"));
        assert!(queue_matches(b"v1.*", b"v1.*"));
        assert!(queue_matches(b"v1.a", b"v1.*"));
        assert!(!queue_matches(b"v2.a", b"v1.*"));
    }
}
