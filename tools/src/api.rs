//! The JetStream API as raw JSON requests (`$JS.API.…`), so `--json`
//! output is the server's answer as sent (every field kept, none added)
//! and a config carries only what the operator gave: whatever is not
//! given takes the server's defaults.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::CliError;

/// Subjects of the API (jetstream-api.md §2), unless a domain or
/// `--js-api-prefix` says otherwise.
pub const API_PREFIX: &str = crate::connection::DEFAULT_API_PREFIX;

pub struct Api {
    pub client: async_nats::Client,
    pub timeout: Duration,
    /// `$JS.API`, `$JS.<domain>.API` or the operator's prefix.
    pub prefix: String,
    /// `--trace`: every request and answer on stderr.
    pub trace: bool,
}

impl Api {
    pub fn new(client: async_nats::Client, timeout: Duration) -> Api {
        Api {
            client,
            timeout,
            prefix: API_PREFIX.to_string(),
            trace: false,
        }
    }

    pub fn with_prefix(mut self, prefix: String) -> Api {
        self.prefix = prefix;
        self
    }

    pub fn with_trace(mut self, trace: bool) -> Api {
        self.trace = trace;
        self
    }

    /// The API subject `<prefix>.<suffix>`.
    pub fn subject(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.prefix)
    }

    /// An async-nats JetStream context on the same connection, prefix and
    /// timeout (KV, object store, publishes awaiting PubAcks).
    pub fn jetstream(&self) -> async_nats::jetstream::Context {
        async_nats::jetstream::ContextBuilder::new()
            .timeout(self.timeout)
            .api_prefix(self.prefix.clone())
            .build(self.client.clone())
    }

    /// One request to `$JS.API.<suffix>`; an answer carrying `error` is an
    /// [`CliError::Api`] naming `action`.
    pub async fn request(
        &self,
        action: &str,
        suffix: &str,
        body: &Value,
    ) -> Result<Value, CliError> {
        let subject = self.subject(suffix);
        let payload = if body.is_null() {
            bytes::Bytes::new()
        } else {
            bytes::Bytes::from(serde_json::to_vec(body).expect("JSON values serialise"))
        };
        if self.trace {
            eprintln!(">>> {subject}\n{}\n", String::from_utf8_lossy(&payload));
        }
        let request = async_nats::Request::new()
            .payload(payload)
            .timeout(Some(self.timeout));
        let message = match self.client.send_request(subject.clone(), request).await {
            Ok(message) => message,
            Err(error) => return Err(request_error(action, &subject, self.timeout, error)),
        };
        if self.trace {
            eprintln!(
                "<<< {subject}\n{}\n",
                String::from_utf8_lossy(&message.payload)
            );
        }
        let answer: Value =
            serde_json::from_slice(&message.payload).map_err(|error| CliError::BadAnswer {
                action: action.to_string(),
                detail: error.to_string(),
            })?;
        if let Some(error) = answer.get("error") {
            return Err(CliError::Api {
                action: action.to_string(),
                code: error["code"].as_i64().unwrap_or(0),
                err_code: error["err_code"].as_i64().unwrap_or(0),
                description: error["description"].as_str().unwrap_or("").to_string(),
            });
        }
        Ok(answer)
    }

    /// Every page of a NAMES or LIST answer's `field` (`streams`,
    /// `consumers`), at most `items_max` items.
    pub async fn paged(
        &self,
        action: &str,
        suffix: &str,
        mut body: Map<String, Value>,
        field: &str,
        items_max: usize,
    ) -> Result<Vec<Value>, CliError> {
        let mut items = Vec::new();
        loop {
            body.insert("offset".into(), items.len().into());
            let answer = self
                .request(action, suffix, &Value::Object(body.clone()))
                .await?;
            let page = answer[field].as_array().cloned().unwrap_or_default();
            let total = answer["total"].as_u64().unwrap_or(0) as usize;
            let empty = page.is_empty();
            items.extend(page);
            if empty || items.len() >= total || items.len() >= items_max {
                items.truncate(items_max);
                return Ok(items);
            }
        }
    }
}

pub fn request_error(
    action: &str,
    subject: &str,
    timeout: Duration,
    error: async_nats::RequestError,
) -> CliError {
    use async_nats::RequestErrorKind;
    match error.kind() {
        RequestErrorKind::NoResponders => CliError::NoResponders {
            action: action.to_string(),
            subject: subject.to_string(),
            hint: if subject.starts_with("$JS.") {
                " (JetStream is not enabled on the server, or the stream or consumer does not exist)"
            } else {
                ""
            },
        },
        RequestErrorKind::TimedOut => CliError::Timeout {
            action: action.to_string(),
            timeout,
        },
        _ => CliError::Request {
            action: action.to_string(),
            source: error,
        },
    }
}

/// The answer as `--json` prints it: the API's object without its `type`.
pub fn without_type(mut answer: Value) -> Value {
    if let Value::Object(map) = &mut answer {
        map.remove("type");
    }
    answer
}

/// Prints pretty JSON on stdout.
pub fn print_json(value: &Value) {
    crate::output::line(serde_json::to_string_pretty(value).expect("JSON values serialise"));
}

/// A names listing (`ls --names`): a JSON array with `--json`, else one
/// name per line.
pub fn print_names(names: Vec<Value>, json: bool) {
    if json {
        print_json(&Value::Array(names));
    } else {
        for name in names {
            crate::output::line(name.as_str().unwrap_or_default());
        }
    }
}
