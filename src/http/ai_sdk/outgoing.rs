//! What a response sends next ([`Outgoing`]), and the chunks written
//! straight to JSON text: those that come for every fragment a model
//! streams, and those that carry a tool's output. A tool's JSON output
//! goes into its chunk as the text it is — written once, by the tool's
//! own serializer — not parsed back into a tree and written again.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Serialize;
use serde_json::{json, Value};

use crate::{Json, ToolOutput, ToolResult};

/// What a response sends next: a chunk, or the end (`[DONE]`).
pub(super) enum Outgoing {
    Chunk(Value),
    /// A chunk written already (one that carries a tool's output): its
    /// JSON text.
    Written(String),
    Done,
}

/// The chunks an event maps to, in order: values, or chunks written at
/// once — those that come for every fragment a model streams, and those
/// that carry a tool's output as it was written.
pub(super) struct ChunkWriter<'a>(&'a mut VecDeque<Outgoing>);

impl<'a> ChunkWriter<'a> {
    pub(super) fn new(out: &'a mut VecDeque<Outgoing>) -> Self {
        ChunkWriter(out)
    }

    pub(super) fn value(&mut self, chunk: Value) {
        self.0.push_back(Outgoing::Chunk(chunk));
    }

    pub(super) fn written(&mut self, chunk: &impl Serialize) {
        self.0.push_back(match serde_json::to_string(chunk) {
            Ok(text) => Outgoing::Written(text),
            // Strings, and a `Json`'s valid text: this is only defence.
            Err(err) => Outgoing::Chunk(json!({
                "type": "error", "errorText": format!("a chunk could not be written: {err}"),
            })),
        });
    }
}

/// A `text-delta` or `reasoning-delta` chunk.
#[derive(Serialize)]
pub(super) struct Delta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    delta: &'a str,
}

impl<'a> Delta<'a> {
    pub(super) fn new(kind: &'static str, id: &'a str, delta: &'a str) -> Self {
        Delta { kind, id, delta }
    }
}

/// A `tool-input-delta` chunk: a fragment of a call's argument text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InputDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    tool_call_id: &'a str,
    input_text_delta: &'a str,
}

impl<'a> InputDelta<'a> {
    pub(super) fn new(tool_call_id: &'a str, input_text_delta: &'a str) -> Self {
        InputDelta {
            kind: "tool-input-delta",
            tool_call_id,
            input_text_delta,
        }
    }
}

/// A `tool-output-available` chunk: its output embedded as it is.
#[derive(Serialize)]
pub(super) struct OutputAvailable<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(rename = "toolCallId")]
    tool_call_id: &'a str,
    output: ChunkOutput<'a>,
    /// Whether a later one replaces it (a streamed item's), said only then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    preliminary: bool,
}

impl<'a> OutputAvailable<'a> {
    /// The chunk of call part `id`'s `output`.
    pub(super) fn new(id: &'a str, output: ChunkOutput<'a>, preliminary: bool) -> Self {
        OutputAvailable {
            kind: "tool-output-available",
            tool_call_id: id,
            output,
            preliminary,
        }
    }
}

/// A tool's output as a chunk carries it: text as a string, JSON items as
/// the JSON they are — embedded as written, not parsed back — or a value.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum ChunkOutput<'a> {
    Text(Cow<'a, str>),
    Json(&'a Json),
    List(Vec<ChunkOutput<'a>>),
    Value(Value),
}

impl<'a> ChunkOutput<'a> {
    /// A JSON item as a chunk carries it: as written, when that is what
    /// parsing it and writing it again would give — compact, and no deeper
    /// than a parser reads back (serde_json's 127 levels); else its
    /// value, as [`Json::value`] has it (its text, past that depth).
    fn json(json: &'a Json) -> Self {
        match is_written_as_read(json.as_str()) {
            true => ChunkOutput::Json(json),
            false => ChunkOutput::Value(json.value()),
        }
    }
}

/// One streamed item as a preliminary output: text as a string, JSON as
/// its value, anything else as its JSON.
pub(super) fn item_output(output: &ToolOutput) -> ChunkOutput<'_> {
    if let Some(text) = output.as_text() {
        return ChunkOutput::Text(Cow::Borrowed(text));
    }
    if let Some(json) = output.as_json() {
        return ChunkOutput::json(json);
    }
    ChunkOutput::Value(serde_json::to_value(output).unwrap_or(Value::Null))
}

/// A result as the final output: its structured content, else its text.
pub(super) fn result_output(result: &ToolResult) -> ChunkOutput<'_> {
    // What the model reads: its JSON items (not output for programs only,
    // which a client-kept history would turn into what the model reads).
    let mut json = result.content.iter().filter_map(|item| match item {
        crate::ToolOutput::Json { value } => Some(ChunkOutput::json(value)),
        _ => None,
    });
    match (json.next(), json.next()) {
        (None, _) => ChunkOutput::Text(Cow::Owned(result.text())),
        (Some(one), None) => one,
        (Some(first), Some(second)) => {
            ChunkOutput::List([first, second].into_iter().chain(json).collect())
        }
    }
}

/// Whether JSON `text` (valid, as a [`Json`]'s always is) is what parsing
/// it and writing it again gives, as far as a chunk's reader can tell: no
/// whitespace outside its strings (a serializer writes none; a line break
/// would split the event's data), and nested no deeper than serde_json
/// reads (127 levels).
fn is_written_as_read(text: &str) -> bool {
    const MAX_DEPTH: usize = 127;
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in text.as_bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b' ' | b'\t' | b'\n' | b'\r' => return false,
            _ => {}
        }
    }
    true
}

/// A result's final output as a value (what a front end reads).
#[cfg(test)]
fn result_value(result: &ToolResult) -> Value {
    serde_json::to_value(result_output(result)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod result_value_tests {
    use super::*;
    use crate::ToolOutput;

    fn written(chunk: OutputAvailable<'_>) -> String {
        let mut out = VecDeque::new();
        ChunkWriter(&mut out).written(&chunk);
        match out.pop_front() {
            Some(Outgoing::Written(text)) => text,
            _ => panic!("a chunk written"),
        }
    }

    #[test]
    fn a_delta_is_written_as_its_value_was() {
        let delta = "a \"quoted\"\n\tline, é, \u{1} and \\ too";
        let cases = [
            (
                serde_json::to_string(&Delta::new("text-delta", "text-1", delta)).unwrap(),
                json!({"type": "text-delta", "id": "text-1", "delta": delta}),
            ),
            (
                serde_json::to_string(&InputDelta {
                    kind: "tool-input-delta",
                    tool_call_id: "call_1",
                    input_text_delta: delta,
                })
                .unwrap(),
                json!({"type": "tool-input-delta", "toolCallId": "call_1", "inputTextDelta": delta}),
            ),
        ];
        for (written, value) in cases {
            assert_eq!(serde_json::from_str::<Value>(&written).unwrap(), value);
            // With ordered maps (the default), to the byte.
            #[cfg(feature = "preserve_order")]
            assert_eq!(written, value.to_string());
        }
    }

    #[test]
    fn a_json_output_goes_into_its_chunk_as_written() {
        let json = Json::from(json!({"sum": 5, "parts": [2, 3]}));
        let chunk = OutputAvailable::new("c1", ChunkOutput::json(&json), true);
        assert_eq!(
            written(chunk),
            r#"{"type":"tool-output-available","toolCallId":"c1","output":{"sum":5,"parts":[2,3]},"preliminary":true}"#
        );
        let text = ToolOutput::text("line 1\nline 2");
        let chunk = OutputAvailable::new("c1", item_output(&text), false);
        assert_eq!(
            written(chunk),
            r#"{"type":"tool-output-available","toolCallId":"c1","output":"line 1\nline 2"}"#
        );
        // What parsing would change is parsed: a line break outside a
        // string, a depth serde_json does not read back (its text).
        let spaced = Json::from_json_text("{\"a\": [1,\n 2]}".to_owned());
        let chunk = OutputAvailable::new("c1", ChunkOutput::json(&spaced), false);
        assert_eq!(
            written(chunk),
            r#"{"type":"tool-output-available","toolCallId":"c1","output":{"a":[1,2]}}"#
        );
        let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        let deep = Json::from_json_text(deep);
        assert_eq!(
            serde_json::to_value(ChunkOutput::json(&deep)).unwrap(),
            Value::String(deep.as_str().to_owned())
        );
        let deepest_read = format!("{}{}", "[".repeat(127), "]".repeat(127));
        assert!(is_written_as_read(&deepest_read));
        assert!(is_written_as_read(r#"{"a b":"c\" {[ d","e":[]}"#));
    }

    #[test]
    fn the_tool_output_a_front_end_keeps_is_what_the_model_read() {
        // Text for the model, its structured copy for programs: the text.
        let mut read_once = ToolResult::default();
        read_once.push(ToolOutput::text("the file"));
        read_once.push(ToolOutput::structured(json!({"content": "the file"})));
        assert_eq!(result_value(&read_once), json!("the file"));
        // A JSON item the model reads: the JSON.
        let mut json_item = ToolResult::default();
        json_item.push(ToolOutput::json(json!({"sum": 5})));
        assert_eq!(result_value(&json_item), json!({"sum": 5}));
    }
}
