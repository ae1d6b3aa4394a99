use super::*;

const SECOND_NS: u64 = 1_000_000_000;

fn config(ack: AckMode) -> DeliveryConfig {
    DeliveryConfig {
        ack,
        ack_wait_ns: 30 * SECOND_NS,
        backoff_ns: Vec::new(),
        max_deliver: None,
        max_ack_pending: Some(1000),
    }
}

/// Delivers the next new message, assuming the stream has every sequence.
fn deliver_new(state: &mut DeliveryState, now_ns: u64) -> Delivery {
    match state.next_to_deliver() {
        Next::FromStream { stream_sequence } => state.delivered_at(stream_sequence, now_ns),
        other => panic!("expected a new delivery, got {other:?}"),
    }
}

fn redeliver(state: &mut DeliveryState, now_ns: u64) -> Delivery {
    match state.next_to_deliver() {
        Next::Redeliver { stream_sequence } => state.delivered_at(stream_sequence, now_ns),
        other => panic!("expected a redelivery, got {other:?}"),
    }
}

#[test]
fn explicit_acks_move_the_floor_only_over_a_contiguous_prefix() {
    let mut state = DeliveryState::new(config(AckMode::Explicit), 1);
    for expected in 1..=4 {
        let delivery = deliver_new(&mut state, 0);
        assert_eq!(
            (
                delivery.stream_sequence,
                delivery.consumer_sequence,
                delivery.delivery_count
            ),
            (expected, expected, 1)
        );
    }
    assert_eq!(state.delivered(), (4, 4));
    assert_eq!(state.num_ack_pending(), 4);
    // Out of order: the floor waits for 1.
    assert!(state.ack(2, 2));
    assert_eq!(state.ack_floor(), (0, 0));
    assert!(state.ack(1, 1));
    // 1 acked, 2 acked before: the floor runs up to just below 3.
    assert_eq!(state.ack_floor(), (2, 2));
    assert!(!state.ack(1, 1), "a second ack acknowledges nothing new");
    assert!(state.ack(3, 3));
    assert!(state.ack(4, 4));
    assert_eq!(state.ack_floor(), (4, 4));
    assert_eq!(state.num_ack_pending(), 0);
    // Not yet delivered: ignored.
    assert!(!state.ack(5, 5));
}

#[test]
fn ack_all_acknowledges_everything_below() {
    let mut state = DeliveryState::new(config(AckMode::All), 1);
    for _ in 0..5 {
        deliver_new(&mut state, 0);
    }
    assert!(state.ack(3, 3));
    assert_eq!(state.ack_floor(), (3, 3));
    assert_eq!(state.num_ack_pending(), 2);
    assert!(!state.ack(2, 2), "below the floor");
    assert!(state.ack(5, 5));
    assert_eq!((state.ack_floor(), state.num_ack_pending()), ((5, 5), 0));
}

#[test]
fn ack_none_keeps_nothing_pending() {
    let mut state = DeliveryState::new(config(AckMode::None), 10);
    deliver_new(&mut state, 0);
    deliver_new(&mut state, 0);
    assert_eq!(state.ack_floor(), (2, 11));
    assert_eq!(state.delivered(), (2, 11));
    assert_eq!(state.num_ack_pending(), 0);
    assert_eq!(state.check_pending(u64::MAX, 1), None);
}

#[test]
fn a_start_sequence_puts_the_floors_below_it() {
    let state = DeliveryState::new(config(AckMode::Explicit), 5);
    assert_eq!(state.delivered(), (0, 4));
    assert_eq!(state.ack_floor(), (0, 4));
}

#[test]
fn max_ack_pending_stalls_new_deliveries_until_an_ack() {
    let mut limited = config(AckMode::Explicit);
    limited.max_ack_pending = Some(2);
    let mut state = DeliveryState::new(limited, 1);
    deliver_new(&mut state, 0);
    deliver_new(&mut state, 0);
    assert_eq!(state.next_to_deliver(), Next::Stalled);
    state.ack(1, 1);
    assert_eq!(
        state.next_to_deliver(),
        Next::FromStream { stream_sequence: 3 }
    );
}

#[test]
fn an_expired_ack_wait_redelivers_with_a_new_consumer_sequence() {
    let mut state = DeliveryState::new(config(AckMode::Explicit), 1);
    deliver_new(&mut state, 0);
    deliver_new(&mut state, SECOND_NS);
    // Before the deadline: nothing due; the next check is when 1 is due.
    assert_eq!(
        state.check_pending(29 * SECOND_NS, 1),
        Some(29 * SECOND_NS + SECOND_NS)
    );
    assert_eq!(
        state.next_to_deliver(),
        Next::FromStream { stream_sequence: 3 }
    );
    state.check_pending(30 * SECOND_NS, 1);
    let delivery = redeliver(&mut state, 30 * SECOND_NS);
    assert_eq!(
        (
            delivery.stream_sequence,
            delivery.consumer_sequence,
            delivery.delivery_count
        ),
        (1, 3, 2)
    );
    assert_eq!(state.num_redelivered(), 1);
    assert_eq!(state.delivered(), (3, 2));
    // Acking the redelivered message with its newest consumer sequence: the
    // pending record keeps the first one, and the floor moves by it.
    assert!(state.ack(1, 3));
    assert_eq!(state.ack_floor(), (1, 1));
    assert_eq!(state.num_redelivered(), 0);
}

#[test]
fn nak_redelivers_now_or_after_its_delay() {
    let mut state = DeliveryState::new(config(AckMode::Explicit), 1);
    deliver_new(&mut state, 0);
    deliver_new(&mut state, 0);
    state.nak(1, 1, None, SECOND_NS);
    assert_eq!(
        state.take_events(),
        vec![Event::Naked {
            stream_sequence: 1,
            consumer_sequence: 1,
            deliveries: 1
        }]
    );
    assert_eq!(redeliver(&mut state, SECOND_NS).delivery_count, 2);
    assert!(state.ack(1, 3));

    // Unix time: far above the ack wait the delay is offset from.
    let now = 1_000 * SECOND_NS;
    state.nak(2, 2, Some(5 * SECOND_NS), now);
    assert_eq!(
        state.next_to_deliver(),
        Next::FromStream { stream_sequence: 3 }
    );
    state.check_pending(now + 4 * SECOND_NS, 1);
    assert_eq!(
        state.next_to_deliver(),
        Next::FromStream { stream_sequence: 3 }
    );
    state.check_pending(now + 5 * SECOND_NS, 1);
    assert_eq!(
        state.next_to_deliver(),
        Next::Redeliver { stream_sequence: 2 }
    );
    // A nak outside the delivered range is ignored.
    state.nak(9, 9, None, 0);
    assert!(state.take_events().iter().all(|event| !matches!(
        event,
        Event::Naked {
            stream_sequence: 9,
            ..
        }
    )));
}

#[test]
fn work_in_progress_restarts_the_ack_wait() {
    let mut state = DeliveryState::new(config(AckMode::Explicit), 1);
    deliver_new(&mut state, 0);
    state.in_progress(1, 20 * SECOND_NS);
    state.check_pending(30 * SECOND_NS, 1);
    assert_eq!(
        state.next_to_deliver(),
        Next::FromStream { stream_sequence: 2 }
    );
    state.check_pending(50 * SECOND_NS, 1);
    assert_eq!(
        state.next_to_deliver(),
        Next::Redeliver { stream_sequence: 1 }
    );
}

#[test]
fn term_acknowledges_and_announces() {
    let mut state = DeliveryState::new(config(AckMode::Explicit), 1);
    deliver_new(&mut state, 0);
    state.term(1, 1);
    assert_eq!(state.num_ack_pending(), 0);
    assert_eq!(state.ack_floor(), (1, 1));
    assert_eq!(
        state.take_events(),
        vec![Event::Terminated {
            stream_sequence: 1,
            consumer_sequence: 1,
            deliveries: 1
        }]
    );
}

#[test]
fn max_deliver_gives_up_once_and_moves_the_floor() {
    let mut limited = config(AckMode::Explicit);
    limited.max_deliver = Some(2);
    let mut state = DeliveryState::new(limited, 1);
    deliver_new(&mut state, 0);
    deliver_new(&mut state, 0);
    state.ack(2, 2);
    state.check_pending(30 * SECOND_NS, 1);
    assert_eq!(redeliver(&mut state, 30 * SECOND_NS).delivery_count, 2);
    assert_eq!(state.check_pending(60 * SECOND_NS, 1), None);
    assert_eq!(
        state.take_events(),
        vec![Event::MaxDeliveries {
            stream_sequence: 1,
            deliveries: 2
        }]
    );
    assert_eq!(state.num_ack_pending(), 0);
    assert_eq!(state.ack_floor(), (3, 2));
    assert_eq!(state.num_redelivered(), 1);
    assert_eq!(
        state.next_to_deliver(),
        Next::FromStream { stream_sequence: 3 }
    );
}

#[test]
fn backoff_sets_each_redelivery_delay() {
    let mut backoff = config(AckMode::Explicit);
    backoff.backoff_ns = vec![SECOND_NS, 5 * SECOND_NS];
    backoff.ack_wait_ns = SECOND_NS;
    let mut state = DeliveryState::new(backoff, 1);
    deliver_new(&mut state, 0);
    state.check_pending(SECOND_NS, 1);
    redeliver(&mut state, SECOND_NS);
    // The second redelivery waits 5 s, not 1 s.
    state.check_pending(3 * SECOND_NS, 1);
    assert_eq!(
        state.next_to_deliver(),
        Next::FromStream { stream_sequence: 2 }
    );
    state.check_pending(6 * SECOND_NS, 1);
    assert_eq!(redeliver(&mut state, 6 * SECOND_NS).delivery_count, 3);
}

#[test]
fn messages_gone_from_the_stream_leave_pending() {
    let mut state = DeliveryState::new(config(AckMode::Explicit), 1);
    for _ in 0..3 {
        deliver_new(&mut state, 0);
    }
    // The stream's first sequence moved past 2 (limits, purge).
    state.check_pending(SECOND_NS, 3);
    assert_eq!(state.num_ack_pending(), 1);
    assert_eq!(state.ack_floor(), (2, 2));
    state.nak(3, 3, None, SECOND_NS);
    state.message_gone(3);
    assert_eq!(state.num_ack_pending(), 0);
    assert_eq!(state.ack_floor(), (3, 3));
    assert_eq!(
        state.next_to_deliver(),
        Next::FromStream { stream_sequence: 4 }
    );
}

#[test]
fn the_state_round_trips_and_decodes_strictly() {
    let mut state = DeliveryState::new(config(AckMode::Explicit), 3);
    for _ in 0..4 {
        deliver_new(&mut state, 7);
    }
    state.ack(4, 2);
    state.check_pending(31 * SECOND_NS, 1);
    redeliver(&mut state, 31 * SECOND_NS);
    let encoded = state.encode();
    let decoded = DeliveryState::decode(config(AckMode::Explicit), &encoded).expect("decodes");
    assert_eq!(decoded.encode(), encoded);
    assert_eq!(decoded.delivered(), state.delivered());
    assert_eq!(decoded.ack_floor(), state.ack_floor());
    assert_eq!(decoded.num_ack_pending(), state.num_ack_pending());
    assert_eq!(decoded.num_redelivered(), state.num_redelivered());
    for length in 0..encoded.len() {
        assert!(
            DeliveryState::decode(config(AckMode::Explicit), &encoded[..length]).is_err(),
            "a truncation to {length} bytes decodes"
        );
    }
    let mut trailing = encoded.clone();
    trailing.push(0);
    assert_eq!(
        DeliveryState::decode(config(AckMode::Explicit), &trailing),
        Err(StateDecodeError::Trailing(1))
    );
    let mut version = encoded;
    version[0] = 2;
    assert_eq!(
        DeliveryState::decode(config(AckMode::Explicit), &version),
        Err(StateDecodeError::Version(2))
    );
}

#[test]
fn a_redelivery_count_past_the_consumer_sequence_is_refused() {
    // Found by the stream_entry fuzz target: a count of u64::MAX decoded,
    // and the next delivery of that message overflowed it.
    let mut state = DeliveryState::new(config(AckMode::Explicit), 3);
    deliver_new(&mut state, 7);
    state.check_pending(31 * SECOND_NS, 1);
    redeliver(&mut state, 31 * SECOND_NS);
    let mut encoded = state.encode();
    let count_offset = encoded.len() - 8;
    assert_eq!(
        encoded[count_offset..],
        1u64.to_le_bytes(),
        "the last field is the count"
    );
    for count in [u64::MAX, state.next_consumer_sequence] {
        encoded[count_offset..].copy_from_slice(&count.to_le_bytes());
        assert_eq!(
            DeliveryState::decode(config(AckMode::Explicit), &encoded),
            Err(StateDecodeError::NonCanonical(
                "redelivery count past delivered"
            )),
            "count {count}"
        );
    }
}

#[test]
fn the_layout_is_pinned() {
    let mut state = DeliveryState::new(config(AckMode::Explicit), 1);
    deliver_new(&mut state, 9);
    let expected: Vec<u8> = [
        &[1u8][..],
        &2u64.to_le_bytes(),
        &2u64.to_le_bytes(),
        &0u64.to_le_bytes(),
        &0u64.to_le_bytes(),
        &1u32.to_le_bytes(),
        &1u64.to_le_bytes(),
        &1u64.to_le_bytes(),
        &9u64.to_le_bytes(),
        &0u32.to_le_bytes(),
    ]
    .concat();
    assert_eq!(state.encode(), expected);
}

#[test]
fn needs_ack_follows_the_floor_pending_and_what_is_still_to_come() {
    let mut explicit = DeliveryState::new(config(AckMode::Explicit), 1);
    for _ in 0..3 {
        deliver_new(&mut explicit, 0);
    }
    assert!(explicit.needs_ack(2));
    assert!(explicit.ack(2, 2));
    assert!(!explicit.needs_ack(2), "acked");
    assert!(explicit.needs_ack(1) && explicit.needs_ack(3), "pending");
    assert!(explicit.needs_ack(4), "not delivered yet");
    assert!(explicit.ack(1, 1));
    assert!(!explicit.needs_ack(1), "below the floor");

    let mut all = DeliveryState::new(config(AckMode::All), 1);
    for _ in 0..3 {
        deliver_new(&mut all, 0);
    }
    assert!(all.ack(2, 2));
    assert!(!all.needs_ack(1) && !all.needs_ack(2));
    assert!(all.needs_ack(3));

    let mut none = DeliveryState::new(config(AckMode::None), 1);
    assert!(none.needs_ack(1));
    deliver_new(&mut none, 0);
    assert!(!none.needs_ack(1), "delivered is done with");
    assert!(none.needs_ack(2));
}

#[test]
fn given_up_redelivery_counts_can_be_forgotten_oldest_first() {
    let mut limited = config(AckMode::Explicit);
    limited.max_deliver = Some(2);
    let mut state = DeliveryState::new(limited, 1);
    for _ in 0..4 {
        deliver_new(&mut state, 0);
    }
    // 1..3 expire twice and are given up; 4 stays pending, redelivered.
    state.ack(4, 4);
    state.check_pending(30 * SECOND_NS, 1);
    for _ in 0..3 {
        redeliver(&mut state, 30 * SECOND_NS);
    }
    state.check_pending(60 * SECOND_NS, 1);
    deliver_new(&mut state, 60 * SECOND_NS);
    state.check_pending(90 * SECOND_NS + 1, 1);
    redeliver(&mut state, 90 * SECOND_NS + 1);
    assert_eq!(state.num_ack_pending(), 1);
    assert_eq!((state.num_redelivered(), state.given_up()), (4, 3));
    let bytes = state.encoded_bytes();
    assert_eq!(bytes, state.encode().len());
    assert_eq!(state.forget_given_up(1), 2);
    assert_eq!((state.num_redelivered(), state.given_up()), (2, 1));
    assert_eq!(
        state.encoded_bytes(),
        bytes - 2 * STATE_BYTES_PER_REDELIVERED
    );
    // The oldest went: 3 and the pending 5 keep their counts.
    let decoded = DeliveryState::decode(config(AckMode::Explicit), &state.encode()).unwrap();
    assert_eq!(
        decoded.redelivered.keys().copied().collect::<Vec<_>>(),
        vec![3, 5]
    );
    assert_eq!(state.forget_given_up(5), 0);
}
