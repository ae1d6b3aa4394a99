//! CONNECT options, parsed leniently as nats-server does: unknown fields are
//! ignored, JSON `null` is the same as absent, and absent `verbose`,
//! `pedantic` and `echo` default to true. Malformed JSON (or a field of the
//! wrong type) closes the connection without `-ERR`.

use serde::Deserialize;

/// Highest client protocol version (1 = async INFO and echo control).
pub const CLIENT_PROTOCOL_MAX: i64 = 1;

#[derive(Debug, Default, Clone, Deserialize)]
struct ConnectWire {
    verbose: Option<bool>,
    pedantic: Option<bool>,
    tls_required: Option<bool>,
    auth_token: Option<String>,
    user: Option<String>,
    pass: Option<String>,
    name: Option<String>,
    lang: Option<String>,
    version: Option<String>,
    protocol: Option<i64>,
    echo: Option<bool>,
    headers: Option<bool>,
    no_responders: Option<bool>,
    account: Option<String>,
    new_account: Option<bool>,
    nkey: Option<String>,
    sig: Option<String>,
    jwt: Option<String>,
}

/// The options a client connected with. `Debug` hides the credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    pub verbose: bool,
    pub pedantic: bool,
    pub tls_required: bool,
    pub auth_token: Option<String>,
    pub user: Option<String>,
    pub pass: Option<String>,
    pub name: String,
    pub lang: String,
    pub version: String,
    pub protocol: i64,
    pub echo: bool,
    pub headers: bool,
    pub no_responders: bool,
    pub account: Option<String>,
    pub new_account: bool,
    pub nkey: Option<String>,
    pub sig: Option<String>,
    pub jwt: Option<String>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |value: &Option<String>| value.as_ref().map(|_| "<redacted>");
        formatter
            .debug_struct("ConnectOptions")
            .field("verbose", &self.verbose)
            .field("pedantic", &self.pedantic)
            .field("tls_required", &self.tls_required)
            .field("auth_token", &hidden(&self.auth_token))
            .field("user", &self.user)
            .field("pass", &hidden(&self.pass))
            .field("name", &self.name)
            .field("lang", &self.lang)
            .field("version", &self.version)
            .field("protocol", &self.protocol)
            .field("echo", &self.echo)
            .field("headers", &self.headers)
            .field("no_responders", &self.no_responders)
            .field("account", &self.account)
            .field("new_account", &self.new_account)
            .field("nkey", &self.nkey)
            .field("sig", &hidden(&self.sig))
            .field("jwt", &hidden(&self.jwt))
            .finish()
    }
}

impl Default for ConnectOptions {
    /// What applies before (or without) CONNECT: nats-server's `defaultOpts`.
    fn default() -> Self {
        ConnectOptions {
            verbose: true,
            pedantic: true,
            tls_required: false,
            auth_token: None,
            user: None,
            pass: None,
            name: String::new(),
            lang: String::new(),
            version: String::new(),
            protocol: 0,
            echo: true,
            headers: false,
            no_responders: false,
            account: None,
            new_account: false,
            nkey: None,
            sig: None,
            jwt: None,
        }
    }
}

/// Why a CONNECT is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// Close silently.
    #[error("malformed CONNECT: {0}")]
    Malformed(String),
    /// `-ERR 'invalid client protocol'` + close.
    #[error("invalid client protocol")]
    InvalidProtocol,
    /// `-ERR 'no responders requires headers support'` + close.
    #[error("no responders requires headers support")]
    NoRespondersWithoutHeaders,
    /// `-ERR 'Authorization Violation'` + close.
    #[error("account designation is not allowed")]
    AccountDesignation,
}

impl ConnectOptions {
    /// Parses a CONNECT argument, starting from the defaults.
    pub fn parse(json: &[u8]) -> Result<ConnectOptions, ConnectError> {
        let wire: ConnectWire = serde_json::from_slice(json)
            .map_err(|error| ConnectError::Malformed(error.to_string()))?;
        let defaults = ConnectOptions::default();
        let options = ConnectOptions {
            verbose: wire.verbose.unwrap_or(defaults.verbose),
            pedantic: wire.pedantic.unwrap_or(defaults.pedantic),
            tls_required: wire.tls_required.unwrap_or(false),
            auth_token: wire.auth_token,
            user: wire.user,
            pass: wire.pass,
            name: wire.name.unwrap_or_default(),
            lang: wire.lang.unwrap_or_default(),
            version: wire.version.unwrap_or_default(),
            protocol: wire.protocol.unwrap_or(0),
            echo: wire.echo.unwrap_or(defaults.echo),
            headers: wire.headers.unwrap_or(false),
            no_responders: wire.no_responders.unwrap_or(false),
            account: wire.account.filter(|account| !account.is_empty()),
            new_account: wire.new_account.unwrap_or(false),
            nkey: wire.nkey,
            sig: wire.sig,
            jwt: wire.jwt,
        };
        Ok(options)
    }

    /// The checks nats-server applies after authentication, in its order.
    pub fn validate(&self) -> Result<(), ConnectError> {
        if self.new_account || self.account.is_some() {
            return Err(ConnectError::AccountDesignation);
        }
        if !(0..=CLIENT_PROTOCOL_MAX).contains(&self.protocol) {
            return Err(ConnectError::InvalidProtocol);
        }
        if self.no_responders && !self.headers {
            return Err(ConnectError::NoRespondersWithoutHeaders);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_when_absent() {
        let options = ConnectOptions::parse(b"{}").unwrap();
        assert!(options.verbose && options.pedantic && options.echo);
        assert!(!options.headers && !options.no_responders);
        assert_eq!(options.protocol, 0);
    }

    #[test]
    fn nulls_and_unknown_fields_are_ignored() {
        let json = br#"{"verbose":false,"pedantic":false,"jwt":null,"user":null,"pass":null,"sig":null,
            "echo":true,"headers":true,"no_responders":true,"protocol":1,"lang":"rust","version":"0.51.0",
            "tls_required":false,"name":null,"something_new":{"nested":[1,2]}}"#;
        let options = ConnectOptions::parse(json).unwrap();
        assert!(!options.verbose && !options.pedantic && options.echo && options.headers);
        assert_eq!(options.protocol, 1);
        assert_eq!(options.lang, "rust");
        options.validate().unwrap();
    }

    #[test]
    fn debug_hides_credentials() {
        let options =
            ConnectOptions::parse(br#"{"user":"ann","pass":"hunter2","auth_token":"t0k3n"}"#)
                .unwrap();
        let printed = format!("{options:?}");
        assert!(printed.contains("\"ann\""), "{printed}");
        assert!(
            !printed.contains("hunter2") && !printed.contains("t0k3n"),
            "{printed}"
        );
    }

    #[test]
    fn malformed_json_is_refused() {
        assert!(matches!(
            ConnectOptions::parse(b"{"),
            Err(ConnectError::Malformed(_))
        ));
        assert!(matches!(
            ConnectOptions::parse(b""),
            Err(ConnectError::Malformed(_))
        ));
        assert!(matches!(
            ConnectOptions::parse(br#"{"verbose":"yes"}"#),
            Err(ConnectError::Malformed(_))
        ));
    }

    #[test]
    fn validation_order_and_errors() {
        let parse = |json: &[u8]| ConnectOptions::parse(json).unwrap().validate();
        assert_eq!(
            parse(br#"{"protocol":2}"#),
            Err(ConnectError::InvalidProtocol)
        );
        assert_eq!(
            parse(br#"{"protocol":-1}"#),
            Err(ConnectError::InvalidProtocol)
        );
        assert_eq!(
            parse(br#"{"no_responders":true}"#),
            Err(ConnectError::NoRespondersWithoutHeaders)
        );
        assert_eq!(
            parse(br#"{"account":"A"}"#),
            Err(ConnectError::AccountDesignation)
        );
        assert_eq!(parse(br#"{"account":""}"#), Ok(()));
    }
}
