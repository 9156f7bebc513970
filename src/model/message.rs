//! What a model is asked: a [`ChatRequest`] — the conversation as
//! [`Message`]s in the OpenAI chat shape, the tools it may call, the model
//! to ask for, and the caller's extensions.

use std::sync::Arc;

use http::Extensions;
use serde::{Deserialize, Serialize};

use super::{Reasoning, ToolCall};
use crate::output::Media;
use crate::ToolInfo;

/// One message of a chat, in the OpenAI chat-completions shape, with what
/// other providers need besides (an answer's reasoning, a tool result's
/// error flag and images): those fields are left out when empty, so older
/// JSON reads as it did, and each client sends what its provider takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The text.
        content: String,
    },
    /// What the user said.
    User {
        /// The text.
        content: String,
    },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        /// The text, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// The tool calls, if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The model's reasoning before it answered, as its blocks (signed
        /// by the provider): sent back to a provider that requires them
        /// (Anthropic, on a turn that called tools), left out by the
        /// OpenAI-compatible client.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<Reasoning>,
    },
    /// The result of one tool call, for the model.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The result as text (JSON for structured results and errors).
        content: String,
        /// Whether the call failed: Anthropic's `is_error`; the text says
        /// so for the OpenAI-compatible client.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        /// The images the tool returned, for a provider that takes them in
        /// a tool result (Anthropic); the text names their mime types.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Media>,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
            reasoning: Vec::new(),
        }
    }

    /// An assistant message with these tool calls (and no text).
    pub fn assistant_calls(tool_calls: Vec<ToolCall>) -> Self {
        Message::Assistant {
            content: None,
            tool_calls,
            reasoning: Vec::new(),
        }
    }

    /// A tool result.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    /// The result of a call that failed, as its error's text.
    pub fn tool_error(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
            is_error: true,
            images: Vec::new(),
        }
    }

    /// A tool result as the model reads it: its text, whether it failed,
    /// and its images.
    pub fn tool_result(tool_call_id: impl Into<String>, result: &crate::ToolResult) -> Self {
        let images = result
            .content
            .iter()
            .filter_map(|item| match item {
                crate::ToolOutput::Image(media) => Some((**media).clone()),
                _ => None,
            })
            .collect();
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content: result.text(),
            is_error: result.is_error,
            images,
        }
    }
}

/// A request to a model: the conversation so far, the tools it may call,
/// optionally which model to ask, and per-call data.
///
/// Cheap to clone (a retry clones it): the conversation, the tool
/// definitions and the model name are shared, and the extension map is
/// free to clone when empty.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Arc<Vec<Message>>,
    /// The tools the model may call.
    pub tools: Arc<[ToolInfo]>,
    /// The model to ask, when the caller chooses it; `None` leaves the
    /// choice to the model service (the OpenAI-compatible client then asks
    /// for the model it was made with). A trace layer names the call's span
    /// after it (`chat {model}`).
    pub model: Option<Arc<str>>,
    /// Per-call data that is not part of the conversation — the caller's
    /// identity (for a per-caller rate limit), options — as in a
    /// [`ToolRequest`](crate::ToolRequest).
    pub extensions: Extensions,
    /// Which of the tools the model may or must call
    /// ([`ToolChoice::Auto`], the provider's default, unless set).
    pub tool_choice: ToolChoice,
    /// The shape the answer's text must have: a JSON value of this schema
    /// (the provider's structured output), or `None` for free text.
    pub output: Option<OutputSchema>,
    /// The most output tokens the answer may have, or `None` for the model
    /// service's own setting. A client sends the smaller of this and its
    /// own (the OpenAI-compatible client as `max_completion_tokens`, the
    /// Anthropic client as `max_tokens`); a spend limit lowers it to what
    /// its limits have left.
    pub max_tokens: Option<u32>,
}

/// Which tools a model may or must call in one request, as the OpenAI
/// (`tool_choice`) and Anthropic (`tool_choice`) clients encode it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (the providers' default).
    #[default]
    Auto,
    /// No tool: the model answers in text.
    None,
    /// At least one tool call (OpenAI `required`, Anthropic `any`).
    Required,
    /// This tool (OpenAI's named function, Anthropic's `tool`).
    Tool(Arc<str>),
}

impl ToolChoice {
    /// The tool `name`.
    pub fn tool(name: impl Into<Arc<str>>) -> Self {
        ToolChoice::Tool(name.into())
    }

    /// `auto`, `none`, `required`, or `tool:{name}`, as spans record it.
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        match self {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::Tool(name) => format!("tool:{name}").into(),
        }
    }
}

/// The JSON value an answer must be: a name and a JSON Schema, as a
/// provider's structured output takes them (the schema as derived, with
/// [`strict_schema`](crate::info::strict_schema) applied by a client that
/// needs the strict form).
#[derive(Debug, Clone, PartialEq)]
pub struct OutputSchema {
    /// The name (letters, digits, `_` and `-`: OpenAI's rule).
    pub name: Arc<str>,
    /// The JSON Schema.
    pub schema: Arc<serde_json::Value>,
}

impl OutputSchema {
    /// The schema of `T`, named `name`.
    pub fn of<T: schemars::JsonSchema>(name: impl Into<Arc<str>>) -> Self {
        OutputSchema {
            name: name.into(),
            schema: Arc::new(crate::info::schema_for::<T>()),
        }
    }
}

impl ChatRequest {
    /// A request with these messages and no tools.
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages: Arc::new(messages),
            ..Self::default()
        }
    }

    /// Offers these tools to the model.
    pub fn with_tools(mut self, tools: impl Into<Arc<[ToolInfo]>>) -> Self {
        self.tools = tools.into();
        self
    }

    /// Lets, or makes, the model call these tools ([`ToolChoice`]).
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    /// Asks for an answer that is a JSON value of `output`'s schema.
    pub fn with_output(mut self, output: OutputSchema) -> Self {
        self.output = Some(output);
        self
    }

    /// Lets the answer have at most `max_tokens` output tokens (the
    /// smaller of this and the client's own limit is sent).
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Asks for the model `model`.
    pub fn with_model(mut self, model: impl Into<Arc<str>>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Inserts a per-call value into the extensions.
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }
}

/// The agent run a model request (or a tool call) belongs to, in its
/// extensions: the [agent](crate::agent) puts its run's id there for every
/// model request and tool call of the run, so that a layer can key on the
/// run — a per-run spend limit does.
///
/// ```
/// use toolstack::model::{ChatRequest, RunId};
///
/// let request = ChatRequest::new(vec![]).with_extension(RunId::new("run-1"));
/// assert_eq!(request.extensions.get::<RunId>().map(RunId::as_str), Some("run-1"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId(Arc<str>);

impl RunId {
    /// The run `id`.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        RunId(id.into())
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The runs a run serves, outermost first: the runs whose tool it is (an
/// agent run as another run's tool, [`AgentTool`](crate::agent::AgentTool)).
/// The agent puts it in each request's extensions beside the run's own
/// [`RunId`] when the run was started with another's, so that a limit per
/// run (the spend limit of `toolstack-layers`) counts a sub-agent's calls
/// against every run it serves too.
///
/// ```
/// use toolstack::model::{OuterRuns, RunId};
///
/// let outer = OuterRuns::default().within(RunId::new("outer"));
/// let runs: Vec<&str> = outer.iter().map(RunId::as_str).collect();
/// assert_eq!(runs, ["outer"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OuterRuns(Arc<[RunId]>);

impl OuterRuns {
    /// These runs and, innermost, `run`.
    pub fn within(&self, run: RunId) -> OuterRuns {
        OuterRuns(self.0.iter().cloned().chain([run]).collect())
    }

    /// The runs, outermost first.
    pub fn iter(&self) -> impl Iterator<Item = &RunId> {
        self.0.iter()
    }
}

/// The deferred tools loaded so far in a run, in each model request's
/// extensions when the agent's toolbox has deferred tools: a trace layer
/// records them on the `chat` span (`toolstack.request.tools_loaded`).
/// (Also at `toolstack::agent::LoadedTools`, where the agent puts it.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedTools(pub std::sync::Arc<[String]>);
