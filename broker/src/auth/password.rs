//! Passwords and tokens as configured: plain text, compared in constant
//! time, or a bcrypt hash (`$2a$`, `$2b$`, `$2x$`, `$2y$` and a two-digit
//! cost, nats-server's `isBcrypt`), verified with the `bcrypt` crate.
//!
//! bcrypt is slow by design (about 60 ms at cost 10 and twice that per
//! extra cost step); on a shard thread it would stall every connection of
//! the shard, and a client repeating a wrong password could keep it
//! stalled. Hashes are therefore verified on [`VERIFIER_THREADS_MAX`]
//! dedicated threads behind a bounded queue; the connection waits for the
//! answer (its later operations with it), its shard does not.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use subtle::ConstantTimeEq;

/// Threads that verify bcrypt hashes (started on first use).
pub const VERIFIER_THREADS_MAX: usize = 4;
/// Verifications waiting for a thread; past it a CONNECT is refused.
pub const VERIFIER_QUEUE_MAX: usize = 256;

/// A configured password or token.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Plain(String),
    Bcrypt(Arc<str>),
}

impl std::fmt::Debug for Credential {
    /// Never the secret: only its kind.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Plain(_) => formatter.write_str("Plain(<redacted>)"),
            Credential::Bcrypt(_) => formatter.write_str("Bcrypt(<redacted>)"),
        }
    }
}

/// Why a configured credential is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("is empty")]
    Empty,
    #[error("looks like a bcrypt hash but is not a valid one: {0}")]
    BadHash(String),
}

impl Credential {
    /// Reads a configured value: a bcrypt hash when it looks like one.
    pub fn parse(text: &str) -> Result<Credential, CredentialError> {
        if text.is_empty() {
            return Err(CredentialError::Empty);
        }
        if !is_bcrypt(text) {
            return Ok(Credential::Plain(text.to_string()));
        }
        // Verifying against the hash finds a malformed one now rather than
        // at every CONNECT (nats-server would only never match).
        match bcrypt::verify("", text) {
            Ok(_) => Ok(Credential::Bcrypt(text.into())),
            Err(error) => Err(CredentialError::BadHash(error.to_string())),
        }
    }

    pub fn is_bcrypt(&self) -> bool {
        matches!(self, Credential::Bcrypt(_))
    }

    /// Compares a plain credential with what the client sent, in time that
    /// does not depend on where they differ. Panics for a bcrypt hash (see
    /// [`verify_bcrypt`]).
    pub fn matches_plain(&self, given: &str) -> bool {
        match self {
            Credential::Plain(expected) => expected.as_bytes().ct_eq(given.as_bytes()).into(),
            Credential::Bcrypt(_) => panic!("a bcrypt hash is verified off the shard"),
        }
    }
}

/// nats-server's `validBcryptPrefix`: `^\$2[abxy]\$\d{2}\$.*`.
pub fn is_bcrypt(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 7
        && bytes.starts_with(b"$2")
        && matches!(bytes[2], b'a' | b'b' | b'x' | b'y')
        && bytes[3] == b'$'
        && bytes[4].is_ascii_digit()
        && bytes[5].is_ascii_digit()
        && bytes[6] == b'$'
}

/// Verifies `given` against a bcrypt hash here, on this thread (tests and
/// the verifier threads).
pub fn bcrypt_matches(hash: &str, given: &str) -> bool {
    bcrypt::verify(given, hash).unwrap_or(false)
}

const PENDING: u8 = 0;
const MATCHED: u8 = 1;
const MISMATCHED: u8 = 2;

/// The answer to one verification, written by a verifier thread.
struct Answer {
    state: AtomicU8,
    waker: AtomicWaker,
}

struct Job {
    hash: Arc<str>,
    given: String,
    answer: Arc<Answer>,
}

/// Why a verification could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("{VERIFIER_QUEUE_MAX} password verifications already waiting")]
    Busy,
}

/// Completes with whether the password matched.
pub struct Verification {
    answer: Arc<Answer>,
}

impl Future for Verification {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<bool> {
        let state = self.answer.state.load(Ordering::Acquire);
        if state != PENDING {
            return Poll::Ready(state == MATCHED);
        }
        self.answer.waker.register(context.waker());
        match self.answer.state.load(Ordering::Acquire) {
            PENDING => Poll::Pending,
            state => Poll::Ready(state == MATCHED),
        }
    }
}

static QUEUE: OnceLock<crossbeam_channel::Sender<Job>> = OnceLock::new();

fn queue() -> &'static crossbeam_channel::Sender<Job> {
    QUEUE.get_or_init(|| {
        let (sender, receiver) = crossbeam_channel::bounded::<Job>(VERIFIER_QUEUE_MAX);
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, VERIFIER_THREADS_MAX);
        for index in 0..threads {
            let receiver = receiver.clone();
            std::thread::Builder::new()
                .name(format!("tern-bcrypt-{index}"))
                .spawn(move || {
                    for job in receiver {
                        let matched = bcrypt_matches(&job.hash, &job.given);
                        let state = if matched { MATCHED } else { MISMATCHED };
                        job.answer.state.store(state, Ordering::Release);
                        job.answer.waker.wake();
                    }
                })
                .expect("spawn a password verifier thread");
        }
        sender
    })
}

/// Queues a bcrypt verification for the verifier threads.
pub fn verify_bcrypt(hash: Arc<str>, given: String) -> Result<Verification, VerifyError> {
    let answer = Arc::new(Answer {
        state: AtomicU8::new(PENDING),
        waker: AtomicWaker::new(),
    });
    let job = Job {
        hash,
        given,
        answer: answer.clone(),
    };
    queue().try_send(job).map_err(|_| VerifyError::Busy)?;
    Ok(Verification { answer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcrypt_prefixes_as_nats_server() {
        assert!(is_bcrypt("$2a$11$abc"));
        assert!(is_bcrypt("$2b$04$"));
        assert!(is_bcrypt("$2y$10$x"));
        assert!(!is_bcrypt("$2c$10$x"));
        assert!(!is_bcrypt("$2a$1$x"));
        assert!(!is_bcrypt("password"));
        assert!(!is_bcrypt("$2a$10"));
    }

    #[test]
    fn plain_credentials_compare_exactly() {
        let credential = Credential::parse("s3cret").unwrap();
        assert!(!credential.is_bcrypt());
        assert!(credential.matches_plain("s3cret"));
        assert!(!credential.matches_plain("s3cre"));
        assert!(!credential.matches_plain("s3cret!"));
        assert!(!credential.matches_plain(""));
        assert_eq!(Credential::parse(""), Err(CredentialError::Empty));
        assert_eq!(format!("{credential:?}"), "Plain(<redacted>)");
    }

    #[test]
    fn bcrypt_hashes_verify_in_both_prefixes() {
        let hash_2b = bcrypt::hash_with_salt("s3cret", 4, [7u8; 16])
            .unwrap()
            .format_for_version(bcrypt::Version::TwoB);
        for hash in [hash_2b.clone(), hash_2b.replacen("$2b$", "$2a$", 1)] {
            let credential = Credential::parse(&hash).unwrap();
            assert!(credential.is_bcrypt());
            assert!(bcrypt_matches(&hash, "s3cret"), "{hash}");
            assert!(!bcrypt_matches(&hash, "wrong"), "{hash}");
        }
        assert!(matches!(
            Credential::parse("$2a$04$tooshort"),
            Err(CredentialError::BadHash(_))
        ));
    }

    #[test]
    fn verifier_threads_answer() {
        let hash: Arc<str> = bcrypt::hash("s3cret", 4).unwrap().into();
        let matched = verify_bcrypt(hash.clone(), "s3cret".into()).unwrap();
        let mismatched = verify_bcrypt(hash, "nope".into()).unwrap();
        assert!(futures_lite::future::block_on(matched));
        assert!(!futures_lite::future::block_on(mismatched));
    }
}
