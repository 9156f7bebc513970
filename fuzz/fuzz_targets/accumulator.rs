//! Arbitrary sequences of `ToolCallDelta`s through `Accumulator::push`
//! and `finish`, checked against a model of the documented rules: an
//! index of `MAX_TOOL_CALLS_PER_ANSWER` or more is refused and stores
//! nothing, arguments are joined in order, a repeated name is dropped only
//! when it comes with the call's id or after argument text, a missing id
//! is `call_<index>`. Memory stays bounded by the input.

#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use toolstack::model::{Accumulator, Pushed, ToolCallDelta, MAX_TOOL_CALLS_PER_ANSWER};

#[derive(Arbitrary, Debug)]
struct Fragment {
    /// Mostly a small index (so fragments meet), sometimes any `u32`.
    index: u32,
    any_index: bool,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

#[derive(Default, Debug)]
struct Model {
    id: Option<String>,
    name: String,
    arguments: String,
}

fuzz_target!(|fragments: Vec<Fragment>| {
    let mut acc = Accumulator::new();
    let mut model: BTreeMap<u32, Model> = BTreeMap::new();
    let mut input_bytes = 0;
    for fragment in &fragments {
        let index = if fragment.any_index {
            fragment.index
        } else {
            fragment.index % (MAX_TOOL_CALLS_PER_ANSWER as u32 + 8)
        };
        let mut delta = ToolCallDelta::new(index).arguments(fragment.arguments.clone());
        delta.id = fragment.id.clone();
        delta.name = fragment.name.clone();
        input_bytes += fragment.arguments.len()
            + fragment.id.as_ref().map_or(0, String::len)
            + fragment.name.as_ref().map_or(0, String::len);

        let pushed = acc.push(&delta);
        if index as usize >= MAX_TOOL_CALLS_PER_ANSWER {
            assert!(pushed.is_err(), "index {index} accepted");
            assert!(acc.get(index).is_none());
            continue;
        }
        let started = !model.contains_key(&index);
        assert_eq!(
            pushed,
            Ok(if started {
                Pushed::Started
            } else {
                Pushed::Continued
            })
        );
        let call = model.entry(index).or_default();
        let id = delta.id.as_deref().filter(|id| !id.is_empty());
        if let Some(name) = delta.name.as_deref().filter(|name| !name.is_empty()) {
            let repeat = call.name == name
                && (id.is_some() && call.id.as_deref() == id || !call.arguments.is_empty());
            if !repeat {
                call.name.push_str(name);
            }
        }
        if let Some(id) = id {
            call.id = Some(id.to_owned());
        }
        call.arguments.push_str(&delta.arguments);
        let (got_id, got_name) = acc.get(index).expect("a started call");
        assert_eq!(got_id, call.id.as_deref());
        assert_eq!(got_name, call.name);
    }
    assert_eq!(acc.is_empty(), model.is_empty());
    let calls = acc.finish().expect("finish never fails");
    assert_eq!(calls.len(), model.len());
    assert!(calls.len() <= MAX_TOOL_CALLS_PER_ANSWER);
    let mut held = 0;
    for (call, (index, expected)) in calls.iter().zip(&model) {
        let id = expected
            .id
            .clone()
            .unwrap_or_else(|| format!("call_{index}"));
        assert_eq!(call.id, id);
        assert_eq!(call.name, expected.name);
        assert_eq!(call.arguments, expected.arguments);
        held +=
            call.name.len() + call.arguments.len() + expected.id.as_ref().map_or(0, String::len);
    }
    // Nothing is held that the input did not bring (the ids made up for
    // calls without one aside).
    assert!(
        held <= input_bytes,
        "{held} bytes held for {input_bytes} of input"
    );
});
