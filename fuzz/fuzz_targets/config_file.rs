//! Fuzzes the TOML config file: parsing into its tables, then resolving
//! every setting (sizes, durations, cluster, JetStream, and the
//! `[authorization]` table with users, NKeys and permissions) as
//! `tern-server -c FILE` does, without touching the filesystem. Never
//! panics: every mistake is a `ConfigError`. Accepted permissions are then
//! matched against a few subjects.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_broker::auth::Method;
use tern_broker::config::{parse_file, Config, Flags};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = parse_file(text) else {
        return;
    };
    let Ok(config) = Config::resolve_with(Flags::default(), file) else {
        return;
    };
    if let Method::Users { passwords, nkeys } = &config.authorization.method {
        let rules = passwords
            .values()
            .filter_map(|user| user.permissions.as_ref())
            .chain(nkeys.values().filter_map(|user| user.permissions.as_ref()));
        for permissions in rules {
            for subject in [&b"a.b.c"[..], b">", b"a.*", b"$JS.API.INFO", b""] {
                let _ = permissions.publish_allowed(subject);
                let _ = permissions.subscribe_allowed(subject, Some(b"q"));
                let _ = permissions.delivery_denied(subject, None);
            }
        }
    }
});
