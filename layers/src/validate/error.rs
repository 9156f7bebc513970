//! What a refusal says: [`ValidationError`], each [`Violation`] (bounded, for a model), [`SchemaError`].

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use toolstack::{ToolError, ToolRequest};

/// At most this many violations are kept and listed in the message.
pub(crate) const MAX_LISTED: usize = 10;
/// A violation's line in the model-facing message is cut after this many
/// bytes: jsonschema quotes the offending value, which may be large.
pub(crate) const MAX_LINE: usize = 240;
/// A violation's [message](Violation::message) is cut after this many
/// bytes.
pub(crate) const MAX_MESSAGE: usize = 4096;

/// The arguments of a call did not match the tool's input schema: the
/// source of the [`ToolError`] that [`Validate`](super::Validate) answers with.
///
/// Reach it with [`std::error::Error::source`] and `downcast_ref`.
#[derive(Clone, Debug)]
pub struct ValidationError {
    violations: Vec<Violation>,
    unlisted: usize,
}

impl ValidationError {
    /// The first violations found (at most ten), in the order jsonschema
    /// reported them.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// How many more violations were found past those in
    /// [`violations`](Self::violations).
    pub fn unlisted(&self) -> usize {
        self.unlisted
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lines = self.violations.iter();
        if let Some(first) = lines.next() {
            write!(f, "{first}")?;
        }
        for violation in lines {
            write!(f, "; {violation}")?;
        }
        if self.unlisted > 0 {
            write!(f, "; … and {} more", self.unlisted)?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationError {}

/// One place where the arguments break the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pointer: String,
    schema_path: String,
    keyword: String,
    message: String,
}

impl Violation {
    /// The JSON pointer of the offending value within the arguments
    /// (`/items/2/name`); empty for the arguments object itself.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The JSON pointer of the schema keyword that failed
    /// (`/properties/days/type`).
    pub fn schema_path(&self) -> &str {
        &self.schema_path
    }

    /// The schema keyword that failed (`type`, `required`, `enum`, …).
    pub fn keyword(&self) -> &str {
        &self.keyword
    }

    /// What is wrong and what was expected, as jsonschema says it
    /// (`"x" is not of type "integer"`), cut after 4 KiB (with `…`).
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Shows the pointer as `(root)` for the arguments object itself.
impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pointer = if self.pointer.is_empty() {
            "(root)"
        } else {
            &self.pointer
        };
        write!(f, "{pointer}: {}", self.message)
    }
}

/// A JSON Schema that cannot be compiled into a validator.
#[derive(Clone, Debug)]
pub struct SchemaError {
    message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid input schema: {}", self.message)
    }
}

impl std::error::Error for SchemaError {}

pub(crate) fn compile(schema: &Value) -> Result<Arc<jsonschema::Validator>, SchemaError> {
    jsonschema::validator_for(schema)
        .map(Arc::new)
        .map_err(|err| {
            let at = err.instance_path();
            let message = if at.is_empty() {
                err.to_string()
            } else {
                format!("{at}: {err}")
            };
            SchemaError { message }
        })
}

pub(crate) fn check(
    validator: &jsonschema::Validator,
    request: &ToolRequest,
) -> Result<(), ToolError> {
    // Kept with the request: a layer below that wants the value (a cache's
    // key, a retry's next attempt through this layer) does not parse again.
    let instance = toolstack::arguments::parsed(request)?;
    if validator.is_valid(instance) {
        return Ok(());
    }
    let mut errors = validator.iter_errors(instance);
    let violations: Vec<Violation> = errors
        .by_ref()
        .take(MAX_LISTED)
        .map(|err| Violation {
            pointer: err.instance_path().as_str().to_owned(),
            schema_path: err.schema_path().as_str().to_owned(),
            keyword: err.kind().keyword().to_owned(),
            message: bounded(&err, MAX_MESSAGE),
        })
        .collect();
    let unlisted = errors.count();
    Err(
        ToolError::invalid_arguments(model_message(&violations, unlisted)).with_source(
            ValidationError {
                violations,
                unlisted,
            },
        ),
    )
}

/// `value` displayed, cut after `limit` bytes (with `…`) without
/// formatting the rest.
pub(crate) fn bounded(value: &impl fmt::Display, limit: usize) -> String {
    use std::fmt::Write;

    struct Bounded {
        out: String,
        limit: usize,
    }
    impl Write for Bounded {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let room = self.limit - self.out.len();
            if s.len() <= room {
                self.out.push_str(s);
                return Ok(());
            }
            self.out.push_str(&s[..s.floor_char_boundary(room)]);
            // Stops the formatting: the rest would be thrown away.
            Err(fmt::Error)
        }
    }
    let mut writer = Bounded {
        out: String::new(),
        limit,
    };
    if write!(writer, "{value}").is_err() {
        writer.out.push('…');
    }
    writer.out
}

/// One line per violation, after a header; a single violation fits on the
/// header line.
pub(crate) fn model_message(violations: &[Violation], unlisted: usize) -> String {
    use std::fmt::Write;

    let mut out = String::from("invalid arguments:");
    let one = violations.len() == 1 && unlisted == 0;
    for violation in violations {
        out.push(if one { ' ' } else { '\n' });
        let start = out.len();
        // Writing to a `String` cannot fail.
        let _ = write!(out, "{violation}");
        if out.len() - start > MAX_LINE {
            out.truncate(out.floor_char_boundary(start + MAX_LINE));
            out.push('…');
        }
    }
    if unlisted > 0 {
        let _ = write!(out, "\n… and {unlisted} more");
    }
    out
}
