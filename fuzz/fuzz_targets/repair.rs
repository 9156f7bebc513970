//! Arbitrary text, as a model writes tool-call arguments, through the
//! repair layer's `repair`: never a panic; what it returns is a JSON
//! object that `serde_json` parses, and it returns nothing for text that
//! already is one.

#![no_main]

use libfuzzer_sys::fuzz_target;
use toolstack_layers::repair::repair;

fuzz_target!(|text: &str| {
    let already = serde_json::from_str::<serde_json::Value>(text.trim())
        .is_ok_and(|v| v.is_object());
    match repair(text) {
        Some((fixed, rules)) => {
            assert!(!already, "a valid object was repaired: {text:?}");
            assert!(!rules.is_empty());
            let value: serde_json::Value = serde_json::from_str(&fixed).expect("repaired text parses");
            assert!(value.is_object());
        }
        None => {}
    }
});
