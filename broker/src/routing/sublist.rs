//! The subscription index: a trie over subject tokens with `*` and `>`
//! children, plus a bounded cache of match results keyed by published subject.
//!
//! One `Sublist` per shard holds that shard's own subscriptions and the
//! interest other shards have announced (see `router`). Entries are opaque to
//! the trie (`T: SublistEntry`, compared by identity). Queue subscriptions are
//! grouped by queue name across all matching patterns, as nats-server does.
//!
//! Cache invalidation: inserting or removing a literal subject drops that one
//! cache entry; a wildcard pattern drops every cached subject it matches.

use std::rc::Rc;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::proto::subject::{self, is_full_wildcard, is_single_wildcard, InvalidSubject};
pub use crate::stats::SublistStats;

/// Match results cached at most; past it a quarter is evicted.
pub const CACHE_ENTRIES_MAX: usize = 1024;
const CACHE_EVICT_ENTRIES: usize = CACHE_ENTRIES_MAX / 4;
/// Tokens matched without a heap allocation.
const TOKENS_INLINE: usize = 32;
/// Prefix-keyed match results cached at most; past it all are dropped.
pub const PREFIX_CACHE_ENTRIES_MAX: usize = 256;

/// Identity comparison for entries (pointer equality for `Rc`s).
pub trait SublistEntry: Clone {
    fn same(&self, other: &Self) -> bool;
}

/// Everything a published subject matches.
#[derive(Debug)]
pub struct Matches<T> {
    pub plain: Vec<T>,
    pub queues: Vec<QueueMatches<T>>,
}

#[derive(Debug)]
pub struct QueueMatches<T> {
    pub name: Bytes,
    pub members: Vec<T>,
}

impl<T> Matches<T> {
    fn empty() -> Self {
        Matches {
            plain: Vec::new(),
            queues: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.queues.is_empty()
    }

    /// Plain entries plus queue members.
    pub fn fanout(&self) -> usize {
        self.plain.len()
            + self
                .queues
                .iter()
                .map(|queue| queue.members.len())
                .sum::<usize>()
    }
}

impl<T: Clone> Matches<T> {
    fn add_node(&mut self, node: &Node<T>) {
        self.plain.extend(node.plain.iter().cloned());
        for (name, members) in &node.queues {
            match self.queues.iter_mut().find(|queue| queue.name == name) {
                Some(queue) => queue.members.extend(members.iter().cloned()),
                None => self.queues.push(QueueMatches {
                    name: name.clone(),
                    members: members.clone(),
                }),
            }
        }
    }
}

struct Node<T> {
    literal: FxHashMap<Box<[u8]>, Node<T>>,
    single: Option<Box<Node<T>>>,
    full: Option<Box<Node<T>>>,
    plain: Vec<T>,
    queues: Vec<(Bytes, Vec<T>)>,
}

impl<T> Node<T> {
    fn new() -> Self {
        Node {
            literal: FxHashMap::default(),
            single: None,
            full: None,
            plain: Vec::new(),
            queues: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.literal.is_empty()
            && self.single.is_none()
            && self.full.is_none()
            && self.plain.is_empty()
            && self.queues.is_empty()
    }
}

pub struct Sublist<T> {
    root: Node<T>,
    cache: FxHashMap<Bytes, Rc<Matches<T>>>,
    /// Results shared by every subject with the key's leading tokens and at
    /// least one more (see [`Sublist::matches_by_prefix`]).
    prefix_cache: FxHashMap<Bytes, Rc<Matches<T>>>,
    count: usize,
    stats: SublistStats,
}

impl<T: SublistEntry> Default for Sublist<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: SublistEntry> Sublist<T> {
    pub fn new() -> Self {
        Sublist {
            root: Node::new(),
            cache: FxHashMap::default(),
            prefix_cache: FxHashMap::default(),
            count: 0,
            stats: SublistStats::default(),
        }
    }

    /// Entries in the index.
    pub fn count(&self) -> usize {
        self.count
    }

    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }

    pub fn stats(&self) -> SublistStats {
        self.stats
    }

    /// Adds `entry` under `subject` (and `queue`).
    pub fn insert(
        &mut self,
        subject: &[u8],
        queue: Option<&Bytes>,
        entry: T,
    ) -> Result<(), InvalidSubject> {
        if !subject::is_valid_subject(subject) {
            return Err(InvalidSubject);
        }
        let mut node = &mut self.root;
        for token in subject::tokens(subject) {
            node = if is_single_wildcard(token) {
                node.single.get_or_insert_with(|| Box::new(Node::new()))
            } else if is_full_wildcard(token) {
                node.full.get_or_insert_with(|| Box::new(Node::new()))
            } else {
                node.literal.entry(token.into()).or_insert_with(Node::new)
            };
        }
        match queue {
            None => node.plain.push(entry),
            Some(name) => match node
                .queues
                .iter_mut()
                .find(|(existing, _)| existing == name)
            {
                Some((_, members)) => members.push(entry),
                None => node.queues.push((name.clone(), vec![entry])),
            },
        }
        self.count += 1;
        self.stats.inserts += 1;
        self.invalidate(subject);
        Ok(())
    }

    /// Removes `entry` from under `subject` (and `queue`); false if absent.
    pub fn remove(&mut self, subject: &[u8], queue: Option<&Bytes>, entry: &T) -> bool {
        let tokens: Vec<&[u8]> = subject::tokens(subject).collect();
        let removed = remove_from(&mut self.root, &tokens, queue, entry);
        if removed {
            assert!(self.count > 0);
            self.count -= 1;
            self.stats.removes += 1;
            self.invalidate(subject);
        }
        removed
    }

    fn invalidate(&mut self, pattern: &[u8]) {
        self.invalidate_prefixes(pattern);
        if self.cache.is_empty() {
            return;
        }
        if subject::has_wildcard(pattern) {
            self.cache
                .retain(|cached, _| !subject::matches(pattern, cached));
        } else {
            self.cache.remove(pattern);
        }
    }

    /// Everything `subject` matches; cached.
    pub fn matches(&mut self, subject: &[u8]) -> Rc<Matches<T>> {
        self.stats.matches += 1;
        if let Some(found) = self.cache.get(subject) {
            self.stats.cache_hits += 1;
            return found.clone();
        }
        let result = Rc::new(self.match_uncached(subject));
        let fanout = result.fanout() as u64;
        self.stats.fanout_total += fanout;
        self.stats.fanout_max = self.stats.fanout_max.max(fanout);
        if self.cache.len() >= CACHE_ENTRIES_MAX {
            let mut evicted = 0;
            self.cache.retain(|_, _| {
                evicted += 1;
                evicted > CACHE_EVICT_ENTRIES
            });
        }
        self.cache
            .insert(Bytes::copy_from_slice(subject), result.clone());
        result
    }

    /// Like [`Sublist::matches`] but a miss is not cached: for subjects
    /// used once (replies to unique inboxes), which would only churn the
    /// cache.
    pub fn matches_transient(&mut self, subject: &[u8]) -> Rc<Matches<T>> {
        self.stats.matches += 1;
        if let Some(found) = self.cache.get(subject) {
            self.stats.cache_hits += 1;
            return found.clone();
        }
        Rc::new(self.match_uncached(subject))
    }

    /// Everything `subject` matches, cached under its first
    /// `prefix_tokens` tokens when no subscription tells apart the subjects
    /// that share them: every trie node those tokens reach has neither
    /// literal nor `*` children, so a longer subject matches exactly the `>`
    /// entries met on the way. For subjects unique past a shared prefix
    /// (`$JS.ACK.<stream>.<consumer>.…`), where the whole-subject cache
    /// would only miss.
    pub fn matches_by_prefix(&mut self, subject: &[u8], prefix_tokens: usize) -> Rc<Matches<T>> {
        assert!(prefix_tokens > 0);
        let Some(prefix_bytes) = subject
            .iter()
            .enumerate()
            .filter(|(_, byte)| **byte == b'.')
            .nth(prefix_tokens - 1)
            .map(|(index, _)| index)
        else {
            return self.matches_transient(subject);
        };
        let (prefix, rest) = (&subject[..prefix_bytes], &subject[prefix_bytes + 1..]);
        // The trie matches nothing for an empty token; neither may the cache.
        let rest_is_valid = !rest.is_empty()
            && !rest.starts_with(b".")
            && !rest.ends_with(b".")
            && !rest.windows(2).any(|pair| pair == b"..");
        if !rest_is_valid || prefix.split(|byte| *byte == b'.').any(<[u8]>::is_empty) {
            return self.matches_transient(subject);
        }
        self.stats.matches += 1;
        if let Some(found) = self.prefix_cache.get(prefix) {
            self.stats.cache_hits += 1;
            return found.clone();
        }
        let result = Rc::new(self.match_uncached(subject));
        let tokens: Vec<&[u8]> = subject::tokens(prefix).collect();
        if frontier_is_final(&self.root, &tokens) {
            if self.prefix_cache.len() >= PREFIX_CACHE_ENTRIES_MAX {
                self.prefix_cache.clear();
            }
            self.prefix_cache
                .insert(Bytes::copy_from_slice(prefix), result.clone());
        }
        result
    }

    /// Drops the prefix-keyed results `pattern` could change: those whose
    /// first token it can match (its first token is a wildcard or the same).
    fn invalidate_prefixes(&mut self, pattern: &[u8]) {
        if self.prefix_cache.is_empty() {
            return;
        }
        let first = subject::tokens(pattern).next().unwrap_or_default();
        if is_single_wildcard(first) || is_full_wildcard(first) {
            self.prefix_cache.clear();
            return;
        }
        self.prefix_cache
            .retain(|prefix, _| subject::tokens(prefix).next().unwrap_or_default() != first);
    }

    fn match_uncached(&self, subject: &[u8]) -> Matches<T> {
        let mut result = Matches::empty();
        let mut inline: [&[u8]; TOKENS_INLINE] = [&[]; TOKENS_INLINE];
        let mut spilled: Vec<&[u8]> = Vec::new();
        let mut count = 0;
        for token in subject::tokens(subject) {
            if token.is_empty() {
                return result;
            }
            if count < TOKENS_INLINE {
                inline[count] = token;
            } else {
                if spilled.is_empty() {
                    spilled.extend_from_slice(&inline);
                }
                spilled.push(token);
            }
            count += 1;
        }
        let tokens = if spilled.is_empty() {
            &inline[..count]
        } else {
            &spilled[..]
        };
        collect(&self.root, tokens, &mut result);
        result
    }

    /// Calls `visit` with every entry (for monitoring and shutdown).
    pub fn for_each(&self, mut visit: impl FnMut(&T)) {
        fn walk<T>(node: &Node<T>, visit: &mut impl FnMut(&T)) {
            node.plain.iter().for_each(&mut *visit);
            for (_, members) in &node.queues {
                members.iter().for_each(&mut *visit);
            }
            for child in node.literal.values() {
                walk(child, visit);
            }
            if let Some(child) = &node.single {
                walk(child, visit);
            }
            if let Some(child) = &node.full {
                walk(child, visit);
            }
        }
        walk(&self.root, &mut visit);
    }
}

fn collect<T: Clone>(node: &Node<T>, tokens: &[&[u8]], out: &mut Matches<T>) {
    let Some((token, rest)) = tokens.split_first() else {
        out.add_node(node);
        return;
    };
    if let Some(full) = &node.full {
        out.add_node(full);
    }
    if let Some(child) = node.literal.get(*token) {
        collect(child, rest, out);
    }
    if let Some(single) = &node.single {
        collect(single, rest, out);
    }
}

/// Whether every node `tokens` reach has no literal and no `*` child, so
/// what follows the tokens can only be matched by `>` entries.
fn frontier_is_final<T>(node: &Node<T>, tokens: &[&[u8]]) -> bool {
    let Some((token, rest)) = tokens.split_first() else {
        return node.literal.is_empty() && node.single.is_none();
    };
    node.literal
        .get(*token)
        .is_none_or(|child| frontier_is_final(child, rest))
        && node
            .single
            .as_deref()
            .is_none_or(|child| frontier_is_final(child, rest))
}

fn remove_from<T: SublistEntry>(
    node: &mut Node<T>,
    tokens: &[&[u8]],
    queue: Option<&Bytes>,
    entry: &T,
) -> bool {
    let Some((token, rest)) = tokens.split_first() else {
        return match queue {
            None => remove_entry(&mut node.plain, entry),
            Some(name) => {
                let Some(position) = node
                    .queues
                    .iter()
                    .position(|(existing, _)| existing == name)
                else {
                    return false;
                };
                let removed = remove_entry(&mut node.queues[position].1, entry);
                if node.queues[position].1.is_empty() {
                    node.queues.swap_remove(position);
                }
                removed
            }
        };
    };
    if is_single_wildcard(token) {
        let Some(child) = node.single.as_mut() else {
            return false;
        };
        let removed = remove_from(child, rest, queue, entry);
        if child.is_empty() {
            node.single = None;
        }
        removed
    } else if is_full_wildcard(token) {
        let Some(child) = node.full.as_mut() else {
            return false;
        };
        let removed = remove_from(child, rest, queue, entry);
        if child.is_empty() {
            node.full = None;
        }
        removed
    } else {
        let Some(child) = node.literal.get_mut(*token) else {
            return false;
        };
        let removed = remove_from(child, rest, queue, entry);
        if child.is_empty() {
            node.literal.remove(*token);
        }
        removed
    }
}

fn remove_entry<T: SublistEntry>(entries: &mut Vec<T>, entry: &T) -> bool {
    match entries.iter().position(|existing| existing.same(entry)) {
        Some(position) => {
            // Keep insertion order: the first plain subscription of a client
            // on a reply subject is the one no-responders answers on.
            entries.remove(position);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Id(u32);

    impl SublistEntry for Id {
        fn same(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }

    fn plain_ids(sublist: &mut Sublist<Id>, subject: &[u8]) -> Vec<u32> {
        let mut ids: Vec<u32> = sublist
            .matches(subject)
            .plain
            .iter()
            .map(|id| id.0)
            .collect();
        ids.sort();
        ids
    }

    #[test]
    fn matches_literals_and_wildcards() {
        let mut sublist = Sublist::new();
        sublist.insert(b"foo.bar", None, Id(1)).unwrap();
        sublist.insert(b"foo.*", None, Id(2)).unwrap();
        sublist.insert(b"foo.>", None, Id(3)).unwrap();
        sublist.insert(b">", None, Id(4)).unwrap();
        sublist.insert(b"*.bar", None, Id(5)).unwrap();
        assert_eq!(plain_ids(&mut sublist, b"foo.bar"), vec![1, 2, 3, 4, 5]);
        assert_eq!(plain_ids(&mut sublist, b"foo.baz"), vec![2, 3, 4]);
        assert_eq!(plain_ids(&mut sublist, b"foo.bar.baz"), vec![3, 4]);
        assert_eq!(plain_ids(&mut sublist, b"foo"), vec![4]);
        assert_eq!(plain_ids(&mut sublist, b"foo..bar"), Vec::<u32>::new());
        assert_eq!(plain_ids(&mut sublist, b"foo."), Vec::<u32>::new());
        assert_eq!(sublist.count(), 5);
    }

    #[test]
    fn rejects_invalid_subjects() {
        let mut sublist: Sublist<Id> = Sublist::new();
        for bad in [&b""[..], b"foo.", b"foo..bar", b"foo.>.bar"] {
            assert_eq!(sublist.insert(bad, None, Id(1)), Err(InvalidSubject));
        }
        assert_eq!(sublist.count(), 0);
    }

    #[test]
    fn groups_queues_by_name_across_patterns() {
        let mut sublist = Sublist::new();
        let workers = Bytes::from_static(b"workers");
        let other = Bytes::from_static(b"other");
        sublist.insert(b"jobs.*", Some(&workers), Id(1)).unwrap();
        sublist.insert(b"jobs.>", Some(&workers), Id(2)).unwrap();
        sublist.insert(b"jobs.a", Some(&other), Id(3)).unwrap();
        let matches = sublist.matches(b"jobs.a");
        assert!(matches.plain.is_empty());
        assert_eq!(matches.queues.len(), 2);
        let workers_group = matches
            .queues
            .iter()
            .find(|queue| queue.name == workers)
            .unwrap();
        assert_eq!(workers_group.members.len(), 2);
    }

    #[test]
    fn cache_is_invalidated_by_inserts_and_removes() {
        let mut sublist = Sublist::new();
        assert!(sublist.matches(b"a.b").is_empty());
        sublist.insert(b"a.*", None, Id(1)).unwrap();
        assert_eq!(plain_ids(&mut sublist, b"a.b"), vec![1]);
        sublist.insert(b"a.b", None, Id(2)).unwrap();
        assert_eq!(plain_ids(&mut sublist, b"a.b"), vec![1, 2]);
        assert_eq!(plain_ids(&mut sublist, b"a.b"), vec![1, 2]);
        assert!(sublist.remove(b"a.*", None, &Id(1)));
        assert_eq!(plain_ids(&mut sublist, b"a.b"), vec![2]);
        assert!(!sublist.remove(b"a.*", None, &Id(1)));
        assert!(sublist.remove(b"a.b", None, &Id(2)));
        assert!(sublist.matches(b"a.b").is_empty());
        assert_eq!(sublist.count(), 0);
        assert!(sublist.stats().cache_hits > 0);
    }

    fn sorted_plain(matches: &Matches<Id>) -> Vec<u32> {
        let mut ids: Vec<u32> = matches.plain.iter().map(|id| id.0).collect();
        ids.sort();
        ids
    }

    #[test]
    fn prefix_cache_serves_subjects_that_share_a_prefix() {
        let mut sublist = Sublist::new();
        sublist.insert(b"$JS.ACK.S.C.>", None, Id(1)).unwrap();
        sublist.insert(b"$JS.ACK.>", None, Id(2)).unwrap();
        sublist.insert(b"_INBOX.a", None, Id(3)).unwrap();
        let first = sublist.matches_by_prefix(b"$JS.ACK.S.C.1.1.1.1.0", 4);
        assert_eq!(sorted_plain(&first), vec![1, 2]);
        let second = sublist.matches_by_prefix(b"$JS.ACK.S.C.1.2.2.5.7", 4);
        assert!(Rc::ptr_eq(&first, &second), "the second ack is a cache hit");
        // A literal inbox elsewhere leaves the cached prefix alone.
        sublist.insert(b"_INBOX.b", None, Id(4)).unwrap();
        let third = sublist.matches_by_prefix(b"$JS.ACK.S.C.1.3.3.5.6", 4);
        assert!(Rc::ptr_eq(&first, &third));
        // A subscription that tells these acks apart turns caching off.
        sublist.insert(b"$JS.ACK.S.C.1.4.>", None, Id(5)).unwrap();
        let fourth = sublist.matches_by_prefix(b"$JS.ACK.S.C.1.4.4.5.6", 4);
        assert_eq!(sorted_plain(&fourth), vec![1, 2, 5]);
        let fifth = sublist.matches_by_prefix(b"$JS.ACK.S.C.1.5.5.5.6", 4);
        assert_eq!(sorted_plain(&fifth), vec![1, 2]);
        assert!(!Rc::ptr_eq(&fourth, &fifth), "not cached while told apart");
        assert!(sublist.remove(b"$JS.ACK.S.C.1.4.>", None, &Id(5)));
        // A root wildcard drops everything cached.
        let cached = sublist.matches_by_prefix(b"$JS.ACK.S.C.1.6.6.5.6", 4);
        sublist.insert(b"*.ACK.S.C.>", None, Id(6)).unwrap();
        let after = sublist.matches_by_prefix(b"$JS.ACK.S.C.1.7.7.5.6", 4);
        assert_eq!(sorted_plain(&cached), vec![1, 2]);
        assert_eq!(sorted_plain(&after), vec![1, 2, 6]);
        // Invalid or short subjects match as the trie does.
        assert!(sublist.matches_by_prefix(b"$JS.ACK.S.C..1", 4).is_empty());
        assert!(sublist.matches_by_prefix(b"$JS.ACK.S.C.1.", 4).is_empty());
        assert_eq!(
            sorted_plain(&sublist.matches_by_prefix(b"$JS.ACK.S.C", 4)),
            vec![2]
        );
    }

    /// Random subscriptions and subjects over a small alphabet: the prefix
    /// cache always agrees with a fresh walk of the trie.
    #[test]
    fn prefix_cache_agrees_with_the_trie() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let tokens: [&[u8]; 5] = [b"a", b"b", b"c", b"*", b">"];
        let mut sublist = Sublist::new();
        let mut live: Vec<(Vec<u8>, u32)> = Vec::new();
        for step in 0..20_000u32 {
            if next(16) == 0 {
                if live.len() >= 4 || (!live.is_empty() && next(2) == 0) {
                    let (pattern, id) = live.swap_remove(next(live.len() as u64) as usize);
                    assert!(sublist.remove(&pattern, None, &Id(id)));
                } else {
                    let length = 1 + next(3) as usize;
                    let mut pattern = Vec::new();
                    for index in 0..length {
                        let token = tokens[next(5) as usize];
                        if index > 0 {
                            pattern.push(b'.');
                        }
                        pattern.extend_from_slice(token);
                        if token == b">" {
                            break;
                        }
                    }
                    sublist.insert(&pattern, None, Id(step)).unwrap();
                    live.push((pattern, step));
                }
            }
            let length = 1 + next(6) as usize;
            let subject: Vec<u8> = (0..length)
                .map(|_| tokens[next(3) as usize])
                .collect::<Vec<_>>()
                .join(&b'.');
            let prefix_tokens = 1 + next(3) as usize;
            let cached = sublist.matches_by_prefix(&subject, prefix_tokens);
            let fresh = sublist.match_uncached(&subject);
            assert_eq!(sorted_plain(&cached), sorted_plain(&fresh), "step {step}");
        }
        let hits = sublist.stats().cache_hits;
        assert!(hits > 1000, "the cache was used: {hits} hits");
    }

    #[test]
    fn removal_prunes_the_trie() {
        let mut sublist = Sublist::new();
        let queue = Bytes::from_static(b"q");
        sublist.insert(b"a.b.c", None, Id(1)).unwrap();
        sublist.insert(b"a.*.>", Some(&queue), Id(2)).unwrap();
        assert!(sublist.remove(b"a.b.c", None, &Id(1)));
        assert!(sublist.remove(b"a.*.>", Some(&queue), &Id(2)));
        assert!(sublist.root.is_empty());
    }

    #[test]
    fn cache_stays_bounded() {
        let mut sublist = Sublist::new();
        sublist.insert(b">", None, Id(1)).unwrap();
        for index in 0..(CACHE_ENTRIES_MAX * 3) {
            let subject = format!("s.{index}");
            assert_eq!(sublist.matches(subject.as_bytes()).plain.len(), 1);
            assert!(sublist.cache_len() <= CACHE_ENTRIES_MAX);
        }
    }

    #[test]
    fn agrees_with_the_reference_matcher() {
        // Randomised cross-check of the trie against `subject::matches`.
        let patterns: Vec<&[u8]> = vec![
            b"a", b"a.b", b"a.*", b"a.>", b"*", b">", b"*.b", b"a.*.c", b"a.b.>", b"*.*", b"b.>",
            b"a.b.c",
        ];
        let subjects: Vec<&[u8]> = vec![
            b"a", b"b", b"a.b", b"a.c", b"b.b", b"a.b.c", b"a.x.c", b"a.b.c.d", b"c",
        ];
        let mut sublist = Sublist::new();
        for (index, pattern) in patterns.iter().enumerate() {
            sublist.insert(pattern, None, Id(index as u32)).unwrap();
        }
        for subject in &subjects {
            let expected: Vec<u32> = patterns
                .iter()
                .enumerate()
                .filter(|(_, pattern)| subject::matches(pattern, subject))
                .map(|(index, _)| index as u32)
                .collect();
            assert_eq!(
                plain_ids(&mut sublist, subject),
                expected,
                "{:?}",
                std::str::from_utf8(subject)
            );
        }
    }
}
