//! Arbitrary bytes as an Anthropic Messages SSE body, split into
//! transport pieces, through the parser `AnthropicModel` uses (the shared
//! SSE framing and event bound, the Messages events into `ModelDelta`s). It
//! must never panic, and however the body is split the deltas are the same.
//!
//! Input: one byte that seeds the split, then the body.

#![no_main]

use libfuzzer_sys::fuzz_target;
use toolstack::model::anthropic_fuzzing;

#[path = "sse_split.rs"]
mod sse_split;

fuzz_target!(|data: &[u8]| sse_split::check(data, anthropic_fuzzing::deltas_from_sse));
