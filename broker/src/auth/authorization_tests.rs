use base64::Engine;

use super::config::{resolve, AuthFlags};
use super::*;

fn authorization(text: &str) -> Authorization {
    let file: toml::Table = toml::from_str(text).expect("test TOML parses");
    resolve(file.get("authorization"), AuthFlags::default()).expect("valid authorization")
}

fn connect(json: &str) -> ConnectOptions {
    ConnectOptions::parse(json.as_bytes()).unwrap()
}

fn accepted(outcome: Outcome) -> Authenticated {
    match outcome {
        Outcome::Accepted(authenticated) => authenticated,
        Outcome::Pending(pending) => {
            futures_lite::future::block_on(pending.resolve()).expect("bcrypt accepted")
        }
        Outcome::Refused(refusal) => panic!("refused: {refusal}"),
    }
}

fn refusal(outcome: Outcome) -> Refusal {
    match outcome {
        Outcome::Accepted(authenticated) => panic!("accepted: {authenticated:?}"),
        Outcome::Pending(pending) => {
            futures_lite::future::block_on(pending.resolve()).expect_err("bcrypt refused")
        }
        Outcome::Refused(refusal) => refusal,
    }
}

#[test]
fn open_accepts_anyone() {
    let open = Authorization::default();
    assert!(!open.required());
    let who = accepted(open.authenticate(&connect("{}"), b""));
    assert_eq!(who.identity, Identity::Anonymous);
    assert!(who.permissions.is_none());
}

#[test]
fn token() {
    let token = authorization("[authorization]\ntoken = \"s3cret\"\n");
    let who = accepted(token.authenticate(&connect(r#"{"auth_token":"s3cret"}"#), b""));
    assert_eq!(who.identity, Identity::Token);
    assert_eq!(
        refusal(token.authenticate(&connect(r#"{"auth_token":"s3cre"}"#), b"")),
        Refusal::WrongToken
    );
    assert_eq!(
        refusal(token.authenticate(&connect(r#"{"user":"a","pass":"s3cret"}"#), b"")),
        Refusal::WrongToken
    );
}

#[test]
fn single_user_plain_and_bcrypt() {
    let plain = authorization("[authorization]\nuser = \"ann\"\npassword = \"pw\"\n");
    let who = accepted(plain.authenticate(&connect(r#"{"user":"ann","pass":"pw"}"#), b""));
    assert_eq!(who.identity, Identity::User("ann".into()));
    assert_eq!(
        refusal(plain.authenticate(&connect(r#"{"user":"ann","pass":"px"}"#), b"")),
        Refusal::WrongPassword("ann".into())
    );
    assert_eq!(
        refusal(plain.authenticate(&connect(r#"{"user":"bob","pass":"pw"}"#), b"")),
        Refusal::UnknownUser("bob".into())
    );
    assert_eq!(
        refusal(plain.authenticate(&connect("{}"), b"")),
        Refusal::NoCredentials
    );
    let hash = bcrypt::hash("pw", 4).unwrap();
    let hashed = authorization(&format!(
        "[authorization]\nuser = \"ann\"\npassword = \"{hash}\"\n"
    ));
    assert!(matches!(
        hashed.authenticate(&connect(r#"{"user":"ann","pass":"pw"}"#), b""),
        Outcome::Pending(_)
    ));
    accepted(hashed.authenticate(&connect(r#"{"user":"ann","pass":"pw"}"#), b""));
    assert_eq!(
        refusal(hashed.authenticate(&connect(r#"{"user":"ann","pass":"pW"}"#), b"")),
        Refusal::WrongPassword("ann".into())
    );
    // The hash itself is not a password.
    let with_hash = format!(r#"{{"user":"ann","pass":"{hash}"}}"#);
    refusal(hashed.authenticate(&connect(&with_hash), b""));
}

#[test]
fn users_by_name_and_nkey() {
    let key = nkeys::KeyPair::new_user();
    let stranger = nkeys::KeyPair::new_user();
    let users = authorization(&format!(
        r#"[authorization]
users = [
  {{ user = "app", password = "pw", permissions = {{ publish = "orders.>" }} }},
  {{ nkey = "{}", permissions = {{ subscribe = {{ deny = "secret.>" }} }} }},
]
"#,
        key.public_key()
    ));
    let nonce = nkey::generate_nonce();
    let sign = |pair: &nkeys::KeyPair| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(pair.sign(nonce.as_bytes()).unwrap())
    };
    let good = format!(
        r#"{{"nkey":"{}","sig":"{}"}}"#,
        key.public_key(),
        sign(&key)
    );
    let who = accepted(users.authenticate(&connect(&good), nonce.as_bytes()));
    assert_eq!(who.identity, Identity::Nkey(key.public_key()));
    let rules = who.permissions.expect("the nkey user's permissions");
    assert!(!rules.subscribe_allowed(b"secret.x", None));
    // Signed by another key, over another nonce, or not at all.
    let forged = format!(
        r#"{{"nkey":"{}","sig":"{}"}}"#,
        key.public_key(),
        sign(&stranger)
    );
    assert_eq!(
        refusal(users.authenticate(&connect(&forged), nonce.as_bytes())),
        Refusal::Signature(key.public_key(), SignatureError::Mismatch)
    );
    assert_eq!(
        refusal(users.authenticate(&connect(&good), b"another-nonce-x")),
        Refusal::Signature(key.public_key(), SignatureError::Mismatch)
    );
    let unsigned = format!(r#"{{"nkey":"{}"}}"#, key.public_key());
    assert_eq!(
        refusal(users.authenticate(&connect(&unsigned), nonce.as_bytes())),
        Refusal::Signature(key.public_key(), SignatureError::Missing)
    );
    let unknown = format!(
        r#"{{"nkey":"{}","sig":"{}"}}"#,
        stranger.public_key(),
        sign(&stranger)
    );
    assert_eq!(
        refusal(users.authenticate(&connect(&unknown), nonce.as_bytes())),
        Refusal::UnknownNkey(stranger.public_key())
    );
    // An nkey wins over a user name when nkey users exist (nats-server).
    let both = format!(
        r#"{{"nkey":"{}","sig":"{}","user":"app","pass":"pw"}}"#,
        stranger.public_key(),
        sign(&stranger)
    );
    assert!(matches!(
        refusal(users.authenticate(&connect(&both), nonce.as_bytes())),
        Refusal::UnknownNkey(_)
    ));
    let app = accepted(users.authenticate(&connect(r#"{"user":"app","pass":"pw"}"#), b""));
    assert!(app.permissions.unwrap().publish_allowed(b"orders.1"));
    assert_eq!(
        refusal(users.authenticate(&connect(r#"{"auth_token":"pw"}"#), b"")),
        Refusal::NoCredentials
    );
}

#[test]
fn refusals_never_name_the_secret() {
    let users =
        authorization("[authorization]\nusers = [ { user = \"app\", password = \"hunter2\" } ]\n");
    let refusal = refusal(users.authenticate(&connect(r#"{"user":"app","pass":"hunter3"}"#), b""));
    let logged = refusal.to_string();
    assert_eq!(logged, "wrong password for user \"app\"");
    assert!(!logged.contains("hunter"));
}
