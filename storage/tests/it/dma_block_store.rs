//! The block store on real O_DIRECT files: append, flush, checkpoint,
//! reopen from the manifest, read, replay, delete, purge and compaction
//! through glommio's io_uring; damage to the files the manifest names is
//! refused at open, files it does not name are removed.

use std::collections::BTreeMap;

use tern_storage::block_store::{
    DmaFiles, Manifest, NewMessage, StoreError, StoredMessage, StreamConfig, StreamLog,
};

fn run<T>(future: impl std::future::Future<Output = T> + 'static) -> T {
    glommio::LocalExecutorBuilder::default()
        .io_memory(4 << 20)
        .make()
        .expect("executor")
        .run(future)
}

fn config() -> StreamConfig {
    StreamConfig {
        segment_bytes_max: 256 * 1024,
        write_buffer_bytes: 64 * 1024,
        tail_cache_bytes: 0,
        ..StreamConfig::default()
    }
}

fn message(sequence: u64) -> StoredMessage {
    StoredMessage {
        sequence,
        timestamp_ns: sequence * 10,
        subject: format!("orders.{}", sequence % 7).into_bytes(),
        headers: if sequence % 2 == 0 {
            b"NATS/1.0\r\nx: y\r\n\r\n".to_vec()
        } else {
            Vec::new()
        },
        payload: vec![(sequence % 251) as u8; (sequence as usize * 31) % 2000],
    }
}

#[test]
fn a_stream_survives_reopen_on_o_direct_files() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("stream");
    let (expected, manifest): (BTreeMap<u64, StoredMessage>, Vec<u8>) = run({
        let path = path.clone();
        async move {
            let files = DmaFiles::open(&path).await.unwrap();
            let (mut log, _) = StreamLog::open(files, config(), &Manifest::new(1))
                .await
                .unwrap();
            let mut expected = BTreeMap::new();
            for sequence in 1..=2000 {
                let stored = message(sequence);
                log.append(NewMessage {
                    sequence,
                    timestamp_ns: stored.timestamp_ns,
                    subject: &stored.subject,
                    headers: &stored.headers,
                    payload: &stored.payload,
                })
                .await
                .unwrap();
                expected.insert(sequence, stored);
            }
            for sequence in (1..=2000).step_by(10) {
                assert!(log.delete(sequence));
                expected.remove(&sequence);
            }
            log.flush().await.unwrap();
            assert_eq!(log.purge_below(300).await.unwrap(), 299 - 30);
            expected.retain(|&sequence, _| sequence >= 300);
            assert!(
                log.compact().await.unwrap() == 0
                    || log.state().messages as usize == expected.len()
            );
            // The checkpoint: the manifest is stored (here, handed to the
            // next run as its encoding), then the retired files go.
            let manifest = log.sync().await.unwrap().encode();
            log.checkpointed().await.unwrap();
            // Written after the checkpoint (more than a segment): ignored,
            // and the segments the manifest does not name removed at reopen.
            for sequence in 2001..=2400 {
                let stored = message(sequence);
                log.append(NewMessage {
                    sequence,
                    timestamp_ns: stored.timestamp_ns,
                    subject: &stored.subject,
                    headers: &stored.headers,
                    payload: &stored.payload,
                })
                .await
                .unwrap();
            }
            log.flush().await.unwrap();
            (expected, manifest)
        }
    });
    let manifest = Manifest::decode(&manifest).unwrap();
    let names = |path: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(path)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    // Damage inside the extent, and a file cut to an odd size: refused
    // with the file named, nothing removed (and no panic on the odd size).
    let first = manifest.segments[0].file_name();
    let pristine = std::fs::read(path.join(&first)).unwrap();
    let mut damaged = pristine.clone();
    damaged[100] ^= 0x04;
    std::fs::write(path.join(&first), &damaged).unwrap();
    let before = names(&path);
    let error = run({
        let (path, manifest) = (path.clone(), manifest.clone());
        async move {
            let files = DmaFiles::open(&path).await.unwrap();
            StreamLog::open(files, config(), &manifest).await.err()
        }
    });
    assert!(
        matches!(&error, Some(StoreError::Corrupt { file, .. }) if *file == first),
        "{error:?}"
    );
    assert_eq!(names(&path), before);
    std::fs::write(path.join(&first), &pristine[..pristine.len() - 3]).unwrap();
    let error = run({
        let (path, manifest) = (path.clone(), manifest.clone());
        async move {
            let files = DmaFiles::open(&path).await.unwrap();
            StreamLog::open(files, config(), &manifest).await.err()
        }
    });
    assert!(
        matches!(&error, Some(StoreError::Corrupt { file, reason, .. })
            if *file == first && reason.contains("truncated")),
        "{error:?}"
    );
    assert_eq!(names(&path), before);
    std::fs::write(path.join(&first), &pristine).unwrap();
    run(async move {
        let files = DmaFiles::open(&path).await.unwrap();
        let (log, report) = StreamLog::open(files, config(), &manifest).await.unwrap();
        let unnamed: Vec<String> = before
            .iter()
            .filter(|name| name.ends_with(".blk"))
            .filter(|name| {
                !manifest
                    .segments
                    .iter()
                    .any(|extent| extent.file_name() == **name)
            })
            .cloned()
            .collect();
        assert!(!unnamed.is_empty());
        assert_eq!(report.files_removed, unnamed);
        assert_eq!(log.state().last_sequence, 2000);
        assert_eq!(log.state().messages as usize, expected.len());
        for (&sequence, stored) in expected.iter().step_by(37) {
            assert_eq!(log.get(sequence).await.unwrap().as_ref(), Some(stored));
        }
        let mut replayed = Vec::new();
        log.replay(1, |view| replayed.push(view.to_message()))
            .await
            .unwrap();
        assert_eq!(replayed, expected.values().cloned().collect::<Vec<_>>());
    });
}
