//! What model calls cost: [`Prices`], a table of [`Price`]s per model, and
//! [`Cost`], an amount of money counted in whole nano-dollars — never a
//! float, so that sums are exact and the same in every process.
//!
//! A price is in dollars per million tokens, as providers list them, for
//! the prompt's tokens (those read from the prompt cache, and those
//! written to it, each at their own price when given) and the generated ones (reasoning at its own price,
//! when given; else as output). The table is checked once, when it is
//! built: a negative, infinite or absurd price, an empty model name or a
//! model listed twice is a [`PriceError`] naming the entry, never a cost
//! found wrong later.
//!
//! ```
//! use toolstack::model::{Cost, Price, Prices, Usage};
//!
//! let prices = Prices::builder()
//!     .model("gpt-4o", Price::per_million_tokens(2.50, 10.00).cached_input(1.25))
//!     .model("gpt-4o-mini*", Price::per_million_tokens(0.15, 0.60))
//!     .build()?;
//! // 10,000 prompt tokens (8,000 of them cached) and 500 generated.
//! let usage = Usage::new(10_000, 500).cached(8_000);
//! let cost = prices.cost("gpt-4o", &usage).expect("priced");
//! assert_eq!(cost, Cost::from_micros(5_000 + 10_000 + 5_000));
//! assert_eq!(cost.to_string(), "$0.02");
//! // A dated snapshot matches the prefix entry.
//! assert!(prices.cost("gpt-4o-mini-2024-07-18", &usage).is_some());
//! assert!(prices.cost("claude", &usage).is_none());
//!
//! // The same table as JSON; a mistyped field is refused, naming the entry.
//! let json = r#"[{"model": "gpt-4o", "input": 2.5, "output": 10, "cahced_input": 1.25}]"#;
//! let err = Prices::from_json(json).unwrap_err();
//! assert!(err.to_string().contains("[0]"), "{err}");
//! # Ok::<(), toolstack::model::PriceError>(())
//! ```
//!
//! * `cost`: [`Cost`], an amount of money;
//! * `rates`: one model's [`Price`], and its checked form;
//! * `table`: [`Prices`], the table, and its [`PricesBuilder`];
//! * `error`: [`PriceError`], why a table was refused.

mod cost;
mod error;
mod rates;
mod table;

#[doc(hidden)]
pub use cost::thousands;
pub use cost::Cost;
pub use error::PriceError;
pub use rates::{Price, MAX_PRICE_PER_MILLION_TOKENS};
pub use table::{Prices, PricesBuilder};
