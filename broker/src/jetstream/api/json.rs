//! JSON as nats-server 2.15.1 reads and writes it for the JetStream API.
//!
//! Reading: request bodies are decoded the way nats-server's Go decoder does
//! (a `json.Decoder` with `DisallowUnknownFields`, looped until EOF, so
//! `{"a":1}{"b":2}` fills one struct), and every failure carries the Go text
//! the real server answers with inside `invalid JSON: …` (10025):
//! - syntax: `invalid character 'x' looking for beginning of value at offset 1`,
//!   `unexpected EOF`, `invalid escape sequence \`\x\` in string at offset 11`;
//! - unknown field: `json: unknown field "x"`;
//! - type mismatch: `json: cannot unmarshal string into Go struct field
//!   StreamConfigRequest.max_msgs of type int64`.
//!
//! Go semantics kept: keys match struct fields exactly or else ASCII
//! case-insensitively, duplicate keys are allowed (later ones win; objects
//! merge into structs and maps), `null` leaves a value as it was (and makes
//! an `Option` `None`), the first error in document order is reported.
//!
//! How: a Go-compatible scanner builds a small arena of nodes, and a serde
//! `Deserializer` walks it. Request types are ordinary `#[derive(Deserialize)]`
//! structs with `#[serde(default)]`; Go type names for messages come from a
//! [`GoSchema`] (table of non-obvious Go types by field path), and types whose
//! Go decoder is custom (enums, `time.Time`) ask for the raw JSON text through
//! [`RAW_JSON`] / [`RAW_TIME`] newtype names.
//!
//! Writing: strings with Go's escaping, `time.Time` as RFC 3339 with trimmed
//! nanoseconds, standard base64.
//!
//! Known differences from Go (edge cases no client sends): with duplicate
//! keys, only the last occurrence of an array/object is type-checked inside;
//! `unicode.IsPrint` is approximated when quoting characters in error texts.

use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};

use super::error::ApiError;
use crate::timestamp::Civil;

/// Newtype-struct name through which a type asks this module's deserializer
/// for the raw JSON text of a value (Go types with their own `UnmarshalJSON`,
/// e.g. `RetentionPolicy`, see the raw bytes).
pub const RAW_JSON: &str = "$tern::json::RawJson";

/// Newtype-struct name through which a `time.Time` field asks for its string:
/// anything but a JSON string (or `null`) is a type error naming `time.Time`.
pub const RAW_TIME: &str = "$tern::json::RawTime";

/// Go's `maxNestingDepth` for the JSON scanner.
pub const NESTING_DEPTH_MAX: usize = 10_000;

/// How deep the deserializer follows self-describing values (`deserialize_any`,
/// e.g. a `serde_json::Value` field) before giving up, so that no input can
/// exhaust the stack. Typed targets never get near it.
pub const DESERIALIZE_DEPTH_MAX: usize = 128;

/// Zero `time.Time` as Go writes it.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Go names used in decode error texts: the top-level struct (`server.<name>`
/// and `<name>.<field path>`) and, by field path, the Go type of fields whose
/// Rust type does not tell it (`time.Duration` vs `int64`, `int` vs `int64`,
/// slices of structs). Paths use `.` between JSON names, `*` for an array
/// index or map key: `sources.*.subject_transforms`.
#[derive(Debug, Clone, Copy)]
pub struct GoSchema {
    pub struct_name: &'static str,
    pub field_types: &'static [(&'static str, &'static str)],
}

/// A decode failure: the Go text (what follows `invalid JSON: `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl DecodeError {
    pub fn text(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        DecodeError(message.to_string())
    }
}

/// How a body is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeMode {
    /// nats-server's `unmarshalRequest`: a stream of values decoded into one
    /// struct, unknown fields rejected, syntax errors with `at offset N`.
    Strict,
    /// Go's `json.Unmarshal`: exactly one value (surrounding whitespace
    /// allowed), unknown fields ignored. DIRECT.GET and pull requests.
    Lenient,
}

/// Decodes a strict request body (see [`DecodeMode::Strict`]) into `T`,
/// naming the Go struct after the Rust type. Errors are `10025`.
pub fn decode_strict<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let full_name = std::any::type_name::<T>();
    let short_name = full_name.rsplit("::").next().unwrap_or(full_name);
    let schema = GoSchema {
        struct_name: "",
        field_types: &[],
    };
    decode_with_name::<T>(body, &schema, short_name, DecodeMode::Strict)
        .map_err(|error| ApiError::invalid_json(error.text()))
}

/// Decodes a strict request body with Go names from `schema`. Errors are
/// `10025` with nats-server's text.
pub fn decode_strict_with<T: DeserializeOwned>(
    body: &[u8],
    schema: &GoSchema,
) -> Result<T, ApiError> {
    decode(body, schema, DecodeMode::Strict).map_err(|error| ApiError::invalid_json(error.text()))
}

/// Decodes `body` in `mode`; the error is the bare Go text.
pub fn decode<T: DeserializeOwned>(
    body: &[u8],
    schema: &GoSchema,
    mode: DecodeMode,
) -> Result<T, DecodeError> {
    decode_with_name(body, schema, schema.struct_name, mode)
}

fn decode_with_name<T: DeserializeOwned>(
    body: &[u8],
    schema: &GoSchema,
    struct_name: &str,
    mode: DecodeMode,
) -> Result<T, DecodeError> {
    let mut document = Document {
        body,
        nodes: Vec::new(),
    };
    let context = Context {
        schema,
        struct_name,
        strict: mode == DecodeMode::Strict,
    };
    let mut scanner = Scanner {
        body,
        position: 0,
        with_offsets: mode == DecodeMode::Strict,
    };
    match mode {
        DecodeMode::Lenient => {
            let root = match scanner.next_value(&mut document)? {
                Some(root) => root,
                None => return Err(DecodeError("unexpected end of JSON input".into())),
            };
            scanner.skip_whitespace();
            if let Some(character) = scanner.character_at(scanner.position) {
                return Err(DecodeError(format!(
                    "invalid character {} after top-level value",
                    quote_character(character)
                )));
            }
            deserialize_layers(&document, &context, vec![root])
        }
        DecodeMode::Strict => {
            // Each value is decoded (and its errors reported) before the
            // next one is scanned, as Go's Decoder loop does.
            let mut roots = Vec::new();
            let mut last = None;
            while let Some(root) = scanner.next_value(&mut document)? {
                last = Some(deserialize_layers::<T>(&document, &context, vec![root])?);
                roots.push(root);
            }
            match (roots.len(), last) {
                (1, Some(value)) => Ok(value),
                (0, _) => deserialize_layers(&document, &context, Vec::new()),
                _ => deserialize_layers(&document, &context, roots),
            }
        }
    }
}

fn deserialize_layers<T: DeserializeOwned>(
    document: &Document<'_>,
    context: &Context<'_>,
    layers: Vec<usize>,
) -> Result<T, DecodeError> {
    T::deserialize(Layers {
        document,
        context,
        layers,
        path: Vec::new(),
    })
}

/// nats-server's `isEmptyRequest`: an empty body, `{}`, or any single JSON
/// object with no keys (surrounding whitespace allowed). Whitespace alone,
/// `null` and `[]` are not empty (verified against nats-server 2.15.1).
pub fn is_empty_request(body: &[u8]) -> bool {
    if body.is_empty() || body == b"{}" {
        return true;
    }
    let mut document = Document {
        body,
        nodes: Vec::new(),
    };
    let mut scanner = Scanner {
        body,
        position: 0,
        with_offsets: false,
    };
    let Ok(Some(root)) = scanner.next_value(&mut document) else {
        return false;
    };
    scanner.skip_whitespace();
    if scanner.position != body.len() {
        return false;
    }
    matches!(&document.nodes[root].kind, NodeKind::Object(members) if members.is_empty())
}

/// nats-server's `isJSONObjectOrArray`: whether the first non-whitespace
/// byte is `{` or `[`. INFO, NAMES, LIST and PURGE only decode such bodies
/// and ignore any other body.
pub fn is_object_or_array(body: &[u8]) -> bool {
    body.iter()
        .find(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|byte| matches!(byte, b'{' | b'['))
}

// ---------------------------------------------------------------------------
// Document: an arena of nodes, so dropping deep input never recurses.

struct Document<'a> {
    body: &'a [u8],
    nodes: Vec<Node>,
}

struct Node {
    kind: NodeKind,
    start: usize,
    end: usize,
}

enum NodeKind {
    Null,
    Bool(bool),
    Number,
    String(String),
    Array(Vec<usize>),
    Object(Vec<(String, usize)>),
}

impl NodeKind {
    /// The word Go uses for a JSON value's kind in type errors.
    fn go_kind(&self) -> &'static str {
        match self {
            NodeKind::Null => "null",
            NodeKind::Bool(_) => "bool",
            NodeKind::Number => "number",
            NodeKind::String(_) => "string",
            NodeKind::Array(_) => "array",
            NodeKind::Object(_) => "object",
        }
    }
}

impl Document<'_> {
    fn raw(&self, node: usize) -> Cow<'_, str> {
        let node = &self.nodes[node];
        String::from_utf8_lossy(&self.body[node.start..node.end])
    }

    fn push(&mut self, kind: NodeKind, start: usize, end: usize) -> usize {
        self.nodes.push(Node { kind, start, end });
        self.nodes.len() - 1
    }
}

// ---------------------------------------------------------------------------
// Scanner: Go's JSON grammar and error texts.

struct Scanner<'a> {
    body: &'a [u8],
    position: usize,
    /// nats-server appends ` at offset N` to syntax errors in the strict path.
    with_offsets: bool,
}

enum Frame {
    Array(usize),
    Object(usize),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    ValueOrArrayEnd,
    KeyOrObjectEnd,
    Key,
    Colon,
    CommaOrEnd,
}

fn unexpected_eof() -> DecodeError {
    DecodeError("unexpected EOF".into())
}

impl Scanner<'_> {
    fn skip_whitespace(&mut self) {
        while let Some(byte) = self.body.get(self.position) {
            if !matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.position += 1;
        }
    }

    /// The character starting at `index` and its encoded length; an invalid
    /// UTF-8 byte is returned as itself with length 1.
    fn character_at(&self, index: usize) -> Option<Character> {
        let rest = self.body.get(index..)?;
        let first = *rest.first()?;
        if first < 0x80 {
            return Some(Character::Valid(first as char, 1));
        }
        let width = match first {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return Some(Character::Invalid(first)),
        };
        match rest.get(..width).map(std::str::from_utf8) {
            Some(Ok(text)) => text
                .chars()
                .next()
                .map(|character| Character::Valid(character, width)),
            _ => Some(Character::Invalid(first)),
        }
    }

    /// `invalid character 'c' <context>` for the character at `index`, with
    /// the offset just past it.
    fn invalid_character(&self, index: usize, context: &str) -> DecodeError {
        let character = self.character_at(index).unwrap_or(Character::Invalid(b'?'));
        let end = index + character.width();
        self.syntax_error(
            format!("invalid character {} {context}", quote_character(character)),
            end,
        )
    }

    fn syntax_error(&self, text: String, offset: usize) -> DecodeError {
        if self.with_offsets {
            DecodeError(format!("{text} at offset {offset}"))
        } else {
            DecodeError(text)
        }
    }

    /// Scans the next top-level value into `document`; `None` at the end of
    /// the input (only whitespace left).
    fn next_value(&mut self, document: &mut Document<'_>) -> Result<Option<usize>, DecodeError> {
        self.skip_whitespace();
        if self.position >= self.body.len() {
            return Ok(None);
        }
        let mut stack: Vec<Frame> = Vec::new();
        let mut pending_keys: Vec<String> = Vec::new();
        let mut expect = Expect::Value;
        loop {
            self.skip_whitespace();
            let Some(&byte) = self.body.get(self.position) else {
                return Err(unexpected_eof());
            };
            let completed = match expect {
                Expect::Value | Expect::ValueOrArrayEnd => {
                    if expect == Expect::ValueOrArrayEnd && byte == b']' {
                        self.position += 1;
                        Some(self.close(document, &mut stack))
                    } else {
                        match byte {
                            b'{' | b'[' => {
                                if stack.len() >= NESTING_DEPTH_MAX {
                                    return Err(self.syntax_error(
                                        "exceeded max depth".into(),
                                        self.position + 1,
                                    ));
                                }
                                let start = self.position;
                                self.position += 1;
                                if byte == b'{' {
                                    let node =
                                        document.push(NodeKind::Object(Vec::new()), start, start);
                                    stack.push(Frame::Object(node));
                                    expect = Expect::KeyOrObjectEnd;
                                } else {
                                    let node =
                                        document.push(NodeKind::Array(Vec::new()), start, start);
                                    stack.push(Frame::Array(node));
                                    expect = Expect::ValueOrArrayEnd;
                                }
                                None
                            }
                            b'"' => {
                                let start = self.position;
                                let text = self.scan_string()?;
                                Some(document.push(NodeKind::String(text), start, self.position))
                            }
                            b'-' | b'0'..=b'9' => {
                                let start = self.position;
                                self.scan_number()?;
                                Some(document.push(NodeKind::Number, start, self.position))
                            }
                            b't' | b'f' | b'n' => {
                                let start = self.position;
                                let kind = self.scan_literal()?;
                                Some(document.push(kind, start, self.position))
                            }
                            _ => {
                                return Err(self.invalid_character(
                                    self.position,
                                    "looking for beginning of value",
                                ))
                            }
                        }
                    }
                }
                Expect::KeyOrObjectEnd | Expect::Key => {
                    if expect == Expect::KeyOrObjectEnd && byte == b'}' {
                        self.position += 1;
                        Some(self.close(document, &mut stack))
                    } else if byte == b'"' {
                        pending_keys.push(self.scan_string()?);
                        expect = Expect::Colon;
                        None
                    } else {
                        return Err(self.invalid_character(
                            self.position,
                            "looking for beginning of object key string",
                        ));
                    }
                }
                Expect::Colon => {
                    if byte != b':' {
                        return Err(self.invalid_character(self.position, "after object key"));
                    }
                    self.position += 1;
                    expect = Expect::Value;
                    None
                }
                Expect::CommaOrEnd => match (stack.last(), byte) {
                    (Some(Frame::Array(_)), b',') => {
                        self.position += 1;
                        expect = Expect::Value;
                        None
                    }
                    (Some(Frame::Object(_)), b',') => {
                        self.position += 1;
                        expect = Expect::Key;
                        None
                    }
                    (Some(Frame::Array(_)), b']') | (Some(Frame::Object(_)), b'}') => {
                        self.position += 1;
                        Some(self.close(document, &mut stack))
                    }
                    (Some(Frame::Array(_)), _) => {
                        return Err(self.invalid_character(self.position, "after array element"))
                    }
                    _ => {
                        return Err(
                            self.invalid_character(self.position, "after object key:value pair")
                        )
                    }
                },
            };
            let Some(node) = completed else {
                continue;
            };
            // Attach the completed value to its container, or finish.
            match stack.last() {
                None => return Ok(Some(node)),
                Some(Frame::Array(array)) => {
                    if let NodeKind::Array(elements) = &mut document.nodes[*array].kind {
                        elements.push(node);
                    }
                }
                Some(Frame::Object(object)) => {
                    let key = pending_keys.pop().unwrap_or_default();
                    if let NodeKind::Object(members) = &mut document.nodes[*object].kind {
                        members.push((key, node));
                    }
                }
            }
            expect = Expect::CommaOrEnd;
        }
    }

    /// Closes the innermost container and returns its node.
    fn close(&mut self, document: &mut Document<'_>, stack: &mut Vec<Frame>) -> usize {
        let node = match stack.pop() {
            Some(Frame::Array(node)) | Some(Frame::Object(node)) => node,
            None => unreachable!("close without an open container"),
        };
        document.nodes[node].end = self.position;
        node
    }

    /// Scans a string starting at the opening quote; returns its text with
    /// escapes decoded and invalid UTF-8 replaced by U+FFFD.
    fn scan_string(&mut self) -> Result<String, DecodeError> {
        assert_eq!(self.body.get(self.position), Some(&b'"'));
        self.position += 1;
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            let Some(&byte) = self.body.get(self.position) else {
                return Err(unexpected_eof());
            };
            match byte {
                b'"' => {
                    self.position += 1;
                    return Ok(match String::from_utf8(bytes) {
                        Ok(text) => text,
                        Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
                    });
                }
                b'\\' => self.scan_escape(&mut bytes)?,
                0x00..=0x1F => return Err(self.invalid_character(self.position, "in string")),
                _ => {
                    bytes.push(byte);
                    self.position += 1;
                }
            }
        }
    }

    fn scan_escape(&mut self, bytes: &mut Vec<u8>) -> Result<(), DecodeError> {
        let backslash = self.position;
        let Some(&kind) = self.body.get(backslash + 1) else {
            return Err(unexpected_eof());
        };
        let simple = match kind {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(0x08),
            b'f' => Some(0x0C),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            _ => None,
        };
        if let Some(byte) = simple {
            bytes.push(byte);
            self.position = backslash + 2;
            return Ok(());
        }
        if kind != b'u' {
            // Go shows the backslash and the next byte only.
            return Err(self.invalid_escape(backslash, 2));
        }
        let first = self.scan_hex4(backslash)?;
        self.position = backslash + 6;
        let mut character = char::from_u32(u32::from(first));
        if (0xD800..0xDC00).contains(&first) {
            // A high surrogate pairs with a following `\uDC00`–`\uDFFF`.
            if self.body.get(self.position..self.position + 2) == Some(b"\\u") {
                let low = self.scan_hex4(self.position)?;
                if (0xDC00..0xE000).contains(&low) {
                    let combined =
                        0x10000 + ((u32::from(first) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                    character = char::from_u32(combined);
                    self.position += 6;
                }
            }
        }
        let character = character.unwrap_or(char::REPLACEMENT_CHARACTER);
        let mut buffer = [0u8; 4];
        bytes.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
        Ok(())
    }

    /// The four hex digits of a `\uXXXX` escape starting at `backslash`.
    fn scan_hex4(&self, backslash: usize) -> Result<u16, DecodeError> {
        let window_end = (backslash + 6).min(self.body.len());
        let digits = &self.body[backslash + 2..window_end];
        if digits.iter().any(|byte| !byte.is_ascii_hexdigit()) {
            return Err(self.invalid_escape(backslash, window_end - backslash));
        }
        if digits.len() < 4 {
            return Err(unexpected_eof());
        }
        let text = std::str::from_utf8(digits).unwrap_or("0");
        Ok(u16::from_str_radix(text, 16).unwrap_or(0))
    }

    /// `invalid escape sequence \`\x\` in string`; a sequence that is not
    /// valid UTF-8 (a multi-byte character cut short) is written with `%q`.
    fn invalid_escape(&self, backslash: usize, length: usize) -> DecodeError {
        let end = (backslash + length).min(self.body.len());
        let bytes = &self.body[backslash..end];
        let sequence = match std::str::from_utf8(bytes) {
            Ok(text) => format!("`{text}`"),
            Err(_) => go_quote_bytes(bytes),
        };
        self.syntax_error(format!("invalid escape sequence {sequence} in string"), end)
    }

    /// Scans a number (Go's grammar: no leading zeros, `+` or bare `.`).
    fn scan_number(&mut self) -> Result<(), DecodeError> {
        let digit_at = |scanner: &Self, index: usize| {
            scanner
                .body
                .get(index)
                .is_some_and(|byte| byte.is_ascii_digit())
        };
        if self.body[self.position] == b'-' {
            self.position += 1;
        }
        self.expect_digit()?;
        if self.body[self.position] == b'0' {
            self.position += 1;
        } else {
            while digit_at(self, self.position) {
                self.position += 1;
            }
        }
        if self.body.get(self.position) == Some(&b'.') {
            self.position += 1;
            self.expect_digit()?;
            while digit_at(self, self.position) {
                self.position += 1;
            }
        }
        if matches!(self.body.get(self.position), Some(b'e' | b'E')) {
            self.position += 1;
            if matches!(self.body.get(self.position), Some(b'+' | b'-')) {
                self.position += 1;
            }
            self.expect_digit()?;
            while digit_at(self, self.position) {
                self.position += 1;
            }
        }
        Ok(())
    }

    fn expect_digit(&self) -> Result<(), DecodeError> {
        match self.body.get(self.position) {
            None => Err(unexpected_eof()),
            Some(byte) if byte.is_ascii_digit() => Ok(()),
            Some(_) => Err(self.invalid_character(self.position, "in numeric literal")),
        }
    }

    fn scan_literal(&mut self) -> Result<NodeKind, DecodeError> {
        let (word, kind): (&[u8], NodeKind) = match self.body[self.position] {
            b't' => (b"true", NodeKind::Bool(true)),
            b'f' => (b"false", NodeKind::Bool(false)),
            _ => (b"null", NodeKind::Null),
        };
        let name = std::str::from_utf8(word).unwrap_or("null");
        for (index, &expected) in word.iter().enumerate().skip(1) {
            let at = self.position + index;
            match self.body.get(at) {
                None => return Err(unexpected_eof()),
                Some(&byte) if byte == expected => {}
                Some(_) => {
                    return Err(self.invalid_character(
                        at,
                        &format!("in literal {name} (expecting '{}')", expected as char),
                    ))
                }
            }
        }
        self.position += word.len();
        Ok(kind)
    }
}

#[derive(Clone, Copy)]
enum Character {
    Valid(char, usize),
    Invalid(u8),
}

impl Character {
    fn width(self) -> usize {
        match self {
            Character::Valid(_, width) => width,
            Character::Invalid(_) => 1,
        }
    }
}

/// Go's `quoteChar`: the character between single quotes, escaped as
/// `strconv.Quote` does; `'` and `"` special-cased.
fn quote_character(character: Character) -> String {
    match character {
        Character::Invalid(byte) => format!("'\\x{byte:02x}'"),
        Character::Valid('\'', _) => "'\\''".into(),
        Character::Valid('"', _) => "'\"'".into(),
        Character::Valid('\\', _) => "'\\\\'".into(),
        Character::Valid(character, _) => {
            let mut out = String::from("'");
            push_go_quoted_char(&mut out, character);
            out.push('\'');
            out
        }
    }
}

/// Go's `strconv.Quote`.
pub fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            _ => push_go_quoted_char(&mut out, character),
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.Quote` of raw bytes (invalid UTF-8 as `\xNN`).
fn go_quote_bytes(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => go_quote(text),
        Err(_) => {
            let mut out = String::from("\"");
            for chunk in bytes.utf8_chunks() {
                let quoted = go_quote(chunk.valid());
                out.push_str(&quoted[1..quoted.len() - 1]);
                for byte in chunk.invalid() {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
            }
            out.push('"');
            out
        }
    }
}

fn push_go_quoted_char(out: &mut String, character: char) {
    match character {
        '\u{07}' => out.push_str("\\a"),
        '\u{08}' => out.push_str("\\b"),
        '\u{0C}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{0B}' => out.push_str("\\v"),
        _ if is_go_printable(character) => out.push(character),
        _ if (character as u32) < 0x20 || character == '\u{7F}' => {
            out.push_str(&format!("\\x{:02x}", character as u32));
        }
        _ if (character as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", character as u32)),
        _ => out.push_str(&format!("\\U{:08x}", character as u32)),
    }
}

/// An approximation of Go's `unicode.IsPrint` without Unicode tables:
/// controls, separators other than ASCII space, common format characters
/// and private-use characters are not printable.
fn is_go_printable(character: char) -> bool {
    let code = character as u32;
    if character == ' ' {
        return true;
    }
    !(character.is_control()
        || matches!(
            code,
            0x00A0
                | 0x00AD
                | 0x034F
                | 0x061C
                | 0x1680
                | 0x180E
                | 0x2000..=0x200F
                | 0x2028..=0x202F
                | 0x205F..=0x206F
                | 0x3000
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0xE000..=0xF8FF
                | 0xF0000..=0x10FFFF
        ))
}

// ---------------------------------------------------------------------------
// Deserializer over one or more layers of the same value (duplicate keys,
// or the stream of top-level values), in document order.

struct Context<'s> {
    schema: &'s GoSchema,
    struct_name: &'s str,
    strict: bool,
}

#[derive(Clone)]
enum Segment {
    Field(&'static str),
    Key(String),
    Index(usize),
}

struct Layers<'d, 'a> {
    document: &'d Document<'a>,
    context: &'d Context<'d>,
    /// Node indices, in document order. Empty means "absent".
    layers: Vec<usize>,
    path: Vec<Segment>,
}

impl<'d, 'a> Layers<'d, 'a> {
    fn kind(&self, node: usize) -> &'d NodeKind {
        &self.document.nodes[node].kind
    }

    fn child(&self, layers: Vec<usize>, segment: Segment) -> Layers<'d, 'a> {
        let mut path = self.path.clone();
        path.push(segment);
        Layers {
            document: self.document,
            context: self.context,
            layers,
            path,
        }
    }

    /// Non-null layers after the last `null` (what a Go pointer, map or
    /// slice ends up decoding).
    fn after_last_null(&self) -> Vec<usize> {
        let start = self
            .layers
            .iter()
            .rposition(|&node| matches!(self.kind(node), NodeKind::Null))
            .map_or(0, |index| index + 1);
        self.layers[start..].to_vec()
    }

    fn last_non_null(&self) -> Option<usize> {
        self.layers
            .iter()
            .rev()
            .copied()
            .find(|&node| !matches!(self.kind(node), NodeKind::Null))
    }

    fn path_text(&self) -> String {
        let mut text = String::new();
        for segment in &self.path {
            if !text.is_empty() {
                text.push('.');
            }
            match segment {
                Segment::Field(name) => text.push_str(name),
                Segment::Key(key) => text.push_str(key),
                Segment::Index(index) => text.push_str(&index.to_string()),
            }
        }
        text
    }

    fn path_pattern(&self) -> String {
        let mut text = String::new();
        for segment in &self.path {
            if !text.is_empty() {
                text.push('.');
            }
            match segment {
                Segment::Field(name) => text.push_str(name),
                Segment::Key(_) | Segment::Index(_) => text.push('*'),
            }
        }
        text
    }

    /// The Go type at this path: the schema's entry, else `default`.
    fn go_type(&self, default: &str) -> String {
        let pattern = self.path_pattern();
        self.context
            .schema
            .field_types
            .iter()
            .find(|(path, _)| *path == pattern)
            .map_or_else(|| default.to_string(), |(_, go_type)| go_type.to_string())
    }

    fn top_struct_name(&self) -> &str {
        if self.context.struct_name.is_empty() {
            self.context.schema.struct_name
        } else {
            self.context.struct_name
        }
    }

    /// `json: cannot unmarshal <kind> into … of type <go_type>`.
    fn type_error(&self, kind_text: String, go_type: &str) -> DecodeError {
        let go_type = self.go_type(go_type);
        if self.path.is_empty() {
            return DecodeError(format!(
                "json: cannot unmarshal {kind_text} into Go value of type server.{}",
                self.top_struct_name()
            ));
        }
        let prefix = match self.path.last() {
            Some(Segment::Index(_)) => "",
            _ => "Go struct field ",
        };
        DecodeError(format!(
            "json: cannot unmarshal {kind_text} into {prefix}{}.{} of type {go_type}",
            self.top_struct_name(),
            self.path_text()
        ))
    }

    fn kind_error(&self, node: usize, go_type: &str) -> DecodeError {
        self.type_error(self.kind(node).go_kind().to_string(), go_type)
    }

    /// Checks every layer is `null` or a number that parses with `parse`;
    /// returns the last parsed value.
    fn number<T: Copy>(
        &self,
        go_type: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>, DecodeError> {
        let mut value = None;
        for &node in &self.layers {
            match self.kind(node) {
                NodeKind::Null => {}
                NodeKind::Number => {
                    let raw = self.document.raw(node);
                    match parse(&raw) {
                        Some(parsed) => value = Some(parsed),
                        None => return Err(self.type_error(format!("number {raw}"), go_type)),
                    }
                }
                _ => return Err(self.kind_error(node, go_type)),
            }
        }
        Ok(value)
    }

    fn signed(&self, go_type: &str, minimum: i64, maximum: i64) -> Result<i64, DecodeError> {
        let value = self.number(go_type, |raw| {
            parse_go_int(raw).filter(|value| (minimum..=maximum).contains(value))
        })?;
        Ok(value.unwrap_or(0))
    }

    fn unsigned(&self, go_type: &str, maximum: u64) -> Result<u64, DecodeError> {
        let value = self.number(go_type, |raw| {
            parse_go_uint(raw).filter(|value| *value <= maximum)
        })?;
        Ok(value.unwrap_or(0))
    }

    fn string(&self) -> Result<String, DecodeError> {
        let mut value = String::new();
        for &node in &self.layers {
            match self.kind(node) {
                NodeKind::Null => {}
                NodeKind::String(text) => value = text.clone(),
                _ => return Err(self.kind_error(node, "string")),
            }
        }
        Ok(value)
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)` on a JSON number literal.
fn parse_go_int(raw: &str) -> Option<i64> {
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    raw.parse::<i64>().ok()
}

/// Go's `strconv.ParseUint(s, 10, 64)` on a JSON number literal.
fn parse_go_uint(raw: &str) -> Option<u64> {
    if raw.is_empty() || !raw.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    raw.parse::<u64>().ok()
}

macro_rules! deserialize_signed {
    ($method:ident, $visit:ident, $type:ty, $go:literal) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
            let value = self.signed($go, i64::from(<$type>::MIN), i64::from(<$type>::MAX))?;
            visitor.$visit(value as $type)
        }
    };
}

macro_rules! deserialize_unsigned {
    ($method:ident, $visit:ident, $type:ty, $go:literal) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
            let value = self.unsigned($go, u64::from(<$type>::MAX))?;
            visitor.$visit(value as $type)
        }
    };
}

impl<'de> de::Deserializer<'de> for Layers<'_, '_> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        if self.path.len() >= DESERIALIZE_DEPTH_MAX {
            return Err(DecodeError("exceeded max depth".into()));
        }
        let Some(node) = self.last_non_null() else {
            return visitor.visit_unit();
        };
        match self.kind(node) {
            NodeKind::Null => visitor.visit_unit(),
            NodeKind::Bool(value) => visitor.visit_bool(*value),
            NodeKind::Number => {
                let raw = self.document.raw(node);
                if let Some(value) = parse_go_uint(&raw) {
                    visitor.visit_u64(value)
                } else if let Some(value) = parse_go_int(&raw) {
                    visitor.visit_i64(value)
                } else {
                    visitor.visit_f64(raw.parse::<f64>().unwrap_or(f64::NAN))
                }
            }
            NodeKind::String(text) => visitor.visit_string(text.clone()),
            NodeKind::Array(_) => self.deserialize_seq(visitor),
            NodeKind::Object(_) => self.deserialize_map(visitor),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let mut value = false;
        for &node in &self.layers {
            match self.kind(node) {
                NodeKind::Null => {}
                NodeKind::Bool(parsed) => value = *parsed,
                _ => return Err(self.kind_error(node, "bool")),
            }
        }
        visitor.visit_bool(value)
    }

    deserialize_signed!(deserialize_i8, visit_i8, i8, "int8");
    deserialize_signed!(deserialize_i16, visit_i16, i16, "int16");
    deserialize_signed!(deserialize_i32, visit_i32, i32, "int32");
    deserialize_signed!(deserialize_i64, visit_i64, i64, "int64");
    deserialize_unsigned!(deserialize_u8, visit_u8, u8, "uint8");
    deserialize_unsigned!(deserialize_u16, visit_u16, u16, "uint16");
    deserialize_unsigned!(deserialize_u32, visit_u32, u32, "uint32");
    deserialize_unsigned!(deserialize_u64, visit_u64, u64, "uint64");

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let value = self.number("float64", |raw| raw.parse::<f64>().ok())?;
        visitor.visit_f64(value.unwrap_or(0.0))
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.deserialize_string(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.deserialize_string(visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_string(self.string()?)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.deserialize_string(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.deserialize_string(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let layers = self.after_last_null();
        if layers.is_empty() {
            // `null` (or nothing): a Go pointer stays nil.
            return visitor.visit_none();
        }
        visitor.visit_some(Layers {
            document: self.document,
            context: self.context,
            layers,
            path: self.path,
        })
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        if name == RAW_JSON {
            let raw = match self.layers.last() {
                Some(&node) => self.document.raw(node).into_owned(),
                None => "null".to_string(),
            };
            return visitor.visit_string(raw);
        }
        if name == RAW_TIME {
            let mut value = None;
            for &node in &self.layers {
                match self.kind(node) {
                    NodeKind::Null => {}
                    NodeKind::String(text) => value = Some(text.clone()),
                    _ => return Err(self.kind_error(node, "time.Time")),
                }
            }
            return match value {
                Some(text) => visitor.visit_string(text),
                None => visitor.visit_unit(),
            };
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        for &node in &self.layers {
            match self.kind(node) {
                NodeKind::Null | NodeKind::Array(_) => {}
                _ => return Err(self.kind_error(node, "[]string")),
            }
        }
        // Go resets a slice on each array it decodes: the last array wins.
        let elements: Vec<usize> = match self.after_last_null().last() {
            Some(&node) => match self.kind(node) {
                NodeKind::Array(elements) => elements.clone(),
                _ => Vec::new(),
            },
            None => Vec::new(),
        };
        visitor.visit_seq(SequenceAccess {
            parent: &self,
            elements,
            index: 0,
        })
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _length: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _length: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        for &node in &self.layers {
            match self.kind(node) {
                NodeKind::Null | NodeKind::Object(_) => {}
                _ => return Err(self.kind_error(node, "map[string]string")),
            }
        }
        // Maps merge across layers after the last null; a repeated key keeps
        // its first position and its last value.
        let mut entries: Vec<(String, usize)> = Vec::new();
        for node in self.after_last_null() {
            if let NodeKind::Object(members) = self.kind(node) {
                for (key, value) in members {
                    match entries.iter_mut().find(|(existing, _)| existing == key) {
                        Some(entry) => entry.1 = *value,
                        None => entries.push((key.clone(), *value)),
                    }
                }
            }
        }
        visitor.visit_map(MapEntries {
            parent: &self,
            entries: entries.into_iter(),
            value: None,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        let go_type = format!("server.{name}");
        let mut objects = Vec::new();
        for &node in &self.layers {
            match self.kind(node) {
                NodeKind::Null => {}
                NodeKind::Object(_) => objects.push(node),
                _ => return Err(self.kind_error(node, &go_type)),
            }
        }
        let mut entries: Vec<StructEntry> = Vec::new();
        let mut slot_of_field: Vec<Option<usize>> = vec![None; fields.len()];
        'collect: for node in objects {
            let NodeKind::Object(members) = self.kind(node) else {
                continue;
            };
            for (key, value) in members {
                let field = fields.iter().position(|field| field == key).or_else(|| {
                    fields
                        .iter()
                        .position(|field| field.eq_ignore_ascii_case(key))
                });
                match field {
                    Some(index) => match slot_of_field[index] {
                        Some(slot) => entries[slot].layers.push(*value),
                        None => {
                            slot_of_field[index] = Some(entries.len());
                            entries.push(StructEntry {
                                field: Some(fields[index]),
                                key: String::new(),
                                layers: vec![*value],
                            });
                        }
                    },
                    None if self.context.strict => {
                        // Decoding stops at the first unknown key.
                        entries.push(StructEntry {
                            field: None,
                            key: key.clone(),
                            layers: Vec::new(),
                        });
                        break 'collect;
                    }
                    None => {}
                }
            }
        }
        visitor.visit_map(StructFields {
            parent: &self,
            entries: entries.into_iter(),
            value: None,
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        let text = self.string()?;
        visitor.visit_enum(text.into_deserializer())
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.deserialize_string(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_unit()
    }
}

struct SequenceAccess<'p, 'd, 'a> {
    parent: &'p Layers<'d, 'a>,
    elements: Vec<usize>,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for SequenceAccess<'_, '_, '_> {
    type Error = DecodeError;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        let Some(&node) = self.elements.get(self.index) else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(self.parent.child(vec![node], Segment::Index(index)))
            .map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.elements.len() - self.index)
    }
}

struct MapEntries<'p, 'd, 'a> {
    parent: &'p Layers<'d, 'a>,
    entries: std::vec::IntoIter<(String, usize)>,
    value: Option<(String, usize)>,
}

impl<'de> de::MapAccess<'de> for MapEntries<'_, '_, '_> {
    type Error = DecodeError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        let Some((key, node)) = self.entries.next() else {
            return Ok(None);
        };
        let result = seed.deserialize(key.as_str().into_deserializer()).map(Some);
        self.value = Some((key, node));
        result
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let (key, node) = self
            .value
            .take()
            .ok_or_else(|| DecodeError("map value without a key".into()))?;
        seed.deserialize(self.parent.child(vec![node], Segment::Key(key)))
    }
}

struct StructEntry {
    /// The struct field (as serde names it); `None` for an unknown key.
    field: Option<&'static str>,
    /// The key as written, for `json: unknown field "<key>"`.
    key: String,
    layers: Vec<usize>,
}

struct StructFields<'p, 'd, 'a> {
    parent: &'p Layers<'d, 'a>,
    entries: std::vec::IntoIter<StructEntry>,
    value: Option<StructEntry>,
}

impl<'de> de::MapAccess<'de> for StructFields<'_, '_, '_> {
    type Error = DecodeError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        let Some(field) = entry.field else {
            return Err(DecodeError(format!(
                "json: unknown field {}",
                go_quote(&entry.key)
            )));
        };
        let result = seed.deserialize(field.into_deserializer()).map(Some);
        self.value = Some(entry);
        result
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let entry = self
            .value
            .take()
            .ok_or_else(|| DecodeError("struct value without a key".into()))?;
        let field = entry.field.unwrap_or("");
        seed.deserialize(self.parent.child(entry.layers, Segment::Field(field)))
    }
}

// ---------------------------------------------------------------------------
// Custom Go decoders: values read from their raw JSON text.

/// Visitor for types decoded from raw JSON text (see [`RAW_JSON`]). With
/// another deserializer (e.g. `serde_json` reading stored files) the value is
/// re-encoded to JSON first, so the same `parse` applies.
pub struct RawJsonVisitor<F> {
    pub expecting: &'static str,
    pub parse: F,
}

impl<'de, T, Error: fmt::Display, F: FnOnce(&str) -> Result<T, Error>> Visitor<'de>
    for RawJsonVisitor<F>
{
    type Value = T;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<T, E> {
        (self.parse)(raw).map_err(E::custom)
    }

    fn visit_newtype_struct<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<T, D::Error> {
        let value = <serde_json::Value as de::Deserialize>::deserialize(deserializer)?;
        let raw = value.to_string();
        (self.parse)(&raw).map_err(de::Error::custom)
    }
}

/// Go's `fmt` `%q` of raw JSON bytes, for `can not unmarshal "\"foo\""`.
pub fn quote_raw(raw: &str) -> String {
    go_quote_bytes(raw.as_bytes())
}

/// The Go kind word (`string`, `number`, …) of a raw JSON value.
pub fn raw_kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'"') => "string",
        Some(b't' | b'f') => "bool",
        Some(b'n') => "null",
        Some(b'[') => "array",
        Some(b'{') => "object",
        _ => "number",
    }
}

/// The string inside a raw JSON string literal (escapes decoded), or `None`
/// if `raw` is not a string.
pub fn raw_string(raw: &str) -> Option<String> {
    if !raw.starts_with('"') {
        return None;
    }
    let mut document = Document {
        body: raw.as_bytes(),
        nodes: Vec::new(),
    };
    let mut scanner = Scanner {
        body: raw.as_bytes(),
        position: 0,
        with_offsets: false,
    };
    let root = scanner.next_value(&mut document).ok()??;
    match &document.nodes[root].kind {
        NodeKind::String(text) => Some(text.clone()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Writing.

/// Appends `value` as a JSON string the way Go's `encoding/json` writes it:
/// `<`, `>`, `&`, U+2028 and U+2029 as `\u` escapes, `\b \f \n \r \t` short,
/// other control characters as `\u00XX`, DEL and other text as is.
pub fn write_string(out: &mut String, value: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(value.len() + 2);
    out.push('"');
    let mut start = 0;
    for (index, character) in value.char_indices() {
        let escape: Option<&str> = match character {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{08}' => Some("\\b"),
            '\u{0C}' => Some("\\f"),
            '<' => Some("\\u003c"),
            '>' => Some("\\u003e"),
            '&' => Some("\\u0026"),
            '\u{2028}' => Some("\\u2028"),
            '\u{2029}' => Some("\\u2029"),
            _ => None,
        };
        let is_control = (character as u32) < 0x20;
        if escape.is_none() && !is_control {
            continue;
        }
        out.push_str(&value[start..index]);
        match escape {
            Some(text) => out.push_str(text),
            None => {
                let byte = character as u32 as u8;
                out.push_str("\\u00");
                out.push(HEX[usize::from(byte >> 4)] as char);
                out.push(HEX[usize::from(byte & 0xF)] as char);
            }
        }
        start = index + character.len_utf8();
    }
    out.push_str(&value[start..]);
    out.push('"');
}

/// Appends a Go `time.Time` in UTC as JSON: `"2026-11-30T09:07:54.8993905Z"`
/// (RFC 3339, nanoseconds with trailing zeros trimmed, none if zero).
/// `unix_ns == 0` is Go's zero time, `"0001-01-01T00:00:00Z"`.
pub fn write_time(out: &mut String, unix_ns: u64) {
    out.push('"');
    if unix_ns == 0 {
        out.push_str(ZERO_TIME);
    } else {
        let civil = Civil::from_system_time(UNIX_EPOCH + Duration::from_nanos(unix_ns));
        push_civil(
            out,
            (civil.year, civil.month, civil.day),
            (civil.hour, civil.minute, civil.second),
            civil.nanosecond,
        );
        out.push('Z');
    }
    out.push('"');
}

fn push_civil(out: &mut String, date: (i64, u32, u32), clock: (u32, u32, u32), nanosecond: u32) {
    let (year, month, day) = date;
    let (hour, minute, second) = clock;
    out.push_str(&format!(
        "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}"
    ));
    if nanosecond != 0 {
        let fraction = format!("{nanosecond:09}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
}

/// A Go `time.Time` as parsed from RFC 3339: the instant and the offset it
/// was written with (Go keeps it and writes it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoTime {
    pub unix_seconds: i64,
    pub nanosecond: u32,
    pub offset_seconds: i32,
}

impl GoTime {
    /// Nanoseconds since the Unix epoch, clamped to `0..=u64::MAX`.
    pub fn unix_ns_clamped(&self) -> u64 {
        let total = i128::from(self.unix_seconds) * 1_000_000_000 + i128::from(self.nanosecond);
        total.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// Appends Go's JSON for this time: RFC 3339 with trimmed nanoseconds,
    /// `Z` for UTC, else the original `±hh:mm` offset.
    pub fn write_json(&self, out: &mut String) {
        let local = self.unix_seconds + i64::from(self.offset_seconds);
        let days = local.div_euclid(86_400);
        let second_of_day = local.rem_euclid(86_400) as u32;
        out.push('"');
        push_civil(
            out,
            civil_from_days(days),
            (
                second_of_day / 3600,
                second_of_day / 60 % 60,
                second_of_day % 60,
            ),
            self.nanosecond,
        );
        if self.offset_seconds == 0 {
            out.push('Z');
        } else {
            let sign = if self.offset_seconds < 0 { '-' } else { '+' };
            let magnitude = self.offset_seconds.unsigned_abs();
            out.push_str(&format!(
                "{sign}{:02}:{:02}",
                magnitude / 3600,
                magnitude / 60 % 60
            ));
        }
        out.push('"');
    }
}

impl<'de> de::Deserialize<'de> for GoTime {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<GoTime, D::Error> {
        struct TimeVisitor;
        impl<'de> Visitor<'de> for TimeVisitor {
            type Value = GoTime;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("an RFC 3339 time string")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<GoTime, E> {
                parse_rfc3339(text).map_err(E::custom)
            }

            fn visit_unit<E: de::Error>(self) -> Result<GoTime, E> {
                Ok(GoTime {
                    unix_seconds: ZERO_TIME_UNIX_SECONDS,
                    nanosecond: 0,
                    offset_seconds: 0,
                })
            }

            fn visit_newtype_struct<D: de::Deserializer<'de>>(
                self,
                deserializer: D,
            ) -> Result<GoTime, D::Error> {
                let text = <String as de::Deserialize>::deserialize(deserializer)?;
                parse_rfc3339(&text).map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_newtype_struct(RAW_TIME, TimeVisitor)
    }
}

/// Unix seconds of Go's zero time, 0001-01-01T00:00:00Z.
pub const ZERO_TIME_UNIX_SECONDS: i64 = -62_135_596_800;

/// Go's `time.RFC3339`, as its parse errors name it.
const RFC3339_LAYOUT: &str = "2006-01-02T15:04:05Z07:00";

/// Why Go's `time.Parse` (layout [`RFC3339_LAYOUT`]) refuses a time, with
/// its error texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeParseError {
    /// `parsing time "bad" as "2006-01-02T15:04:05Z07:00": cannot parse
    /// "bad" as "2006"`: `rest` is what was left when the layout's
    /// `element` was expected.
    #[error(
        "parsing time {} as {}: cannot parse {} as {}",
        time_quote(text),
        time_quote(RFC3339_LAYOUT),
        time_quote(rest),
        time_quote(element)
    )]
    CannotParse {
        text: String,
        rest: String,
        element: &'static str,
    },
    #[error("parsing time {}: {what} out of range", time_quote(text))]
    OutOfRange { text: String, what: &'static str },
    #[error("parsing time {}: extra text: {}", time_quote(text), time_quote(rest))]
    ExtraText { text: String, rest: String },
}

/// Parses an RFC 3339 time (`2026-11-30T09:07:54.5+01:00`, optional
/// fraction, `Z` or `±hh:mm`) to nanoseconds since the Unix epoch; times
/// before 1970 give `0`. `None` if Go's `time.Time` would reject it.
pub fn parse_time(text: &str) -> Option<u64> {
    parse_rfc3339(text).ok().map(|time| time.unix_ns_clamped())
}

/// Go's RFC 3339 parse as nats-server 2.15.1 decodes `time.Time` (Go's
/// `time.Parse` with layout `time.RFC3339`: a one-digit hour, a `,`
/// fraction and offsets up to ±24:60 are accepted), with its error texts: `parsing time "bad" as "2006-01-02T15:04:05Z07:00": cannot parse
/// "bad" as "2006"`, `parsing time "…": month out of range`.
pub fn parse_rfc3339(text: &str) -> Result<GoTime, TimeParseError> {
    let cannot_parse = |rest: &str, element: &'static str| TimeParseError::CannotParse {
        text: text.to_string(),
        rest: rest.to_string(),
        element,
    };
    let out_of_range = |what: &'static str| TimeParseError::OutOfRange {
        text: text.to_string(),
        what,
    };
    let mut rest = text;

    // Go's `time.Parse` walks the layout element by element; a range error
    // is reported as soon as its element is read.
    let year = take_digits(&mut rest, 4).ok_or_else(|| cannot_parse(rest, "2006"))?;
    expect_literal(&mut rest, "-").map_err(|()| cannot_parse(rest, "-"))?;
    let month = take_digits(&mut rest, 2).ok_or_else(|| cannot_parse(rest, "01"))?;
    if !(1..=12).contains(&month) {
        return Err(out_of_range("month"));
    }
    expect_literal(&mut rest, "-").map_err(|()| cannot_parse(rest, "-"))?;
    let day = take_digits(&mut rest, 2).ok_or_else(|| cannot_parse(rest, "02"))?;
    if day > 31 {
        return Err(out_of_range("day"));
    }
    expect_literal(&mut rest, "T").map_err(|()| cannot_parse(rest, "T"))?;
    // `15` takes one or two digits (nats-server 2.15.1 accepts `T1:00:00Z`).
    let hour = take_one_or_two_digits(&mut rest).ok_or_else(|| cannot_parse(rest, "15"))?;
    if hour >= 24 {
        return Err(out_of_range("hour"));
    }
    expect_literal(&mut rest, ":").map_err(|()| cannot_parse(rest, ":"))?;
    let minute = take_digits(&mut rest, 2).ok_or_else(|| cannot_parse(rest, "04"))?;
    if minute >= 60 {
        return Err(out_of_range("minute"));
    }
    expect_literal(&mut rest, ":").map_err(|()| cannot_parse(rest, ":"))?;
    let second = take_digits(&mut rest, 2).ok_or_else(|| cannot_parse(rest, "05"))?;
    if second >= 60 {
        return Err(out_of_range("second"));
    }
    let mut nanosecond = 0u32;
    let bytes = rest.as_bytes();
    if bytes.len() >= 2 && matches!(bytes[0], b'.' | b',') && bytes[1].is_ascii_digit() {
        let length = 1 + bytes[1..].iter().take_while(|b| b.is_ascii_digit()).count();
        // Digits past the ninth are dropped, as Go does.
        let digits = &rest[1..length.min(10)];
        let mut value: u32 = digits.parse().unwrap_or(0);
        for _ in digits.len()..9 {
            value *= 10;
        }
        nanosecond = value;
        rest = &rest[length..];
    }
    let offset_seconds: i32 = if let Some(after) = rest.strip_prefix('Z') {
        rest = after;
        0
    } else {
        let bytes = rest.as_bytes();
        if bytes.len() < 6 || bytes[3] != b':' {
            return Err(cannot_parse(rest, "Z07:00"));
        }
        let (Some(zone_hour), Some(zone_minute)) =
            (two_digits(&bytes[1..3]), two_digits(&bytes[4..6]))
        else {
            return Err(cannot_parse(rest, "Z07:00"));
        };
        if zone_hour > 24 {
            return Err(out_of_range("time zone offset hour"));
        }
        if zone_minute > 60 {
            return Err(out_of_range("time zone offset minute"));
        }
        let magnitude = (zone_hour * 3600 + zone_minute * 60) as i32;
        let offset = match bytes[0] {
            b'+' => magnitude,
            b'-' => -magnitude,
            _ => return Err(cannot_parse(rest, "Z07:00")),
        };
        rest = &rest[6..];
        offset
    };
    if !rest.is_empty() {
        return Err(TimeParseError::ExtraText {
            text: text.to_string(),
            rest: rest.to_string(),
        });
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(out_of_range("day"));
    }
    let days = days_from_civil(i64::from(year), month, day);
    let local_seconds =
        days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    Ok(GoTime {
        unix_seconds: local_seconds - i64::from(offset_seconds),
        nanosecond,
        offset_seconds,
    })
}

fn take_digits(rest: &mut &str, count: usize) -> Option<u32> {
    let bytes = rest.as_bytes();
    if bytes.len() < count || !bytes[..count].iter().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value = rest[..count].parse().ok()?;
    *rest = &rest[count..];
    Some(value)
}

fn take_one_or_two_digits(rest: &mut &str) -> Option<u32> {
    let bytes = rest.as_bytes();
    let count = bytes
        .iter()
        .take(2)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if count == 0 {
        return None;
    }
    let value = rest[..count].parse().ok()?;
    *rest = &rest[count..];
    Some(value)
}

fn two_digits(bytes: &[u8]) -> Option<u32> {
    if bytes.len() == 2 && bytes.iter().all(|b| b.is_ascii_digit()) {
        Some(u32::from(bytes[0] - b'0') * 10 + u32::from(bytes[1] - b'0'))
    } else {
        None
    }
}

fn expect_literal(rest: &mut &str, literal: &str) -> Result<(), ()> {
    match rest.strip_prefix(literal) {
        Some(after) => {
            *rest = after;
            Ok(())
        }
        None => Err(()),
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        _ => 28,
    }
}

/// Howard Hinnant's `days_from_civil`: (y, m, d) to days since 1970-01-01.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_index = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_index + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Inverse of [`days_from_civil`] for any day count (also before 1970).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

/// The `quote` of Go's time package: `"` and `\` escaped, bytes of
/// non-ASCII or control characters as `\xNN`.
fn time_quote(text: &str) -> String {
    let mut out = String::from("\"");
    for character in text.chars() {
        if !character.is_ascii() || (character as u32) < 0x20 {
            let mut buffer = [0u8; 4];
            for byte in character.encode_utf8(&mut buffer).bytes() {
                out.push_str(&format!("\\x{byte:02x}"));
            }
        } else {
            if character == '"' || character == '\\' {
                out.push('\\');
            }
            out.push(character);
        }
    }
    out.push('"');
    out
}

/// Appends `bytes` as standard base64 (RFC 4648 alphabet, `=` padding), as
/// Go's `encoding/json` writes `[]byte`.
pub fn base64_encode(bytes: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    out.reserve(bytes.len().div_ceil(3) * 4);
    let mut chunks = bytes.chunks_exact(3);
    for chunk in &mut chunks {
        let group = u32::from(chunk[0]) << 16 | u32::from(chunk[1]) << 8 | u32::from(chunk[2]);
        for shift in [18, 12, 6, 0] {
            out.push(ALPHABET[(group >> shift & 0x3F) as usize] as char);
        }
    }
    match chunks.remainder() {
        [a] => {
            let group = u32::from(*a) << 16;
            out.push(ALPHABET[(group >> 18 & 0x3F) as usize] as char);
            out.push(ALPHABET[(group >> 12 & 0x3F) as usize] as char);
            out.push_str("==");
        }
        [a, b] => {
            let group = u32::from(*a) << 16 | u32::from(*b) << 8;
            out.push(ALPHABET[(group >> 18 & 0x3F) as usize] as char);
            out.push(ALPHABET[(group >> 12 & 0x3F) as usize] as char);
            out.push(ALPHABET[(group >> 6 & 0x3F) as usize] as char);
            out.push('=');
        }
        _ => {}
    }
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
