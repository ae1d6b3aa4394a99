//! Fuzzes the I/O profile reader (`<store_dir>/io-profile.json`, written by
//! `tern iotune` and editable by hand): any bytes give settings or an
//! error naming the file, never a panic; settings are always inside their
//! ranges, byte sizes in whole 4 KiB blocks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_broker::io_profile::{
    parse, JOURNAL_BATCH_RANGE, PREFETCH_RANGE, READ_AHEAD_RANGE, WRITE_BUFFER_RANGE,
};

fuzz_target!(|data: &[u8]| {
    let Ok(settings) = parse(data, "io-profile.json") else {
        return;
    };
    for (value, (low, high)) in [
        (settings.journal_batch_bytes_max, JOURNAL_BATCH_RANGE),
        (settings.store_write_buffer_bytes, WRITE_BUFFER_RANGE),
        (settings.store_read_ahead_bytes, READ_AHEAD_RANGE),
    ] {
        assert!((low..=high).contains(&value) && value % 4096 == 0, "{settings:?}");
    }
    assert!((PREFETCH_RANGE.0..=PREFETCH_RANGE.1).contains(&settings.store_prefetch_runs));
});
