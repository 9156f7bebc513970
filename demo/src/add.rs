//! The `add` tool's arguments and function, and the hand-written direct
//! call every benchmark compares against (`benches/` of both crates).

use schemars::JsonSchema;
use serde::Deserialize;

/// The arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Add {
    /// The first term.
    pub a: i64,
    /// The second term.
    pub b: i64,
}

/// The function.
pub fn add(Add { a, b }: Add) -> i64 {
    a + b
}

/// The arguments every benchmark sends.
pub const ARGS: &str = r#"{"a":1,"b":2}"#;

/// Parse the argument string → call the function → serialize the output.
pub fn direct(args: &str) -> String {
    let parsed: Add = serde_json::from_str(args).expect("valid arguments");
    serde_json::to_string(&add(parsed)).expect("serializable")
}
