//! What a reload of the authorization settings means for a connection
//! that already authenticated, decided as nats-server's
//! `reloadAuthorization` decides it (pure: the connection's shard acts on
//! the verdict).
//!
//! In nats-server's order:
//! 1. a client that logged in as a user (by NKey, else by name) the new
//!    settings no longer have is closed without an `-ERR` (nats-server:
//!    `clientHasMovedToDifferentAccount` → `closeConnection(ClientClosed)`);
//! 2. a client whose CONNECT no longer authenticates gets
//!    `-ERR 'Authorization Violation'` and is closed (`authViolation`);
//! 3. everyone else keeps going with the permissions the new settings give
//!    its user; the caller then drops the subscriptions those no longer
//!    allow (`processSubsOnConfigReload`).
//!
//! A client is judged on the CONNECT it sent (kept on its shard) and the
//! nonce its INFO carried.

use std::sync::Arc;

use super::permissions::Permissions;
use super::{Authorization, Method, Outcome, PendingBcrypt, Refusal};
use crate::proto::connect::ConnectOptions;

/// The verdict on one authenticated connection after a reload.
#[derive(Debug)]
pub enum Recheck {
    /// Still authenticated: go on with these permissions (`None`: all).
    Keep(Option<Arc<Permissions>>),
    /// Its user is gone: close, no `-ERR`.
    Removed,
    /// Its credentials no longer authenticate: `-ERR 'Authorization
    /// Violation'` and close.
    Refused(Refusal),
    /// Its password is a bcrypt hash that changed: verify off the shard,
    /// then keep or refuse.
    Verify(PendingBcrypt),
}

/// Judges one connection's CONNECT against `current` (the new settings);
/// `previous` is what it authenticated against, so an unchanged bcrypt
/// hash is not verified again (its password matched it already).
pub fn recheck(
    previous: &Authorization,
    current: &Authorization,
    options: &ConnectOptions,
    nonce: &[u8],
) -> Recheck {
    if user_removed(current, options) {
        return Recheck::Removed;
    }
    match current.authenticate(options, nonce) {
        Outcome::Accepted(authenticated) => Recheck::Keep(authenticated.permissions),
        Outcome::Refused(refusal) => Recheck::Refused(refusal),
        Outcome::Pending(pending) => {
            if same_bcrypt_hash(previous, &pending.hash, options) {
                Recheck::Keep(pending.accepted.permissions)
            } else {
                Recheck::Verify(pending)
            }
        }
    }
}

/// nats-server `clientHasMovedToDifferentAccount` without accounts: the
/// client named an NKey or a user that `current` does not have. (A single
/// `user`/`password` counts as a users list of one; nats-server keeps no
/// user map for it and would close every such client on any change to
/// the authorization settings.)
fn user_removed(current: &Authorization, options: &ConnectOptions) -> bool {
    let nkey = options.nkey.as_deref().filter(|key| !key.is_empty());
    let user = options.user.as_deref().filter(|user| !user.is_empty());
    match (nkey, user) {
        (Some(key), _) => {
            !matches!(&current.method, Method::Users { nkeys, .. } if nkeys.contains_key(key))
        }
        (None, Some(user)) => match &current.method {
            Method::Users { passwords, .. } => !passwords.contains_key(user),
            Method::User { name, .. } => name != user,
            Method::Open | Method::Token(_) => true,
        },
        (None, None) => false,
    }
}

/// Whether the connection's user had this very bcrypt hash before.
fn same_bcrypt_hash(previous: &Authorization, hash: &Arc<str>, options: &ConnectOptions) -> bool {
    let password = match &previous.method {
        Method::Token(token) => Some(token),
        Method::User { password, .. } => Some(password),
        Method::Users { passwords, .. } => options
            .user
            .as_deref()
            .and_then(|user| passwords.get(user))
            .map(|user| &user.password),
        Method::Open => None,
    };
    matches!(password, Some(super::password::Credential::Bcrypt(previous)) if previous == hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::config::{resolve, AuthFlags};

    fn authorization(table: &str) -> Authorization {
        let table: toml::Table = toml::from_str(table).expect("a TOML table");
        resolve(table.get("authorization"), AuthFlags::default()).expect("valid settings")
    }

    fn connect(user: &str, pass: &str) -> ConnectOptions {
        ConnectOptions {
            user: Some(user.to_string()),
            pass: Some(pass.to_string()),
            ..ConnectOptions::default()
        }
    }

    const TWO_USERS: &str = r#"
        [authorization]
        users = [
          { user = "a", password = "pa" },
          { user = "b", password = "pb", permissions = { publish = ["x.>"] } },
        ]
    "#;

    #[test]
    fn a_removed_user_is_closed_without_a_violation() {
        let previous = authorization(TWO_USERS);
        let current = authorization(
            r#"
            [authorization]
            users = [ { user = "b", password = "pb" } ]
        "#,
        );
        assert!(matches!(
            recheck(&previous, &current, &connect("a", "pa"), b""),
            Recheck::Removed
        ));
        assert!(matches!(
            recheck(&previous, &current, &connect("b", "pb"), b""),
            Recheck::Keep(None)
        ));
    }

    #[test]
    fn a_changed_password_is_a_violation() {
        let previous = authorization(TWO_USERS);
        let current = authorization(
            r#"
            [authorization]
            users = [ { user = "a", password = "new" }, { user = "b", password = "pb" } ]
        "#,
        );
        match recheck(&previous, &current, &connect("a", "pa"), b"") {
            Recheck::Refused(refusal) => {
                assert_eq!(refusal, Refusal::WrongPassword("a".to_string()))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kept_users_get_their_new_permissions() {
        let previous = authorization(TWO_USERS);
        let current = authorization(
            r#"
            [authorization]
            users = [ { user = "b", password = "pb", permissions = { publish = ["y.>"] } } ]
        "#,
        );
        let Recheck::Keep(Some(permissions)) =
            recheck(&previous, &current, &connect("b", "pb"), b"")
        else {
            panic!("b keeps its connection with permissions");
        };
        assert!(permissions.publish_allowed(b"y.1"));
        assert!(!permissions.publish_allowed(b"x.1"));
    }

    #[test]
    fn tokens_and_open_servers() {
        let token = authorization("[authorization]\ntoken = \"t1\"\n");
        let new_token = authorization("[authorization]\ntoken = \"t2\"\n");
        let open = Authorization::default();
        let by_token = ConnectOptions {
            auth_token: Some("t1".to_string()),
            ..ConnectOptions::default()
        };
        assert!(matches!(
            recheck(&token, &token, &by_token, b""),
            Recheck::Keep(None)
        ));
        assert!(matches!(
            recheck(&token, &new_token, &by_token, b""),
            Recheck::Refused(Refusal::WrongToken)
        ));
        // Authentication turned off: anonymous clients stay, users go
        // (nats-server: their user no longer exists).
        assert!(matches!(
            recheck(&token, &open, &by_token, b""),
            Recheck::Keep(None)
        ));
        let previous = authorization(TWO_USERS);
        assert!(matches!(
            recheck(&previous, &open, &connect("a", "pa"), b""),
            Recheck::Removed
        ));
    }

    #[test]
    fn nkey_users_are_judged_by_their_key_and_signature() {
        use base64::Engine;
        let key = nkeys::KeyPair::new_user();
        let other = nkeys::KeyPair::new_user();
        let with_keys = |keys: &[&nkeys::KeyPair], publish: &str| {
            let users: Vec<String> = keys
                .iter()
                .map(|pair| {
                    format!(
                        "{{ nkey = \"{}\", permissions = {{ publish = \"{publish}\" }} }}",
                        pair.public_key()
                    )
                })
                .collect();
            authorization(&format!(
                "[authorization]\nusers = [ {} ]\n",
                users.join(", ")
            ))
        };
        let nonce = crate::auth::nkey::generate_nonce();
        let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(key.sign(nonce.as_bytes()).expect("a signature"));
        let options = ConnectOptions {
            nkey: Some(key.public_key()),
            sig: Some(signature),
            ..ConnectOptions::default()
        };
        let previous = with_keys(&[&key, &other], "a.>");
        let narrowed = with_keys(&[&key], "b.>");
        let Recheck::Keep(Some(permissions)) =
            recheck(&previous, &narrowed, &options, nonce.as_bytes())
        else {
            panic!("the key is still configured");
        };
        assert!(permissions.publish_allowed(b"b.1") && !permissions.publish_allowed(b"a.1"));
        let removed = with_keys(&[&other], "a.>");
        assert!(matches!(
            recheck(&previous, &removed, &options, nonce.as_bytes()),
            Recheck::Removed
        ));
        // Judged by the nonce its INFO carried: any other fails.
        assert!(matches!(
            recheck(&previous, &narrowed, &options, b"another nonce"),
            Recheck::Refused(Refusal::Signature(..))
        ));
    }

    #[test]
    fn an_unchanged_bcrypt_hash_is_not_verified_again() {
        // bcrypt of "secret" at cost 4.
        let hash = bcrypt::hash("secret", 4).expect("a hash");
        let table =
            format!("[authorization]\nusers = [ {{ user = \"a\", password = \"{hash}\" }} ]\n");
        let previous = authorization(&table);
        let current = authorization(&table);
        assert!(matches!(
            recheck(&previous, &current, &connect("a", "secret"), b""),
            Recheck::Keep(None)
        ));
        let other_hash = bcrypt::hash("secret", 4).expect("a hash");
        let changed = authorization(&format!(
            "[authorization]\nusers = [ {{ user = \"a\", password = \"{other_hash}\" }} ]\n"
        ));
        assert!(matches!(
            recheck(&previous, &changed, &connect("a", "secret"), b""),
            Recheck::Verify(_)
        ));
    }
}
