//! The queue checker (Jepsen's queue test, for a JetStream stream): given
//! what every client did and saw, and each node's copy of the stream read
//! after the heal, it reports
//!
//! - **lost**: acknowledged values missing from the stream (the copy of
//!   the first node read), split by where they sit among the acknowledged
//!   values in ack order: before the first one present (prefix), after the
//!   last (suffix) or between (middle);
//! - **never delivered**: values in the stream that the durable consumer
//!   never delivered, even in the final drain;
//! - **unexpected**: values in the stream or delivered that no client ever
//!   published (or payloads that are not values at all);
//! - **duplicated**: a value stored at two sequences (publishers never
//!   retry, so every value is stored at most once). Deliveries of one value
//!   more than once are at-least-once redelivery, counted, not a failure;
//!   those the server did not mark as redelivered (`num_delivered` 1, as
//!   after a consumer leader change whose deliveries had not committed) are
//!   listed apart;
//! - **moved**: a value acknowledged at one sequence but stored at another
//!   (a sign of two leaders having written the same sequence);
//! - **gaps** in the stream's sequences (nothing is ever deleted);
//! - **divergence**: any node whose copy differs from the first one, and
//!   nodes whose copy could not be read;
//! - **availability** per fault: the longest time no publish was
//!   acknowledged from the fault's start to the first acknowledgement after
//!   its heal, and the time from the heal to that first acknowledgement.
//!
//! Pure: a [`History`] in, a [`Report`] out, so each rule has a canary
//! test that feeds it the failure it must catch.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// A published value: publisher `p`'s `n`-th value is `p << 40 | n`,
/// written as decimal text in the message body.
pub type Value = u64;

pub fn value(publisher: u64, index: u64) -> Value {
    assert!(index < 1 << 40, "publisher {publisher}: {index} values");
    publisher << 40 | index
}

/// What the clients did and saw, and what each node holds.
#[derive(Debug, Default)]
pub struct History {
    pub attempts: Vec<Attempt>,
    pub deliveries: Vec<Delivery>,
    /// One per node, in the order read; the first readable one is the
    /// reference.
    pub copies: Vec<NodeCopy>,
    pub faults: Vec<FaultWindow>,
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub value: Value,
    /// When the outcome was known, since the run started.
    pub end: Duration,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Acked {
        sequence: u64,
    },
    /// An error or a timeout: the value may or may not be stored.
    Failed,
}

#[derive(Debug, Clone)]
pub struct Delivery {
    /// The body as delivered (not a value: unexpected).
    pub body: String,
    pub stream_sequence: u64,
    /// The server marked it as a redelivery (`num_delivered` > 1).
    pub redelivered: bool,
}

#[derive(Debug, Clone)]
pub struct NodeCopy {
    pub node: String,
    /// `(sequence, body)` in sequence order, or why it could not be read.
    pub messages: Result<Vec<(u64, String)>, String>,
}

#[derive(Debug, Clone)]
pub struct FaultWindow {
    pub fault: String,
    pub single_node: bool,
    /// Every replica was current when the fault began.
    pub started_healthy: bool,
    pub start: Duration,
    pub heal: Duration,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub attempted: usize,
    pub acked: usize,
    pub failed: usize,
    pub stored: usize,
    pub delivered: usize,
    pub redeliveries: usize,
    pub lost: Vec<Value>,
    pub lost_prefix: usize,
    pub lost_middle: usize,
    pub lost_suffix: usize,
    pub never_delivered: Vec<Value>,
    pub unexpected: Vec<String>,
    pub duplicated: Vec<Value>,
    /// Deliveries after the first not marked as redelivered.
    pub unmarked_redeliveries: Vec<Value>,
    pub moved: Vec<Moved>,
    pub gaps: Vec<(u64, u64)>,
    pub divergence: Vec<String>,
    pub unreadable: Vec<String>,
    pub availability: Vec<Availability>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Moved {
    pub value: Value,
    pub acked_sequence: u64,
    pub stored_sequence: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Availability {
    pub fault: String,
    pub single_node: bool,
    pub started_healthy: bool,
    /// The longest time without an acknowledged publish from the fault's
    /// start to the first acknowledgement after its heal; `None`: no
    /// publish was acknowledged after the heal.
    pub longest_unavailable_ms: Option<u64>,
    pub heal_to_first_ack_ms: Option<u64>,
}

impl Report {
    /// No acknowledged value lost, nothing unexpected, duplicated, moved or
    /// missing in between, every node's copy read and equal, every value
    /// delivered, and writes accepted again after every heal.
    pub fn safe(&self) -> bool {
        self.lost.is_empty()
            && self.never_delivered.is_empty()
            && self.unexpected.is_empty()
            && self.duplicated.is_empty()
            && self.moved.is_empty()
            && self.gaps.is_empty()
            && self.divergence.is_empty()
            && self.unreadable.is_empty()
    }

    pub fn recovered(&self) -> bool {
        self.availability
            .iter()
            .all(|availability| availability.heal_to_first_ack_ms.is_some())
    }

    /// The longest unavailability over the single-node faults that began
    /// on a healthy cluster (one that began while another node was still
    /// catching up is a double fault).
    pub fn worst_single_node_unavailable_ms(&self) -> Option<u64> {
        self.availability
            .iter()
            .filter(|availability| availability.single_node && availability.started_healthy)
            .filter_map(|availability| availability.longest_unavailable_ms)
            .max()
    }
}

fn parse(body: &str) -> Option<Value> {
    let value: Value = body.parse().ok()?;
    // Canonical text only: "007" is not a value this harness wrote.
    (value.to_string() == body).then_some(value)
}

pub fn check(history: &History) -> Report {
    let mut report = Report {
        attempted: history.attempts.len(),
        ..Report::default()
    };
    let attempted: HashMap<Value, &Attempt> = history
        .attempts
        .iter()
        .map(|attempt| (attempt.value, attempt))
        .collect();
    assert_eq!(
        attempted.len(),
        history.attempts.len(),
        "a value published twice"
    );
    let mut acked: Vec<&Attempt> = history
        .attempts
        .iter()
        .filter(|attempt| matches!(attempt.outcome, Outcome::Acked { .. }))
        .collect();
    acked.sort_by_key(|attempt| (attempt.end, attempt.value));
    report.acked = acked.len();
    report.failed = report.attempted - report.acked;

    // The reference copy: the first node read.
    let mut reference: Option<(&str, &Vec<(u64, String)>)> = None;
    for copy in &history.copies {
        match &copy.messages {
            Err(error) => report.unreadable.push(format!("{}: {error}", copy.node)),
            Ok(messages) => match reference {
                None => reference = Some((&copy.node, messages)),
                Some((reference_node, reference_messages)) => {
                    if let Some(difference) = difference(reference_messages, messages) {
                        report.divergence.push(format!(
                            "{} differs from {reference_node}: {difference}",
                            copy.node
                        ));
                    }
                }
            },
        }
    }
    let Some((_, stored_messages)) = reference else {
        // Nothing readable: what is lost cannot be told (every copy is
        // already reported unreadable, which fails the run).
        report
            .unreadable
            .push("no copy readable: losses unknown".into());
        report.availability = availability(history, &acked);
        return report;
    };

    // The stream itself.
    let mut stored: HashMap<Value, u64> = HashMap::new();
    let mut previous_sequence = 0;
    for (sequence, body) in stored_messages {
        if *sequence != previous_sequence + 1 {
            report
                .gaps
                .push((previous_sequence + 1, sequence.saturating_sub(1)));
        }
        previous_sequence = *sequence;
        match parse(body).filter(|value| attempted.contains_key(value)) {
            None => report.unexpected.push(format!("seq {sequence}: {body:?}")),
            Some(value) => match stored.entry(value) {
                std::collections::hash_map::Entry::Occupied(_) => report.duplicated.push(value),
                std::collections::hash_map::Entry::Vacant(entry) => {
                    entry.insert(*sequence);
                }
            },
        }
    }
    report.stored = stored.len();

    // Acknowledged values: present, at the sequence acknowledged.
    let present: Vec<bool> = acked
        .iter()
        .map(|attempt| stored.contains_key(&attempt.value))
        .collect();
    let first_present = present.iter().position(|&is| is);
    let last_present = present.iter().rposition(|&is| is);
    for (index, attempt) in acked.iter().enumerate() {
        let Outcome::Acked { sequence } = attempt.outcome else {
            unreachable!("filtered above")
        };
        match stored.get(&attempt.value) {
            Some(&stored_sequence) if stored_sequence != sequence => report.moved.push(Moved {
                value: attempt.value,
                acked_sequence: sequence,
                stored_sequence,
            }),
            Some(_) => {}
            None => {
                report.lost.push(attempt.value);
                match (first_present, last_present) {
                    (Some(first), _) if index < first => report.lost_prefix += 1,
                    (_, Some(last)) if index > last => report.lost_suffix += 1,
                    (Some(_), Some(_)) => report.lost_middle += 1,
                    // Nothing present at all: all of it is a "middle".
                    _ => report.lost_middle += 1,
                }
            }
        }
    }

    // Deliveries: every stored value delivered, duplicates only as
    // marked redeliveries.
    let mut deliveries: BTreeMap<Value, usize> = BTreeMap::new();
    for delivery in &history.deliveries {
        match parse(&delivery.body).filter(|value| attempted.contains_key(value)) {
            None => report.unexpected.push(format!(
                "delivered seq {}: {:?}",
                delivery.stream_sequence, delivery.body
            )),
            Some(value) => {
                let count = deliveries.entry(value).or_default();
                *count += 1;
                if *count > 1 {
                    report.redeliveries += 1;
                    if !delivery.redelivered {
                        report.unmarked_redeliveries.push(value);
                    }
                }
            }
        }
    }
    report.delivered = deliveries.len();
    let mut never_delivered: Vec<Value> = stored
        .keys()
        .filter(|value| !deliveries.contains_key(value))
        .copied()
        .collect();
    never_delivered.sort_unstable();
    report.never_delivered = never_delivered;
    // Delivered values must be in the stream too.
    for value in deliveries.keys() {
        // (Acknowledged values missing are already in `lost`.)
        if !stored.contains_key(value)
            && !matches!(
                attempted.get(value).map(|attempt| &attempt.outcome),
                Some(Outcome::Acked { .. })
            )
        {
            // Read by a consumer, so it was stored once: losing it is a
            // loss even though its publisher saw no ack.
            report.lost.push(*value);
            report.lost_middle += 1;
        }
    }

    report.availability = availability(history, &acked);
    report
}

/// Per fault: the longest time without an acknowledgement from its start
/// to the first acknowledgement after its heal, and that first one's delay.
fn availability(history: &History, acked: &[&Attempt]) -> Vec<Availability> {
    let acks: BTreeSet<Duration> = acked.iter().map(|attempt| attempt.end).collect();
    history
        .faults
        .iter()
        .map(|window| {
            let first_after_heal = acks.range(window.heal..).next().copied();
            let longest_unavailable = first_after_heal.map(|first_after_heal| {
                let mut last = window.start;
                let mut longest = Duration::ZERO;
                for &ack in acks.range(window.start..=first_after_heal) {
                    longest = longest.max(ack - last);
                    last = ack;
                }
                longest
            });
            Availability {
                fault: window.fault.clone(),
                single_node: window.single_node,
                started_healthy: window.started_healthy,
                longest_unavailable_ms: longest_unavailable.map(|gap| gap.as_millis() as u64),
                heal_to_first_ack_ms: first_after_heal
                    .map(|first| (first - window.heal).as_millis() as u64),
            }
        })
        .collect()
}

/// How `other` differs from `reference`, if it does.
fn difference(reference: &[(u64, String)], other: &[(u64, String)]) -> Option<String> {
    for (mine, theirs) in reference.iter().zip(other) {
        if mine != theirs {
            return Some(format!(
                "first at seq {}: {:?} where the reference has seq {} {:?}",
                theirs.0, theirs.1, mine.0, mine.1
            ));
        }
    }
    (reference.len() != other.len()).then(|| {
        format!(
            "{} messages (last seq {}) against {} (last seq {})",
            other.len(),
            other.last().map_or(0, |last| last.0),
            reference.len(),
            reference.last().map_or(0, |last| last.0)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(milliseconds: u64) -> Duration {
        Duration::from_millis(milliseconds)
    }

    /// Ten values of publisher 1, acked at sequences 1..=10 at 10 ms steps,
    /// all stored on three nodes and delivered once.
    fn healthy() -> History {
        let mut history = History::default();
        let mut messages = Vec::new();
        for index in 0..10 {
            let value = value(1, index);
            history.attempts.push(Attempt {
                value,
                end: ms(index * 10 + 5),
                outcome: Outcome::Acked {
                    sequence: index + 1,
                },
            });
            messages.push((index + 1, value.to_string()));
            history.deliveries.push(Delivery {
                body: value.to_string(),
                stream_sequence: index + 1,
                redelivered: false,
            });
        }
        for node in ["n1", "n2", "n3"] {
            history.copies.push(NodeCopy {
                node: node.into(),
                messages: Ok(messages.clone()),
            });
        }
        history
    }

    fn set_copies(history: &mut History, messages: Vec<(u64, String)>) {
        for copy in &mut history.copies {
            copy.messages = Ok(messages.clone());
        }
    }

    #[test]
    fn a_healthy_history_is_safe() {
        let report = check(&healthy());
        assert!(report.safe(), "{report:#?}");
        assert_eq!(
            (report.acked, report.stored, report.delivered),
            (10, 10, 10)
        );
    }

    #[test]
    fn canary_lost_values_are_found_and_placed() {
        let mut history = healthy();
        let messages: Vec<(u64, String)> = history.copies[0].messages.clone().unwrap();
        // Lose the first, the fifth and the last (sequences renumbered so
        // only the loss is wrong... except their acked sequences move).
        let kept: Vec<(u64, String)> = messages
            .into_iter()
            .filter(|(sequence, _)| ![1, 5, 10].contains(sequence))
            .collect();
        set_copies(&mut history, kept);
        history
            .deliveries
            .retain(|delivery| ![1, 5, 10].contains(&delivery.stream_sequence));
        let report = check(&history);
        assert!(!report.safe());
        assert_eq!(report.lost, vec![value(1, 0), value(1, 4), value(1, 9)]);
        assert_eq!(
            (report.lost_prefix, report.lost_middle, report.lost_suffix),
            (1, 1, 1)
        );
        assert!(
            report.gaps.contains(&(1, 1)) && report.gaps.contains(&(5, 5)),
            "{:?}",
            report.gaps
        );
    }

    #[test]
    fn canary_a_diverged_node_and_an_unreadable_one_are_reported() {
        let mut history = healthy();
        if let Ok(messages) = &mut history.copies[1].messages {
            messages[3].1 = value(1, 7).to_string();
        }
        if let Ok(messages) = &mut history.copies[2].messages {
            messages.pop();
        }
        let report = check(&history);
        assert_eq!(report.divergence.len(), 2, "{:?}", report.divergence);
        assert!(report.divergence[0].starts_with("n2 differs from n1: first at seq 4"));
        assert!(report.divergence[1].contains("9 messages"));
        history.copies[1].messages = Err("no leader".into());
        let report = check(&history);
        assert_eq!(report.unreadable, vec!["n2: no leader".to_string()]);
        assert!(!report.safe());
    }

    #[test]
    fn canary_unexpected_duplicated_and_moved_values() {
        let mut history = healthy();
        let mut messages = history.copies[0].messages.clone().unwrap();
        messages.push((11, "garbage".into()));
        messages.push((12, value(1, 3).to_string()));
        messages.push((13, value(9, 9).to_string()));
        messages.swap(0, 1);
        messages[0].0 = 1;
        messages[1].0 = 2;
        set_copies(&mut history, messages);
        let report = check(&history);
        assert_eq!(report.unexpected.len(), 2, "{:?}", report.unexpected);
        assert_eq!(report.duplicated, vec![value(1, 3)]);
        assert_eq!(report.moved.len(), 2, "{:?}", report.moved);
        assert!(report.never_delivered.is_empty());
        assert!(!report.safe());
    }

    #[test]
    fn canary_deliveries_missing_and_redeliveries_counted() {
        let mut history = healthy();
        history.deliveries.remove(2);
        history.deliveries.push(Delivery {
            body: value(1, 4).to_string(),
            stream_sequence: 5,
            redelivered: true,
        });
        let report = check(&history);
        assert_eq!(report.never_delivered, vec![value(1, 2)]);
        assert_eq!(report.redeliveries, 1);
        assert!(report.unmarked_redeliveries.is_empty());
        history.deliveries.push(Delivery {
            body: value(1, 4).to_string(),
            stream_sequence: 5,
            redelivered: false,
        });
        let report = check(&history);
        assert_eq!(report.unmarked_redeliveries, vec![value(1, 4)]);
        assert!(!report.safe(), "value 2 is still never delivered");
    }

    #[test]
    fn canary_a_value_read_then_lost_is_lost_even_unacked() {
        let mut history = healthy();
        history.attempts.push(Attempt {
            value: value(2, 0),
            end: ms(2000),
            outcome: Outcome::Failed,
        });
        history.deliveries.push(Delivery {
            body: value(2, 0).to_string(),
            stream_sequence: 11,
            redelivered: false,
        });
        let report = check(&history);
        assert_eq!(report.lost, vec![value(2, 0)]);
        assert_eq!(report.failed, 1);
    }

    #[test]
    fn no_readable_copy_fails_without_guessing_losses() {
        let mut history = healthy();
        for copy in &mut history.copies {
            copy.messages = Err("JetStream unavailable".into());
        }
        let report = check(&history);
        assert!(report.lost.is_empty());
        assert_eq!(report.unreadable.len(), 4, "{:?}", report.unreadable);
        assert!(!report.safe());
    }

    #[test]
    fn availability_is_the_longest_gap_from_the_fault_to_the_first_ack_after_heal() {
        let mut history = healthy();
        // Acks at 5, 15, ..., 95 ms. A fault from 22 ms healed at 50 ms:
        // acks at 25, 35, 45, 55: gaps 3, 10, 10, 10 -> 10; first after
        // heal at 55.
        history.faults.push(FaultWindow {
            fault: "kill n1".into(),
            single_node: true,
            started_healthy: true,
            start: ms(22),
            heal: ms(50),
        });
        // Healed after the last ack: never recovered.
        history.faults.push(FaultWindow {
            fault: "split".into(),
            single_node: false,
            started_healthy: true,
            start: ms(96),
            heal: ms(200),
        });
        let report = check(&history);
        assert_eq!(report.availability[0].longest_unavailable_ms, Some(10));
        assert_eq!(report.availability[0].heal_to_first_ack_ms, Some(5));
        assert_eq!(report.availability[1].heal_to_first_ack_ms, None);
        assert!(!report.recovered());
        assert_eq!(report.worst_single_node_unavailable_ms(), Some(10));
    }
}
