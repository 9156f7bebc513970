//! The `assistant` example's scripted run (the README's main command),
//! with nobody at the terminal: the write it attempts is denied and the
//! denial goes back to the model; a query's rows are cut to the budget in
//! the model's context while the terminal counts every row read.

#[test]
fn the_scripted_run_denies_the_write_and_budgets_the_rows() {
    // `cargo test` builds the examples next to the test binaries.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let assistant = dir.join(format!("assistant{}", std::env::consts::EXE_SUFFIX));
    assert!(assistant.exists(), "{} is missing", assistant.display());
    let out = std::process::Command::new(assistant)
        .stdin(std::process::Stdio::null())
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let asked = text
        .find("? execute_sql waits for approval: {\"sql\":\"DELETE FROM orders")
        .expect("the write asks for approval");
    // The person sees the call, then is asked: the model's text that
    // proposes the write, the call, and the output of the calls before it
    // are printed before the question.
    let proposed = text
        .find("→ execute_sql({\"sql\":\"DELETE FROM orders")
        .expect("the model proposes the write");
    let before = text
        .find("← execute_sql [ok, 5 items]")
        .expect("the totals come back");
    let question = text
        .find("(nobody at the terminal to approve a write: denied)")
        .expect("the person is asked");
    assert!(
        before < proposed && proposed < asked && asked < question,
        "{text}"
    );
    let denied = text.find("deny by the user").expect("and is denied");
    let read_back = text
        .find("was denied by the user: the user was not there to approve a write")
        .expect("the model reads the denial");
    assert!(question < denied && denied < read_back, "{text}");
    // 3,000 + 5 rows read (the tap); 57 JSON items reached the model: 50
    // of the 3,000 rows (head and tail, the note of the cut between), the
    // 5 totals, and the two lookups' answers.
    assert!(
        text.contains("3005 rows read, 57 of them in the model's context"),
        "{text}"
    );
    assert!(
        text.contains("[ok, 51 items]"),
        "the budgeted query: {text}"
    );
}

/// `--record FILE` then `--replay FILE`: the scripted run recorded, then
/// answered from the recording alone, prints byte for byte what it
/// printed live.
#[test]
fn the_recorded_run_replays_byte_identical() {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let assistant = dir.join(format!("assistant{}", std::env::consts::EXE_SUFFIX));
    let file =
        std::env::temp_dir().join(format!("toolstack-assistant-{}.jsonl", std::process::id()));
    let run = |flag: &str| {
        let out = std::process::Command::new(&assistant)
            .arg(flag)
            .arg(&file)
            .stdin(std::process::Stdio::null())
            .env_remove("OPENAI_BASE_URL")
            .output()
            .unwrap();
        assert!(out.status.success(), "{flag}: {out:?}");
        out.stdout
    };
    let live = run("--record");
    let recording = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        recording.lines().count(),
        1 + 6,
        "a header and the run's six model calls"
    );
    let replayed = run("--replay");
    assert!(!live.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&replayed),
        String::from_utf8_lossy(&live)
    );
    let _ = std::fs::remove_file(&file);
}

/// With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the run's spans reach the
/// collector over OTLP/HTTP: a stand-in collector on loopback receives
/// `POST /v1/traces` and finds the run's span names in the protobuf (its
/// strings are plain UTF-8 there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_run_exports_its_spans_to_an_otlp_collector() {
    use std::sync::{Arc, Mutex};
    let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let seen = Arc::clone(&bodies);
    let collector = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(body.to_vec());
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, collector).await.unwrap() });

    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let assistant = dir.join(format!("assistant{}", std::env::consts::EXE_SUFFIX));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(assistant)
            .stdin(std::process::Stdio::null())
            .env_remove("OPENAI_BASE_URL")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_SERVICE_NAME", "assistant-under-test")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("exporting spans over OTLP"));
    let bodies = bodies.lock().unwrap().concat();
    let has = |needle: &str| bodies.windows(needle.len()).any(|w| w == needle.as_bytes());
    for needle in [
        "assistant-under-test",
        "invoke_agent assistant",
        "chat scripted",
        "execute_tool execute_sql",
        "gen_ai.tool.description",
        "gen_ai.usage.input_tokens",
        "gen_ai.tool.call.decision",
    ] {
        assert!(
            has(needle),
            "`{needle}` was not exported ({} bytes received)",
            bodies.len()
        );
    }
}

/// `--provider anthropic` against a stand-in for the Messages API: the
/// request reaches `/v1/messages` with the key, and the answer's thinking
/// and text are printed.
#[test]
#[cfg(feature = "anthropic")]
fn the_anthropic_provider_answers_from_anthropic_base_url() {
    use std::io::{Read, Write};
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let assistant = dir.join(format!("assistant{}", std::env::consts::EXE_SUFFIX));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let events = [
        r#"{"type":"message_start","message":{"model":"claude-stand-in","usage":{"input_tokens":9,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Nothing to look up."}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"All orders are fine."}}"#,
        r#"{"type":"content_block_stop","index":1}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":8}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let server = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_lowercase();
        let mut body = String::from(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        );
        for event in events {
            body.push_str(&format!("data: {event}\n\n"));
        }
        socket.write_all(body.as_bytes()).unwrap();
        head
    });
    let out = std::process::Command::new(assistant)
        .args(["--provider", "anthropic"])
        .stdin(std::process::Stdio::null())
        .env_remove("OPENAI_BASE_URL")
        .env("ANTHROPIC_BASE_URL", &url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("ANTHROPIC_MODEL", "claude-test")
        .output()
        .unwrap();
    if !server.is_finished() {
        // The example never called: a connection of nothing unblocks the
        // stand-in, whose read then fails the test instead of hanging it.
        let _ = std::net::TcpStream::connect(addr);
    }
    let head = server.join().expect("the example asked the Messages API");
    assert!(head.starts_with("post /v1/messages "), "{head}");
    assert!(head.contains("x-api-key: sk-ant-test"), "{head}");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(model: Anthropic's Messages API)"), "{text}");
    assert!(text.contains("Nothing to look up."), "{text}");
    assert!(text.contains("All orders are fine."), "{text}");
}
