//! [`PriceError`]: why a price table was refused, naming the entry.

use std::fmt;

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
