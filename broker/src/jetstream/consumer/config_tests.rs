//! Tests of `consumer_config`. Golden texts come from nats-server 2.15.1,
//! recorded by `broker/it/tests/py/record_consumer_corpus.py`; the bulk of the
//! create cases are in the corpus.

use super::*;
use crate::jetstream::consumer::responses::{consumer_info_response, ConsumerInfoState};
use crate::jetstream::stream::config as stream_config;
use crate::jetstream::stream::config::REQUIRED_LEVEL_KEY;

#[path = "config_corpus_tests.rs"]
mod corpus;

fn error_json(error: &ApiError) -> String {
    let mut out = String::new();
    error.write_json(&mut out);
    out
}

fn config_json(config: &ConsumerConfig, dynamic_metadata: bool) -> String {
    let mut out = String::new();
    config.write_json(&mut out, dynamic_metadata);
    out
}

/// The corpus streams, as `STREAM.CREATE` made them.
fn corpus_stream(name: &str) -> StreamConfig {
    let body = match name {
        "S" => r#"{"name":"S","subjects":["s.>"]}"#,
        "W" => r#"{"name":"W","subjects":["w.>"],"retention":"workqueue"}"#,
        "L" => {
            r#"{"name":"L","subjects":["l.>"],"consumer_limits":{"max_ack_pending":50,"inactive_threshold":10000000000}}"#
        }
        _ => return StreamConfig::default(),
    };
    stream_config::parse(name, body.as_bytes(), true).unwrap()
}

/// A fixed random source for generated names.
fn counter() -> impl FnMut() -> u64 {
    let mut next = 0x0123_4567_89ab_cdef_u64;
    move || {
        next = next.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        next
    }
}

struct Stream {
    config: Option<StreamConfig>,
    consumers: Vec<(String, ConsumerConfig)>,
}

impl Stream {
    fn new(name: &str) -> Stream {
        let config = corpus_stream(name);
        Stream {
            config: (!config.name.is_empty()).then_some(config),
            consumers: Vec::new(),
        }
    }

    fn create(&mut self, subject: &str, body: &[u8]) -> Result<CreateOutcome, ApiError> {
        let tokens: Vec<&str> = subject.split('.').collect();
        let target = CreateTarget::from_tokens(&tokens).expect("a create subject");
        let consumers: Vec<(&str, &ConsumerConfig)> = self
            .consumers
            .iter()
            .map(|(name, config)| (name.as_str(), config))
            .collect();
        let mut random = counter();
        let outcome = parse_create(
            &target,
            body,
            CreateContext {
                stream: self.config.as_ref(),
                consumers: &consumers,
                random: &mut random,
                clustered: false,
            },
        )?;
        self.consumers.retain(|(name, _)| *name != outcome.name);
        self.consumers
            .push((outcome.name.clone(), outcome.config.clone()));
        Ok(outcome)
    }
}

/// A new consumer's info state on an empty stream, as nats-server reports
/// it in the create response (the start sequence, a future pause and the
/// first priority group show).
fn initial_state(config: &ConsumerConfig) -> ConsumerInfoState {
    let mut state = ConsumerInfoState::default();
    if config.deliver_policy == DeliverPolicy::ByStartSequence {
        state.delivered.stream_sequence = config.opt_start_sequence - 1;
        state.ack_floor.stream_sequence = config.opt_start_sequence - 1;
    }
    let now_unix_seconds = 1_800_000_000;
    if config
        .pause_until
        .is_some_and(|pause| pause.unix_seconds > now_unix_seconds)
    {
        state.pause_remaining_ns = Some(1);
    }
    state.priority_groups = ConsumerInfoState::priority_groups_of(config, "", 0);
    state
}

fn mask_name(text: &str, name: &str) -> String {
    text.replace(&format!("\"{name}\""), "\"GENERATED\"")
}

#[test]
fn create_corpus_matches_nats_server() {
    let mut failures = Vec::new();
    for case in corpus::CREATE_CORPUS {
        let stream_name = case
            .subject
            .split('.')
            .find(|token| !matches!(*token, "CREATE" | "DURABLE"));
        let mut stream = Stream::new(stream_name.unwrap_or(""));
        for (subject, body) in case.setup {
            stream.create(subject, body).expect("setup is accepted");
        }
        let tokens: Vec<&str> = case.subject.split('.').collect();
        if CreateTarget::from_tokens(&tokens).is_none() {
            if case.expected != "NO RESPONSE" {
                failures.push(format!("{}: tern would not answer", case.subject));
            }
            continue;
        }
        let (actual, actual_response) = match stream.create(case.subject, case.body) {
            Ok(outcome) => {
                let generated = case.name == "GENERATED";
                let mut config = config_json(&outcome.config, true);
                let name = if generated {
                    config = mask_name(&config, &outcome.name);
                    "GENERATED".to_string()
                } else {
                    outcome.name.clone()
                };
                let response = consumer_info_response(
                    "consumer_create_response",
                    "S",
                    &outcome.name,
                    &outcome.config,
                    1,
                    &initial_state(&outcome.config),
                    2,
                );
                let response = response
                    .replace(
                        "\"S\",\"name\"",
                        &format!("{:?},\"name\"", stream_name.unwrap_or("")),
                    )
                    .replace(
                        "\"created\":\"1970-01-01T00:00:00.000000001Z\"",
                        "\"created\":\"MASK\"",
                    )
                    .replace(
                        "\"ts\":\"1970-01-01T00:00:00.000000002Z\"",
                        "\"ts\":\"MASK\"",
                    )
                    .replace("\"pause_remaining\":1,", "\"pause_remaining\":MASK,");
                let response = if generated {
                    mask_name(&response, &outcome.name)
                } else {
                    response
                };
                (format!("{name} {config}"), response)
            }
            Err(error) => (error_json(&error), String::new()),
        };
        let expected = if case.expected.starts_with("{\"code\"") {
            case.expected.to_string()
        } else {
            format!("{} {}", case.name, case.expected)
        };
        if actual != expected || actual_response != case.response {
            failures.push(format!(
                "{} {}\n  want {expected}\n  got  {actual}\n  want {}\n  got  {actual_response}",
                case.subject,
                String::from_utf8_lossy(case.body),
                case.response
            ));
        }
        if !case.expected.starts_with("{\"code\"") {
            // Whatever nats-server answers, tern reads back and echoes the same.
            let echoed = ConsumerConfig::from_stored_json(case.expected.as_bytes())
                .map(|config| config_json(&config, true));
            if echoed.as_deref() != Ok(case.expected) {
                failures.push(format!("echo of {}\n  got {echoed:?}", case.expected));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(corpus::CREATE_CORPUS.len() >= 150);
}

fn create_on(stream: &str, subject: &str, body: &str) -> Result<CreateOutcome, ApiError> {
    Stream::new(stream).create(subject, body.as_bytes())
}

#[test]
fn defaults_follow_nats_server() {
    let pull = create_on(
        "S",
        "CREATE.S.D",
        r#"{"stream_name":"S","config":{"durable_name":"D","ack_policy":"explicit"}}"#,
    )
    .unwrap();
    let config = &pull.config;
    assert_eq!(pull.kind, CreateKind::Created);
    assert_eq!(config.ack_wait_ns, ACK_WAIT_DEFAULT_NS);
    assert_eq!(config.max_deliver, -1);
    assert_eq!(config.max_waiting, MAX_WAITING_DEFAULT);
    assert_eq!(config.max_ack_pending, MAX_ACK_PENDING_DEFAULT);
    assert_eq!(config.inactive_threshold_ns, 0, "durables never expire");
    assert_eq!(config.num_replicas, 0);
    assert_eq!(config.name, "D");
    // Ack none: no ack wait, no max ack pending; ack policy defaults to none.
    let none = create_on(
        "S",
        "CREATE.S.E",
        r#"{"stream_name":"S","config":{"ack_wait":79200000000000}}"#,
    )
    .unwrap()
    .config;
    assert_eq!(none.ack_policy, AckPolicy::None);
    assert_eq!(none.ack_wait_ns, 79_200_000_000_000, "kept as sent");
    assert_eq!(none.max_ack_pending, 0);
    assert_eq!(none.inactive_threshold_ns, INACTIVE_THRESHOLD_DEFAULT_NS);
    // Backoff sets ack_wait.
    let backoff = create_on(
        "S",
        "CREATE.S.D",
        r#"{"stream_name":"S","config":{"durable_name":"D","ack_policy":"explicit","backoff":[7,9]}}"#,
    )
    .unwrap()
    .config;
    assert_eq!(backoff.ack_wait_ns, 7);
    // Push consumers get no max_waiting.
    let push = create_on(
        "S",
        "CREATE.S.P",
        r#"{"stream_name":"S","config":{"deliver_subject":"dlv","ack_policy":"explicit"}}"#,
    )
    .unwrap()
    .config;
    assert_eq!(push.max_waiting, 0);
    assert!(push.is_push());
    // Stream consumer limits are the defaults.
    let limited = create_on(
        "L",
        "CREATE.L.D",
        r#"{"stream_name":"L","config":{"durable_name":"D","ack_policy":"explicit"}}"#,
    )
    .unwrap()
    .config;
    assert_eq!(limited.max_ack_pending, 50);
    assert_eq!(limited.inactive_threshold_ns, 10_000_000_000);
    // Pinned client: 2 minute priority timeout.
    let pinned = create_on(
        "S",
        "CREATE.S.D",
        r#"{"stream_name":"S","config":{"durable_name":"D","priority_policy":"pinned_client","priority_groups":["g"]}}"#,
    )
    .unwrap()
    .config;
    assert_eq!(pinned.priority_timeout_ns, PRIORITY_TIMEOUT_DEFAULT_NS);
    assert_eq!(pinned.metadata.get(REQUIRED_LEVEL_KEY).unwrap(), "1");
}

#[test]
fn generated_names_use_the_alphabet_and_avoid_collisions() {
    assert_eq!(ephemeral_name(0), "00000000");
    assert_eq!(ephemeral_name(u64::MAX), "77777777"); // 255 % 62 = 7
    assert_eq!(ephemeral_name(0x3d3c), "yz000000"); // little-endian: 0x3c = 60, 0x3d = 61
    let name = ephemeral_name(0x0123_4567_89ab_cdef);
    assert_eq!(name.len(), EPHEMERAL_NAME_BYTES);
    assert!(name
        .bytes()
        .all(|byte| EPHEMERAL_NAME_ALPHABET.contains(&byte)));
    // A taken name is drawn again.
    let mut stream = Stream::new("S");
    let first = stream
        .create("CREATE.S", br#"{"stream_name":"S","config":{}}"#)
        .unwrap();
    let second = stream
        .create("CREATE.S", br#"{"stream_name":"S","config":{}}"#)
        .unwrap();
    assert_ne!(first.name, second.name);
    assert_eq!(
        first.config.name, "",
        "nats-server stores no generated name"
    );
}

#[test]
fn subject_forms() {
    assert_eq!(
        CreateTarget::from_tokens(&["CREATE", "S"]),
        Some(CreateTarget::Ephemeral { stream: "S".into() })
    );
    assert_eq!(
        CreateTarget::from_tokens(&["CREATE", "S", "C", "a", "*"]),
        Some(CreateTarget::Named {
            stream: "S".into(),
            consumer: "C".into(),
            filter: Some("a.*".into())
        })
    );
    assert_eq!(
        CreateTarget::from_tokens(&["DURABLE", "CREATE", "S", "C"]),
        Some(CreateTarget::Durable {
            stream: "S".into(),
            consumer: "C".into()
        })
    );
    for tokens in [
        &["CREATE"][..],
        &["DURABLE", "CREATE", "S"],
        &["DURABLE", "CREATE", "S", "C", "x"],
        &["INFO", "S", "C"],
    ] {
        assert_eq!(CreateTarget::from_tokens(tokens), None, "{tokens:?}");
    }
}

fn pull(extra: &str) -> ConsumerConfig {
    let body = format!(
        r#"{{"stream_name":"S","config":{{"durable_name":"D","ack_policy":"explicit"{extra}}}}}"#
    );
    create_on("S", "CREATE.S.D", &body).unwrap().config
}

#[test]
fn update_rules_and_texts() {
    let current = pull("");
    assert_eq!(check_update(&current, &current), Ok(()));
    assert_eq!(
        check_update(&current, &pull(r#","description":"x""#)),
        Ok(())
    );
    assert_eq!(
        check_update(&current, &pull(r#","max_ack_pending":5"#)),
        Ok(())
    );
    for (extra, text) in [
        (
            r#","deliver_policy":"new""#,
            "deliver policy can not be updated",
        ),
        (r#","mem_storage":true"#, "storage type can not be updated"),
        (
            r#","replay_policy":"original""#,
            "replay policy can not be updated",
        ),
        (r#","max_waiting":3"#, "max waiting can not be updated"),
        (
            r#","deliver_subject":"d""#,
            "can not update pull consumer to push based",
        ),
    ] {
        let error = check_update(&current, &pull(extra)).unwrap_err();
        assert_eq!((error.status, error.code), (500, 10012), "{extra}");
        assert_eq!(error.description, text);
    }
    let mut proposed = current.clone();
    proposed.ack_policy = AckPolicy::All;
    assert_eq!(
        check_update(&current, &proposed).unwrap_err().description,
        "ack policy can not be updated"
    );
    proposed = current.clone();
    proposed.opt_start_sequence = 3;
    assert_eq!(
        check_update(&current, &proposed).unwrap_err().description,
        "start sequence can not be updated"
    );
    proposed = current.clone();
    proposed.idle_heartbeat_ns = 5;
    assert_eq!(
        check_update(&current, &proposed).unwrap_err().description,
        "heart beats can not be updated"
    );
    proposed = current.clone();
    proposed.flow_control = true;
    assert_eq!(
        check_update(&current, &proposed).unwrap_err().description,
        "flow control can not be updated"
    );
    let mut push = current.clone();
    push.deliver_subject = "a".into();
    push.max_waiting = 0;
    let mut to_pull = push.clone();
    to_pull.deliver_subject.clear();
    assert_eq!(
        check_update(&push, &to_pull).unwrap_err().description,
        "can not update push consumer to pull based"
    );
    let mut moved = push.clone();
    moved.deliver_subject = "b".into();
    assert_eq!(check_update(&push, &moved), Ok(()));
    proposed = current.clone();
    proposed.backoff_ns = vec![1, 2];
    proposed.max_deliver = 1;
    assert_eq!(check_update(&current, &proposed).unwrap_err().code, 10116);
}

#[test]
fn same_as_ignores_server_metadata() {
    let a = pull("");
    let mut b = a.clone();
    b.metadata.insert(REQUIRED_LEVEL_KEY.into(), "3".into());
    b.metadata.insert(SERVER_VERSION_KEY.into(), "x".into());
    assert!(a.same_as(&b));
    b.metadata.insert("user".into(), "x".into());
    assert!(!a.same_as(&b));
}

#[test]
fn workqueue_overlap_needs_other_consumers() {
    let filtered = |filter: &str| {
        let mut config = pull("");
        config.filter_subject = filter.into();
        config
    };
    let unfiltered = pull("");
    let a = filtered("w.a");
    assert_eq!(check_workqueue_overlap(&[], &unfiltered), Ok(()));
    assert_eq!(
        check_workqueue_overlap(&[&a], &unfiltered)
            .unwrap_err()
            .code,
        10099
    );
    assert_eq!(
        check_workqueue_overlap(&[&a], &filtered("w.*"))
            .unwrap_err()
            .code,
        10100
    );
    assert_eq!(check_workqueue_overlap(&[&a], &filtered("w.b")), Ok(()));
    assert_eq!(
        check_workqueue_overlap(&[&unfiltered], &filtered("w.b"))
            .unwrap_err()
            .code,
        10100
    );
    let mut direct = unfiltered.clone();
    direct.direct = true;
    assert_eq!(check_workqueue_overlap(&[&direct], &unfiltered), Ok(()));
}

#[test]
fn stored_json_round_trips() {
    let body = r#"{"stream_name":"S","config":{"durable_name":"R","description":"d <&>","deliver_policy":"by_start_time","opt_start_time":"2024-01-01T00:00:00.5+02:00","ack_policy":"explicit","ack_wait":5000000000,"max_deliver":9,"backoff":[5000000000,7000000000],"filter_subjects":["s.a","s.b.>"],"replay_policy":"original","sample_freq":"30%","max_waiting":7,"max_ack_pending":11,"headers_only":true,"max_batch":3,"max_expires":4000000000,"max_bytes":100,"inactive_threshold":60000000000,"num_replicas":1,"mem_storage":true,"metadata":{"k":"v"},"pause_until":"2099-01-01T00:00:00Z","priority_groups":["g1","g2"],"priority_policy":"pinned_client","priority_timeout":9000000000}}"#;
    let config = create_on("S", "CREATE.S.R", body).unwrap().config;
    assert_eq!(config.required_api_level(), 1);
    let stored = config.to_stored_json();
    assert!(!stored.contains(SERVER_VERSION_KEY));
    let read = ConsumerConfig::from_stored_json(stored.as_bytes()).unwrap();
    assert_eq!(read, config);
    assert_eq!(read.to_stored_json(), stored);
    assert_eq!(config.to_string(), stored);
    // A push config with flow control.
    let push = create_on(
        "S",
        "CREATE.S.P",
        r#"{"stream_name":"S","config":{"deliver_subject":"dlv","deliver_group":"q","ack_policy":"all","idle_heartbeat":1000000000,"flow_control":true,"rate_limit_bps":5,"direct":false}}"#,
    )
    .unwrap()
    .config;
    let read = ConsumerConfig::from_stored_json(push.to_stored_json().as_bytes()).unwrap();
    assert_eq!(read, push);
    assert!(ConsumerConfig::from_stored_json(b"[").is_err());
}

#[test]
fn max_consumers_and_update_action() {
    let mut stream = Stream::new("S");
    stream.config.as_mut().unwrap().max_consumers = 1;
    stream
        .create("CREATE.S.A", br#"{"stream_name":"S","config":{}}"#)
        .unwrap();
    let error = stream
        .create("CREATE.S.B", br#"{"stream_name":"S","config":{}}"#)
        .unwrap_err();
    assert_eq!(
        (error.code, error.description.as_str()),
        (10026, "maximum consumers limit reached")
    );
    // An update of the existing one is not limited.
    let outcome = stream
        .create(
            "CREATE.S.A",
            br#"{"stream_name":"S","config":{"description":"x"},"action":"update"}"#,
        )
        .unwrap();
    assert_eq!(outcome.kind, CreateKind::Updated);
    assert_eq!(outcome.action, CreateAction::Update);
}

#[test]
fn durable_name_length() {
    let name = "x".repeat(256);
    let body = format!(r#"{{"stream_name":"S","config":{{"durable_name":"{name}"}}}}"#);
    let error = create_on("S", &format!("CREATE.S.{name}"), &body).unwrap_err();
    assert_eq!(
        (error.code, error.description.as_str()),
        (10102, "consumer name is too long, maximum allowed is 255")
    );
}

#[test]
fn replicas_above_one_only_in_a_cluster() {
    let mut stream = corpus_stream("S");
    stream.name = "R".into();
    stream.num_replicas = 3;
    let create = |replicas: i64, clustered: bool| {
        let mut random = counter();
        let body = format!(
            r#"{{"stream_name":"R","config":{{"durable_name":"D","num_replicas":{replicas}}}}}"#
        );
        parse_create(
            &CreateTarget::from_tokens(&["CREATE", "R", "D"]).unwrap(),
            body.as_bytes(),
            CreateContext {
                stream: Some(&stream),
                consumers: &[],
                random: &mut random,
                clustered,
            },
        )
        .map(|outcome| outcome.config.num_replicas)
    };
    // nats-server 2.15.1 on one server, and in a 3-node cluster.
    assert_eq!(create(3, false), Err(ApiError::replicas_not_supported()));
    assert_eq!(create(3, true), Ok(3));
    assert_eq!(create(1, true), Ok(1));
    assert_eq!(
        create(5, true),
        Err(ApiError::consumer_replicas_exceed_stream())
    );
}
