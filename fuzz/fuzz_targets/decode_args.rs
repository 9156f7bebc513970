//! Arbitrary argument text through typed `tool::from_fn` tools: the
//! arguments decode into a nested type (and the tool echoes them), or the
//! call is refused as `invalid_arguments`; never a panic.

#![no_main]

use std::future::{ready, Ready};
use std::sync::OnceLock;

use futures::executor::block_on;
use libfuzzer_sys::fuzz_target;
use toolstack::tool::{AsyncFn, FnTool};
use toolstack::{tool, ToolError, ToolRequest, ToolResult};
use toolstack_fuzz::{assert_invalid, assert_ok_or_invalid, text, Args, Strict};
use tower::ServiceExt;

/// A tool that echoes its decoded arguments.
type Echo<T> = FnTool<AsyncFn<fn(T) -> Ready<Result<T, ToolError>>>, T>;

fn echo<T>(name: &'static str) -> Echo<T>
where
    T: schemars::JsonSchema,
{
    tool::from_fn(
        name,
        (|args| ready(Ok(args))) as fn(T) -> Ready<Result<T, ToolError>>,
    )
}

/// The tools are built once (inferring the schema is the costly part, and
/// a server does it once too); each call goes to a clone.
fn tools() -> &'static (Echo<Args>, Echo<Strict>) {
    static TOOLS: OnceLock<(Echo<Args>, Echo<Strict>)> = OnceLock::new();
    TOOLS.get_or_init(|| (echo("args"), echo("strict")))
}

fn call<T>(tool: Echo<T>, name: &str, arguments: &str)
where
    T: serde::de::DeserializeOwned + serde::Serialize + 'static,
{
    let result = block_on(async {
        match tool
            .oneshot(ToolRequest::new(name.to_owned(), arguments.to_owned()))
            .await
        {
            Ok(stream) => ToolResult::collect(stream).await,
            Err(err) => {
                assert_invalid(&err, arguments);
                ToolResult::from_error(err)
            }
        }
    });
    assert_ok_or_invalid(&result, arguments);
    if result.error.is_none() {
        // The echoed arguments are the one JSON item.
        assert!(
            result.structured_content().is_some(),
            "no item for {arguments:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let arguments = text(data);
    let (args, strict) = tools();
    call(args.clone(), "args", &arguments);
    call(strict.clone(), "strict", &arguments);
});
