//! The pitfall of capturing logs in tests (see `support/logs.rs`), pinned
//! in a binary of its own: here the capturing test's subscriber is the
//! only one alive, which is when `tracing` caches a callsite first hit on
//! another thread as "never".

mod support;

use support::capture::Capture;

fn emit() {
    tracing::info!("first hit on another thread");
}

#[test]
fn an_event_first_hit_on_a_thread_with_no_subscriber_still_reaches_the_test_that_captures() {
    let capture = Capture::default();
    let _guard = capture.install();
    // A sibling test's thread, with no subscriber, hits the callsite first.
    std::thread::spawn(emit).join().unwrap();
    emit();
    assert_eq!(
        capture.events_with("first hit on another thread").len(),
        1,
        "the callsite was cached as \"never\""
    );
}
