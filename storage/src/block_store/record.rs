//! A stored message in a block-store segment (byte table in
//! `docs/storage-format.md`, "Block store").

use crate::format::{align_up, checksum, checksum_append};

pub const RECORD_HEADER_BYTES: usize = 40;
pub const RECORD_ALIGN_BYTES: usize = 8;

/// Bytes a message occupies in a segment.
pub fn stored_bytes(subject: usize, headers: usize, payload: usize) -> usize {
    align_up(
        RECORD_HEADER_BYTES + subject + headers + payload,
        RECORD_ALIGN_BYTES,
    )
}

/// A message to store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewMessage<'a> {
    pub sequence: u64,
    pub timestamp_ns: u64,
    pub subject: &'a [u8],
    pub headers: &'a [u8],
    pub payload: &'a [u8],
}

/// A message as read back (checksum verified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredView<'a> {
    pub sequence: u64,
    pub timestamp_ns: u64,
    pub subject: &'a [u8],
    pub headers: &'a [u8],
    pub payload: &'a [u8],
    pub checksum: u32,
    /// Bytes the record occupies.
    pub stored_bytes: usize,
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Encodes `message` into `out` (exactly its stored size); returns the checksum.
pub fn encode(message: &NewMessage<'_>, out: &mut [u8]) -> u32 {
    let total = stored_bytes(
        message.subject.len(),
        message.headers.len(),
        message.payload.len(),
    );
    assert_eq!(out.len(), total);
    out[0..4].copy_from_slice(&(total as u32).to_le_bytes());
    out[8..16].copy_from_slice(&message.sequence.to_le_bytes());
    out[16..24].copy_from_slice(&message.timestamp_ns.to_le_bytes());
    out[24..28].copy_from_slice(&(message.subject.len() as u32).to_le_bytes());
    out[28..32].copy_from_slice(&(message.headers.len() as u32).to_le_bytes());
    out[32..36].copy_from_slice(&(message.payload.len() as u32).to_le_bytes());
    out[36..40].fill(0);
    let mut position = RECORD_HEADER_BYTES;
    for part in [message.subject, message.headers, message.payload] {
        out[position..position + part.len()].copy_from_slice(part);
        position += part.len();
    }
    out[position..].fill(0);
    let sum = checksum(&out[8..position]);
    out[4..8].copy_from_slice(&sum.to_le_bytes());
    sum
}

/// Why bytes are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Zeros (never written) or too short to be a header.
    Empty,
    /// Something is there but it does not check out.
    Invalid,
}

/// Decodes and verifies the record at the start of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<StoredView<'_>, DecodeError> {
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(DecodeError::Empty);
    }
    let total = u32_at(bytes, 0) as usize;
    if total == 0 && bytes[..RECORD_HEADER_BYTES].iter().all(|&byte| byte == 0) {
        return Err(DecodeError::Empty);
    }
    if total < RECORD_HEADER_BYTES || total % RECORD_ALIGN_BYTES != 0 || total > bytes.len() {
        return Err(DecodeError::Invalid);
    }
    let subject = u32_at(bytes, 24) as usize;
    let headers = u32_at(bytes, 28) as usize;
    let payload = u32_at(bytes, 32) as usize;
    let content = RECORD_HEADER_BYTES
        .checked_add(subject)
        .and_then(|n| n.checked_add(headers))
        .and_then(|n| n.checked_add(payload));
    let Some(content) = content.filter(|&content| align_up(content, RECORD_ALIGN_BYTES) == total)
    else {
        return Err(DecodeError::Invalid);
    };
    let stored = u32_at(bytes, 4);
    if stored
        != checksum_append(
            checksum(&bytes[8..RECORD_HEADER_BYTES]),
            &bytes[RECORD_HEADER_BYTES..content],
        )
    {
        return Err(DecodeError::Invalid);
    }
    let subject_start = RECORD_HEADER_BYTES;
    let headers_start = subject_start + subject;
    let payload_start = headers_start + headers;
    Ok(StoredView {
        sequence: u64_at(bytes, 8),
        timestamp_ns: u64_at(bytes, 16),
        subject: &bytes[subject_start..headers_start],
        headers: &bytes[headers_start..payload_start],
        payload: &bytes[payload_start..content],
        checksum: stored,
        stored_bytes: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_every_bit_matters() {
        let message = NewMessage {
            sequence: 42,
            timestamp_ns: 7,
            subject: b"orders.new",
            headers: b"NATS/1.0\r\n\r\n",
            payload: b"{}",
        };
        let mut out = vec![0u8; stored_bytes(10, 12, 2)];
        let sum = encode(&message, &mut out);
        let view = decode(&out).unwrap();
        assert_eq!(
            (
                view.sequence,
                view.timestamp_ns,
                view.subject,
                view.headers,
                view.payload
            ),
            (
                42,
                7,
                &b"orders.new"[..],
                &b"NATS/1.0\r\n\r\n"[..],
                &b"{}"[..]
            )
        );
        assert_eq!(view.checksum, sum);
        assert_eq!(view.stored_bytes, out.len());
        for bit in 0..(RECORD_HEADER_BYTES + 24) * 8 {
            let mut damaged = out.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged).is_err(), "bit {bit}");
        }
        assert_eq!(decode(&[0u8; 64]), Err(DecodeError::Empty));
    }
}
