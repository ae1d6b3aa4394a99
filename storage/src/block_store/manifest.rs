//! The manifest of a stream log's synced extent: which files hold the
//! stream's records at a checkpoint, how many bytes and records of each, the
//! last record and a digest of them; the deletes-log version and how many
//! of its entries count; the purge floor and the last sequence.
//! [`crate::block_store::StreamLog::sync`] returns one; the caller stores it
//! (in a checksummed file of its own, next to the index the journal is
//! recycled by) and hands it back to `StreamLog::open`, which requires
//! exactly that extent to be there and verify.
//!
//! Encoding (little-endian, byte table in `docs/storage-format.md`,
//! "Manifest"): a 48-byte header (magic `TERNBMAN`, version, segment count,
//! floor, last sequence, deletes entries, deletes version, reserved zero),
//! 40 bytes per segment, and a CRC-32C of everything before it. The
//! encoding is canonical: `decode` accepts exactly what `encode` produces
//! for a manifest that passes [`Manifest::check`].

use crate::block_store::record::{RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES};
use crate::block_store::stream::SEGMENT_SEQUENCES_MAX;
use crate::format::{checksum, checksum_append};

pub const MANIFEST_MAGIC: &[u8; 8] = b"TERNBMAN";
pub const MANIFEST_VERSION: u32 = 1;
pub const MANIFEST_HEADER_BYTES: usize = 48;
pub const MANIFEST_SEGMENT_BYTES: usize = 40;
pub const MANIFEST_CHECKSUM_BYTES: usize = 4;
/// Segments one manifest may name. The caller rewrites the manifest at
/// every checkpoint and `open` keeps a file handle and an index per
/// segment, so the count must stay far below what a shard can afford: 2^20
/// segments of the default 64 MiB are 64 TiB in one stream, and the
/// encoding stays under 41 MiB. A count above it in stored bytes is
/// corruption, refused before anything is allocated for it.
pub const SEGMENTS_MAX: usize = 1 << 20;
/// Bytes of one delete entry in a deletes log (see `stream.rs`).
pub const DELETE_ENTRY_BYTES: usize = 16;
/// The digest of a segment without records.
pub const DIGEST_EMPTY: u32 = 0;

const SEGMENT_SUFFIX: &str = ".blk";
const DELETES_PREFIX: &str = "deletes";
const DELETES_SUFFIX: &str = ".log";

/// What a stream log holds on stable storage at a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Every sequence below this is purged.
    pub floor: u64,
    /// The last sequence appended (the next append is above it).
    pub last_sequence: u64,
    /// Ascending by first sequence, not overlapping.
    pub segments: Vec<SegmentExtent>,
    pub deletes: DeletesExtent,
}

/// One segment file's records at a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentExtent {
    /// The sequence the segment was created for (its file name).
    pub first_sequence: u64,
    /// Bumped by each compaction; part of the file name (0: none).
    pub version: u32,
    /// Records occupy `[0, bytes)` of the file, back to back.
    pub bytes: u64,
    /// Records in `[0, bytes)`, deleted and purged ones included.
    pub records: u64,
    /// Sequence of the last of them (0 without records).
    pub last_record_sequence: u64,
    /// [`digest_append`] over the records' checksums in file order.
    pub digest: u32,
}

/// The deletes log at a checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeletesExtent {
    /// Bumped by each rewrite; part of the file name (0: `deletes.log`).
    pub version: u32,
    /// Entries at the start of the file that count.
    pub entries: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest truncated: {bytes} bytes, {expected} expected")]
    Truncated { bytes: usize, expected: usize },
    #[error("manifest followed by {trailing} unexpected bytes")]
    TrailingBytes { trailing: usize },
    #[error("not a block-store manifest (magic is not TERNBMAN)")]
    Magic,
    #[error("manifest version {0} is unknown (this build reads version {MANIFEST_VERSION})")]
    UnknownVersion(u32),
    #[error("manifest names {segments} segments, more than {SEGMENTS_MAX}")]
    TooManySegments { segments: u64 },
    #[error("manifest checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("manifest reserved field is not zero")]
    Reserved,
    #[error("manifest is inconsistent: {0}")]
    Inconsistent(String),
}

/// The running digest of a segment after one more record whose own
/// checksum is `record_checksum`. A segment whose records each verify but
/// are not the ones checkpointed (an older file, another stream's, a
/// misdirected write of a whole record) has another digest.
pub fn digest_append(digest: u32, record_checksum: u32) -> u32 {
    checksum_append(digest, &record_checksum.to_le_bytes())
}

/// `<first_sequence:020>.blk`, or `<first_sequence:020>.<version>.blk`
/// once compacted.
pub fn segment_file_name(first_sequence: u64, version: u32) -> String {
    if version == 0 {
        format!("{first_sequence:020}{SEGMENT_SUFFIX}")
    } else {
        format!("{first_sequence:020}.{version}{SEGMENT_SUFFIX}")
    }
}

/// `deletes.log`, or `deletes.<version>.log` once rewritten.
pub fn deletes_file_name(version: u32) -> String {
    if version == 0 {
        format!("{DELETES_PREFIX}{DELETES_SUFFIX}")
    } else {
        format!("{DELETES_PREFIX}.{version}{DELETES_SUFFIX}")
    }
}

/// `(first_sequence, version)` of a segment file name, exactly as
/// [`segment_file_name`] writes it.
pub fn parse_segment_file_name(name: &str) -> Option<(u64, u32)> {
    let stem = name.strip_suffix(SEGMENT_SUFFIX)?;
    let (digits, version) = match stem.split_once('.') {
        Some((digits, version)) => (digits, version.parse::<u32>().ok()?),
        None => (stem, 0),
    };
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let first_sequence = digits.parse().ok()?;
    (segment_file_name(first_sequence, version) == name).then_some((first_sequence, version))
}

/// The version of a deletes-log file name, exactly as [`deletes_file_name`]
/// writes it.
pub fn parse_deletes_file_name(name: &str) -> Option<u32> {
    let stem = name
        .strip_prefix(DELETES_PREFIX)?
        .strip_suffix(DELETES_SUFFIX)?;
    let version = match stem.strip_prefix('.') {
        Some(version) => version.parse().ok()?,
        None if stem.is_empty() => 0,
        None => return None,
    };
    (deletes_file_name(version) == name).then_some(version)
}

impl SegmentExtent {
    pub fn file_name(&self) -> String {
        segment_file_name(self.first_sequence, self.version)
    }
}

impl DeletesExtent {
    pub fn file_name(&self) -> String {
        deletes_file_name(self.version)
    }

    /// Bytes of the entries that count.
    pub fn bytes(&self) -> u64 {
        self.entries * DELETE_ENTRY_BYTES as u64
    }
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

fn inconsistent(reason: String) -> ManifestError {
    ManifestError::Inconsistent(reason)
}

impl Manifest {
    /// The manifest of an empty log whose next sequence is `floor`.
    pub fn new(floor: u64) -> Manifest {
        assert!(floor >= 1, "sequences start at 1");
        Manifest {
            floor,
            last_sequence: floor - 1,
            segments: Vec::new(),
            deletes: DeletesExtent::default(),
        }
    }

    /// Bytes [`Manifest::encode`] produces.
    pub fn encoded_bytes(&self) -> usize {
        MANIFEST_HEADER_BYTES
            + self.segments.len() * MANIFEST_SEGMENT_BYTES
            + MANIFEST_CHECKSUM_BYTES
    }

    /// The rules every manifest follows (what `decode` enforces and what
    /// `StreamLog::open` relies on).
    pub fn check(&self) -> Result<(), ManifestError> {
        if self.segments.len() > SEGMENTS_MAX {
            return Err(ManifestError::TooManySegments {
                segments: self.segments.len() as u64,
            });
        }
        if self.floor == 0 {
            return Err(inconsistent("floor 0 (sequences start at 1)".into()));
        }
        if self.last_sequence < self.floor - 1 {
            return Err(inconsistent(format!(
                "last sequence {} below the floor {}",
                self.last_sequence, self.floor
            )));
        }
        if self.deletes.entries > u64::MAX / DELETE_ENTRY_BYTES as u64 {
            return Err(inconsistent(format!(
                "{} delete entries do not fit a file",
                self.deletes.entries
            )));
        }
        let mut previous: Option<&SegmentExtent> = None;
        for (index, segment) in self.segments.iter().enumerate() {
            check_segment(index, segment, self.last_sequence)?;
            if let Some(previous) = previous {
                if segment.first_sequence <= previous.first_sequence {
                    return Err(inconsistent(format!(
                        "segment {index} starts at {}, not after segment {} at {}",
                        segment.first_sequence,
                        index - 1,
                        previous.first_sequence
                    )));
                }
                if previous.records > 0 && previous.last_record_sequence >= segment.first_sequence {
                    return Err(inconsistent(format!(
                        "segment {} ends at sequence {}, overlapping segment {index} from {}",
                        index - 1,
                        previous.last_record_sequence,
                        segment.first_sequence
                    )));
                }
            }
            previous = Some(segment);
        }
        Ok(())
    }

    /// The canonical encoding. Panics on a manifest that fails
    /// [`Manifest::check`] (one built by the log never does).
    pub fn encode(&self) -> Vec<u8> {
        if let Err(error) = self.check() {
            panic!("encoding an invalid manifest: {error}");
        }
        let mut out = Vec::with_capacity(self.encoded_bytes());
        out.extend_from_slice(MANIFEST_MAGIC);
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.floor.to_le_bytes());
        out.extend_from_slice(&self.last_sequence.to_le_bytes());
        out.extend_from_slice(&self.deletes.entries.to_le_bytes());
        out.extend_from_slice(&self.deletes.version.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(out.len(), MANIFEST_HEADER_BYTES);
        for segment in &self.segments {
            out.extend_from_slice(&segment.first_sequence.to_le_bytes());
            out.extend_from_slice(&segment.bytes.to_le_bytes());
            out.extend_from_slice(&segment.records.to_le_bytes());
            out.extend_from_slice(&segment.last_record_sequence.to_le_bytes());
            out.extend_from_slice(&segment.version.to_le_bytes());
            out.extend_from_slice(&segment.digest.to_le_bytes());
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(out.len(), self.encoded_bytes());
        out
    }

    /// Decodes and checks an encoding; exactly the bytes `encode` writes.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let minimum = MANIFEST_HEADER_BYTES + MANIFEST_CHECKSUM_BYTES;
        if bytes.len() < minimum {
            return Err(ManifestError::Truncated {
                bytes: bytes.len(),
                expected: minimum,
            });
        }
        if &bytes[0..8] != MANIFEST_MAGIC {
            return Err(ManifestError::Magic);
        }
        let version = u32_at(bytes, 8);
        if version != MANIFEST_VERSION {
            return Err(ManifestError::UnknownVersion(version));
        }
        let count = u32_at(bytes, 12) as usize;
        if count > SEGMENTS_MAX {
            return Err(ManifestError::TooManySegments {
                segments: count as u64,
            });
        }
        let expected =
            MANIFEST_HEADER_BYTES + count * MANIFEST_SEGMENT_BYTES + MANIFEST_CHECKSUM_BYTES;
        if bytes.len() < expected {
            return Err(ManifestError::Truncated {
                bytes: bytes.len(),
                expected,
            });
        }
        if bytes.len() > expected {
            return Err(ManifestError::TrailingBytes {
                trailing: bytes.len() - expected,
            });
        }
        let body = expected - MANIFEST_CHECKSUM_BYTES;
        let stored = u32_at(bytes, body);
        let computed = checksum(&bytes[..body]);
        if stored != computed {
            return Err(ManifestError::Checksum { stored, computed });
        }
        if u32_at(bytes, 44) != 0 {
            return Err(ManifestError::Reserved);
        }
        let segments = (0..count)
            .map(|index| {
                let at = MANIFEST_HEADER_BYTES + index * MANIFEST_SEGMENT_BYTES;
                SegmentExtent {
                    first_sequence: u64_at(bytes, at),
                    bytes: u64_at(bytes, at + 8),
                    records: u64_at(bytes, at + 16),
                    last_record_sequence: u64_at(bytes, at + 24),
                    version: u32_at(bytes, at + 32),
                    digest: u32_at(bytes, at + 36),
                }
            })
            .collect();
        let manifest = Manifest {
            floor: u64_at(bytes, 16),
            last_sequence: u64_at(bytes, 24),
            segments,
            deletes: DeletesExtent {
                entries: u64_at(bytes, 32),
                version: u32_at(bytes, 40),
            },
        };
        manifest.check()?;
        Ok(manifest)
    }
}

fn check_segment(
    index: usize,
    segment: &SegmentExtent,
    last_sequence: u64,
) -> Result<(), ManifestError> {
    if segment.first_sequence == 0 {
        return Err(inconsistent(format!(
            "segment {index} starts at sequence 0"
        )));
    }
    if segment.records == 0 {
        let empty = segment.bytes == 0
            && segment.last_record_sequence == 0
            && segment.digest == DIGEST_EMPTY;
        if !empty {
            return Err(inconsistent(format!(
                "segment {index} has no records but {} bytes, last record {}, digest {:#010x}",
                segment.bytes, segment.last_record_sequence, segment.digest
            )));
        }
        return Ok(());
    }
    let span = segment
        .last_record_sequence
        .checked_sub(segment.first_sequence)
        .filter(|&span| span < SEGMENT_SEQUENCES_MAX);
    let Some(span) = span else {
        return Err(inconsistent(format!(
            "segment {index}: last record {} outside its span {}..{}",
            segment.last_record_sequence,
            segment.first_sequence,
            segment.first_sequence.saturating_add(SEGMENT_SEQUENCES_MAX)
        )));
    };
    if segment.records > span + 1 {
        return Err(inconsistent(format!(
            "segment {index}: {} records in a span of {} sequences",
            segment.records,
            span + 1
        )));
    }
    // Record offsets are 32-bit in the index; each record is at least a
    // header and a multiple of 8 bytes.
    let fits = segment.bytes <= u64::from(u32::MAX)
        && segment.bytes % RECORD_ALIGN_BYTES as u64 == 0
        && segment.bytes >= segment.records * RECORD_HEADER_BYTES as u64;
    if !fits {
        return Err(inconsistent(format!(
            "segment {index}: {} bytes cannot hold {} records",
            segment.bytes, segment.records
        )));
    }
    if segment.last_record_sequence > last_sequence {
        return Err(inconsistent(format!(
            "segment {index}: last record {} after the last sequence {last_sequence}",
            segment.last_record_sequence
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            floor: 7,
            last_sequence: 5000,
            segments: vec![
                SegmentExtent {
                    first_sequence: 1,
                    version: 2,
                    bytes: 40 * 1024,
                    records: 900,
                    last_record_sequence: 1000,
                    digest: 0xdead_beef,
                },
                SegmentExtent {
                    first_sequence: 1001,
                    version: 0,
                    bytes: 0,
                    records: 0,
                    last_record_sequence: 0,
                    digest: DIGEST_EMPTY,
                },
                SegmentExtent {
                    first_sequence: 3000,
                    version: 0,
                    bytes: 80 * 2001,
                    records: 2001,
                    last_record_sequence: 5000,
                    digest: 0x0123_4567,
                },
            ],
            deletes: DeletesExtent {
                version: 3,
                entries: 17,
            },
        }
    }

    /// Encodes with a correct checksum whatever `manifest` holds (to reach
    /// the checks behind the checksum).
    fn encode_unchecked(manifest: &Manifest, reserved: u32) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MANIFEST_MAGIC);
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&(manifest.segments.len() as u32).to_le_bytes());
        out.extend_from_slice(&manifest.floor.to_le_bytes());
        out.extend_from_slice(&manifest.last_sequence.to_le_bytes());
        out.extend_from_slice(&manifest.deletes.entries.to_le_bytes());
        out.extend_from_slice(&manifest.deletes.version.to_le_bytes());
        out.extend_from_slice(&reserved.to_le_bytes());
        for segment in &manifest.segments {
            out.extend_from_slice(&segment.first_sequence.to_le_bytes());
            out.extend_from_slice(&segment.bytes.to_le_bytes());
            out.extend_from_slice(&segment.records.to_le_bytes());
            out.extend_from_slice(&segment.last_record_sequence.to_le_bytes());
            out.extend_from_slice(&segment.version.to_le_bytes());
            out.extend_from_slice(&segment.digest.to_le_bytes());
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    #[test]
    fn round_trips_canonically() {
        for manifest in [Manifest::new(1), Manifest::new(1 << 40), sample()] {
            let bytes = manifest.encode();
            assert_eq!(bytes.len(), manifest.encoded_bytes());
            let decoded = Manifest::decode(&bytes).unwrap();
            assert_eq!(decoded, manifest);
            assert_eq!(decoded.encode(), bytes);
        }
        assert_eq!(sample().encode(), encode_unchecked(&sample(), 0));
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let bytes = sample().encode();
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(Manifest::decode(&damaged).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn framing_errors_are_named() {
        let bytes = sample().encode();
        assert_eq!(
            Manifest::decode(&bytes[..bytes.len() - 1]),
            Err(ManifestError::Truncated {
                bytes: bytes.len() - 1,
                expected: bytes.len()
            })
        );
        assert!(matches!(
            Manifest::decode(&bytes[..10]),
            Err(ManifestError::Truncated { .. })
        ));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            Manifest::decode(&longer),
            Err(ManifestError::TrailingBytes { trailing: 1 })
        );
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert_eq!(Manifest::decode(&magic), Err(ManifestError::Magic));
        let mut version = bytes.clone();
        version[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            Manifest::decode(&version),
            Err(ManifestError::UnknownVersion(2))
        );
        // A huge count is refused before anything is sized by it.
        let mut count = bytes.clone();
        count[12..16].copy_from_slice(&(SEGMENTS_MAX as u32 + 1).to_le_bytes());
        assert_eq!(
            Manifest::decode(&count),
            Err(ManifestError::TooManySegments {
                segments: SEGMENTS_MAX as u64 + 1
            })
        );
        let mut sum = bytes.clone();
        let last = sum.len() - 1;
        sum[last] ^= 0x80;
        assert!(matches!(
            Manifest::decode(&sum),
            Err(ManifestError::Checksum { .. })
        ));
        assert_eq!(
            Manifest::decode(&encode_unchecked(&sample(), 1)),
            Err(ManifestError::Reserved)
        );
    }

    #[test]
    fn inconsistent_manifests_are_refused_behind_a_valid_checksum() {
        // A rule broken by each: name, damage.
        type Damage = fn(&mut Manifest);
        let cases: Vec<(&str, Damage)> = vec![
            ("floor 0", (|m| m.floor = 0)),
            ("last below floor", (|m| m.last_sequence = 5)),
            ("out of order", (|m| m.segments.swap(0, 2))),
            (
                "same first sequence",
                (|m| m.segments[1].first_sequence = 1),
            ),
            ("overlap", (|m| m.segments[1].first_sequence = 1000)),
            (
                "beyond span",
                (|m| {
                    m.segments[2].last_record_sequence = 3000 + SEGMENT_SEQUENCES_MAX;
                    m.last_sequence = m.segments[2].last_record_sequence;
                }),
            ),
            ("before first", (|m| m.segments[0].last_record_sequence = 0)),
            (
                "more records than sequences",
                (|m| m.segments[0].records = 1001),
            ),
            ("empty with bytes", (|m| m.segments[1].bytes = 8)),
            ("empty with digest", (|m| m.segments[1].digest = 1)),
            ("unaligned bytes", (|m| m.segments[2].bytes += 4)),
            ("too few bytes", (|m| m.segments[2].bytes = 40 * 2000)),
            ("past last sequence", (|m| m.last_sequence = 4999)),
            ("first sequence 0", (|m| m.segments[0].first_sequence = 0)),
        ];
        for (name, damage) in cases {
            let mut manifest = sample();
            damage(&mut manifest);
            assert!(
                matches!(
                    Manifest::decode(&encode_unchecked(&manifest, 0)),
                    Err(ManifestError::Inconsistent(_))
                ),
                "{name}"
            );
            assert!(manifest.check().is_err(), "{name}");
        }
    }

    #[test]
    fn file_names_round_trip_and_nothing_else_parses() {
        assert_eq!(segment_file_name(1, 0), "00000000000000000001.blk");
        assert_eq!(segment_file_name(42, 3), "00000000000000000042.3.blk");
        assert_eq!(
            parse_segment_file_name("00000000000000000042.3.blk"),
            Some((42, 3))
        );
        assert_eq!(
            parse_segment_file_name("00000000000000000001.blk"),
            Some((1, 0))
        );
        for other in [
            "1.blk",
            "00000000000000000001.blk.compact",
            "00000000000000000001.0.blk",
            "00000000000000000001.03.blk",
            "0000000000000000000x.blk",
            "00000000000000000001.x.blk",
        ] {
            assert_eq!(parse_segment_file_name(other), None, "{other}");
        }
        assert_eq!(deletes_file_name(0), "deletes.log");
        assert_eq!(deletes_file_name(5), "deletes.5.log");
        assert_eq!(parse_deletes_file_name("deletes.log"), Some(0));
        assert_eq!(parse_deletes_file_name("deletes.5.log"), Some(5));
        for other in [
            "deletes.0.log",
            "deletes.log.compact",
            "deletesx.log",
            "deletes..log",
        ] {
            assert_eq!(parse_deletes_file_name(other), None, "{other}");
        }
    }
}
