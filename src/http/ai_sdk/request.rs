//! The request: what the AI SDK's chat transport posts (UI messages and
//! their parts), read into the agent's history and the approval answers.

use serde::Deserialize;
use serde_json::Value;

use crate::model::{Message, ToolCall};

/// What the AI SDK's `DefaultChatTransport` posts.
#[derive(Deserialize)]
pub(super) struct ChatBody {
    /// The chat's id (the AI SDK sends one; resumable streams key on it).
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) messages: Vec<UiMessage>,
    /// Only the new message, as a client sends it to a server that keeps
    /// the conversation (the AI SDK's persistence guide).
    #[serde(default)]
    pub(super) message: Option<UiMessage>,
}

#[derive(Deserialize)]
pub(super) struct UiMessage {
    #[serde(default)]
    pub(super) id: Option<String>,
    pub(super) role: String,
    #[serde(default)]
    pub(super) parts: Vec<Value>,
}

/// A person's answer to one approval request, with what its part shows
/// of the call and the request's signature.
pub(super) struct ApprovalAnswer {
    pub(super) approval_id: String,
    pub(super) approved: bool,
    pub(super) reason: Option<String>,
    pub(super) signature: Option<String>,
    pub(super) tool_call_id: Option<String>,
    pub(super) input: Option<Value>,
}

impl ChatBody {
    /// The body with its `message` as the last of its `messages`.
    pub(super) fn normalized(mut self) -> Self {
        if let Some(message) = self.message.take() {
            self.messages.push(message);
        }
        self
    }

    /// The new message of a conversation kept on the server: the last
    /// one, the user's.
    pub(super) fn new_user_message(&self) -> Result<Message, String> {
        match self.messages.last() {
            Some(last) if last.role == "user" => Ok(Message::user(texts(&last.parts))),
            Some(last) => Err(format!(
                "the last message has role `{}`: the conversation is kept on the server, send the user's new message",
                last.role.chars().take(64).collect::<String>()
            )),
            None => Err("the request has no message: send the user's new message".to_owned()),
        }
    }

    /// Whether the history the client sent before its new message agrees
    /// with the one the server keeps (`stored`), by what the user said:
    /// every user message kept (a compaction's notes aside) is among the
    /// client's, in order, and the client's last is the last kept — so a
    /// stale client (another tab went on), one that rewrote or added
    /// what the user said, is refused. The client's history is never
    /// used: only its new message is.
    pub(super) fn agrees_with(&self, stored: &[Message]) -> Result<(), String> {
        let sent: Vec<String> = self.messages[..self.messages.len().saturating_sub(1)]
            .iter()
            .filter(|message| message.role == "user")
            .map(|message| texts(&message.parts))
            .collect();
        let kept: Vec<&str> = stored
            .iter()
            .filter(|message| !crate::agent::compaction::is_note(message))
            .filter_map(|message| match message {
                Message::User { content } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        let mut sent_iter = sent.iter();
        let in_order = kept.iter().all(|kept| sent_iter.any(|sent| sent == kept));
        let same_last = sent.last().map(String::as_str) == kept.last().copied();
        match in_order && same_last {
            true => Ok(()),
            false => Err(format!(
                "the conversation sent ({} user messages before the new one) disagrees with the one the server keeps ({} user messages): reload the chat",
                sent.len(),
                kept.len()
            )),
        }
    }

    /// The approval answers in the last message, if it is the assistant's.
    pub(super) fn approval_answers(&self) -> Vec<ApprovalAnswer> {
        let Some(last) = self.messages.last().filter(|m| m.role == "assistant") else {
            return Vec::new();
        };
        last.parts
            .iter()
            .filter(|part| part["state"] == "approval-responded")
            .filter_map(|part| {
                let approval = &part["approval"];
                Some(ApprovalAnswer {
                    approval_id: approval["id"].as_str()?.to_owned(),
                    approved: approval["approved"].as_bool()?,
                    reason: approval["reason"].as_str().map(str::to_owned),
                    signature: approval["signature"].as_str().map(str::to_owned),
                    tool_call_id: part["toolCallId"].as_str().map(str::to_owned),
                    input: part.get("input").cloned(),
                })
            })
            .collect()
    }

    /// The tool-call ids of the last message's tool parts, if it is the
    /// assistant's.
    pub(super) fn last_assistant_calls(&self) -> Vec<String> {
        let Some(last) = self.messages.last().filter(|m| m.role == "assistant") else {
            return Vec::new();
        };
        last.parts
            .iter()
            .filter_map(|part| part["toolCallId"].as_str().map(str::to_owned))
            .collect()
    }

    pub(super) fn last_assistant_id(&self) -> Option<&str> {
        let last = self.messages.last().filter(|m| m.role == "assistant")?;
        last.id.as_deref().filter(|id| !id.is_empty())
    }

    /// The conversation as the model's messages.
    pub(super) fn history(&self) -> Result<Vec<Message>, String> {
        if self.messages.is_empty() {
            return Err("the conversation is empty: send at least one message".to_owned());
        }
        let mut out = Vec::with_capacity(self.messages.len());
        for (at, message) in self.messages.iter().enumerate() {
            match message.role.as_str() {
                "system" => out.push(Message::system(texts(&message.parts))),
                "user" => out.push(Message::user(texts(&message.parts))),
                "assistant" => assistant(&message.parts, &mut out)
                    .map_err(|why| format!("message {at} (assistant): {why}"))?,
                other => {
                    return Err(format!(
                        "message {at} has role `{}`: expected `system`, `user` or `assistant`",
                        other.chars().take(64).collect::<String>()
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// The text parts of a message, joined.
pub(super) fn texts(parts: &[Value]) -> String {
    let mut text = String::new();
    for part in parts.iter().filter(|part| part["type"] == "text") {
        if let Some(piece) = part["text"].as_str() {
            text.push_str(piece);
        }
    }
    text
}

/// An assistant message's steps as assistant messages and the tool
/// results that answer their calls.
pub(super) fn assistant(parts: &[Value], out: &mut Vec<Message>) -> Result<(), String> {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut flush = |text: &mut String, calls: &mut Vec<ToolCall>, results: &mut Vec<Message>| {
        if !text.is_empty() || !calls.is_empty() {
            out.push(Message::Assistant {
                content: (!text.is_empty()).then(|| std::mem::take(text)),
                tool_calls: std::mem::take(calls),
                reasoning: Vec::new(),
            });
            out.append(results);
        }
    };
    for (at, part) in parts.iter().enumerate() {
        let kind = part["type"].as_str().unwrap_or_default();
        let name = match kind {
            "step-start" => {
                flush(&mut text, &mut calls, &mut results);
                continue;
            }
            "text" => {
                text.push_str(part["text"].as_str().unwrap_or_default());
                continue;
            }
            "dynamic-tool" => part["toolName"].as_str().unwrap_or_default(),
            _ => match kind.strip_prefix("tool-") {
                Some(name) => name,
                None => continue,
            },
        };
        let id = part["toolCallId"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| format!("part {at} (`{kind}`) has no `toolCallId`"))?;
        let arguments = match &part["input"] {
            Value::Null => "{}".to_owned(),
            input => input.to_string(),
        };
        let result = match part["state"].as_str().unwrap_or_default() {
            "output-available" => match &part["output"] {
                Value::String(text) => text.clone(),
                output => output.to_string(),
            },
            "output-error" => part["errorText"]
                .as_str()
                .unwrap_or("the call failed")
                .to_owned(),
            "output-denied" => match part["approval"]["reason"].as_str() {
                Some(reason) => format!("not run: the user denied the call: {reason}"),
                None => "not run: the user denied the call".to_owned(),
            },
            _ => "not run: the call got no answer (its approval was not given in time)".to_owned(),
        };
        calls.push(ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments,
        });
        results.push(Message::tool(id, result));
    }
    flush(&mut text, &mut calls, &mut results);
    Ok(())
}
