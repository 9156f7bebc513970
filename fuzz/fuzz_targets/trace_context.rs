//! Arbitrary `traceparent` / `tracestate` text, as an MCP request's
//! `_meta` brings it, through `TraceContext::parse`: never a panic; what
//! it keeps is a well-formed version-00 `traceparent` (the accessors
//! slice it, so a wrong length would panic there) and a bounded,
//! printable `tracestate`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use toolstack::trace_context::MAX_TRACESTATE_BYTES;
use toolstack::TraceContext;

fuzz_target!(|input: (String, Option<String>)| {
    let (traceparent, tracestate) = input;
    let Some(tc) = TraceContext::parse(&traceparent, tracestate.as_deref()) else {
        return;
    };
    assert_eq!(tc.traceparent().len(), 55);
    assert_eq!(tc.trace_id().len(), 32);
    assert_eq!(tc.parent_id().len(), 16);
    let _ = tc.is_sampled();
    // Parsing what was kept gives it back.
    assert_eq!(TraceContext::parse(tc.traceparent(), tc.tracestate()), Some(tc.clone()));
    if let Some(state) = tc.tracestate() {
        assert!(state.len() <= MAX_TRACESTATE_BYTES);
        assert!(state.bytes().all(|b| (0x20..0x7f).contains(&b)));
    }
});
