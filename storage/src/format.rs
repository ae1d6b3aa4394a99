//! The journal's on-disk format: segment headers, batch headers, records.
//! Byte-level tables in `docs/storage-format.md`; this module is the only
//! code that knows the layout. All integers little-endian, checksums CRC-32C.

/// Every write is whole blocks of this size at aligned offsets.
pub const BLOCK_BYTES: usize = 4096;
pub const FORMAT_VERSION: u16 = 1;

pub const SEGMENT_MAGIC: &[u8; 8] = b"TERNJSEG";
pub const SEGMENT_HEADER_BYTES: usize = BLOCK_BYTES;
/// Bytes of the segment header covered by its checksum.
const SEGMENT_HEADER_CHECKED_BYTES: usize = 64;

pub const BATCH_MAGIC: &[u8; 4] = b"TJB1";
pub const BATCH_HEADER_BYTES: usize = 64;

pub const RECORD_HEADER_BYTES: usize = 48;
pub const RECORD_ALIGN_BYTES: usize = 8;

pub fn checksum(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

pub fn checksum_append(state: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(state, bytes)
}

pub fn align_up(value: usize, alignment: usize) -> usize {
    assert!(alignment.is_power_of_two());
    (value + alignment - 1) & !(alignment - 1)
}

fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes(bytes[offset..offset + 2].try_into().expect("2 bytes"))
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

fn put_u16(bytes: &mut [u8], offset: usize, value: u16) {
    bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
}

fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

/// Block 0 of every segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub segment_bytes: u64,
    pub generation: u64,
    pub first_sequence: u64,
    /// Checksum of the last record before this segment (0 at the start).
    pub chain: u32,
    pub shard: u32,
    pub journal_id: u64,
    /// Generation of the oldest segment still needed when this one was opened:
    /// recovery replays generations `floor_generation..=newest`.
    pub floor_generation: u64,
}

impl SegmentHeader {
    /// Encodes into the first [`SEGMENT_HEADER_BYTES`] of `block`, zeroing the rest.
    pub fn encode(&self, block: &mut [u8]) {
        assert!(block.len() >= SEGMENT_HEADER_BYTES);
        block[..SEGMENT_HEADER_BYTES].fill(0);
        block[0..8].copy_from_slice(SEGMENT_MAGIC);
        put_u16(block, 8, FORMAT_VERSION);
        put_u32(block, 12, BLOCK_BYTES as u32);
        put_u64(block, 16, self.segment_bytes);
        put_u64(block, 24, self.generation);
        put_u64(block, 32, self.first_sequence);
        put_u32(block, 40, self.chain);
        put_u32(block, 44, self.shard);
        put_u64(block, 48, self.journal_id);
        put_u64(block, 56, self.floor_generation);
        let sum = checksum(&block[..SEGMENT_HEADER_CHECKED_BYTES]);
        put_u32(block, SEGMENT_HEADER_CHECKED_BYTES, sum);
    }

    /// Decodes and verifies; `None` for anything that is not a valid header.
    pub fn decode(block: &[u8]) -> Option<SegmentHeader> {
        if block.len() < SEGMENT_HEADER_CHECKED_BYTES + 4 || &block[0..8] != SEGMENT_MAGIC {
            return None;
        }
        if u32_at(block, SEGMENT_HEADER_CHECKED_BYTES)
            != checksum(&block[..SEGMENT_HEADER_CHECKED_BYTES])
        {
            return None;
        }
        if u16_at(block, 8) != FORMAT_VERSION || u32_at(block, 12) != BLOCK_BYTES as u32 {
            return None;
        }
        let header = SegmentHeader {
            segment_bytes: u64_at(block, 16),
            generation: u64_at(block, 24),
            first_sequence: u64_at(block, 32),
            chain: u32_at(block, 40),
            shard: u32_at(block, 44),
            journal_id: u64_at(block, 48),
            floor_generation: u64_at(block, 56),
        };
        if header.generation == 0
            || header.floor_generation > header.generation
            || header.first_sequence == 0
        {
            return None;
        }
        Some(header)
    }
}

/// The header at the start of every batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Header, records and padding: a multiple of [`BLOCK_BYTES`].
    pub batch_bytes: u32,
    pub record_count: u32,
    pub generation: u64,
    /// Where in its segment the batch belongs.
    pub offset: u64,
    pub first_sequence: u64,
    pub records_bytes: u32,
    pub records_checksum: u32,
    pub journal_id: u64,
}

impl BatchHeader {
    pub fn encode(&self, bytes: &mut [u8]) {
        assert!(bytes.len() >= BATCH_HEADER_BYTES);
        let header = &mut bytes[..BATCH_HEADER_BYTES];
        header.fill(0);
        header[0..4].copy_from_slice(BATCH_MAGIC);
        put_u16(header, 4, FORMAT_VERSION);
        put_u32(header, 8, self.batch_bytes);
        put_u32(header, 12, self.record_count);
        put_u64(header, 16, self.generation);
        put_u64(header, 24, self.offset);
        put_u64(header, 32, self.first_sequence);
        put_u32(header, 40, self.records_bytes);
        put_u32(header, 44, self.records_checksum);
        put_u64(header, 48, self.journal_id);
        let sum = checksum(&header[..60]);
        put_u32(header, 60, sum);
    }

    /// Decodes and verifies the header's own checksum and shape.
    pub fn decode(bytes: &[u8]) -> Option<BatchHeader> {
        if bytes.len() < BATCH_HEADER_BYTES || &bytes[0..4] != BATCH_MAGIC {
            return None;
        }
        if u32_at(bytes, 60) != checksum(&bytes[..60]) || u16_at(bytes, 4) != FORMAT_VERSION {
            return None;
        }
        let header = BatchHeader {
            batch_bytes: u32_at(bytes, 8),
            record_count: u32_at(bytes, 12),
            generation: u64_at(bytes, 16),
            offset: u64_at(bytes, 24),
            first_sequence: u64_at(bytes, 32),
            records_bytes: u32_at(bytes, 40),
            records_checksum: u32_at(bytes, 44),
            journal_id: u64_at(bytes, 48),
        };
        let shaped = header.batch_bytes as usize % BLOCK_BYTES == 0
            && header.batch_bytes as usize >= BLOCK_BYTES
            && header.record_count > 0
            && BATCH_HEADER_BYTES + header.records_bytes as usize <= header.batch_bytes as usize
            && header.first_sequence > 0;
        shaped.then_some(header)
    }
}

/// The fixed part of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub body_bytes: u32,
    pub kind: u8,
    pub group: u64,
    pub term: u64,
    pub index: u64,
    pub sequence: u64,
    /// Checksum of the previous record in the journal.
    pub chain: u32,
}

/// A record as recovery hands it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub header: RecordHeader,
    pub checksum: u32,
    pub body: &'a [u8],
}

/// Bytes a record with `body_bytes` of body occupies in a batch.
pub fn record_bytes(body_bytes: usize) -> usize {
    align_up(RECORD_HEADER_BYTES + body_bytes, RECORD_ALIGN_BYTES)
}

impl RecordHeader {
    /// Writes header, body and padding into `out` (exactly `record_bytes`
    /// long) and returns the record's checksum.
    pub fn encode(&self, body: &[u8], out: &mut [u8]) -> u32 {
        assert_eq!(self.body_bytes as usize, body.len());
        assert_eq!(out.len(), record_bytes(body.len()));
        put_u32(out, 0, self.body_bytes);
        out[4] = self.kind;
        out[5..8].fill(0);
        put_u64(out, 8, self.group);
        put_u64(out, 16, self.term);
        put_u64(out, 24, self.index);
        put_u64(out, 32, self.sequence);
        put_u32(out, 40, self.chain);
        let sum = checksum_append(checksum(&out[..44]), body);
        put_u32(out, 44, sum);
        out[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + body.len()].copy_from_slice(body);
        out[RECORD_HEADER_BYTES + body.len()..].fill(0);
        sum
    }

    /// Decodes the record at the start of `bytes`, verifying its checksum.
    /// Returns the view and the bytes it occupies.
    pub fn decode(bytes: &[u8]) -> Option<(RecordView<'_>, usize)> {
        if bytes.len() < RECORD_HEADER_BYTES {
            return None;
        }
        let body_bytes = u32_at(bytes, 0) as usize;
        let total = record_bytes(body_bytes);
        if total > bytes.len() {
            return None;
        }
        let body = &bytes[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + body_bytes];
        let stored = u32_at(bytes, 44);
        if stored != checksum_append(checksum(&bytes[..44]), body) {
            return None;
        }
        let header = RecordHeader {
            body_bytes: body_bytes as u32,
            kind: bytes[4],
            group: u64_at(bytes, 8),
            term: u64_at(bytes, 16),
            index: u64_at(bytes, 24),
            sequence: u64_at(bytes, 32),
            chain: u32_at(bytes, 40),
        };
        Some((
            RecordView {
                header,
                checksum: stored,
                body,
            },
            total,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trips_and_rejects_damage() {
        let header = SegmentHeader {
            segment_bytes: 1 << 20,
            generation: 7,
            first_sequence: 1000,
            chain: 0xdead_beef,
            shard: 3,
            journal_id: 42,
            floor_generation: 5,
        };
        let mut block = vec![0xffu8; BLOCK_BYTES];
        header.encode(&mut block);
        assert_eq!(SegmentHeader::decode(&block), Some(header));
        for position in [0, 9, 24, 40, 59, 60] {
            let mut damaged = block.clone();
            damaged[position] ^= 0x10;
            assert_eq!(SegmentHeader::decode(&damaged), None, "flip at {position}");
        }
        assert_eq!(SegmentHeader::decode(&vec![0u8; BLOCK_BYTES]), None);
    }

    #[test]
    fn batch_header_round_trips_and_rejects_damage() {
        let header = BatchHeader {
            batch_bytes: 8192,
            record_count: 3,
            generation: 2,
            offset: 4096,
            first_sequence: 10,
            records_bytes: 300,
            records_checksum: 99,
            journal_id: 42,
        };
        let mut bytes = vec![0u8; BATCH_HEADER_BYTES];
        header.encode(&mut bytes);
        assert_eq!(BatchHeader::decode(&bytes), Some(header));
        for position in 0..BATCH_HEADER_BYTES {
            let mut damaged = bytes.clone();
            damaged[position] ^= 1;
            assert_eq!(BatchHeader::decode(&damaged), None, "flip at {position}");
        }
    }

    #[test]
    fn record_round_trips_and_every_bit_matters() {
        let body = b"hello journal";
        let header = RecordHeader {
            body_bytes: body.len() as u32,
            kind: 2,
            group: 9,
            term: 3,
            index: 77,
            sequence: 5,
            chain: 123,
        };
        let mut out = vec![0u8; record_bytes(body.len())];
        let sum = header.encode(body, &mut out);
        let (view, used) = RecordHeader::decode(&out).unwrap();
        assert_eq!(used, out.len());
        assert_eq!(view.header, header);
        assert_eq!(view.body, body);
        assert_eq!(view.checksum, sum);
        for bit in 0..(RECORD_HEADER_BYTES + body.len()) * 8 {
            let mut damaged = out.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            if let Some((view, _)) = RecordHeader::decode(&damaged) {
                panic!("bit {bit} flipped and still valid: {view:?}");
            }
        }
    }

    #[test]
    fn record_sizes_are_aligned() {
        assert_eq!(record_bytes(0), 48);
        assert_eq!(record_bytes(1), 56);
        assert_eq!(record_bytes(8), 56);
        assert_eq!(record_bytes(9), 64);
    }
}
