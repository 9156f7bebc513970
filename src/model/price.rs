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

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use super::Usage;

/// An amount of money: whole nano-dollars (10⁻⁹ $), so that any number of
/// calls add up exactly. Displays as dollars (`$0.40`, `$0.421`), with at
/// least two decimals and as many more, up to six, as it needs (rounded up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cost(u64);

impl Cost {
    /// Nothing.
    pub const ZERO: Cost = Cost(0);

    /// `nanos` nano-dollars.
    pub const fn from_nanos(nanos: u64) -> Cost {
        Cost(nanos)
    }

    /// `micros` micro-dollars (saturating).
    pub const fn from_micros(micros: u64) -> Cost {
        Cost(micros.saturating_mul(1_000))
    }

    /// `cents` cents (saturating): `Cost::from_cents(40)` is $0.40.
    pub const fn from_cents(cents: u64) -> Cost {
        Cost(cents.saturating_mul(10_000_000))
    }

    /// The amount in nano-dollars.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The sum, saturating.
    pub const fn saturating_add(self, other: Cost) -> Cost {
        Cost(self.0.saturating_add(other.0))
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // To the micro-dollar, rounded up (a cost is never shown as less
        // than it is, nor a non-zero one as nothing).
        let micros = self.0.div_ceil(1_000);
        let (dollars, fraction) = (micros / 1_000_000, micros % 1_000_000);
        let mut digits = format!("{fraction:06}");
        while digits.len() > 2 && digits.ends_with('0') {
            digits.pop();
        }
        write!(f, "${}.{digits}", thousands(dollars))
    }
}

/// `n` with a comma between thousands (`41,210`), as the spend limit's
/// messages write amounts and token counts.
#[doc(hidden)]
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The price of one model, in dollars per million tokens, before it is
/// checked (by [`PricesBuilder::build`], which names the model in any
/// error).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    input: f64,
    cached_input: Option<f64>,
    cache_write: Option<f64>,
    output: f64,
    reasoning: Option<f64>,
}

impl Price {
    /// `input` dollars per million prompt tokens and `output` per million
    /// generated tokens. Prompt tokens read from or written to the cache
    /// cost `input`, and reasoning tokens `output`, unless priced on their
    /// own.
    pub fn per_million_tokens(input: f64, output: f64) -> Price {
        Price {
            input,
            cached_input: None,
            cache_write: None,
            output,
            reasoning: None,
        }
    }

    /// Prompt tokens read from the cache cost `dollars` per million.
    pub fn cached_input(mut self, dollars: f64) -> Price {
        self.cached_input = Some(dollars);
        self
    }

    /// Prompt tokens written to the cache
    /// ([`cache_creation_tokens`](Usage::cache_creation_tokens), which
    /// Anthropic bills above the input price) cost `dollars` per million
    /// (by default, as input).
    pub fn cache_write(mut self, dollars: f64) -> Price {
        self.cache_write = Some(dollars);
        self
    }

    /// Reasoning tokens cost `dollars` per million (by default, as output).
    pub fn reasoning(mut self, dollars: f64) -> Price {
        self.reasoning = Some(dollars);
        self
    }

    fn rates(&self, entry: &str) -> Result<Rates, PriceError> {
        let rate = |field: &'static str, dollars: f64| to_rate(entry, field, dollars);
        let input = rate("input", self.input)?;
        let output = rate("output", self.output)?;
        Ok(Rates {
            input,
            cached_input: self
                .cached_input
                .map_or(Ok(input), |d| rate("cached_input", d))?,
            cache_write: self
                .cache_write
                .map_or(Ok(input), |d| rate("cache_write", d))?,
            output,
            reasoning: self
                .reasoning
                .map_or(Ok(output), |d| rate("reasoning", d))?,
        })
    }
}

/// The most a price may be, in dollars per million tokens: far above any
/// model's, so that a price in the wrong unit (per token, in cents) is
/// refused rather than billed.
pub const MAX_PRICE_PER_MILLION_TOKENS: f64 = 100_000.0;

/// `dollars` per million tokens in pico-dollars per token (the same number
/// as micro-dollars per million tokens): exact for any price given to the
/// micro-dollar.
fn to_rate(entry: &str, field: &'static str, dollars: f64) -> Result<u64, PriceError> {
    let problem = if dollars.is_nan() {
        Some("is not a number")
    } else if dollars < 0.0 {
        Some("is negative")
    } else if dollars > MAX_PRICE_PER_MILLION_TOKENS {
        Some("is more than $100,000 per million tokens (is it per token, or in cents?)")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(PriceError::BadPrice {
            model: entry.to_owned(),
            field,
            value: dollars,
            problem,
        }),
        // In range and not NaN: the product is below 2^37, exact in u64.
        None => Ok((dollars * 1_000_000.0).round() as u64),
    }
}

/// A checked price: pico-dollars per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rates {
    input: u64,
    cached_input: u64,
    cache_write: u64,
    output: u64,
    reasoning: u64,
}

impl Rates {
    fn cost(&self, usage: &Usage) -> Cost {
        let reasoning = usage.reasoning_tokens.min(usage.completion_tokens);
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let written = usage
            .cache_creation_tokens
            .min(usage.prompt_tokens - cached);
        let picos = u128::from(usage.prompt_tokens - cached - written) * u128::from(self.input)
            + u128::from(cached) * u128::from(self.cached_input)
            + u128::from(written) * u128::from(self.cache_write)
            + u128::from(usage.completion_tokens - reasoning) * u128::from(self.output)
            + u128::from(reasoning) * u128::from(self.reasoning);
        // Rounded up to the nano-dollar: a call is never free by rounding.
        Cost(u64::try_from(picos.div_ceil(1_000)).unwrap_or(u64::MAX))
    }
}

/// What each model costs: built from code ([`Prices::builder`]) or read
/// from JSON ([`Prices::from_json`]), checked once when built. Cheap to
/// clone (shared).
///
/// A model is looked up by its exact name, then by the longest prefix
/// entry it starts with (an entry whose name ends in `*`: `gpt-4o-*` for
/// the dated snapshots), then the default entry (`*`), if any.
#[derive(Clone, Default)]
pub struct Prices {
    table: Arc<Table>,
}

#[derive(Default)]
struct Table {
    exact: HashMap<Box<str>, Rates>,
    // Longest first, so the first match is the longest.
    prefixes: Vec<(Box<str>, Rates)>,
    default: Option<Rates>,
}

impl Prices {
    /// A table built entry by entry; see [`PricesBuilder`].
    pub fn builder() -> PricesBuilder {
        PricesBuilder {
            entries: Vec::new(),
        }
    }

    /// A table from JSON: an array of entries
    /// `{"model": "gpt-4o", "input": 2.5, "output": 10, "cached_input": 1.25, "reasoning": 10}`
    /// (dollars per million tokens; `cached_input`, `cache_write` and
    /// `reasoning` optional; `model` ending in `*` for a prefix, `*` alone for the
    /// default). An unknown field, a missing one, a bad price, an empty or
    /// repeated model are refused, naming the entry.
    pub fn from_json(json: &str) -> Result<Prices, PriceError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            model: String,
            input: f64,
            output: f64,
            #[serde(default)]
            cached_input: Option<f64>,
            #[serde(default)]
            cache_write: Option<f64>,
            #[serde(default)]
            reasoning: Option<f64>,
        }
        let mut reader = serde_json::Deserializer::from_str(json);
        let entries: Vec<Entry> =
            serde_path_to_error::deserialize(&mut reader).map_err(|err| PriceError::Json {
                path: err.path().to_string(),
                error: err.into_inner(),
            })?;
        let mut builder = Prices::builder();
        for Entry {
            model,
            input,
            output,
            cached_input,
            cache_write,
            reasoning,
        } in entries
        {
            builder.entries.push((
                model,
                Price {
                    input,
                    cached_input,
                    cache_write,
                    output,
                    reasoning,
                },
            ));
        }
        builder.build()
    }

    /// What `usage` cost on `model`, or `None` when the table has no price
    /// for it.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<Cost> {
        self.rates(model).map(|rates| rates.cost(usage))
    }

    /// Whether the table prices `model` (by name, prefix or default).
    pub fn prices(&self, model: &str) -> bool {
        self.rates(model).is_some()
    }

    /// What one prompt token costs on `model`, in pico-dollars (uncached):
    /// what a tool result's tokens are priced at.
    pub fn input_picos_per_token(&self, model: &str) -> Option<u64> {
        self.rates(model).map(|rates| rates.input)
    }

    fn rates(&self, model: &str) -> Option<&Rates> {
        let table = &*self.table;
        table
            .exact
            .get(model)
            .or_else(|| {
                table
                    .prefixes
                    .iter()
                    .find(|(prefix, _)| model.starts_with(&**prefix))
                    .map(|(_, rates)| rates)
            })
            .or(table.default.as_ref())
    }
}

impl fmt::Debug for Prices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prices")
            .field("models", &self.table.exact.len())
            .field("prefixes", &self.table.prefixes.len())
            .field("default", &self.table.default.is_some())
            .finish()
    }
}

/// Builds [`Prices`]: entries added with [`model`](Self::model), all
/// checked by [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct PricesBuilder {
    entries: Vec<(String, Price)>,
}

impl PricesBuilder {
    /// Prices `model`: an exact name, a prefix ending in `*`
    /// (`gpt-4o-*`), or `*` for every model not otherwise priced.
    pub fn model(mut self, model: impl Into<String>, price: Price) -> Self {
        self.entries.push((model.into(), price));
        self
    }

    /// The table, or the first entry that is wrong.
    pub fn build(self) -> Result<Prices, PriceError> {
        let mut table = Table::default();
        for (index, (model, price)) in self.entries.into_iter().enumerate() {
            if model.trim().is_empty() {
                return Err(PriceError::EmptyModel { entry: index });
            }
            let rates = price.rates(&model)?;
            let taken = if model == "*" {
                table.default.replace(rates).is_some()
            } else if let Some(prefix) = model.strip_suffix('*') {
                let seen = table.prefixes.iter().any(|(p, _)| **p == *prefix);
                table.prefixes.push((prefix.into(), rates));
                seen
            } else {
                table.exact.insert(model.clone().into(), rates).is_some()
            };
            if taken {
                return Err(PriceError::Duplicate { model });
            }
        }
        table
            .prefixes
            .sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Ok(Prices {
            table: Arc::new(table),
        })
    }
}

/// Why a price table was refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum PriceError {
    /// A price is negative, not a number, or absurdly high.
    BadPrice {
        /// The entry's model.
        model: String,
        /// Which price: `input`, `cached_input`, `cache_write`, `output` or
        /// `reasoning`.
        field: &'static str,
        /// The price given.
        value: f64,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// An entry has no model name.
    EmptyModel {
        /// The entry's position (from 0).
        entry: usize,
    },
    /// A model (or prefix, or the default) is priced twice.
    Duplicate {
        /// The model.
        model: String,
    },
    /// The JSON is not a price table: not an array of entries, an unknown
    /// or missing field, a price that is not a number.
    Json {
        /// Where, as `[2].input`.
        path: String,
        /// What serde_json said.
        error: serde_json::Error,
    },
}

impl fmt::Display for PriceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PriceError::BadPrice {
                model,
                field,
                value,
                problem,
            } => write!(
                f,
                "price table entry `{model}`: its `{field}` price ({value}) {problem}; \
                 a price is dollars per million tokens, zero or more"
            ),
            PriceError::EmptyModel { entry } => {
                write!(f, "price table entry {entry} has an empty model name")
            }
            PriceError::Duplicate { model } => {
                write!(f, "price table entry `{model}` is listed twice")
            }
            PriceError::Json { path, error } => {
                write!(f, "price table at `{path}`: {error}")
            }
        }
    }
}

impl std::error::Error for PriceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PriceError::Json { error, .. } => Some(error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_displays_in_dollars_rounded_up() {
        assert_eq!(Cost::from_cents(40).to_string(), "$0.40");
        assert_eq!(Cost::from_micros(421_000).to_string(), "$0.421");
        assert_eq!(Cost::from_nanos(1).to_string(), "$0.000001");
        assert_eq!(Cost::from_nanos(12_345).to_string(), "$0.000013");
        assert_eq!(Cost::from_nanos(999_999_999).to_string(), "$1.00");
        assert_eq!(
            Cost::from_nanos(1_234_567_000_000_000).to_string(),
            "$1,234,567.00"
        );
        assert_eq!(Cost::ZERO.to_string(), "$0.00");
    }

    #[test]
    fn reasoning_is_output_and_cached_is_input_unless_priced() {
        let usage = Usage::new(1_000_000, 1_000_000)
            .cached(500_000)
            .reasoning(250_000);
        let plain = Price::per_million_tokens(1.0, 4.0).rates("m").unwrap();
        assert_eq!(plain.cost(&usage), Cost::from_cents(500));
        let split = Price::per_million_tokens(1.0, 4.0)
            .cached_input(0.1)
            .reasoning(8.0)
            .rates("m")
            .unwrap();
        // 0.5 + 0.05 + 3 + 2 dollars.
        assert_eq!(split.cost(&usage), Cost::from_cents(555));
        // A report of more cached (or reasoning) tokens than there are
        // counts them all so, never a negative remainder.
        let odd = Usage::new(10, 10).cached(99).reasoning(99);
        assert_eq!(split.cost(&odd), Cost::from_nanos(1_000 + 80_000));
    }

    #[test]
    fn cache_writes_are_input_unless_priced() {
        // Anthropic's shape: 1,000,000 prompt tokens, of which 500,000 read
        // from the cache and 250,000 written to it.
        let usage = Usage::new(1_000_000, 0)
            .cached(500_000)
            .cache_creation(250_000);
        let plain = Price::per_million_tokens(3.0, 15.0).rates("m").unwrap();
        assert_eq!(plain.cost(&usage), Cost::from_cents(300));
        let priced = Price::per_million_tokens(3.0, 15.0)
            .cached_input(0.3)
            .cache_write(3.75)
            .rates("m")
            .unwrap();
        // 0.75 uncached + 0.15 read + 0.9375 written.
        assert_eq!(priced.cost(&usage), Cost::from_micros(1_837_500));
        // More written than the prompt has left after the reads: the rest.
        let odd = Usage::new(10, 0).cached(4).cache_creation(99);
        assert_eq!(priced.cost(&odd), Cost::from_nanos(4 * 300 + 6 * 3_750));
        // From JSON, checked as the other prices are.
        let json = r#"[{"model": "claude", "input": 3, "output": 15, "cached_input": 0.3, "cache_write": 3.75}]"#;
        let table = Prices::from_json(json).unwrap();
        assert_eq!(
            table.cost("claude", &usage),
            Some(Cost::from_micros(1_837_500))
        );
        let bad = r#"[{"model": "claude", "input": 3, "output": 15, "cache_write": -1}]"#;
        let err = Prices::from_json(bad).unwrap_err().to_string();
        assert!(
            err.contains("`cache_write`") && err.contains("negative"),
            "{err}"
        );
    }
}
