//! An in-memory device that fails the way disks fail, deterministically from
//! a seed: writes are volatile until made durable, a crash keeps, drops or
//! tears (at 512-byte or 4 KiB sector boundaries) each volatile write, and
//! faults can be injected: bit flips in stored data, misdirected writes, and
//! I/O errors on a chosen operation.
//!
//! Single-threaded and synchronous underneath: every future it returns is
//! ready at once, so a test drives the journal with `block_on`.

use std::cell::{Cell, RefCell};

use crate::device::{Device, DeviceError, HeapBuffer};
use crate::format::BLOCK_BYTES;

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0);
        self.next_u64() % bound
    }

    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.below(denominator) < numerator
    }
}

/// How many bytes of a `bytes`-long unsynced write survive a crash: all,
/// none, or a prefix cut at a 512-byte or 4 KiB sector boundary.
pub fn surviving_sectors(random: &mut Random, bytes: usize) -> usize {
    let sector = if random.chance(1, 2) {
        512
    } else {
        BLOCK_BYTES
    };
    let sectors = bytes / sector;
    let kept = match random.below(3) {
        0 => 0,
        1 => sectors,
        _ => random.below(sectors as u64 + 1) as usize,
    };
    kept * sector
}

/// A write not yet on stable storage.
#[derive(Debug, Clone)]
struct VolatileWrite {
    segment: u32,
    offset: u64,
    data: Vec<u8>,
}

/// Faults to inject.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Fail the n-th write (counting from 1) with an I/O error.
    pub fail_write: Option<u64>,
    /// Misdirect the n-th write to another block-aligned offset.
    pub misdirect_write: Option<u64>,
    /// After this many writes the "process" dies: that write may be torn and
    /// every later operation fails, until [`MemoryDevice::crash`].
    pub die_at_write: Option<u64>,
    /// A disk that acknowledges syncs without doing them (for proving the
    /// crash checks can fail).
    pub lie_about_durability: bool,
}

pub struct MemoryDevice {
    segment_count: u32,
    segment_bytes: u64,
    /// What survives a crash.
    durable: RefCell<Vec<Vec<u8>>>,
    /// Writes since the last durable point, in order.
    volatile: RefCell<Vec<VolatileWrite>>,
    random: RefCell<Random>,
    faults: RefCell<Faults>,
    writes: Cell<u64>,
    dead: Cell<bool>,
}

impl MemoryDevice {
    pub fn new(segment_count: u32, segment_bytes: u64, seed: u64) -> MemoryDevice {
        assert!(
            segment_bytes as usize % BLOCK_BYTES == 0 && segment_bytes as usize >= 2 * BLOCK_BYTES
        );
        MemoryDevice {
            segment_count,
            segment_bytes,
            durable: RefCell::new(vec![
                vec![0u8; segment_bytes as usize];
                segment_count as usize
            ]),
            volatile: RefCell::new(Vec::new()),
            random: RefCell::new(Random::new(seed)),
            faults: RefCell::new(Faults::default()),
            writes: Cell::new(0),
            dead: Cell::new(false),
        }
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.faults.borrow_mut() = faults;
    }

    /// Writes issued so far.
    pub fn writes(&self) -> u64 {
        self.writes.get()
    }

    pub fn is_dead(&self) -> bool {
        self.dead.get()
    }

    /// The process died: each volatile write is kept, dropped or torn at a
    /// sector boundary (chosen by the seed). Returns a fresh device holding
    /// what survived, as a new process would find it.
    pub fn crash(&self, seed: u64) -> MemoryDevice {
        let mut random = Random::new(seed);
        let mut image = self.durable.borrow().clone();
        for write in self.volatile.borrow().iter() {
            let start = write.offset as usize;
            let bytes = surviving_sectors(&mut random, write.data.len());
            image[write.segment as usize][start..start + bytes]
                .copy_from_slice(&write.data[..bytes]);
        }
        MemoryDevice {
            segment_count: self.segment_count,
            segment_bytes: self.segment_bytes,
            durable: RefCell::new(image),
            volatile: RefCell::new(Vec::new()),
            random: RefCell::new(Random::new(random.next_u64())),
            // A lying disk keeps lying after a restart.
            faults: RefCell::new(Faults {
                lie_about_durability: self.faults.borrow().lie_about_durability,
                ..Faults::default()
            }),
            writes: Cell::new(0),
            dead: Cell::new(false),
        }
    }

    /// Flips one bit of stored data at a random position inside
    /// `segment[from..to]`; returns the byte offset.
    pub fn flip_bit(&self, segment: u32, from: u64, to: u64) -> u64 {
        assert!(from < to && to <= self.segment_bytes);
        let mut random = self.random.borrow_mut();
        let offset = from + random.below(to - from);
        let bit = random.below(8) as u8;
        self.durable.borrow_mut()[segment as usize][offset as usize] ^= 1 << bit;
        for write in self.volatile.borrow_mut().iter_mut() {
            if write.segment == segment
                && (write.offset..write.offset + write.data.len() as u64).contains(&offset)
            {
                write.data[(offset - write.offset) as usize] ^= 1 << bit;
            }
        }
        offset
    }

    /// Overwrites stored data of `segment` at `offset` (damage a test
    /// chooses: a zeroed block, a misplaced copy).
    pub fn overwrite(&self, segment: u32, offset: u64, bytes: &[u8]) {
        assert!(offset + bytes.len() as u64 <= self.segment_bytes);
        let start = offset as usize;
        self.durable.borrow_mut()[segment as usize][start..start + bytes.len()]
            .copy_from_slice(bytes);
        assert!(
            self.volatile.borrow().is_empty(),
            "overwrite only a crashed (fully durable) image"
        );
    }

    /// Stored bytes (durable plus volatile, as reads see them).
    pub fn contents(&self, segment: u32) -> Vec<u8> {
        let mut image = self.durable.borrow()[segment as usize].clone();
        for write in self
            .volatile
            .borrow()
            .iter()
            .filter(|write| write.segment == segment)
        {
            let start = write.offset as usize;
            image[start..start + write.data.len()].copy_from_slice(&write.data);
        }
        image
    }

    fn error(
        &self,
        operation: &'static str,
        segment: u32,
        offset: u64,
        message: &str,
    ) -> DeviceError {
        DeviceError {
            operation,
            segment,
            offset,
            message: message.to_string(),
        }
    }

    fn check(&self, segment: u32, offset: u64, bytes: usize) {
        assert!(
            segment < self.segment_count,
            "segment {segment} out of range"
        );
        assert!(
            offset as usize % BLOCK_BYTES == 0 && bytes % BLOCK_BYTES == 0,
            "unaligned I/O"
        );
        assert!(
            offset + bytes as u64 <= self.segment_bytes,
            "I/O past the end of the segment"
        );
    }

    fn do_write(
        &self,
        segment: u32,
        offset: u64,
        data: &[u8],
        durable: bool,
    ) -> Result<(), DeviceError> {
        self.check(segment, offset, data.len());
        if self.dead.get() {
            return Err(self.error("write", segment, offset, "device is gone (process died)"));
        }
        let number = self.writes.get() + 1;
        self.writes.set(number);
        let faults = self.faults.borrow().clone();
        if faults.fail_write == Some(number) {
            return Err(self.error("write", segment, offset, "injected I/O error"));
        }
        let mut offset = offset;
        if faults.misdirect_write == Some(number) {
            let blocks = (self.segment_bytes as usize - data.len()) / BLOCK_BYTES;
            let shift =
                (1 + self.random.borrow_mut().below(blocks.max(1) as u64)) as usize * BLOCK_BYTES;
            offset =
                (offset as usize + shift) as u64 % (self.segment_bytes - data.len() as u64 + 1);
            offset -= offset % BLOCK_BYTES as u64;
        }
        self.volatile.borrow_mut().push(VolatileWrite {
            segment,
            offset,
            data: data.to_vec(),
        });
        if faults.die_at_write == Some(number) {
            // The process dies while this write is in flight: it stays
            // volatile (the crash decides its fate) and nothing is acked.
            self.dead.set(true);
            return Err(self.error("write", segment, offset, "process died during the write"));
        }
        if durable && !faults.lie_about_durability {
            self.make_durable();
        }
        Ok(())
    }

    fn make_durable(&self) {
        let writes = std::mem::take(&mut *self.volatile.borrow_mut());
        let mut image = self.durable.borrow_mut();
        for write in writes {
            let start = write.offset as usize;
            image[write.segment as usize][start..start + write.data.len()]
                .copy_from_slice(&write.data);
        }
    }
}

impl Device for MemoryDevice {
    type Buffer = HeapBuffer;
    type ReadBuffer = HeapBuffer;

    fn allocate(&self, bytes: usize) -> HeapBuffer {
        assert!(bytes % BLOCK_BYTES == 0);
        HeapBuffer(vec![0u8; bytes])
    }

    fn segment_count(&self) -> u32 {
        self.segment_count
    }

    fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    async fn write(
        &self,
        segment: u32,
        offset: u64,
        buffer: HeapBuffer,
        durable: bool,
    ) -> Result<(), DeviceError> {
        self.do_write(segment, offset, &buffer.0, durable)
    }

    async fn read(
        &self,
        segment: u32,
        offset: u64,
        bytes: usize,
    ) -> Result<HeapBuffer, DeviceError> {
        self.check(segment, offset, bytes);
        if self.dead.get() {
            return Err(self.error("read", segment, offset, "device is gone (process died)"));
        }
        let image = self.contents(segment);
        Ok(HeapBuffer(
            image[offset as usize..offset as usize + bytes].to_vec(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    #[test]
    fn durable_writes_survive_a_crash_and_volatile_ones_may_not() {
        let device = MemoryDevice::new(2, 4 * BLOCK_BYTES as u64, 1);
        block_on(device.write(0, 0, HeapBuffer(vec![1u8; BLOCK_BYTES]), true)).unwrap();
        block_on(device.write(0, 4096, HeapBuffer(vec![2u8; 2 * BLOCK_BYTES]), false)).unwrap();
        assert_eq!(device.contents(0)[4096], 2, "reads see volatile data");
        let mut outcomes = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let after = device.crash(seed);
            assert!(after.contents(0)[..BLOCK_BYTES].iter().all(|&b| b == 1));
            let kept = after.contents(0)[4096..3 * 4096]
                .iter()
                .filter(|&&b| b == 2)
                .count();
            assert_eq!(kept % 512, 0, "torn only at sector boundaries");
            outcomes.insert(kept);
        }
        assert!(
            outcomes.contains(&0) && outcomes.contains(&(2 * BLOCK_BYTES)) && outcomes.len() > 2,
            "{outcomes:?}"
        );
    }

    #[test]
    fn crashes_are_deterministic() {
        let device = MemoryDevice::new(1, 8 * BLOCK_BYTES as u64, 9);
        block_on(device.write(0, 0, HeapBuffer(vec![7u8; 4 * BLOCK_BYTES]), false)).unwrap();
        assert_eq!(device.crash(5).contents(0), device.crash(5).contents(0));
    }

    #[test]
    fn injected_faults() {
        let device = MemoryDevice::new(1, 8 * BLOCK_BYTES as u64, 3);
        device.set_faults(Faults {
            fail_write: Some(2),
            misdirect_write: Some(3),
            die_at_write: Some(4),
            lie_about_durability: false,
        });
        block_on(device.write(0, 0, HeapBuffer(vec![1u8; BLOCK_BYTES]), true)).unwrap();
        assert!(block_on(device.write(0, 4096, HeapBuffer(vec![2u8; BLOCK_BYTES]), true)).is_err());
        block_on(device.write(0, 4096, HeapBuffer(vec![3u8; BLOCK_BYTES]), true)).unwrap();
        assert_ne!(
            device.contents(0)[4096],
            3,
            "the third write went elsewhere"
        );
        assert!(block_on(device.write(0, 8192, HeapBuffer(vec![4u8; BLOCK_BYTES]), true)).is_err());
        assert!(device.is_dead());
        assert!(block_on(device.read(0, 0, BLOCK_BYTES)).is_err());
    }
}
