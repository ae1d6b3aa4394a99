//! Tests of `responses`: every body compared with the bytes nats-server
//! 2.15.1 sent for the same situation (raw `PUB $JS.API.… <inbox> <n>`
//! requests and core publishes with a reply subject; timestamps converted
//! to Unix nanoseconds).

use super::*;
use crate::jetstream::stream::config as stream_config;

const ORDERS_CREATE: &str = r#"{"type":"io.nats.jetstream.api.v1.stream_create_response","config":{"name":"ORDERS","subjects":["orders.\u003e"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","storage":"file","num_replicas":1,"duplicate_window":120000000000,"compression":"none","allow_direct":false,"mirror_direct":false,"sealed":false,"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}},"created":"2026-11-30T14:17:50.448822659Z","state":{"messages":0,"bytes":0,"first_seq":0,"first_ts":"0001-01-01T00:00:00Z","last_seq":0,"last_ts":"0001-01-01T00:00:00Z","consumer_count":0},"ts":"2026-11-30T14:17:50.44951364Z","did_create":true}"#;

const P_CONFIG: &str = r#"{"name":"P","subjects":["p.\u003e"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","storage":"file","num_replicas":1,"duplicate_window":120000000000,"compression":"none","allow_direct":false,"mirror_direct":false,"sealed":false,"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}}"#;

const LEADER: &str = "NCRP2BV75Q6TAO63OUZMFAFODJW2Y52G2LJRPY2EDYX7DXVLDSKZLMOL";
const P_CREATED_NS: u64 = 1_796_048_532_144_506_144;

fn config(name: &str, body: &str) -> StreamConfig {
    stream_config::parse(name, body.as_bytes(), true).unwrap()
}

/// Stream P after 7 publishes on p.0/p.1/p.2 and deleting sequences 2 and 3.
fn p_state() -> StreamState {
    StreamState {
        messages: 5,
        bytes: 209,
        first_sequence: 1,
        first_unix_ns: 1_796_048_532_364_333_004,
        last_sequence: 7,
        last_unix_ns: 1_796_048_532_636_334_452,
        num_subjects: 3,
        subjects: None,
        num_deleted: 2,
        deleted: None,
        consumer_count: 0,
    }
}

#[test]
fn create_response() {
    let config = config("ORDERS", r#"{"name":"ORDERS","subjects":["orders.>"]}"#);
    let body = stream_info(
        "stream_create_response",
        &config,
        1_796_048_270_448_822_659,
        &StreamState::default(),
        1_796_048_270_449_513_640,
        InfoExtras {
            did_create: true,
            cluster: None,
            paging: None,
            dynamic_metadata: true,
        },
    );
    assert_eq!(body, ORDERS_CREATE);
}

#[test]
fn info_responses() {
    let config = config("P", r#"{"name":"P","subjects":["p.>"]}"#);
    let extras = |paging| InfoExtras {
        did_create: false,
        cluster: Some(ClusterBlock {
            leader: Some(LEADER.into()),
            ..ClusterBlock::default()
        }),
        paging: Some(paging),
        dynamic_metadata: true,
    };
    // STREAM.INFO.P {"deleted_details":true}
    let mut state = p_state();
    state.deleted = Some(vec![2, 3]);
    let body = stream_info(
        "stream_info_response",
        &config,
        P_CREATED_NS,
        &state,
        1_796_048_533_404_460_840,
        extras((0, 0, 0)),
    );
    let expected = format!(
        r#"{{"type":"io.nats.jetstream.api.v1.stream_info_response","total":0,"offset":0,"limit":0,"config":{P_CONFIG},"created":"2026-11-30T14:22:12.144506144Z","state":{{"messages":5,"bytes":209,"first_seq":1,"first_ts":"2026-11-30T14:22:12.364333004Z","last_seq":7,"last_ts":"2026-11-30T14:22:12.636334452Z","num_subjects":3,"num_deleted":2,"deleted":[2,3],"consumer_count":0}},"cluster":{{"leader":"{LEADER}"}},"ts":"2026-11-30T14:22:13.40446084Z"}}"#
    );
    assert_eq!(body, expected);
    // STREAM.INFO.P {"subjects_filter":">"}: sorted subject counts, paging.
    let mut state = p_state();
    state.subjects = Some(vec![
        ("p.2".into(), 1),
        ("p.0".into(), 2),
        ("p.1".into(), 2),
    ]);
    let body = stream_info(
        "stream_info_response",
        &config,
        P_CREATED_NS,
        &state,
        1_796_048_533_448_477_520,
        extras((3, 0, SUBJECT_DETAILS_LIMIT)),
    );
    let expected = format!(
        r#"{{"type":"io.nats.jetstream.api.v1.stream_info_response","total":3,"offset":0,"limit":100000,"config":{P_CONFIG},"created":"2026-11-30T14:22:12.144506144Z","state":{{"messages":5,"bytes":209,"first_seq":1,"first_ts":"2026-11-30T14:22:12.364333004Z","last_seq":7,"last_ts":"2026-11-30T14:22:12.636334452Z","num_subjects":3,"subjects":{{"p.0":2,"p.1":2,"p.2":1}},"num_deleted":2,"consumer_count":0}},"cluster":{{"leader":"{LEADER}"}},"ts":"2026-11-30T14:22:13.44847752Z"}}"#
    );
    assert_eq!(body, expected);
    // {"subjects_filter":"x"} matching nothing: zero paging, no subjects.
    let mut state = p_state();
    state.subjects = Some(Vec::new());
    let body = stream_info(
        "stream_info_response",
        &config,
        P_CREATED_NS,
        &state,
        1_796_048_533_448_477_520,
        extras((0, 0, SUBJECT_DETAILS_LIMIT)),
    );
    assert!(body.contains(r#""total":0,"offset":0,"limit":0,"config""#));
    assert!(!body.contains("\"subjects\":{"));
    // After purging everything: first_seq = last_seq + 1, zero first_ts.
    let state = StreamState {
        first_sequence: 8,
        last_sequence: 7,
        last_unix_ns: 1_796_048_532_636_334_452,
        ..StreamState::default()
    };
    let mut out = String::new();
    write_state(&mut out, &state);
    assert_eq!(
        out,
        r#"{"messages":0,"bytes":0,"first_seq":8,"first_ts":"0001-01-01T00:00:00Z","last_seq":7,"last_ts":"2026-11-30T14:22:12.636334452Z","consumer_count":0}"#
    );
}

#[test]
fn list_and_names_responses() {
    let g = config(
        "G",
        r#"{"name":"G","subjects":["g.>"],"allow_direct":true}"#,
    );
    let p = config("P", r#"{"name":"P","subjects":["p.>"]}"#);
    let g_state = StreamState {
        messages: 3,
        bytes: 141,
        first_sequence: 1,
        first_unix_ns: 1_796_048_479_808_375_341,
        last_sequence: 3,
        last_unix_ns: 1_796_048_479_896_355_557,
        num_subjects: 2,
        ..StreamState::default()
    };
    let infos = vec![
        stream_info_object(
            &g,
            1_796_048_479_764_507_645,
            &g_state,
            1_796_048_533_624_482_462,
            false,
        ),
        stream_info_object(
            &p,
            P_CREATED_NS,
            &p_state(),
            1_796_048_533_624_485_628,
            false,
        ),
    ];
    // nats-server 2.15.1 STREAM.LIST {}
    let expected = r#"{"type":"io.nats.jetstream.api.v1.stream_list_response","total":2,"offset":0,"limit":256,"streams":[{"config":{"name":"G","subjects":["g.\u003e"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","storage":"file","num_replicas":1,"duplicate_window":120000000000,"compression":"none","allow_direct":true,"mirror_direct":false,"sealed":false,"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,"metadata":{"_nats.req.level":"0"}},"created":"2026-11-30T14:21:19.764507645Z","state":{"messages":3,"bytes":141,"first_seq":1,"first_ts":"2026-11-30T14:21:19.808375341Z","last_seq":3,"last_ts":"2026-11-30T14:21:19.896355557Z","num_subjects":2,"consumer_count":0},"ts":"2026-11-30T14:22:13.624482462Z"},{"config":{"name":"P","subjects":["p.\u003e"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","storage":"file","num_replicas":1,"duplicate_window":120000000000,"compression":"none","allow_direct":false,"mirror_direct":false,"sealed":false,"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,"metadata":{"_nats.req.level":"0"}},"created":"2026-11-30T14:22:12.144506144Z","state":{"messages":5,"bytes":209,"first_seq":1,"first_ts":"2026-11-30T14:22:12.364333004Z","last_seq":7,"last_ts":"2026-11-30T14:22:12.636334452Z","num_subjects":3,"num_deleted":2,"consumer_count":0},"ts":"2026-11-30T14:22:13.624485628Z"}]}"#;
    assert_eq!(list_response(2, 0, 256, &infos, &[]), expected);
    let mut element = String::new();
    write_stream_info_object(
        &mut element,
        &p,
        P_CREATED_NS,
        &p_state(),
        1_796_048_533_624_485_628,
        false,
    );
    assert_eq!(element, infos[1]);
    assert_eq!(
        list_response(0, 0, 256, &[], &[]),
        r#"{"type":"io.nats.jetstream.api.v1.stream_list_response","total":0,"offset":0,"limit":256,"streams":[]}"#
    );
    assert_eq!(
        names_response(1, 0, 1024, &["T".into()]),
        r#"{"type":"io.nats.jetstream.api.v1.stream_names_response","total":1,"offset":0,"limit":1024,"streams":["T"]}"#
    );
    assert_eq!(
        names_response(0, 0, 1024, &[]),
        r#"{"type":"io.nats.jetstream.api.v1.stream_names_response","total":0,"offset":0,"limit":1024,"streams":null}"#
    );
    // STREAM.NAMES {"offset":5} with one stream: the offset is clamped.
    assert_eq!(
        names_response(1, 5, 1024, &[]),
        r#"{"type":"io.nats.jetstream.api.v1.stream_names_response","total":1,"offset":1,"limit":1024,"streams":null}"#
    );
}

#[test]
fn error_responses() {
    let unknown = ApiError::invalid_json("json: unknown field \"x\"");
    let cases = [
        (
            "stream_names_response",
            &unknown,
            r#"{"type":"io.nats.jetstream.api.v1.stream_names_response","error":{"code":400,"err_code":10025,"description":"invalid JSON: json: unknown field \"x\""},"total":0,"offset":0,"limit":0,"streams":null}"#,
        ),
        (
            "stream_list_response",
            &unknown,
            r#"{"type":"io.nats.jetstream.api.v1.stream_list_response","error":{"code":400,"err_code":10025,"description":"invalid JSON: json: unknown field \"x\""},"total":0,"offset":0,"limit":0,"streams":[]}"#,
        ),
    ];
    for (kind, error, expected) in cases {
        assert_eq!(error_response(kind, error), expected);
    }
    let not_found = ApiError::stream_not_found();
    let cases = [
        (
            "stream_info_response",
            r#"{"type":"io.nats.jetstream.api.v1.stream_info_response","error":{"code":404,"err_code":10059,"description":"stream not found"},"total":0,"offset":0,"limit":0}"#,
        ),
        (
            "stream_purge_response",
            r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","error":{"code":404,"err_code":10059,"description":"stream not found"},"purged":0}"#,
        ),
        (
            "stream_delete_response",
            r#"{"type":"io.nats.jetstream.api.v1.stream_delete_response","error":{"code":404,"err_code":10059,"description":"stream not found"}}"#,
        ),
        (
            "stream_update_response",
            r#"{"type":"io.nats.jetstream.api.v1.stream_update_response","error":{"code":404,"err_code":10059,"description":"stream not found"}}"#,
        ),
        (
            "stream_msg_get_response",
            r#"{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","error":{"code":404,"err_code":10059,"description":"stream not found"}}"#,
        ),
        (
            "stream_msg_delete_response",
            r#"{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","error":{"code":404,"err_code":10059,"description":"stream not found"}}"#,
        ),
        (
            "consumer_names_response",
            r#"{"type":"io.nats.jetstream.api.v1.consumer_names_response","error":{"code":404,"err_code":10059,"description":"stream not found"},"total":0,"offset":0,"limit":0,"consumers":[]}"#,
        ),
        (
            "consumer_list_response",
            r#"{"type":"io.nats.jetstream.api.v1.consumer_list_response","error":{"code":404,"err_code":10059,"description":"stream not found"},"total":0,"offset":0,"limit":0,"consumers":[]}"#,
        ),
    ];
    for (kind, expected) in cases {
        assert_eq!(error_response(kind, &not_found), expected);
    }
    assert_eq!(
        error_response(
            "stream_create_response",
            &ApiError::replicas_not_supported()
        ),
        r#"{"type":"io.nats.jetstream.api.v1.stream_create_response","error":{"code":500,"err_code":10074,"description":"replicas \u003e 1 not supported in non-clustered mode"}}"#
    );
    assert_eq!(
        error_response("stream_purge_response", &ApiError::bad_request()),
        r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","error":{"code":400,"err_code":10003,"description":"bad request"},"purged":0}"#
    );
}

#[test]
fn success_responses() {
    assert_eq!(
        delete_response(),
        r#"{"type":"io.nats.jetstream.api.v1.stream_delete_response","success":true}"#
    );
    assert_eq!(
        message_delete_response(),
        r#"{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","success":true}"#
    );
    assert_eq!(
        purge_response(2),
        r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,"purged":2}"#
    );
    assert_eq!(
        purge_response(0),
        r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,"purged":0}"#
    );
}

#[test]
fn message_get_responses() {
    // STREAM.MSG.GET.G {"seq":1}, {"seq":2}, {"seq":2,"no_hdr":true}
    assert_eq!(
        message_get_response("g.1", 1, b"", b"one", 1_796_048_479_808_375_341),
        r#"{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"g.1","seq":1,"data":"b25l","time":"2026-11-30T14:21:19.808375341Z"}}"#
    );
    assert_eq!(
        message_get_response(
            "g.2",
            2,
            b"NATS/1.0\r\nNats-Msg-Id: abc\r\n\r\n",
            b"",
            1_796_048_479_852_380_670
        ),
        r#"{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"g.2","seq":2,"hdrs":"TkFUUy8xLjANCk5hdHMtTXNnLUlkOiBhYmMNCg0K","time":"2026-11-30T14:21:19.85238067Z"}}"#
    );
    assert_eq!(
        message_get_response("g.2", 2, b"", b"", 1_796_048_479_852_380_670),
        r#"{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"g.2","seq":2,"time":"2026-11-30T14:21:19.85238067Z"}}"#
    );
}

#[test]
fn account_info() {
    // $JS.API.INFO after two streams and 629 API calls (456 errors).
    let info = AccountInfo {
        storage: 141,
        streams: 2,
        api_total: 629,
        api_errors: 456,
        ..AccountInfo::default()
    };
    assert_eq!(
        account_info_response(&info),
        r#"{"type":"io.nats.jetstream.api.v1.account_info_response","memory":0,"storage":141,"reserved_memory":0,"reserved_storage":0,"streams":2,"consumers":0,"limits":{"max_memory":-1,"max_storage":-1,"max_streams":-1,"max_consumers":-1,"max_ack_pending":-1,"memory_max_stream_bytes":-1,"storage_max_stream_bytes":-1,"max_bytes_required":false},"api":{"level":5,"total":629,"errors":456}}"#
    );
    let info = AccountInfo {
        domain: Some("hub".into()),
        ..AccountInfo::default()
    };
    assert!(account_info_response(&info)
        .contains(r#""max_bytes_required":false},"domain":"hub","api":{"#));
}

#[test]
fn pub_acks() {
    // Core publishes to p.* with a reply, nats-server 2.15.1.
    assert_eq!(pub_ack("P", 1, false, None), r#"{"stream":"P","seq":1}"#);
    assert_eq!(
        pub_ack("P", 7, true, None),
        r#"{"stream":"P","seq":7,"duplicate": true}"#
    );
    assert_eq!(
        pub_ack("ORDERS", 1, false, Some("hub")),
        r#"{"stream":"ORDERS","domain":"hub","seq":1}"#
    );
    assert_eq!(
        pub_ack("P", 1, false, Some("")),
        r#"{"stream":"P","seq":1}"#
    );
    // Go's %q, not JSON escaping, for the name.
    assert_eq!(
        pub_ack("a<b", 1, false, None),
        r#"{"stream":"a<b","seq":1}"#
    );
    let cases = [
        (
            ApiError::wrong_last_sequence(7),
            r#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 7"},"stream":"P","seq":0}"#,
        ),
        (
            ApiError::expected_stream_mismatch(),
            r#"{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},"stream":"P","seq":0}"#,
        ),
        (
            ApiError::ttl_disabled(),
            r#"{"error":{"code":400,"err_code":10166,"description":"per-message TTL is disabled"},"stream":"P","seq":0}"#,
        ),
        (
            ApiError::wrong_last_msg_id("m1"),
            r#"{"error":{"code":400,"err_code":10070,"description":"wrong last msg ID: m1"},"stream":"P","seq":0}"#,
        ),
        (
            ApiError::rollup_failed("rollup not permitted"),
            r#"{"error":{"code":500,"err_code":10111,"description":"rollup not permitted"},"stream":"P","seq":0}"#,
        ),
    ];
    for (error, expected) in cases {
        assert_eq!(pub_ack_error("P", &error), expected);
    }
}

#[test]
fn cluster_list_elements() {
    // The meta leader lists what each stream's leader answered to
    // STREAM.INFO: the info without its type and paging.
    let config = config("P", r#"{"name":"P","subjects":["p.>"]}"#);
    let cluster = ClusterBlock {
        name: Some("c".into()),
        leader: Some("n1".into()),
        replicas: Vec::new(),
    };
    let info = stream_info(
        "stream_info_response",
        &config,
        P_CREATED_NS,
        &p_state(),
        1_796_048_533_404_460_840,
        InfoExtras {
            did_create: false,
            cluster: Some(cluster),
            paging: Some((0, 0, 0)),
            dynamic_metadata: true,
        },
    );
    let element = list_element_of_info(&info).expect("an info response");
    assert!(
        element.starts_with(r#"{"config":{"name":"P","#),
        "{element}"
    );
    let mut expected: serde_json::Value = serde_json::from_str(&info).unwrap();
    for field in ["type", "total", "offset", "limit"] {
        expected.as_object_mut().unwrap().remove(field);
    }
    let element: serde_json::Value = serde_json::from_str(&element).unwrap();
    assert_eq!(element, expected);
    let error = error_response("stream_info_response", &ApiError::stream_not_found());
    assert_eq!(list_element_of_info(&error), None);
    assert_eq!(list_element_of_info(&delete_response()), None);

    // A stream none of whose nodes is reachable, as nats-server 2.15.1
    // lists it (its raft_group aside): empty state, no leader.
    let cluster = ClusterBlock {
        name: Some("lc".into()),
        leader: None,
        replicas: vec![ReplicaBlock {
            name: "n1".into(),
            current: false,
            active_ns: 0,
            lag: 0,
            offline: true,
            peer: "fjFyEjc1".into(),
        }],
    };
    let element = offline_stream_info_object(&config, P_CREATED_NS, &cluster, 0);
    assert!(
        element.starts_with(r#"{"config":{"name":"P","#),
        "{element}"
    );
    assert!(
        element.contains(r#""metadata":{"_nats.req.level":"0"}"#),
        "{element}"
    );
    assert!(element.ends_with(r#","created":"2026-11-30T14:22:12.144506144Z","state":{"messages":0,"bytes":0,"first_seq":0,"first_ts":"0001-01-01T00:00:00Z","last_seq":0,"last_ts":"0001-01-01T00:00:00Z","consumer_count":0},"cluster":{"name":"lc","replicas":[{"name":"n1","current":false,"active":0,"offline":true,"peer":"fjFyEjc1"}]},"ts":"0001-01-01T00:00:00Z"}"#), "{element}");

    assert_eq!(
        list_response_with_missing(
            3,
            0,
            256,
            &[],
            &["A".into(), "B".into()],
            &[("B".into(), "why".into())]
        ),
        r#"{"type":"io.nats.jetstream.api.v1.stream_list_response","total":3,"offset":0,"limit":256,"streams":[],"missing":["A","B"],"offline":{"B":"why"}}"#
    );
}

#[test]
fn an_answer_is_an_error_only_when_built_from_one() {
    let not_found = ApiError::stream_not_found();
    let error = ApiReply::error("stream_info_response", &not_found);
    assert_eq!(error.outcome(), Outcome::Error);
    assert_eq!(
        error.body(),
        error_response("stream_info_response", &not_found)
    );
    assert_eq!(ApiReply::of("stream_info_response", Err(not_found)), error);
    // A success whose text holds an error's marker (a description, say)
    // is still a success: the outcome is typed, not searched for.
    let body = r#"{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"description":"\"error\":{"}}"#;
    assert_eq!(ApiReply::from(body.to_string()).outcome(), Outcome::Success);
    let deleted = delete_result(Ok(()));
    assert_eq!(deleted.outcome(), Outcome::Success);
    assert_eq!(deleted.into_body(), delete_response());
}
