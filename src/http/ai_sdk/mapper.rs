//! Agent events as the protocol's chunks: [`ChunkMapper`], which keeps
//! what the protocol needs between events (the open parts, the step, the
//! ids the tool parts got), and the finish reasons. How a chunk is
//! written is [`outgoing`](super::outgoing)'s.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde_json::{json, Value};

use crate::agent::{AgentEvent, StopReason};
use crate::approval::Decision;
use crate::ErrorKind;

use super::approvals::Approvals;
use super::outgoing::{
    item_output, result_output, ChunkWriter, Delta, InputDelta, Outgoing, OutputAvailable,
};

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
    /// The run's last error, held until the next event: when that is the
    /// run's end because its store did not answer, the `error` chunk says
    /// so and what the person can do (see [`store_failed_text`]).
    pub(super) held_error: Option<HeldError>,
}

/// An error event not yet written: its message, and whether its kind is
/// a store (or anything) that did not answer.
pub(super) struct HeldError {
    message: String,
    unavailable: bool,
}

impl ChunkMapper {
    pub(super) fn event(
        &mut self,
        event: AgentEvent,
        approvals: &Approvals,
        out: &mut VecDeque<Outgoing>,
    ) {
        if let Some(held) = self.held_error.take() {
            let store_down =
                matches!(&event, AgentEvent::Done(done) if done.stop == StopReason::StoreFailed);
            let text = match store_down && held.unavailable {
                true => store_failed_text(&held.message),
                false => held.message,
            };
            out.push_back(Outgoing::Chunk(json!({"type": "error", "errorText": text})));
        }
        let mut push = ChunkWriter::new(out);
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
                    push.written(&InputDelta::new(id, &arguments));
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
                // Written with the next event (the run's end, as a rule),
                // which says whether it is the store's failure.
                self.held_error = Some(HeldError {
                    message: err.message().to_owned(),
                    unavailable: err.kind() == ErrorKind::Unavailable,
                });
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
        if let Some(held) = self.held_error.take() {
            out.push_back(Outgoing::Chunk(
                json!({"type": "error", "errorText": held.message}),
            ));
        }
        let mut push = ChunkWriter::new(out);
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

/// The `error` chunk's text for a run that ended because its store did
/// not answer ([`StopReason::StoreFailed`] after an `Unavailable` error):
/// that the response stopped, then the error, which says the rest once —
/// what got no answer and for how long, that the run is kept as it was
/// last stored, and that the person (or the front end, by `finish`'s
/// `messageMetadata.stop: "store_failed"`) sends the same message or
/// approval answer again once the store is back.
pub(super) fn store_failed_text(why: &str) -> String {
    format!("this response stopped: {why}")
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
