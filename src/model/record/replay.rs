//! The replaying side: [`ReplayModel`] answers from a recording.

use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use serde_json::Value;
use tower_service::Service;

use super::{
    digest, normalised, Exchange, Header, ReplayError, TimedItem, FORMAT, MAX_RECORDING_BYTES,
    VERSION,
};
use crate::model::{ChatRequest, ModelDelta};
use crate::{ErrorKind, ToolError};

/// Which recorded exchange answers a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Order {
    /// The n-th call is answered by the n-th exchange, whose request must
    /// match: a run that asks in another order, or asks something else,
    /// fails.
    #[default]
    InOrder,
    /// Each call by the first exchange not yet replayed whose request
    /// matches (concurrent calls, or an order that may vary).
    ByMatch,
}

/// How fast a replay answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pace {
    /// At once: every item is ready.
    #[default]
    Fast,
    /// With the time recorded before each item (on tokio's clock, so a
    /// test with a paused clock advances through it at once).
    Recorded,
}

/// A model answering from a recording; see the [module docs](super).
#[derive(Clone, Debug)]
pub struct ReplayModel {
    exchanges: Arc<[Exchange]>,
    used: Arc<Mutex<Vec<bool>>>,
    next: Arc<Mutex<usize>>,
    order: Order,
    pace: Pace,
}

/// The longest line of a diff an error shows, and how many lines.
const DIFF_LINES: usize = 12;

impl ReplayModel {
    /// Reads the recording at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ReplayError> {
        let file = std::fs::File::open(path)?;
        let bytes = file.metadata()?.len();
        if bytes > MAX_RECORDING_BYTES {
            return Err(ReplayError::TooLarge { bytes });
        }
        Self::read(BufReader::new(file.take(MAX_RECORDING_BYTES)))
    }

    /// Reads a recording from `reader`.
    pub fn read(reader: impl BufRead) -> Result<Self, ReplayError> {
        let mut lines = reader.lines();
        let corrupt = |line: usize, why: String| ReplayError::Corrupt { line, why };
        let first = lines
            .next()
            .ok_or_else(|| corrupt(1, "the recording is empty".to_owned()))??;
        let header: Header = serde_json::from_str(&first)
            .map_err(|err| corrupt(1, format!("not a recording's first line: {err}")))?;
        if header.format != FORMAT {
            return Err(corrupt(
                1,
                format!("the format is {:?}, not {FORMAT:?}", header.format),
            ));
        }
        if header.version > VERSION {
            return Err(ReplayError::NewerFormat {
                found: header.version,
                supported: VERSION,
            });
        }
        let mut exchanges = Vec::new();
        for (i, line) in lines.enumerate() {
            let number = i + 2;
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let exchange: Exchange = serde_json::from_str(&line)
                .map_err(|err| corrupt(number, format!("{err} (truncated or corrupt)")))?;
            if exchange.digest != digest(&exchange.request) {
                return Err(corrupt(
                    number,
                    "its digest is not its request's (the line was edited)".to_owned(),
                ));
            }
            exchanges.push(exchange);
        }
        let used = vec![false; exchanges.len()];
        Ok(ReplayModel {
            exchanges: exchanges.into(),
            used: Arc::new(Mutex::new(used)),
            next: Arc::new(Mutex::new(0)),
            order: Order::default(),
            pace: Pace::default(),
        })
    }

    /// Answers by `order` ([`Order::InOrder`] unless set).
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Answers at `pace` ([`Pace::Fast`] unless set).
    pub fn pace(mut self, pace: Pace) -> Self {
        self.pace = pace;
        self
    }

    /// How many exchanges the recording has.
    pub fn len(&self) -> usize {
        self.exchanges.len()
    }

    /// Whether the recording has none.
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty()
    }

    /// The model the first recorded request asked for (what a replaying
    /// agent names on its requests, so that they match).
    pub fn recorded_model(&self) -> Option<String> {
        let first = self.exchanges.first()?;
        first.request["model"].as_str().map(str::to_owned)
    }

    /// How many have been replayed.
    pub fn replayed(&self) -> usize {
        let used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        used.iter().filter(|u| **u).count()
    }

    /// The exchange that answers `request`, or why none does.
    fn answer(&self, request: &Value) -> Result<&Exchange, ToolError> {
        let wanted = digest(request);
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let found = match self.order {
            Order::InOrder => {
                let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
                let at = *next;
                match self.exchanges.get(at) {
                    Some(exchange) if exchange.digest == wanted => {
                        *next += 1;
                        Some(at)
                    }
                    Some(exchange) => {
                        return Err(not_recorded(
                            request,
                            Some((at, &exchange.request)),
                            &format!("call {} of the replay", at + 1),
                        ))
                    }
                    None => match self.exchanges.iter().position(|e| e.digest == wanted) {
                        Some(seen) => {
                            return Err(ToolError::new(
                                ErrorKind::NotFound,
                                format!(
                                    "the replay has no call {} left: the recording has {} exchanges, and this request was exchange {} (asked again)",
                                    at + 1,
                                    self.exchanges.len(),
                                    seen + 1
                                ),
                            ))
                        }
                        None => None,
                    },
                }
            }
            Order::ByMatch => self
                .exchanges
                .iter()
                .enumerate()
                .position(|(i, e)| !used[i] && e.digest == wanted),
        };
        match found {
            Some(at) => {
                used[at] = true;
                Ok(&self.exchanges[at])
            }
            None => {
                let nearest = self
                    .exchanges
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| distance(request, &e.request))
                    .map(|(i, e)| (i, &e.request));
                Err(not_recorded(request, nearest, "this request"))
            }
        }
    }
}

/// How unlike two requests are: the lines of one not in the other.
fn distance(a: &Value, b: &Value) -> usize {
    let (a, b) = (pretty(a), pretty(b));
    let b_lines: std::collections::HashSet<&str> = b.lines().collect();
    let a_lines: std::collections::HashSet<&str> = a.lines().collect();
    a.lines().filter(|l| !b_lines.contains(l)).count()
        + b.lines().filter(|l| !a_lines.contains(l)).count()
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// `NotFound`: `what` was not recorded; the nearest recorded request (the
/// exchange's number and request) and where they first differ.
fn not_recorded(request: &Value, nearest: Option<(usize, &Value)>, what: &str) -> ToolError {
    let Some((at, recorded)) = nearest else {
        return ToolError::new(
            ErrorKind::NotFound,
            format!("{what} was not recorded: the recording has no exchange"),
        );
    };
    let diff = first_difference(&pretty(recorded), &pretty(request));
    ToolError::new(
        ErrorKind::NotFound,
        format!(
            "{what} was not recorded; the nearest recorded request is exchange {} (line {} of the file), which differs (- recorded, + asked):\n{diff}",
            at + 1,
            at + 2,
        ),
    )
}

/// The lines around where `recorded` and `asked` first differ: the common
/// prefix and suffix dropped, at most [`DIFF_LINES`] of each side shown.
fn first_difference(recorded: &str, asked: &str) -> String {
    let old: Vec<&str> = recorded.lines().collect();
    let new: Vec<&str> = asked.lines().collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = String::new();
    if prefix > 0 {
        out.push_str(&format!("  {}\n", old[prefix - 1]));
    }
    let side = |out: &mut String, lines: &[&str], sign: char| {
        for line in lines.iter().take(DIFF_LINES) {
            out.push_str(&format!("{sign} {line}\n"));
        }
        if lines.len() > DIFF_LINES {
            out.push_str(&format!(
                "{sign} … {} more lines\n",
                lines.len() - DIFF_LINES
            ));
        }
    };
    side(&mut out, &old[prefix..old.len() - suffix], '-');
    side(&mut out, &new[prefix..new.len() - suffix], '+');
    out
}

impl Service<ChatRequest> for ReplayModel {
    type Response = ReplayStream;
    type Error = ToolError;
    type Future = std::future::Ready<Result<ReplayStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let request = normalised(&request);
        std::future::ready(self.answer(&request).map(|exchange| {
            if !exchange.complete {
                tracing::warn!("replaying an answer that was dropped before its end when recorded");
            }
            ReplayStream {
                steps: exchange.steps.clone().into_iter(),
                pace: self.pace,
                sleep: None,
            }
        }))
    }
}

/// A replayed answer.
pub struct ReplayStream {
    steps: std::vec::IntoIter<TimedItem>,
    pace: Pace,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl std::fmt::Debug for ReplayStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayStream")
            .field("left", &self.steps.len())
            .finish_non_exhaustive()
    }
}

impl Stream for ReplayStream {
    type Item = Result<ModelDelta, ToolError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(step) = self.steps.as_slice().first().cloned() else {
            return Poll::Ready(None);
        };
        if self.pace == Pace::Recorded && step.after_us > 0 {
            let sleep = self.sleep.get_or_insert_with(|| {
                Box::pin(tokio::time::sleep(Duration::from_micros(step.after_us)))
            });
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        self.steps.next();
        Poll::Ready(Some(step.item.to_delta()))
    }
}
