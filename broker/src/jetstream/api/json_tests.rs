//! Tests of `json`. Expected texts are nats-server 2.15.1's answers to raw
//! `PUB $JS.API.STREAM.CREATE.B <inbox> <n>` (the description after
//! `invalid JSON: `), to MSG.GET `start_time` values, and its response bytes.

use std::collections::BTreeMap;

use super::*;

/// A subset of nats-server's `StreamConfigRequest`, enough to exercise the
/// decoder with the real server's Go names.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default)]
struct Probe {
    name: String,
    subjects: Vec<String>,
    max_msgs: i64,
    max_age: i64,
    max_msg_size: i32,
    first_seq: u64,
    no_ack: bool,
    num_replicas: i64,
    metadata: BTreeMap<String, String>,
    placement: Option<Place>,
    sources: Vec<Source>,
}

#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, rename = "Placement")]
struct Place {
    cluster: String,
    tags: Option<Vec<String>>,
}

#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, rename = "StreamSource")]
struct Source {
    name: String,
    opt_start_time: Option<GoTime>,
}

const PROBE: GoSchema = GoSchema {
    struct_name: "StreamConfigRequest",
    field_types: &[
        ("max_age", "time.Duration"),
        ("num_replicas", "int"),
        ("sources", "[]*server.StreamSource"),
    ],
};

fn strict(body: &[u8]) -> Result<Probe, String> {
    decode::<Probe>(body, &PROBE, DecodeMode::Strict).map_err(|error| error.0)
}

fn strict_error(body: &[u8]) -> String {
    strict(body).expect_err(&String::from_utf8_lossy(body))
}

#[test]
fn syntax_errors_match_go() {
    let cases: &[(&[u8], &str)] = &[
        (b"{", "unexpected EOF"),
        (
            b"x",
            "invalid character 'x' looking for beginning of value at offset 1",
        ),
        (
            b"{\"name\":}",
            "invalid character '}' looking for beginning of value at offset 9",
        ),
        (
            b"{\"name\":\"B\",}",
            "invalid character '}' looking for beginning of object key string at offset 13",
        ),
        (
            b"{\"name\" \"B\"}",
            "invalid character '\"' after object key at offset 9",
        ),
        (
            b"{\"name\":\"B\"} x",
            "invalid character 'x' looking for beginning of value at offset 14",
        ),
        (
            b"{\"name\":tru}",
            "invalid character '}' in literal true (expecting 'e') at offset 12",
        ),
        (
            b"{\"max_msgs\":1.}",
            "invalid character '}' in numeric literal at offset 15",
        ),
        (
            b"{\"max_msgs\":-}",
            "invalid character '}' in numeric literal at offset 14",
        ),
        (
            b"{\"name\":\"\\x\"}",
            "invalid escape sequence `\\x` in string at offset 11",
        ),
        (
            b"{\"name\":\"B\",\"subjects\":[\"a\" \"b\"]}",
            "invalid character '\"' after array element at offset 29",
        ),
        (
            b"{\"name\":\"B\", \"max_msgs\":01}",
            "invalid character '1' after object key:value pair at offset 26",
        ),
        (
            b"{\"name\":\"B\", \"max_msgs\":1e}",
            "invalid character '}' in numeric literal at offset 27",
        ),
        (
            b"{\"name\":\"B\x01\"}",
            "invalid character '\\x01' in string at offset 11",
        ),
        (
            b"{\"name\":\"B\",\"description\":\"a\tb\"}",
            "invalid character '\\t' in string at offset 29",
        ),
        (
            b"{x",
            "invalid character 'x' looking for beginning of object key string at offset 2",
        ),
        (
            b"[1x",
            "invalid character 'x' after array element at offset 3",
        ),
        (
            b"[1,]",
            "invalid character ']' looking for beginning of value at offset 4",
        ),
        (
            b"\"\\u12\"",
            "invalid escape sequence `\\u12\"` in string at offset 6",
        ),
        (
            b"\"\\u12x4\"",
            "invalid escape sequence `\\u12x4` in string at offset 7",
        ),
        (
            b"{\"name\":\"\\u12\"}",
            "invalid escape sequence `\\u12\"}` in string at offset 15",
        ),
        (
            b"{\"name\":\"\\u1\xc3\xa9\"}",
            "invalid escape sequence `\\u1\u{e9}\"` in string at offset 15",
        ),
        (
            b"{\"name\":\"B\",\"description\":\"\\\xc3\xa9\"}",
            "invalid escape sequence \"\\\\\\xc3\" in string at offset 29",
        ),
        (
            b"\"\\q",
            "invalid escape sequence `\\q` in string at offset 3",
        ),
        (b"\"\\u12", "unexpected EOF"),
        (b"\"\\", "unexpected EOF"),
        (
            b"tx",
            "invalid character 'x' in literal true (expecting 'r') at offset 2",
        ),
        (
            b"nulx",
            "invalid character 'x' in literal null (expecting 'l') at offset 4",
        ),
        (b"fals", "unexpected EOF"),
        (b"-", "unexpected EOF"),
        (
            b"-x",
            "invalid character 'x' in numeric literal at offset 2",
        ),
        (b"1.", "unexpected EOF"),
        (
            b"1e+x",
            "invalid character 'x' in numeric literal at offset 4",
        ),
        (
            b"+1",
            "invalid character '+' looking for beginning of value at offset 1",
        ),
        (
            b".5",
            "invalid character '.' looking for beginning of value at offset 1",
        ),
        (
            b"\xff",
            "invalid character '\\xff' looking for beginning of value at offset 1",
        ),
        (
            b"{\"name\":\"B\"}\xff",
            "invalid character '\\xff' looking for beginning of value at offset 13",
        ),
        (b"{\"name\":\"B\"} {", "unexpected EOF"),
        (b"{\"name\":[1,2", "unexpected EOF"),
        (b"{\"name\":\"B\" ", "unexpected EOF"),
        (
            b"{\"x\":1, \"y\":}",
            "invalid character '}' looking for beginning of value at offset 13",
        ),
        (
            b"'a'",
            "invalid character '\\'' looking for beginning of value at offset 1",
        ),
        (
            b"{\"name\":\"B\"}\\",
            "invalid character '\\\\' looking for beginning of value at offset 13",
        ),
        (
            b"{\"name\":\"B\"}\x00",
            "invalid character '\\x00' looking for beginning of value at offset 13",
        ),
        (
            b"{\"name\":\"B\"}\xe2\x80\xa8",
            "invalid character '\\u2028' looking for beginning of value at offset 15",
        ),
        (
            b"{\"name\":\"B\"}\xc3\xa9",
            "invalid character '\u{e9}' looking for beginning of value at offset 14",
        ),
        (
            b"\xef\xbb\xbf{\"name\":\"B\"}",
            "invalid character '\\ufeff' looking for beginning of value at offset 3",
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(
            strict_error(body),
            *expected,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn type_errors_match_go() {
    let cases: &[(&[u8], &str)] = &[
        (b"{\"name\":\"B\", \"x\":1}", "json: unknown field \"x\""),
        (b"{\"name\":\"B\", \"max_msgs\":\"5\"}", "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_msgs of type int64"),
        (b"{\"name\":5}", "json: cannot unmarshal number into Go struct field StreamConfigRequest.name of type string"),
        (b"{\"name\":\"B\",\"no_ack\":1}", "json: cannot unmarshal number into Go struct field StreamConfigRequest.no_ack of type bool"),
        (b"{\"name\":\"B\",\"max_msgs\":1.5}", "json: cannot unmarshal number 1.5 into Go struct field StreamConfigRequest.max_msgs of type int64"),
        (b"{\"name\":\"B\",\"max_msgs\":1e3}", "json: cannot unmarshal number 1e3 into Go struct field StreamConfigRequest.max_msgs of type int64"),
        (b"{\"name\":\"B\",\"max_msg_size\":3000000000}", "json: cannot unmarshal number 3000000000 into Go struct field StreamConfigRequest.max_msg_size of type int32"),
        (b"{\"name\":\"B\",\"subjects\":\"a\"}", "json: cannot unmarshal string into Go struct field StreamConfigRequest.subjects of type []string"),
        (b"{\"name\":\"B\",\"subjects\":[1]}", "json: cannot unmarshal number into StreamConfigRequest.subjects.0 of type string"),
        (b"{\"name\":\"B\",\"metadata\":{\"a\":1}}", "json: cannot unmarshal number into Go struct field StreamConfigRequest.metadata.a of type string"),
        (b"{\"name\":\"B\",\"metadata\":[]}", "json: cannot unmarshal array into Go struct field StreamConfigRequest.metadata of type map[string]string"),
        (b"{\"name\":\"B\",\"max_age\":\"1s\"}", "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_age of type time.Duration"),
        (b"{\"name\":\"B\",\"num_replicas\":\"1\"}", "json: cannot unmarshal string into Go struct field StreamConfigRequest.num_replicas of type int"),
        (b"{\"name\":\"B\",\"first_seq\":-1}", "json: cannot unmarshal number -1 into Go struct field StreamConfigRequest.first_seq of type uint64"),
        (b"{\"name\":\"B\",\"max_msgs\":\"5\",\"x\":1}", "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_msgs of type int64"),
        (b"{\"name\":\"B\",\"x\":1,\"max_msgs\":\"5\"}", "json: unknown field \"x\""),
        (b"{\"name\":\"B\",\"placement\":{\"cluster\":1}}", "json: cannot unmarshal number into Go struct field StreamConfigRequest.placement.cluster of type string"),
        (b"{\"name\":\"B\",\"placement\":\"x\"}", "json: cannot unmarshal string into Go struct field StreamConfigRequest.placement of type server.Placement"),
        (b"{\"name\":\"B\",\"placement\":{\"tags\":[1]}}", "json: cannot unmarshal number into StreamConfigRequest.placement.tags.0 of type string"),
        (b"{\"name\":\"B\",\"placement\":{\"y\":1}}", "json: unknown field \"y\""),
        (b"{\"name\":\"B\",\"sources\":[5]}", "json: cannot unmarshal number into StreamConfigRequest.sources.0 of type server.StreamSource"),
        (b"{\"name\":\"B\",\"sources\":[{\"name\":5}]}", "json: cannot unmarshal number into Go struct field StreamConfigRequest.sources.0.name of type string"),
        (b"{\"name\":\"B\",\"sources\":[{\"opt_start_time\":5}]}", "json: cannot unmarshal number into Go struct field StreamConfigRequest.sources.0.opt_start_time of type time.Time"),
        (b"{\"name\":\"B\",\"sources\":[{\"opt_start_time\":\"bad\"}]}", "parsing time \"bad\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"bad\" as \"2006\""),
        (b"[1]", "json: cannot unmarshal array into Go value of type server.StreamConfigRequest"),
        (b"5", "json: cannot unmarshal number into Go value of type server.StreamConfigRequest"),
        (b"\"A\"", "json: cannot unmarshal string into Go value of type server.StreamConfigRequest"),
        (b"truex", "json: cannot unmarshal bool into Go value of type server.StreamConfigRequest"),
        (b"01", "json: cannot unmarshal number into Go value of type server.StreamConfigRequest"),
        (b"{\"x\":1} garbage", "json: unknown field \"x\""),
        (b"{\"name\":\"B\"}\n\n{\"max_msgs\":\"1\"}", "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_msgs of type int64"),
        (b"{\"name\":\"B\",\"max_msgs\":5,\"max_msgs\":\"x\"}", "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_msgs of type int64"),
    ];
    for (body, expected) in cases {
        assert_eq!(
            strict_error(body),
            *expected,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn go_decoding_semantics() {
    // Nothing, whitespace and null decode to the zero struct.
    for body in [&b""[..], b"  ", b"null", b"{}"] {
        assert_eq!(strict(body), Ok(Probe::default()));
    }
    // Keys match case-insensitively; duplicate keys are allowed.
    let probe = strict(b"{\"NAME\":\"B\",\"Max_Msgs\":5,\"name\":\"C\"}").unwrap();
    assert_eq!((probe.name.as_str(), probe.max_msgs), ("C", 5));
    // A stream of values fills one struct: maps and structs merge, arrays
    // are replaced (nats-server 2.15.1 echoes exactly this).
    let probe = strict(
        b"{\"name\":\"B\",\"metadata\":{\"a\":\"1\"},\"subjects\":[\"a\",\"b\"]}{\"metadata\":{\"b\":\"2\"},\"subjects\":[\"c\"]}",
    )
    .unwrap();
    assert_eq!(probe.metadata.len(), 2);
    assert_eq!(probe.subjects, ["c"]);
    let probe =
        strict(b"{\"placement\":{\"cluster\":\"a\"},\"placement\":{\"tags\":[\"x\"]}}").unwrap();
    assert_eq!(
        probe.placement,
        Some(Place {
            cluster: "a".into(),
            tags: Some(vec!["x".into()])
        })
    );
    // null: a pointer becomes nil, a value stays as it was.
    let probe = strict(
        b"{\"max_msgs\":5,\"max_msgs\":null,\"placement\":{\"cluster\":\"a\"},\"placement\":null}",
    )
    .unwrap();
    assert_eq!((probe.max_msgs, probe.placement), (5, None));
    let probe = strict(b"{\"subjects\":[\"a\",null],\"metadata\":{\"a\":null}}").unwrap();
    assert_eq!(probe.subjects, ["a", ""]);
    assert_eq!(probe.metadata["a"], "");
    // Escapes and invalid UTF-8, as Go decodes them.
    let probe = strict(b"{\"name\":\"\\u00e9\\/\\b\\ud83d\\ude00\\ud800\xff\"}").unwrap();
    assert_eq!(probe.name, "\u{e9}/\u{8}\u{1f600}\u{fffd}\u{fffd}");
    // -0 is an integer; numbers at the limits fit.
    let probe =
        strict(b"{\"max_msgs\":-0,\"max_msg_size\":2147483647,\"first_seq\":18446744073709551615}")
            .unwrap();
    assert_eq!(
        (probe.max_msgs, probe.max_msg_size, probe.first_seq),
        (0, i32::MAX, u64::MAX)
    );
}

#[test]
fn lenient_mode_is_json_unmarshal() {
    let lenient = |body: &[u8]| decode::<Probe>(body, &PROBE, DecodeMode::Lenient);
    // Unknown fields are ignored, types still checked.
    assert_eq!(lenient(b"{\"x\":1,\"name\":\"B\"}").unwrap().name, "B");
    assert!(lenient(b"{\"name\":5}").is_err());
    // Exactly one value; no offsets in syntax errors.
    assert_eq!(
        lenient(b"{} x").unwrap_err().0,
        "invalid character 'x' after top-level value"
    );
    assert_eq!(lenient(b" ").unwrap_err().0, "unexpected end of JSON input");
    assert_eq!(
        lenient(b"x").unwrap_err().0,
        "invalid character 'x' looking for beginning of value"
    );
    assert_eq!(lenient(b" {} ").unwrap(), Probe::default());
}

#[test]
fn decode_strict_names_errors_after_the_rust_type() {
    let error = decode_strict::<Probe>(b"{\"name\":5}").unwrap_err();
    assert_eq!((error.status, error.code), (400, 10025));
    assert_eq!(
        error.description,
        "invalid JSON: json: cannot unmarshal number into Go struct field Probe.name of type string"
    );
    let error = decode_strict_with::<Probe>(b"{\"y\":1}", &PROBE).unwrap_err();
    assert_eq!(error.description, "invalid JSON: json: unknown field \"y\"");
    assert_eq!(
        decode_strict::<Probe>(b"{\"name\":\"B\"}").unwrap().name,
        "B"
    );
}

#[test]
fn nesting_is_bounded() {
    let deep = "[".repeat(NESTING_DEPTH_MAX + 1);
    let error = strict_error(deep.as_bytes());
    assert!(error.starts_with("exceeded max depth"), "{error}");
    let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
    assert!(strict_error(deep.as_bytes()).starts_with("json: cannot unmarshal array"));
}

#[test]
fn self_describing_targets_are_depth_bounded() {
    let shallow = decode::<serde_json::Value>(b"[[1,{\"a\":null}]]", &PROBE, DecodeMode::Strict);
    assert_eq!(shallow.unwrap(), serde_json::json!([[1, {"a": null}]]));
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let error = decode::<serde_json::Value>(deep.as_bytes(), &PROBE, DecodeMode::Strict);
    assert_eq!(error.unwrap_err().0, "exceeded max depth");
}

#[test]
fn empty_requests_as_nats_server() {
    // nats-server 2.15.1 STREAM.DELETE.NOPE: 10059 (empty) vs 10038.
    for body in [&b""[..], b"{}", b"{ }", b"{} ", b" {}"] {
        assert!(is_empty_request(body), "{body:?}");
    }
    for body in [&b"  "[..], b"null", b"[]", b"{\"a\":1}", b"{} {}", b"x"] {
        assert!(!is_empty_request(body), "{body:?}");
    }
}

#[test]
fn object_or_array_sniffing() {
    assert!(is_object_or_array(b" \t\r\n{"));
    assert!(is_object_or_array(b"[]"));
    assert!(!is_object_or_array(b"garbage"));
    assert!(!is_object_or_array(b""));
    assert!(!is_object_or_array(b"  "));
}

#[test]
fn strings_are_written_as_go_writes_them() {
    // nats-server 2.15.1 echo of description "\u2028é\x7f\x01&'\"\\/\b\f\n\r\t<>".
    let mut out = String::new();
    write_string(
        &mut out,
        "\u{2028}\u{e9}\u{7f}\u{1}&'\"\\/\u{8}\u{c}\n\r\t<>\u{2029}\u{1f}",
    );
    assert_eq!(
        out,
        "\"\\u2028\u{e9}\u{7f}\\u0001\\u0026'\\\"\\\\/\\b\\f\\n\\r\\t\\u003c\\u003e\\u2029\\u001f\""
    );
    let mut out = String::new();
    write_string(&mut out, "orders.>");
    assert_eq!(out, "\"orders.\\u003e\"");
    let mut out = String::new();
    write_string(&mut out, "");
    assert_eq!(out, "\"\"");
}

#[test]
fn times_are_written_as_go_writes_them() {
    let time = |unix_ns: u64| {
        let mut out = String::new();
        write_time(&mut out, unix_ns);
        out
    };
    assert_eq!(time(0), "\"0001-01-01T00:00:00Z\"");
    // From nats-server 2.15.1 responses.
    assert_eq!(
        time(1_796_029_674_899_390_554),
        "\"2026-11-30T09:07:54.899390554Z\""
    );
    assert_eq!(
        time(1_796_029_674_901_672_000),
        "\"2026-11-30T09:07:54.901672Z\""
    );
    assert_eq!(time(1_796_029_674_000_000_000), "\"2026-11-30T09:07:54Z\"");
    assert_eq!(
        time(1_796_029_674_100_000_000),
        "\"2026-11-30T09:07:54.1Z\""
    );
    assert_eq!(time(1), "\"1970-01-01T00:00:00.000000001Z\"");
}

#[test]
fn times_parse_as_go_parses_rfc3339() {
    assert_eq!(
        parse_time("2000-01-01T00:00:00Z"),
        Some(946_684_800_000_000_000)
    );
    assert_eq!(
        parse_time("2000-01-01T01:00:00+01:00"),
        Some(946_684_800_000_000_000)
    );
    assert_eq!(
        parse_time("1999-12-31T23:30:00-00:30"),
        Some(946_684_800_000_000_000)
    );
    assert_eq!(
        parse_time("2026-11-30T09:07:54.899390554Z"),
        Some(1_796_029_674_899_390_554)
    );
    assert_eq!(
        parse_time("2026-11-30T09:07:54.5Z"),
        Some(1_796_029_674_500_000_000)
    );
    // Digits past nanoseconds are dropped, as Go does.
    assert_eq!(
        parse_time("2026-11-30T09:07:54.1234567891Z"),
        Some(1_796_029_674_123_456_789)
    );
    // Before 1970: 0.
    assert_eq!(parse_time("1969-12-31T23:59:59Z"), Some(0));
    assert_eq!(parse_time("0001-01-01T00:00:00Z"), Some(0));
    // Accepted by nats-server 2.15.1 (Go's time.Parse, not strict RFC 3339).
    assert!(parse_time("2026-01-01T1:00:00Z").is_some());
    assert!(parse_time("2026-01-01T00:00:00,5Z").is_some());
    assert!(parse_time("2026-01-01T00:00:00+24:00").is_some());
    assert_eq!(
        parse_time("2024-02-29T00:00:00Z"),
        Some(1_709_164_800_000_000_000)
    );
    // Refused, with nats-server 2.15.1's MSG.GET texts.
    let cases = [
        ("bad", "parsing time \"bad\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"bad\" as \"2006\""),
        ("", "parsing time \"\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"\" as \"2006\""),
        ("2000-01-01 00:00:00Z", "parsing time \"2000-01-01 00:00:00Z\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \" 00:00:00Z\" as \"T\""),
        ("2000-01-01T00:00:00", "parsing time \"2000-01-01T00:00:00\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"\" as \"Z07:00\""),
        ("2000-13-01T00:00:00Z", "parsing time \"2000-13-01T00:00:00Z\": month out of range"),
        ("2026-02-30T00:00:00Z", "parsing time \"2026-02-30T00:00:00Z\": day out of range"),
        ("2026-01-01T24:00:00Z", "parsing time \"2026-01-01T24:00:00Z\": hour out of range"),
        ("2026-01-01T00:60:00Z", "parsing time \"2026-01-01T00:60:00Z\": minute out of range"),
        ("2026-01-01T00:00:60Z", "parsing time \"2026-01-01T00:00:60Z\": second out of range"),
        ("2026-01-01T00:00:00+25:00", "parsing time \"2026-01-01T00:00:00+25:00\": time zone offset hour out of range"),
        ("2026-01-01T00:00:00Zx", "parsing time \"2026-01-01T00:00:00Zx\": extra text: \"x\""),
        ("2026/01/01T00:00:00Z", "parsing time \"2026/01/01T00:00:00Z\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"/01/01T00:00:00Z\" as \"-\""),
        ("2026-01-01t00:00:00z", "parsing time \"2026-01-01t00:00:00z\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"t00:00:00z\" as \"T\""),
        ("\u{e9}", "parsing time \"\\xc3\\xa9\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"\\xc3\\xa9\" as \"2006\""),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_rfc3339(text).unwrap_err().to_string(), expected);
        assert_eq!(parse_time(text), None);
    }
}

#[test]
fn go_time_keeps_its_offset() {
    // nats-server 2.15.1 echoes opt_start_time with its offset, trimmed.
    let cases = [
        (
            "2026-01-02T03:04:05.5+01:00",
            "\"2026-01-02T03:04:05.5+01:00\"",
        ),
        (
            "1969-12-31T23:59:59.000000001-00:30",
            "\"1969-12-31T23:59:59.000000001-00:30\"",
        ),
        ("0001-01-01T00:00:00Z", "\"0001-01-01T00:00:00Z\""),
        (
            "2026-01-01T00:00:00.1234567891Z",
            "\"2026-01-01T00:00:00.123456789Z\"",
        ),
        (
            "2026-01-01T00:00:00.500+00:00",
            "\"2026-01-01T00:00:00.5Z\"",
        ),
    ];
    for (text, expected) in cases {
        let time = parse_rfc3339(text).unwrap();
        let mut out = String::new();
        time.write_json(&mut out);
        assert_eq!(out, expected);
    }
    let zero = parse_rfc3339("0001-01-01T00:00:00Z").unwrap();
    assert_eq!(zero.unix_seconds, ZERO_TIME_UNIX_SECONDS);
    assert_eq!(zero.unix_ns_clamped(), 0);
}

#[test]
fn base64_is_standard_with_padding() {
    let encode = |bytes: &[u8]| {
        let mut out = String::new();
        base64_encode(bytes, &mut out);
        out
    };
    assert_eq!(encode(b""), "");
    assert_eq!(encode(b"f"), "Zg==");
    assert_eq!(encode(b"fo"), "Zm8=");
    assert_eq!(encode(b"foo"), "Zm9v");
    assert_eq!(encode(&[0xfb, 0xff, 0xbf]), "+/+/");
    // nats-server 2.15.1 MSG.GET: payload "one", header block with Nats-Msg-Id.
    assert_eq!(encode(b"one"), "b25l");
    assert_eq!(encode(b"three"), "dGhyZWU=");
    assert_eq!(
        encode(b"NATS/1.0\r\nNats-Msg-Id: abc\r\n\r\n"),
        "TkFUUy8xLjANCk5hdHMtTXNnLUlkOiBhYmMNCg0K"
    );
}

#[test]
fn go_quoting() {
    assert_eq!(go_quote("x"), "\"x\"");
    assert_eq!(go_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
    assert_eq!(
        go_quote("\u{1}\t\u{7f}\u{e9}\u{2028}"),
        "\"\\x01\\t\\x7f\u{e9}\\u2028\""
    );
    assert_eq!(go_quote("\u{1f600}"), "\"\u{1f600}\"");
    assert_eq!(go_quote("\u{f0000}"), "\"\\U000f0000\"");
    // The enum error text: can not unmarshal "\"foo\"".
    assert_eq!(quote_raw("\"foo\""), "\"\\\"foo\\\"\"");
    assert_eq!(quote_raw("null"), "\"null\"");
}

#[test]
fn raw_json_helpers() {
    assert_eq!(raw_kind("\"x\""), "string");
    assert_eq!(raw_kind("5"), "number");
    assert_eq!(raw_kind("-5"), "number");
    assert_eq!(raw_kind("true"), "bool");
    assert_eq!(raw_kind("null"), "null");
    assert_eq!(raw_kind("[]"), "array");
    assert_eq!(raw_kind("{}"), "object");
    assert_eq!(raw_string("\"a\\u0062\""), Some("ab".to_string()));
    assert_eq!(raw_string("5"), None);
}

#[test]
fn decode_error_displays_its_text() {
    let error = DecodeError("x".into());
    assert_eq!(error.to_string(), "x");
    assert_eq!(error.text(), "x");
}
