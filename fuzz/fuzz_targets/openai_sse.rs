//! Arbitrary bytes as an OpenAI chat-completions SSE body, split into
//! transport pieces, through the parser `OpenAiModel` uses (the SSE
//! framing, the event bound, the chunk JSON into `ModelDelta`s). It must
//! never panic, and however the body is split the deltas are the same.
//!
//! Input: one byte that seeds the split, then the body.

#![no_main]

use libfuzzer_sys::fuzz_target;
use toolstack::model::fuzzing;

#[path = "sse_split.rs"]
mod sse_split;

fuzz_target!(|data: &[u8]| sse_split::check(data, fuzzing::deltas_from_sse));
