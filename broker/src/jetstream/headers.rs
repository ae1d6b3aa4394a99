//! Reading the NATS header block (`NATS/1.0\r\nKey: Value\r\n…\r\n\r\n`)
//! of a published message: JetStream's publish headers are matched exactly
//! (case-sensitive), values trimmed of surrounding spaces, as nats-server's
//! `getHeader` does.

pub const EXPECTED_STREAM: &[u8] = b"Nats-Expected-Stream";
pub const EXPECTED_LAST_SEQUENCE: &[u8] = b"Nats-Expected-Last-Sequence";
pub const EXPECTED_LAST_SUBJECT_SEQUENCE: &[u8] = b"Nats-Expected-Last-Subject-Sequence";
pub const EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: &[u8] =
    b"Nats-Expected-Last-Subject-Sequence-Subject";
pub const EXPECTED_LAST_MSG_ID: &[u8] = b"Nats-Expected-Last-Msg-Id";
pub const MSG_ID: &[u8] = b"Nats-Msg-Id";
pub const ROLLUP: &[u8] = b"Nats-Rollup";
pub const TTL: &[u8] = b"Nats-TTL";
pub const STREAM_SOURCE: &[u8] = b"Nats-Stream-Source";

/// Largest header block a stored message may carry (nats-server: 64 KiB - 1).
pub const HEADER_BYTES_MAX: usize = 65535;

/// The value of the first header named exactly `name`, trimmed.
pub fn value<'a>(headers: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    if headers.is_empty() {
        return None;
    }
    let mut lines = headers.split(|&byte| byte == b'\n');
    lines.next()?; // NATS/1.0 status line
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&byte| byte == b':') else {
            continue;
        };
        if &line[..colon] == name {
            return Some(trim(&line[colon + 1..]));
        }
    }
    None
}

/// Whether the header `name` is present at all.
pub fn has(headers: &[u8], name: &[u8]) -> bool {
    value(headers, name).is_some()
}

fn trim(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// A decimal u64 header value (`None` if absent or not a number).
pub fn number(headers: &[u8], name: &[u8]) -> Option<Option<u64>> {
    value(headers, name).map(|text| std::str::from_utf8(text).ok()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: &[u8] =
        b"NATS/1.0\r\nNats-Msg-Id:  abc \r\nNats-Expected-Last-Sequence: 12\r\nX: y:z\r\n\r\n";

    #[test]
    fn finds_exact_names_and_trims_values() {
        assert_eq!(value(BLOCK, MSG_ID), Some(&b"abc"[..]));
        assert_eq!(number(BLOCK, EXPECTED_LAST_SEQUENCE), Some(Some(12)));
        assert_eq!(value(BLOCK, b"X"), Some(&b"y:z"[..]));
        assert_eq!(value(BLOCK, b"nats-msg-id"), None, "case-sensitive");
        assert_eq!(value(BLOCK, ROLLUP), None);
        assert_eq!(value(b"", MSG_ID), None);
        assert_eq!(
            number(
                b"NATS/1.0\r\nNats-Expected-Last-Sequence: x\r\n\r\n",
                EXPECTED_LAST_SEQUENCE
            ),
            Some(None)
        );
    }
}
