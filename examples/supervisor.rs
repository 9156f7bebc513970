//! Agent-as-tool: a supervisor agent delegates arithmetic to a specialist
//! agent, whose own tool calls stream out live as progress.
//!
//! `cargo run --example supervisor` (offline: both agents use scripted
//! models).

use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use toolstack::agent::{Agent, AgentEvent, AgentTool};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::{tool, ToolError, Toolbox};

/// Multiply two numbers.
#[derive(Deserialize, JsonSchema)]
struct Mul {
    a: f64,
    b: f64,
}

#[tokio::main]
async fn main() {
    let specialist = Agent::new(
        ScriptedModel::new([
            Turn::new()
                .text("Multiplying.")
                .tool_call("mul", r#"{"a":19.5,"b":4}"#),
            Turn::new().text("19.5 × 4 = 78."),
        ]),
        Toolbox::new().tool(tool::from_fn("mul", |Mul { a, b }| async move {
            Ok::<_, ToolError>(a * b)
        })),
    );
    let math = AgentTool::new(
        "math",
        "A specialist for arithmetic; ask it in plain words.",
        specialist,
    );

    let supervisor = Agent::new(
        ScriptedModel::new([
            Turn::new()
                .text("I'll ask the math specialist.")
                .tool_call("math", r#"{"message":"What is 19.5 times 4?"}"#),
            Turn::new().text("Four tickets at 19.50 cost 78.00 in all."),
        ]),
        Toolbox::new().tool(math),
    );

    let question = "How much do four tickets at 19.50 cost?";
    println!("user: {question}");
    let mut events = supervisor.run(vec![Message::user(question)]);
    while let Some(event) = events.next().await {
        match event {
            AgentEvent::TextDelta(text) => print!("{text}"),
            AgentEvent::ToolCall(call) => println!("\n  → {}({})", call.name, call.arguments),
            AgentEvent::Progress { progress, .. } => {
                println!("      specialist: {}", progress.message.unwrap_or_default())
            }
            AgentEvent::ToolResult { name, result, .. } => {
                println!("  ← {name}: {}", result.text())
            }
            AgentEvent::Done(done) => {
                println!("\n\ndone: {:?} after {} model calls", done.stop, done.steps)
            }
            _ => {}
        }
    }
}
