//! Fuzzes the consumer API decoders with arbitrary bodies: CONSUMER.CREATE
//! in every subject form against a limits and a work-queue stream (with and
//! without an existing consumer), pull requests, ack bodies, ack subjects
//! and the NAMES/LIST paging body. Never panic; an accepted config reads
//! back equal from its stored JSON, and an update to itself is allowed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::consumer::config::{
    self as consumer_config, ConsumerConfig, CreateContext, CreateTarget,
};
use tern_broker::jetstream::consumer::requests::{
    AckBody, AckSubject, ConsumersRequest, PullRequest,
};
use tern_broker::jetstream::stream::config::{self as stream_config, StreamConfig};

fn stream(name: &str, body: &str) -> StreamConfig {
    stream_config::parse(name, body.as_bytes(), true).expect("a valid stream")
}

fuzz_target!(|data: &[u8]| {
    let limits = stream("S", r#"{"name":"S","subjects":["s.>"]}"#);
    let workqueue = stream(
        "S",
        r#"{"name":"S","subjects":["s.>"],"retention":"workqueue"}"#,
    );
    let existing = ConsumerConfig {
        durable_name: "D".into(),
        name: "D".into(),
        max_deliver: -1,
        max_waiting: 512,
        ..ConsumerConfig::default()
    };
    let targets = [
        CreateTarget::from_tokens(&["CREATE", "S"]),
        CreateTarget::from_tokens(&["CREATE", "S", "D"]),
        CreateTarget::from_tokens(&["CREATE", "S", "D", "s", "*"]),
        CreateTarget::from_tokens(&["DURABLE", "CREATE", "S", "D"]),
    ];
    for target in targets.iter().flatten() {
        for stream in [&limits, &workqueue] {
            for consumers in [&[][..], &[("D", &existing)][..]] {
                let mut random = || 0x0123_4567_89ab_cdef_u64;
                let outcome = consumer_config::parse_create(
                    target,
                    data,
                    CreateContext {
                        stream: Some(stream),
                        consumers,
                        random: &mut random,
                        clustered: false,
                    },
                );
                let Ok(outcome) = outcome else { continue };
                let config = outcome.config;
                let mut out = String::new();
                config.write_json(&mut out, true);
                let stored = config.to_stored_json();
                let back = ConsumerConfig::from_stored_json(stored.as_bytes())
                    .expect("a stored config reads back");
                assert_eq!(back, config, "stored JSON round trip");
                assert!(back.same_as(&config));
                assert!(consumer_config::check_update(&config, &back).is_ok());
            }
        }
    }
    if let Ok(config) = ConsumerConfig::from_stored_json(data) {
        let _ = config.to_stored_json();
    }
    if let Ok(request) = PullRequest::parse(data) {
        let _ = request.check(&existing);
        let _ = request.no_wait_answer(0, 0);
    }
    let _ = AckBody::parse(data);
    if let Some(subject) = AckSubject::decode(data) {
        // What decodes re-encodes to the same v1 subject.
        if subject.domain.is_none() {
            assert_eq!(
                AckSubject::decode(subject.encode().as_bytes()),
                Some(subject)
            );
        }
    }
    let _ = ConsumersRequest::parse(data);
});
