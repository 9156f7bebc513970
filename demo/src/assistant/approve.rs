//! Who approves a write: nobody (the write is denied), or the person at
//! the terminal, asked by the [`Console`](super::Console) once the call
//! is printed.

use std::io::{IsTerminal, Write};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use toolstack::approval::{ApprovalRequest, CallerApprover, Decision};

/// What the toolbox's approval layer does when the call carries no
/// approver of its own (the terminal and the browser each give one).
pub fn nobody_to_ask(_: &ApprovalRequest) -> impl std::future::Future<Output = Decision> {
    std::future::ready(Decision::deny(
        "nobody was there to approve a write; answer from what you have read",
    ))
}

/// A call waiting for the person at the terminal, and where the answer goes.
pub type Ask = (ApprovalRequest, oneshot::Sender<Decision>);

/// The terminal's approver: it hands each request to the console, which
/// asks once it has printed what came before it (the model's text, the
/// call, the other calls' output) — the person sees the call, then is
/// asked.
pub fn terminal_approver() -> (CallerApprover, mpsc::UnboundedReceiver<Ask>) {
    let (asks, asked) = mpsc::unbounded_channel::<Ask>();
    let approver = CallerApprover::new("the user", move |request: &ApprovalRequest| {
        let (answer, decision) = oneshot::channel();
        let _ = asks.send((request.clone(), answer));
        async move {
            decision
                .await
                .unwrap_or_else(|_| Decision::deny("the terminal closed before answering"))
        }
    });
    (approver, asked)
}

/// Asks the person at the terminal; with nobody there (stdin is not a
/// terminal, as in the scripted run), the write is denied.
pub(super) async fn ask_at_the_terminal(asked: &ApprovalRequest) -> Decision {
    let sql = serde_json::from_str::<Value>(&asked.arguments)
        .ok()
        .and_then(|v| v.get("sql").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| asked.arguments.clone());
    if !std::io::stdin().is_terminal() {
        println!("    (nobody at the terminal to approve a write: denied)");
        return Decision::deny(
            "the user was not there to approve a write; answer from what you have read",
        );
    }
    let answer = tokio::task::spawn_blocking(move || {
        print!("    run this write: {sql}\n    approve? [y/N] ");
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        line
    })
    .await
    .unwrap_or_default();
    if answer.trim().eq_ignore_ascii_case("y") {
        Decision::Allow
    } else {
        Decision::deny("the user said no to this write")
    }
}
