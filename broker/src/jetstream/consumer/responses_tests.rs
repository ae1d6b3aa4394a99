//! Tests of `consumer_responses`. Create responses are also checked
//! against nats-server 2.15.1 in the consumer config corpus.

use super::*;

fn config() -> ConsumerConfig {
    ConsumerConfig {
        durable_name: "P1".into(),
        name: "P1".into(),
        ack_policy: super::super::config::AckPolicy::Explicit,
        ack_wait_ns: 30_000_000_000,
        max_deliver: -1,
        filter_subject: "orders.*".into(),
        max_waiting: 512,
        max_ack_pending: 1000,
        metadata: [("_nats.req.level".to_string(), "0".to_string())]
            .into_iter()
            .collect(),
        ..ConsumerConfig::default()
    }
}

#[test]
fn info_matches_the_spec_example() {
    // Spec §6.3, captured from nats-server 2.15.1.
    let expected = r#"{"type":"io.nats.jetstream.api.v1.consumer_info_response","stream_name":"ORDERS","name":"P1","created":"2026-11-30T09:07:54.927979346Z","config":{"durable_name":"P1","name":"P1","deliver_policy":"all","ack_policy":"explicit","ack_wait":30000000000,"max_deliver":-1,"filter_subject":"orders.*","replay_policy":"instant","max_waiting":512,"max_ack_pending":1000,"num_replicas":0,"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}},"delivered":{"consumer_seq":4,"stream_seq":3,"last_active":"2026-11-30T09:07:55.434312425Z"},"ack_floor":{"consumer_seq":1,"stream_seq":1,"last_active":"2026-11-30T09:07:54.934572116Z"},"num_ack_pending":1,"num_redelivered":1,"num_waiting":0,"num_pending":0,"ts":"2026-11-30T09:07:55.435836189Z"}"#;
    let state = ConsumerInfoState {
        delivered: SequencePair {
            consumer_sequence: 4,
            stream_sequence: 3,
            last_active_unix_ns: Some(1_796_029_675_434_312_425),
        },
        ack_floor: SequencePair {
            consumer_sequence: 1,
            stream_sequence: 1,
            last_active_unix_ns: Some(1_796_029_674_934_572_116),
        },
        num_ack_pending: 1,
        num_redelivered: 1,
        ..ConsumerInfoState::default()
    };
    let actual = consumer_info_response(
        "consumer_info_response",
        "ORDERS",
        "P1",
        &config(),
        1_796_029_674_927_979_346,
        &state,
        1_796_029_675_435_836_189,
    );
    assert_eq!(actual, expected);
}

#[test]
fn optional_info_fields() {
    let state = ConsumerInfoState {
        push_bound: true,
        pause_remaining_ns: Some(5),
        priority_groups: vec![PriorityGroupState {
            group: "g".into(),
            pinned_client_id: "pin".into(),
            pinned_unix_ns: 0,
        }],
        ..ConsumerInfoState::default()
    };
    let object = consumer_info_object("S", "C", &config(), 0, &state, 0);
    assert!(object.starts_with(
        r#"{"stream_name":"S","name":"C","created":"0001-01-01T00:00:00Z","config":{"#
    ));
    assert!(
        object.contains(r#""metadata":{"_nats.req.level":"0"}"#),
        "no dynamic metadata in LIST"
    );
    assert!(object.ends_with(r#""num_pending":0,"push_bound":true,"paused":true,"pause_remaining":5,"ts":"0001-01-01T00:00:00Z","priority_groups":[{"group":"g","pinned_client_id":"pin","pinned_ts":"0001-01-01T00:00:00Z"}]}"#), "{object}");
    let paused_without_remaining = ConsumerInfoState {
        pause_remaining_ns: Some(0),
        ..ConsumerInfoState::default()
    };
    let object = consumer_info_object("S", "C", &config(), 0, &paused_without_remaining, 0);
    assert!(object.contains(r#""paused":true,"ts""#));
}

#[test]
fn delete_names_and_list() {
    assert_eq!(
        consumer_delete_response(),
        r#"{"type":"io.nats.jetstream.api.v1.consumer_delete_response","success":true}"#
    );
    // Spec §6.4 example.
    let names: Vec<String> = ["pull1", "f1", "Fpt9IV9R", "p", "d1"]
        .iter()
        .map(|name| name.to_string())
        .collect();
    let page = page_of(names, 0, NAMES_LIMIT);
    assert_eq!(
        consumer_names_response(5, 0, &page),
        r#"{"type":"io.nats.jetstream.api.v1.consumer_names_response","total":5,"offset":0,"limit":1024,"consumers":["Fpt9IV9R","d1","f1","p","pull1"]}"#
    );
    assert_eq!(
        consumer_names_response(0, 3, &[]),
        r#"{"type":"io.nats.jetstream.api.v1.consumer_names_response","total":0,"offset":0,"limit":1024,"consumers":[]}"#
    );
    assert_eq!(
        consumer_list_response(0, 0, &[]),
        r#"{"type":"io.nats.jetstream.api.v1.consumer_list_response","total":0,"offset":0,"limit":256,"consumers":[]}"#
    );
    let info = consumer_info_object("S", "C", &config(), 0, &ConsumerInfoState::default(), 0);
    let list = consumer_list_response(1, 0, std::slice::from_ref(&info));
    assert!(list.ends_with(&format!("\"consumers\":[{info}]}}")));
    assert_eq!(
        page_of(vec!["b".into(), "a".into(), "c".into()], 1, 1),
        ["b"]
    );
}

#[test]
fn status_blocks_are_byte_exact() {
    for (status, expected) in [
        (PullStatus::NoMessages, "NATS/1.0 404 No Messages\r\n\r\n"),
        (
            PullStatus::RequestTimeout {
                pending_messages: 5,
                pending_bytes: 500,
            },
            "NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\nNats-Pending-Bytes: 500\r\n\r\n",
        ),
        (PullStatus::RequestsPending, "NATS/1.0 408 Requests Pending\r\n\r\n"),
        (
            PullStatus::IdleHeartbeat {
                last_consumer_sequence: 4,
                last_stream_sequence: 9,
            },
            "NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 4\r\nNats-Last-Stream: 9\r\n\r\n",
        ),
        (
            PullStatus::BadRequest("heartbeat value too large".into()),
            "NATS/1.0 400 Bad Request - heartbeat value too large\r\n\r\n",
        ),
        (PullStatus::ExceededMaxWaiting, "NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n"),
        (
            PullStatus::ExceededMaxRequestBatch(10),
            "NATS/1.0 409 Exceeded MaxRequestBatch of 10\r\n\r\n",
        ),
        (
            PullStatus::ExceededMaxRequestExpires(1_500_000_000),
            "NATS/1.0 409 Exceeded MaxRequestExpires of 1.5s\r\n\r\n",
        ),
        (
            PullStatus::ExceededMaxRequestMaxBytes(1000),
            "NATS/1.0 409 Exceeded MaxRequestMaxBytes of 1000\r\n\r\n",
        ),
        (
            PullStatus::MessageSizeExceedsMaxBytes {
                pending_messages: 3,
                pending_bytes: 20,
            },
            "NATS/1.0 409 Message Size Exceeds MaxBytes\r\nNats-Pending-Messages: 3\r\nNats-Pending-Bytes: 20\r\n\r\n",
        ),
        (
            PullStatus::BatchCompleted { pending_bytes: 7 },
            "NATS/1.0 409 Batch Completed\r\nNats-Pending-Messages: 0\r\nNats-Pending-Bytes: 7\r\n\r\n",
        ),
        (PullStatus::ConsumerDeleted, "NATS/1.0 409 Consumer Deleted\r\n\r\n"),
        (PullStatus::ConsumerIsPushBased, "NATS/1.0 409 Consumer is push based\r\n\r\n"),
        (
            PullStatus::ServerShutdown {
                pending_messages: 1,
                pending_bytes: 0,
            },
            "NATS/1.0 409 Server Shutdown\r\nNats-Pending-Messages: 1\r\nNats-Pending-Bytes: 0\r\n\r\n",
        ),
        (PullStatus::RequiredApiLevel, "NATS/1.0 412 Required Api Level\r\n\r\n"),
        (PullStatus::PinIdMismatch, "NATS/1.0 423 Nats-Pin-Id mismatch\r\n\r\n"),
    ] {
        assert_eq!(status.header_block(), expected);
    }
}

#[test]
fn push_heartbeats_and_flow_control() {
    assert_eq!(
        push_idle_heartbeat(7, 12, None),
        "NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 7\r\nNats-Last-Stream: 12\r\n\r\n"
    );
    // Spec §10, observed with a stalled flow-control request.
    assert_eq!(
        push_idle_heartbeat(7, 12, Some("$JS.FC.F1.fc.icwY")),
        "NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 7\r\nNats-Last-Stream: 12\r\nNats-Consumer-Stalled: $JS.FC.F1.fc.icwY\r\n\r\n"
    );
    assert_eq!(
        FLOW_CONTROL_REQUEST,
        "NATS/1.0 100 FlowControl Request\r\n\r\n"
    );
    let reply = flow_control_reply("F1", "fc", 0x3d3c_0a00);
    assert_eq!(reply, "$JS.FC.F1.fc.0Ayz");
}

#[test]
fn cluster_block_follows_num_pending() {
    // nats-server 2.15.1, a consumer of a one-replica stream in a cluster.
    let state = ConsumerInfoState {
        num_pending: 3,
        cluster: Some(ClusterBlock {
            name: Some("lc".into()),
            leader: Some("n1".into()),
            replicas: Vec::new(),
        }),
        push_bound: true,
        ..ConsumerInfoState::default()
    };
    let object = consumer_info_object("S", "C", &config(), 0, &state, 0);
    assert!(
        object.ends_with(r#""num_pending":3,"cluster":{"name":"lc","leader":"n1"},"push_bound":true,"ts":"0001-01-01T00:00:00Z"}"#),
        "{object}"
    );
}
