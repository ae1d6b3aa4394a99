//! The nats CLI's flags that set server settings, sent to both servers:
//! each line's result (the config fields the flags set, or the server's
//! refusal) must be the same on tern and on nats-server. Where tern-server
//! answers differently today, the line is marked (`Tern::Differs`, with
//! what tern answers): its expectation is nats-server's, asserted on
//! nats-server only, and tern's answer is printed, not asserted.

use serde_json::Value;

use super::{on_both, run_with_input, tern_command, Run, Server};

/// What a line came to: the JSON fields named, or the one-line error.
fn outcome(run: &Run, fields: &[&str]) -> String {
    if run.code != Some(0) {
        return format!("error: {}", run.stderr.trim());
    }
    let Ok(value) = serde_json::from_str::<Value>(&run.stdout) else {
        return format!("ok: {}", run.stdout.trim());
    };
    let picked: Vec<String> = fields
        .iter()
        .map(|field| {
            let at = field.split('.').fold(&value, |at, part| &at[part]);
            format!("{field}={at}")
        })
        .collect();
    format!("ok: {}", picked.join(" "))
}

/// Whether tern-server answers a line as nats-server does.
#[derive(Debug, Clone, Copy)]
enum Tern {
    Same,
    /// tern-only-skipped: tern-server answers this (a server gap, reported;
    /// the CLI sends the flag as the nats CLI does).
    Differs(&'static str),
}

struct Step {
    line: &'static str,
    fields: &'static [&'static str],
    tern: Tern,
    /// nats-server's answer, asserted for the lines tern differs on.
    nats: Option<&'static str>,
}

const fn same(line: &'static str, fields: &'static [&'static str]) -> Step {
    Step {
        line,
        fields,
        tern: Tern::Same,
        nats: None,
    }
}

const fn differs(
    line: &'static str,
    fields: &'static [&'static str],
    nats: &'static str,
    tern: &'static str,
) -> Step {
    Step {
        line,
        fields,
        tern: Tern::Differs(tern),
        nats: Some(nats),
    }
}

/// Runs the steps on both servers and compares them.
fn run_steps(steps: &[Step], prepare: impl Fn(&Server) + Sync) {
    let (tern, nats) = on_both(|server| {
        prepare(server);
        steps
            .iter()
            .map(|step| {
                let words = shell_words(step.line);
                let words: Vec<&str> = words.iter().map(String::as_str).collect();
                outcome(&server.tern(&words), step.fields)
            })
            .collect::<Vec<_>>()
    });
    for ((step, tern), nats) in steps.iter().zip(&tern).zip(&nats) {
        match step.tern {
            Tern::Same => assert_eq!(tern, nats, "{}", step.line),
            Tern::Differs(answer) => {
                assert_eq!(Some(nats.as_str()), step.nats, "nats-server: {}", step.line);
                assert!(
                    tern.contains(answer),
                    "tern-server's known answer changed ({answer}): {}: {tern}",
                    step.line
                );
                eprintln!(
                    "tern-only-skipped: {}\n   nats-server: {nats}\n   tern-server: {tern}",
                    step.line
                );
            }
        }
    }
}

/// A line split as a POSIX shell splits it (quotes; no expansion).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for character in line.chars() {
        match (quote, character) {
            (Some(open), close) if open == close => quote = None,
            (Some(_), inner) => word.get_or_insert_with(String::new).push(inner),
            (None, '"' | '\'') => {
                quote = Some(character);
                word.get_or_insert_with(String::new);
            }
            (None, ' ') => words.extend(word.take()),
            (None, other) => word.get_or_insert_with(String::new).push(other),
        }
    }
    words.extend(word);
    words
}

const NOT_SUPPORTED_MIRRORS: &str =
    "stream mirrors are not supported yet (code 500, err_code 10052)";
const NOT_SUPPORTED_SOURCES: &str =
    "stream sources are not supported yet (code 500, err_code 10052)";

#[test]
fn stream_kv_and_object_flags_reach_the_server() {
    let steps = [
        same("stream add S1 --subjects s1.> --compression s2 --storage file --json", &["config.compression", "config.storage"]),
        same("stream add S2 --subjects s2.> --no-ack --description d --json", &["config.no_ack", "config.description"]),
        same(
            "stream add S3 --subjects s3.> --discard new --discard-per-subject --max-msgs-per-subject 5 --json",
            &["config.discard", "config.discard_new_per_subject", "config.max_msgs_per_subject"],
        ),
        same("stream add S4 --subjects s4.> --first-sequence 100 --json", &["config.first_seq", "state.first_seq"]),
        same("stream add S5 --subjects s5.> --allow-batch --json", &["config.allow_atomic"]),
        same("stream add S6 --subjects s6.> --allow-fast --json", &["config.allow_batched"]),
        same("stream add S7 --subjects s7.> --allow-counter --json", &["config.allow_msg_counter"]),
        same("stream add S8 --subjects s8.> --allow-schedules --json", &["config.allow_msg_schedules"]),
        same(
            "stream add S9 --subjects s9.> --allow-msg-ttl --subject-del-markers-ttl 1m --json",
            &["config.allow_msg_ttl", "config.subject_delete_marker_ttl"],
        ),
        same(
            "stream add S10 --subjects s10.> --transform-source s10.> --transform-destination t10.> --json",
            &["config.subject_transform"],
        ),
        same(
            "stream add S11 --subjects s11.> --republish-source s11.> --republish-destination r11.> --republish-headers --json",
            &["config.republish"],
        ),
        same("stream add S12 --subjects s12.> --metadata team=a --metadata tier:gold --json", &["config.metadata.team", "config.metadata.tier"]),
        same(
            "stream add S13 --subjects s13.> --limit-consumer-inactive 1h --limit-consumer-max-pending 500 --json",
            &["config.consumer_limits"],
        ),
        same("stream add S14 --subjects s14.> --persist-mode async --json", &["config.persist_mode"]),
        same("stream add S15 --subjects s15.> --tag ssd --cluster c1 --json", &["config.placement"]),
        same(
            "stream add S16 --subjects s16.> --no-allow-direct --deny-delete --deny-purge --allow-rollup --json",
            &["config.allow_direct", "config.deny_delete", "config.deny_purge", "config.allow_rollup_hdrs"],
        ),
        same("stream add S17 --subjects s17.> --max-consumers 3 --max-msgs 10 --max-msg-size 1KB --dupe-window 1m --json",
            &["config.max_consumers", "config.max_msgs", "config.max_msg_size", "config.duplicate_window"]),
        differs(
            "stream add M1 --mirror S1 --allow-mirror-direct --json",
            &["config.mirror", "config.mirror_direct"],
            r#"ok: config.mirror={"name":"S1"} config.mirror_direct=true"#,
            NOT_SUPPORTED_MIRRORS,
        ),
        differs(
            "stream add SRC --subjects src.> --source S1 --source '{\"name\": \"S2\", \"filter_subject\": \"s2.a\"}' --json",
            &["config.sources"],
            r#"ok: config.sources=[{"name":"S1"},{"filter_subject":"s2.a","name":"S2"}]"#,
            NOT_SUPPORTED_SOURCES,
        ),
        same("stream edit S12 --metadata team=b --json", &["config.metadata"]),
        same("stream edit S11 --no-republish --json", &["config.republish"]),
        same("stream edit S10 --no-transform --json", &["config.subject_transform"]),
        same("stream edit S15 --tag '' --cluster '' --json", &["config.placement"]),
        same("stream edit S2 --ack --json", &["config.no_ack"]),
        differs(
            "stream edit M1 --no-mirror --json",
            &["config.mirror"],
            "ok: config.mirror=null",
            "stream not found (code 404, err_code 10059)",
        ),
        same("stream edit S1 --dry-run --max-msgs 5", &[]),
        same("stream edit S1 --max-msgs -1", &[]),
        same("stream info S4 --json", &["state.first_seq", "state.last_seq"]),
        same("stream add W --subjects w.> --retention work --json", &["config.retention"]),
        same("kv add KV1 --marker-ttl 1m --compress --metadata a=b --max-value-size 1KB --max-bucket-size 1MB --description d", &[]),
        same(
            "stream info KV_KV1 --json",
            &[
                "config.allow_msg_ttl",
                "config.subject_delete_marker_ttl",
                "config.compression",
                "config.metadata.a",
                "config.max_msg_size",
                "config.max_bytes",
                "config.description",
                "config.discard",
                "config.deny_delete",
                "config.allow_rollup_hdrs",
            ],
        ),
        same("kv add KV4 --republish-source '$KV.KV4.>' --republish-destination re.kv --republish-headers --tags t1 --storage memory", &[]),
        same("stream info KV_KV4 --json", &["config.republish", "config.placement", "config.storage"]),
        differs(
            "kv add KV2 --source KV1",
            &[],
            "ok: Bucket KV2 created: history 1, ttl forever, values 0",
            NOT_SUPPORTED_SOURCES,
        ),
        differs(
            "kv add KV3 --mirror KV1",
            &[],
            "ok: Bucket KV3 created: history 1, ttl forever, values 0",
            NOT_SUPPORTED_MIRRORS,
        ),
        same("object add O1 --compress --metadata a=b --ttl 1d --max-bucket-size 1MB --description d", &[]),
        same(
            "stream info OBJ_O1 --json",
            &["config.compression", "config.metadata.a", "config.max_age", "config.max_bytes", "config.description"],
        ),
    ];
    run_steps(&steps, |_| {});
}

#[test]
fn consumer_flags_reach_the_server() {
    let steps = [
        same(
            "consumer add S C1 --pull --backoff linear --backoff-steps 3 --backoff-min 1s --backoff-max 3s --json",
            &["config.backoff", "config.max_deliver"],
        ),
        same(
            "consumer add S C2 --pull --max-pull-batch 10 --max-pull-expire 5s --max-pull-bytes 1024 --max-waiting 7 --json",
            &["config.max_batch", "config.max_expires", "config.max_bytes", "config.max_waiting"],
        ),
        same("consumer add S C3 --pull --headers-only --sample 50 --json", &["config.headers_only", "config.sample_freq"]),
        same(
            "consumer add S C4 --pull --memory --replicas 1 --metadata k=v --description d --json",
            &["config.mem_storage", "config.num_replicas", "config.metadata.k", "config.description"],
        ),
        differs(
            "consumer add S C5 --pull --pause '2099-01-02 15:04:05' --json",
            &["paused", "config.pause_until"],
            r#"ok: paused=true config.pause_until="2099-01-02T15:04:05Z""#,
            r#"ok: paused=null config.pause_until="2099-01-02T15:04:05Z""#,
        ),
        same(
            "consumer add S C6 --pull --pinned-groups g --pinned-ttl 1m --json",
            &["config.priority_policy", "config.priority_groups", "config.priority_timeout"],
        ),
        same("consumer add S C7 --pull --overflow-groups g --json", &["config.priority_policy", "config.priority_groups"]),
        same("consumer add S C8 --pull --prioritized-groups g --json", &["config.priority_policy"]),
        same("consumer ls S -n", &[]),
        same(
            "consumer add S P1 --target out.p1 --deliver-group g --heartbeat 5s --flow-control --bps 100000 --replay original --json",
            &[
                "config.deliver_subject",
                "config.deliver_group",
                "config.idle_heartbeat",
                "config.flow_control",
                "config.rate_limit_bps",
                "config.ack_policy",
                "config.replay_policy",
            ],
        ),
        differs(
            "consumer add S P2 --target out.p2 --ack flow_control --flow-control --heartbeat 5s --json",
            &["config.ack_policy"],
            r#"ok: config.ack_policy="flow_control""#,
            "flow control ack policies are not supported yet (code 500, err_code 10012)",
        ),
        same(
            "consumer add S C9 --pull --filter s.a --filter s.b --inactive-threshold 1h --deliver last --json",
            &["config.filter_subjects", "config.inactive_threshold", "config.deliver_policy"],
        ),
        same("consumer add S C10 --pull --deliver subject --json", &["config.deliver_policy", "config.filter_subject"]),
        same("consumer add S C11 --ephemeral --pull --json", &["config.durable_name", "config.name"]),
        same("consumer add S C12 --durable --pull --ack all --max-pending 5 --wait 10s --max-deliver 3 --json",
            &["config.durable_name", "config.ack_policy", "config.max_ack_pending", "config.ack_wait", "config.max_deliver"]),
        same("consumer add S --durable=C13 --pull --ack none --json", &["config.durable_name", "config.ack_policy"]),
        same("consumer add S P3 --target out.p3 --max-waiting 3", &[]),
        same("consumer info S C12 --json", &["config.durable_name"]),
    ];
    run_steps(&steps, |server| {
        server
            .tern(&["stream", "add", "S", "--subjects", "s.>", "--defaults"])
            .ok();
    });
}

/// `tern args…` on `server` with `input` on stdin.
fn with_input(server: &Server, args: &[&str], input: &str) -> Run {
    let url = server.url();
    let mut all = vec!["-s", url.as_str()];
    all.extend_from_slice(args);
    run_with_input(tern_command(&all), &all, input.as_bytes())
}

#[test]
fn message_flags_on_both_servers() {
    let steps = [
        same("pub s1.a one", &[]),
        same("pub s1.b two -H K:{{Count}}", &[]),
        same("pub w.a job1", &[]),
        same("pub w.b job2", &[]),
        same("pub s1.c '{{Count}}' --count 2 --no-templates --sleep 1ms", &[]),
        same("pub s8.x hi --schedule-dest s8.out --schedule-after 1h", &[]),
        differs(
            "pub s8.y hi --schedule-dest s8.out --schedule-every 1h --schedule-ttl 5m",
            &[],
            "error: tern: pub s8.y (message 1): publish failed: per-message TTL is disabled (code 400, error code 10166)",
            "ok: ",
        ),
        differs(
            "pub s5.s hi --schedule-dest s5.out --schedule-cron '0 0 * * * *'",
            &[],
            "error: tern: pub s5.s (message 1): publish failed: message schedules is disabled (code 400, error code 10188)",
            "ok: ",
        ),
        same("sub --stream W --all --count 2 --raw", &[]),
        same("sub s1.> --all -T --raw", &[]),
        same("sub s1.> --all --count 2 --report-subjects", &[]),
        same("sub s1.> --all --count 2 --report-subscriptions --report-top 1", &[]),
        same("sub s1.> --all --count 1 --headers-only", &[]),
        same("sub s1.> --all --count 1 --subjects-only", &[]),
        same("sub s1.> --since 1h --count 2 --raw", &[]),
        same("sub s1.> --start-sequence 2 --count 1 --raw -I s1.x", &[]),
        same("sub s1.> --last --count 1 --raw --translate 'tr a-z A-Z'", &[]),
        same("sub --stream S1 --durable D1 --count 2 --raw", &[]),
        same("consumer info S1 D1 --json", &["config.name", "config.ack_policy", "delivered.stream_seq"]),
        same("consumer add S1 C --pull --defaults --json", &["config.durable_name"]),
        same("consumer next S1 C --count 1 --nak", &[]),
        same("consumer next S1 C --count 1 --term", &[]),
        same("consumer next S1 C --count 1 --wait 10ms", &[]),
        same("consumer info S1 C --json", &["num_ack_pending", "ack_floor.stream_seq", "num_redelivered"]),
        same("server check consumer --stream S1 --consumer C --redelivery-critical 1 --unprocessed-critical 1000", &[]),
        same("server check stream --stream S1 --msgs-warn 100 --format text", &[]),
        same("server check stream --stream S1 --peer-expect 3", &[]),
        same("stream get S1 1 --translate 'tr a-z A-Z' --json", &["subject", "seq"]),
        same("kv add CFG --history 3", &[]),
        same("kv put CFG a 1", &[]),
        same("kv put CFG a 2", &[]),
        same("kv get CFG a --revision 1 --raw", &[]),
        same("kv ls CFG a -n", &[]),
        same("kv ls -n", &[]),
        same("object add O", &[]),
        same("object ls -n", &[]),
    ];
    run_steps(&steps, |server| {
        for line in [
            "stream add S1 --subjects s1.> --defaults",
            "stream add S5 --subjects s5.> --allow-batch",
            "stream add S8 --subjects s8.> --allow-schedules",
            "stream add W --subjects w.> --retention work",
        ] {
            let words: Vec<&str> = line.split(' ').collect();
            server.tern(&words).ok();
        }
    });

    // Lines that read stdin.
    let (tern, nats) = on_both(|server| {
        for line in [
            "stream add S1 --subjects s1.> --defaults",
            "stream add S5 --subjects s5.> --allow-batch",
        ] {
            let words: Vec<&str> = line.split(' ').collect();
            server.tern(&words).ok();
        }
        server.tern(&["object", "add", "O"]).ok();
        let piped = with_input(
            server,
            &["object", "put", "O", "--name", "piped"],
            "from stdin",
        );
        let lines = with_input(server, &["pub", "s1.n", "--send-on", "newline"], "x\ny\n");
        let replace = with_input(server, &["object", "put", "O", "--name", "piped"], "again");
        let atomic = with_input(
            server,
            &["pub", "s5.x", "--atomic", "--send-on", "newline"],
            "a\nb\nc\n",
        );
        let refused = with_input(
            server,
            &["pub", "s1.x", "--atomic", "--send-on", "newline"],
            "a\nb\n",
        );
        (
            [
                outcome(&piped, &[]),
                outcome(&lines, &[]),
                outcome(&replace, &[]),
            ],
            [atomic, refused],
        )
    });
    assert_eq!(tern.0, nats.0);
    let [atomic, refused] = &nats.1;
    assert!(
        atomic.stderr.contains("Messages: 3 Sequence: 3"),
        "nats-server: {atomic:?}"
    );
    assert!(
        refused
            .stderr
            .contains("atomic publish is disabled (code 400, err_code 10174)"),
        "nats-server: {refused:?}"
    );
    // tern-only-skipped: tern-server stores a batch's messages one by one
    // and answers the commit with a plain PubAck (no batch id, no count),
    // also on a stream without allow_atomic; `tern pub --atomic` says so.
    for run in &tern.1 {
        assert!(
            run.stderr.contains("not the batch's PubAck"),
            "tern-server's known answer changed: {run:?}"
        );
    }
}
