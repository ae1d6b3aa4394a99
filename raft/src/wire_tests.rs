use bytes::{Bytes, BytesMut};

use super::{decode, encode, encoded_size_bytes, DecodeError, DecodeLimits};
use crate::message::Message;
use crate::sim::random::Random;
use crate::types::{Entry, EntryKind, Membership};

fn encoded(message: &Message) -> Bytes {
    let mut out = BytesMut::new();
    encode(message, &mut out);
    out.freeze()
}

fn random_bytes(random: &mut Random, maximum_length: u64) -> Bytes {
    let length = random.below(maximum_length + 1) as usize;
    Bytes::from(
        (0..length)
            .map(|_| random.next_u64() as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Large values matter: every field is a full u64 on the wire.
fn random_u64(random: &mut Random) -> u64 {
    match random.below(3) {
        0 => random.below(16),
        1 => random.next_u64(),
        _ => u64::MAX - random.below(4),
    }
}

fn random_message(random: &mut Random) -> Message {
    let term = random_u64(random);
    match random.below(8) {
        0 => Message::Vote {
            term,
            last_index: random_u64(random),
            last_term: random_u64(random),
            pre_vote: random.chance(0.5),
            transfer: random.chance(0.5),
        },
        1 => Message::VoteResponse {
            term,
            granted: random.chance(0.5),
            pre_vote: random.chance(0.5),
        },
        2 => {
            let prev_index = random.below(1 << 40);
            let count = random.below(20);
            let entries = (0..count)
                .map(|offset| Entry {
                    term: random_u64(random),
                    index: prev_index + offset + 1,
                    kind: match random.below(4) {
                        0 => EntryKind::Noop,
                        1 => EntryKind::Normal(random_bytes(random, 300)),
                        2 => EntryKind::AddVoter(random_u64(random)),
                        _ => EntryKind::RemoveVoter(random_u64(random)),
                    },
                })
                .collect();
            Message::Append {
                term,
                prev_index,
                prev_term: random_u64(random),
                entries,
                commit: random_u64(random),
                read_context: random_u64(random),
            }
        }
        3 => Message::AppendResponse {
            term,
            success: random.chance(0.5),
            match_index: random_u64(random),
            hint: random_u64(random),
            read_context: random_u64(random),
        },
        4 => {
            let voters = (0..random.below(7)).map(|_| random_u64(random)).collect();
            let chunk = random_bytes(random, 2000);
            let offset = random.below(1 << 20);
            Message::InstallSnapshot {
                term,
                index: random_u64(random),
                snapshot_term: random_u64(random),
                membership: Membership::new(voters),
                session: random_u64(random),
                offset,
                last: random.chance(0.5),
                chunk,
            }
        }
        6 => Message::SnapshotReceived {
            term,
            index: random_u64(random),
            session: random_u64(random),
            received: random_u64(random),
            gap: random.chance(0.5),
        },
        5 => Message::InstallSnapshotResponse {
            term,
            index: random_u64(random),
        },
        _ => Message::TimeoutNow { term },
    }
}

#[test]
fn every_message_round_trips_and_its_size_is_exact() {
    let limits = DecodeLimits::default();
    for seed in 0..2000 {
        let mut random = Random::new(seed);
        let message = random_message(&mut random);
        let bytes = encoded(&message);
        assert_eq!(bytes.len(), encoded_size_bytes(&message), "seed {seed}");
        assert_eq!(decode(&bytes, &limits), Ok(message), "seed {seed}");
    }
}

#[test]
fn every_strict_prefix_is_truncated_and_any_suffix_is_trailing() {
    let limits = DecodeLimits::default();
    for seed in 0..300 {
        let mut random = Random::new(seed);
        let bytes = encoded(&random_message(&mut random));
        for length in 0..bytes.len() {
            let result = decode(&bytes.slice(..length), &limits);
            assert!(
                matches!(result, Err(DecodeError::Truncated { .. })),
                "seed {seed} prefix {length}: {result:?}"
            );
        }
        let mut longer = BytesMut::from(&bytes[..]);
        longer.extend_from_slice(&[0, 0, 0]);
        assert_eq!(
            decode(&longer.freeze(), &limits),
            Err(DecodeError::TrailingBytes(3))
        );
    }
}

/// The layout docs/raft.md documents, pinned byte by byte.
#[test]
fn layouts_match_the_documentation() {
    let vote = Message::Vote {
        term: 2,
        last_index: 3,
        last_term: 1,
        pre_vote: true,
        transfer: false,
    };
    let mut expected = vec![1u8];
    expected.extend_from_slice(&2u64.to_le_bytes());
    expected.extend_from_slice(&3u64.to_le_bytes());
    expected.extend_from_slice(&1u64.to_le_bytes());
    expected.push(0b01);
    assert_eq!(&encoded(&vote)[..], &expected[..]);

    let append = Message::Append {
        term: 7,
        prev_index: 9,
        prev_term: 6,
        entries: vec![
            Entry {
                term: 7,
                index: 10,
                kind: EntryKind::Normal(Bytes::from_static(b"hi")),
            },
            Entry {
                term: 7,
                index: 11,
                kind: EntryKind::AddVoter(4),
            },
        ],
        commit: 8,
        read_context: 5,
    };
    let mut expected = vec![3u8];
    for value in [7u64, 9, 6, 8, 5] {
        expected.extend_from_slice(&value.to_le_bytes());
    }
    expected.extend_from_slice(&2u32.to_le_bytes());
    expected.extend_from_slice(&7u64.to_le_bytes());
    expected.extend_from_slice(&10u64.to_le_bytes());
    expected.push(1);
    expected.extend_from_slice(&2u32.to_le_bytes());
    expected.extend_from_slice(b"hi");
    expected.extend_from_slice(&7u64.to_le_bytes());
    expected.extend_from_slice(&11u64.to_le_bytes());
    expected.push(2);
    expected.extend_from_slice(&4u64.to_le_bytes());
    assert_eq!(&encoded(&append)[..], &expected[..]);

    let response = Message::AppendResponse {
        term: 7,
        success: true,
        match_index: 11,
        hint: 0,
        read_context: 5,
    };
    let mut expected = vec![4u8];
    expected.extend_from_slice(&7u64.to_le_bytes());
    expected.push(1);
    for value in [11u64, 0, 5] {
        expected.extend_from_slice(&value.to_le_bytes());
    }
    assert_eq!(&encoded(&response)[..], &expected[..]);

    let chunk = Message::InstallSnapshot {
        term: 3,
        index: 40,
        snapshot_term: 2,
        membership: Membership::new(vec![1, 2]),
        session: 6,
        offset: 512,
        last: true,
        chunk: Bytes::from_static(b"end"),
    };
    let mut expected = vec![5u8];
    for value in [3u64, 40, 2] {
        expected.extend_from_slice(&value.to_le_bytes());
    }
    expected.extend_from_slice(&2u32.to_le_bytes());
    for value in [1u64, 2, 6, 512] {
        expected.extend_from_slice(&value.to_le_bytes());
    }
    expected.push(1);
    expected.extend_from_slice(&3u32.to_le_bytes());
    expected.extend_from_slice(b"end");
    assert_eq!(&encoded(&chunk)[..], &expected[..]);

    let received = Message::SnapshotReceived {
        term: 3,
        index: 40,
        session: 6,
        received: 512,
        gap: true,
    };
    let mut expected = vec![8u8];
    for value in [3u64, 40, 6, 512] {
        expected.extend_from_slice(&value.to_le_bytes());
    }
    expected.push(1);
    assert_eq!(&encoded(&received)[..], &expected[..]);
}

#[test]
fn payloads_are_slices_of_the_input() {
    let message = Message::Append {
        term: 1,
        prev_index: 0,
        prev_term: 0,
        entries: vec![Entry {
            term: 1,
            index: 1,
            kind: EntryKind::Normal(Bytes::from(vec![7u8; 100])),
        }],
        commit: 0,
        read_context: 0,
    };
    let bytes = encoded(&message);
    let Ok(Message::Append { entries, .. }) = decode(&bytes, &DecodeLimits::default()) else {
        panic!("decodes");
    };
    let EntryKind::Normal(data) = &entries[0].kind else {
        panic!("normal entry")
    };
    let input_range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
    assert!(input_range.contains(&(data.as_ptr() as usize)));
}

#[test]
fn malformed_input_is_named() {
    let limits = DecodeLimits::default();
    let mut unknown_tag = vec![99u8];
    unknown_tag.extend_from_slice(&1u64.to_le_bytes());
    assert_eq!(
        decode(&Bytes::from(unknown_tag), &limits),
        Err(DecodeError::UnknownTag(99))
    );

    let mut vote_flags = encoded(&Message::Vote {
        term: 1,
        last_index: 0,
        last_term: 0,
        pre_vote: false,
        transfer: false,
    })
    .to_vec();
    *vote_flags.last_mut().expect("flags byte") = 0x80;
    assert_eq!(
        decode(&Bytes::from(vote_flags), &limits),
        Err(DecodeError::UnknownFlags {
            field: "vote flags",
            flags: 0x80
        })
    );

    let gap = Message::Append {
        term: 1,
        prev_index: 4,
        prev_term: 1,
        entries: vec![Entry {
            term: 1,
            index: 6,
            kind: EntryKind::Noop,
        }],
        commit: 0,
        read_context: 0,
    };
    assert_eq!(
        decode(&encoded(&gap), &limits),
        Err(DecodeError::EntryIndexGap {
            position: 0,
            expected: 5,
            found: 6
        })
    );

    let chunk = |membership, offset, length| Message::InstallSnapshot {
        term: 1,
        index: 1,
        snapshot_term: 1,
        membership,
        session: 4,
        offset,
        last: false,
        chunk: Bytes::from(vec![7u8; length]),
    };
    let unsorted = chunk(Membership { voters: vec![3, 2] }, 0, 0);
    assert_eq!(
        decode(&encoded(&unsorted), &limits),
        Err(DecodeError::VotersNotSorted)
    );
    let voters = || Membership::new(vec![1, 2, 3]);
    assert_eq!(
        decode(&encoded(&chunk(voters(), u64::MAX - 1, 3)), &limits),
        Err(DecodeError::ChunkPastEnd {
            offset: u64::MAX - 1,
            length: 3,
        })
    );
    let mut flagged = encoded(&chunk(voters(), 7, 3)).to_vec();
    // The flags byte follows tag, term, index, snapshot term, voter count,
    // three voters, session and offset.
    let flags_at = 1 + 8 * 3 + 4 + 8 * 3 + 8 + 8;
    flagged[flags_at] = 2;
    assert_eq!(
        decode(&Bytes::from(flagged), &limits),
        Err(DecodeError::UnknownFlags {
            field: "snapshot chunk flags",
            flags: 2
        })
    );
    let whole = chunk(voters(), 7, 3);
    assert_eq!(decode(&encoded(&whole), &limits), Ok(whole));
}

#[test]
fn counts_and_lengths_are_bounded_before_allocating() {
    // An append that claims u32::MAX entries in a 45-byte message.
    let mut huge_count = vec![3u8];
    for _ in 0..5 {
        huge_count.extend_from_slice(&0u64.to_le_bytes());
    }
    huge_count.extend_from_slice(&u32::MAX.to_le_bytes());
    let limits = DecodeLimits::default();
    assert_eq!(
        decode(&Bytes::from(huge_count.clone()), &limits),
        Err(DecodeError::OverLimit {
            field: "entry count",
            value: u64::from(u32::MAX),
            limit: limits.max_entries as u64
        })
    );
    // Under the limit but more entries than bytes present.
    let tail = huge_count.len() - 4;
    huge_count[tail..].copy_from_slice(&1000u32.to_le_bytes());
    assert_eq!(
        decode(&Bytes::from(huge_count), &limits),
        Err(DecodeError::Truncated {
            field: "entry count"
        })
    );

    let big_entry = Message::Append {
        term: 1,
        prev_index: 0,
        prev_term: 0,
        entries: vec![Entry {
            term: 1,
            index: 1,
            kind: EntryKind::Normal(Bytes::from(vec![0u8; 65])),
        }],
        commit: 0,
        read_context: 0,
    };
    let small = DecodeLimits {
        max_entry_bytes: 64,
        ..DecodeLimits::default()
    };
    assert_eq!(
        decode(&encoded(&big_entry), &small),
        Err(DecodeError::OverLimit {
            field: "entry data",
            value: 65,
            limit: 64
        })
    );

    let chunk = |length| Message::InstallSnapshot {
        term: 1,
        index: 1,
        snapshot_term: 1,
        membership: Membership::new(vec![1]),
        session: 1,
        offset: 0,
        last: true,
        chunk: Bytes::from(vec![0u8; length]),
    };
    let small = DecodeLimits {
        max_snapshot_chunk_bytes: 10,
        ..DecodeLimits::default()
    };
    assert_eq!(decode(&encoded(&chunk(10)), &small), Ok(chunk(10)));
    assert_eq!(
        decode(&encoded(&chunk(11)), &small),
        Err(DecodeError::OverLimit {
            field: "snapshot chunk",
            value: 11,
            limit: 10
        })
    );
}
