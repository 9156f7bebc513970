//! A tour of toolstack: the demo tools (`toolstack_demo::tools`), their schemas, calls through a
//! toolbox (good and bad), and a streaming tool's items as they arrive.
//!
//! Run with `cargo run --example tour`.

use std::io::Write;
use std::time::{Instant, SystemTime};

use futures_util::StreamExt;
use toolstack::{ToolOutput, ToolRequest, ToolResult, Toolbox};
use toolstack_demo::tools as demo;
use tower::ServiceExt;

#[tokio::main]
async fn main() {
    let toolbox = Toolbox::new()
        .tool(demo::weather())
        .tool(demo::calculator())
        .tool(demo::clock(SystemTime::now))
        .tool(demo::read_lines())
        .tool(demo::count());

    println!("== tools, as listed to the model ==");
    for info in toolbox.infos() {
        println!(
            "\n{} — {}",
            info.name(),
            info.description().unwrap_or("(no description)")
        );
        println!(
            "{}",
            serde_json::to_string_pretty(info.input_schema()).unwrap_or_default()
        );
    }
    let weather = toolbox
        .get("get_weather")
        .map(|t| t.info().to_openai_function(true));
    println!(
        "\n== get_weather in OpenAI strict form ==\n{}",
        serde_json::to_string_pretty(&weather).unwrap_or_default()
    );

    println!("\n== calls through the toolbox ==");
    for (name, args) in [
        ("get_weather", r#"{"city":"Tokyo","unit":"fahrenheit"}"#),
        ("get_weather", r#"{"city":"Atlantis"}"#),
        ("calculator", r#"{"operation":"power","a":2,"b":16}"#),
        ("calculator", r#"{"operation":"divide","a":1,"b":0}"#),
        ("calculator", r#"{"operation":"add","a":"one","b":2}"#),
        ("current_time", r#"{"timezone":"+09:00"}"#),
        ("current_time", r#"{"timezone":"Mars/Olympus"}"#),
        ("get_wether", r#"{"city":"Paris"}"#),
        ("get_weather", r#"[1,2,3]"#),
    ] {
        let result = match toolbox.clone().oneshot(ToolRequest::new(name, args)).await {
            Ok(stream) => ToolResult::collect(stream).await,
            Err(err) => ToolResult::from_error(err),
        };
        let mark = if result.is_error { "error" } else { "ok" };
        println!("{name}({args})\n  -> [{mark}] {}", result.text());
    }

    println!("\n== a streaming tool: items as they arrive ==");
    let start = Instant::now();
    let req = ToolRequest::new("count", r#"{"to":5,"delay_ms":150}"#).with_id("call_count");
    let mut stream = match toolbox.clone().oneshot(req).await {
        Ok(stream) => stream,
        Err(err) => return eprintln!("count failed to start: {err}"),
    };
    while let Some(item) = stream.next().await {
        let at = start.elapsed().as_millis();
        match item {
            Ok(ToolOutput::Progress(p)) => {
                let total = p.total.unwrap_or(p.progress);
                let filled = (p.progress / total * 20.0).round() as usize;
                print!(
                    "\r{at:>5} ms [{:<20}] {}",
                    "#".repeat(filled),
                    p.message.unwrap_or_default()
                );
                let _ = std::io::stdout().flush();
            }
            Ok(other) => println!(
                "\n{at:>5} ms item: {}",
                serde_json::to_string(&other).unwrap_or_default()
            ),
            Err(err) => println!("\n{at:>5} ms error: {err}"),
        }
    }

    let path = std::env::temp_dir().join("toolstack-tour.txt");
    if std::fs::write(&path, "first line\nsecond line\nthird line\n").is_ok() {
        println!("\n== read_lines, streamed ==");
        let args = serde_json::json!({ "path": path }).to_string();
        if let Ok(mut lines) = toolbox
            .clone()
            .oneshot(ToolRequest::new("read_lines", args))
            .await
        {
            while let Some(item) = lines.next().await {
                match item {
                    Ok(item) => println!("line: {}", item.as_text().unwrap_or_default()),
                    Err(err) => println!("error: {err}"),
                }
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}
