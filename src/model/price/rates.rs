//! One model's [`Price`], in dollars per million tokens as providers list
//! them, and its checked form, `Rates` (pico-dollars per token), which
//! prices a call's [`Usage`].

use super::cost::Cost;
use super::error::PriceError;
use crate::model::Usage;

/// The price of one model, in dollars per million tokens, before it is
/// checked (by [`PricesBuilder::build`](crate::model::PricesBuilder::build),
/// which names the model in any error).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub(super) input: f64,
    pub(super) cached_input: Option<f64>,
    pub(super) cache_write: Option<f64>,
    pub(super) output: f64,
    pub(super) reasoning: Option<f64>,
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

    pub(super) fn rates(&self, entry: &str) -> Result<Rates, PriceError> {
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
pub(super) struct Rates {
    pub(super) input: u64,
    pub(super) cached_input: u64,
    pub(super) cache_write: u64,
    pub(super) output: u64,
    pub(super) reasoning: u64,
}

impl Rates {
    pub(super) fn cost(&self, usage: &Usage) -> Cost {
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
        Cost::from_nanos(u64::try_from(picos.div_ceil(1_000)).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
