//! The block store on real O_DIRECT files: append, flush, reopen, read,
//! replay, delete, purge and compaction through glommio's io_uring.

use std::collections::BTreeMap;

use tern_storage::block_store::{DmaFiles, NewMessage, StoredMessage, StreamConfig, StreamLog};

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
    let expected: BTreeMap<u64, StoredMessage> = run({
        let path = path.clone();
        async move {
            let files = DmaFiles::open(&path).await.unwrap();
            let (mut log, _) = StreamLog::open(files, config()).await.unwrap();
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
            log.flush().await.unwrap();
            expected
        }
    });
    run(async move {
        let files = DmaFiles::open(&path).await.unwrap();
        let (log, report) = StreamLog::open(files, config()).await.unwrap();
        assert_eq!(report.tail_cut, None);
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
