//! Agent events as the protocol's chunks: [`ChunkMapper`], and the values
//! it puts in them (finish reasons, tool outputs and results). A tool's
//! JSON output goes into its chunk as the text it is — written once, by
//! the tool's own serializer — not parsed back into a tree and written
//! again.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde::Serialize;
use serde_json::{json, Value};

use crate::agent::{AgentEvent, StopReason};
use crate::approval::Decision;
use crate::{Json, ToolOutput, ToolResult};

use super::approvals::Approvals;

/// What a response sends next: a chunk, or the end (`[DONE]`).
pub(super) enum Outgoing {
    Chunk(Value),
    /// A chunk written already (one that carries a tool's output): its
    /// JSON text.
    Written(String),
    Done,
}

/// Turns agent events into chunks, keeping what the protocol needs: the
/// open text part, the step, the ids the tool parts got.
#[derive(Default)]
pub(super) struct ChunkMapper {
    pub(super) step_open: bool,
    /// A tool event came in this step: the next model event begins another.
    pub(super) after_tools: bool,
    pub(super) text: Option<String>,
    /// The open reasoning part (a model's thinking, streamed before its
    /// text): its own id, ended when text, a call or the step's end comes.
    pub(super) reasoning: Option<String>,
    pub(super) texts: u64,
    /// The current answer's calls being written: index → the part's id.
    pub(super) writing: BTreeMap<u32, String>,
    /// Call ids with a tool part.
    pub(super) parts: HashSet<String>,
    /// A call's id → its part's id, where they differ (an id that came
    /// after the call's first fragment).
    pub(super) alias: HashMap<String, String>,
    /// Calls denied by their approval: they end `tool-output-denied`.
    pub(super) denied: HashSet<String>,
    /// Calls a policy decided, with its reason, until the decision comes.
    pub(super) automatic: HashMap<String, Option<String>>,
    /// The agent asks for a typed answer: its text streams as the object
    /// it forms, too (`data-output`).
    pub(super) typed: bool,
    /// The text of the open text part, and the object it last formed.
    pub(super) answer: String,
    pub(super) formed: Option<Value>,
}

impl ChunkMapper {
    pub(super) fn event(
        &mut self,
        event: AgentEvent,
        approvals: &Approvals,
        out: &mut VecDeque<Outgoing>,
    ) {
        let mut push = ChunkWriter(out);
        match event {
            AgentEvent::ReasoningDelta(delta) => {
                self.model_event(&mut push);
                if let Some(id) = self.text.take() {
                    push.value(json!({"type": "text-end", "id": id}));
                }
                if self.reasoning.is_none() {
                    self.texts += 1;
                    let id = format!("reasoning-{}", self.texts);
                    push.value(json!({"type": "reasoning-start", "id": id}));
                    self.reasoning = Some(id);
                }
                let id = self.reasoning.as_deref().unwrap_or_default();
                push.written(&Delta::new("reasoning-delta", id, &delta));
            }
            AgentEvent::TextDelta(delta) => {
                self.model_event(&mut push);
                if let Some(id) = self.reasoning.take() {
                    push.value(json!({"type": "reasoning-end", "id": id}));
                }
                if self.text.is_none() {
                    self.texts += 1;
                    self.answer.clear();
                    let id = format!("text-{}", self.texts);
                    push.value(json!({"type": "text-start", "id": id}));
                    self.text = Some(id);
                }
                if self.typed {
                    self.answer.push_str(&delta);
                }
                let id = self.text.as_deref().unwrap_or_default();
                push.written(&Delta::new("text-delta", id, &delta));
                if self.typed {
                    let formed = crate::agent::partial_json(&self.answer);
                    if formed.is_some() && formed != self.formed {
                        push.value(json!({"type": "data-output", "id": "output",
                                    "data": {"value": formed, "final": false}}));
                        self.formed = formed;
                    }
                }
            }
            AgentEvent::Output(value) => {
                push.value(json!({"type": "data-output", "id": "output",
                            "data": {"value": value, "final": true}}));
            }
            AgentEvent::ToolCallStarted { index, id, name } => {
                self.model_event(&mut push);
                self.close_text(&mut push);
                let id = id.unwrap_or_else(|| format!("call_{index}"));
                self.writing.insert(index, id.clone());
                self.parts.insert(id.clone());
                push.value(json!({"type": "tool-input-start", "toolCallId": id, "toolName": name}));
            }
            AgentEvent::ToolCallInputDelta { index, arguments } => {
                if let Some(id) = self.writing.get(&index) {
                    push.written(&InputDelta {
                        kind: "tool-input-delta",
                        tool_call_id: id,
                        input_text_delta: &arguments,
                    });
                }
            }
            AgentEvent::ToolCall(call) => {
                self.tool_event(&mut push);
                let id = self.part_of_call(&call.id);
                match crate::arguments::parse(&call.arguments) {
                    Ok(input) => push.value(json!({
                        "type": "tool-input-available", "toolCallId": id,
                        "toolName": call.name, "input": input,
                    })),
                    Err(err) => push.value(json!({
                        "type": "tool-input-error", "toolCallId": id, "toolName": call.name,
                        "input": call.arguments, "errorText": err.message(),
                    })),
                }
            }
            AgentEvent::ToolOutput { call_id, output } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                push.written(&OutputAvailable::new(&id, item_output(&output), true));
            }
            AgentEvent::Progress { call_id, progress } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                push.value(json!({
                    "type": "data-progress", "id": format!("progress-{id}"),
                    "data": {"toolCallId": id, "progress": progress.progress,
                             "total": progress.total, "message": progress.message},
                }));
            }
            AgentEvent::ApprovalRequested {
                call_id,
                name,
                arguments,
                automatic,
                reason,
            } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                let approval_id = approvals.approval_id(&call_id);
                let mut chunk = json!({"type": "tool-approval-request", "approvalId": approval_id, "toolCallId": id});
                if automatic {
                    // A policy decided: the reason goes with its response.
                    chunk["isAutomatic"] = Value::Bool(true);
                    self.automatic.insert(call_id.clone(), reason);
                } else if let Some(reason) = reason {
                    chunk["reason"] = Value::String(reason);
                }
                if let Some(signature) = approvals.sign(&call_id, &id, &name, &arguments) {
                    chunk["signature"] = Value::String(signature);
                }
                push.value(chunk);
            }
            AgentEvent::ApprovalDecided {
                call_id,
                decision,
                by,
                ..
            } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                let approved = !matches!(decision, Decision::Deny { .. });
                if !approved {
                    self.denied.insert(id);
                }
                // The caller's own answer is already in its message; a
                // denial made here (no room) is shown as a policy's.
                let here = self.automatic.contains_key(&call_id);
                if !by.is_caller() || here {
                    let approval_id = approvals.approval_id(&call_id);
                    let mut chunk = json!({"type": "tool-approval-response", "approvalId": approval_id, "approved": approved});
                    let policy = self.automatic.remove(&call_id).flatten();
                    match decision {
                        Decision::Deny { reason } => chunk["reason"] = Value::String(reason),
                        _ => {
                            if let Some(reason) = policy {
                                chunk["reason"] = Value::String(reason);
                            }
                        }
                    }
                    push.value(chunk);
                }
            }
            AgentEvent::ToolResult {
                call_id,
                name,
                result,
            } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                if self.parts.insert(id.clone()) {
                    // A call refused before it was announced.
                    push.value(
                        json!({"type": "tool-input-available", "toolCallId": id, "toolName": name, "input": {}}),
                    );
                }
                if self.denied.remove(&id) {
                    push.value(json!({"type": "tool-output-denied", "toolCallId": id}));
                } else if result.is_error {
                    let message = result
                        .error
                        .as_ref()
                        .map_or_else(|| result.text(), |err| err.message().to_owned());
                    push.value(
                        json!({"type": "tool-output-error", "toolCallId": id, "errorText": message}),
                    );
                } else {
                    push.written(&OutputAvailable::new(&id, result_output(&result), false));
                }
            }
            AgentEvent::GuardrailTriggered(triggered) => {
                let call = triggered.call_id.as_deref().map(|id| self.part_id(id));
                push.value(json!({
                    "type": "data-guardrail",
                    "data": {"guardrail": triggered.guardrail, "target": triggered.target,
                             "action": triggered.action, "reason": triggered.reason,
                             "toolCallId": call},
                }));
            }
            AgentEvent::Compacted {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
            } => {
                push.value(json!({
                    "type": "data-compaction",
                    "data": {"messagesBefore": messages_before, "messagesAfter": messages_after,
                             "tokensBefore": tokens_before, "tokensAfter": tokens_after},
                }));
            }
            AgentEvent::ToolsLoaded { call_id, names } => {
                let call = self.part_id(&call_id);
                push.value(json!({
                    "type": "data-tools-loaded",
                    "data": {"toolCallId": call, "names": names},
                }));
            }
            AgentEvent::TurnDiscarded { .. } => {
                self.text = None;
                self.writing.clear();
                push.value(json!({"type": "reset-step"}));
            }
            AgentEvent::Error(err) => {
                self.close_text(&mut push);
                push.value(json!({"type": "error", "errorText": err.message()}));
            }
            AgentEvent::Done(done) => {
                self.finish_step(out);
                let usage = done.usage.map(|usage| {
                    json!({"inputTokens": usage.prompt_tokens, "outputTokens": usage.completion_tokens})
                });
                out.push_back(Outgoing::Chunk(json!({
                    "type": "finish",
                    "finishReason": finish_reason(done.stop),
                    "messageMetadata": {"usage": usage, "steps": done.steps, "stop": done.stop.as_str()},
                })));
            }
            // Handled by the response; any later event is ignored here.
            _ => {}
        }
    }

    /// Calls whose parts the front end has from an earlier response.
    pub(super) fn announced(&mut self, call_ids: Vec<String>) {
        self.parts.extend(call_ids);
    }

    /// A model event: it opens a step, or a new one after the tool calls.
    pub(super) fn model_event(&mut self, push: &mut ChunkWriter<'_>) {
        if self.step_open && !self.after_tools {
            return;
        }
        if self.step_open {
            self.close_text(push);
            push.value(json!({"type": "finish-step"}));
        }
        push.value(json!({"type": "start-step"}));
        self.step_open = true;
        self.after_tools = false;
        self.writing.clear();
    }

    pub(super) fn tool_event(&mut self, push: &mut ChunkWriter<'_>) {
        self.close_text(push);
        self.after_tools = true;
    }

    /// Ends the open text or reasoning part.
    pub(super) fn close_text(&mut self, push: &mut ChunkWriter<'_>) {
        if let Some(id) = self.reasoning.take() {
            push.value(json!({"type": "reasoning-end", "id": id}));
        }
        if let Some(id) = self.text.take() {
            push.value(json!({"type": "text-end", "id": id}));
        }
    }

    pub(super) fn finish_step(&mut self, out: &mut VecDeque<Outgoing>) {
        let mut push = ChunkWriter(out);
        self.close_text(&mut push);
        if std::mem::take(&mut self.step_open) {
            push.value(json!({"type": "finish-step"}));
        }
    }

    /// The part of a complete call: the one its first fragment opened.
    pub(super) fn part_of_call(&mut self, call_id: &str) -> String {
        let written = self
            .writing
            .iter()
            .find(|(_, id)| *id == call_id)
            .map(|(index, _)| *index);
        let id = match written {
            Some(index) => self.writing.remove(&index),
            None => self.writing.pop_first().map(|(_, id)| id),
        };
        let id = id.unwrap_or_else(|| call_id.to_owned());
        if id != call_id {
            self.alias.insert(call_id.to_owned(), id.clone());
        }
        self.parts.insert(id.clone());
        id
    }

    pub(super) fn part_id(&self, call_id: &str) -> String {
        self.alias
            .get(call_id)
            .cloned()
            .unwrap_or_else(|| call_id.to_owned())
    }
}

pub(super) fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Finished => "stop",
        StopReason::Length => "length",
        StopReason::ContentFilter | StopReason::Guardrail => "content-filter",
        StopReason::ModelError | StopReason::CompactionFailed => "error",
        // The protocol has no reason for it: `other`, with the limit's
        // message in the `error` chunk before and `spend_limit` as the
        // message metadata's `stop`.
        StopReason::SpendLimit => "other",
        _ => "other",
    }
}

/// The chunks an event maps to, in order: values, or chunks written at
/// once — those that come for every fragment a model streams, and those
/// that carry a tool's output as it was written.
pub(super) struct ChunkWriter<'a>(&'a mut VecDeque<Outgoing>);

impl ChunkWriter<'_> {
    fn value(&mut self, chunk: Value) {
        self.0.push_back(Outgoing::Chunk(chunk));
    }

    fn written(&mut self, chunk: &impl Serialize) {
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
struct Delta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    delta: &'a str,
}

impl<'a> Delta<'a> {
    fn new(kind: &'static str, id: &'a str, delta: &'a str) -> Self {
        Delta { kind, id, delta }
    }
}

/// A `tool-input-delta` chunk: a fragment of a call's argument text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InputDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    tool_call_id: &'a str,
    input_text_delta: &'a str,
}

/// A `tool-output-available` chunk: its output embedded as it is.
#[derive(Serialize)]
struct OutputAvailable<'a> {
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
    fn new(id: &'a str, output: ChunkOutput<'a>, preliminary: bool) -> Self {
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
enum ChunkOutput<'a> {
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
fn item_output(output: &ToolOutput) -> ChunkOutput<'_> {
    if let Some(text) = output.as_text() {
        return ChunkOutput::Text(Cow::Borrowed(text));
    }
    if let Some(json) = output.as_json() {
        return ChunkOutput::json(json);
    }
    ChunkOutput::Value(serde_json::to_value(output).unwrap_or(Value::Null))
}

/// A result as the final output: its structured content, else its text.
fn result_output(result: &ToolResult) -> ChunkOutput<'_> {
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
