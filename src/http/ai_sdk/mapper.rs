//! Agent events as the protocol's chunks: [`Mapper`], and the values
//! it puts in them (finish reasons, tool outputs and results).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde_json::{json, Value};

use crate::agent::{AgentEvent, StopReason};
use crate::approval::Decision;
use crate::{ToolOutput, ToolResult};

use super::approvals::Approvals;

/// What a response sends next: a chunk, or the end (`[DONE]`).
pub(super) enum Out {
    Chunk(Value),
    Done,
}

/// Turns agent events into chunks, keeping what the protocol needs: the
/// open text part, the step, the ids the tool parts got.
#[derive(Default)]
pub(super) struct Mapper {
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

impl Mapper {
    pub(super) fn event(
        &mut self,
        event: AgentEvent,
        approvals: &Approvals,
        out: &mut VecDeque<Out>,
    ) {
        let mut push = |chunk: Value| out.push_back(Out::Chunk(chunk));
        match event {
            AgentEvent::ReasoningDelta(delta) => {
                self.model_event(&mut push);
                if let Some(id) = self.text.take() {
                    push(json!({"type": "text-end", "id": id}));
                }
                let id = match &self.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        self.texts += 1;
                        let id = format!("reasoning-{}", self.texts);
                        push(json!({"type": "reasoning-start", "id": id}));
                        self.reasoning = Some(id.clone());
                        id
                    }
                };
                push(json!({"type": "reasoning-delta", "id": id, "delta": delta}));
            }
            AgentEvent::TextDelta(delta) => {
                self.model_event(&mut push);
                if let Some(id) = self.reasoning.take() {
                    push(json!({"type": "reasoning-end", "id": id}));
                }
                let id = match &self.text {
                    Some(id) => id.clone(),
                    None => {
                        self.texts += 1;
                        self.answer.clear();
                        let id = format!("text-{}", self.texts);
                        push(json!({"type": "text-start", "id": id}));
                        self.text = Some(id.clone());
                        id
                    }
                };
                if self.typed {
                    self.answer.push_str(&delta);
                }
                push(json!({"type": "text-delta", "id": id, "delta": delta}));
                if self.typed {
                    let formed = crate::agent::partial_json(&self.answer);
                    if formed.is_some() && formed != self.formed {
                        push(json!({"type": "data-output", "id": "output",
                                    "data": {"value": formed, "final": false}}));
                        self.formed = formed;
                    }
                }
            }
            AgentEvent::Output(value) => {
                push(json!({"type": "data-output", "id": "output",
                            "data": {"value": value, "final": true}}));
            }
            AgentEvent::ToolCallStarted { index, id, name } => {
                self.model_event(&mut push);
                self.close_text(&mut push);
                let id = id.unwrap_or_else(|| format!("call_{index}"));
                self.writing.insert(index, id.clone());
                self.parts.insert(id.clone());
                push(json!({"type": "tool-input-start", "toolCallId": id, "toolName": name}));
            }
            AgentEvent::ToolCallInputDelta { index, arguments } => {
                if let Some(id) = self.writing.get(&index) {
                    push(
                        json!({"type": "tool-input-delta", "toolCallId": id, "inputTextDelta": arguments}),
                    );
                }
            }
            AgentEvent::ToolCall(call) => {
                self.tool_event(&mut push);
                let id = self.part_of_call(&call.id);
                match crate::arguments::parse(&call.arguments) {
                    Ok(input) => push(json!({
                        "type": "tool-input-available", "toolCallId": id,
                        "toolName": call.name, "input": input,
                    })),
                    Err(err) => push(json!({
                        "type": "tool-input-error", "toolCallId": id, "toolName": call.name,
                        "input": call.arguments, "errorText": err.message(),
                    })),
                }
            }
            AgentEvent::ToolOutput { call_id, output } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                push(json!({
                    "type": "tool-output-available", "toolCallId": id,
                    "output": item_value(&output), "preliminary": true,
                }));
            }
            AgentEvent::Progress { call_id, progress } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                push(json!({
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
                push(chunk);
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
                    push(chunk);
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
                    push(
                        json!({"type": "tool-input-available", "toolCallId": id, "toolName": name, "input": {}}),
                    );
                }
                if self.denied.remove(&id) {
                    push(json!({"type": "tool-output-denied", "toolCallId": id}));
                } else if result.is_error {
                    let message = result
                        .error
                        .as_ref()
                        .map_or_else(|| result.text(), |err| err.message().to_owned());
                    push(
                        json!({"type": "tool-output-error", "toolCallId": id, "errorText": message}),
                    );
                } else {
                    push(
                        json!({"type": "tool-output-available", "toolCallId": id, "output": result_value(&result)}),
                    );
                }
            }
            AgentEvent::GuardrailTriggered(triggered) => {
                let call = triggered.call_id.as_deref().map(|id| self.part_id(id));
                push(json!({
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
                push(json!({
                    "type": "data-compaction",
                    "data": {"messagesBefore": messages_before, "messagesAfter": messages_after,
                             "tokensBefore": tokens_before, "tokensAfter": tokens_after},
                }));
            }
            AgentEvent::ToolsLoaded { call_id, names } => {
                let call = self.part_id(&call_id);
                push(json!({
                    "type": "data-tools-loaded",
                    "data": {"toolCallId": call, "names": names},
                }));
            }
            AgentEvent::TurnDiscarded { .. } => {
                self.text = None;
                self.writing.clear();
                push(json!({"type": "reset-step"}));
            }
            AgentEvent::Error(err) => {
                self.close_text(&mut push);
                push(json!({"type": "error", "errorText": err.message()}));
            }
            AgentEvent::Done(done) => {
                self.finish_step(out);
                let usage = done.usage.map(|usage| {
                    json!({"inputTokens": usage.prompt_tokens, "outputTokens": usage.completion_tokens})
                });
                out.push_back(Out::Chunk(json!({
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
    pub(super) fn model_event(&mut self, push: &mut impl FnMut(Value)) {
        if self.step_open && !self.after_tools {
            return;
        }
        if self.step_open {
            self.close_text(push);
            push(json!({"type": "finish-step"}));
        }
        push(json!({"type": "start-step"}));
        self.step_open = true;
        self.after_tools = false;
        self.writing.clear();
    }

    pub(super) fn tool_event(&mut self, push: &mut impl FnMut(Value)) {
        self.close_text(push);
        self.after_tools = true;
    }

    /// Ends the open text or reasoning part.
    pub(super) fn close_text(&mut self, push: &mut impl FnMut(Value)) {
        if let Some(id) = self.reasoning.take() {
            push(json!({"type": "reasoning-end", "id": id}));
        }
        if let Some(id) = self.text.take() {
            push(json!({"type": "text-end", "id": id}));
        }
    }

    pub(super) fn finish_step(&mut self, out: &mut VecDeque<Out>) {
        let mut push = |chunk: Value| out.push_back(Out::Chunk(chunk));
        self.close_text(&mut push);
        if std::mem::take(&mut self.step_open) {
            push(json!({"type": "finish-step"}));
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

/// One streamed item as a preliminary output: text as a string, JSON as
/// its value, anything else as its JSON.
pub(super) fn item_value(output: &ToolOutput) -> Value {
    if let Some(text) = output.as_text() {
        return Value::String(text.to_owned());
    }
    if let Some(json) = output.as_json() {
        return json.value();
    }
    serde_json::to_value(output).unwrap_or(Value::Null)
}

/// A result as the final output: its structured content, else its text.
pub(super) fn result_value(result: &ToolResult) -> Value {
    // What the model reads: its JSON items (not output for programs only,
    // which a client-kept history would turn into what the model reads).
    let mut json = result.content.iter().filter_map(|item| match item {
        crate::ToolOutput::Json { value } => Some(value.value()),
        _ => None,
    });
    match (json.next(), json.next()) {
        (None, _) => Value::String(result.text()),
        (Some(one), None) => one,
        (Some(first), Some(second)) => {
            Value::Array([first, second].into_iter().chain(json).collect())
        }
    }
}

#[cfg(test)]
mod result_value_tests {
    use super::*;
    use crate::ToolOutput;

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
