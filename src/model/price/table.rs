//! [`Prices`]: what each model costs, looked up by name, prefix or
//! default; built from code ([`PricesBuilder`]) or JSON, checked once.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use super::cost::Cost;
use super::error::PriceError;
use super::rates::{Price, Rates};
use crate::model::Usage;

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

#[cfg(test)]
mod tests {
    use super::*;

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
