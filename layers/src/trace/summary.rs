//! [`StreamSummary`] and [`Outcome`]: what a call produced and how it
//! ended, as the end hooks see it.

use std::fmt;
use std::time::Duration;

/// How a call's stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The stream ended after its last item.
    Completed,
    /// The call failed: the response future or the stream yielded an error.
    Failed,
    /// The consumer dropped the future or the stream before its end.
    Cancelled,
}

impl Outcome {
    /// A short lowercase name: `completed`, `failed` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a call produced, reported once when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSummary {
    pub(super) items: u64,
    pub(super) bytes: u64,
    pub(super) duration: Duration,
    pub(super) outcome: Outcome,
}

impl StreamSummary {
    /// The number of `Ok` items the stream yielded.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// The items' total [`size_hint`](crate::Output::byte_len);
    /// zero when nothing was listening when the call started, as then the
    /// sizes are not computed.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Time from `call` to the end; zero when nothing was listening when the
    /// call started, as then the clock is not read.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// How the stream ended.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }
}
