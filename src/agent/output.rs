//! A run that ends with a value of the caller's type: the output's schema,
//! how it is asked for ([`OutputMode`]) and how an answer is checked.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::model::OutputSchema;
use crate::tool::{Decode, JsonDecoder};
use crate::{ToolError, ToolInfo};

/// The name of the tool a run in [`OutputMode::Tool`] ends by calling.
pub const FINAL_ANSWER_TOOL: &str = "final_answer";

/// The default number of times an answer that does not decode goes back
/// to the model, with the error, before the run stops: 2.
pub const DEFAULT_OUTPUT_RETRIES: usize = 2;

/// How a run asks the model for its typed answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OutputMode {
    /// The provider's structured output: the request carries the schema
    /// (OpenAI `response_format` with the strict schema, Anthropic
    /// `output_config.format`), and the final answer's text is the value.
    /// The scripted and replayed models play the text they hold.
    #[default]
    Native,
    /// A [`FINAL_ANSWER_TOOL`] tool whose arguments are the value, offered
    /// with the others: for a model with no structured output. The run
    /// ends when the model calls it with a value that decodes.
    Tool,
}

/// The typed answer a run asks for.
#[derive(Clone)]
pub(super) struct TypedOutput {
    pub(super) schema: OutputSchema,
    pub(super) mode: OutputMode,
    pub(super) retries: usize,
    decode: Arc<Decoder>,
}

/// Checks an answer's text against the output's type; its value.
type Decoder = dyn Fn(&str) -> Result<Value, ToolError> + Send + Sync;

impl std::fmt::Debug for TypedOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedOutput")
            .field("schema", &self.schema.name)
            .field("mode", &self.mode)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl TypedOutput {
    pub(super) fn of<T>() -> Self
    where
        T: DeserializeOwned + schemars::JsonSchema + 'static,
    {
        let name: String = T::schema_name()
            .chars()
            .map(
                |c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    true => c,
                    false => '_',
                },
            )
            .take(64)
            .collect();
        TypedOutput {
            schema: OutputSchema::of::<T>(if name.is_empty() {
                "output".to_owned()
            } else {
                name
            }),
            mode: OutputMode::Native,
            retries: DEFAULT_OUTPUT_RETRIES,
            decode: Arc::new(|text: &str| {
                Decode::<T>::decode(&JsonDecoder, text).map_err(|err| {
                    ToolError::new(
                        err.kind(),
                        format!(
                            "the answer does not have the required form: {}",
                            err.message()
                        ),
                    )
                })?;
                serde_json::from_str(crate::arguments::prepare(text)?)
                    .map_err(crate::arguments::not_json)
            }),
        }
    }

    /// The answer's value, if `text` decodes as the output's type; else
    /// the error naming the field, for the model.
    pub(super) fn decode(&self, text: &str) -> Result<Value, ToolError> {
        (self.decode)(text)
    }

    /// The tool a run in [`OutputMode::Tool`] offers.
    pub(super) fn tool(&self) -> Option<ToolInfo> {
        (self.mode == OutputMode::Tool).then(|| {
            ToolInfo::new(FINAL_ANSWER_TOOL)
                .with_description(
                    "Gives the final answer, in the required form: call it once you have the \
                     answer, with the answer as its arguments. The run ends with it.",
                )
                .with_input_schema((*self.schema.schema).clone())
        })
    }
}

/// The JSON value a partial text of one is so far — the object as it
/// forms, for a front end to show — or `None` when nothing parses yet.
/// Open strings, arrays and objects are closed; a key with no value yet
/// and a dangling `,` or `:` are dropped.
pub fn partial_json(text: &str) -> Option<Value> {
    let text = text.trim_start();
    if !text.starts_with(['{', '[']) {
        return serde_json::from_str(text).ok();
    }
    // Cut to the last place where a value could end, then close what is
    // open.
    let mut stack: Vec<char> = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    let mut cut = 0;
    let mut stack_at_cut: Vec<char> = Vec::new();
    let mut string_open_at_cut = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    in_string = false;
                    cut = i + 1;
                    stack_at_cut.clone_from(&stack);
                    string_open_at_cut = false;
                }
                _ => {
                    // A string value may be cut mid-way (not a key: a key
                    // is followed by `:`, found later).
                    if !escaped {
                        cut = i + c.len_utf8();
                        stack_at_cut.clone_from(&stack);
                        string_open_at_cut = true;
                    }
                }
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => stack.push(c),
            '}' | ']' => {
                stack.pop();
                cut = i + 1;
                stack_at_cut.clone_from(&stack);
                string_open_at_cut = false;
            }
            c if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '+' => {
                cut = i + 1;
                stack_at_cut.clone_from(&stack);
                string_open_at_cut = false;
            }
            _ => {}
        }
    }
    // Try the cut with its openings closed; a key left without a value
    // does not parse, so back off to the last `,` before it.
    let mut candidate = text[..cut].to_owned();
    if string_open_at_cut {
        candidate.push('"');
    }
    for attempt in 0..2 {
        let mut closed = candidate.clone();
        for open in stack_at_cut.iter().rev() {
            closed.push(if *open == '{' { '}' } else { ']' });
        }
        if let Ok(value) = serde_json::from_str(&closed) {
            return Some(value);
        }
        if attempt == 0 {
            // `{"a": 1, "b` or `{"a": "x", "b": tr`: drop the last member.
            let at = candidate.rfind([',', '{', '['])?;
            let keep = if candidate[at..].starts_with(',') {
                at
            } else {
                at + 1
            };
            candidate.truncate(keep);
            // The openings after the cut point are gone with it.
            let mut depth: Vec<char> = Vec::new();
            let (mut s, mut e) = (false, false);
            for c in candidate.chars() {
                if s {
                    match (e, c) {
                        (true, _) => e = false,
                        (false, '\\') => e = true,
                        (false, '"') => s = false,
                        _ => {}
                    }
                    continue;
                }
                match c {
                    '"' => s = true,
                    '{' | '[' => depth.push(c),
                    '}' | ']' => {
                        depth.pop();
                    }
                    _ => {}
                }
            }
            stack_at_cut = depth;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::partial_json;
    use serde_json::json;

    #[test]
    fn a_partial_object_is_the_value_so_far() {
        let whole = r#"{"city": "Paris", "days": [1, 2, 3], "note": {"sky": "clear"}}"#;
        // Every prefix parses to something or nothing, never panics, and
        // the whole text parses to the whole value.
        for end in 0..=whole.len() {
            if whole.is_char_boundary(end) {
                let _ = partial_json(&whole[..end]);
            }
        }
        assert_eq!(
            partial_json(whole),
            Some(serde_json::from_str(whole).unwrap())
        );
        assert_eq!(
            partial_json(r#"{"city": "Par"#),
            Some(json!({"city": "Par"}))
        );
        assert_eq!(
            partial_json(r#"{"city": "Paris", "da"#),
            Some(json!({"city": "Paris"}))
        );
        assert_eq!(
            partial_json(r#"{"city": "Paris", "days": [1, 2"#),
            Some(json!({"city": "Paris", "days": [1, 2]}))
        );
        assert_eq!(
            partial_json(r#"{"city": "Paris", "days":"#),
            Some(json!({"city": "Paris"}))
        );
        assert_eq!(partial_json(""), None);
    }
}
