use super::*;

const USER_KEY: &str = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4";

fn parse(text: &str) -> Result<Authorization, AuthConfigError> {
    let file: toml::Table = toml::from_str(text).expect("test TOML parses");
    resolve(file.get("authorization"), AuthFlags::default())
}

fn refused(text: &str) -> AuthConfigError {
    match parse(text) {
        Ok(authorization) => panic!("accepted: {authorization:?}\n{text}"),
        Err(error) => error,
    }
}

#[test]
fn no_table_and_no_flags_is_open() {
    let authorization = parse("").unwrap();
    assert!(!authorization.required());
    assert_eq!(authorization.timeout, DEFAULT_AUTH_TIMEOUT);
}

#[test]
fn token_user_and_users() {
    let token = parse("[authorization]\ntoken = \"t0k3n\"\ntimeout = 0.5\n").unwrap();
    assert!(matches!(token.method, Method::Token(_)));
    assert!(token.required() && !token.nonce_required());
    assert_eq!(token.timeout, Duration::from_millis(500));
    let user =
        parse("[authorization]\nuser = \"a\"\npassword = \"b\"\ntimeout = \"3s\"\n").unwrap();
    assert!(matches!(&user.method, Method::User { name, .. } if name == "a"));
    assert_eq!(user.timeout, Duration::from_secs(3));
    let users = parse(&format!(
        r#"[authorization]
timeout = 1
users = [
  {{ user = "app", password = "pw", permissions = {{ publish = "orders.>", subscribe = ["_INBOX.>", "jobs.* workers"] }} }},
  {{ username = "admin", pass = "pw2" }},
  {{ nkey = "{USER_KEY}", permissions = {{ publish = {{ allow = ["a.>"], deny = "a.secret" }}, allow_responses = {{ max = 3, expires = "1m" }} }} }},
]
"#
    ))
    .unwrap();
    assert!(users.nonce_required());
    let Method::Users { passwords, nkeys } = &users.method else {
        panic!("users")
    };
    assert_eq!(passwords.len(), 2);
    let app = passwords["app"].permissions.as_ref().unwrap();
    assert!(app.publish_allowed(b"orders.new") && !app.publish_allowed(b"billing"));
    assert!(app.subscribe_allowed(b"_INBOX.x", None));
    assert!(app.subscribe_allowed(b"jobs.a", Some(b"workers")));
    assert!(!app.subscribe_allowed(b"jobs.a", None));
    assert!(passwords["admin"].permissions.is_none());
    let key_user = nkeys[USER_KEY].permissions.as_ref().unwrap();
    assert!(key_user.publish_allowed(b"a.b") && !key_user.publish_allowed(b"a.secret"));
    assert_eq!(
        key_user.responses,
        Some(ResponsePermission {
            max_messages: Some(3),
            expires: Some(Duration::from_secs(60))
        })
    );
}

#[test]
fn default_permissions_apply_to_users_without_their_own() {
    let authorization = parse(
        r#"[authorization]
permissions = { publish = { deny = ["$JS.API.>"] } }
users = [ { user = "a", password = "x" }, { user = "b", password = "y", permissions = { publish = ">" } } ]
"#,
    )
    .unwrap();
    let Method::Users { passwords, .. } = &authorization.method else {
        panic!("users")
    };
    let a = passwords["a"].permissions.as_ref().unwrap();
    assert!(!a.publish_allowed(b"$JS.API.INFO"));
    let b = passwords["b"].permissions.as_ref().unwrap();
    assert!(b.publish_allowed(b"$JS.API.INFO"));
}

#[test]
fn allow_responses_turns_the_blanket_publish_allow_off() {
    let authorization = parse(
        "[authorization]\nusers = [ { user = \"svc\", password = \"x\", permissions = { allow_responses = true } } ]\n",
    )
    .unwrap();
    let Method::Users { passwords, .. } = &authorization.method else {
        panic!("users")
    };
    let svc = passwords["svc"].permissions.as_ref().unwrap();
    assert!(!svc.publish_allowed(b"anything"));
    assert_eq!(svc.responses, Some(ResponsePermission::default()));
    // An empty subscribe allow list allows everything (nats-server).
    let open = parse_permissions(
        "p",
        &toml::Value::Table(toml::from_str("subscribe = { allow = [] }").unwrap()),
    )
    .unwrap();
    assert!(open.subscribe_allow.is_none());
    // An empty publish allow list allows nothing.
    let closed = parse_permissions(
        "p",
        &toml::Value::Table(toml::from_str("publish = []").unwrap()),
    )
    .unwrap();
    assert!(!closed.publish_allowed(b"x"));
    // Negative values lift the limits.
    let unlimited = parse_permissions(
        "p",
        &toml::Value::Table(
            toml::from_str("allow_responses = { max = -1, expires = -1 }").unwrap(),
        ),
    )
    .unwrap();
    assert_eq!(
        unlimited.responses,
        Some(ResponsePermission {
            max_messages: None,
            expires: None
        })
    );
}

#[test]
fn flags_override_the_file() {
    let file: toml::Table =
        toml::from_str("[authorization]\nuser = \"a\"\npassword = \"b\"\n").unwrap();
    let flags = AuthFlags {
        password: Some("from-flag".into()),
        ..AuthFlags::default()
    };
    let authorization = resolve(file.get("authorization"), flags).unwrap();
    let Method::User { password, .. } = &authorization.method else {
        panic!("user")
    };
    assert!(password.matches_plain("from-flag"));
    let token = resolve(
        None,
        AuthFlags {
            token: Some("t".into()),
            ..AuthFlags::default()
        },
    )
    .unwrap();
    assert!(matches!(token.method, Method::Token(_)));
    let conflict = resolve(
        file.get("authorization"),
        AuthFlags {
            token: Some("t".into()),
            ..AuthFlags::default()
        },
    );
    assert_eq!(
        conflict.unwrap_err().message,
        "cannot have a user/password and a token"
    );
}

#[test]
fn bad_configs_say_what_and_where() {
    let cases: &[(&str, &str, &str)] = &[
        ("[authorization]\nuser = \"a\"\n", "authorization.password", "a user needs a password"),
        ("[authorization]\npassword = \"a\"\n", "authorization.user", "a password needs a user"),
        ("[authorization]\ntoken = \"t\"\nuser = \"a\"\npassword = \"b\"\n", "authorization", "cannot have a user/password and a token"),
        ("[authorization]\ntoken = \"t\"\nusers = [ { user = \"a\", password = \"b\" } ]\n", "authorization", "cannot have a token and a users list"),
        ("[authorization]\nuser = \"x\"\npassword = \"y\"\nusers = [ { user = \"a\", password = \"b\" } ]\n", "authorization", "cannot have a single user/password and a users list"),
        ("[authorization]\ntoken = \"\"\n", "authorization.token", "is empty"),
        ("[authorization]\ntoken = 5\n", "authorization.token", "must be a string, not integer"),
        ("[authorization]\ntimeout = 0\ntoken = \"t\"\n", "authorization.timeout", "must be positive"),
        ("[authorization]\ntimeout = -1.5\ntoken = \"t\"\n", "authorization.timeout", "must be positive"),
        ("[authorization]\ntimeout = 7200\ntoken = \"t\"\n", "authorization.timeout", "at most 3600 seconds"),
        ("[authorization]\ntimeout = \"2 fortnights\"\ntoken = \"t\"\n", "authorization.timeout", "unknown duration unit"),
        ("[authorization]\ntokn = \"t\"\n", "authorization.tokn", "unknown key"),
        ("[authorization]\nusers = []\n", "authorization.users", "is empty: nobody could connect"),
        ("[authorization]\nusers = \"a\"\n", "authorization.users", "must be a list of user tables"),
        ("[authorization]\nusers = [ { user = \"a\" } ]\n", "authorization.users[0]", "user \"a\" needs a password"),
        ("[authorization]\nusers = [ { password = \"a\" } ]\n", "authorization.users[0]", "a user entry needs `user` or `nkey`"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\" }, { user = \"a\", password = \"c\" } ]\n", "authorization.users[1]", "duplicate user \"a\""),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", role = \"x\" } ]\n", "authorization.users[0].role", "unknown key"),
        ("[authorization]\nusers = [ { nkey = \"UABC\" } ]\n", "authorization.users[0].nkey", "is not a valid public nkey for a user"),
        ("[authorization]\nusers = [ { nkey = \"NDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4\" } ]\n", "authorization.users[0].nkey", "is not a valid public nkey"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"$2a$11$broken\" } ]\n", "authorization.users[0].password", "looks like a bcrypt hash but is not a valid one"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { publish = [\"a..b\"] } } ]\n", "authorization.users[0].permissions.publish[0]", "subject \"a..b\" is not a valid subject"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { publish = { deny = \"x y\" } } } ]\n", "authorization.users[0].permissions.publish.deny", "subject \"x y\" is not a valid subject"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { subscribe = { allow = [\"x a..b\"] } } } ]\n", "authorization.users[0].permissions.subscribe.allow[0]", "queue \"a..b\" is not a valid queue"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { publish = { allwo = [\"x\"] } } } ]\n", "authorization.users[0].permissions.publish.allwo", "unknown key (allow, deny)"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { publish = 5 } } ]\n", "authorization.users[0].permissions.publish", "must be a subject, a list of subjects or a table with allow/deny, not integer"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { publish = [5] } } ]\n", "authorization.users[0].permissions.publish[0]", "must be a subject string, not integer"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { allow_responses = \"yes\" } } ]\n", "authorization.users[0].permissions.allow_responses", "must be true, false or a table"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { allow_responses = { max = \"1\" } } } ]\n", "authorization.users[0].permissions.allow_responses.max", "must be an integer"),
        ("[authorization]\nusers = [ { user = \"a\", password = \"b\", permissions = { import = \"x\" } } ]\n", "authorization.users[0].permissions.import", "unknown key (publish, subscribe, allow_responses)"),
        ("[authorization]\ntoken = \"t\"\npermissions = { publish = \"x\" }\n", "authorization.permissions", "default permissions apply to `users` entries only"),
    ];
    for (text, path, message) in cases {
        let error = refused(text);
        assert_eq!(&error.path, path, "{text}\n{error}");
        assert!(
            error.message.contains(message),
            "{text}\nexpected {message:?} in {error}"
        );
    }
    let duplicate_key = refused(&format!(
        "[authorization]\nusers = [ {{ nkey = \"{USER_KEY}\" }}, {{ nkey = \"{USER_KEY}\" }} ]\n"
    ));
    assert_eq!(duplicate_key.path, "authorization.users[1]");
    let mixed = refused(&format!(
        "[authorization]\nusers = [ {{ nkey = \"{USER_KEY}\", user = \"a\" }} ]\n"
    ));
    assert_eq!(
        mixed.message,
        "nkey users do not take usernames or passwords"
    );
}

#[test]
fn lists_are_bounded() {
    let subjects: Vec<String> = (0..=RULES_PER_LIST_MAX)
        .map(|index| format!("\"s.{index}\""))
        .collect();
    let error = refused(&format!(
        "[authorization]\nusers = [ {{ user = \"a\", password = \"b\", permissions = {{ publish = [{}] }} }} ]\n",
        subjects.join(",")
    ));
    assert_eq!(
        error.message,
        format!("at most {RULES_PER_LIST_MAX} subjects")
    );
}

#[test]
fn debug_output_never_shows_secrets() {
    let hash = bcrypt::hash("hunter3", 4).unwrap();
    let authorization = parse(&format!(
        "[authorization]\nusers = [ {{ user = \"a\", password = \"hunter2\" }}, {{ user = \"b\", password = \"{hash}\" }} ]\n"
    ))
    .unwrap();
    let printed = format!("{authorization:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(!printed.contains(&hash), "{printed}");
    assert!(printed.contains("Bcrypt(<redacted>)"), "{printed}");
}

/// The README's example (section "Authentication and permissions") is a
/// valid configuration that means what its comments say.
#[test]
fn the_readme_example_is_valid() {
    let readme = include_str!("../../../README.md");
    let section = &readme[readme
        .find("### Authentication and permissions")
        .expect("the README's auth section")..];
    let start = section.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + section[start..].find("```").expect("the block's end");
    let authorization = parse(&section[start..end]).unwrap_or_else(|error| panic!("{error}"));
    let Method::Users { passwords, nkeys } = &authorization.method else {
        panic!("users")
    };
    assert!(passwords.values().all(|user| user.password.is_bcrypt()));
    assert!(super::super::password::bcrypt_matches(
        match &passwords["admin"].password {
            Credential::Bcrypt(hash) => hash,
            Credential::Plain(_) => unreachable!(),
        },
        "admin-s3cret"
    ));
    assert!(passwords["admin"].permissions.is_none());
    let orders = passwords["orders"].permissions.as_ref().unwrap();
    assert!(orders.publish_allowed(b"orders.new"));
    assert!(orders.publish_allowed(b"$JS.API.CONSUMER.MSG.NEXT.ORDERS.worker"));
    assert!(!orders.publish_allowed(b"$JS.API.STREAM.DELETE.ORDERS"));
    assert!(orders.subscribe_allowed(b"_INBOX.abc", None));
    assert!(!orders.subscribe_allowed(b"billing.>", None));
    let service = nkeys.values().next().unwrap().permissions.as_ref().unwrap();
    assert!(service.subscribe_allowed(b"svc.echo", None));
    assert!(!service.subscribe_allowed(b"svc.admin.reset", None));
    assert!(!service.publish_allowed(b"svc.echo"), "responses only");
}
