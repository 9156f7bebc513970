//! The terminal: a run's events printed as they come, and the person
//! asked about each write once its call is printed.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use toolstack::agent::AgentEvent;
use toolstack::ToolOutput;

use super::approve::{ask_at_the_terminal, Ask};

/// The terminal: prints a run's events as they come, and asks the person
/// about each write once its call is printed.
pub struct Console {
    out: std::io::Stdout,
    /// Calls whose request is printed, and those whose approver waits: a
    /// call is asked about once it is in both.
    printed: Vec<String>,
    waiting: Vec<Ask>,
    /// Rows that reached the model, and every row read (the budget tap's).
    streamed_rows: u64,
    rows_read: Arc<AtomicU64>,
}

impl Console {
    /// A console; `rows_read` is counted by a budget tap.
    pub fn new(rows_read: Arc<AtomicU64>) -> Self {
        Console {
            out: std::io::stdout(),
            printed: Vec::new(),
            waiting: Vec::new(),
            streamed_rows: 0,
            rows_read,
        }
    }

    /// A write waits for the person (from [`terminal_approver`](super::terminal_approver)).
    pub async fn asked(&mut self, ask: Ask) {
        self.waiting.push(ask);
        ask_the_printed(&mut self.printed, &mut self.waiting).await;
    }

    /// Prints one event of the run.
    pub async fn event(&mut self, event: AgentEvent) -> std::io::Result<()> {
        if let AgentEvent::ApprovalRequested { call_id, .. } = &event {
            self.printed.push(call_id.clone());
        }
        let asking = matches!(event, AgentEvent::ApprovalRequested { .. });
        match event {
            AgentEvent::TextDelta(text) => {
                print!("{text}");
                self.out.flush()?;
            }
            AgentEvent::ReasoningDelta(thought) => {
                print!("\x1b[2m{thought}\x1b[0m");
                self.out.flush()?;
            }
            AgentEvent::ToolCall(call) => println!("\n  → {}({})", call.name, call.arguments),
            AgentEvent::Progress { progress, .. } => {
                let filled = ((progress.progress / 3_000.0) * 30.0).min(30.0) as usize;
                print!(
                    "\r    [{}{}] {}",
                    "#".repeat(filled),
                    ".".repeat(30 - filled),
                    progress.message.unwrap_or_default()
                );
                self.out.flush()?;
            }
            AgentEvent::ToolOutput {
                output: ToolOutput::Json { .. },
                ..
            } => self.streamed_rows += 1,
            AgentEvent::ToolResult { name, result, .. } => {
                let text = result.text().replace('\n', " | ");
                let shown: String = text.chars().take(160).collect();
                let more = if text.len() > shown.len() { " …" } else { "" };
                let status = if result.is_error { "error" } else { "ok" };
                println!(
                    "\n  ← {name} [{status}, {} items]: {shown}{more}",
                    result.content.len()
                );
            }
            AgentEvent::ApprovalRequested {
                name, arguments, ..
            } => println!("\n  ? {name} waits for approval: {arguments}"),
            AgentEvent::ApprovalDecided { decision, by, .. } => {
                println!("    {} by {by}", decision.outcome())
            }
            AgentEvent::TurnDiscarded { error } => {
                println!("\n(the model's answer broke off: {error}; asking again)")
            }
            AgentEvent::Error(err) => println!("\nmodel error: {err}"),
            AgentEvent::Done(done) => {
                let usage = done.usage.map_or("not reported".to_owned(), |u| {
                    format!(
                        "{} prompt + {} completion tokens",
                        u.prompt_tokens, u.completion_tokens
                    )
                });
                println!(
                    "\n\ndone: {:?} after {} model turns; {} rows read, {} of them in the model's context; usage {usage}",
                    done.stop,
                    done.steps,
                    self.rows_read.load(Ordering::Relaxed),
                    self.streamed_rows
                )
            }
            _ => {}
        }
        if asking {
            ask_the_printed(&mut self.printed, &mut self.waiting).await;
        }
        Ok(())
    }
}

/// Asks the person about every waiting call whose request is printed.
async fn ask_the_printed(printed: &mut Vec<String>, waiting: &mut Vec<Ask>) {
    while let Some(at) = waiting
        .iter()
        .position(|(request, _)| printed.contains(&request.call_id))
    {
        let (request, answer) = waiting.remove(at);
        // One printed request for one ask: two calls of one id (a provider
        // that repeats them) are asked about one each.
        if let Some(seen) = printed.iter().position(|id| *id == request.call_id) {
            printed.remove(seen);
        }
        let _ = answer.send(ask_at_the_terminal(&request).await);
    }
}
