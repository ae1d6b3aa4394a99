//! Client authentication and per-user permissions (nats-server's
//! `authorization` block without accounts or JWTs).
//!
//! - [`config`]: the `[authorization]` table and `--user`/`--pass`/`--auth`,
//!   checked and compiled into one immutable [`Authorization`].
//! - [`Authorization::authenticate`]: a CONNECT's credentials against it
//!   (token, user and password, or NKey signature over the INFO nonce), in
//!   nats-server's order (`processClientOrLeafAuthentication`).
//! - [`password`]: plain (constant-time) and bcrypt credentials, bcrypt
//!   verified off the shard threads; [`nkey`]: nonces and signatures.
//! - [`permissions`] and [`subjects`]: what an authenticated user may
//!   publish and subscribe to, and one connection's caches.
//!
//! The `Authorization` is `Send + Sync` and never changes: every shard holds
//! an `Arc` of it and a reload (SIGHUP, `crate::reload`) swaps that `Arc`;
//! [`recheck`] then decides what becomes of each connection.

pub mod config;
pub mod nkey;
pub mod password;
pub mod permissions;
pub mod recheck;
pub mod subjects;

use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::proto::connect::ConnectOptions;
use nkey::{PublicKey, SignatureError};
use password::Credential;
use permissions::Permissions;

/// nats-server `AUTH_TIMEOUT`: how long a connection may take to send CONNECT.
pub const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(2);

/// One user of a `users` list who logs in with a password.
#[derive(Debug)]
pub struct PasswordUser {
    pub password: Credential,
    pub permissions: Option<Arc<Permissions>>,
}

/// One user of a `users` list who logs in with an NKey.
#[derive(Debug)]
pub struct NkeyUser {
    pub key: PublicKey,
    pub permissions: Option<Arc<Permissions>>,
}

/// How clients prove who they are.
#[derive(Debug)]
pub enum Method {
    /// No authentication: anyone may connect, with every permission.
    Open,
    /// `token` / `--auth`: CONNECT `auth_token`.
    Token(Credential),
    /// `user` and `password` / `--user` and `--pass`.
    User { name: String, password: Credential },
    /// `users = [...]`: by name or NKey, each with its own permissions.
    Users {
        passwords: FxHashMap<String, PasswordUser>,
        nkeys: FxHashMap<String, NkeyUser>,
    },
}

/// The server's authentication settings (immutable; see the module comment).
#[derive(Debug)]
pub struct Authorization {
    pub method: Method,
    /// How long a connection may take to send CONNECT.
    pub timeout: Duration,
}

impl Default for Authorization {
    fn default() -> Self {
        Authorization {
            method: Method::Open,
            timeout: DEFAULT_AUTH_TIMEOUT,
        }
    }
}

/// Who a connection authenticated as (for logs; never a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// Authentication is off.
    Anonymous,
    Token,
    User(String),
    Nkey(String),
}

impl std::fmt::Display for Identity {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Anonymous => formatter.write_str("anonymous"),
            Identity::Token => formatter.write_str("token"),
            Identity::User(name) => write!(formatter, "User {name:?}"),
            Identity::Nkey(key) => write!(formatter, "Nkey {key:?}"),
        }
    }
}

/// A successful authentication.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub identity: Identity,
    /// `None`: the user may publish and subscribe to anything.
    pub permissions: Option<Arc<Permissions>>,
}

/// Why a CONNECT was refused: logged at warn with the client's address.
/// The client only sees `-ERR 'Authorization Violation'`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no credentials")]
    NoCredentials,
    #[error("wrong token")]
    WrongToken,
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    #[error("wrong password for user {0:?}")]
    WrongPassword(String),
    #[error("unknown nkey {0:?}")]
    UnknownNkey(String),
    #[error("nkey {0:?}: {1}")]
    Signature(String, SignatureError),
    #[error("{0}")]
    VerifierBusy(password::VerifyError),
}

/// A bcrypt hash to verify off the shard before the answer is known.
#[derive(Debug)]
pub struct PendingBcrypt {
    pub hash: Arc<str>,
    pub given: String,
    /// The answer if the password matches ...
    pub accepted: Authenticated,
    /// ... and if it does not.
    pub refused: Refusal,
}

/// What [`Authorization::authenticate`] decided.
#[derive(Debug)]
pub enum Outcome {
    Accepted(Authenticated),
    Refused(Refusal),
    Pending(PendingBcrypt),
}

impl Authorization {
    /// Whether clients must authenticate (INFO `auth_required`).
    pub fn required(&self) -> bool {
        !matches!(self.method, Method::Open)
    }

    /// Whether INFO carries a nonce to sign (NKey users exist).
    pub fn nonce_required(&self) -> bool {
        matches!(&self.method, Method::Users { nkeys, .. } if !nkeys.is_empty())
    }

    /// One line for the start-up log (no secrets).
    pub fn describe(&self) -> String {
        let timeout = self.timeout;
        match &self.method {
            Method::Open => "none (any client may connect)".to_string(),
            Method::Token(_) => format!("token, timeout {timeout:?}"),
            Method::User { name, .. } => format!("user {name:?}, timeout {timeout:?}"),
            Method::Users { passwords, nkeys } => format!(
                "{} users with passwords, {} with nkeys, timeout {timeout:?}",
                passwords.len(),
                nkeys.len()
            ),
        }
    }

    /// Whether a password or token is stored in plain text (nats-server
    /// warns: "Plaintext passwords detected, use nkeys or bcrypt").
    pub fn has_plain_passwords(&self) -> bool {
        match &self.method {
            Method::Open | Method::Token(_) => false,
            Method::User { password, .. } => !password.is_bcrypt(),
            Method::Users { passwords, .. } => {
                passwords.values().any(|user| !user.password.is_bcrypt())
            }
        }
    }

    /// Checks a CONNECT's credentials; `nonce` is the one this connection's
    /// INFO carried (empty when none was sent).
    pub fn authenticate(&self, options: &ConnectOptions, nonce: &[u8]) -> Outcome {
        match &self.method {
            Method::Open => Outcome::Accepted(Authenticated {
                identity: Identity::Anonymous,
                permissions: None,
            }),
            Method::Token(token) => check(
                token,
                options.auth_token.as_deref().unwrap_or(""),
                Authenticated {
                    identity: Identity::Token,
                    permissions: None,
                },
                Refusal::WrongToken,
            ),
            Method::User { name, password } => {
                let given = options.user.as_deref().unwrap_or("");
                if given != name {
                    return Outcome::Refused(if given.is_empty() {
                        Refusal::NoCredentials
                    } else {
                        Refusal::UnknownUser(given.to_string())
                    });
                }
                check(
                    password,
                    options.pass.as_deref().unwrap_or(""),
                    Authenticated {
                        identity: Identity::User(name.clone()),
                        permissions: None,
                    },
                    Refusal::WrongPassword(name.clone()),
                )
            }
            Method::Users { passwords, nkeys } => {
                authenticate_user(passwords, nkeys, options, nonce)
            }
        }
    }
}

/// nats-server's order for a users list: an NKey if NKey users exist and
/// the client sent one, else a user name.
fn authenticate_user(
    passwords: &FxHashMap<String, PasswordUser>,
    nkeys: &FxHashMap<String, NkeyUser>,
    options: &ConnectOptions,
    nonce: &[u8],
) -> Outcome {
    let given_key = options.nkey.as_deref().filter(|key| !key.is_empty());
    if let (false, Some(given_key)) = (nkeys.is_empty(), given_key) {
        let Some(user) = nkeys.get(given_key) else {
            return Outcome::Refused(Refusal::UnknownNkey(given_key.to_string()));
        };
        return match user.key.verify(nonce, options.sig.as_deref()) {
            Ok(()) => Outcome::Accepted(Authenticated {
                identity: Identity::Nkey(given_key.to_string()),
                permissions: user.permissions.clone(),
            }),
            Err(error) => Outcome::Refused(Refusal::Signature(given_key.to_string(), error)),
        };
    }
    let given_name = options.user.as_deref().unwrap_or("");
    if given_name.is_empty() || passwords.is_empty() {
        return Outcome::Refused(Refusal::NoCredentials);
    }
    let Some(user) = passwords.get(given_name) else {
        return Outcome::Refused(Refusal::UnknownUser(given_name.to_string()));
    };
    check(
        &user.password,
        options.pass.as_deref().unwrap_or(""),
        Authenticated {
            identity: Identity::User(given_name.to_string()),
            permissions: user.permissions.clone(),
        },
        Refusal::WrongPassword(given_name.to_string()),
    )
}

fn check(expected: &Credential, given: &str, accepted: Authenticated, refused: Refusal) -> Outcome {
    match expected {
        Credential::Bcrypt(hash) => Outcome::Pending(PendingBcrypt {
            hash: hash.clone(),
            given: given.to_string(),
            accepted,
            refused,
        }),
        Credential::Plain(_) if expected.matches_plain(given) => Outcome::Accepted(accepted),
        Credential::Plain(_) => Outcome::Refused(refused),
    }
}

impl PendingBcrypt {
    /// Verifies on the verifier threads and gives the final outcome.
    pub async fn resolve(self) -> Result<Authenticated, Refusal> {
        let verification =
            password::verify_bcrypt(self.hash, self.given).map_err(Refusal::VerifierBusy)?;
        if verification.await {
            Ok(self.accepted)
        } else {
            Err(self.refused)
        }
    }
}

#[cfg(test)]
#[path = "authorization_tests.rs"]
mod tests;
