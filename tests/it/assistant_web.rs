//! The `assistant` example's web page in a real browser: the example
//! serves it (`--web`, the scripted model), `web/check-page.mjs` loads it
//! in headless Chromium (Debian's `chromium`, driven by puppeteer-core from
//! `web/package.json`), asks the question, reloads the page mid-answer (it
//! must reconnect to the answer in progress), kills the server with
//! SIGKILL and starts it again while the write waits for approval (its run
//! is in a SQLite file), approves the write, and reports what the page
//! shows; a screenshot is kept under `target/web/`.
//!
//! Needs `web/node_modules` and a `chromium` (`.ci/run` installs both);
//! without them the test says SKIPPED loudly, and fails when
//! `TOOLSTACK_REQUIRE_BROWSER` is set (CI sets it once both installed).
//!
//! Every wait is bounded, generously for a debug build on a loaded
//! machine (the run takes seconds; the script's own waits are 30 to 60 s
//! each, and say which step they waited for): a run that hangs fails,
//! saying what it waited for, instead of holding CI up.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::process;
use process::output_within;

/// Kills the example when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TOOLSTACK_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|path| path.exists())
}

#[test]
fn the_page_shows_the_agent_at_work_in_a_real_browser() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let node = root.join("web/node_modules/.bin/node");
    let puppeteer = root.join("web/node_modules/puppeteer-core/package.json");
    let missing = match chromium() {
        None => Some("no `chromium` on PATH (Debian: apt-get install chromium)".to_owned()),
        Some(_) if !node.exists() || !puppeteer.exists() => {
            Some("web/node_modules is missing (run `npm ci` in web/)".to_owned())
        }
        Some(_) => None,
    };
    if let Some(why) = missing {
        assert!(
            std::env::var_os("TOOLSTACK_REQUIRE_BROWSER").is_none(),
            "TOOLSTACK_REQUIRE_BROWSER is set but {why}"
        );
        // Straight to stderr: the harness captures `eprintln!`, and a
        // skipped test must say so where the user sees it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "!! SKIPPED: the browser test of the assistant's page did NOT run: {why}"
        );
        return;
    }
    let chromium = chromium().unwrap();

    // `cargo test` builds the examples next to the test binaries.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let assistant = dir
        .join("examples")
        .join(format!("assistant{}", std::env::consts::EXE_SUFFIX));
    assert!(assistant.exists(), "{} is missing", assistant.display());
    // A fixed port, so that the server started again serves the same page.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let runs = std::env::temp_dir().join(format!(
        "toolstack-assistant-web-{}-{:?}.db",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    let mut server = Killed(
        Command::new(&assistant)
            // A delta every 50 ms: the answer is still streaming when the
            // page reloads, however slow the machine's browser is.
            .args(["--web", "--port", &port, "--pace-ms", "50", "--runs"])
            .arg(&runs)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = server.0.stdout.take().unwrap();
    let (said, first) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = said.send(line);
    });
    let patience = Duration::from_secs(60);
    let first = first.recv_timeout(patience).unwrap_or_else(|_| {
        panic!(
            "timed out after {patience:?} waiting for the assistant example to say where it serves"
        )
    });
    let url = first
        .trim()
        .strip_prefix("serving on ")
        .unwrap_or_else(|| panic!("the example said {first:?}"))
        .to_owned();

    let shots = dir.parent().unwrap().join("web");
    std::fs::create_dir_all(&shots).unwrap();
    let screenshot = shots.join("assistant.png");
    let _ = std::fs::remove_file(&screenshot);
    // Past the script's own waits, so that theirs, which name the step,
    // come first.
    let output = output_within(
        Command::new(node)
            .arg(root.join("web/check-page.mjs"))
            .arg(&url)
            .arg(&screenshot)
            .arg(&chromium)
            // How to kill the server and start it again.
            .arg(server.0.id().to_string())
            .arg(&assistant)
            .args(["--web", "--port", &port, "--pace-ms", "50", "--runs"])
            .arg(&runs),
        Duration::from_secs(300),
        "web/check-page.mjs to drive the page in Chromium (launch, load, ask, approve, answer)",
    );
    assert!(
        output.status.success(),
        "the browser run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)));
    eprintln!("screenshot: {}", screenshot.display());
    assert!(screenshot.exists());

    assert_eq!(
        shown["errors"],
        serde_json::json!([]),
        "script errors: {shown}"
    );
    assert_eq!(shown["status"], "done");
    // Reloaded mid-answer, the page reconnected to the answer in progress;
    // the server killed and started again, the approval still went
    // through.
    assert_eq!(shown["reconnected"], true, "{shown}");
    assert_eq!(shown["restarted"], true, "{shown}");
    assert!(shown["asked"]
        .as_str()
        .unwrap()
        .contains("DELETE FROM orders"));
    // The final answer, after the approved write.
    let texts = shown["texts"].as_array().unwrap();
    let last = texts.last().unwrap().as_str().unwrap();
    assert!(
        last.starts_with("The test orders under a cent are cleared out. Brazil leads"),
        "{last}"
    );
    // Every tool call with its arguments, in order; results as tables.
    let tools = shown["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "search_schema",
            "show_table",
            "execute_sql",
            "execute_sql",
            "execute_sql"
        ]
    );
    assert!(
        tools.iter().all(|t| t["state"] == "output-available"),
        "{shown}"
    );
    assert_eq!(tools[1]["args"], r#"{"table":"orders","limit":3}"#);
    assert_eq!(tools[1]["tableRows"], 3);
    // The 3,000-row query: progress reached 100 %; 50 rows reached the page's table.
    assert_eq!(tools[2]["percent"], "100");
    assert_eq!(tools[2]["tableRows"], 50);
    assert_eq!(tools[3]["tableRows"], 5);
    assert!(shown["finished"]
        .as_str()
        .unwrap()
        .starts_with("finished (stop) after 6 steps"));
    let _ = std::fs::remove_file(&runs);
}
