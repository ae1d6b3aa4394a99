//! Bad input: unknown flags, bad sizes and durations, an unreachable
//! server. Each is one line on stderr naming what failed, and a non-zero
//! exit (2 for usage clap refuses, 1 for values and connections). None
//! needs a server: values are checked before connecting.

use super::tern;

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let unknown = tern(&["stream", "add", "X", "--bogus"]);
    assert_eq!(
        unknown.one_line_error(2),
        "tern: unexpected argument '--bogus' found (see --help)"
    );
    let missing = tern(&["consumer", "next", "ORDERS"]);
    assert!(
        missing.one_line_error(2).contains("<CONSUMER>"),
        "{missing:?}"
    );
    let choice = tern(&["stream", "add", "X", "--storage", "disk"]);
    assert!(choice
        .one_line_error(2)
        .contains("[possible values: file, memory]"));

    let size = tern(&["stream", "add", "X", "--max-bytes", "500XB"]);
    assert!(
        size.one_line_error(1)
            .starts_with("tern: --max-bytes: invalid size \"500XB\": expected a number"),
        "{size:?}"
    );
    let age = tern(&["stream", "add", "X", "--max-age", "30days"]);
    assert!(
        age.one_line_error(1)
            .starts_with("tern: --max-age: invalid duration \"30days\""),
        "{age:?}"
    );
    let wait = tern(&["consumer", "add", "S", "C", "--wait", "soon"]);
    assert!(wait
        .one_line_error(1)
        .starts_with("tern: --wait: invalid duration"));
    // Checked before connecting, as `kv add`'s (no server on port 1).
    let object_size = tern(&[
        "-s",
        "nats://127.0.0.1:1",
        "object",
        "add",
        "B",
        "--max-bucket-size",
        "1QB",
    ]);
    assert!(
        object_size
            .one_line_error(1)
            .starts_with("tern: --max-bucket-size: invalid size \"1QB\""),
        "{object_size:?}"
    );
    let object_ttl = tern(&[
        "-s",
        "nats://127.0.0.1:1",
        "object",
        "add",
        "B",
        "--ttl",
        "1fortnight",
    ]);
    assert!(
        object_ttl
            .one_line_error(1)
            .starts_with("tern: --ttl: invalid duration \"1fortnight\""),
        "{object_ttl:?}"
    );
    let kv_ttl = tern(&[
        "-s",
        "nats://127.0.0.1:1",
        "kv",
        "add",
        "B",
        "--ttl",
        "soon",
    ]);
    assert!(
        kv_ttl
            .one_line_error(1)
            .starts_with("tern: --ttl: invalid duration \"soon\""),
        "{kv_ttl:?}"
    );
    let header = tern(&["pub", "x", "y", "-H", "novalue"]);
    assert!(header.one_line_error(1).contains("expected K:V"));
    let timeout = tern(&["--timeout", "5 minutes", "stream", "ls"]);
    assert!(timeout
        .one_line_error(1)
        .starts_with("tern: --timeout: invalid duration"));

    let unreachable = tern(&["-s", "nats://127.0.0.1:1", "stream", "ls"]);
    assert!(
        unreachable
            .one_line_error(1)
            .starts_with("tern: cannot connect to nats://127.0.0.1:1: "),
        "{unreachable:?}"
    );
    let seed = tern(&[
        "-s",
        "nats://127.0.0.1:1",
        "--nkey",
        "/nonexistent/seed",
        "stream",
        "ls",
    ]);
    assert!(seed
        .one_line_error(1)
        .starts_with("tern: cannot read the NKey seed /nonexistent/seed: "));
    let tls = tern(&[
        "-s",
        "nats://127.0.0.1:1",
        "--tlscert",
        "/x.pem",
        "stream",
        "ls",
    ]);
    assert_eq!(
        tls.one_line_error(1),
        "tern: --tlscert and --tlskey go together"
    );
}
