//! [`ToolInfo`]: what the model is told about a tool — name, description,
//! JSON Schema of its input (and optionally of its output), and MCP-style
//! behaviour hints.
//!
//! Schemas are inferred with schemars 1.x (JSON Schema draft 2020-12): doc
//! comments become descriptions, nested types keep their definitions under
//! `$defs` so every `$ref` resolves inside the schema, `Option` fields are not
//! required, and unit enums become `enum`. [`strict_schema`] gives the
//! OpenAI strict-mode form on request.
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use toolstack::ToolInfo;
//!
//! /// Arguments of the weather tool.
//! #[derive(Deserialize, JsonSchema)]
//! struct Args {
//!     /// The city to look up.
//!     city: String,
//!     days: Option<u8>,
//! }
//!
//! let info = ToolInfo::new("weather")
//!     .with_description("Current weather for a city")
//!     .with_input_schema_for::<Args>();
//! let schema = info.input_schema();
//! assert_eq!(schema["required"], serde_json::json!(["city"]));
//! assert_eq!(schema["properties"]["city"]["description"], "The city to look up.");
//! ```

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The description of a tool, as listed to a model or an MCP client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    name: Arc<str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(rename = "inputSchema")]
    input_schema: Arc<Value>,
    #[serde(
        rename = "outputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    output_schema: Option<Arc<Value>>,
    #[serde(default, skip_serializing_if = "ToolAnnotations::is_empty")]
    annotations: ToolAnnotations,
}

impl ToolInfo {
    /// A tool named `name` whose input is any JSON object.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        ToolInfo {
            name: name.into(),
            description: None,
            input_schema: Arc::new(serde_json::json!({"type": "object"})),
            output_schema: None,
            annotations: ToolAnnotations::default(),
        }
    }

    /// The same description under another name (what a toolbox's
    /// [`rename`](crate::Toolbox::rename) and [`nest`](crate::Toolbox::nest)
    /// list). The schemas are shared, not copied.
    pub fn with_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the description shown to the model.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The input schema.
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// Replaces the input schema with a hand-written one.
    pub fn with_input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Arc::new(schema);
        self
    }

    /// Infers the input schema from `T`.
    pub fn with_input_schema_for<T: JsonSchema>(mut self) -> Self {
        self.input_schema = Arc::new(schema_for::<T>());
        self
    }

    /// Sets a hand-written output schema.
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(Arc::new(schema));
        self
    }

    /// Infers the output schema from `T`.
    pub fn with_output_schema_for<T: JsonSchema>(mut self) -> Self {
        self.output_schema = Some(Arc::new(schema_for::<T>()));
        self
    }

    /// Sets the behaviour hints.
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's name as a shared string.
    pub fn name_shared(&self) -> &Arc<str> {
        &self.name
    }

    /// The description, if any.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The output schema, if any.
    pub fn output_schema(&self) -> Option<&Value> {
        self.output_schema.as_deref()
    }

    /// The behaviour hints.
    pub fn annotations(&self) -> &ToolAnnotations {
        &self.annotations
    }

    /// The input schema in OpenAI strict-mode form (see [`strict_schema`]).
    pub fn strict_input_schema(&self) -> Value {
        strict_schema(&self.input_schema)
    }

    /// The OpenAI chat-completions tool definition:
    /// `{"type":"function","function":{name, description, parameters}}`,
    /// with the strict-mode schema and `"strict": true` when `strict`.
    pub fn to_openai_function(&self, strict: bool) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), Value::String(self.name.to_string()));
        if let Some(d) = &self.description {
            function.insert("description".into(), Value::String(d.clone()));
        }
        let parameters = if strict {
            self.strict_input_schema()
        } else {
            (*self.input_schema).clone()
        };
        function.insert("parameters".into(), parameters);
        if strict {
            function.insert("strict".into(), Value::Bool(true));
        }
        serde_json::json!({"type": "function", "function": function})
    }
}

/// A tool service that carries its own [`ToolInfo`].
///
/// Implemented by the tools built in [`tool`](crate::tool), by
/// [`BoxTool`](crate::BoxTool), and by the layers of `toolstack-layers`
/// (which forward to the service they wrap), so that a layered tool can still
/// be put in a [`Toolbox`](crate::Toolbox) by itself.
pub trait Describe {
    /// The tool's description.
    fn info(&self) -> &ToolInfo;
}

/// MCP's behaviour hints for a tool. `None` means "not said".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling the tool again with the same arguments has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// No hints.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the tool read-only (and so idempotent and not destructive).
    pub fn read_only(mut self) -> Self {
        self.read_only_hint = Some(true);
        self.idempotent_hint.get_or_insert(true);
        self.destructive_hint.get_or_insert(false);
        self
    }

    /// Marks the tool idempotent (or not).
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent_hint = Some(yes);
        self
    }

    /// Marks the tool destructive (or not).
    pub fn destructive(mut self, yes: bool) -> Self {
        self.destructive_hint = Some(yes);
        self
    }

    /// Marks the tool as reaching an open world (or not).
    pub fn open_world(mut self, yes: bool) -> Self {
        self.open_world_hint = Some(yes);
        self
    }

    /// Sets the title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Whether calling again with the same arguments is safe: read-only or
    /// idempotent tools are, anything unsaid is not.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent_hint == Some(true) || self.read_only_hint == Some(true)
    }

    fn is_empty(&self) -> bool {
        self == &ToolAnnotations::default()
    }
}

/// The JSON Schema (draft 2020-12) of `T`, as a JSON value, with every
/// nested definition kept under `$defs`.
pub fn schema_for<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

/// The OpenAI strict-mode form of a schema.
///
/// In every object schema (also in `$defs`, array items and alternatives):
/// every property becomes required, `additionalProperties` becomes `false`,
/// and a property that was optional becomes nullable (`null` is added to its
/// `type`, or it is wrapped in `anyOf [.., {"type":"null"}]`). `oneOf` is
/// rewritten to `anyOf`, which strict mode accepts, and `$schema` is dropped.
///
/// ```
/// let schema = serde_json::json!({
///     "type": "object",
///     "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
///     "required": ["city"]
/// });
/// let strict = toolstack::strict_schema(&schema);
/// assert_eq!(strict["required"], serde_json::json!(["city", "days"]));
/// assert_eq!(strict["additionalProperties"], false);
/// assert_eq!(strict["properties"]["days"]["type"], serde_json::json!(["integer", "null"]));
/// ```
pub fn strict_schema(schema: &Value) -> Value {
    let mut out = schema.clone();
    if let Value::Object(map) = &mut out {
        map.remove("$schema");
    }
    make_strict(&mut out);
    out
}

fn make_strict(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if let Some(one_of) = map.remove("oneOf") {
        map.insert("anyOf".into(), one_of);
    }
    let is_object =
        map.get("type").and_then(Value::as_str) == Some("object") || map.contains_key("properties");
    if is_object {
        let required: Vec<String> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let mut all = Vec::new();
        if let Some(Value::Object(props)) = map.get_mut("properties") {
            for (name, prop) in props.iter_mut() {
                if !required.iter().any(|r| r == name) {
                    make_nullable(prop);
                }
                all.push(Value::String(name.clone()));
            }
        }
        map.insert("required".into(), Value::Array(all));
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(make_strict);
        }
    }
    for key in ["items", "not"] {
        if let Some(child) = map.get_mut(key) {
            make_strict(child);
        }
    }
    for key in ["anyOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(make_strict);
        }
    }
}

fn make_nullable(schema: &mut Value) {
    let null = Value::String("null".into());
    if let Value::Object(map) = schema {
        match map.get_mut("type") {
            Some(Value::String(t)) if t != "null" => {
                let t = std::mem::take(t);
                map.insert("type".into(), Value::Array(vec![Value::String(t), null]));
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    if !values.contains(&Value::Null) {
                        values.push(Value::Null);
                    }
                }
                return;
            }
            Some(Value::Array(types)) => {
                if !types.contains(&null) {
                    types.push(null);
                }
                return;
            }
            Some(_) => return,
            None => {}
        }
        if let Some(Value::Array(alts)) = map.get_mut("anyOf") {
            if !alts.iter().any(|a| a.get("type") == Some(&null)) {
                alts.push(serde_json::json!({"type": "null"}));
            }
            return;
        }
    }
    let inner = std::mem::take(schema);
    *schema = serde_json::json!({"anyOf": [inner, {"type": "null"}]});
}
