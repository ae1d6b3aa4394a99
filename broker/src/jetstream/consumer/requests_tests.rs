//! Tests of `consumer_requests`. The pull corpus was recorded from
//! nats-server 2.15.1 by `broker/it/tests/py/record_consumer_corpus.py`.

use super::*;
use crate::jetstream::consumer::config::AckPolicy;

#[path = "requests_corpus_tests.rs"]
mod corpus;

/// The corpus window: statuses sent within 500 ms.
const WINDOW_NS: i64 = 500_000_000;

fn corpus_consumer(name: &str) -> ConsumerConfig {
    let mut config = ConsumerConfig {
        durable_name: name.into(),
        name: name.into(),
        ack_policy: AckPolicy::Explicit,
        ..ConsumerConfig::default()
    };
    if name == "P" {
        config.max_batch = 10;
        config.max_expires_ns = 2_000_000_000;
        config.max_bytes = 1000;
    } else {
        config.priority_policy = PriorityPolicy::Overflow;
        config.priority_groups = vec!["g".into()];
    }
    config
}

/// What tern's modules predict nats-server sends within the window for a
/// request on an empty stream.
fn predicted_statuses(config: &ConsumerConfig, body: &[u8]) -> Vec<String> {
    let request = match PullRequest::parse(body) {
        Ok(request) => request,
        Err(status) => return vec![status.header_block()],
    };
    if let Err(status) = request.check(config) {
        return vec![status.header_block()];
    }
    if let Some(status) = request.no_wait_answer(0, 0) {
        return vec![status.header_block()];
    }
    let mut statuses = Vec::new();
    let ends_ns = if request.expires_ns != 0 {
        request.expires_ns.min(WINDOW_NS)
    } else {
        WINDOW_NS
    };
    if request.idle_heartbeat_ns > 0 {
        let mut at_ns = request.idle_heartbeat_ns;
        while at_ns < ends_ns {
            statuses.push(
                PullStatus::IdleHeartbeat {
                    last_consumer_sequence: 0,
                    last_stream_sequence: 0,
                }
                .header_block(),
            );
            at_ns += request.idle_heartbeat_ns;
        }
    }
    if request.expires_ns != 0 && request.expires_ns <= WINDOW_NS {
        statuses.push(
            PullStatus::RequestTimeout {
                pending_messages: request.batch,
                pending_bytes: request.max_bytes,
            }
            .header_block(),
        );
    }
    statuses
}

#[test]
fn pull_corpus_matches_nats_server() {
    let mut failures = Vec::new();
    for (consumer, body, expected) in corpus::PULL_CORPUS {
        let actual = predicted_statuses(&corpus_consumer(consumer), body);
        if actual != *expected {
            failures.push(format!(
                "{consumer} {}\n  want {expected:?}\n  got  {actual:?}",
                String::from_utf8_lossy(body)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(corpus::PULL_CORPUS.len() >= 50);
}

#[test]
fn pull_bodies() {
    assert_eq!(PullRequest::parse(b"").unwrap(), PullRequest::default());
    assert_eq!(PullRequest::parse(b" 7 ").unwrap().batch, 7);
    assert_eq!(PullRequest::parse(b"-3").unwrap().batch, -3);
    assert_eq!(PullRequest::parse(b"abc").unwrap().batch, 1);
    // JSON without batch: batch 0 (nats-server then waits for expiry).
    let request = PullRequest::parse(br#"{"expires":5}"#).unwrap();
    assert_eq!((request.batch, request.expires_ns), (0, 5));
    let request = PullRequest::parse(
        br#"{"batch":200,"expires":30000000000,"max_bytes":0,"idle_heartbeat":15000000000,"min_pending":null,"min_ack_pending":null,"group":null,"priority":null}"#,
    )
    .unwrap();
    assert_eq!(request.batch, 200);
    assert_eq!(request.idle_heartbeat_ns, 15_000_000_000);
    assert_eq!(request.priority, Some(PriorityRequest::default()));
    // hb * 2 == expires is allowed (nats.go sends hb = expires / 2).
    assert!(PullRequest::parse(br#"{"expires":10,"idle_heartbeat":5}"#).is_ok());
    assert_eq!(
        PullRequest::parse(br#"{"expires":10,"idle_heartbeat":6}"#),
        Err(PullStatus::BadRequest("heartbeat value too large".into()))
    );
}

#[test]
fn ack_bodies() {
    for body in [&b""[..], b"+ACK", b"+OK"] {
        assert_eq!(AckBody::parse(body), AckBody::Ack);
    }
    assert_eq!(AckBody::parse(b"-NAK"), AckBody::Nak { delay_ns: None });
    assert_eq!(
        AckBody::parse(b"-NAK 10s"),
        AckBody::Nak {
            delay_ns: Some(10_000_000_000)
        }
    );
    assert_eq!(
        AckBody::parse(br#"-NAK {"delay":5000}"#),
        AckBody::Nak {
            delay_ns: Some(5000)
        }
    );
    assert_eq!(
        AckBody::parse(br#"-NAK {"delay":5000,"other":1}"#),
        AckBody::Nak {
            delay_ns: Some(5000)
        }
    );
    // Unparsable delays are plain NAKs.
    for body in [
        &b"-NAK soon"[..],
        b"-NAKx",
        br#"-NAK {"delay":"1s"}"#,
        b"-NAK {",
    ] {
        assert_eq!(AckBody::parse(body), AckBody::Nak { delay_ns: None });
    }
    assert_eq!(AckBody::parse(b"+WPI"), AckBody::Progress);
    assert_eq!(
        AckBody::parse(b"+NXT"),
        AckBody::Next(Ok(PullRequest::default()))
    );
    assert_eq!(
        AckBody::parse(b"+NXT 5").clone(),
        AckBody::Next(Ok(PullRequest {
            batch: 5,
            ..PullRequest::default()
        }))
    );
    assert!(matches!(
        AckBody::parse(br#"+NXT {"batch":2,"no_wait":true}"#),
        AckBody::Next(Ok(PullRequest {
            batch: 2,
            no_wait: true,
            ..
        }))
    ));
    assert!(matches!(
        AckBody::parse(b"+NXT {"),
        AckBody::Next(Err(PullStatus::BadRequest(_)))
    ));
    assert_eq!(AckBody::parse(b"+TERM"), AckBody::Term { reason: None });
    assert_eq!(
        AckBody::parse(b"+TERM  bad input \r\n"),
        AckBody::Term {
            reason: Some("bad input".into())
        }
    );
    // Exact matches only: trailing bytes make these unknown.
    for body in [&b"+ACK "[..], b" +ACK", b"+WPI ", b"ack", b"+OKx", b"-nak"] {
        assert_eq!(AckBody::parse(body), AckBody::Unknown, "{body:?}");
    }
}

#[test]
fn ack_subjects_round_trip() {
    let subject = "$JS.ACK.ORDERS.P1.1.1.1.1796029674907003966.2";
    let decoded = AckSubject::decode(subject.as_bytes()).unwrap();
    assert_eq!(
        decoded,
        AckSubject {
            stream: "ORDERS",
            consumer: "P1",
            delivered_count: 1,
            stream_sequence: 1,
            consumer_sequence: 1,
            timestamp_ns: 1_796_029_674_907_003_966,
            pending: 2,
            domain: None,
            account_hash: None,
        }
    );
    assert_eq!(decoded.encode(), subject);
    let v2 = AckSubject::decode(b"$JS.ACK.hub.ACCHASH.S.C.2.10.12.99.0.token").unwrap();
    assert_eq!(v2.domain, Some("hub"));
    assert_eq!(v2.account_hash, Some("ACCHASH"));
    assert_eq!((v2.stream, v2.consumer), ("S", "C"));
    assert_eq!(
        (
            v2.delivered_count,
            v2.stream_sequence,
            v2.consumer_sequence,
            v2.timestamp_ns,
            v2.pending
        ),
        (2, 10, 12, 99, 0)
    );
    for bad in [
        "$JS.ACK.S.C.1.1.1.1",
        "$JS.ACK.S.C.1.1.1.1.1.1",
        "$JS.ACX.S.C.1.1.1.1.1",
        "$JS.ACK.S.C.1.x.1.1.1",
        "$JS.ACK.S.C.1.-1.1.1.1",
        "$JS.ACK.S.C.1..1.1.1",
        "$JS.ACK.S.C.1.1.1.99999999999999999999.1",
    ] {
        assert_eq!(AckSubject::decode(bad.as_bytes()), None, "{bad}");
    }
}

#[test]
fn names_paging_bodies() {
    assert_eq!(ConsumersRequest::parse(b"").unwrap().offset, 0);
    assert_eq!(ConsumersRequest::parse(b"garbage").unwrap().offset, 0);
    assert_eq!(
        ConsumersRequest::parse(br#"{"offset":5}"#).unwrap().offset,
        5
    );
    assert_eq!(
        ConsumersRequest::parse(br#"{"offset":-5}"#).unwrap().offset,
        0
    );
    let error = ConsumersRequest::parse(br#"{"subject":"x"}"#).unwrap_err();
    assert_eq!(
        (error.code, error.description.as_str()),
        (10025, "invalid JSON: json: unknown field \"subject\"")
    );
    let error = ConsumersRequest::parse(br#"{"offset":"1"}"#).unwrap_err();
    assert_eq!(
        error.description,
        "invalid JSON: json: cannot unmarshal string into Go struct field JSApiConsumersRequest.offset of type int"
    );
}
