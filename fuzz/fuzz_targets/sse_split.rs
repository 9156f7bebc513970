//! What the SSE parser targets check, for any provider's parser: the
//! body whole and split into pieces must read the same, never panic, and
//! end with at most one error, last; no tool-call index out of bounds.

use toolstack::model::{ModelDelta, MAX_TOOL_CALLS_PER_ANSWER};
use toolstack::ToolError;

/// Cuts `body` into pieces whose lengths a small generator seeded by
/// `seed` picks (0 to 64 bytes, empty pieces included).
fn split(seed: u8, body: &[u8]) -> Vec<Vec<u8>> {
    let mut state = u32::from(seed) | 1;
    let mut pieces = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let len = (state % 65) as usize;
        let (piece, tail) = rest.split_at(len.min(rest.len()));
        pieces.push(piece.to_vec());
        rest = tail;
    }
    pieces
}

/// What a consumer can tell apart: the deltas, and an error's kind and
/// message.
fn observable(items: &[Result<ModelDelta, ToolError>]) -> Vec<Result<&ModelDelta, String>> {
    items
        .iter()
        .map(|item| match item {
            Ok(delta) => Ok(delta),
            Err(err) => Err(format!("{}: {}", err.kind(), err.message())),
        })
        .collect()
}

/// Checks `parse` on `data`: one byte that seeds the split, then the body.
pub fn check(data: &[u8], parse: fn(Vec<Vec<u8>>) -> Vec<Result<ModelDelta, ToolError>>) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let whole = parse(vec![body.to_vec()]);
    let pieces = parse(split(seed, body));
    for (i, item) in whole.iter().enumerate() {
        match item {
            Ok(ModelDelta::ToolCall(call)) => {
                assert!(
                    (call.index as usize) < MAX_TOOL_CALLS_PER_ANSWER,
                    "{call:?}"
                );
            }
            Ok(_) => {}
            // An error ends the stream.
            Err(_) => assert_eq!(i + 1, whole.len(), "items after an error: {whole:?}"),
        }
    }
    assert_eq!(
        observable(&whole),
        observable(&pieces),
        "the split changed the deltas (seed {seed})"
    );
}
