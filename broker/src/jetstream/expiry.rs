//! Per-message TTLs (`Nats-TTL`, ADR-43) and subject delete markers
//! (`subject_delete_marker_ttl`, ADR-48), as nats-server 2.15 applies them.
//!
//! The stream task owns one [`Expiry`] when its stream allows message TTLs.
//! It knows, per stored sequence, when the message expires, which messages
//! never expire (`Nats-TTL: never` exempts a message from max_age too), and
//! which messages are themselves delete markers (a marker that expires is
//! removed, never replaced by another marker). It is rebuilt from the store
//! on start; expiry is by wall clock on every replica, like max_age, while a
//! marker is a new message proposed through the stream's log.

use std::collections::{BTreeSet, HashMap, HashSet};

use rustc_hash::FxBuildHasher;

use super::headers;

/// `Nats-Marker-Reason`, on markers the server writes.
pub const MARKER_REASON: &[u8] = b"Nats-Marker-Reason";
/// `KV-Operation`; a `PURGE` marker counts as a delete marker.
pub const KV_OPERATION: &[u8] = b"KV-Operation";

/// A message's TTL as nats-server reads the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageTtl {
    /// No header, or a TTL of zero seconds (`"00"` parses so): no expiry.
    None,
    /// `never` (any case): exempt from max_age as well.
    Never,
    /// Whole seconds after the message's timestamp.
    Seconds(u64),
}

impl MessageTtl {
    /// What nats-server's `ttl != 0` tests: the header asks for something.
    pub fn is_set(self) -> bool {
        self != MessageTtl::None
    }
}

/// The `Nats-TTL` header of `header_block`: `Ok(None)` without one (or with
/// an empty value), `Err` for a value nats-server refuses (10165 invalid
/// per-message TTL).
pub fn message_ttl(header_block: &[u8]) -> Result<MessageTtl, InvalidTtl> {
    match headers::value(header_block, headers::TTL) {
        None | Some(b"") => Ok(MessageTtl::None),
        Some(value) => parse_message_ttl(value),
    }
}

/// The value is not a TTL nats-server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid per-message TTL")]
pub struct InvalidTtl;

/// nats-server's `parseMessageTTL`: `never` in any case; a Go duration of
/// at least one second, truncated to whole seconds; else plain decimal
/// seconds, where zero means no TTL.
pub fn parse_message_ttl(value: &[u8]) -> Result<MessageTtl, InvalidTtl> {
    if value.eq_ignore_ascii_case(b"never") {
        return Ok(MessageTtl::Never);
    }
    if let Some(nanos) = parse_go_duration_ns(value) {
        if nanos < 1_000_000_000 {
            return Err(InvalidTtl);
        }
        return Ok(MessageTtl::Seconds((nanos / 1_000_000_000) as u64));
    }
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(InvalidTtl);
    }
    let mut seconds: u64 = 0;
    for digit in value {
        seconds = seconds
            .checked_mul(10)
            .and_then(|seconds| seconds.checked_add(u64::from(digit - b'0')))
            .filter(|seconds| *seconds <= i64::MAX as u64)
            .ok_or(InvalidTtl)?;
    }
    Ok(if seconds == 0 {
        MessageTtl::None
    } else {
        MessageTtl::Seconds(seconds)
    })
}

/// Go's `time.ParseDuration`, in signed nanoseconds; `None` where Go errs.
/// A unit is required on every number except a lone `0`.
pub fn parse_go_duration_ns(value: &[u8]) -> Option<i128> {
    let text = std::str::from_utf8(value).ok()?;
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        if !whole.bytes().all(|b| b.is_ascii_digit())
            || !fraction.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let unit_ns: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let whole_value: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let mut part = whole_value.checked_mul(unit_ns)?;
        let mut scale = unit_ns;
        for digit in fraction.bytes().take(30) {
            scale /= 10;
            part += i128::from(digit - b'0') * scale;
        }
        total = total.checked_add(part)?;
        if total > i64::MAX as i128 {
            return None;
        }
        rest = next;
    }
    Some(if negative { -total } else { total })
}

/// Go's `time.Duration.String()` for whole seconds: `5s`, `1m0s`, `1h0m0s`.
pub fn go_duration_seconds(seconds: u64) -> String {
    let (hours, minutes, seconds) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// Whether `header_block` marks a subject as deleted (nats-server's
/// `isSubjectDeleteMarker`): a marker reason, or a KV purge.
pub fn is_delete_marker(header_block: &[u8]) -> bool {
    headers::value(header_block, MARKER_REASON).is_some_and(|reason| !reason.is_empty())
        || headers::value(header_block, KV_OPERATION) == Some(b"PURGE".as_slice())
}

/// The headers of the marker left when a subject's last message ages out.
pub fn marker_headers(marker_ttl_seconds: u64) -> Vec<u8> {
    format!(
        "NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: {}\r\nNats-Rollup: sub\r\n\r\n",
        go_duration_seconds(marker_ttl_seconds)
    )
    .into_bytes()
}

/// `header_block` with its `Nats-TTL` replaced by `seconds` (nats-server
/// raises a TTL below the marker TTL so no marker is missed).
pub fn with_ttl_seconds(header_block: &[u8], seconds: u64) -> Vec<u8> {
    assert!(
        header_block.ends_with(b"\r\n\r\n"),
        "a complete header block"
    );
    let body = &header_block[..header_block.len() - 2];
    let mut rewritten = Vec::with_capacity(header_block.len() + 8);
    let mut lines = body.split_inclusive(|byte| *byte == b'\n');
    if let Some(status) = lines.next() {
        rewritten.extend_from_slice(status);
    }
    for line in lines {
        let is_ttl = line.len() > headers::TTL.len()
            && line.starts_with(headers::TTL)
            && line[headers::TTL.len()] == b':';
        if !is_ttl {
            rewritten.extend_from_slice(line);
        }
    }
    rewritten.extend_from_slice(b"Nats-TTL: ");
    rewritten.extend_from_slice(seconds.to_string().as_bytes());
    rewritten.extend_from_slice(b"\r\n\r\n");
    rewritten
}

/// What the stream knows about expiring messages. Everything but
/// `replacing` follows from the stored messages alone (every replica holds
/// the same): a message's notes go when it is removed, for whatever reason,
/// so a new leader finds exactly what is still due.
#[derive(Default)]
pub struct Expiry {
    /// `(expires at, sequence)` for messages with a TTL in seconds.
    due: BTreeSet<(u64, u64)>,
    /// The same, by sequence.
    due_by_sequence: HashMap<u64, u64, FxBuildHasher>,
    /// Messages with `Nats-TTL: never`.
    never: HashSet<u64, FxBuildHasher>,
    /// Messages that are delete markers.
    markers: HashSet<u64, FxBuildHasher>,
    /// The leader's: messages a marker was proposed for; the marker's
    /// rollup removes them.
    replacing: HashSet<u64, FxBuildHasher>,
}

impl Expiry {
    /// Notes a stored message (idempotent: recovery may see it twice).
    pub fn track(&mut self, sequence: u64, timestamp_ns: u64, header_block: &[u8]) {
        if header_block.is_empty() {
            return;
        }
        match message_ttl(header_block) {
            Ok(MessageTtl::Seconds(seconds)) => {
                let expires_ns = timestamp_ns.saturating_add(seconds.saturating_mul(1_000_000_000));
                self.due.insert((expires_ns, sequence));
                self.due_by_sequence.insert(sequence, expires_ns);
            }
            Ok(MessageTtl::Never) => {
                self.never.insert(sequence);
            }
            Ok(MessageTtl::None) | Err(InvalidTtl) => {}
        }
        if is_delete_marker(header_block) {
            self.markers.insert(sequence);
        }
    }

    /// When the next TTL is due, if any.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.due.first().map(|(expires_ns, _)| *expires_ns)
    }

    /// The sequences whose TTL is due at `now_ns`, soonest first. They stay
    /// noted until removed (an expiry the leader proposed is noted until
    /// it applies, so a leader elected meanwhile still sees it due).
    pub fn due(&self, now_ns: u64) -> impl Iterator<Item = u64> + '_ {
        self.due
            .iter()
            .take_while(move |(expires_ns, _)| *expires_ns <= now_ns)
            .map(|(_, sequence)| *sequence)
    }

    pub fn never_expires(&self, sequence: u64) -> bool {
        self.never.contains(&sequence)
    }

    pub fn is_marker(&self, sequence: u64) -> bool {
        self.markers.contains(&sequence)
    }

    pub fn is_replacing(&self, sequence: u64) -> bool {
        self.replacing.contains(&sequence)
    }

    pub fn start_replacing(&mut self, sequence: u64) {
        self.replacing.insert(sequence);
    }

    /// Forgets a removed message.
    pub fn removed(&mut self, sequence: u64) {
        if let Some(expires_ns) = self.due_by_sequence.remove(&sequence) {
            self.due.remove(&(expires_ns, sequence));
        }
        self.never.remove(&sequence);
        self.markers.remove(&sequence);
        self.replacing.remove(&sequence);
    }

    /// Sequences noted in the sets (stale ones included).
    pub fn noted(&self) -> usize {
        self.due_by_sequence.len() + self.never.len() + self.markers.len() + self.replacing.len()
    }

    /// Drops what refers to messages no longer stored.
    pub fn retain(&mut self, mut exists: impl FnMut(u64) -> bool) {
        self.due.retain(|(_, sequence)| exists(*sequence));
        self.due_by_sequence.retain(|sequence, _| exists(*sequence));
        self.never.retain(|sequence| exists(*sequence));
        self.markers.retain(|sequence| exists(*sequence));
        self.replacing.retain(|sequence| exists(*sequence));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_values_parse_as_nats_server_parses_them() {
        let seconds = |value: &str| parse_message_ttl(value.as_bytes());
        assert_eq!(seconds("never"), Ok(MessageTtl::Never));
        assert_eq!(seconds("NEVER"), Ok(MessageTtl::Never));
        assert_eq!(seconds("5"), Ok(MessageTtl::Seconds(5)));
        assert_eq!(seconds("10s"), Ok(MessageTtl::Seconds(10)));
        assert_eq!(seconds("1.9s"), Ok(MessageTtl::Seconds(1)));
        assert_eq!(seconds("1h30m"), Ok(MessageTtl::Seconds(5400)));
        assert_eq!(seconds("1500ms"), Ok(MessageTtl::Seconds(1)));
        // "00" is not a Go duration; as decimal seconds it is zero: no TTL.
        assert_eq!(seconds("00"), Ok(MessageTtl::None));
        for invalid in ["0", "500ms", "-5s", "", "abc", "5x", "1.s.", " 5", "-1"] {
            assert_eq!(seconds(invalid), Err(InvalidTtl), "{invalid:?}");
        }
    }

    #[test]
    fn go_durations_parse_and_print_like_go() {
        assert_eq!(parse_go_duration_ns(b"0"), Some(0));
        assert_eq!(parse_go_duration_ns(b".5s"), Some(500_000_000));
        assert_eq!(parse_go_duration_ns(b"1.5h"), Some(5_400_000_000_000));
        assert_eq!(parse_go_duration_ns(b"2m3s"), Some(123_000_000_000));
        assert_eq!(parse_go_duration_ns(b"5"), None);
        assert_eq!(parse_go_duration_ns(b"."), None);
        assert_eq!(parse_go_duration_ns(b"99999999999h"), None);
        assert_eq!(go_duration_seconds(5), "5s");
        assert_eq!(go_duration_seconds(60), "1m0s");
        assert_eq!(go_duration_seconds(3661), "1h1m1s");
    }

    #[test]
    fn markers_are_recognised_and_written_exactly() {
        assert_eq!(
            marker_headers(5),
            b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 5s\r\nNats-Rollup: sub\r\n\r\n"
        );
        assert!(is_delete_marker(&marker_headers(1)));
        assert!(is_delete_marker(b"NATS/1.0\r\nKV-Operation: PURGE\r\n\r\n"));
        assert!(!is_delete_marker(b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n"));
        assert!(!is_delete_marker(b"NATS/1.0\r\nA: b\r\n\r\n"));
    }

    #[test]
    fn a_low_ttl_is_rewritten_at_the_end() {
        assert_eq!(
            with_ttl_seconds(b"NATS/1.0\r\nNats-TTL: 1s\r\nA: b\r\n\r\n", 5),
            b"NATS/1.0\r\nA: b\r\nNats-TTL: 5\r\n\r\n"
        );
    }

    #[test]
    fn due_messages_come_out_in_time_order() {
        let mut expiry = Expiry::default();
        expiry.track(1, 1_000_000_000, b"NATS/1.0\r\nNats-TTL: 5s\r\n\r\n");
        expiry.track(2, 1_000_000_000, b"NATS/1.0\r\nNats-TTL: 2\r\n\r\n");
        expiry.track(3, 1_000_000_000, b"NATS/1.0\r\nNats-TTL: never\r\n\r\n");
        expiry.track(2, 1_000_000_000, b"NATS/1.0\r\nNats-TTL: 2\r\n\r\n");
        assert_eq!(expiry.next_due_ns(), Some(3_000_000_000));
        assert_eq!(expiry.due(2_999_999_999).count(), 0);
        assert_eq!(expiry.due(10_000_000_000).collect::<Vec<_>>(), [2, 1]);
        // Due until removed.
        assert_eq!(expiry.due(10_000_000_000).collect::<Vec<_>>(), [2, 1]);
        expiry.removed(2);
        assert_eq!(expiry.due(10_000_000_000).collect::<Vec<_>>(), [1]);
        assert_eq!(expiry.next_due_ns(), Some(6_000_000_000));
        expiry.retain(|sequence| sequence != 1);
        assert_eq!(expiry.next_due_ns(), None);
        assert!(expiry.never_expires(3));
        expiry.removed(3);
        assert!(!expiry.never_expires(3));
        assert_eq!(expiry.noted(), 0);
    }
}
