//! The seed's demo tools: weather, a calculator, a clock with a
//! hand-written schema, and two streaming tools (a file's lines, a counter
//! with progress). `examples/tour.rs` shows them; `tests/seed_tools.rs`
//! pins their schemas and answers.
//!
//! ```
//! use std::time::SystemTime;
//! use toolstack::Toolbox;
//! use toolstack_demo::tools;
//!
//! let toolbox = Toolbox::new()
//!     .tool(tools::weather())
//!     .tool(tools::calculator())
//!     .tool(tools::clock(SystemTime::now))
//!     .tool(tools::read_lines())
//!     .tool(tools::count());
//! let names: Vec<&str> = toolbox.infos().map(|info| info.name()).collect();
//! assert_eq!(names, ["get_weather", "calculator", "current_time", "read_lines", "count"]);
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{stream, StreamExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;
use toolstack::tool::{self, AsyncFn, FnTool, ToolContext};
use toolstack::{BoxTool, Progress, ToolAnnotations, ToolError, ToolInfo};

/// Arguments of the weather tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WeatherArgs {
    /// The city, e.g. "Paris".
    pub city: String,
    /// The temperature unit; Celsius when left out.
    pub unit: Option<Unit>,
}

/// A temperature unit.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
// Documented variants would turn the schema's `enum` of names into a
// `oneOf` of described constants.
#[allow(missing_docs)]
pub enum Unit {
    Celsius,
    Fahrenheit,
}

/// The weather in a city.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Weather {
    /// The city, as the tool knows it.
    pub city: String,
    /// The temperature, in `unit`.
    pub temperature: f64,
    /// The unit of `temperature`.
    pub unit: Unit,
    /// The sky, in a word.
    pub conditions: &'static str,
}

const CITIES: [(&str, f64, &str); 4] = [
    ("Paris", 18.0, "cloudy"),
    ("London", 14.0, "rain"),
    ("Tokyo", 22.0, "sunny"),
    ("New York", 20.0, "windy"),
];

/// `get_weather`: the weather in one of four known cities, as structured
/// output with its schema; an unknown city is a failure naming the known ones.
pub fn weather() -> BoxTool {
    BoxTool::new(
        tool::from_fn("get_weather", |args: WeatherArgs| async move {
            let Some(&(city, celsius, conditions)) = CITIES
                .iter()
                .find(|(name, _, _)| name.eq_ignore_ascii_case(args.city.trim()))
            else {
                let known: Vec<&str> = CITIES.iter().map(|c| c.0).collect();
                return Err(ToolError::failed(format!(
                    "unknown city `{}`; known cities: {}",
                    args.city,
                    known.join(", ")
                )));
            };
            let unit = args.unit.unwrap_or(Unit::Celsius);
            let temperature = match unit {
                Unit::Celsius => celsius,
                Unit::Fahrenheit => celsius * 9.0 / 5.0 + 32.0,
            };
            Ok(Weather {
                city: city.to_owned(),
                temperature,
                unit,
                conditions,
            })
        })
        .with_description("Current weather for a city")
        .with_annotations(ToolAnnotations::new().read_only())
        .with_output_schema_for::<Weather>(),
    )
}

/// Arguments of the calculator.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CalcArgs {
    /// What to compute.
    pub operation: Operation,
    /// The first operand.
    pub a: f64,
    /// The second operand; not used by `sqrt`.
    pub b: Option<f64>,
}

/// A calculator operation.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
// Undocumented variants, as for `Unit`: the schema lists their names.
#[allow(missing_docs)]
pub enum Operation {
    Add,
    Subtract,
    Multiply,
    Divide,
    Sqrt,
    Power,
}

/// The calculator's arithmetic: a missing `b` is refused as invalid
/// arguments, division by zero and a negative root as failures.
pub fn calculate(args: CalcArgs) -> Result<f64, ToolError> {
    let b = || {
        args.b.ok_or_else(|| {
            ToolError::invalid_arguments(format!(
                "missing field `b`, required by `{:?}`",
                args.operation
            ))
        })
    };
    let value = match args.operation {
        Operation::Add => args.a + b()?,
        Operation::Subtract => args.a - b()?,
        Operation::Multiply => args.a * b()?,
        Operation::Divide => {
            let b = b()?;
            if b == 0.0 {
                return Err(ToolError::failed("division by zero"));
            }
            args.a / b
        }
        Operation::Sqrt => {
            if args.a < 0.0 {
                return Err(ToolError::failed(format!(
                    "cannot take the square root of a negative number ({})",
                    args.a
                )));
            }
            args.a.sqrt()
        }
        Operation::Power => args.a.powf(b()?),
    };
    Ok(value)
}

/// `calculator`: [`calculate`] as a tool.
pub fn calculator() -> BoxTool {
    BoxTool::new(
        tool::from_fn(
            "calculator",
            (|args| std::future::ready(calculate(args))) as fn(_) -> _,
        )
        .with_description("Arithmetic: add, subtract, multiply, divide, sqrt, power")
        .with_annotations(ToolAnnotations::new().read_only()),
    )
}

/// Arguments of the clock; its schema is written by hand in [`clock`].
#[derive(Debug, Deserialize)]
pub struct TimeArgs {
    /// `UTC`, `Z` or a fixed offset such as `+02:00`.
    pub timezone: String,
}

/// Parses `UTC`, `Z` or a fixed offset `+HH:MM` / `-HH:MM` into seconds.
pub fn parse_offset(tz: &str) -> Option<i64> {
    let tz = tz.trim();
    if tz.eq_ignore_ascii_case("utc") || tz == "Z" {
        return Some(0);
    }
    let (sign, rest) = match tz.as_bytes().first()? {
        b'+' => (1, &tz[1..]),
        b'-' => (-1, &tz[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    (h <= 14 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

/// Formats a unix time at an offset as ISO 8601.
pub fn format_time(unix: i64, offset: i64) -> String {
    let t = unix + offset;
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let sign = if offset < 0 { '-' } else { '+' };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{sign}{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60,
        offset.abs() / 3600,
        offset.abs() % 3600 / 60
    )
}

/// `current_time`: the time at an offset, with a hand-written schema and a
/// clock (`now`) that tests can fix.
pub fn clock(now: fn() -> SystemTime) -> BoxTool {
    let info = ToolInfo::new("current_time")
        .with_description("The current time in a timezone")
        .with_input_schema(serde_json::json!({
            "type": "object",
            "properties": {
                "timezone": {
                    "type": "string",
                    "description": "`UTC` or a fixed offset such as `+02:00`"
                }
            },
            "required": ["timezone"],
            "additionalProperties": false
        }));
    BoxTool::new(FnTool::with_info(
        info,
        AsyncFn(move |args: TimeArgs| {
            std::future::ready(match parse_offset(&args.timezone) {
                None => Err(ToolError::invalid_arguments(format!(
                    "invalid timezone `{}`: expected `UTC` or an offset like `+02:00`",
                    args.timezone
                ))),
                Some(offset) => {
                    let unix = now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or(Duration::ZERO)
                        .as_secs() as i64;
                    Ok(format_time(unix, offset))
                }
            })
        }),
    ))
}

/// Arguments of `read_lines`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadLines {
    /// The file to read.
    pub path: String,
}

/// `read_lines`: a file's lines, one text item each, streamed as they are
/// read.
pub fn read_lines() -> BoxTool {
    BoxTool::new(
        tool::from_stream("read_lines", |args: ReadLines| {
            let path = args.path;
            stream::once(async move {
                match tokio::fs::File::open(&path).await {
                    Ok(file) => {
                        let lines = tokio::io::BufReader::new(file).lines();
                        tokio_stream::wrappers::LinesStream::new(lines)
                            .map(|line| line.map_err(ToolError::from))
                            .left_stream()
                    }
                    Err(err) => stream::iter([Err(ToolError::failed(format!(
                        "cannot open `{path}`: {err}"
                    )))])
                    .right_stream(),
                }
            })
            .flatten()
        })
        .with_description("Reads a text file, streaming its lines"),
    )
}

/// Arguments of `count`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Count {
    /// Count from 1 up to this number.
    pub to: u32,
    /// Pause between numbers, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
}

/// `count`: counts, reporting progress before each number.
pub fn count() -> BoxTool {
    BoxTool::new(
        tool::from_stream_with_context("count", |args: Count, ctx: ToolContext| {
            let total = args.to;
            stream::iter(1..=total).then(move |n| {
                let report = Progress::new(f64::from(n))
                    .total(f64::from(total))
                    .message(format!("counted {n} of {total}"));
                ctx.report(report);
                async move {
                    if args.delay_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(args.delay_ms)).await;
                    }
                    Ok::<_, ToolError>(n)
                }
            })
        })
        .with_description("Counts up to a number, with progress"),
    )
}
