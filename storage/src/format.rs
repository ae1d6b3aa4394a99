//! The journal's on-disk format: segment headers, batch headers, records.
//! Byte-level tables in `docs/storage-format.md`; this module is the only
//! code that knows the layout. All integers little-endian, checksums CRC-32C.

/// Every write is whole blocks of this size at aligned offsets.
pub const BLOCK_BYTES: usize = 4096;
/// Version 2 added the batch footer and the parity block.
pub const FORMAT_VERSION: u16 = 2;

pub const SEGMENT_MAGIC: &[u8; 8] = b"TERNJSEG";
pub const SEGMENT_HEADER_BYTES: usize = BLOCK_BYTES;
/// Bytes of the segment header covered by its checksum.
const SEGMENT_HEADER_CHECKED_BYTES: usize = 64;

pub const BATCH_MAGIC: &[u8; 4] = b"TJB1";
pub const BATCH_HEADER_BYTES: usize = 64;
/// A copy of the batch header (flag [`BATCH_FLAG_FOOTER`] set) in the last
/// bytes of the batch's last data block: when the block holding the header
/// is damaged, the footer still says where the batch is and how long.
pub const BATCH_FOOTER_BYTES: usize = BATCH_HEADER_BYTES;
pub const BATCH_FLAG_FOOTER: u16 = 1;

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

    /// The format version of a header whose magic and checksum verify
    /// (whatever the version): recovery refuses other versions by name
    /// instead of taking their segments for unused ones.
    pub fn version_of(block: &[u8]) -> Option<u16> {
        let verified = block.len() >= SEGMENT_HEADER_CHECKED_BYTES + 4
            && &block[0..8] == SEGMENT_MAGIC
            && u32_at(block, SEGMENT_HEADER_CHECKED_BYTES)
                == checksum(&block[..SEGMENT_HEADER_CHECKED_BYTES]);
        verified.then(|| u16_at(block, 8))
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
    /// The copy at the end of the data blocks, not the header at the start.
    pub footer: bool,
    /// Data blocks (header, records, padding, footer) and the parity block:
    /// a multiple of [`BLOCK_BYTES`], at least two blocks.
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
        put_u16(header, 6, if self.footer { BATCH_FLAG_FOOTER } else { 0 });
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

    /// The format version of a batch header whose magic and checksum
    /// verify, whatever the version.
    pub fn version_of(bytes: &[u8]) -> Option<u16> {
        let verified = bytes.len() >= BATCH_HEADER_BYTES
            && &bytes[0..4] == BATCH_MAGIC
            && u32_at(bytes, 60) == checksum(&bytes[..60]);
        verified.then(|| u16_at(bytes, 4))
    }

    /// Decodes and verifies the header's own checksum and shape.
    pub fn decode(bytes: &[u8]) -> Option<BatchHeader> {
        if bytes.len() < BATCH_HEADER_BYTES || &bytes[0..4] != BATCH_MAGIC {
            return None;
        }
        if u32_at(bytes, 60) != checksum(&bytes[..60]) || u16_at(bytes, 4) != FORMAT_VERSION {
            return None;
        }
        let flags = u16_at(bytes, 6);
        if flags & !BATCH_FLAG_FOOTER != 0 || u32_at(bytes, 56) != 0 {
            return None;
        }
        let header = BatchHeader {
            footer: flags == BATCH_FLAG_FOOTER,
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
            && header.batch_bytes as usize >= 2 * BLOCK_BYTES
            && header.record_count > 0
            && batch_bytes(header.records_bytes as usize) == header.batch_bytes as usize
            && header.offset % BLOCK_BYTES as u64 == 0
            && header.first_sequence > 0;
        shaped.then_some(header)
    }

    /// Whether `other` describes the same batch (header and footer agree).
    pub fn same_batch(&self, other: &BatchHeader) -> bool {
        BatchHeader {
            footer: other.footer,
            ..*self
        } == *other
    }

    /// Blocks of header, records, padding and footer (the parity block follows).
    pub fn data_blocks(&self) -> usize {
        self.batch_bytes as usize / BLOCK_BYTES - 1
    }

    /// Where, from the batch's start, its footer is: the last bytes of the
    /// last data block.
    pub fn footer_offset(&self) -> usize {
        self.data_blocks() * BLOCK_BYTES - BATCH_FOOTER_BYTES
    }
}

/// Bytes of the data blocks of a batch holding `records_bytes` of records:
/// header, records, zero padding, footer, whole blocks.
pub fn batch_data_bytes(records_bytes: usize) -> usize {
    align_up(
        BATCH_HEADER_BYTES + records_bytes + BATCH_FOOTER_BYTES,
        BLOCK_BYTES,
    )
}

/// Bytes a batch holding `records_bytes` of records occupies on disk: its
/// data blocks and one parity block.
pub fn batch_bytes(records_bytes: usize) -> usize {
    batch_data_bytes(records_bytes) + BLOCK_BYTES
}

/// XORs every whole block of `data` into `parity` (one block), which the
/// caller zeroed or filled with another block: the parity of a batch is the
/// XOR of its data blocks, so any one block can be rebuilt from the others.
pub fn xor_blocks(data: &[u8], parity: &mut [u8]) {
    assert_eq!(parity.len(), BLOCK_BYTES);
    assert_eq!(data.len() % BLOCK_BYTES, 0);
    for block in data.chunks_exact(BLOCK_BYTES) {
        // Word at a time: the compiler vectorises this loop.
        for (out, word) in parity.chunks_exact_mut(8).zip(block.chunks_exact(8)) {
            let value = u64::from_ne_bytes(out[..].try_into().expect("8 bytes"))
                ^ u64::from_ne_bytes(word.try_into().expect("8 bytes"));
            out.copy_from_slice(&value.to_ne_bytes());
        }
    }
}

/// Completes a batch in `bytes` (exactly [`batch_bytes`] long) whose records
/// are already at `BATCH_HEADER_BYTES..BATCH_HEADER_BYTES + header.records_bytes`:
/// zero padding, header, footer and parity block.
pub fn seal_batch(header: &BatchHeader, bytes: &mut [u8]) {
    assert!(!header.footer);
    assert_eq!(bytes.len(), header.batch_bytes as usize);
    assert_eq!(
        batch_bytes(header.records_bytes as usize),
        header.batch_bytes as usize
    );
    let records_end = BATCH_HEADER_BYTES + header.records_bytes as usize;
    let footer_at = header.footer_offset();
    bytes[records_end..footer_at].fill(0);
    header.encode(&mut bytes[..BATCH_HEADER_BYTES]);
    BatchHeader {
        footer: true,
        ..*header
    }
    .encode(&mut bytes[footer_at..footer_at + BATCH_FOOTER_BYTES]);
    let data_end = header.data_blocks() * BLOCK_BYTES;
    let (data, parity) = bytes.split_at_mut(data_end);
    parity.fill(0);
    xor_blocks(data, parity);
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
            footer: false,
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
    fn a_sealed_batch_has_a_footer_and_parity_of_its_data_blocks() {
        for records_bytes in [48usize, 4096 - 128, 4096 - 127, 10_000] {
            let total = batch_bytes(records_bytes);
            assert_eq!(total % BLOCK_BYTES, 0);
            assert!(
                total >= 2 * BLOCK_BYTES,
                "header and footer never share the only block"
            );
            let header = BatchHeader {
                footer: false,
                batch_bytes: total as u32,
                record_count: 1,
                generation: 3,
                offset: 8192,
                first_sequence: 5,
                records_bytes: records_bytes as u32,
                records_checksum: 7,
                journal_id: 9,
            };
            let mut bytes: Vec<u8> = (0..total).map(|i| (i * 7 + 1) as u8).collect();
            seal_batch(&header, &mut bytes);
            assert_eq!(BatchHeader::decode(&bytes), Some(header));
            let footer_at = header.footer_offset();
            let footer = BatchHeader::decode(&bytes[footer_at..]).expect("footer verifies");
            assert!(footer.footer && footer.same_batch(&header));
            let mut parity = vec![0u8; BLOCK_BYTES];
            xor_blocks(&bytes, &mut parity);
            assert!(
                parity.iter().all(|&b| b == 0),
                "data blocks XOR parity is zero"
            );
            assert!(bytes[BATCH_HEADER_BYTES + records_bytes..footer_at]
                .iter()
                .all(|&b| b == 0));
        }
    }

    #[test]
    fn versions_of_verified_headers_are_readable() {
        let header = SegmentHeader {
            segment_bytes: 1 << 20,
            generation: 1,
            first_sequence: 1,
            chain: 0,
            shard: 0,
            journal_id: 1,
            floor_generation: 1,
        };
        let mut block = vec![0u8; BLOCK_BYTES];
        header.encode(&mut block);
        assert_eq!(SegmentHeader::version_of(&block), Some(FORMAT_VERSION));
        put_u16(&mut block, 8, 1);
        let sum = checksum(&block[..SEGMENT_HEADER_CHECKED_BYTES]);
        put_u32(&mut block, SEGMENT_HEADER_CHECKED_BYTES, sum);
        assert_eq!(SegmentHeader::decode(&block), None);
        assert_eq!(SegmentHeader::version_of(&block), Some(1));
        assert_eq!(SegmentHeader::version_of(&vec![0u8; BLOCK_BYTES]), None);
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
