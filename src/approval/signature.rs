//! Approvals that cannot be forged: an HMAC-SHA-256 signature binding an
//! approval request to its approval id (which names the run), the call id,
//! the tool's name and a digest of the arguments ([`ApprovalKeys`]).
//!
//! The scheme is the AI SDK's (`ai-sdk-tool-approval-v1`): the MAC is
//! taken over the JSON array `["ai-sdk-tool-approval-v1", approvalId,
//! toolCallId, toolName, inputDigest]`, where `inputDigest` is the
//! base64url SHA-256 of the arguments' canonical JSON (object keys sorted,
//! numbers as JavaScript writes them), and written base64url without
//! padding. The signature toolstack sends is `{key id}.{MAC}`: the key id
//! lets keys rotate — a new key signs, older ones still verify until they
//! are dropped — and a server holding the same secret verifies the MAC
//! with the AI SDK's own `verifyToolApprovalSignature`.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The shortest secret a key may have, in bytes (the HMAC-SHA-256 block
/// security level the AI SDK recommends is 32).
pub const MIN_SECRET_BYTES: usize = 32;

/// The longest key id, in bytes.
const MAX_KEY_ID_BYTES: usize = 32;

/// The longest signature read, in bytes (a key id, a dot, 43 characters).
const MAX_SIGNATURE_BYTES: usize = 128;

/// The keys that sign approval requests and verify the answers: one that
/// signs, and older ones that still verify (rotation).
///
/// ```
/// use toolstack::approval::ApprovalKeys;
///
/// let old = ApprovalKeys::new("2026-11", [7u8; 32]).unwrap();
/// let signed = old.sign("run:call_1", "call_1", "delete_rows", r#"{"older_than": 2020}"#);
/// assert!(signed.starts_with("2026-11."));
///
/// // A new key signs from now on; what the old one signed still verifies.
/// let keys = ApprovalKeys::new("2026-12", [9u8; 32]).unwrap().previous("2026-11", [7u8; 32]).unwrap();
/// assert_eq!(keys.verify(&signed, "run:call_1", "call_1", "delete_rows", r#"{"older_than":2020}"#), Ok("2026-11"));
/// // Other arguments, another call, another tool: refused.
/// assert!(keys.verify(&signed, "run:call_1", "call_1", "delete_rows", r#"{"older_than":1990}"#).is_err());
/// assert!(keys.verify(&signed, "run:call_2", "call_2", "delete_rows", r#"{"older_than":2020}"#).is_err());
/// ```
#[derive(Clone)]
pub struct ApprovalKeys {
    /// The signing key first, then the older ones.
    keys: Vec<(String, Vec<u8>)>,
}

/// Why a key was refused when it was set.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The key id is empty, longer than 32 bytes, or has a character other
    /// than ASCII letters, digits, `-` and `_`.
    BadKeyId(String),
    /// The secret is shorter than [`MIN_SECRET_BYTES`].
    ShortSecret {
        /// The key's id.
        key_id: String,
        /// Its length.
        bytes: usize,
    },
    /// Two keys have this id.
    DuplicateKeyId(String),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::BadKeyId(id) => write!(
                f,
                "approval key id {id:?} must be 1 to {MAX_KEY_ID_BYTES} ASCII letters, digits, `-` or `_`"
            ),
            KeyError::ShortSecret { key_id, bytes } => write!(
                f,
                "approval key {key_id:?} has a secret of {bytes} bytes; it needs at least {MIN_SECRET_BYTES}"
            ),
            KeyError::DuplicateKeyId(id) => write!(f, "two approval keys have the id {id:?}"),
        }
    }
}

impl std::error::Error for KeyError {}

/// Why a signature was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureError {
    /// The answer carries no signature.
    Missing,
    /// It is not `{key id}.{base64url MAC}`, or is too long.
    Malformed,
    /// No key of this id is held (it was rotated out, or never was).
    UnknownKey(String),
    /// The MAC does not match this approval: forged, or made for other
    /// arguments, another call, tool or run.
    Mismatch,
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureError::Missing => f.write_str("the approval carries no signature"),
            SignatureError::Malformed => f.write_str("the approval's signature is malformed"),
            SignatureError::UnknownKey(id) => {
                write!(f, "the approval was signed with an unknown key {id:?}")
            }
            SignatureError::Mismatch => f.write_str(
                "the approval's signature does not match this call: it was forged, or made for other arguments, another call or another run",
            ),
        }
    }
}

impl std::error::Error for SignatureError {}

impl ApprovalKeys {
    /// Signs with `secret` (at least [`MIN_SECRET_BYTES`] bytes), named
    /// `key_id` in each signature.
    pub fn new(key_id: impl Into<String>, secret: impl AsRef<[u8]>) -> Result<Self, KeyError> {
        let key = checked(key_id.into(), secret.as_ref())?;
        Ok(ApprovalKeys { keys: vec![key] })
    }

    /// Also verifies what an older key signed (it no longer signs).
    pub fn previous(
        mut self,
        key_id: impl Into<String>,
        secret: impl AsRef<[u8]>,
    ) -> Result<Self, KeyError> {
        let key = checked(key_id.into(), secret.as_ref())?;
        if self.keys.iter().any(|(id, _)| *id == key.0) {
            return Err(KeyError::DuplicateKeyId(key.0));
        }
        self.keys.push(key);
        Ok(self)
    }

    /// The id of the key that signs.
    pub fn signing_key_id(&self) -> &str {
        &self.keys[0].0
    }

    /// The signature of an approval request: `{key id}.{MAC}`.
    pub fn sign(&self, approval_id: &str, call_id: &str, tool: &str, arguments: &str) -> String {
        let (id, secret) = &self.keys[0];
        let mac = mac(secret, approval_id, call_id, tool, arguments).finalize();
        format!("{id}.{}", URL_SAFE_NO_PAD.encode(mac.into_bytes()))
    }

    /// Checks `signature` against this approval; the id of the key that
    /// made it, or why it is refused. The comparison is in constant time.
    pub fn verify<'a>(
        &'a self,
        signature: &str,
        approval_id: &str,
        call_id: &str,
        tool: &str,
        arguments: &str,
    ) -> Result<&'a str, SignatureError> {
        if signature.is_empty() {
            return Err(SignatureError::Missing);
        }
        if signature.len() > MAX_SIGNATURE_BYTES {
            return Err(SignatureError::Malformed);
        }
        let (id, encoded) = signature.split_once('.').ok_or(SignatureError::Malformed)?;
        let given = URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| SignatureError::Malformed)?;
        let (id, secret) = self
            .keys
            .iter()
            .find(|(key_id, _)| key_id == id)
            .ok_or_else(|| {
                SignatureError::UnknownKey(id.chars().take(MAX_KEY_ID_BYTES).collect())
            })?;
        mac(secret, approval_id, call_id, tool, arguments)
            .verify_slice(&given)
            .map(|()| id.as_str())
            .map_err(|_| SignatureError::Mismatch)
    }
}

impl fmt::Debug for ApprovalKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("ApprovalKeys")
            .field("key_ids", &ids)
            .finish_non_exhaustive()
    }
}

fn checked(key_id: String, secret: &[u8]) -> Result<(String, Vec<u8>), KeyError> {
    let id_ok = !key_id.is_empty()
        && key_id.len() <= MAX_KEY_ID_BYTES
        && key_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !id_ok {
        return Err(KeyError::BadKeyId(key_id));
    }
    if secret.len() < MIN_SECRET_BYTES {
        return Err(KeyError::ShortSecret {
            key_id,
            bytes: secret.len(),
        });
    }
    Ok((key_id, secret.to_vec()))
}

/// The MAC over the AI SDK's payload for this approval.
fn mac(
    secret: &[u8],
    approval_id: &str,
    call_id: &str,
    tool: &str,
    arguments: &str,
) -> Hmac<Sha256> {
    let payload = serde_json::json!([
        "ai-sdk-tool-approval-v1",
        approval_id,
        call_id,
        tool,
        input_digest(arguments)
    ]);
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(payload.to_string().as_bytes());
    mac
}

/// The arguments' digest: base64url SHA-256 of their canonical JSON (of
/// the text itself, as a JSON string, when it is not JSON).
pub fn input_digest(arguments: &str) -> String {
    let value =
        serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()));
    let canonical = crate::arguments::canonical(&value);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_when_set() {
        assert!(matches!(
            ApprovalKeys::new("", [0u8; 32]),
            Err(KeyError::BadKeyId(_))
        ));
        assert!(matches!(
            ApprovalKeys::new("a.b", [0u8; 32]),
            Err(KeyError::BadKeyId(_))
        ));
        assert!(matches!(
            ApprovalKeys::new("k", [0u8; 31]),
            Err(KeyError::ShortSecret { bytes: 31, .. })
        ));
        let keys = ApprovalKeys::new("k", [0u8; 32]).unwrap();
        assert!(matches!(
            keys.previous("k", [1u8; 32]),
            Err(KeyError::DuplicateKeyId(_))
        ));
    }

    #[test]
    fn a_bad_signature_says_why() {
        let keys = ApprovalKeys::new("k1", [3u8; 32]).unwrap();
        let good = keys.sign("r:c", "c", "t", "{}");
        assert_eq!(keys.verify(&good, "r:c", "c", "t", "{ }"), Ok("k1"));
        let verify = |s: &str| keys.verify(s, "r:c", "c", "t", "{}");
        assert_eq!(verify(""), Err(SignatureError::Missing));
        assert_eq!(verify("no-dot"), Err(SignatureError::Malformed));
        assert_eq!(verify("k1.***"), Err(SignatureError::Malformed));
        assert_eq!(verify(&"k1.".repeat(60)), Err(SignatureError::Malformed));
        let other = good.replacen("k1.", "k0.", 1);
        assert_eq!(verify(&other), Err(SignatureError::UnknownKey("k0".into())));
        let mut flipped = good.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            verify(std::str::from_utf8(&flipped).unwrap()),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            keys.verify(&good, "r:c", "c", "other", "{}"),
            Err(SignatureError::Mismatch)
        );
    }
}
