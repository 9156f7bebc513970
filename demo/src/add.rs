//! The `add` tool's arguments, output and function, and the hand-written
//! direct call every benchmark compares against (`benches/` of both crates).
//!
//! The numbers are floats on purpose: parsing and formatting an `f64` is
//! real work, as a tool's own work is, so the ratios are not ratios of
//! nothing.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Add {
    /// The first term.
    pub a: f64,
    /// The second term.
    pub b: f64,
}

/// The output.
#[derive(Serialize, JsonSchema)]
pub struct Sum {
    /// `a + b`.
    pub sum: f64,
}

/// The function.
pub fn add(Add { a, b }: Add) -> Sum {
    Sum { sum: a + b }
}

/// The arguments every benchmark sends, as a model writes them.
pub const ARGS: &str = r#"{"a": 1.5, "b": 2.25}"#;

/// The text the model receives for [`ARGS`].
pub const TEXT: &str = r#"{"sum":3.75}"#;

/// Parse the argument string → call the function → serialize the output:
/// the text a model would receive, written by hand.
pub fn direct(args: &str) -> String {
    let parsed: Add = serde_json::from_str(args).expect("valid arguments");
    serde_json::to_string(&add(parsed)).expect("serializable")
}
