//! The toolbox's panicking builders blame the line that called them
//! (`#[track_caller]`), not a line inside toolstack.
//!
//! Its own test binary: the panic hook it sets is process-wide, and no other
//! test should run (and panic) while it is set.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use toolstack::{tool, BoxTool, ToolError, ToolInfo, Toolbox};

fn echo(name: &'static str) -> BoxTool {
    BoxTool::new(tool::from_fn(
        name,
        move |_: serde_json::Value| async move { Ok::<_, ToolError>(name) },
    ))
}

fn one() -> Toolbox {
    Toolbox::new().boxed(echo("a"))
}

#[test]
fn every_panicking_builder_reports_the_callers_line() {
    let location = Arc::new(Mutex::new(None::<String>));
    let seen = location.clone();
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        *seen.lock().unwrap() = info.location().map(|l| l.file().to_owned());
    }));

    let builders: [(&str, fn()); 8] = [
        ("tool", || drop(one().tool(echo("a")))),
        ("boxed", || drop(one().boxed(echo("a")))),
        ("layered", || {
            drop(one().layered(echo("a"), tower::layer::util::Identity::new()))
        }),
        ("service", || {
            drop(one().service(ToolInfo::new("a"), echo("a")))
        }),
        ("merge", || drop(one().merge(one()))),
        ("nest", || drop(one().nest("", one()))),
        ("prefix", || drop(one().prefix("a b"))),
        ("rename", || drop(one().rename("b", "c"))),
    ];
    let mut blamed = Vec::new();
    for (name, build) in &builders {
        *location.lock().unwrap() = None;
        let outcome = panic::catch_unwind(AssertUnwindSafe(build));
        assert!(outcome.is_err(), "`{name}` did not panic");
        blamed.push((*name, location.lock().unwrap().clone().unwrap_or_default()));
    }
    panic::set_hook(previous);

    let wrong: Vec<_> = blamed
        .iter()
        .filter(|(_, file)| !file.ends_with("toolbox_track_caller.rs"))
        .collect();
    assert!(
        wrong.is_empty(),
        "these blamed a file not their caller's: {wrong:?}"
    );
}
