//! The `add` tool's arguments and function, and the hand-written direct
//! call every benchmark compares against.

use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
pub struct Add {
    pub a: i64,
    pub b: i64,
}

pub fn add(Add { a, b }: Add) -> i64 {
    a + b
}

pub const ARGS: &str = r#"{"a":1,"b":2}"#;

/// Parse the argument string → call the function → serialize the output.
pub fn direct(args: &str) -> String {
    let parsed: Add = serde_json::from_str(args).expect("valid arguments");
    serde_json::to_string(&add(parsed)).expect("serializable")
}
