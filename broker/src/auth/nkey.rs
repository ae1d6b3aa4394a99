//! NKey authentication: the nonce a connection's INFO carries and the
//! check of the client's signature over it (nats-server `nkey.go` and
//! `auth.go`). Keys are decoded and verified with nats-io's `nkeys` crate.
//!
//! Nonce: 11 random bytes from the kernel's CSPRNG, base64url without
//! padding (15 characters). The client signs the nonce's text with its user
//! seed (Ed25519) and sends the signature base64url-encoded without padding;
//! standard base64 with padding is accepted as a fallback, as nats-server does.

use base64::engine::general_purpose::GeneralPurposeConfig;
use base64::engine::{DecodePaddingMode, GeneralPurpose};
use base64::Engine;

/// Random bytes in a nonce (nats-server `nonceRawLen`).
pub const NONCE_RANDOM_BYTES: usize = 11;
/// Characters of a nonce (nats-server `nonceLen`).
pub const NONCE_CHARACTERS: usize = 15;

/// Go's `base64.RawURLEncoding` (no padding; trailing bits ignored).
const RAW_URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Go's `base64.StdEncoding` (padding required; trailing bits ignored).
const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

/// A fresh nonce for one connection's INFO.
pub fn generate_nonce() -> String {
    let mut random = [0u8; NONCE_RANDOM_BYTES];
    fill_random(&mut random);
    let nonce = RAW_URL.encode(random);
    assert_eq!(nonce.len(), NONCE_CHARACTERS);
    nonce
}

/// Fills `buffer` from getrandom(2). A kernel that cannot provide random
/// bytes cannot run tern securely: that is fatal.
fn fill_random(buffer: &mut [u8]) {
    let mut filled = 0;
    while filled < buffer.len() {
        // SAFETY: writes at most `buffer.len() - filled` bytes into the
        // unfilled rest of a live, exclusively borrowed buffer.
        let written = unsafe {
            libc::getrandom(
                buffer[filled..].as_mut_ptr().cast(),
                buffer.len() - filled,
                0,
            )
        };
        if written < 0 {
            let error = std::io::Error::last_os_error();
            assert_eq!(
                error.kind(),
                std::io::ErrorKind::Interrupted,
                "getrandom failed: {error}"
            );
            continue;
        }
        filled += written as usize;
    }
}

/// Why an NKey's signature was refused (for the log; the client only sees
/// `Authorization Violation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("signature missing")]
    Missing,
    #[error("signature not valid base64")]
    Encoding,
    #[error("signature not verified")]
    Mismatch,
}

/// A user's public NKey, decoded once when the configuration is read.
pub struct PublicKey {
    text: String,
    key: nkeys::KeyPair,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_tuple("PublicKey")
            .field(&self.text)
            .finish()
    }
}

/// Why a configured NKey is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{0:?} is not a valid public nkey for a user (U…, 56 characters): {1}")]
    Invalid(String, String),
    #[error("{0:?} is a public nkey, but not a user's (user keys start with U)")]
    NotUser(String),
}

impl PublicKey {
    /// Decodes a user's public NKey (`U…`).
    pub fn parse_user(text: &str) -> Result<PublicKey, KeyError> {
        let key = nkeys::KeyPair::from_public_key(text)
            .map_err(|error| KeyError::Invalid(text.to_string(), error.to_string()))?;
        if key.key_pair_type() != nkeys::KeyPairType::User {
            return Err(KeyError::NotUser(text.to_string()));
        }
        Ok(PublicKey {
            text: text.to_string(),
            key,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Checks the CONNECT `sig` over the connection's nonce.
    pub fn verify(&self, nonce: &[u8], signature: Option<&str>) -> Result<(), SignatureError> {
        let signature = signature
            .filter(|signature| !signature.is_empty())
            .ok_or(SignatureError::Missing)?;
        let bytes = RAW_URL
            .decode(signature)
            .or_else(|_| STANDARD.decode(signature))
            .map_err(|_| SignatureError::Encoding)?;
        self.key
            .verify(nonce, &bytes)
            .map_err(|_| SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_look_like_nats_servers_and_differ() {
        let first = generate_nonce();
        let second = generate_nonce();
        assert_eq!(first.len(), NONCE_CHARACTERS);
        assert!(first
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'));
        assert_ne!(first, second);
    }

    #[test]
    fn a_signature_over_the_nonce_verifies_in_both_encodings() {
        let user = nkeys::KeyPair::new_user();
        let key = PublicKey::parse_user(&user.public_key()).unwrap();
        let nonce = generate_nonce();
        let signature = user.sign(nonce.as_bytes()).unwrap();
        let raw_url = RAW_URL.encode(&signature);
        let standard = STANDARD.encode(&signature);
        assert_eq!(key.verify(nonce.as_bytes(), Some(&raw_url)), Ok(()));
        assert_eq!(key.verify(nonce.as_bytes(), Some(&standard)), Ok(()));
        // Another nonce, another key, a mangled or absent signature: refused.
        assert_eq!(
            key.verify(b"another-nonce!!", Some(&raw_url)),
            Err(SignatureError::Mismatch)
        );
        let other = nkeys::KeyPair::new_user();
        let forged = RAW_URL.encode(other.sign(nonce.as_bytes()).unwrap());
        assert_eq!(
            key.verify(nonce.as_bytes(), Some(&forged)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            key.verify(nonce.as_bytes(), Some("***")),
            Err(SignatureError::Encoding)
        );
        assert_eq!(
            key.verify(nonce.as_bytes(), Some("AAAA")),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            key.verify(nonce.as_bytes(), None),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            key.verify(nonce.as_bytes(), Some("")),
            Err(SignatureError::Missing)
        );
    }

    #[test]
    fn only_user_keys_are_accepted() {
        let server = nkeys::KeyPair::new_server();
        assert!(matches!(
            PublicKey::parse_user(&server.public_key()),
            Err(KeyError::NotUser(_))
        ));
        assert!(matches!(
            PublicKey::parse_user("UABC"),
            Err(KeyError::Invalid(..))
        ));
        let user = nkeys::KeyPair::new_user();
        let seed = user.seed().unwrap();
        assert!(PublicKey::parse_user(&seed).is_err(), "a seed is not a key");
    }
}
