//! [`ValidateLayer`]: what it checks, up to what size.

use toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES;
use tower_layer::Layer;

use super::service::Validate;

/// Wraps a tool in [`Validate`], which checks each call's arguments
/// against the input schema of the tool the call was dispatched to
/// ([`ToolRequest::info`](toolstack::ToolRequest::info)).
///
/// Put it inside the toolbox — per tool with
/// [`Toolbox::layered`](toolstack::Toolbox::layered), or on every tool with
/// [`Toolbox::layer`](toolstack::Toolbox::layer) — where the request already
/// carries the description; over a whole toolbox, a request has not been
/// dispatched yet and carries none.
///
/// The schema is compiled on the first call and kept, shared by the clones
/// of the wrapped service and keyed by the tool's description. If a tool's schema does not compile, the layer
/// logs a warning (through `tracing`) and that tool's arguments are not
/// validated: a schema may come from a remote server, and a bad one must
/// not bring the process down. The tool still checks its own arguments.
/// Use [`Validate::with_schema`] to treat a bad schema as an error.
///
/// A request that carries no description (a tool called directly, not
/// through a [`Toolbox`](toolstack::Toolbox) or a
/// [`BoxTool`](toolstack::BoxTool)) is refused, as there is nothing to
/// check it against.
///
/// Arguments longer than [`max_argument_bytes`](Self::max_argument_bytes)
/// are refused before they are parsed.
#[derive(Clone, Copy, Debug)]
pub struct ValidateLayer {
    max_argument_bytes: usize,
}

impl ValidateLayer {
    /// A layer that validates arguments against the called tool's input
    /// schema, refusing arguments over [`DEFAULT_MAX_ARGUMENT_BYTES`].
    pub fn new() -> Self {
        ValidateLayer {
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
        }
    }

    /// Refuses arguments longer than `bytes` with an invalid-arguments
    /// error before parsing them (default [`DEFAULT_MAX_ARGUMENT_BYTES`],
    /// the limit of typed tools; set the same limit as the tools behind
    /// it, or a lower one).
    pub fn max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }
}

impl Default for ValidateLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for ValidateLayer {
    type Service = Validate<S>;

    fn layer(&self, inner: S) -> Validate<S> {
        Validate::per_tool(inner, self.max_argument_bytes)
    }
}
