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
    let denied = text.find("deny by the user").expect("and is denied");
    let read_back = text
        .find("was denied by the user: the user was not there to approve a write")
        .expect("the model reads the denial");
    assert!(asked < denied && denied < read_back, "{text}");
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
