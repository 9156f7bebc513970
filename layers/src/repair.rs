//! Repairs a model's common mistakes in a tool call before it is refused.
//!
//! Models write almost-JSON: a trailing comma, single quotes, a bare key,
//! the object in a markdown fence or inside a string, an answer cut off
//! before its closing brackets. [`Repair`] looks at a call's argument
//! text only when it is not a JSON object, and then tries a small, strict
//! set of rules, in this order:
//!
//! | rule | before | after |
//! |---|---|---|
//! | `fence` | `` ```json {"a": 1} ``` `` | `{"a": 1}` |
//! | `string` | `"{\"a\": 1}"` | `{"a": 1}` |
//! | `single_quotes` | `{'a': 'b'}` | `{"a": "b"}` |
//! | `bare_keys` | `{a: 1}` | `{"a": 1}` |
//! | `trailing_commas` | `{"a": [1, 2,],}` | `{"a": [1, 2]}` |
//! | `unclosed` | `{"a": [1, {"b": "x` | `{"a": [1, {"b": "x"}]}` |
//!
//! A repaired call goes on with the repaired text (and is validated like
//! any other by the tool or a [`validate`](crate::validate) layer); each
//! repair is logged (a `tracing` event in the call's span, naming the
//! rules) and recorded in the request's extensions as [`Repaired`]. Text
//! that the rules cannot turn into a JSON object goes on untouched, and
//! the tool refuses it as before, naming what is wrong.
//!
//! A tool's *name* is the toolbox's to repair, since it knows which tools
//! each caller may see: a name that matches a visible one but for case, or
//! an alias, is repaired at dispatch by
//! [`Toolbox::repair_names`](toolstack::Toolbox::repair_names) and
//! [`Toolbox::alias`](toolstack::Toolbox::alias).
//!
//! ```
//! use toolstack::{tool, ToolError, ToolRequest, ToolResult};
//! use toolstack_layers::repair::RepairLayer;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct Add { a: i64, b: i64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! let add = tool::from_fn("add", |Add { a, b }| async move { Ok::<_, ToolError>(a + b) });
//! let tool = ServiceBuilder::new().layer(RepairLayer::new()).service(add);
//! let request = ToolRequest::new("add", "```json\n{a: 2, 'b': 3,}\n```");
//! let result = ToolResult::collect(tool.oneshot(request).await?).await;
//! assert_eq!(result.into_text(), "5");
//! # Ok(()) }
//! ```

use std::task::{Context, Poll};

use toolstack::{arguments, ToolError, ToolRequest};
use tower_layer::Layer;
use tower_service::Service;

/// The repairs made to one call's arguments, in the request's extensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repaired {
    /// The rules that changed the arguments, in order (`fence`, `string`,
    /// `single_quotes`, `bare_keys`, `trailing_commas`, `unclosed`).
    pub rules: Vec<&'static str>,
}

/// Repairs malformed tool-call arguments: see the [module docs](self).
#[derive(Clone, Copy, Debug, Default)]
pub struct RepairLayer {
    _priv: (),
}

impl RepairLayer {
    /// Repairs argument text (a tool's name is the toolbox's to repair).
    pub fn new() -> Self {
        RepairLayer::default()
    }
}

impl<S> Layer<S> for RepairLayer {
    type Service = Repair<S>;

    fn layer(&self, inner: S) -> Repair<S> {
        Repair { inner }
    }
}

/// A tool (or toolbox) whose calls' arguments are repaired first; see the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct Repair<S> {
    inner: S,
}

impl<S> Repair<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<ToolRequest> for Repair<S>
where
    S: Service<ToolRequest>,
    S::Error: Into<ToolError>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ToolRequest) -> Self::Future {
        if needs_repair(&request) {
            if let Some((text, rules)) = repair(request.arguments()) {
                request.set_arguments(text);
                tracing::info!(
                    gen_ai.tool.name = %request.name(),
                    rules = %rules.join(","),
                    "tool call repaired"
                );
                request.extensions_mut().insert(Repaired { rules });
            }
        }
        self.inner.call(request)
    }
}

/// Whether the call's arguments break the [argument
/// rules](toolstack::arguments), which the repairs are for: text that keeps
/// them (a JSON object, or blank) goes on untouched — not parsed again when
/// a reader before found so, as an HTTP endpoint does — and text past the
/// tools' size bound is left for the tool to refuse.
fn needs_repair(request: &ToolRequest) -> bool {
    let text = request.arguments();
    arguments::check_size(text, request.name(), arguments::DEFAULT_MAX_ARGUMENT_BYTES).is_ok()
        && arguments::checked(request).is_err()
}

/// `text` repaired into a JSON object, with the rules that did it; `None`
/// when the rules cannot make one.
pub fn repair(text: &str) -> Option<(String, Vec<&'static str>)> {
    let mut rules = Vec::new();
    let mut text = text.trim().to_owned();
    if let Some(inner) = strip_fence(&text) {
        text = inner;
        rules.push("fence");
    }
    if text.starts_with('"') {
        if let Ok(serde_json::Value::String(inner)) = serde_json::from_str(&text) {
            text = inner.trim().to_owned();
            rules.push("string");
        }
    }
    // Unwrapped into an object already (an empty fence is none).
    if serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v.is_object()) {
        return (!rules.is_empty()).then_some((text, rules));
    }
    if !text.starts_with('{') {
        return None;
    }
    let (fixed, applied) = rewrite(&text);
    rules.extend(applied);
    let repaired = serde_json::from_str::<serde_json::Value>(&fixed).ok()?;
    repaired.is_object().then_some((fixed, rules))
}

/// The body of a markdown code fence, if `text` is one.
fn strip_fence(text: &str) -> Option<String> {
    let rest = text.strip_prefix("```")?;
    // The info string (`json`) up to the line's end.
    let body = match rest.find('\n') {
        Some(line) => &rest[line + 1..],
        None => rest.trim_start_matches(|c: char| c.is_ascii_alphabetic()),
    };
    let body = body.trim_end();
    let body = body.strip_suffix("```").unwrap_or(body);
    Some(body.trim().to_owned())
}

/// One pass over almost-JSON: single-quoted strings become double-quoted,
/// bare keys are quoted, trailing commas are dropped, and what is left
/// open at the end (a string, arrays, objects) is closed.
fn rewrite(text: &str) -> (String, Vec<&'static str>) {
    let mut out = String::with_capacity(text.len() + 8);
    let mut applied: Vec<&'static str> = Vec::new();
    fn note(rule: &'static str, applied: &mut Vec<&'static str>) {
        if !applied.contains(&rule) {
            applied.push(rule);
        }
    }
    let mut stack: Vec<char> = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    // Where an object expects a key (after `{` or `,`).
    let mut expect_key = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                let quote = c;
                if quote == '\'' {
                    note("single_quotes", &mut applied);
                }
                out.push('"');
                i += 1;
                let mut closed = false;
                while i < chars.len() {
                    let d = chars[i];
                    if d == '\\' && i + 1 < chars.len() {
                        // An escaped single quote needs no escape in JSON.
                        if quote == '\'' && chars[i + 1] == '\'' {
                            out.push('\'');
                        } else {
                            out.push(d);
                            out.push(chars[i + 1]);
                        }
                        i += 2;
                        continue;
                    }
                    if d == quote {
                        closed = true;
                        i += 1;
                        break;
                    }
                    if d == '"' && quote == '\'' {
                        out.push_str("\\\"");
                    } else {
                        out.push(d);
                    }
                    i += 1;
                }
                if !closed {
                    note("unclosed", &mut applied);
                }
                out.push('"');
                expect_key = false;
                continue;
            }
            '{' | '[' => {
                stack.push(if c == '{' { '}' } else { ']' });
                expect_key = c == '{';
                out.push(c);
            }
            '}' | ']' => {
                // A comma right before a closing bracket goes.
                let trimmed = out.trim_end().len();
                if out[..trimmed].ends_with(',') {
                    out.truncate(trimmed - 1);
                    note("trailing_commas", &mut applied);
                }
                if stack.last() == Some(&c) {
                    stack.pop();
                }
                out.push(c);
                expect_key = false;
            }
            ',' => {
                out.push(c);
                expect_key = stack.last() == Some(&'}');
            }
            c if expect_key && (c.is_alphabetic() || c == '_' || c == '$') => {
                // A bare key: up to the colon.
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric()
                        || chars[i] == '_'
                        || chars[i] == '$'
                        || chars[i] == '-')
                {
                    i += 1;
                }
                let key: String = chars[start..i].iter().collect();
                note("bare_keys", &mut applied);
                out.push('"');
                out.push_str(&key);
                out.push('"');
                expect_key = false;
                continue;
            }
            ':' => {
                out.push(c);
                expect_key = false;
            }
            _ => out.push(c),
        }
        i += 1;
    }
    // A cut-off answer: drop a dangling comma or colon, close what is open.
    if !stack.is_empty() {
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        if out.ends_with(',') {
            out.pop();
        }
        if out.ends_with(':') {
            out.push_str("null");
        }
        while let Some(close) = stack.pop() {
            out.push(close);
        }
        note("unclosed", &mut applied);
    }
    (out, applied)
}
