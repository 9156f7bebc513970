//! [`lift`]: a `tools/call` that asks for a 2025-11-25 task, renamed in
//! the raw text of its message so that rmcp hands it, `task` and all, to
//! `on_custom_request`.

use std::collections::HashMap;

use serde_json::value::RawValue;

use crate::mcp::server::revision;

/// The method a `tools/call` that asks for a 2025-11-25 task is renamed to
/// before rmcp reads it.
pub(super) const TASK_CALL: &str = "toolstack/tools/call-as-task";

/// How much longer [`lift`] makes a message: the method's new name.
pub(in crate::mcp::server) const LIFT_GROWTH: usize = TASK_CALL.len() - "tools/call".len();

/// The raw text of a message, changed when it is a `tools/call` that asks
/// for a task (a `task` object in its params) and is not a 2026-07-28
/// request (whose `task` member is ignored, as the tasks extension says):
/// its method renamed to [`TASK_CALL`], every other member kept as it was
/// written, so it grows by at most [`LIFT_GROWTH`] bytes. Any other
/// message, or text that is not JSON, is left as it is (`None`), for rmcp
/// to read or refuse.
pub(in crate::mcp::server) fn lift(text: &[u8]) -> Option<Vec<u8>> {
    // Most messages never mention a task: no parse for them.
    memchr::memmem::find(text, b"\"task\"")?;
    let message: HashMap<&str, &RawValue> = serde_json::from_slice(text).ok()?;
    if message.get("method")?.get() != "\"tools/call\"" {
        return None;
    }
    let params: HashMap<&str, &RawValue> =
        serde_json::from_str(message.get("params")?.get()).ok()?;
    if !params.get("task")?.get().starts_with('{') {
        return None;
    }
    let asked = params
        .get("_meta")
        .and_then(|meta| serde_json::from_str::<HashMap<&str, &RawValue>>(meta.get()).ok())
        .and_then(|meta| {
            meta.get("io.modelcontextprotocol/protocolVersion")
                .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        });
    if asked.is_some_and(|v| revision::is_stateless(&v)) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() + LIFT_GROWTH);
    out.push(b'{');
    for (i, (key, value)) in message.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // A key borrowed from the text has no escapes: written back as is.
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        if *key == "method" {
            out.push(b'"');
            out.extend_from_slice(TASK_CALL.as_bytes());
            out.push(b'"');
        } else {
            out.extend_from_slice(value.get().as_bytes());
        }
    }
    out.push(b'}');
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn only_a_tools_call_that_asks_for_a_task_is_renamed() {
        let asks = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"task":{"ttl":1000}}}"#;
        let lifted: Value = serde_json::from_slice(&lift(asks).unwrap()).unwrap();
        assert_eq!(lifted["method"], TASK_CALL);
        assert_eq!(lifted["params"]["task"]["ttl"], 1000);
        // An argument named `task` is not a task.
        let argument =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"task":{}}}}"#;
        assert!(lift(argument).is_none());
        let other =
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t","task":{}}}"#;
        assert!(lift(other).is_none());
        assert!(lift(b"not json \"task\"").is_none());
        assert!(lift(br#"{"method":"tools/call","params":{"task":1}}"#).is_none());
        // A 2026-07-28 request's `task` is ignored: not renamed.
        let modern = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","task":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(lift(modern).is_none());
    }

    #[test]
    fn a_lifted_message_keeps_its_members_as_written_and_grows_by_the_name() {
        let asks = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"f":1e2,"s":"\u00e9"},"task":{}}}"#;
        let lifted = lift(asks).unwrap();
        assert_eq!(lifted.len(), asks.len() + LIFT_GROWTH);
        let text = String::from_utf8(lifted).unwrap();
        // Numbers and escapes as the client wrote them.
        assert!(text.contains(r#"{"f":1e2,"s":"\u00e9"}"#), "{text}");
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["id"], 7);
        assert_eq!(value["method"], TASK_CALL);
    }
}
