//! The stored form of a [`Cached`] result, as [`RedisCacheStore`](super::RedisCacheStore)
//! keeps it: a small versioned binary.
//!
//! ```text
//! byte 0       version (1)
//! bytes 1..9   stored_at: milliseconds since the Unix epoch, u64 little-endian
//! then, for each item in order:
//!   1 byte     tag: 1 text, 2 JSON, 3 any other item
//!   4 bytes    payload length, u32 little-endian
//!   payload    text: its UTF-8; JSON: its JSON text, as produced;
//!              other: the item's own serde JSON ({"type":"image",…})
//! ```
//!
//! Text and JSON — nearly every result — are stored as they are, with
//! nothing escaped: a result's stored form is its bytes plus 5 per item
//! and 9 per entry. Reading checks every length, the UTF-8, the JSON and
//! the version; anything else reads as [`Malformed`] (a miss), never a
//! panic. A new version is a new tag byte, and entries of another version
//! are misses until they are stored again.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::value::RawValue;
use toolstack::{Json, ToolOutput};

use super::Cached;

const VERSION: u8 = 1;
const HEADER: usize = 9;

const TEXT: u8 = 1;
const JSON: u8 = 2;
const OTHER: u8 = 3;

/// A stored value that is not a result of this version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Malformed(&'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// `cached` in its stored form; `None` when an item cannot be written
/// (one longer than 4 GiB, one whose serde form fails).
pub(super) fn encode(cached: &Cached) -> Option<Vec<u8>> {
    let millis = cached
        .stored_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let mut out = Vec::with_capacity(HEADER + cached.bytes() + 5 * cached.items.len());
    out.push(VERSION);
    out.extend_from_slice(&u64::try_from(millis).ok()?.to_le_bytes());
    for item in cached.items.iter() {
        match item {
            ToolOutput::Text { text } => push(&mut out, TEXT, text.as_bytes())?,
            ToolOutput::Json { value } => push(&mut out, JSON, value.as_str().as_bytes())?,
            other => push(&mut out, OTHER, &serde_json::to_vec(other).ok()?)?,
        }
    }
    Some(out)
}

fn push(out: &mut Vec<u8>, tag: u8, payload: &[u8]) -> Option<()> {
    out.push(tag);
    out.extend_from_slice(&u32::try_from(payload.len()).ok()?.to_le_bytes());
    out.extend_from_slice(payload);
    Some(())
}

/// The result stored as `bytes`.
pub(super) fn decode(bytes: &[u8]) -> Result<Cached, Malformed> {
    let (&version, rest) = bytes.split_first().ok_or(Malformed("empty"))?;
    if version != VERSION {
        return Err(Malformed("another version"));
    }
    let (millis, mut rest) = rest
        .split_first_chunk::<8>()
        .ok_or(Malformed("truncated header"))?;
    let stored_at = UNIX_EPOCH
        .checked_add(Duration::from_millis(u64::from_le_bytes(*millis)))
        .ok_or(Malformed("time out of range"))?;
    let mut items = Vec::new();
    while let Some((&tag, after)) = rest.split_first() {
        let (len, after) = after
            .split_first_chunk::<4>()
            .ok_or(Malformed("truncated length"))?;
        let len = usize::try_from(u32::from_le_bytes(*len)).map_err(|_| Malformed("length"))?;
        if len > after.len() {
            return Err(Malformed("truncated item"));
        }
        let (payload, after) = after.split_at(len);
        items.push(item(tag, payload)?);
        rest = after;
    }
    Ok(Cached {
        items: items.into(),
        stored_at: clamp_future(stored_at),
    })
}

fn item(tag: u8, payload: &[u8]) -> Result<ToolOutput, Malformed> {
    match tag {
        TEXT => {
            let text = std::str::from_utf8(payload).map_err(|_| Malformed("text not UTF-8"))?;
            Ok(ToolOutput::text(text))
        }
        JSON => {
            let text = std::str::from_utf8(payload).map_err(|_| Malformed("JSON not UTF-8"))?;
            // Kept as the exact text it was stored as (no tree, no
            // reordering, no number rounding), once checked to be JSON.
            let raw: &RawValue = serde_json::from_str(text).map_err(|_| Malformed("not JSON"))?;
            let json = Json::to_json(raw).map_err(|_| Malformed("not JSON"))?;
            Ok(ToolOutput::json(json))
        }
        OTHER => serde_json::from_slice(payload).map_err(|_| Malformed("not an item")),
        _ => Err(Malformed("unknown item tag")),
    }
}

/// A time stored by a process whose clock runs ahead reads as now (the
/// age a hit reports is then 0 s, not a negative one).
fn clamp_future(at: SystemTime) -> SystemTime {
    at.min(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use toolstack::{Progress, Resource};

    use super::*;

    fn sample() -> Cached {
        Cached {
            items: Arc::from(vec![
                ToolOutput::text("sunny in Oslo, \"quoted\"\n"),
                ToolOutput::to_json(&serde_json::json!({"b": 1, "a": [1.50, 2e3]})).unwrap(),
                ToolOutput::image("aGVsbG8=", "image/png"),
                ToolOutput::resource(Resource::text("file:///a.txt", "text")),
                ToolOutput::progress(Progress::new(0.5).message("half")),
                ToolOutput::text(""),
            ]),
            stored_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        }
    }

    #[test]
    fn a_result_reads_back_as_it_was_stored() {
        let cached = sample();
        let back = decode(&encode(&cached).unwrap()).unwrap();
        assert_eq!(*back.items, *cached.items);
        assert_eq!(back.stored_at, cached.stored_at);
    }

    #[test]
    fn json_items_keep_their_exact_text() {
        let text = r#"{"z":1,"a":12345678901234567890123,"f":1.0}"#;
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        let cached = Cached {
            items: Arc::from(vec![ToolOutput::json(Json::to_json(raw).unwrap())]),
            stored_at: UNIX_EPOCH,
        };
        let back = decode(&encode(&cached).unwrap()).unwrap();
        assert_eq!(back.items[0].as_json().unwrap().as_str(), text);
    }

    #[test]
    fn text_is_stored_unescaped_with_five_bytes_of_framing() {
        let cached = Cached {
            items: Arc::from(vec![ToolOutput::text("a\"b\\c")]),
            stored_at: UNIX_EPOCH,
        };
        assert_eq!(encode(&cached).unwrap().len(), HEADER + 5 + 5);
    }

    #[test]
    fn every_truncation_and_corruption_is_malformed_never_a_panic() {
        let bytes = encode(&sample()).unwrap();
        for end in 0..bytes.len() {
            // A cut on an item boundary is a shorter valid result; any
            // other cut is malformed. Neither panics.
            let _ = decode(&bytes[..end]);
        }
        for i in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut corrupt = bytes.clone();
                corrupt[i] ^= flip;
                let _ = decode(&corrupt);
            }
        }
        assert_eq!(decode(&[]).unwrap_err(), Malformed("empty"));
        assert_eq!(decode(&[9; 20]).unwrap_err(), Malformed("another version"));
        assert_eq!(
            decode(&[1, 0, 0]).unwrap_err(),
            Malformed("truncated header")
        );
        let mut huge = bytes[..HEADER].to_vec();
        huge.extend_from_slice(&[TEXT, 0xff, 0xff, 0xff, 0xff, b'x']);
        assert_eq!(decode(&huge).unwrap_err(), Malformed("truncated item"));
        let mut bad_tag = bytes[..HEADER].to_vec();
        bad_tag.extend_from_slice(&[7, 0, 0, 0, 0]);
        assert_eq!(decode(&bad_tag).unwrap_err(), Malformed("unknown item tag"));
        let mut not_json = bytes[..HEADER].to_vec();
        not_json.extend_from_slice(&[JSON, 2, 0, 0, 0, b'{', b'x']);
        assert_eq!(decode(&not_json).unwrap_err(), Malformed("not JSON"));
    }
}
