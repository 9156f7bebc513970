//! Arbitrary argument text through `ValidateLayer` over tools in a
//! `Toolbox`: a typed tool (its schemars schema), and a raw tool whose
//! input schema is itself fuzz input (a schema may come from a remote MCP
//! server). The call goes through or is refused as `invalid_arguments`.

#![no_main]

use std::sync::OnceLock;

use futures::executor::block_on;
use libfuzzer_sys::fuzz_target;
use toolstack::{tool, ToolError, ToolInfo, ToolRequest, ToolResult, Toolbox};
use toolstack_fuzz::{assert_invalid, assert_ok_or_invalid, text, Args, Strict};
use toolstack_layers::validate::ValidateLayer;
use tower::ServiceExt;

/// Built once: the compiled schemas are cached per tool, as in a server.
fn typed() -> &'static Toolbox {
    static TOOLS: OnceLock<Toolbox> = OnceLock::new();
    TOOLS.get_or_init(|| {
        Toolbox::new()
            .layered(
                tool::from_fn("args", |args: Args| async move { Ok::<_, ToolError>(args) }),
                ValidateLayer::new(),
            )
            .layered(
                tool::from_fn(
                    "strict",
                    |args: Strict| async move { Ok::<_, ToolError>(args) },
                ),
                ValidateLayer::new().max_argument_bytes(4096),
            )
    })
}

fn unevaluated_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var_os("TOOLSTACK_FUZZ_UNEVALUATED").is_some())
}

fn call(tools: Toolbox, name: &str, arguments: &str) -> ToolResult {
    block_on(async {
        match tools
            .oneshot(ToolRequest::new(name.to_owned(), arguments.to_owned()))
            .await
        {
            Ok(stream) => ToolResult::collect(stream).await,
            Err(err) => {
                assert_invalid(&err, arguments);
                ToolResult::from_error(err)
            }
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let input = text(data);
    // `schema` NUL `arguments`: the schema of a raw tool; without a NUL the
    // whole input is the typed tools' arguments.
    match input.split_once('\0') {
        None => {
            for name in ["args", "strict"] {
                let result = call(typed().clone(), name, &input);
                assert_ok_or_invalid(&result, &input);
            }
        }
        Some((schema, arguments)) => {
            // jsonschema 0.61.2 leaks the compiled validator of a schema
            // with `unevaluatedProperties`/`unevaluatedItems` and a `$ref`
            // back into it (fuzz/README.md); LeakSanitizer would stop on
            // every such input. `TOOLSTACK_FUZZ_UNEVALUATED=1` (with
            // `-detect_leaks=0`) fuzzes them for everything else.
            if schema.contains("unevaluated") && !unevaluated_allowed() {
                return;
            }
            let Ok(schema) = serde_json::from_str::<serde_json::Value>(schema) else {
                return;
            };
            let info = ToolInfo::new("raw").with_input_schema(schema);
            let raw = tool::raw(info, |_| futures::stream::empty());
            let tools = Toolbox::new().layered(raw, ValidateLayer::new());
            let result = call(tools, "raw", arguments);
            assert_ok_or_invalid(&result, arguments);
        }
    }
});
