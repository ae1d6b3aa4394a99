//! The nats CLI's flags of every command tern implements (natscli
//! c778a5c, 2026-07-20: `cli/*_command.go`), one example each, and the
//! test that every one of them still parses as `tern` reads it. The
//! inventory in docs/cli.md is this table in prose: what each flag does
//! in tern. Windows-only flags (`--certstore…`) are not listed.

/// One nats CLI command: how it is typed up to its flags, and each flag
/// the nats CLI defines for it with an example value (hidden flags and
/// the `--no-` forms of negatable switches included).
pub struct NatsCommand {
    pub path: &'static str,
    /// Positional arguments that make the line complete.
    pub positionals: &'static str,
    pub flags: &'static [&'static str],
}

/// The global flags (every command), tried on `stream ls`.
pub const GLOBAL: NatsCommand = NatsCommand {
    path: "stream ls",
    positionals: "",
    flags: &[
        "-s nats://127.0.0.1:4222",
        "--server nats://127.0.0.1:4222",
        "--user alice",
        "--password s3cret",
        "--token t0ken",
        "--connection-name ops",
        "--creds user.creds",
        "--nkey user.nk",
        "--jwt eyJ0",
        "--seed SUAB",
        "--tlscert client.pem",
        "--tlskey client.key",
        "--tlsca ca.pem",
        "--tlsfirst",
        "--no-tlsfirst",
        "--tls-first",
        "--timeout 5s",
        "--socks-proxy socks5://proxy:1080",
        "--js-api-prefix $JS.hub.API",
        "--js-event-prefix $JS.hub.EVENT",
        "--js-domain hub",
        "--domain hub",
        "--inbox-prefix _I",
        "--colors rounded",
        "--context prod",
        "--trace",
        "--no-context",
    ],
};

/// The config flags `stream add` and `stream edit` share.
macro_rules! stream_config_flags {
    ($($extra:literal),* $(,)?) => {
        &[
            "--subjects orders.>",
            "--description orders",
            "--compression s2",
            "--replicas 3",
            "--tag ssd",
            "--tags ssd",
            "--cluster east",
            "--ack",
            "--no-ack",
            "--retention limits",
            "--retention interest",
            "--retention work",
            "--retention workq",
            "--discard new",
            "--discard old",
            "--discard-per-subject",
            "--no-discard-per-subject",
            "--max-age 30d",
            "--max-bytes 500GB",
            "--max-consumers 10",
            "--max-msg-size 1MB",
            "--max-msgs 1000",
            "--max-msgs-per-subject 10",
            "--dupe-window 2m",
            "--mirror OTHER",
            "--source OTHER",
            "--allow-batch",
            "--no-allow-batch",
            "--allow-fast",
            "--no-allow-fast",
            "--allow-counter",
            "--allow-rollup",
            "--no-allow-rollup",
            "--deny-delete",
            "--no-deny-delete",
            "--deny-purge",
            "--no-deny-purge",
            "--allow-direct",
            "--no-allow-direct",
            "--allow-mirror-direct",
            "--no-allow-mirror-direct",
            "--allow-msg-ttl",
            "--allow-schedules",
            "--no-allow-schedules",
            "--subject-del-markers-ttl 1m",
            "--transform-source a.>",
            "--transform-destination b.>",
            "--metadata team=orders",
            "--republish-source orders.>",
            "--republish-destination copy.>",
            "--republish-headers",
            "--json",
            "-j",
            $($extra),*
        ]
    };
}

pub const COMMANDS: &[NatsCommand] = &[
    NatsCommand {
        path: "stream add",
        positionals: "ORDERS",
        flags: stream_config_flags!(
            "--storage file",
            "--storage f",
            "--storage memory",
            "--storage m",
            "--first-sequence 100",
            "--limit-consumer-inactive 1h",
            "--limit-consumer-max-pending 100",
            "--persist-mode default",
            "--persist-mode async",
            "--config stream.json",
            "--validate",
            "--output stream.json",
            "--defaults",
            "-a",
            "--all",
        ),
    },
    NatsCommand {
        path: "stream edit",
        positionals: "ORDERS",
        flags: stream_config_flags!(
            "--no-mirror",
            "--no-transform",
            "--no-republish",
            "--config stream.json",
            "--force",
            "-f",
            "--interactive",
            "-i",
            "--no-interactive",
            "--dry-run",
        ),
    },
    NatsCommand {
        path: "stream ls",
        positionals: "",
        flags: &[
            "--subject orders.>",
            "--names",
            "-n",
            "--json",
            "-j",
            "-a",
            "--all",
        ],
    },
    NatsCommand {
        path: "stream info",
        positionals: "ORDERS",
        flags: &["--json", "-j", "--state", "--no-select"],
    },
    NatsCommand {
        path: "stream rm",
        positionals: "ORDERS",
        flags: &["--force", "-f"],
    },
    NatsCommand {
        path: "stream purge",
        positionals: "ORDERS",
        flags: &[
            "--json",
            "-j",
            "--force",
            "-f",
            "--subject orders.new",
            "--seq 10",
            "--keep 5",
        ],
    },
    NatsCommand {
        path: "stream get",
        positionals: "ORDERS 1",
        flags: &[
            "--last-for orders.new",
            "-S orders.new",
            "--json",
            "-j",
            "--translate jq",
        ],
    },
    NatsCommand {
        path: "stream rmm",
        positionals: "ORDERS 1",
        flags: &["--force", "-f"],
    },
    NatsCommand {
        path: "consumer add",
        positionals: "ORDERS ORDER_PROCESSOR",
        flags: &[
            "--ack none",
            "--ack all",
            "--ack explicit",
            "--ack flow_control",
            "--bps 1000",
            "--backoff linear",
            "--backoff none",
            "--backoff-steps 10",
            "--backoff-min 1m",
            "--backoff-max 20m",
            "--deliver all",
            "--deliver-group workers",
            "--description processor",
            "--ephemeral",
            "--filter orders.new",
            "--flow-control",
            "--heartbeat 5s",
            "--headers-only",
            "--no-headers-only",
            "--max-deliver 5",
            "--max-outstanding 100",
            "--max-pending 100",
            "--max-waiting 10",
            "--max-pull-batch 100",
            "--max-pull-expire 30s",
            "--max-pull-bytes 1048576",
            "--pull",
            "--replay instant",
            "--replay original",
            "--sample 50",
            "--target deliver.here",
            "--wait 30s",
            "--inactive-threshold 1h",
            "--memory",
            "--replicas 3",
            "--metadata team=orders",
            "--pause 1h",
            "--pinned-groups g",
            "--pinned-ttl 1m",
            "--overflow-groups g",
            "--prioritized-groups g",
            "--config consumer.json",
            "--validate",
            "--output consumer.json",
            "--defaults",
            "-a",
            "--all",
            // tern's: the design's checklist types it (the nats CLI has none).
            "--durable",
        ],
    },
    NatsCommand {
        path: "consumer info",
        positionals: "ORDERS ORDER_PROCESSOR",
        flags: &["--json", "-j", "--no-select"],
    },
    NatsCommand {
        path: "consumer ls",
        positionals: "ORDERS",
        flags: &["--json", "-j", "--names", "-n", "--no-select"],
    },
    NatsCommand {
        path: "consumer next",
        positionals: "ORDERS ORDER_PROCESSOR",
        flags: &[
            "--ack",
            "--no-ack",
            "--nak",
            "--term",
            "--raw",
            "-r",
            "--wait 1s",
            "--count 10",
        ],
    },
    NatsCommand {
        path: "consumer rm",
        positionals: "ORDERS ORDER_PROCESSOR",
        flags: &["--force", "-f"],
    },
    NatsCommand {
        path: "pub",
        positionals: "orders.new body",
        flags: &[
            "--reply inbox",
            "--header K:V",
            "-H K:V",
            "--atomic",
            "--count 10",
            "--force-stdin",
            "--jetstream",
            "-J",
            "--quiet",
            "-q",
            "--schedule-after 1h",
            "--schedule-at 2030-01-01T00:00:00Z",
            "--schedule-cron @hourly",
            "--schedule-dest out",
            "--schedule-every 1h",
            "--schedule-source src",
            "--schedule-ttl 1h",
            "--send-on eof",
            "--send-on newline",
            "--sleep 10ms",
            "--templates",
            "--no-templates",
        ],
    },
    NatsCommand {
        path: "sub",
        positionals: "orders.>",
        flags: &[
            "--queue workers",
            "--durable D",
            "--raw",
            "-r",
            "--translate jq",
            "--ack",
            "--no-ack",
            "--match-replies",
            "--inbox",
            "-i",
            "--count 10",
            "--dump out",
            "--headers-only",
            "--subjects-only",
            "--start-sequence 5",
            "--all",
            "--new",
            "--last",
            "--since 1h",
            "--last-per-subject",
            "--terminate-at-end",
            "-T",
            "--stream ORDERS",
            "--ignore-subject orders.old",
            "-I orders.old",
            "--wait 10s",
            "--report-subjects",
            "--report-subscriptions",
            "--report-top 5",
            "--timestamp",
            "-t",
            "--delta-time",
            "-d",
            "--graph",
            "--direct",
        ],
    },
    NatsCommand {
        path: "req",
        positionals: "service body",
        flags: &[
            "--wait",
            "-w",
            "--no-wait",
            "--raw",
            "-r",
            "--header K:V",
            "-H K:V",
            "--count 2",
            "--replies 0",
            "--reply-timeout 300ms",
            "--wait-for-empty",
            "--translate jq",
            "--force-stdin",
            "--send-on newline",
            "--templates",
            "--no-templates",
        ],
    },
    NatsCommand {
        path: "kv add",
        positionals: "CONFIG",
        flags: &[
            "--description config",
            "--history 5",
            "--storage file",
            "--storage m",
            "--ttl 1h",
            "--marker-ttl 1m",
            "--replicas 3",
            "--max-value-size 1MB",
            "--max-bucket-size 1GB",
            "--tags ssd",
            "--cluster east",
            "--compress",
            "--no-compress",
            "--metadata team=a",
            "--republish-source $KV.CONFIG.>",
            "--republish-destination copy.>",
            "--republish-headers",
            "--mirror OTHER",
            "--mirror-domain hub",
            "--source OTHER",
        ],
    },
    NatsCommand {
        path: "kv get",
        positionals: "CONFIG key",
        flags: &["--revision 2", "--raw"],
    },
    NatsCommand {
        path: "kv del",
        positionals: "CONFIG key",
        flags: &["--force", "-f"],
    },
    NatsCommand {
        path: "kv rm",
        positionals: "CONFIG",
        flags: &["--force", "-f"],
    },
    NatsCommand {
        path: "kv ls",
        positionals: "CONFIG keys.>",
        flags: &["--names", "-n", "--verbose", "-v", "--display-value"],
    },
    NatsCommand {
        path: "kv watch",
        positionals: "CONFIG keys.>",
        flags: &[
            "--history",
            "--deletes",
            "--no-deletes",
            "--updates",
            "--revision 3",
        ],
    },
    NatsCommand {
        path: "object add",
        positionals: "FILES",
        flags: &[
            "--ttl 30d",
            "--replicas 3",
            "--max-bucket-size 10GB",
            "--description files",
            "--storage file",
            "--tags ssd",
            "--cluster east",
            "--metadata team=a",
            "--compress",
            "--no-compress",
        ],
    },
    NatsCommand {
        path: "object put",
        positionals: "FILES report.bin",
        flags: &[
            "--name report",
            "--description report",
            "--header K:V",
            "-H K:V",
            "--chunk-size 131072",
            "--progress",
            "--no-progress",
            "--force",
            "-f",
        ],
    },
    NatsCommand {
        path: "object get",
        positionals: "FILES report.bin",
        flags: &[
            "--output back.bin",
            "-O back.bin",
            "--progress",
            "--no-progress",
            "--force",
            "-f",
        ],
    },
    NatsCommand {
        path: "object ls",
        positionals: "",
        flags: &["--names", "-n"],
    },
    NatsCommand {
        path: "object del",
        positionals: "FILES report.bin",
        flags: &["--force", "-f"],
    },
    NatsCommand {
        path: "server check connection",
        positionals: "",
        flags: &[
            "--connect-warn 500ms",
            "--connect-critical 1s",
            "--rtt-warn 500ms",
            "--rtt-critical 1s",
            "--req-warn 500ms",
            "--req-critical 1s",
            "--format nagios",
            "--format json",
            "--format prometheus",
            "--format text",
            "--namespace nats",
            "--outfile check.prom",
        ],
    },
    NatsCommand {
        path: "server check stream",
        positionals: "--stream ORDERS",
        flags: &[
            "--lag-critical 100",
            "--seen-critical 5m",
            "--min-sources 1",
            "--max-sources 3",
            "--peer-expect 3",
            "--peer-lag-critical 100",
            "--peer-seen-critical 5s",
            "--msgs-warn 10",
            "--msgs-critical 1",
            "--subjects-warn 10",
            "--subjects-critical 100",
        ],
    },
    NatsCommand {
        path: "server check consumer",
        positionals: "--stream ORDERS --consumer ORDER_PROCESSOR",
        flags: &[
            "--outstanding-ack-critical 100",
            "--waiting-critical 10",
            "--unprocessed-critical 1000",
            "--last-delivery-critical 5m",
            "--last-ack-critical 5m",
            "--redelivery-critical 10",
            "--pinned",
        ],
    },
    NatsCommand {
        path: "server check jetstream",
        positionals: "",
        flags: &[
            "--mem-warn 75",
            "--mem-critical 90",
            "--store-warn 75",
            "--store-critical 90",
            "--streams-warn -1",
            "--streams-critical -1",
            "--consumers-warn 50",
            "--consumers-critical 80",
            "--replicas",
            "--no-replicas",
            "--replica-seen-critical 5s",
            "--replica-lag-critical 200",
        ],
    },
    NatsCommand {
        path: "server check meta",
        positionals: "--monitor http://127.0.0.1:8222",
        flags: &["--expect 3", "--lag-critical 100", "--seen-critical 5s"],
    },
    NatsCommand {
        path: "server info",
        positionals: "n1",
        flags: &["--archive audit.zip"],
    },
    NatsCommand {
        path: "server ls",
        positionals: "3",
        flags: &[
            "--json",
            "-j",
            "--sort rtt",
            "--sort name",
            "--sort cluster",
            "--sort conns",
            "--sort conn",
            "--sort subs",
            "--sort sub",
            "--sort routes",
            "--sort route",
            "--sort gw",
            "--sort mem",
            "--sort cpu",
            "--sort slow",
            "--sort uptime",
            "--reverse",
            "-R",
            "--compact",
            "--no-compact",
            "--archive audit.zip",
        ],
    },
    NatsCommand {
        path: "server report jetstream",
        positionals: "5",
        flags: &[
            "--account A",
            "--sort name",
            "--sort cluster",
            "--sort streams",
            "--sort consumers",
            "--sort msgs",
            "--sort mbytes",
            "--sort bytes",
            "--sort mem",
            "--sort file",
            "--sort store",
            "--sort api",
            "--sort err",
            "--compact",
            "--no-compact",
            "--leaders",
            "-l",
            "--host n1",
            "--cluster east",
            "--tags ssd",
            "--watch 5",
            "--archive audit.zip",
            "--reverse",
            "-R",
            // tern's: JSON of the per-stream rows.
            "--json",
            "-j",
        ],
    },
    NatsCommand {
        path: "server cluster peer-remove",
        positionals: "n3",
        flags: &["--force", "-f", "--json", "-j"],
    },
    NatsCommand {
        path: "server raft rm",
        positionals: "n3",
        flags: &["-f"],
    },
    NatsCommand {
        path: "server cluster step-down",
        positionals: "",
        flags: &[
            "--cluster east",
            "--tags ssd",
            "--host n2",
            "--json",
            "-j",
            "--force",
            "-f",
            // tern's: where to read the leader before and after.
            "--monitor http://127.0.0.1:8222",
        ],
    },
    NatsCommand {
        path: "server r sd",
        positionals: "",
        flags: &[],
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `tern <path> <positionals> <flag>` as clap reads it.
    fn parses(command: &NatsCommand, flag: &str) -> Result<(), String> {
        let line: Vec<&str> = std::iter::once("tern")
            .chain(command.path.split_whitespace())
            .chain(command.positionals.split_whitespace())
            .chain(flag.split_whitespace())
            .collect();
        crate::Cli::try_parse_from(&line)
            .map(drop)
            .map_err(|error| format!("{}: {}", line.join(" "), error.kind()))
    }

    #[test]
    fn every_nats_cli_flag_parses() {
        let mut failures = Vec::new();
        for command in std::iter::once(&GLOBAL).chain(COMMANDS) {
            assert!(
                parses(command, "").is_ok(),
                "{}: the line without flags: {:?}",
                command.path,
                parses(command, "")
            );
            for flag in command.flags {
                if let Err(failure) = parses(command, flag) {
                    failures.push(failure);
                }
            }
        }
        assert!(failures.is_empty(), "not parsed:\n{}", failures.join("\n"));
    }

    #[test]
    fn the_command_tree_is_consistent() {
        // clap's own checks over every subcommand: no two arguments of a
        // command (global ones included) share a name, a short or an id.
        use clap::CommandFactory;
        crate::Cli::command().debug_assert();
    }

    #[test]
    fn the_design_checklists_lines_parse() {
        for line in [
            "stream add ORDERS --subjects orders.> --storage file --replicas 3 --max-age 30d --max-bytes 500GB --defaults",
            "consumer add ORDERS ORDER_PROCESSOR --durable --pull --ack explicit --defaults",
            "consumer add ORDERS ORDER_PROCESSOR --pull --ack explicit --max-deliver 5 --wait 30s --filter orders.new --defaults",
            "consumer next ORDERS ORDER_PROCESSOR --count 10",
            "kv add CONFIG --history 5 --replicas 3",
            "server check stream --stream ORDERS --peer-expect 3",
            "server check consumer --stream ORDERS --consumer ORDER_PROCESSOR",
        ] {
            let words: Vec<&str> = std::iter::once("tern").chain(line.split(' ')).collect();
            assert!(crate::Cli::try_parse_from(&words).is_ok(), "{line}");
        }
    }
}
