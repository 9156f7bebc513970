//! The delta accumulator: any split and interleaving of a recorded stream of
//! tool-call fragments gives the same calls, whichever way the server sends
//! the names; hostile indices are refused before they size anything.

use std::collections::VecDeque;

use proptest::prelude::*;
use toolstack::model::{
    AccumulateError, Accumulator, Pushed, ToolCall, ToolCallDelta, MAX_TOOL_CALLS_PER_ANSWER,
};

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
            acc.push(&delta).unwrap();
        }
        prop_assert_eq!(acc.finish().unwrap(), calls);
    }
}

/// How a server sends a call's name.
#[derive(Debug, Clone, Copy)]
enum NameStyle {
    /// Whole, once, with the id (OpenAI).
    Once,
    /// In pieces before the arguments, the id with the first piece.
    Pieces,
    /// Whole again with the id in every fragment.
    ResentWithId,
    /// Whole again, without the id, in every fragment once the arguments
    /// have begun.
    ResentWithArguments,
}

/// A name as the pieces a server might stream it in: arbitrary pieces, or
/// one piece repeated (`"ab"`, `"ab"`), the case a naive rule drops.
fn name_pieces() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        proptest::collection::vec("[a-z_]{1,4}", 1..4),
        ("[a-z]{1,3}", 2..4usize).prop_map(|(piece, n)| vec![piece; n]),
    ]
}

fn style() -> impl Strategy<Value = NameStyle> {
    prop_oneof![
        Just(NameStyle::Once),
        Just(NameStyle::Pieces),
        Just(NameStyle::ResentWithId),
        Just(NameStyle::ResentWithArguments),
    ]
}

/// The fragments of call `index` as a server of `style` streams them.
fn fragments(
    index: u32,
    id: &str,
    pieces: &[String],
    arguments: &[String],
    style: NameStyle,
) -> VecDeque<ToolCallDelta> {
    let name = pieces.concat();
    let start = || ToolCallDelta::new(index).id(id);
    let mut out = VecDeque::new();
    match style {
        NameStyle::Once => {
            out.push_back(start().name(name));
            out.extend(
                arguments
                    .iter()
                    .map(|a| ToolCallDelta::new(index).arguments(a.clone())),
            );
        }
        NameStyle::Pieces => {
            out.push_back(start().name(pieces[0].clone()));
            out.extend(
                pieces[1..]
                    .iter()
                    .map(|p| ToolCallDelta::new(index).name(p.clone())),
            );
            out.extend(
                arguments
                    .iter()
                    .map(|a| ToolCallDelta::new(index).arguments(a.clone())),
            );
        }
        NameStyle::ResentWithId => {
            out.push_back(start().name(name.clone()));
            out.extend(
                arguments
                    .iter()
                    .map(|a| start().name(name.clone()).arguments(a.clone())),
            );
        }
        NameStyle::ResentWithArguments => {
            out.push_back(start().name(name.clone()));
            let mut begun = false;
            for a in arguments {
                let fragment = ToolCallDelta::new(index).arguments(a.clone());
                out.push_back(if begun {
                    fragment.name(name.clone())
                } else {
                    fragment
                });
                begun |= !a.is_empty();
            }
        }
    }
    out
}

proptest! {
    #[test]
    fn names_sent_once_in_pieces_or_resent_whole_come_out_exactly(
        calls in proptest::collection::vec((name_pieces(), arguments(), style()), 1..5),
        cuts in proptest::collection::vec(proptest::collection::vec(0usize..64, 0..8), 5),
        order_seed in proptest::collection::vec(0usize..5, 0..200),
    ) {
        let mut queues: Vec<VecDeque<ToolCallDelta>> = calls
            .iter()
            .enumerate()
            .map(|(i, (pieces, arguments, style))| {
                let arguments = split_at_chars(arguments, &cuts[i]);
                fragments(i as u32, &format!("call_{i}"), pieces, &arguments, *style)
            })
            .collect();
        let mut acc = Accumulator::new();
        let mut seeds = order_seed.into_iter();
        while queues.iter().any(|q| !q.is_empty()) {
            let live: Vec<usize> = (0..queues.len()).filter(|&i| !queues[i].is_empty()).collect();
            let pick = live[seeds.next().unwrap_or(0) % live.len()];
            acc.push(&queues[pick].pop_front().unwrap()).unwrap();
        }
        let got: Vec<(String, String)> =
            acc.finish().unwrap().into_iter().map(|c| (c.name, c.arguments)).collect();
        let want: Vec<(String, String)> =
            calls.into_iter().map(|(pieces, arguments, _)| (pieces.concat(), arguments)).collect();
        prop_assert_eq!(got, want);
    }
}

#[test]
fn a_call_is_not_finalised_because_its_arguments_already_parse() {
    let mut acc = Accumulator::new();
    assert_eq!(
        acc.push(&ToolCallDelta::new(0).id("c").name("n").arguments("1")),
        Ok(Pushed::Started)
    );
    // "1" is valid JSON, but more is coming.
    assert_eq!(
        acc.push(&ToolCallDelta::new(0).arguments("2")),
        Ok(Pushed::Continued)
    );
    assert_eq!(acc.finish().unwrap()[0].arguments, "12");
}

#[test]
fn a_name_repeated_in_every_fragment_is_kept_once_and_a_split_name_is_joined() {
    let mut acc = Accumulator::new();
    let pushes = [
        ToolCallDelta::new(0)
            .id("a")
            .name("get_weather")
            .arguments("{"),
        ToolCallDelta::new(0).name("get_weather").arguments("}"),
        ToolCallDelta::new(1).id("b").name("get_"),
        ToolCallDelta::new(1).name("time").arguments("{}"),
        ToolCallDelta::new(2).id("c").name("clock"),
        ToolCallDelta::new(2).id("c").name("clock"),
        ToolCallDelta::new(2).id("c").name("clock").arguments("{}"),
    ];
    for delta in &pushes {
        acc.push(delta).unwrap();
    }
    let calls = acc.finish().unwrap();
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].arguments, "{}");
    assert_eq!(calls[1].name, "get_time");
    assert_eq!(
        calls[2].name, "clock",
        "re-sent with the id, before arguments"
    );
}

#[test]
fn a_name_streamed_in_equal_pieces_is_joined_not_taken_for_a_repeat() {
    let mut acc = Accumulator::new();
    acc.push(&ToolCallDelta::new(0).id("a").name("ab")).unwrap();
    acc.push(&ToolCallDelta::new(0).name("ab")).unwrap();
    acc.push(&ToolCallDelta::new(0).arguments("{}")).unwrap();
    assert_eq!(acc.finish().unwrap()[0].name, "abab");
}

#[test]
fn an_index_of_u32_max_is_refused_without_sizing_the_table_for_it() {
    let mut acc = Accumulator::new();
    let err = acc
        .push(&ToolCallDelta::new(u32::MAX).id("x").name("boom"))
        .unwrap_err();
    assert_eq!(
        err,
        AccumulateError::TooManyCalls {
            index: u64::from(u32::MAX),
            max: MAX_TOOL_CALLS_PER_ANSWER
        }
    );
    assert!(acc.is_empty(), "nothing was stored");
    assert!(err.to_string().contains("at most 128 tool calls"), "{err}");
}

#[test]
fn more_parallel_calls_than_one_answer_may_hold_are_refused() {
    let mut acc = Accumulator::new();
    for index in 0..MAX_TOOL_CALLS_PER_ANSWER as u32 {
        acc.push(&ToolCallDelta::new(index).name("t").arguments("{}"))
            .unwrap();
    }
    let one_more = ToolCallDelta::new(MAX_TOOL_CALLS_PER_ANSWER as u32).name("t");
    assert!(matches!(
        acc.push(&one_more),
        Err(AccumulateError::TooManyCalls { index: 128, .. })
    ));
    assert_eq!(acc.finish().unwrap().len(), MAX_TOOL_CALLS_PER_ANSWER);
}

#[test]
fn a_call_without_a_name_keeps_an_empty_name_and_a_missing_id_is_made_up() {
    let mut acc = Accumulator::new();
    acc.push(&ToolCallDelta::new(0).arguments("{}")).unwrap();
    let calls = acc.finish().unwrap();
    assert_eq!(calls[0].name, "");
    assert_eq!(calls[0].id, "call_0");

    let mut acc = Accumulator::new();
    acc.push(&ToolCallDelta::new(2).name("t").arguments("{}"))
        .unwrap();
    let calls = acc.finish().unwrap();
    assert_eq!(calls.len(), 1, "gaps in the indices are skipped");
    assert_eq!(calls[0].id, "call_2");
}
