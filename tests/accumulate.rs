//! The delta accumulator: any split and interleaving of a recorded stream of
//! tool-call fragments gives the same calls.

use proptest::prelude::*;
use toolstack::model::{AccumulateError, Accumulator, Pushed, ToolCall, ToolCallDelta};

/// Cuts `text` at the given char-boundary-rounded positions.
fn split_at_chars(text: &str, cuts: &[usize]) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([chars.len()]) {
        pieces.push(chars[start..cut].iter().collect());
        start = cut;
    }
    pieces
}

fn arguments() -> impl Strategy<Value = String> {
    // JSON objects whose strings hold escapes, quotes and multi-byte text.
    proptest::collection::vec(("[a-z]{1,6}", "(\\PC|\"|\\\\|é|漢|🦀){0,12}"), 0..4).prop_map(
        |fields| {
            let map: serde_json::Map<String, serde_json::Value> = fields
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect();
            serde_json::Value::Object(map).to_string()
        },
    )
}

fn calls() -> impl Strategy<Value = Vec<ToolCall>> {
    proptest::collection::vec(("[a-z_]{1,12}", arguments()), 1..5).prop_map(|calls| {
        calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, arguments))| ToolCall {
                id: format!("call_{i}_x"),
                name,
                arguments,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn any_split_and_interleaving_gives_the_same_calls(
        calls in calls(),
        cuts in proptest::collection::vec(proptest::collection::vec(0usize..64, 0..8), 5),
        order_seed in proptest::collection::vec(0usize..5, 0..200),
    ) {
        // Each call's fragments in order; the first carries id and name.
        let mut queues: Vec<std::collections::VecDeque<ToolCallDelta>> = calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                split_at_chars(&call.arguments, &cuts[i])
                    .into_iter()
                    .enumerate()
                    .map(|(j, piece)| {
                        let delta = ToolCallDelta::new(i as u32).arguments(piece);
                        if j == 0 { delta.id(call.id.clone()).name(call.name.clone()) } else { delta }
                    })
                    .collect()
            })
            .collect();
        let mut acc = Accumulator::new();
        let mut seeds = order_seed.into_iter();
        while queues.iter().any(|q| !q.is_empty()) {
            let live: Vec<usize> = (0..queues.len()).filter(|&i| !queues[i].is_empty()).collect();
            let pick = live[seeds.next().unwrap_or(0) % live.len()];
            let delta = queues[pick].pop_front().unwrap();
            acc.push(&delta);
        }
        prop_assert_eq!(acc.finish().unwrap(), calls);
    }
}

#[test]
fn a_call_is_not_finalised_because_its_arguments_already_parse() {
    let mut acc = Accumulator::new();
    assert_eq!(
        acc.push(&ToolCallDelta::new(0).id("c").name("n").arguments("1")),
        Pushed::Started
    );
    // "1" is valid JSON, but more is coming.
    assert_eq!(
        acc.push(&ToolCallDelta::new(0).arguments("2")),
        Pushed::Continued
    );
    assert_eq!(acc.finish().unwrap()[0].arguments, "12");
}

#[test]
fn a_name_repeated_in_every_fragment_is_kept_once_and_a_split_name_is_joined() {
    let mut acc = Accumulator::new();
    acc.push(
        &ToolCallDelta::new(0)
            .id("a")
            .name("get_weather")
            .arguments("{"),
    );
    acc.push(&ToolCallDelta::new(0).name("get_weather").arguments("}"));
    acc.push(&ToolCallDelta::new(1).id("b").name("get_"));
    acc.push(&ToolCallDelta::new(1).name("time").arguments("{}"));
    let calls = acc.finish().unwrap();
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].arguments, "{}");
    assert_eq!(calls[1].name, "get_time");
}

#[test]
fn a_call_without_a_name_is_an_error_and_a_missing_id_is_made_up() {
    let mut acc = Accumulator::new();
    acc.push(&ToolCallDelta::new(0).arguments("{}"));
    assert_eq!(
        acc.finish().unwrap_err(),
        AccumulateError::MissingName { index: 0 }
    );

    let mut acc = Accumulator::new();
    acc.push(&ToolCallDelta::new(2).name("t").arguments("{}"));
    let calls = acc.finish().unwrap();
    assert_eq!(calls.len(), 1, "gaps in the indices are skipped");
    assert_eq!(calls[0].id, "call_2");
}
