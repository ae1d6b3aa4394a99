//! Tests of `requests`. Expected errors are nats-server 2.15.1's answers to
//! raw `PUB $JS.API.STREAM.<INFO|PURGE|MSG.GET|MSG.DELETE|NAMES|LIST>…`
//! requests, and its status lines for `$JS.API.DIRECT.GET.G[.<subject>]`
//! on a stream with `allow_direct`.

use super::*;

fn description(error: ApiError) -> (u32, String) {
    (error.code, error.description)
}

fn invalid_json(text: &str) -> (u32, String) {
    (10025, format!("invalid JSON: {text}"))
}

#[test]
fn stream_info_requests() {
    // Bodies that are not an object or array are ignored (`garbage` works).
    for body in [&b""[..], b"garbage", b"  ", b"5"] {
        assert_eq!(
            StreamInfoRequest::parse(body),
            Ok(StreamInfoRequest::default())
        );
    }
    let request =
        StreamInfoRequest::parse(br#"{"subjects_filter":"p.*","offset":1,"deleted_details":true}"#)
            .unwrap();
    assert_eq!(
        request,
        StreamInfoRequest {
            deleted_details: true,
            subjects_filter: Some("p.*".into()),
            offset: 1,
        }
    );
    assert_eq!(
        StreamInfoRequest::parse(br#"{"offset":-3}"#)
            .unwrap()
            .offset,
        0
    );
    assert_eq!(
        StreamInfoRequest::parse(br#"{"subjects_filter":""}"#)
            .unwrap()
            .subjects_filter,
        None
    );
    let cases: &[(&[u8], &str)] = &[
        (b"[]", "json: cannot unmarshal array into Go value of type server.JSApiStreamInfoRequest"),
        (br#"{"x":1}"#, "json: unknown field \"x\""),
        (br#"{"offset":"x"}"#, "json: cannot unmarshal string into Go struct field JSApiStreamInfoRequest.offset of type int"),
        (br#"{"subjects_filter":5}"#, "json: cannot unmarshal number into Go struct field JSApiStreamInfoRequest.subjects_filter of type string"),
        (br#"{"deleted_details":1}"#, "json: cannot unmarshal number into Go struct field JSApiStreamInfoRequest.deleted_details of type bool"),
    ];
    for (body, text) in cases {
        assert_eq!(
            description(StreamInfoRequest::parse(body).unwrap_err()),
            invalid_json(text)
        );
    }
}

#[test]
fn purge_requests() {
    for body in [&b""[..], b"garbage", b"{}"] {
        assert_eq!(PurgeRequest::parse(body), Ok(PurgeRequest::default()));
    }
    assert_eq!(
        PurgeRequest::parse(br#"{"filter":"p.1","seq":5}"#),
        Ok(PurgeRequest {
            filter: Some("p.1".into()),
            sequence: Some(5),
            keep: None,
        })
    );
    // Zeros mean "not set" (nats-server's omitempty fields).
    assert_eq!(
        PurgeRequest::parse(br#"{"filter":"t.>","keep":0,"seq":0}"#),
        Ok(PurgeRequest {
            filter: Some("t.>".into()),
            sequence: None,
            keep: None,
        })
    );
    // An invalid filter is accepted (it matches nothing).
    assert_eq!(
        PurgeRequest::parse(br#"{"filter":"a..b"}"#)
            .unwrap()
            .filter
            .as_deref(),
        Some("a..b")
    );
    // {"seq":1,"keep":1}: bad request.
    assert_eq!(
        description(PurgeRequest::parse(br#"{"seq":1,"keep":1}"#).unwrap_err()),
        (10003, "bad request".into())
    );
    let cases: &[(&[u8], &str)] = &[
        (br#"{"x":1}"#, "json: unknown field \"x\""),
        (br#"{"seq":"x"}"#, "json: cannot unmarshal string into Go struct field JSApiStreamPurgeRequest.seq of type uint64"),
        (br#"{"filter":5}"#, "json: cannot unmarshal number into Go struct field JSApiStreamPurgeRequest.filter of type string"),
        (br#"{"keep":-1}"#, "json: cannot unmarshal number -1 into Go struct field JSApiStreamPurgeRequest.keep of type uint64"),
        (b"[1]", "json: cannot unmarshal array into Go value of type server.JSApiStreamPurgeRequest"),
    ];
    for (body, text) in cases {
        assert_eq!(
            description(PurgeRequest::parse(body).unwrap_err()),
            invalid_json(text)
        );
    }
}

#[test]
fn message_delete_requests() {
    assert_eq!(
        MessageDeleteRequest::parse(br#"{"seq":3,"no_erase":true}"#),
        Ok(MessageDeleteRequest {
            sequence: 3,
            no_erase: true,
        })
    );
    assert_eq!(
        MessageDeleteRequest::parse(br#"{"no_erase":true}"#)
            .unwrap()
            .sequence,
        0
    );
    for body in [&b""[..], b"{}", b"{ }"] {
        assert_eq!(
            description(MessageDeleteRequest::parse(body).unwrap_err()),
            (10003, "bad request".into())
        );
    }
    let cases: &[(&[u8], &str)] = &[
        (b"garbage", "invalid character 'g' looking for beginning of value at offset 1"),
        (br#"{"seq":-1}"#, "json: cannot unmarshal number -1 into Go struct field JSApiMsgDeleteRequest.seq of type uint64"),
        (br#"{"seq":4,"x":1}"#, "json: unknown field \"x\""),
        (br#"{"seq":"x"}"#, "json: cannot unmarshal string into Go struct field JSApiMsgDeleteRequest.seq of type uint64"),
        (br#"{"no_erase":1}"#, "json: cannot unmarshal number into Go struct field JSApiMsgDeleteRequest.no_erase of type bool"),
    ];
    for (body, text) in cases {
        assert_eq!(
            description(MessageDeleteRequest::parse(body).unwrap_err()),
            invalid_json(text)
        );
    }
}

#[test]
fn message_get_requests() {
    let get = |body: &[u8]| parse_message_get(body);
    assert_eq!(get(br#"{"seq":1}"#), Ok((MessageGet::Sequence(1), false)));
    assert_eq!(
        get(br#"{"seq":2,"no_hdr":true}"#),
        Ok((MessageGet::Sequence(2), true))
    );
    assert_eq!(
        get(br#"{"last_by_subj":"g.*"}"#),
        Ok((MessageGet::LastBySubject("g.*".into()), false))
    );
    assert_eq!(
        get(br#"{"next_by_subj":"g.1","seq":2}"#),
        Ok((
            MessageGet::NextBySubject {
                subject: "g.1".into(),
                from_sequence: 2
            },
            false
        ))
    );
    assert_eq!(
        get(br#"{"next_by_subj":"g.1"}"#),
        Ok((
            MessageGet::NextBySubject {
                subject: "g.1".into(),
                from_sequence: 0
            },
            false
        ))
    );
    assert_eq!(
        get(br#"{"start_time":"2000-01-01T00:00:00Z","next_by_subj":"g.2"}"#),
        Ok((
            MessageGet::StartTime {
                unix_ns: 946_684_800_000_000_000,
                subject: Some("g.2".into())
            },
            false
        ))
    );
    assert_eq!(
        get(br#"{"start_time":"2000-01-01T00:00:00+01:00"}"#),
        Ok((
            MessageGet::StartTime {
                unix_ns: 946_681_200_000_000_000,
                subject: None
            },
            false
        ))
    );
    // Accepted by nats-server 2.15.1: negative batch, null start time,
    // multi_last and up_to_seq (ignored by MSG.GET).
    assert_eq!(
        get(br#"{"seq":1,"batch":-1}"#),
        Ok((MessageGet::Sequence(1), false))
    );
    assert_eq!(
        get(br#"{"start_time":null,"seq":1}"#),
        Ok((MessageGet::Sequence(1), false))
    );
    assert_eq!(
        get(br#"{"seq":1,"multi_last":["g.1"]}"#),
        Ok((MessageGet::Sequence(1), false))
    );
    assert_eq!(
        get(br#"{"seq":1,"up_to_seq":5}"#),
        Ok((MessageGet::Sequence(1), false))
    );
    // Bad requests (10003), as nats-server 2.15.1.
    for body in [
        &b""[..],
        b"{}",
        b" ",
        br#"{"seq":0}"#,
        br#"{"seq":1,"last_by_subj":"g.1"}"#,
        br#"{"last_by_subj":"g.1","next_by_subj":"g.1"}"#,
        br#"{"seq":1,"batch":1}"#,
        br#"{"seq":1,"max_bytes":1}"#,
        br#"{"start_time":"2000-01-01T00:00:00Z","seq":1}"#,
        br#"{"start_time":"2000-01-01T00:00:00Z","last_by_subj":"g.1"}"#,
    ] {
        assert_eq!(
            description(get(body).unwrap_err()),
            (10003, "bad request".into()),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    let cases: &[(&[u8], &str)] = &[
        (b"garbage", "invalid character 'g' looking for beginning of value at offset 1"),
        (b"[]", "json: cannot unmarshal array into Go value of type server.JSApiMsgGetRequest"),
        (br#"{"seq":"1"}"#, "json: cannot unmarshal string into Go struct field JSApiMsgGetRequest.seq of type uint64"),
        (br#"{"start_time":"bad"}"#, "parsing time \"bad\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"bad\" as \"2006\""),
        (br#"{"start_time":"2000-13-01T00:00:00Z"}"#, "parsing time \"2000-13-01T00:00:00Z\": month out of range"),
        (br#"{"start_time":""}"#, "parsing time \"\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"\" as \"2006\""),
        (br#"{"start_time":5}"#, "json: cannot unmarshal number into Go struct field JSApiMsgGetRequest.start_time of type time.Time"),
        (br#"{"seq":1,"up_to_time":"bad"}"#, "parsing time \"bad\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"bad\" as \"2006\""),
        (br#"{"batch":"x"}"#, "json: cannot unmarshal string into Go struct field JSApiMsgGetRequest.batch of type int"),
        (br#"{"max_bytes":"x"}"#, "json: cannot unmarshal string into Go struct field JSApiMsgGetRequest.max_bytes of type int"),
        (br#"{"last_by_subj":5}"#, "json: cannot unmarshal number into Go struct field JSApiMsgGetRequest.last_by_subj of type string"),
        (br#"{"multi_last":"x"}"#, "json: cannot unmarshal string into Go struct field JSApiMsgGetRequest.multi_last of type []string"),
        (br#"{"no_hdr":1}"#, "json: cannot unmarshal number into Go struct field JSApiMsgGetRequest.no_hdr of type bool"),
        (br#"{"up_to_seq":"x"}"#, "json: cannot unmarshal string into Go struct field JSApiMsgGetRequest.up_to_seq of type uint64"),
    ];
    for (body, text) in cases {
        assert_eq!(
            description(get(body).unwrap_err()),
            invalid_json(text),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn direct_get_requests() {
    use DirectGetError::*;
    let refusals: &[(&[u8], DirectGetError)] = &[
        (b"", EmptyRequest),
        (b"{}", EmptyRequest),
        (br#"{"x":1}"#, EmptyRequest),
        (br#"{"seq":0}"#, EmptyRequest),
        (br#"{"batch":2}"#, EmptyRequest),
        (br#"{"up_to_seq":2}"#, EmptyRequest),
        (b" ", MalformedRequest),
        (b"garbage", MalformedRequest),
        (br#"{"seq":"1"}"#, MalformedRequest),
        (br#"{"seq":1} x"#, MalformedRequest),
        (br#"{"seq":1,"last_by_subj":"g.1"}"#, BadRequest),
        (br#"{"last_by_subj":"g.1","batch":2}"#, BadRequest),
        (
            br#"{"last_by_subj":"g.1","next_by_subj":"g.1"}"#,
            BadRequest,
        ),
        (
            br#"{"start_time":"2000-01-01T00:00:00Z","seq":1}"#,
            BadRequest,
        ),
        (br#"{"multi_last":["a"],"next_by_subj":"g.1"}"#, BadRequest),
        (
            br#"{"seq":1,"up_to_seq":1,"up_to_time":"2000-01-01T00:00:00Z"}"#,
            BadRequest,
        ),
    ];
    for (body, expected) in refusals {
        assert_eq!(
            DirectGet::parse(body),
            Err(*expected),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    let single = DirectGet::parse(br#"{"seq":2,"no_hdr":true}"#).unwrap();
    assert_eq!(
        single,
        DirectGet {
            get: MessageGet::Sequence(2),
            no_headers: true,
            batch: None,
            multi_last: None,
        }
    );
    // max_bytes without batch is a single get (nats-server answers one).
    assert_eq!(
        DirectGet::parse(br#"{"seq":1,"max_bytes":1}"#)
            .unwrap()
            .batch,
        None
    );
    assert_eq!(
        DirectGet::parse(br#"{"next_by_subj":"g.1","seq":2}"#)
            .unwrap()
            .get,
        MessageGet::NextBySubject {
            subject: "g.1".into(),
            from_sequence: 2
        }
    );
    let batch = DirectGet::parse(br#"{"seq":1,"batch":2,"max_bytes":100}"#).unwrap();
    assert_eq!(
        batch.batch,
        Some(DirectBatch {
            size: 2,
            max_bytes: 100
        })
    );
    let multi = DirectGet::parse(br#"{"multi_last":["g.1","g.2"],"seq":1,"up_to_seq":3}"#).unwrap();
    assert_eq!(
        multi.multi_last,
        Some(DirectMultiLast {
            subjects: vec!["g.1".into(), "g.2".into()],
            up_to_sequence: 3,
            up_to_unix_ns: None,
            batch: 0,
            max_bytes: 0,
        })
    );
    let timed = DirectGet::parse(br#"{"start_time":"2000-01-01T00:00:00Z"}"#).unwrap();
    assert_eq!(
        timed.get,
        MessageGet::StartTime {
            unix_ns: 946_684_800_000_000_000,
            subject: None
        }
    );
}

#[test]
fn direct_get_by_appended_subject() {
    use DirectGetError::*;
    for body in [&b""[..], b"{}", br#"{"x":1}"#, br#"{"max_bytes":2}"#] {
        assert_eq!(
            DirectGet::parse_subject_form(b"g.1", body),
            Ok(DirectGet {
                get: MessageGet::LastBySubject("g.1".into()),
                no_headers: false,
                batch: None,
                multi_last: None,
            })
        );
    }
    assert!(
        DirectGet::parse_subject_form(b"g.*", br#"{"no_hdr":true}"#)
            .unwrap()
            .no_headers
    );
    for body in [
        &br#"{"seq":1}"#[..],
        br#"{"last_by_subj":"g.1"}"#,
        br#"{"batch":2}"#,
        br#"{"multi_last":["g"]}"#,
        br#"{"up_to_seq":1}"#,
    ] {
        assert_eq!(DirectGet::parse_subject_form(b"g.1", body), Err(BadRequest));
    }
    for body in [&b" "[..], b"garbage"] {
        assert_eq!(
            DirectGet::parse_subject_form(b"g.1", body),
            Err(MalformedRequest)
        );
    }
    assert_eq!(DirectGet::parse_subject_form(b"", b""), Err(BadRequest));
}

#[test]
fn direct_get_status_lines() {
    assert_eq!(DirectGetError::EmptyRequest.status(), "408 Empty Request");
    assert_eq!(
        DirectGetError::MalformedRequest.status(),
        "408 Malformed Request"
    );
    assert_eq!(DirectGetError::BadRequest.status(), "408 Bad Request");
    assert_eq!(
        DirectGetError::EmptyRequest.header_block(),
        "NATS/1.0 408 Empty Request\r\n\r\n"
    );
    let status: &str = &DirectGetError::BadRequest;
    assert_eq!(status, "408 Bad Request");
}

#[test]
fn names_and_list_requests() {
    for body in [&b""[..], b"garbage", b"{}"] {
        assert_eq!(NamesRequest::parse(body), Ok(NamesRequest::default()));
    }
    assert_eq!(
        NamesRequest::parse(br#"{"offset":5,"subject":"p.a"}"#),
        Ok(NamesRequest {
            offset: 5,
            subject: Some("p.a".into()),
        })
    );
    assert_eq!(
        NamesRequest::parse_list(br#"{"offset":-5}"#)
            .unwrap()
            .offset,
        0
    );
    let names_cases: &[(&[u8], &str)] = &[
        (br#"{"x":1}"#, "json: unknown field \"x\""),
        (br#"{"offset":"x"}"#, "json: cannot unmarshal string into Go struct field JSApiStreamNamesRequest.offset of type int"),
        (br#"{"subject":5}"#, "json: cannot unmarshal number into Go struct field JSApiStreamNamesRequest.subject of type string"),
        (br#"{"offset":1.5}"#, "json: cannot unmarshal number 1.5 into Go struct field JSApiStreamNamesRequest.offset of type int"),
    ];
    for (body, text) in names_cases {
        assert_eq!(
            description(NamesRequest::parse(body).unwrap_err()),
            invalid_json(text)
        );
        let list_text = text.replace("JSApiStreamNamesRequest", "JSApiStreamListRequest");
        assert_eq!(
            description(NamesRequest::parse_list(body).unwrap_err()),
            invalid_json(&list_text)
        );
    }
}
