//! Encoding what the server sends: MSG/HMSG lines, the no-responders status
//! message, PING/PONG/+OK/-ERR. Appends to the connection's outbound buffer.

pub const PING: &[u8] = b"PING\r\n";
pub const PONG: &[u8] = b"PONG\r\n";
pub const OK: &[u8] = b"+OK\r\n";
pub const CRLF: &[u8] = b"\r\n";

/// `-ERR '<text>'\r\n`
pub fn push_err(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(b"-ERR '");
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"'\r\n");
}

/// Appends the decimal digits of `value` (two digits per step, no checks
/// on the way: `itoa`).
#[inline]
pub fn push_decimal(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// One delivery of a message to one subscription.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    pub subject: &'a [u8],
    pub sid: &'a [u8],
    pub reply: Option<&'a [u8]>,
    /// Header block bytes at the front of `message` (0: none).
    pub header_bytes: usize,
    /// Header block followed by payload.
    pub message: &'a [u8],
}

/// Appends the whole delivery: `MSG`/`HMSG` line, bytes, CRLF. Headers go out
/// as HMSG only to clients that negotiated them; others get MSG with the
/// header block removed.
#[inline]
pub fn push_delivery(out: &mut Vec<u8>, delivery: &Delivery<'_>, client_headers: bool) {
    let with_headers = delivery.header_bytes > 0 && client_headers;
    let body = if delivery.header_bytes > 0 && !client_headers {
        &delivery.message[delivery.header_bytes..]
    } else {
        delivery.message
    };
    out.reserve(delivery.subject.len() + delivery.sid.len() + body.len() + 64);
    if with_headers {
        out.extend_from_slice(b"HMSG ");
    } else {
        out.extend_from_slice(b"MSG ");
    }
    out.extend_from_slice(delivery.subject);
    out.push(b' ');
    out.extend_from_slice(delivery.sid);
    out.push(b' ');
    if let Some(reply) = delivery.reply {
        out.extend_from_slice(reply);
        out.push(b' ');
    }
    if with_headers {
        push_decimal(out, delivery.header_bytes as u64);
        out.push(b' ');
    }
    push_decimal(out, body.len() as u64);
    out.extend_from_slice(CRLF);
    out.extend_from_slice(body);
    out.extend_from_slice(CRLF);
}

/// The no-responders status message, byte-exact with nats-server:
/// `HMSG <reply> <sid> <L> <L>\r\nNATS/1.0 503\r\nNats-Subject: <subject>\r\n\r\n\r\n`
/// with `L = 32 + len(subject)`.
pub fn push_no_responders(out: &mut Vec<u8>, reply: &[u8], sid: &[u8], subject: &[u8]) {
    let header_bytes = 32 + subject.len() as u64;
    out.extend_from_slice(b"HMSG ");
    out.extend_from_slice(reply);
    out.push(b' ');
    out.extend_from_slice(sid);
    out.push(b' ');
    push_decimal(out, header_bytes);
    out.push(b' ');
    push_decimal(out, header_bytes);
    out.extend_from_slice(b"\r\nNATS/1.0 503\r\nNats-Subject: ");
    out.extend_from_slice(subject);
    out.extend_from_slice(b"\r\n\r\n\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliver(delivery: Delivery<'_>, headers: bool) -> Vec<u8> {
        let mut out = Vec::new();
        push_delivery(&mut out, &delivery, headers);
        out
    }

    #[test]
    fn encodes_msg_and_hmsg() {
        let plain = Delivery {
            subject: b"foo",
            sid: b"1",
            reply: None,
            header_bytes: 0,
            message: b"hello",
        };
        assert_eq!(deliver(plain, true), b"MSG foo 1 5\r\nhello\r\n");
        let replied = Delivery {
            reply: Some(b"_INBOX.x"),
            ..plain
        };
        assert_eq!(
            deliver(replied, false),
            b"MSG foo 1 _INBOX.x 5\r\nhello\r\n"
        );
        let headed = Delivery {
            subject: b"foo",
            sid: b"9",
            reply: None,
            header_bytes: 12,
            message: b"NATS/1.0\r\n\r\nhi",
        };
        assert_eq!(
            deliver(headed, true),
            b"HMSG foo 9 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
        );
        assert_eq!(deliver(headed, false), b"MSG foo 9 2\r\nhi\r\n");
    }

    #[test]
    fn encodes_no_responders_exactly() {
        let mut out = Vec::new();
        push_no_responders(&mut out, b"_INBOX.a.b", b"0", b"svc");
        let header = b"NATS/1.0 503\r\nNats-Subject: svc\r\n\r\n";
        assert_eq!(header.len(), 32 + 3);
        assert_eq!(
            out,
            b"HMSG _INBOX.a.b 0 35 35\r\nNATS/1.0 503\r\nNats-Subject: svc\r\n\r\n\r\n"
        );
    }

    #[test]
    fn decimal() {
        let mut out = Vec::new();
        push_decimal(&mut out, 0);
        out.push(b' ');
        push_decimal(&mut out, 18446744073709551615);
        assert_eq!(out, b"0 18446744073709551615");
    }
}
