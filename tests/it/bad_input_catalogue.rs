//! The bad-input catalogue: every input a model, an HTTP caller or an MCP
//! client might send wrong, each row with the behaviour it pins, the exact
//! [`ErrorKind`] and the words the message must hold. Argument strings and
//! tool names through a toolbox, an agent wrapped as a tool, the
//! validation layer, HTTP requests through the axum router (in process,
//! `tower::ServiceExt::oneshot`), and MCP messages through our client and
//! server on an in-memory pipe.
//!
//! A failing row is reported by its behaviour, with what came back; every
//! row of a table runs before the test fails.
#![cfg(all(feature = "http", feature = "mcp"))]

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use futures_util::{stream, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use toolstack::http::HttpTools;
use toolstack::mcp::rmcp::model::CallToolRequestParams;
use toolstack::mcp::rmcp::service::ServiceError;
use toolstack::mcp::rmcp::ServiceExt as _;
use toolstack::mcp::{McpClient, McpServer};
use toolstack::{tool, ErrorKind, ToolError, ToolInfo, ToolOutput, ToolRequest, Toolbox};
use toolstack_layers::validate::ValidateLayer;
use tower::{ServiceBuilder, ServiceExt};

// ---------------------------------------------------------------- tools

#[allow(dead_code)] // the fields exist to be decoded
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Room {
    Single,
    Double,
    Suite,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize, JsonSchema)]
struct Address {
    city: String,
    zip: String,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize, JsonSchema)]
struct Booking {
    guest: String,
    nights: u8,
    room: Room,
    extras: Option<Vec<String>>,
    address: Option<Address>,
    rate: Option<f64>,
    notes: Option<Value>,
}

const BOOK_LIMIT: usize = 4096;

/// `book` (typed, 4 KiB argument limit) and `sink` (raw: takes anything),
/// counting the calls that reach a function.
fn tools(calls: &Arc<AtomicUsize>) -> Toolbox {
    let (book_calls, sink_calls) = (calls.clone(), calls.clone());
    let book = tool::from_fn("book", move |b: Booking| {
        book_calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>(format!("{} booked", b.guest)) }
    })
    .max_argument_bytes(BOOK_LIMIT);
    let sink = tool::raw(ToolInfo::new("sink"), move |request: ToolRequest| {
        sink_calls.fetch_add(1, Ordering::SeqCst);
        stream::iter([Ok(ToolOutput::text(request.arguments().len().to_string()))])
    });
    Toolbox::new().tool(book).tool(sink)
}

/// A row that failed: its behaviour and what came back instead.
struct Failures(Vec<String>);

impl Failures {
    fn new() -> Self {
        Failures(Vec::new())
    }

    /// Checks one outcome against a row's kind and words.
    fn check(
        &mut self,
        behaviour: &str,
        got: Result<(String, String), String>,
        kind: &str,
        words: &[&str],
    ) {
        match got {
            Err(outcome) => self.0.push(format!("row `{behaviour}`: {outcome}")),
            Ok((got_kind, message)) => {
                if got_kind != kind {
                    self.0.push(format!(
                        "row `{behaviour}`: kind `{got_kind}`, expected `{kind}`: {}",
                        shown(&message)
                    ));
                }
                for word in words {
                    if !message.contains(word) {
                        self.0.push(format!(
                            "row `{behaviour}`: the message lacks {word:?}: {}",
                            shown(&message)
                        ));
                    }
                }
            }
        }
    }

    fn assert_none(self, table: &str) {
        assert!(
            self.0.is_empty(),
            "{} failing row(s) in {table}:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// A message as a failure shows it: long ones cut.
fn shown(message: &str) -> String {
    if message.len() <= 300 {
        return format!("{message:?}");
    }
    let mut cut = 300;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{:?}… ({} bytes)", &message[..cut], message.len())
}

fn outcome(err: &ToolError) -> Result<(String, String), String> {
    Ok((err.kind().as_str().to_owned(), err.message().to_owned()))
}

/// `depth` levels of arrays and objects, the arguments object included,
/// in `notes`.
fn nested_notes(depth: usize) -> String {
    format!(
        r#"{{"notes":{}{}}}"#,
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

const GOOD: &str = r#"{"guest":"Ada","nights":2,"room":"double"}"#;

fn with(field: &str, value: &str) -> String {
    format!(r#"{{"guest":"Ada","nights":2,"room":"double","{field}":{value}}}"#)
}

// ------------------------------------------------- argument strings

struct ArgumentRow {
    behaviour: &'static str,
    arguments: String,
    kind: ErrorKind,
    words: &'static [&'static str],
}

fn arg(
    behaviour: &'static str,
    arguments: impl Into<String>,
    words: &'static [&'static str],
) -> ArgumentRow {
    ArgumentRow {
        behaviour,
        arguments: arguments.into(),
        kind: ErrorKind::InvalidArguments,
        words,
    }
}

fn argument_rows() -> Vec<ArgumentRow> {
    vec![
        arg(
            "empty arguments read as {} and name the first missing field",
            "",
            &["missing field `guest`"],
        ),
        arg(
            "JSON whitespace alone reads as {}",
            " \t\r\n",
            &["missing field `guest`"],
        ),
        arg(
            "a no-break space is not whitespace JSON allows",
            "\u{a0}",
            &[
                "arguments are not valid JSON",
                "U+00A0",
                "not whitespace JSON allows",
            ],
        ),
        arg(
            "an em space is named by its code point",
            " \u{2003} ",
            &["U+2003", "not whitespace JSON allows"],
        ),
        arg(
            "a byte-order mark is not JSON",
            "\u{feff}{}",
            &["arguments are not valid JSON"],
        ),
        arg(
            "an array is not an object",
            "[]",
            &["arguments must be a JSON object, got an array"],
        ),
        arg(
            "a string is not an object",
            "\"Ada\"",
            &["arguments must be a JSON object, got a string"],
        ),
        arg(
            "a number is not an object",
            "42",
            &["arguments must be a JSON object, got a number"],
        ),
        arg(
            "a negative number is not an object",
            "-1",
            &["got a number"],
        ),
        arg(
            "a boolean is not an object",
            "true",
            &["arguments must be a JSON object, got a boolean"],
        ),
        arg(
            "null is not an object",
            "null",
            &["arguments must be a JSON object, got null"],
        ),
        // Text that is not JSON is not named by its first byte: `not json`
        // is not null, `foo` not a boolean, `12abc` not a number.
        arg(
            "words that start like null are not JSON",
            "not json",
            &["arguments are not valid JSON"],
        ),
        arg(
            "a word that starts like false is not JSON",
            "foo",
            &["arguments are not valid JSON"],
        ),
        arg(
            "digits then letters are not JSON",
            "12abc",
            &["arguments are not valid JSON", "trailing characters"],
        ),
        arg(
            "an array broken off is not JSON",
            "[1, oops",
            &["arguments are not valid JSON"],
        ),
        arg(
            "a string never closed is not JSON",
            "\"Ada",
            &["arguments are not valid JSON", "EOF"],
        ),
        arg(
            "an unclosed object is not JSON",
            "{",
            &["arguments are not valid JSON", "EOF"],
        ),
        arg(
            "a truncated object is not JSON",
            r#"{"guest": "Ada""#,
            &["arguments are not valid JSON", "EOF"],
        ),
        arg(
            "an unquoted key is not JSON",
            "{guest: 1}",
            &["arguments are not valid JSON", "key must be a string"],
        ),
        arg(
            "single quotes are not JSON",
            "{'guest': 'Ada'}",
            &["arguments are not valid JSON"],
        ),
        arg(
            "text after the object is not JSON",
            format!("{GOOD} x"),
            &["arguments are not valid JSON", "trailing characters"],
        ),
        arg(
            "two objects are not one",
            format!("{GOOD}{GOOD}"),
            &["arguments are not valid JSON", "trailing characters"],
        ),
        arg(
            "a bad escape is not JSON",
            r#"{"guest": "\x"}"#,
            &["arguments are not valid JSON", "escape"],
        ),
        arg(
            "a lone surrogate in a string names the field",
            r#"{"guest": "\ud800"}"#,
            &["invalid value at `guest`", "hex escape"],
        ),
        arg(
            "a raw control character in a string is not JSON",
            "{\"guest\": \"A\nda\"}",
            &["arguments are not valid JSON", "control character"],
        ),
        arg(
            "a missing field is named",
            r#"{"guest":"Ada","room":"double"}"#,
            &["missing field `nights`"],
        ),
        arg(
            "a string for a number names the field and the type",
            r#"{"guest":"Ada","nights":"two","room":"double"}"#,
            &["invalid value at `nights`", "expected u8"],
        ),
        arg(
            "a number out of the field's range names it",
            r#"{"guest":"Ada","nights":300,"room":"double"}"#,
            &["invalid value at `nights`", "300", "expected u8"],
        ),
        arg(
            "a negative count names the field",
            r#"{"guest":"Ada","nights":-1,"room":"double"}"#,
            &["invalid value at `nights`", "expected u8"],
        ),
        arg(
            "a fraction for a count names the field",
            r#"{"guest":"Ada","nights":1.5,"room":"double"}"#,
            &["invalid value at `nights`", "1.5"],
        ),
        arg(
            "a number for a name names the field",
            r#"{"guest":7,"nights":1,"room":"double"}"#,
            &["invalid value at `guest`", "expected a string"],
        ),
        arg(
            "an enum given a number names the field and the variants",
            r#"{"guest":"Ada","nights":1,"room":42}"#,
            &["invalid value at `room`: got `42`, expected one of `single`, `double`, `suite`"],
        ),
        arg(
            "an enum given null names the field and the variants",
            r#"{"guest":"Ada","nights":1,"room":null}"#,
            &["invalid value at `room`: got `null`, expected one of `single`, `double`, `suite`"],
        ),
        arg(
            "an enum given an array names the field and the variants",
            r#"{"guest":"Ada","nights":1,"room":["single"]}"#,
            &["invalid value at `room`: got an array, expected one of"],
        ),
        arg(
            "an enum given a boolean names the field and the variants",
            r#"{"guest":"Ada","nights":1,"room":false}"#,
            &["invalid value at `room`: got `false`, expected one of"],
        ),
        arg(
            "an unknown variant is named with the variants",
            r#"{"guest":"Ada","nights":1,"room":"penthouse"}"#,
            &[
                "invalid value at `room`",
                "unknown variant `penthouse`",
                "expected one of `single`, `double`, `suite`",
            ],
        ),
        arg(
            "a variant of the wrong case is unknown",
            r#"{"guest":"Ada","nights":1,"room":"Single"}"#,
            &["unknown variant `Single`"],
        ),
        arg(
            "a list item of the wrong type names its index",
            with("extras", "[\"tea\", 1]"),
            &["invalid value at `extras[1]`", "expected a string"],
        ),
        arg(
            "a string for a list names the field",
            with("extras", "\"tea\""),
            &["invalid value at `extras`", "expected a sequence"],
        ),
        arg(
            "a nested missing field names its parent",
            with("address", r#"{"city":"Oslo"}"#),
            &["`address`", "missing field `zip`"],
        ),
        arg(
            "a nested wrong type names the path",
            with("address", r#"{"city":"Oslo","zip":7}"#),
            &["invalid value at `address.zip`"],
        ),
        arg(
            "a string for a float names the field",
            with("rate", "\"NaN\""),
            &["invalid value at `rate`", "expected f64"],
        ),
        arg(
            "a number too large for a float names the field",
            with("rate", "1e400"),
            &["`rate`", "number out of range"],
        ),
        arg(
            "a duplicate field is named",
            r#"{"guest":"Ada","guest":"Bo","nights":1,"room":"single"}"#,
            &["duplicate field `guest`"],
        ),
        arg(
            "arguments over the tool's limit are refused unread",
            format!(r#"{{"guest":"{}"}}"#, "x".repeat(BOOK_LIMIT)),
            &["arguments are 4108 bytes; the limit for `book` is 4096 bytes"],
        ),
        arg(
            "oversized text that is not even JSON is refused for its size",
            "{".repeat(BOOK_LIMIT + 1),
            &["the limit for `book` is 4096 bytes"],
        ),
        arg(
            "one level too deep is refused by depth",
            nested_notes(128),
            &["arguments are nested too deeply: at most 127 levels"],
        ),
        arg(
            "very deep nesting is a typed error, not a stack overflow",
            nested_notes(2000),
            &["arguments are nested too deeply"],
        ),
        arg(
            "deep nesting in text that does not close is still about depth",
            format!(r#"{{"notes":{}"#, "[".repeat(1000)),
            &["arguments are nested too deeply"],
        ),
    ]
}

#[tokio::test]
async fn every_bad_argument_string_is_a_typed_error_naming_the_problem() {
    let mut failures = Failures::new();
    for row in argument_rows() {
        let calls = Arc::new(AtomicUsize::new(0));
        let result = tools(&calls)
            .oneshot(ToolRequest::new("book", row.arguments.clone()))
            .await;
        let got = match &result {
            Ok(_) => Err("the call opened".to_owned()),
            Err(err) => outcome(err),
        };
        failures.check(row.behaviour, got, row.kind.as_str(), row.words);
        if calls.load(Ordering::SeqCst) != 0 {
            failures
                .0
                .push(format!("row `{}`: the function was called", row.behaviour));
        }
    }
    failures.assert_none("the argument strings");
}

// ------------------------------------------------------ tool names

struct NameRow {
    behaviour: &'static str,
    name: String,
    words: &'static [&'static str],
    absent: &'static [&'static str],
}

fn name(
    behaviour: &'static str,
    name: impl Into<String>,
    words: &'static [&'static str],
    absent: &'static [&'static str],
) -> NameRow {
    NameRow {
        behaviour,
        name: name.into(),
        words,
        absent,
    }
}

fn name_rows() -> Vec<NameRow> {
    vec![
        name(
            "an empty name is an unknown tool listing the tools",
            "",
            &["the tool call names no tool; available tools: book, sink"],
            &[],
        ),
        name(
            "a misspelt name suggests the closest",
            "bok",
            &["unknown tool `bok`; did you mean `book`?"],
            &[],
        ),
        name(
            "a name of another case is unknown and not guessed",
            "BOOK",
            &["unknown tool `BOOK`; available tools:"],
            &["did you mean"],
        ),
        name(
            "a name with a leading space suggests the tool",
            " book",
            &["did you mean `book`?"],
            &[],
        ),
        name(
            "a name with a NUL suggests the tool",
            "book\0",
            &["did you mean `book`?"],
            &[],
        ),
        name(
            "a name with a line break is quoted as sent",
            "bo\nok",
            &["unknown tool `bo\nok`"],
            &[],
        ),
        name(
            "a non-ASCII name close to a tool suggests it",
            "böök",
            &["did you mean `book`?"],
            &[],
        ),
        name(
            "a name of 65 to 128 characters is quoted cut",
            "b".repeat(100),
            &["unknown tool `bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb…`;"],
            &[],
        ),
        name(
            "a name just past 128 characters is refused as too long",
            format!("book{}", "k".repeat(125)),
            &[
                "longer than the 128 characters of a tool name",
                "available tools: book, sink",
            ],
            &["did you mean"],
        ),
        name(
            "a mebibyte of name is refused quickly, quoted short",
            "n".repeat(1 << 20),
            &["longer than the 128 characters", "…`"],
            &["nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"],
        ),
        name(
            "a tool the resolver hides is unknown and unlisted",
            "admin",
            &["unknown tool `admin`; available tools: sink, book"],
            &[", admin"],
        ),
    ]
}

#[tokio::test]
async fn every_bad_tool_name_is_not_found_listing_what_the_caller_may_call() {
    let calls = Arc::new(AtomicUsize::new(0));
    let admin = tool::from_fn("admin", |_: Value| async { Ok::<_, ToolError>("ok") });
    let toolbox = Toolbox::new()
        .merge(tools(&calls))
        .tool(admin)
        .resolver(|info: &ToolInfo, _: &http::Extensions| info.name() != "admin");
    let mut failures = Failures::new();
    for row in name_rows() {
        let result = toolbox
            .clone()
            .oneshot(ToolRequest::new(row.name.clone(), "{}"))
            .await;
        let got = match &result {
            Ok(_) => Err("the call opened".to_owned()),
            Err(err) => outcome(err),
        };
        if let Ok((_, message)) = &got {
            for word in row.absent {
                if message.contains(word) {
                    failures.0.push(format!(
                        "row `{}`: the message holds {word:?}: {}",
                        row.behaviour,
                        shown(message)
                    ));
                }
            }
        }
        failures.check(row.behaviour, got, "not_found", row.words);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    failures.assert_none("the tool names");
}

// --------------------------------------------------- agent as a tool

fn agent_rows() -> Vec<ArgumentRow> {
    vec![
        arg(
            "an agent's message given a number is refused naming it",
            r#"{"message": 42}"#,
            &["`message` must be a string", "got a number"],
        ),
        arg(
            "an agent's message given null is refused naming it",
            r#"{"message": null}"#,
            &["`message` must be a string", "got null"],
        ),
        arg(
            "an agent's message given a boolean is refused naming it",
            r#"{"message": true}"#,
            &["`message` must be a string", "got a boolean"],
        ),
        arg(
            "an agent's message given a list is refused naming it",
            r#"{"message": ["hi"]}"#,
            &["`message` must be a string", "got an array"],
        ),
        arg(
            "an object without a message is refused",
            r#"{"question": "hi"}"#,
            &["`message` is required"],
        ),
        arg(
            "empty arguments to an agent are a missing message",
            "",
            &["`message` is required"],
        ),
        arg(
            "a blank message is a missing message",
            r#"{"message": "  "}"#,
            &["`message` is required"],
        ),
        arg(
            "an agent's arguments over 1 MiB are refused unread",
            "x".repeat(toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES + 1),
            &["the limit for `ask` is 1048576 bytes"],
        ),
        arg(
            "deeply nested arguments to an agent are about depth",
            format!(r#"{{"message":{}"#, "[".repeat(500)),
            &["arguments are nested too deeply"],
        ),
    ]
}

#[tokio::test]
async fn every_bad_input_to_an_agent_tool_names_the_message() {
    use toolstack::model::{ScriptedModel, Turn};
    let agent = toolstack::agent::Agent::new(
        ScriptedModel::new([Turn::new().text("answered")]),
        Toolbox::new(),
    );
    let ask = toolstack::agent::AgentTool::new("ask", "Asks a specialist.", agent);
    let mut failures = Failures::new();
    for row in agent_rows() {
        let result = ask
            .clone()
            .oneshot(ToolRequest::new("ask", row.arguments.clone()))
            .await;
        let got = match &result {
            Ok(_) => Err("the call opened".to_owned()),
            Err(err) => outcome(err),
        };
        failures.check(row.behaviour, got, row.kind.as_str(), row.words);
    }
    failures.assert_none("the agent tool's inputs");
}

// ------------------------------------------------------ validation

fn forecast_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1}
        },
        "required": ["city"],
        "additionalProperties": false
    })
}

fn validate_rows() -> Vec<ArgumentRow> {
    vec![
        arg(
            "a missing required property is at the root",
            "{}",
            &[
                "invalid arguments: (root):",
                "\"city\" is a required property",
            ],
        ),
        arg(
            "a wrong type names the pointer and the type",
            r#"{"city": 1}"#,
            &["/city:", "is not of type \"string\""],
        ),
        arg(
            "a value under the minimum names the bound",
            r#"{"city": "Oslo", "days": 0}"#,
            &["/days:", "minimum of 1"],
        ),
        arg(
            "an unexpected property is named",
            r#"{"city": "Oslo", "wind": true}"#,
            &["Additional properties are not allowed", "wind"],
        ),
        arg(
            "an array where the schema wants an object",
            "[1]",
            &["(root):", "is not of type \"object\""],
        ),
        arg(
            "text that is not JSON is said to be so",
            "{\"city\"",
            &["arguments are not valid JSON"],
        ),
        arg(
            "a no-break space is named before validation",
            "\u{a0}",
            &["U+00A0", "not whitespace JSON allows"],
        ),
        arg(
            "arguments over the layer's limit are refused before parsing",
            format!(r#"{{"city": "{}"}}"#, "x".repeat(300)),
            &["arguments are 312 bytes; the limit for `forecast` is 256 bytes"],
        ),
        arg(
            "deep nesting is refused by depth before validation",
            format!(r#"{{"city":{}"#, "[".repeat(128)),
            &["arguments are nested too deeply"],
        ),
    ]
}

#[tokio::test]
async fn every_bad_input_to_a_validated_tool_is_refused_before_the_tool() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let forecast = tool::raw(
        ToolInfo::new("forecast").with_input_schema(forecast_schema()),
        move |_: ToolRequest| {
            counted.fetch_add(1, Ordering::SeqCst);
            stream::iter([Ok(ToolOutput::text("sunny"))])
        },
    );
    let toolbox = Toolbox::new().layered(
        forecast,
        ServiceBuilder::new().layer(ValidateLayer::new().max_argument_bytes(256)),
    );
    let mut failures = Failures::new();
    for row in validate_rows() {
        let result = toolbox
            .clone()
            .oneshot(ToolRequest::new("forecast", row.arguments.clone()))
            .await;
        let got = match &result {
            Ok(_) => Err("the call opened".to_owned()),
            Err(err) => outcome(err),
        };
        failures.check(row.behaviour, got, row.kind.as_str(), row.words);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    failures.assert_none("the validated inputs");
}

// ------------------------------------------------------------- HTTP

struct HttpRow {
    behaviour: &'static str,
    path: String,
    headers: Vec<(&'static str, &'static [u8])>,
    body: Vec<u8>,
    status: u16,
    kind: &'static str,
    words: &'static [&'static str],
}

fn http(
    behaviour: &'static str,
    path: impl Into<String>,
    body: impl Into<Vec<u8>>,
    status: u16,
    kind: &'static str,
    words: &'static [&'static str],
) -> HttpRow {
    HttpRow {
        behaviour,
        path: path.into(),
        headers: Vec::new(),
        body: body.into(),
        status,
        kind,
        words,
    }
}

const HTTP_LIMIT: usize = 1024;

fn http_rows() -> Vec<HttpRow> {
    let mut rows = vec![
        http(
            "a body that is not JSON is 400",
            "/tools/book",
            "{",
            400,
            "invalid_arguments",
            &["arguments are not valid JSON"],
        ),
        http(
            "a body that is an array is 400",
            "/tools/book",
            "[1]",
            400,
            "invalid_arguments",
            &["arguments must be a JSON object, got an array"],
        ),
        http(
            "a body that is null is 400",
            "/tools/book",
            "null",
            400,
            "invalid_arguments",
            &["got null"],
        ),
        http(
            "a body of no-break spaces is 400 naming the character",
            "/tools/book",
            "\u{a0}\u{a0}",
            400,
            "invalid_arguments",
            &["U+00A0"],
        ),
        http(
            "a body that is not UTF-8 is 400",
            "/tools/book",
            vec![b'{', 0xff, b'}'],
            400,
            "invalid_arguments",
            &["the request body is not UTF-8 text"],
        ),
        http(
            "a body over the limit is 413 before it is parsed",
            "/tools/book",
            "{".repeat(HTTP_LIMIT + 1),
            413,
            "invalid_arguments",
            &["the request body is larger than the limit of 1024 bytes"],
        ),
        http(
            "an empty body is {} and names the missing field",
            "/tools/book",
            "",
            400,
            "invalid_arguments",
            &["missing field `guest`"],
        ),
        http(
            "a wrong type in the body names the field",
            "/tools/book",
            r#"{"guest":"Ada","nights":"two","room":"double"}"#,
            400,
            "invalid_arguments",
            &["invalid value at `nights`"],
        ),
        http(
            "an enum given a number in the body names the variants",
            "/tools/book",
            r#"{"guest":"Ada","nights":1,"room":3}"#,
            400,
            "invalid_arguments",
            &["invalid value at `room`: got `3`, expected one of `single`, `double`, `suite`"],
        ),
        http(
            "deep nesting in the body is 400 about depth",
            "/tools/book",
            nested_notes(300),
            400,
            "invalid_arguments",
            &["arguments are nested too deeply"],
        ),
        http(
            "an unknown tool is 404 naming the closest",
            "/tools/bok",
            "{}",
            404,
            "not_found",
            &["unknown tool `bok`; did you mean `book`?"],
        ),
        http(
            "an over-long tool name is 404 without a search",
            format!("/tools/{}", "b".repeat(500)),
            "{}",
            404,
            "not_found",
            &["longer than the 128 characters"],
        ),
        http(
            "a tool name that does not decode is 400",
            "/tools/%FF",
            "{}",
            400,
            "invalid_request",
            &["the tool name in the path"],
        ),
    ];
    rows.push(HttpRow {
        headers: vec![("x-tool-call-id", b"caf\xc3\xa9")],
        ..http(
            "a call id that is not visible ASCII is 400",
            "/tools/book",
            GOOD,
            400,
            "invalid_request",
            &["the x-tool-call-id header must be visible ASCII"],
        )
    });
    rows
}

#[tokio::test]
async fn every_bad_http_request_gets_its_status_kind_and_words() {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().nest(
        "/tools",
        HttpTools::new(tools(&calls))
            .body_limit(HTTP_LIMIT)
            .into_router::<()>(),
    );
    let mut failures = Failures::new();
    for row in http_rows() {
        let mut request = axum::http::Request::post(row.path.as_str());
        for (header, value) in &row.headers {
            request = request.header(*header, axum::http::HeaderValue::from_bytes(value).unwrap());
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::from(row.body.clone())).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let got = match serde_json::from_slice::<Value>(&bytes) {
            _ if status != row.status => Err(format!(
                "status {status}, expected {}: {}",
                row.status,
                shown(&String::from_utf8_lossy(&bytes))
            )),
            Ok(body) => Ok((
                body["kind"].as_str().unwrap_or_default().to_owned(),
                body["error"].as_str().unwrap_or_default().to_owned(),
            )),
            Err(err) => Err(format!("the body is not JSON ({err})")),
        };
        failures.check(row.behaviour, got, row.kind, row.words);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    failures.assert_none("the HTTP requests");
}

// -------------------------------------------------------------- MCP

const MCP_LIMIT: usize = 2048;

async fn mcp_client(toolbox: Toolbox) -> McpClient {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let server = McpServer::new(toolbox).max_argument_bytes(MCP_LIMIT);
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    McpClient::connect(client_io).await.unwrap()
}

fn mcp_call_rows() -> Vec<ArgumentRow> {
    vec![
        arg(
            "MCP: an array is refused by the client before it is sent",
            "[1]",
            &["arguments must be a JSON object, got an array"],
        ),
        arg(
            "MCP: text that is not JSON is refused by the client",
            "{",
            &["arguments are not valid JSON"],
        ),
        arg(
            "MCP: no-break spaces are refused by the client, named",
            "\u{a0}",
            &["U+00A0"],
        ),
        arg(
            "MCP: deep nesting is refused by the client, about depth",
            nested_notes(500),
            &["arguments are nested too deeply"],
        ),
        arg(
            "MCP: a wrong type comes back typed, naming the field",
            r#"{"guest":"Ada","nights":"two","room":"double"}"#,
            &["invalid value at `nights`"],
        ),
        arg(
            "MCP: an enum given a number comes back naming the variants",
            r#"{"guest":"Ada","nights":1,"room":4}"#,
            &["got `4`, expected one of `single`, `double`, `suite`"],
        ),
        arg(
            "MCP: a missing field comes back named",
            r#"{"guest":"Ada"}"#,
            &["missing field `nights`"],
        ),
        arg(
            "MCP: arguments over the server's limit are refused before the tool",
            format!(r#"{{"guest":"{}"}}"#, "x".repeat(MCP_LIMIT)),
            &["the limit for `book` is 2048 bytes"],
        ),
    ]
}

struct McpNameRow {
    behaviour: &'static str,
    name: String,
    words: &'static [&'static str],
}

fn mcp_name_rows() -> Vec<McpNameRow> {
    let row = |behaviour, name: String, words| McpNameRow {
        behaviour,
        name,
        words,
    };
    vec![
        row(
            "MCP: an unknown tool is -32602 with its kind in data",
            "bok".to_owned(),
            &["unknown tool `bok`; did you mean `book`?"],
        ),
        row(
            "MCP: an empty tool name is an unknown tool",
            String::new(),
            &["the tool call names no tool; available tools: book, sink"],
        ),
        row(
            "MCP: a mebibyte of tool name is refused quickly, quoted short",
            "m".repeat(1 << 20),
            &["longer than the 128 characters", "…`"],
        ),
    ]
}

#[tokio::test]
async fn every_bad_mcp_call_comes_back_as_a_typed_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let client = mcp_client(tools(&calls)).await;
    let remote = client.toolbox().await.unwrap();
    let mut failures = Failures::new();
    for row in mcp_call_rows() {
        let got = match remote
            .clone()
            .oneshot(ToolRequest::new("book", row.arguments.clone()))
            .await
        {
            Err(err) => outcome(&err),
            Ok(stream) => {
                let items: Vec<_> = stream.collect().await;
                match items.into_iter().find_map(Result::err) {
                    Some(err) => outcome(&err),
                    None => Err("the call succeeded".to_owned()),
                }
            }
        };
        failures.check(row.behaviour, got, row.kind.as_str(), row.words);
    }
    for row in mcp_name_rows() {
        let params = CallToolRequestParams::new(row.name.clone());
        let got = match client.peer().call_tool(params).await {
            Err(ServiceError::McpError(data)) => {
                let kind = data
                    .data
                    .as_ref()
                    .and_then(|d| d.get("kind"))
                    .and_then(Value::as_str)
                    .unwrap_or("(no kind in data)")
                    .to_owned();
                if data.code.0 != -32602 {
                    failures
                        .0
                        .push(format!("row `{}`: code {}", row.behaviour, data.code.0));
                }
                Ok((kind, data.message.into_owned()))
            }
            other => Err(format!("not a protocol error: {other:?}")),
        };
        failures.check(row.behaviour, got, "not_found", row.words);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    failures.assert_none("the MCP calls");
}

// ---------------------------------------------------------- the whole

#[test]
fn the_catalogue_holds_at_least_sixty_distinct_inputs_each_named() {
    let mut inputs: Vec<(&str, String, String)> = Vec::new();
    for row in argument_rows() {
        inputs.push(("argument", row.behaviour.into(), row.arguments));
    }
    for row in name_rows() {
        inputs.push(("name", row.behaviour.into(), row.name));
    }
    for row in agent_rows() {
        inputs.push(("agent", row.behaviour.into(), row.arguments));
    }
    for row in validate_rows() {
        inputs.push(("validate", row.behaviour.into(), row.arguments));
    }
    for row in http_rows() {
        let key = format!("{} {:?} {:?}", row.path, row.headers, row.body);
        inputs.push(("http", row.behaviour.into(), key));
    }
    for row in mcp_call_rows() {
        inputs.push(("mcp", row.behaviour.into(), row.arguments));
    }
    for row in mcp_name_rows() {
        inputs.push(("mcp name", row.behaviour.into(), row.name));
    }
    assert!(inputs.len() >= 60, "{} rows", inputs.len());
    let mut behaviours = HashSet::new();
    let mut seen = HashSet::new();
    for (table, behaviour, input) in &inputs {
        assert!(
            behaviours.insert(behaviour.clone()),
            "two rows are `{behaviour}`"
        );
        assert!(
            seen.insert((*table, input.clone())),
            "row `{behaviour}` repeats an input of the {table} table"
        );
    }
}
