//! Tests of `stream::config`. Golden texts come from nats-server 2.15.1
//! (`nats-server -js`), captured with raw `PUB $JS.API.STREAM.<OP>.<name>
//! <inbox> <n>` requests; the bulk of the create cases are in the corpus.

use super::*;

#[path = "config_corpus_tests.rs"]
mod corpus;

fn error_json(error: &ApiError) -> String {
    let mut out = String::new();
    error.write_json(&mut out);
    out
}

fn config_json(config: &StreamConfig, dynamic_metadata: bool) -> String {
    let mut out = String::new();
    config.write_json(&mut out, dynamic_metadata);
    out
}

fn create(name: &str, body: &str) -> Result<StreamConfig, ApiError> {
    parse(name, body.as_bytes(), true)
}

fn update(name: &str, body: &str) -> Result<StreamConfig, ApiError> {
    parse(name, body.as_bytes(), false)
}

fn create_error(name: &str, body: &str) -> (u32, String) {
    let error = create(name, body).expect_err(body);
    (error.code, error.description)
}

/// The default config nats-server 2.15.1 answers for `{"name":"B"}`.
const DEFAULT_B: &str = r#"{"name":"B","subjects":["B"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","storage":"file","num_replicas":1,"duplicate_window":120000000000,"compression":"none","allow_direct":false,"mirror_direct":false,"sealed":false,"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}}"#;

#[test]
fn create_corpus_matches_nats_server() {
    let mut failures = Vec::new();
    for (body, expected) in corpus::CREATE_CORPUS {
        let actual = match parse("B", body, true) {
            Ok(config) => config_json(&config, true),
            Err(error) => error_json(&error),
        };
        let refused_as_unsupported = !expected.starts_with("{\"code\"")
            && (expected.contains("\"mirror\":") || expected.contains("\"sources\":"));
        if refused_as_unsupported {
            let refusal = if expected.contains("\"mirror\":") {
                MIRROR_NOT_SUPPORTED
            } else {
                SOURCES_NOT_SUPPORTED
            };
            if actual != error_json(&ApiError::invalid_stream_config(refusal)) {
                failures.push(format!(
                    "{}\n  want refusal\n  got  {actual}",
                    String::from_utf8_lossy(body)
                ));
            }
        } else if actual != *expected {
            failures.push(format!(
                "{}\n  want {expected}\n  got  {actual}",
                String::from_utf8_lossy(body)
            ));
        }
        if !expected.starts_with("{\"code\"") {
            // Whatever nats-server answers, tern reads back and echoes the same.
            let echoed = StreamConfig::from_stored_json(expected.as_bytes())
                .map(|config| config_json(&config, true));
            if echoed.as_deref() != Ok(*expected) {
                failures.push(format!("echo of {expected}\n  got {echoed:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(corpus::CREATE_CORPUS.len() > 300);
}

#[test]
fn default_config_is_normalised() {
    let config = create("B", r#"{"name":"B"}"#).unwrap();
    assert_eq!(config_json(&config, true), DEFAULT_B);
    assert_eq!(config.subjects, ["B"]);
    assert_eq!(config.num_replicas, 1);
    assert_eq!(config.duplicate_window_ns, DUPLICATE_WINDOW_DEFAULT_NS);
    assert_eq!(
        (config.max_msgs, config.max_bytes, config.max_msg_size),
        (-1, -1, -1)
    );
    assert_eq!(
        config.metadata.get(REQUIRED_LEVEL_KEY).map(String::as_str),
        Some("0")
    );
}

#[test]
fn list_and_stored_forms_omit_dynamic_metadata() {
    // nats-server 2.15.1 STREAM.LIST element of a stream created with
    // {"name":"T","subjects":["t.>"],"allow_direct":true}.
    let config = create(
        "T",
        r#"{"name":"T","subjects":["t.>"],"allow_direct":true}"#,
    )
    .unwrap();
    let expected = r#"{"name":"T","subjects":["t.\u003e"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","storage":"file","num_replicas":1,"duplicate_window":120000000000,"compression":"none","allow_direct":true,"mirror_direct":false,"sealed":false,"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,"metadata":{"_nats.req.level":"0"}}"#;
    assert_eq!(config_json(&config, false), expected);
    assert_eq!(config.to_stored_json(), expected);
    assert_eq!(config.to_string(), expected);
}

#[test]
fn stored_json_round_trips() {
    let body = r#"{"name":"R","description":"d <&>","subjects":["r.*","q"],"retention":"interest","max_msgs":10,"max_bytes":20,"max_age":3600000000000,"max_msgs_per_subject":3,"max_msg_size":100,"discard":"new","discard_new_per_subject":true,"storage":"memory","no_ack":true,"duplicate_window":1000000000,"placement":{"cluster":"c","tags":["a"]},"compression":"s2","first_seq":9,"subject_transform":{"src":"r.*","dest":"s.$1"},"republish":{"src":"r.*","dest":"x.>","headers_only":true},"allow_direct":true,"deny_delete":true,"consumer_limits":{"inactive_threshold":5,"max_ack_pending":6},"allow_msg_ttl":true,"subject_delete_marker_ttl":2000000000,"allow_atomic":true,"allow_batched":true,"metadata":{"k":"v"}}"#;
    let config = create("R", body);
    // republish x.> from r.*: not a valid transform (fwc mismatch).
    assert_eq!(
        config.unwrap_err().description,
        "stream configuration for republish with transform from 'r.*' to 'x.>' not valid"
    );
    let body = body.replace("\"dest\":\"x.>\"", "\"dest\":\"x.$1\"");
    let config = create("R", &body).unwrap();
    assert_eq!(config.required_api_level(), 4);
    let stored = config.to_stored_json();
    let read = StreamConfig::from_stored_json(stored.as_bytes()).unwrap();
    assert_eq!(read, config);
    assert_eq!(read.to_stored_json(), stored);
    // Also through serde_json, as the lead's stored-file reader does.
    let value: serde_json::Value = serde_json::from_str(&stored).unwrap();
    let read = StreamConfig::from_stored_json(value.to_string().as_bytes()).unwrap();
    assert_eq!(read, config);
    let read: StreamConfig = serde_json::from_str(&stored).unwrap();
    assert_eq!(read, config);
}

#[test]
fn stored_json_rejects_damage() {
    assert!(StreamConfig::from_stored_json(b"{\"name\":").is_err());
    assert!(StreamConfig::from_stored_json(b"{\"name\":\"\"}").is_err());
    assert!(StreamConfig::from_stored_json(b"{\"name\":\"a.b\"}").is_err());
    // Unknown fields (a newer tern) are ignored.
    let config = StreamConfig::from_stored_json(b"{\"name\":\"N\",\"future\":1}").unwrap();
    assert_eq!(config.name, "N");
}

#[test]
fn create_checks_names_in_nats_server_order() {
    // nats-server 2.15.1: CREATE.A {"name":"B"}
    assert_eq!(
        create_error("A", r#"{"name":"B"}"#),
        (
            10056,
            "stream name in subject does not match request".into()
        )
    );
    // CREATE.A/b {"name":"A/b"} and CREATE.A\b {"name":"A\\b"}
    for (subject_name, body) in [("A/b", r#"{"name":"A/b"}"#), ("A\\b", r#"{"name":"A\\b"}"#)] {
        assert_eq!(
            create_error(subject_name, body),
            (10128, "Stream name can not contain path separators".into())
        );
    }
    // CREATE.A/b {"name":"A/b","sealed":true}: separators before sealed.
    assert_eq!(
        create_error("A/b", r#"{"name":"A/b","sealed":true}"#).0,
        10128
    );
    // CREATE.A/b {"name":"X"}: mismatch first.
    assert_eq!(create_error("A/b", r#"{"name":"X"}"#).0, 10056);
    // CREATE.* {"name":"*"}
    assert_eq!(
        create_error("*", r#"{"name":"*"}"#),
        (
            10052,
            "stream name is required and can not contain '.', '*', '>', '\\', '/'".into()
        )
    );
    let error = create(">", r#"{"name":">"}"#).unwrap_err();
    assert_eq!(
        error_json(&error),
        r#"{"code":500,"err_code":10052,"description":"stream name is required and can not contain '.', '*', '\u003e', '\\', '/'"}"#
    );
    let long = "N".repeat(256);
    assert_eq!(
        create_error(&long, &format!(r#"{{"name":"{long}"}}"#)),
        (
            10052,
            "stream name is too long, maximum allowed is 255".into()
        )
    );
    // CREATE.A {"name":"A","sealed":true,"max_age":-1}: sealed before config checks.
    assert_eq!(
        create_error("A", r#"{"name":"A","sealed":true,"max_age":-1}"#),
        (
            10052,
            "stream configuration for create can not be sealed".into()
        )
    );
    assert_eq!(
        create_error("A", r#"{"name":"A","mirror_direct":true}"#),
        (
            10052,
            "stream has no mirror but does have mirror direct".into()
        )
    );
    // An empty body is a config without a name: mismatch on create.
    assert_eq!(create_error("A", "").0, 10056);
    assert_eq!(create_error("A", "  ").0, 10056);
    assert_eq!(create_error("A", "null").0, 10056);
}

#[test]
fn create_checks_sizes_and_replicas() {
    let description = "d".repeat(DESCRIPTION_BYTES_MAX + 1);
    assert_eq!(
        create_error(
            "A",
            &format!(r#"{{"name":"A","description":"{description}"}}"#)
        ),
        (
            10052,
            "stream description is too long, maximum allowed is 4096".into()
        )
    );
    let description = "d".repeat(DESCRIPTION_BYTES_MAX);
    assert!(create(
        "A",
        &format!(r#"{{"name":"A","description":"{description}"}}"#)
    )
    .is_ok());
    // The stored `_nats.req.level` (16 bytes) counts toward the limit.
    let value = "v".repeat(METADATA_BYTES_MAX - 17);
    assert!(create(
        "A",
        &format!(r#"{{"name":"A","metadata":{{"k":"{value}"}}}}"#)
    )
    .is_ok());
    let value = "v".repeat(METADATA_BYTES_MAX - 16);
    assert_eq!(
        create_error(
            "A",
            &format!(r#"{{"name":"A","metadata":{{"k":"{value}"}}}}"#)
        ),
        (
            10052,
            "stream metadata exceeds maximum size of 131072 bytes".into()
        )
    );
    assert_eq!(
        create_error("A", r#"{"name":"A","num_replicas":3}"#),
        (
            10074,
            "replicas > 1 not supported in non-clustered mode".into()
        )
    );
    assert_eq!(
        create_error("A", r#"{"name":"A","num_replicas":3,"max_age":-5}"#),
        (10052, "max age can not be negative".into())
    );
    assert_eq!(
        create_error("A", r#"{"name":"A","num_replicas":6}"#),
        (10052, "maximum replicas is 5".into())
    );
    let error = create("A", r#"{"name":"A","num_replicas":-1}"#).unwrap_err();
    assert_eq!((error.status, error.code), (400, 10133));
}

#[test]
fn every_validation_text() {
    // Each body sent as CREATE.B to nats-server 2.15.1.
    let cases: &[(&str, u32, &str)] = &[
        (r#""max_msgs":-2,"pedantic":true"#, 10157, "pedantic mode: max_msgs must be set to -1"),
        (r#""max_msgs_per_subject":-2,"pedantic":true"#, 10157, "pedantic mode: max_msgs_per_subject must be set to -1"),
        (r#""max_bytes":-2,"pedantic":true"#, 10157, "pedantic mode: max_bytes must be set to -1"),
        (r#""max_msg_size":-2,"pedantic":true"#, 10157, "pedantic mode: max_msg_size must be set to -1"),
        (r#""max_consumers":-2,"pedantic":true"#, 10157, "pedantic mode: max_consumers must be set to -1"),
        (r#""max_age":-1"#, 10052, "max age can not be negative"),
        (r#""max_age":50000000"#, 10052, "max age needs to be >= 100ms"),
        (r#""max_age":1000000000,"pedantic":true"#, 10157, "pedantic mode: duplicate window cannot be bigger than max age"),
        (r#""max_age":1000000000,"duplicate_window":2000000000"#, 10052, "duplicates window can not be larger then max age"),
        (r#""duplicate_window":-1"#, 10052, "duplicates window can not be negative"),
        (r#""duplicate_window":50000000"#, 10052, "duplicates window needs to be >= 100ms"),
        (r#""deny_purge":true,"allow_rollup_hdrs":true"#, 10052, "roll-ups require the purge permission"),
        (r#""allow_msg_counter":true,"discard":"new""#, 10052, "counter stream cannot use discard new"),
        (r#""allow_msg_counter":true,"allow_msg_ttl":true"#, 10052, "counter stream cannot use message TTLs"),
        (r#""allow_msg_counter":true,"allow_msg_schedules":true"#, 10052, "counter stream cannot use message schedules"),
        (r#""allow_msg_counter":true,"retention":"interest""#, 10052, "counter stream can only use limits retention"),
        (r#""discard_new_per_subject":true"#, 10052, "discard new per subject requires discard new policy to be set"),
        (r#""discard_new_per_subject":true,"discard":"new""#, 10052, "discard new per subject requires max msgs per subject > 0"),
        (r#""subject_delete_marker_ttl":500000000"#, 10052, "subject delete marker TTL must be at least 1 second"),
        (r#""subject_delete_marker_ttl":-1"#, 10052, "subject delete marker TTL must not be negative"),
        (r#""subject_delete_marker_ttl":1000000000,"pedantic":true"#, 10052, "subject delete marker cannot be set if message TTLs are disabled"),
        (r#""subject_delete_marker_ttl":1000000000,"allow_msg_ttl":true,"pedantic":true"#, 10052, "subject delete marker cannot be set if roll-ups are disabled"),
        (r#""allow_msg_schedules":true,"discard":"new""#, 10052, "message scheduling cannot use discard new"),
        (r#""allow_msg_schedules":true,"pedantic":true"#, 10052, "message scheduling cannot be set if roll-ups are disabled"),
        (r#""persist_mode":"async","storage":"memory""#, 10052, "async persist mode is only supported on file storage"),
        (r#""persist_mode":"async","allow_atomic":true"#, 10052, "async persist mode is not supported with atomic batch publish"),
        (r#""persist_mode":"async","num_replicas":3"#, 10052, "async persist mode is not supported on replicated streams"),
        (r#""subjects":["a..b"]"#, 10052, "invalid subject"),
        (r#""subjects":[""]"#, 10052, "invalid subject"),
        (r#""subjects":["a b"]"#, 10052, "invalid subject"),
        (r#""subjects":["a","a"]"#, 10052, "subject \"a\" overlaps with \"a\""),
        (r#""subjects":["a.>","a.b"]"#, 10052, "subject \"a.>\" overlaps with \"a.b\""),
        (r#""subjects":["a.*.c","a.b.*"]"#, 10052, "subject \"a.*.c\" overlaps with \"a.b.*\""),
        (r#""subjects":[">"]"#, 10052, "capturing all subjects requires no-ack to be true"),
        (r#""subjects":["$JS.API.>"]"#, 10052, "subjects that overlap with jetstream api require no-ack to be true"),
        (r#""subjects":["*.API.x"]"#, 10052, "subjects that overlap with jetstream api require no-ack to be true"),
        (r#""subjects":["$JSC.x"]"#, 10052, "subjects that overlap with jetstream api require no-ack to be true"),
        (r#""subjects":["$NRG.x"]"#, 10052, "subjects that overlap with jetstream api require no-ack to be true"),
        (r#""subjects":["$SYS.x"]"#, 10052, "subjects that overlap with system api require no-ack to be true"),
        (r#""placement":{"preferred":"x"}"#, 10052, "preferred server not permitted in placement"),
        (r#""subject_transform":{"src":"a..b","dest":"x"}"#, 10155, "stream transform source: invalid subject a..b"),
        (r#""subject_transform":{"src":"a.*","dest":"x.{{wildcard(2)}}"}"#, 10156, "stream transform: invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]"),
        (r#""republish":{"dest":"x.>"},"pedantic":true"#, 10157, "pedantic mode: republish source can not be empty"),
        (r#""republish":{"src":">","dest":"B"}"#, 10052, "stream configuration for republish destination forms a cycle"),
        (r#""mirror":{"name":"X"},"subjects":["a"]"#, 10034, "stream mirrors can not contain subjects"),
        (r#""mirror":{"name":"X"},"first_seq":5"#, 10143, "stream mirrors can not have first sequence configured"),
        (r#""sources":[{"name":"X"},{"name":"X"}]"#, 10140, "duplicate source configuration detected"),
        (r#""mirror":{"name":"X"}"#, 10052, MIRROR_NOT_SUPPORTED),
        (r#""sources":[{"name":"X"}]"#, 10052, SOURCES_NOT_SUPPORTED),
    ];
    for (fields, code, text) in cases {
        let body = format!(r#"{{"name":"B",{fields}}}"#);
        assert_eq!(
            create_error("B", &body),
            (*code, text.to_string()),
            "{body}"
        );
    }
}

#[test]
fn normalisation_fills_and_forces() {
    let config = create("B", r#"{"name":"B","max_age":1000000000}"#).unwrap();
    assert_eq!(config.duplicate_window_ns, 1_000_000_000);
    let config = create("B", r#"{"name":"B","max_msgs":-2,"max_consumers":0}"#).unwrap();
    assert_eq!((config.max_msgs, config.max_consumers), (-1, -1));
    // A delete marker TTL forces TTLs and roll-ups on and purge permission back.
    let config = create(
        "B",
        r#"{"name":"B","subject_delete_marker_ttl":1000000000,"deny_purge":true}"#,
    )
    .unwrap();
    assert!(config.allow_msg_ttl && config.allow_rollup_hdrs && !config.deny_purge);
    assert_eq!(config.metadata[REQUIRED_LEVEL_KEY], "1");
    // Schedules force roll-ups.
    let config = create("B", r#"{"name":"B","allow_msg_schedules":true}"#).unwrap();
    assert!(config.allow_rollup_hdrs);
    assert_eq!(config.metadata[REQUIRED_LEVEL_KEY], "2");
    // An empty placement is dropped, empty tags are not "empty".
    assert!(create("B", r#"{"name":"B","placement":{}}"#)
        .unwrap()
        .placement
        .is_none());
    let config = create("B", r#"{"name":"B","placement":{"tags":[]}}"#).unwrap();
    assert!(config_json(&config, false).contains(r#""placement":{}"#));
    // Republish with no source republishes everything.
    let config = create("B", r#"{"name":"B","republish":{"dest":"x.>"}}"#).unwrap();
    assert_eq!(config.republish.unwrap().src, ">");
    // Client-sent server metadata is replaced.
    let config = create(
        "B",
        r#"{"name":"B","metadata":{"_nats.ver":"x","_nats.level":"7","_nats.req.level":"9","a":"b"}}"#,
    )
    .unwrap();
    assert_eq!(
        config_json(&config, true)
            .rsplit_once("\"metadata\":")
            .unwrap()
            .1,
        r#"{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1","a":"b"}}"#
    );
}

#[test]
fn update_parses_config_before_the_name() {
    // nats-server 2.15.1: UPDATE.NOPE with an empty body or {}.
    for body in ["", "{}"] {
        let error = update("NOPE", body).unwrap_err();
        assert_eq!(
            (error.code, error.description.as_str()),
            (
                10052,
                "stream name is required and can not contain '.', '*', '>', '\\', '/'"
            )
        );
    }
    // UPDATE.NOPE {"name":"NOPE","max_age":-1}: config error, not 10059.
    assert_eq!(
        update("NOPE", r#"{"name":"NOPE","max_age":-1}"#)
            .unwrap_err()
            .description,
        "max age can not be negative"
    );
    // UPDATE.NOPE {"name":"NOPE2"}
    assert_eq!(
        update("NOPE", r#"{"name":"NOPE2"}"#).unwrap_err().code,
        10056
    );
    // Update does not refuse sealed or replicas at parse time.
    assert!(update("U", r#"{"name":"U","sealed":true}"#).unwrap().sealed);
    assert_eq!(
        update("U", r#"{"name":"U","num_replicas":3}"#)
            .unwrap()
            .num_replicas,
        3
    );
    let config = update("U", r#"{"name":"U","allow_msg_ttl":true}"#).unwrap();
    assert_eq!(config.metadata[REQUIRED_LEVEL_KEY], "1");
}

#[test]
fn update_rules_and_texts() {
    // Stream created with this body, then updated (nats-server 2.15.1).
    let base = r#""name":"U","subjects":["u.>"],"deny_delete":true,"deny_purge":true,"allow_msg_ttl":true"#;
    let current = create("U", &format!("{{{base}}}")).unwrap();
    let check = |extra: &str| {
        let proposed = update("U", &format!("{{{base},{extra}}}")).unwrap();
        check_update(&current, &proposed, false).map_err(|error| (error.code, error.description))
    };
    let invalid = |text: &str| Err((10052, text.to_string()));
    assert_eq!(
        check(r#""storage":"memory""#),
        invalid("stream configuration update can not change storage type")
    );
    assert_eq!(
        check(r#""retention":"workqueue""#),
        invalid("stream configuration update can not change retention policy to/from workqueue")
    );
    assert_eq!(check(r#""retention":"interest""#), Ok(()));
    assert_eq!(
        check(r#""deny_delete":false"#),
        invalid("stream configuration update can not cancel deny message deletes")
    );
    assert_eq!(
        check(r#""deny_purge":false"#),
        invalid("stream configuration update can not cancel deny purge")
    );
    assert_eq!(
        check(r#""allow_msg_ttl":false"#),
        invalid("message TTL status can not be disabled")
    );
    assert_eq!(
        check(r#""persist_mode":"async""#),
        invalid("stream configuration update can not change persist mode")
    );
    assert_eq!(
        check(r#""num_replicas":3,"storage":"memory""#),
        Err((
            10074,
            "replicas > 1 not supported in non-clustered mode".into()
        ))
    );
    // The config check runs first: counters with TTLs.
    assert_eq!(
        update("U", &format!("{{{base},\"allow_msg_counter\":true}}"))
            .unwrap_err()
            .description,
        "counter stream cannot use message TTLs"
    );
    let counter = create("C", r#"{"name":"C","allow_msg_counter":true}"#).unwrap();
    let plain = update("C", r#"{"name":"C"}"#).unwrap();
    assert_eq!(
        check_update(&counter, &plain, false)
            .unwrap_err()
            .description,
        "stream configuration update can not change message counter setting"
    );
    let scheduled = create("W", r#"{"name":"W","allow_msg_schedules":true}"#).unwrap();
    let unscheduled = update("W", r#"{"name":"W"}"#).unwrap();
    assert_eq!(
        check_update(&scheduled, &unscheduled, false)
            .unwrap_err()
            .description,
        "message schedules can not be disabled"
    );
    // Metadata that fits only without the stored `_nats.req.level`.
    let value = "v".repeat(METADATA_BYTES_MAX - 1);
    let bulky = update(
        "U",
        &format!("{{{base},\"metadata\":{{\"k\":\"{value}\"}}}}"),
    )
    .unwrap();
    assert_eq!(
        check_update(&current, &bulky, false)
            .unwrap_err()
            .description,
        "stream metadata exceeds maximum size of 131072 bytes"
    );
    let other = update("V", r#"{"name":"V"}"#).unwrap();
    assert_eq!(
        check_update(&current, &other, false)
            .unwrap_err()
            .description,
        "stream configuration name must match original"
    );
}

#[test]
fn update_of_mirrors_and_sealing() {
    let mut mirrored = create("W", r#"{"name":"W"}"#).unwrap();
    mirrored.mirror = Some(StreamSource {
        name: "V".into(),
        ..StreamSource::default()
    });
    let mut changed = mirrored.clone();
    changed.mirror.as_mut().unwrap().filter_subject = "v".into();
    let error = check_update(&mirrored, &changed, false).unwrap_err();
    assert_eq!(
        (error.code, error.description.as_str()),
        (10055, "stream mirror configuration can not be updated")
    );
    // Promoting a mirror (removing it) is allowed.
    let promoted = update("W", r#"{"name":"W"}"#).unwrap();
    assert_eq!(check_update(&mirrored, &promoted, false), Ok(()));

    // nats-server 2.15.1: sealing forces max_age 0, discard new, deny both.
    let base = r#""name":"U","subjects":["u.>"],"deny_delete":true,"deny_purge":true,"allow_msg_ttl":true"#;
    let current = create("U", &format!("{{{base}}}")).unwrap();
    let sealing = update(
        "U",
        &format!("{{{base},\"sealed\":true,\"max_age\":5000000000,\"discard\":\"old\"}}"),
    )
    .unwrap();
    let sealed = apply_update(&current, &sealing, false).unwrap();
    assert_eq!(
        config_json(&sealed, true),
        r#"{"name":"U","subjects":["u.\u003e"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"new","storage":"file","num_replicas":1,"duplicate_window":5000000000,"compression":"none","allow_direct":false,"mirror_direct":false,"sealed":true,"deny_delete":true,"deny_purge":true,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":true,"metadata":{"_nats.level":"5","_nats.req.level":"1","_nats.ver":"2.15.1"}}"#
    );
    let unsealing = update("U", &format!("{{{base}}}")).unwrap();
    assert_eq!(
        apply_update(&sealed, &unsealing, false)
            .unwrap_err()
            .description,
        "stream configuration update can not unseal a sealed stream"
    );
}

#[test]
fn create_idempotency_ignores_server_metadata() {
    let existing = create("P", r#"{"name":"P","subjects":["p.>"]}"#).unwrap();
    let again = create("P", r#"{"name":"P","subjects":["p.>"]}"#).unwrap();
    assert!(existing.same_as(&again));
    // nats-server 2.15.1 accepts a create carrying another `_nats.req.level`.
    let with_level = create(
        "P",
        r#"{"name":"P","subjects":["p.>"],"metadata":{"_nats.req.level":"3"}}"#,
    )
    .unwrap();
    assert!(existing.same_as(&with_level));
    let mut leveled = existing.clone();
    leveled
        .metadata
        .insert(REQUIRED_LEVEL_KEY.into(), "1".into());
    assert!(existing.same_as(&leveled));
    // ... but not another limit, or user metadata.
    let different = create("P", r#"{"name":"P","subjects":["p.>"],"max_msgs":5}"#).unwrap();
    assert!(!existing.same_as(&different));
    let tagged = create(
        "P",
        r#"{"name":"P","subjects":["p.>"],"metadata":{"a":"b"}}"#,
    )
    .unwrap();
    assert!(!existing.same_as(&tagged));
}

#[test]
fn subject_overlap_as_sublist() {
    let cases = [
        ("a", "a", true),
        ("a", "b", false),
        ("a.*", "a.b", true),
        ("a.*", "a.b.c", false),
        ("a.>", "a.b.c", true),
        ("a.>", "a", false),
        (">", "a.b", true),
        ("a.*.c", "a.b.*", true),
        ("a.*", "*.b", true),
        ("a.*", "b.*", false),
        ("a.*.*", "a.>", true),
        ("*.*", "a.b.c", false),
        ("*.>", "a", false),
        ("a.>", "b.>", false),
        ("$JS.API.x", "$JS.>", true),
        ("*.API.x", "$JS.>", true),
        // nats-server compares first bytes only for wildcard tokens.
        ("a.*x", "a.b.*", false),
        ("*a.*", "x.*", true),
        ("*a.b", "x.*", false),
    ];
    for (a, b, expected) in cases {
        assert_eq!(subjects_overlap(a, b), expected, "{a} vs {b}");
        assert_eq!(subjects_overlap(b, a), expected, "{b} vs {a}");
    }
    let left = vec!["x".to_string(), "a.*".to_string()];
    assert!(any_subjects_overlap(&left, &["a.b".to_string()]));
    assert!(!any_subjects_overlap(&left, &["b".to_string()]));
    assert!(!any_subjects_overlap(&left, &[]));
}

#[test]
fn subject_matching_and_subsets() {
    assert!(subject_matches("a.*", "a.b"));
    assert!(subject_matches("a.>", "a.b.c"));
    assert!(subject_matches(">", "a"));
    assert!(!subject_matches("a.*", "a.b.c"));
    assert!(!subject_matches("a.b", "a.c"));
    assert!(subject_matches("a.b", "a.b"));
    assert!(subject_is_subset("$JS.EVENT.x", "$JS.EVENT.>"));
    assert!(subject_is_subset("$JS.EVENT.>", "$JS.EVENT.>"));
    assert!(!subject_is_subset("$JS.>", "$JS.EVENT.>"));
    assert!(!subject_is_subset("$JS.EVENT", "$JS.EVENT.>"));
    assert!(is_valid_subject("a.*.>"));
    assert!(!is_valid_subject("a.>.b"));
}

#[test]
fn enum_names() {
    assert_eq!(Retention::WorkQueue.as_str(), "workqueue");
    assert_eq!(Discard::New.as_str(), "new");
    assert_eq!(StorageType::Memory.as_str(), "memory");
    assert_eq!(Compression::S2.as_str(), "s2");
    assert_eq!(PersistMode::Async.as_str(), "async");
}
