//! The client protocol parser: bytes in, one operation out, borrowing from the
//! input. Sans-IO; the caller owns the read buffer.
//!
//! Grammar and error behaviour follow nats-server 2.15 `server/parser.go`:
//! operation names are case-insensitive; arguments are separated by blanks
//! (space or tab); a control line ends at `\n` with an optional `\r` before
//! it; `PING`, `PONG` and `+OK` ignore the rest of their line; a control
//! line's argument part longer than `max_control_line` is fatal; `PUB`/`HPUB`
//! sizes are checked against `max_payload` before the payload arrives; the
//! payload must be followed by exactly `\r\n`.
//!
//! The parser keeps state only while skipping the rest of a `PING`/`PONG`/`+OK`
//! line, so any amount of trailing junk there costs no memory. For every other
//! operation it asks the caller to keep the bytes until the operation is
//! complete; [`Step::NeedMore`] says how many bytes that takes when known, and
//! the control-line and payload limits bound it.

/// Limits the parser enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParserLimits {
    pub max_control_line_bytes: usize,
    pub max_payload_bytes: usize,
}

/// Blanks between an operation name and its arguments beyond which a line
/// is treated as over the control-line limit (bounds buffered bytes).
pub const OPERATION_PREFIX_BYTES_MAX: usize = 64;

/// A publish (`PUB` or `HPUB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publish<'a> {
    pub subject: &'a [u8],
    pub reply: Option<&'a [u8]>,
    /// Bytes of header block at the start of `message`; 0 for `PUB` and `HPUB … 0 n`.
    pub header_bytes: usize,
    /// Header block followed by payload.
    pub message: &'a [u8],
}

/// One client operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientOp<'a> {
    Connect {
        json: &'a [u8],
    },
    Info {
        json: &'a [u8],
    },
    Publish(Publish<'a>),
    Subscribe {
        subject: &'a [u8],
        queue: Option<&'a [u8]>,
        sid: &'a [u8],
    },
    /// `max_messages` is nats-server's parse of the optional count: -1 when
    /// absent or not a number (which unsubscribes immediately).
    Unsubscribe {
        sid: &'a [u8],
        max_messages: i64,
    },
    Ping,
    Pong,
    Ok,
    Err {
        text: &'a [u8],
    },
}

/// What one call to [`Parser::parse`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// A complete operation; drop `consumed` bytes from the front afterwards.
    Op { op: ClientOp<'a>, consumed: usize },
    /// Not enough input. Drop `consumed` bytes (skipped line content) and call
    /// again with more; `bytes_needed`, when known, is the total the current
    /// operation needs from the (new) start of the input.
    NeedMore {
        consumed: usize,
        bytes_needed: Option<usize>,
    },
}

/// Why the connection must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// `-ERR 'Unknown Protocol Operation'`, then close.
    #[error("unknown protocol operation")]
    UnknownOperation,
    /// `-ERR 'maximum control line exceeded'`, then close.
    #[error("maximum control line exceeded")]
    ControlLineTooLong,
    /// `-ERR 'Maximum Payload Violation'`, then close.
    #[error("maximum payload violation: {size} bytes > {max} bytes")]
    PayloadTooLarge { size: usize, max: usize },
    /// Close without `-ERR` (argument errors, as nats-server does).
    #[error("protocol violation: {0}")]
    Violation(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineOp {
    Ping,
    Pong,
    Ok,
}

/// Parser state for one connection.
#[derive(Debug, Clone)]
pub struct Parser {
    limits: ParserLimits,
    /// Inside the rest of a `PING`/`PONG`/`+OK` line, waiting for `\n`.
    skipping: Option<LineOp>,
}

#[derive(Clone, Copy)]
enum Shape {
    /// Name, one or more blanks, arguments to end of line.
    Arguments,
    /// Name, optional blanks, the rest of the line (CONNECT, INFO).
    Rest,
    /// Name, anything to end of line, ignored.
    Line(LineOp),
}

#[derive(Clone, Copy)]
enum Name {
    Pub,
    Hpub,
    Sub,
    Unsub,
    Connect,
    Info,
    Err,
    Line(LineOp),
}

impl Parser {
    pub fn new(limits: ParserLimits) -> Parser {
        assert!(limits.max_control_line_bytes > 0);
        Parser {
            limits,
            skipping: None,
        }
    }

    pub fn limits(&self) -> ParserLimits {
        self.limits
    }

    /// Parses at most one operation from the front of `input`. `headers`
    /// says whether the client negotiated headers (HPUB is refused otherwise).
    pub fn parse<'a>(&mut self, input: &'a [u8], headers: bool) -> Result<Step<'a>, ParseError> {
        if let Some(line_op) = self.skipping {
            return Ok(match find_newline(input, 0) {
                Some(newline) => {
                    self.skipping = None;
                    Step::Op {
                        op: line_op.into(),
                        consumed: newline + 1,
                    }
                }
                None => Step::NeedMore {
                    consumed: input.len(),
                    bytes_needed: None,
                },
            });
        }
        if input.is_empty() {
            return Ok(Step::NeedMore {
                consumed: 0,
                bytes_needed: None,
            });
        }
        let Some((name, name_len)) = recognise(input)? else {
            return Ok(Step::NeedMore {
                consumed: 0,
                bytes_needed: None,
            });
        };
        let shape = match name {
            Name::Connect | Name::Info => Shape::Rest,
            Name::Line(op) => Shape::Line(op),
            _ => Shape::Arguments,
        };
        // Find where the arguments start.
        let mut start = name_len;
        match shape {
            Shape::Line(op) => {
                return Ok(match find_newline(input, name_len) {
                    Some(newline) => Step::Op {
                        op: op.into(),
                        consumed: newline + 1,
                    },
                    None => {
                        self.skipping = Some(op);
                        Step::NeedMore {
                            consumed: input.len(),
                            bytes_needed: None,
                        }
                    }
                });
            }
            Shape::Arguments => {
                let Some(&first) = input.get(start) else {
                    return Ok(Step::NeedMore {
                        consumed: 0,
                        bytes_needed: None,
                    });
                };
                if !is_blank(first) {
                    return Err(ParseError::UnknownOperation);
                }
            }
            Shape::Rest => {}
        }
        while start < input.len() && is_blank(input[start]) {
            start += 1;
            if start > OPERATION_PREFIX_BYTES_MAX {
                return Err(ParseError::ControlLineTooLong);
            }
        }
        let Some(newline) = find_newline(input, start) else {
            if input.len() - start > self.limits.max_control_line_bytes {
                return Err(ParseError::ControlLineTooLong);
            }
            return Ok(Step::NeedMore {
                consumed: 0,
                bytes_needed: None,
            });
        };
        let mut end = newline;
        if end > start && input[end - 1] == b'\r' {
            end -= 1;
        }
        let arguments = &input[start..end];
        if arguments.len() > self.limits.max_control_line_bytes {
            return Err(ParseError::ControlLineTooLong);
        }
        let line_bytes = newline + 1;
        let op = match name {
            Name::Pub => return self.publish(input, arguments, line_bytes, false, headers),
            Name::Hpub => return self.publish(input, arguments, line_bytes, true, headers),
            Name::Sub => subscribe(arguments)?,
            Name::Unsub => unsubscribe(arguments)?,
            Name::Connect => ClientOp::Connect { json: arguments },
            Name::Info => ClientOp::Info { json: arguments },
            Name::Err => ClientOp::Err { text: arguments },
            Name::Line(_) => unreachable!("line operations returned above"),
        };
        Ok(Step::Op {
            op,
            consumed: line_bytes,
        })
    }

    fn publish<'a>(
        &self,
        input: &'a [u8],
        arguments: &'a [u8],
        line_bytes: usize,
        with_headers: bool,
        headers_negotiated: bool,
    ) -> Result<Step<'a>, ParseError> {
        if with_headers && !headers_negotiated {
            return Err(ParseError::Violation("HPUB without headers support"));
        }
        let mut fields = [&arguments[..0]; 4];
        let count =
            split_blanks(arguments, &mut fields).ok_or(ParseError::Violation("PUB arguments"))?;
        let (subject, reply, header_bytes, total_bytes) = if with_headers {
            let (subject, reply) = match count {
                3 => (fields[0], None),
                4 => (fields[0], Some(fields[1])),
                _ => return Err(ParseError::Violation("HPUB argument count")),
            };
            let header_bytes =
                parse_size(fields[count - 2]).ok_or(ParseError::Violation("HPUB header size"))?;
            let total_bytes =
                parse_size(fields[count - 1]).ok_or(ParseError::Violation("HPUB total size"))?;
            if header_bytes > total_bytes {
                return Err(ParseError::Violation(
                    "HPUB header size larger than total size",
                ));
            }
            (subject, reply, header_bytes, total_bytes)
        } else {
            let (subject, reply) = match count {
                2 => (fields[0], None),
                3 => (fields[0], Some(fields[1])),
                _ => return Err(ParseError::Violation("PUB argument count")),
            };
            let total_bytes =
                parse_size(fields[count - 1]).ok_or(ParseError::Violation("PUB size"))?;
            (subject, reply, 0, total_bytes)
        };
        if total_bytes > self.limits.max_payload_bytes {
            return Err(ParseError::PayloadTooLarge {
                size: total_bytes,
                max: self.limits.max_payload_bytes,
            });
        }
        let message_end = line_bytes + total_bytes;
        let needed = message_end + 2;
        if input.len() < needed {
            return Ok(Step::NeedMore {
                consumed: 0,
                bytes_needed: Some(needed),
            });
        }
        if &input[message_end..needed] != b"\r\n" {
            return Err(ParseError::UnknownOperation);
        }
        let message = &input[line_bytes..message_end];
        Ok(Step::Op {
            op: ClientOp::Publish(Publish {
                subject,
                reply,
                header_bytes,
                message,
            }),
            consumed: needed,
        })
    }
}

impl From<LineOp> for ClientOp<'static> {
    fn from(op: LineOp) -> Self {
        match op {
            LineOp::Ping => ClientOp::Ping,
            LineOp::Pong => ClientOp::Pong,
            LineOp::Ok => ClientOp::Ok,
        }
    }
}

/// Recognises the operation name at the front of `input`, case-insensitively.
/// `Ok(None)` means the input ends inside a name that could still match.
fn recognise(input: &[u8]) -> Result<Option<(Name, usize)>, ParseError> {
    let first = input[0].to_ascii_uppercase();
    let candidates: &[(&[u8], Name)] = match first {
        b'P' => match input.get(1).map(u8::to_ascii_uppercase) {
            None => return Ok(None),
            Some(b'U') => &[(b"PUB", Name::Pub)],
            Some(b'I') => &[(b"PING", Name::Line(LineOp::Ping))],
            Some(b'O') => &[(b"PONG", Name::Line(LineOp::Pong))],
            Some(_) => return Err(ParseError::UnknownOperation),
        },
        b'H' => &[(b"HPUB", Name::Hpub)],
        b'S' => &[(b"SUB", Name::Sub)],
        b'U' => &[(b"UNSUB", Name::Unsub)],
        b'C' => &[(b"CONNECT", Name::Connect)],
        b'I' => &[(b"INFO", Name::Info)],
        b'+' => &[(b"+OK", Name::Line(LineOp::Ok))],
        b'-' => &[(b"-ERR", Name::Err)],
        _ => return Err(ParseError::UnknownOperation),
    };
    let (keyword, name) = candidates[0];
    let available = input.len().min(keyword.len());
    if !input[..available].eq_ignore_ascii_case(&keyword[..available]) {
        return Err(ParseError::UnknownOperation);
    }
    if available < keyword.len() {
        return Ok(None);
    }
    Ok(Some((name, keyword.len())))
}

fn subscribe(arguments: &[u8]) -> Result<ClientOp<'_>, ParseError> {
    let mut fields = [&arguments[..0]; 3];
    match split_blanks(arguments, &mut fields) {
        Some(2) => Ok(ClientOp::Subscribe {
            subject: fields[0],
            queue: None,
            sid: fields[1],
        }),
        Some(3) => Ok(ClientOp::Subscribe {
            subject: fields[0],
            queue: Some(fields[1]),
            sid: fields[2],
        }),
        _ => Err(ParseError::Violation("SUB argument count")),
    }
}

fn unsubscribe(arguments: &[u8]) -> Result<ClientOp<'_>, ParseError> {
    let mut fields = [&arguments[..0]; 2];
    match split_blanks(arguments, &mut fields) {
        Some(1) => Ok(ClientOp::Unsubscribe {
            sid: fields[0],
            max_messages: -1,
        }),
        Some(2) => Ok(ClientOp::Unsubscribe {
            sid: fields[0],
            max_messages: parse_size(fields[1]).map_or(-1, |max| max as i64),
        }),
        _ => Err(ParseError::Violation("UNSUB argument count")),
    }
}

#[inline]
fn is_blank(byte: u8) -> bool {
    byte == b' ' || byte == b'\t'
}

#[inline]
fn find_newline(input: &[u8], from: usize) -> Option<usize> {
    input[from..]
        .iter()
        .position(|&byte| byte == b'\n')
        .map(|offset| from + offset)
}

/// Splits on runs of blanks into `fields`; `None` if there are more fields than room.
fn split_blanks<'a>(text: &'a [u8], fields: &mut [&'a [u8]]) -> Option<usize> {
    let mut count = 0;
    let mut start = None;
    for (index, &byte) in text.iter().enumerate() {
        if is_blank(byte) {
            if let Some(begin) = start.take() {
                *fields.get_mut(count)? = &text[begin..index];
                count += 1;
            }
        } else if start.is_none() {
            start = Some(index);
        }
    }
    if let Some(begin) = start {
        *fields.get_mut(count)? = &text[begin..];
        count += 1;
    }
    Some(count)
}

/// nats-server's `parseSize`: 1 to 9 decimal digits, nothing else.
pub fn parse_size(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    let mut value = 0usize;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value * 10 + usize::from(digit - b'0');
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ParserLimits = ParserLimits {
        max_control_line_bytes: 4096,
        max_payload_bytes: 1024,
    };

    fn one(input: &[u8]) -> Result<Step<'_>, ParseError> {
        Parser::new(LIMITS).parse(input, true)
    }

    fn op(input: &[u8]) -> ClientOp<'_> {
        match one(input).unwrap() {
            Step::Op { op, consumed } => {
                assert_eq!(consumed, input.len(), "whole input consumed");
                op
            }
            other => panic!("expected an operation, got {other:?}"),
        }
    }

    #[test]
    fn parses_every_operation() {
        assert_eq!(op(b"PING\r\n"), ClientOp::Ping);
        assert_eq!(op(b"pong\n"), ClientOp::Pong);
        assert_eq!(op(b"+OK\r\n"), ClientOp::Ok);
        assert_eq!(op(b"PING with junk\r\n"), ClientOp::Ping);
        assert_eq!(
            op(b"CONNECT {\"verbose\":false}\r\n"),
            ClientOp::Connect {
                json: b"{\"verbose\":false}"
            }
        );
        assert_eq!(op(b"connect{}\r\n"), ClientOp::Connect { json: b"{}" });
        assert_eq!(op(b"INFO {}\r\n"), ClientOp::Info { json: b"{}" });
        assert_eq!(
            op(b"SUB foo 1\r\n"),
            ClientOp::Subscribe {
                subject: b"foo",
                queue: None,
                sid: b"1"
            }
        );
        assert_eq!(
            op(b"sub  foo\tworkers  0\r\n"),
            ClientOp::Subscribe {
                subject: b"foo",
                queue: Some(b"workers"),
                sid: b"0"
            }
        );
        assert_eq!(
            op(b"UNSUB 1\r\n"),
            ClientOp::Unsubscribe {
                sid: b"1",
                max_messages: -1
            }
        );
        assert_eq!(
            op(b"UNSUB 1 5\r\n"),
            ClientOp::Unsubscribe {
                sid: b"1",
                max_messages: 5
            }
        );
        assert_eq!(
            op(b"UNSUB 1 x\r\n"),
            ClientOp::Unsubscribe {
                sid: b"1",
                max_messages: -1
            }
        );
        assert_eq!(op(b"-ERR 'boom'\r\n"), ClientOp::Err { text: b"'boom'" });
        assert_eq!(
            op(b"PUB foo 5\r\nhello\r\n"),
            ClientOp::Publish(Publish {
                subject: b"foo",
                reply: None,
                header_bytes: 0,
                message: b"hello"
            })
        );
        assert_eq!(
            op(b"pub foo bar 0\r\n\r\n"),
            ClientOp::Publish(Publish {
                subject: b"foo",
                reply: Some(b"bar"),
                header_bytes: 0,
                message: b""
            })
        );
        assert_eq!(
            op(b"HPUB foo r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"),
            ClientOp::Publish(Publish {
                subject: b"foo",
                reply: Some(b"r"),
                header_bytes: 12,
                message: b"NATS/1.0\r\n\r\nhi"
            })
        );
        assert_eq!(
            op(b"HPUB jss.a r 0 1\r\n3\r\n"),
            ClientOp::Publish(Publish {
                subject: b"jss.a",
                reply: Some(b"r"),
                header_bytes: 0,
                message: b"3"
            })
        );
    }

    #[test]
    fn waits_for_complete_operations() {
        for input in [
            &b"P"[..],
            b"PU",
            b"PUB",
            b"PUB foo 5",
            b"PUB foo 5\r\nhel",
            b"PUB foo 5\r\nhello\r",
            b"CONN",
        ] {
            match one(input).unwrap() {
                Step::NeedMore { consumed: 0, .. } => {}
                other => panic!("{input:?}: {other:?}"),
            }
        }
        assert_eq!(
            one(b"PUB foo 5\r\nhe").unwrap(),
            Step::NeedMore {
                consumed: 0,
                bytes_needed: Some(18)
            }
        );
    }

    #[test]
    fn skips_long_ping_lines_without_buffering() {
        let mut parser = Parser::new(LIMITS);
        let junk = vec![b'x'; 10_000];
        let mut input = b"PING ".to_vec();
        input.extend_from_slice(&junk);
        assert_eq!(
            parser.parse(&input, true).unwrap(),
            Step::NeedMore {
                consumed: input.len(),
                bytes_needed: None
            }
        );
        assert_eq!(
            parser.parse(&junk, true).unwrap(),
            Step::NeedMore {
                consumed: junk.len(),
                bytes_needed: None
            }
        );
        assert_eq!(
            parser.parse(b"yy\r\nPONG\r\n", true).unwrap(),
            Step::Op {
                op: ClientOp::Ping,
                consumed: 4
            }
        );
        assert_eq!(
            parser.parse(b"PONG\r\n", true).unwrap(),
            Step::Op {
                op: ClientOp::Pong,
                consumed: 6
            }
        );
    }

    #[test]
    fn unknown_operations_are_fatal_with_err() {
        for input in [
            &b"FOO\r\n"[..],
            b"PX",
            b"MSG foo 1 1\r\n",
            b"HMSG foo 1 1 1\r\n",
            b"RS+ foo\r\n",
            b"LS+ foo\r\n",
            b"A+ foo\r\n",
            b"\r\n",
            b" PING\r\n",
            b"PUB\r\n",
            b"SUB\r\n",
            b"UNSUB\r\n",
            b"PUBX foo 1\r\n",
            b"PUB foo 1\r\nab\r\n",
            b"PUB foo 3\r\nab\r\n\r\n",
        ] {
            assert_eq!(one(input), Err(ParseError::UnknownOperation), "{input:?}");
        }
    }

    #[test]
    fn argument_errors_close_without_err() {
        for input in [
            &b"PUB foo\r\n"[..],
            b"PUB a b c 1\r\n",
            b"PUB foo -1\r\n",
            b"PUB foo 1x\r\n",
            b"PUB foo 1234567890\r\n",
            b"HPUB foo 1\r\n",
            b"HPUB foo 5 4\r\n",
            b"SUB foo\r\n",
            b"SUB a b c d\r\n",
            b"UNSUB a b c\r\n",
        ] {
            assert!(
                matches!(one(input), Err(ParseError::Violation(_))),
                "{input:?}: {:?}",
                one(input)
            );
        }
        assert!(matches!(
            Parser::new(LIMITS).parse(b"HPUB foo 2 2\r\n", false),
            Err(ParseError::Violation(_))
        ));
    }

    #[test]
    fn enforces_payload_limit_on_the_control_line() {
        assert_eq!(
            one(b"PUB foo 1025\r\n"),
            Err(ParseError::PayloadTooLarge {
                size: 1025,
                max: 1024
            })
        );
        assert_eq!(
            one(b"HPUB foo 10 1025\r\n"),
            Err(ParseError::PayloadTooLarge {
                size: 1025,
                max: 1024
            })
        );
        assert!(matches!(
            one(b"PUB foo 1024\r\n"),
            Ok(Step::NeedMore { .. })
        ));
    }

    #[test]
    fn enforces_control_line_limit() {
        let limits = ParserLimits {
            max_control_line_bytes: 16,
            max_payload_bytes: 1024,
        };
        let mut parser = Parser::new(limits);
        // 16 argument bytes are fine, 17 are not, with or without the newline yet.
        assert!(matches!(
            parser.parse(b"SUB aaaaaaaaaaaaaa 1\r\n", true),
            Ok(Step::Op { .. })
        ));
        assert_eq!(
            parser.parse(b"SUB aaaaaaaaaaaaaaa 1\r\n", true),
            Err(ParseError::ControlLineTooLong)
        );
        assert_eq!(
            parser.parse(b"SUB aaaaaaaaaaaaaaa 12", true),
            Err(ParseError::ControlLineTooLong)
        );
        assert_eq!(
            parser.parse(b"CONNECT {\"a\":\"bbbbbbbbb\"}\r\n", true),
            Err(ParseError::ControlLineTooLong)
        );
        assert!(matches!(
            parser.parse(b"SUB aaaaaaaaaaaaa", true),
            Ok(Step::NeedMore { .. })
        ));
    }

    #[test]
    fn parse_size_matches_nats_server() {
        assert_eq!(parse_size(b"0"), Some(0));
        assert_eq!(parse_size(b"007"), Some(7));
        assert_eq!(parse_size(b"999999999"), Some(999_999_999));
        assert_eq!(parse_size(b"1000000000"), None);
        assert_eq!(parse_size(b""), None);
        assert_eq!(parse_size(b"+1"), None);
    }

    #[test]
    fn parses_a_stream_of_operations_split_anywhere() {
        let stream = b"CONNECT {}\r\nSUB a 1\r\nPUB a r 3\r\nabc\r\nHPUB a 12 13\r\nNATS/1.0\r\n\r\nx\r\nPING\r\nUNSUB 1\r\n";
        for split in 0..stream.len() {
            let mut parser = Parser::new(LIMITS);
            let mut buffer = Vec::new();
            let mut ops = Vec::new();
            for chunk in [&stream[..split], &stream[split..]] {
                buffer.extend_from_slice(chunk);
                loop {
                    match parser.parse(&buffer, true).unwrap() {
                        Step::Op { op, consumed } => {
                            ops.push(format!("{op:?}"));
                            buffer.drain(..consumed);
                        }
                        Step::NeedMore { consumed, .. } => {
                            buffer.drain(..consumed);
                            break;
                        }
                    }
                }
            }
            assert_eq!(ops.len(), 6, "split at {split}: {ops:?}");
            assert!(buffer.is_empty());
        }
    }
}
