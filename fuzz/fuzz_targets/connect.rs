//! Fuzzes CONNECT option parsing and validation, and the authentication of
//! the parsed options against a server with a token-less users list (plain
//! and bcrypt passwords, an NKey user, permissions): never panic on any
//! JSON, whatever the credentials, signature or subjects. A bcrypt check is
//! only set up, not run (it is slow by design and verified in unit tests).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tern_broker::auth::config::{resolve, AuthFlags};
use tern_broker::auth::{Authorization, Outcome};
use tern_broker::config::parse_file;
use tern_broker::proto::connect::ConnectOptions;

const USERS: &str = r#"
[authorization]
users = [
  { user = "plain", password = "pw", permissions = { publish = { allow = ["a.>", "b.*.c"], deny = ["a.secret"] }, subscribe = { allow = ["_INBOX.>", "jobs.* workers"], deny = "x.>" }, allow_responses = { max = 2 } } },
  { user = "hashed", password = "$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW" },
  { nkey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", permissions = { publish = ">", subscribe = { deny = ["secret.>", "q.* bad"] } } },
]
"#;

fn authorization() -> &'static Authorization {
    static AUTHORIZATION: OnceLock<Authorization> = OnceLock::new();
    AUTHORIZATION.get_or_init(|| {
        let file = parse_file(USERS).expect("the fuzz config parses");
        resolve(file.authorization.as_ref(), AuthFlags::default()).expect("the fuzz config is valid")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(options) = ConnectOptions::parse(data) else {
        return;
    };
    let _ = options.validate();
    let nonce = b"fuzz-nonce-1234";
    if let Outcome::Accepted(authenticated) = authorization().authenticate(&options, nonce) {
        // Fuzzed subjects and queues against the user's permissions.
        if let Some(permissions) = authenticated.permissions {
            let subject = options.name.as_bytes();
            let queue = options.lang.as_bytes();
            let _ = permissions.publish_allowed(subject);
            let _ = permissions.subscribe_allowed(subject, Some(queue).filter(|q| !q.is_empty()));
            let _ = permissions.delivery_denied(subject, Some(queue));
        }
    }
});
