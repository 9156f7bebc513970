//! What the fuzz targets share: nested, schemars-derived argument types
//! and the tools built on them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolstack::{ErrorKind, ToolError, ToolResult};

/// A unit enum, renamed variants.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Celsius,
    Fahrenheit,
    #[serde(alias = "k")]
    Kelvin,
}

/// An externally tagged enum with unit, newtype, tuple and struct variants.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    Point,
    Circle(f64),
    Rect(u16, u16),
    Poly { sides: u8, closed: Option<bool> },
}

/// An internally tagged enum.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Filter {
    Range { min: i64, max: i64 },
    Prefix { prefix: String },
    Not { inner: Box<Filter> },
}

/// An adjacently tagged enum.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "t", content = "c")]
pub enum Op {
    Add(i32),
    Neg,
    Scale { by: f32 },
}

/// An untagged enum.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Either {
    Num(u64),
    Text(String),
    List(Vec<Option<i8>>),
}

/// A nested struct, refusing unknown fields.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub name: String,
    #[serde(default)]
    pub qty: u32,
    pub shape: Option<Shape>,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A recursive struct.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Node {
    pub label: char,
    #[serde(default)]
    pub children: Vec<Node>,
}

/// Options flattened into [`Args`].
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Options {
    #[serde(default)]
    pub verbose: bool,
    pub limit: Option<usize>,
}

/// The arguments of the fuzzed tools: every shape serde and schemars
/// derive for a tool's argument type.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Args {
    /// A required string.
    pub city: String,
    pub unit: Unit,
    pub days: Option<u8>,
    #[serde(default)]
    pub items: Vec<Item>,
    pub shape: Option<Shape>,
    pub filter: Option<Filter>,
    #[serde(default)]
    pub ops: Vec<Op>,
    pub either: Option<Either>,
    pub tree: Option<Node>,
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
    pub pair: Option<(i16, String)>,
    #[serde(flatten)]
    pub options: Options,
}

/// A flat struct refusing unknown fields, to reach the decoder's error
/// paths without `flatten` (which turns off field-level errors).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Strict {
    pub unit: Unit,
    pub items: Vec<Item>,
    pub filter: Filter,
    pub op: Option<Op>,
    pub either: Either,
    pub n: i32,
}

/// Input text from fuzz bytes: as is when UTF-8, lossily otherwise.
pub fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// The one outcome a typed tool that echoes its arguments may have other
/// than items: its arguments refused.
pub fn assert_ok_or_invalid(result: &ToolResult, input: &str) {
    if let Some(err) = &result.error {
        assert_invalid(err, input);
    }
}

/// `err` is the refusal of bad arguments.
pub fn assert_invalid(err: &ToolError, input: &str) {
    assert_eq!(
        err.kind(),
        ErrorKind::InvalidArguments,
        "not invalid_arguments for {input:?}: {err}"
    );
    assert!(!err.message().is_empty(), "an empty message for {input:?}");
}
