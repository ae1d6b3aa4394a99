//! The `[authorization]` table of the TOML file and the `--user`, `--pass`
//! and `--auth` flags (nats-server's names), checked and compiled into an
//! [`Authorization`]. Keys follow nats-server's `authorization` block:
//!
//! ```toml
//! [authorization]
//! timeout = 2                     # seconds (1.5, or "1500ms")
//! # one of: token = "…" | user = "…" + password = "…" | users = [ … ]
//! users = [
//!   { user = "app", password = "$2a$11$…", permissions = { publish = ["orders.>"], subscribe = { allow = ["_INBOX.>"], deny = ["orders.secret"] } } },
//!   { nkey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", permissions = { publish = { deny = ["$JS.API.>"] }, allow_responses = true } },
//! ]
//! permissions = { … }             # default for users without their own
//! ```
//!
//! Every mistake is an error that names where it is
//! (`authorization.users[1].permissions.publish.allow[0]: …`), never a
//! silently ignored rule.

use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;

use super::nkey::PublicKey;
use super::password::Credential;
use super::permissions::{Permissions, ResponsePermission};
use super::subjects::SubjectSet;
use super::{Authorization, Method, NkeyUser, PasswordUser, DEFAULT_AUTH_TIMEOUT};

/// Most entries a `users` list may have.
pub const USERS_MAX: usize = 65_536;
/// Most subjects one allow or deny list may have.
pub const RULES_PER_LIST_MAX: usize = 4096;
/// Longest `timeout` accepted.
pub const AUTH_TIMEOUT_MAX: Duration = Duration::from_secs(3600);

/// A mistake in the authorization settings, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct AuthConfigError {
    pub path: String,
    pub message: String,
}

fn error(path: &str, message: impl Into<String>) -> AuthConfigError {
    AuthConfigError {
        path: path.to_string(),
        message: message.into(),
    }
}

/// The command-line credentials; each overrides the file's.
#[derive(Debug, Default, Clone)]
pub struct AuthFlags {
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
}

/// Reads the `[authorization]` table (if any) and the flags.
pub fn resolve(
    table: Option<&toml::Value>,
    flags: AuthFlags,
) -> Result<Authorization, AuthConfigError> {
    const PATH: &str = "authorization";
    let empty = toml::Table::new();
    let table = match table {
        None => &empty,
        Some(toml::Value::Table(table)) => table,
        Some(_) => return Err(error(PATH, "must be a table")),
    };
    let mut user = None;
    let mut password = None;
    let mut token = None;
    let mut timeout = DEFAULT_AUTH_TIMEOUT;
    let mut users = None;
    let mut default_permissions = None;
    for (key, value) in table {
        let path = format!("{PATH}.{key}");
        match key.as_str() {
            "user" | "username" => user = Some(string(&path, value)?),
            "password" | "pass" => password = Some(string(&path, value)?),
            "token" => token = Some(string(&path, value)?),
            "timeout" => timeout = parse_timeout(&path, value)?,
            "users" => users = Some(value),
            "permissions" | "default_permissions" | "default_permission" => {
                default_permissions = Some(Arc::new(parse_permissions(&path, value)?))
            }
            _ => return Err(error(&path, "unknown key")),
        }
    }
    user = flags.user.or(user);
    password = flags.password.or(password);
    token = flags.token.or(token);
    let method = match (user, password, token, users) {
        (None, None, None, None) => Method::Open,
        (None, None, Some(token), None) => {
            Method::Token(credential("authorization.token", &token)?)
        }
        (Some(name), Some(password), None, None) => {
            if name.is_empty() {
                return Err(error("authorization.user", "is empty"));
            }
            Method::User {
                name,
                password: credential("authorization.password", &password)?,
            }
        }
        (None, None, None, Some(users)) => {
            parse_users("authorization.users", users, default_permissions.as_ref())?
        }
        (_, _, Some(_), Some(_)) => {
            return Err(error(PATH, "cannot have a token and a users list"))
        }
        (_, _, Some(_), None) => {
            return Err(error(PATH, "cannot have a user/password and a token"))
        }
        (_, _, None, Some(_)) => {
            return Err(error(
                PATH,
                "cannot have a single user/password and a users list",
            ))
        }
        (Some(_), None, None, None) => {
            return Err(error(
                "authorization.password",
                "a user needs a password (--pass)",
            ))
        }
        (None, Some(_), None, None) => {
            return Err(error(
                "authorization.user",
                "a password needs a user (--user)",
            ))
        }
    };
    if default_permissions.is_some() && !matches!(method, Method::Users { .. }) {
        return Err(error(
            "authorization.permissions",
            "default permissions apply to `users` entries only",
        ));
    }
    Ok(Authorization { method, timeout })
}

fn string(path: &str, value: &toml::Value) -> Result<String, AuthConfigError> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| error(path, format!("must be a string, not {}", value.type_str())))
}

fn credential(path: &str, text: &str) -> Result<Credential, AuthConfigError> {
    Credential::parse(text).map_err(|reason| error(path, reason.to_string()))
}

/// Seconds (integer or fraction) or a duration string, as nats-server.
fn parse_timeout(path: &str, value: &toml::Value) -> Result<Duration, AuthConfigError> {
    let seconds = match value {
        toml::Value::Integer(seconds) => *seconds as f64,
        toml::Value::Float(seconds) => *seconds,
        toml::Value::String(text) => crate::duration::parse_duration(text)
            .map_err(|reason| error(path, reason.to_string()))?
            .as_secs_f64(),
        other => {
            return Err(error(
                path,
                format!("must be seconds or a duration, not {}", other.type_str()),
            ))
        }
    };
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(error(path, "must be positive"));
    }
    let timeout = Duration::from_secs_f64(seconds.min(AUTH_TIMEOUT_MAX.as_secs_f64() + 1.0));
    if timeout > AUTH_TIMEOUT_MAX {
        return Err(error(
            path,
            format!("at most {} seconds", AUTH_TIMEOUT_MAX.as_secs()),
        ));
    }
    Ok(timeout)
}

fn parse_users(
    path: &str,
    value: &toml::Value,
    default_permissions: Option<&Arc<Permissions>>,
) -> Result<Method, AuthConfigError> {
    let entries = value
        .as_array()
        .ok_or_else(|| error(path, "must be a list of user tables"))?;
    if entries.is_empty() {
        return Err(error(path, "is empty: nobody could connect"));
    }
    if entries.len() > USERS_MAX {
        return Err(error(path, format!("at most {USERS_MAX} users")));
    }
    let mut passwords = FxHashMap::default();
    let mut nkeys = FxHashMap::default();
    for (index, entry) in entries.iter().enumerate() {
        let path = format!("{path}[{index}]");
        let table = entry
            .as_table()
            .ok_or_else(|| error(&path, "must be a table"))?;
        let mut name = None;
        let mut password = None;
        let mut key = None;
        let mut permissions = None;
        for (field, value) in table {
            let path = format!("{path}.{field}");
            match field.as_str() {
                "user" | "username" => name = Some(string(&path, value)?),
                "password" | "pass" => password = Some(string(&path, value)?),
                "nkey" => key = Some(string(&path, value)?),
                "permissions" | "permission" | "authorization" => {
                    permissions = Some(Arc::new(parse_permissions(&path, value)?))
                }
                _ => return Err(error(&path, "unknown key")),
            }
        }
        let permissions = permissions.or_else(|| default_permissions.cloned());
        match (name, password, key) {
            (None, None, Some(key)) => {
                let key = PublicKey::parse_user(&key)
                    .map_err(|reason| error(&format!("{path}.nkey"), reason.to_string()))?;
                let text = key.as_str().to_string();
                if nkeys
                    .insert(text.clone(), NkeyUser { key, permissions })
                    .is_some()
                {
                    return Err(error(&path, format!("duplicate nkey {text:?}")));
                }
            }
            (_, _, Some(_)) => {
                return Err(error(
                    &path,
                    "nkey users do not take usernames or passwords",
                ))
            }
            (Some(name), Some(password), None) => {
                if name.is_empty() {
                    return Err(error(&format!("{path}.user"), "is empty"));
                }
                let password = credential(&format!("{path}.password"), &password)?;
                if passwords
                    .insert(
                        name.clone(),
                        PasswordUser {
                            password,
                            permissions,
                        },
                    )
                    .is_some()
                {
                    return Err(error(&path, format!("duplicate user {name:?}")));
                }
            }
            (Some(name), None, None) => {
                return Err(error(&path, format!("user {name:?} needs a password")))
            }
            (None, _, None) => return Err(error(&path, "a user entry needs `user` or `nkey`")),
        }
    }
    Ok(Method::Users { passwords, nkeys })
}

/// One permissions table (nats-server `parseUserPermissions`).
pub fn parse_permissions(path: &str, value: &toml::Value) -> Result<Permissions, AuthConfigError> {
    let table = value.as_table().ok_or_else(|| {
        error(
            path,
            "must be a table (publish, subscribe, allow_responses)",
        )
    })?;
    let mut permissions = Permissions::default();
    for (key, value) in table {
        let path = format!("{path}.{key}");
        match key.as_str() {
            "publish" | "pub" => {
                if let Some((allow, deny)) = parse_rules(&path, value, false)? {
                    permissions.publish_allow = allow;
                    permissions.publish_deny = deny;
                }
            }
            "subscribe" | "sub" => {
                if let Some((allow, deny)) = parse_rules(&path, value, true)? {
                    // nats-server: an empty subscribe allow list allows all.
                    permissions.subscribe_allow = allow.filter(|allow| !allow.is_empty());
                    permissions.subscribe_deny = deny;
                }
            }
            "allow_responses" | "publish_allow_responses" => {
                permissions.responses = parse_responses(&path, value)?
            }
            _ => {
                return Err(error(
                    &path,
                    "unknown key (publish, subscribe, allow_responses)",
                ))
            }
        }
    }
    if permissions.responses.is_some() && permissions.publish_allow.is_none() {
        // nats-server: responses turn the blanket publish allow off.
        permissions.publish_allow = Some(SubjectSet::new());
    }
    Ok(permissions)
}

type Rules = (Option<SubjectSet>, Option<SubjectSet>);

/// `"subject"`, `["a", "b"]` (both meaning allow) or `{ allow = …, deny = … }`;
/// `None` for an empty table (nats-server: no rules).
fn parse_rules(
    path: &str,
    value: &toml::Value,
    subscribe: bool,
) -> Result<Option<Rules>, AuthConfigError> {
    match value {
        toml::Value::String(_) | toml::Value::Array(_) => {
            Ok(Some((Some(parse_list(path, value, subscribe)?), None)))
        }
        toml::Value::Table(table) if table.is_empty() => Ok(None),
        toml::Value::Table(table) => {
            let mut allow = None;
            let mut deny = None;
            for (key, value) in table {
                let path = format!("{path}.{key}");
                match key.as_str() {
                    "allow" => allow = Some(parse_list(&path, value, subscribe)?),
                    "deny" => {
                        deny = Some(parse_list(&path, value, subscribe)?)
                            .filter(|deny| !deny.is_empty())
                    }
                    _ => return Err(error(&path, "unknown key (allow, deny)")),
                }
            }
            Ok(Some((allow, deny)))
        }
        other => Err(error(
            path,
            format!(
                "must be a subject, a list of subjects or a table with allow/deny, not {}",
                other.type_str()
            ),
        )),
    }
}

fn parse_list(
    path: &str,
    value: &toml::Value,
    subscribe: bool,
) -> Result<SubjectSet, AuthConfigError> {
    let items: Vec<&toml::Value> = match value {
        toml::Value::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    if items.len() > RULES_PER_LIST_MAX {
        return Err(error(
            path,
            format!("at most {RULES_PER_LIST_MAX} subjects"),
        ));
    }
    let mut set = SubjectSet::new();
    for (index, item) in items.iter().enumerate() {
        let item_path = if matches!(value, toml::Value::Array(_)) {
            format!("{path}[{index}]")
        } else {
            path.to_string()
        };
        let text = item.as_str().ok_or_else(|| {
            error(
                &item_path,
                format!("must be a subject string, not {}", item.type_str()),
            )
        })?;
        let inserted = if subscribe {
            set.insert_subscribe_rule(text)
        } else {
            set.insert_subject(text)
        };
        inserted.map_err(|reason| error(&item_path, reason.to_string()))?;
    }
    Ok(set)
}

/// `true`/`false` or `{ max = N, expires = "2m" }` (0 keeps the default,
/// a negative value means no limit, as nats-server).
fn parse_responses(
    path: &str,
    value: &toml::Value,
) -> Result<Option<ResponsePermission>, AuthConfigError> {
    let table = match value {
        toml::Value::Boolean(false) => return Ok(None),
        toml::Value::Boolean(true) => return Ok(Some(ResponsePermission::default())),
        toml::Value::Table(table) => table,
        other => {
            return Err(error(
                path,
                format!(
                    "must be true, false or a table (max, expires), not {}",
                    other.type_str()
                ),
            ))
        }
    };
    let mut responses = ResponsePermission::default();
    for (key, value) in table {
        let path = format!("{path}.{key}");
        match key.as_str() {
            "max" | "max_msgs" | "max_messages" | "max_responses" => {
                let max = value
                    .as_integer()
                    .ok_or_else(|| error(&path, "must be an integer"))?;
                match max {
                    0 => {}
                    max if max < 0 => responses.max_messages = None,
                    max => responses.max_messages = Some(max as u64),
                }
            }
            "expires" | "expiration" | "ttl" => match value {
                toml::Value::Integer(0) => {}
                toml::Value::Integer(seconds) if *seconds < 0 => responses.expires = None,
                toml::Value::Integer(seconds) => {
                    responses.expires = Some(Duration::from_secs(*seconds as u64))
                }
                toml::Value::String(text) => {
                    let expires = crate::duration::parse_duration(text)
                        .map_err(|reason| error(&path, reason.to_string()))?;
                    if !expires.is_zero() {
                        responses.expires = Some(expires);
                    }
                }
                other => {
                    return Err(error(
                        &path,
                        format!("must be a duration, not {}", other.type_str()),
                    ))
                }
            },
            _ => return Err(error(&path, "unknown key (max, expires)")),
        }
    }
    Ok(Some(responses))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
