//! What every store shared by processes has in common, whatever it keeps
//! (the rate limit's buckets, the spend limit's counters): why it gave no
//! answer ([`SharedStoreError`]), what a call does then ([`Fallback`]),
//! and a caller's key hashed the same in every process ([`StableHash`],
//! `push_caller`).

// Without the `redis` feature no shared store exists: nothing fails.
#![cfg_attr(not(feature = "redis"), allow(dead_code))]

use std::error::Error as StdError;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

#[cfg(feature = "redis")]
use sha2::{Digest, Sha256};
use toolstack::BoxError;

/// Why a shared store gave no answer.
#[derive(Debug)]
pub(crate) enum SharedStoreError {
    /// No answer within the command timeout.
    TimedOut(Duration),
    /// The store could not be reached a moment ago, and is left alone
    /// until its pause is over (one call then tries it again).
    RecentlyUnreachable,
    /// The command failed.
    Failed(BoxError),
}

impl fmt::Display for SharedStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SharedStoreError::TimedOut(after) => {
                write!(f, "no answer within {} ms", after.as_millis())
            }
            SharedStoreError::RecentlyUnreachable => {
                f.write_str("unreachable a moment ago; not asked again yet")
            }
            SharedStoreError::Failed(err) => write!(f, "{err}"),
        }
    }
}

impl StdError for SharedStoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            SharedStoreError::Failed(err) => Some(&**err),
            _ => None,
        }
    }
}

/// What a call does when the shared store gives no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fallback {
    /// The layer's in-process state decides: the rate limit's own limiter,
    /// with the same quota; the spend limit's own counters.
    Open,
    /// The call fails as `Unavailable`.
    Closed,
}

impl Fallback {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Fallback::Open => "open",
            Fallback::Closed => "closed",
        }
    }
}

/// A caller key fed to a hasher the store chooses (one whose output is
/// the same in every process), through the key's own [`Hash`].
pub(crate) trait StableHash {
    fn stable_hash(&self, state: &mut dyn Hasher);
}

impl<K: Hash> StableHash for K {
    fn stable_hash(&self, mut state: &mut dyn Hasher) {
        self.hash(&mut state);
    }
}

/// `caller`'s hash after `key`'s text: 128 bits of SHA-256, in hex, of
/// what its [`Hash`] writes (see [`StableHash`]), the same in every
/// process that has the same key type.
#[cfg(feature = "redis")]
pub(crate) fn push_caller(key: &mut String, caller: &dyn StableHash) {
    let mut hasher = StableHasher::default();
    caller.stable_hash(&mut hasher);
    push_hex(key, &hasher.0.finalize()[..16]);
}

/// `bytes` in lowercase hex, after `out`'s text: how a shared store's key
/// carries a hash.
#[cfg(feature = "redis")]
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// SHA-256 of what a key's `Hash` writes, with every integer written
/// little-endian at a fixed width, so that every process (on any platform)
/// that hashes the same caller gets the same bucket. `finish` is there for
/// the trait; the key uses the digest.
#[derive(Default)]
#[cfg(feature = "redis")]
struct StableHasher(Sha256);

#[cfg(feature = "redis")]
impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }

    fn write_u16(&mut self, i: u16) {
        self.write(&i.to_le_bytes());
    }

    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes());
    }

    fn write_u64(&mut self, i: u64) {
        self.write(&i.to_le_bytes());
    }

    fn write_u128(&mut self, i: u128) {
        self.write(&i.to_le_bytes());
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    fn write_i8(&mut self, i: i8) {
        self.write_u8(i as u8);
    }

    fn write_i16(&mut self, i: i16) {
        self.write_u16(i as u16);
    }

    fn write_i32(&mut self, i: i32) {
        self.write_u32(i as u32);
    }

    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64);
    }

    fn write_i128(&mut self, i: i128) {
        self.write_u128(i as u128);
    }

    fn write_isize(&mut self, i: isize) {
        self.write_u64(i as i64 as u64);
    }
}
