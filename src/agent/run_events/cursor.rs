//! [`Cursor`]: a place in a run's event log.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A place in a run's event log: the events read are those after it.
/// Opaque — each log writes its own (the memory log a count, the Redis
/// log a stream entry id) — and a string, so that an HTTP client can hand
/// it back to resume where it stopped. Serializes as that string.
///
/// A cursor is read by the log of the same kind that gave it; any other
/// string is [`RunEventsError::BadCursor`](super::RunEventsError::BadCursor)
/// when it does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cursor(String);

impl Cursor {
    /// The cursor as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The cursor as text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl From<String> for Cursor {
    /// A cursor handed back (read from a request); checked when read.
    fn from(text: String) -> Self {
        Cursor(text)
    }
}

impl From<&str> for Cursor {
    /// A cursor handed back (read from a request); checked when read.
    fn from(text: &str) -> Self {
        Cursor(text.to_owned())
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
