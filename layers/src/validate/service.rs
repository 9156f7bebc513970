//! [`Validate`]: the called tool's schema, compiled once and kept, checked before the call.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use futures_core::Stream;
use serde_json::Value;
use toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES;
use toolstack::{ToolError, ToolInfo, ToolItem, ToolRequest};
use tower_service::Service;

use super::error::{check, compile, SchemaError};
use super::future::{Kind, ResponseFuture};

/// A tool whose arguments are checked against a JSON Schema before it is
/// called; see the [module docs](super).
///
/// Cloning shares the compiled schemas.
#[derive(Clone)]
pub struct Validate<S> {
    inner: S,
    schema: Schema,
    max_argument_bytes: usize,
}

#[derive(Clone)]
pub(crate) enum Schema {
    /// One schema for every call ([`Validate::with_schema`]).
    Fixed(Arc<jsonschema::Validator>),
    /// The schema of the tool each call was dispatched to.
    PerTool(Arc<Compiled>),
}

/// The compiled schemas of the tools seen so far, keyed by their shared
/// description: the first tool's without a lock (the common case, one
/// `Validate` per tool), any others' behind one.
#[derive(Default)]
pub(crate) struct Compiled {
    first: OnceLock<Entry>,
    others: Mutex<Vec<Entry>>,
}

/// A tool's description and its compiled schema (`None`: it does not
/// compile).
pub(crate) type Entry = (Arc<ToolInfo>, Option<Arc<jsonschema::Validator>>);

/// At most this many tools' schemas are kept past the first; a `Validate`
/// over a toolbox larger than that compiles the rest on every call.
pub(crate) const MAX_CACHED: usize = 1024;

/// Whether two descriptions hold the very same schema (the entry's
/// `Arc<ToolInfo>` keeps it alive, so its address is not reused).
pub(crate) fn same_schema(a: &ToolInfo, b: &ToolInfo) -> bool {
    std::ptr::eq(a.input_schema(), b.input_schema())
}

impl Compiled {
    /// Runs `f` with the compiled schema of `info`'s tool (`None`: its
    /// schema does not compile). The first tool's is lent without a lock or
    /// a reference count.
    fn with<R>(
        &self,
        info: &Arc<ToolInfo>,
        f: impl FnOnce(Option<&jsonschema::Validator>) -> R,
    ) -> R {
        let (first, validator) = self
            .first
            .get_or_init(|| (info.clone(), compile_or_warn(info)));
        // Keyed by the schema, not the description: a toolbox hands each
        // thread its own copy of a tool's description, and the copies share
        // one schema.
        if same_schema(first, info) {
            return f(validator.as_deref());
        }
        let validator = {
            let mut others = self.others.lock().unwrap_or_else(|e| e.into_inner());
            match others.iter().find(|(i, _)| same_schema(i, info)) {
                Some((_, validator)) => validator.clone(),
                None => {
                    let validator = compile_or_warn(info);
                    if others.len() < MAX_CACHED {
                        others.push((info.clone(), validator.clone()));
                    }
                    validator
                }
            }
        };
        f(validator.as_deref())
    }
}

pub(crate) fn compile_or_warn(info: &ToolInfo) -> Option<Arc<jsonschema::Validator>> {
    compile(info.input_schema())
        .inspect_err(|err| {
            tracing::warn!(
                tool = info.name(),
                error = %err,
                "the tool's input schema does not compile; its arguments are not validated",
            );
        })
        .ok()
}

impl<S> Validate<S> {
    /// Checks each call against the called tool's own schema (what the
    /// layer makes).
    pub(crate) fn per_tool(inner: S, max_argument_bytes: usize) -> Self {
        Validate {
            inner,
            schema: Schema::PerTool(Arc::default()),
            max_argument_bytes,
        }
    }

    /// Wraps any tool service, validating every call against `schema`
    /// (for a service called directly, or to check against another schema
    /// than the one shown to the model).
    pub fn with_schema(inner: S, schema: &Value) -> Result<Self, SchemaError> {
        Ok(Validate {
            inner,
            schema: Schema::Fixed(compile(schema)?),
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
        })
    }

    /// Refuses arguments longer than `bytes` before parsing them, as
    /// [`ValidateLayer::max_argument_bytes`](super::ValidateLayer::max_argument_bytes).
    pub fn max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn check(&self, request: &ToolRequest) -> Result<(), ToolError> {
        toolstack::arguments::check_size(
            request.arguments(),
            request.name(),
            self.max_argument_bytes,
        )?;
        match &self.schema {
            Schema::Fixed(validator) => check(validator, request),
            Schema::PerTool(compiled) => {
                let Some(info) = request.info_shared() else {
                    return Err(ToolError::failed(format!(
                        "cannot validate the arguments of `{}`: the request carries no tool \
                         description (call the tool through a Toolbox or a BoxTool, or build \
                         the Validate with a schema)",
                        request.name()
                    ))
                    .with_retryable(false));
                };
                compiled.with(info, |validator| match validator {
                    Some(validator) => check(validator, request),
                    None => Ok(()),
                })
            }
        }
    }
}

/// Readiness is the inner tool's business only once the arguments are
/// known to be good: `poll_ready` is always ready, and a call that passes
/// the check asks the inner tool's readiness then. Ready at once (the
/// common case), the tool is called there; not ready, the call's future
/// takes that handle — with its place in any queue below — and drives it
/// (tower's `Oneshot`), while this `Validate` keeps a fresh clone. So a
/// call with bad arguments is refused at once — it waits for no permit or
/// quota below — and a good one waits as usual, paying for a clone only
/// when it has to wait.
impl<S, St> Service<ToolRequest> for Validate<S>
where
    S: Service<ToolRequest, Response = St> + Clone,
    S::Error: Into<ToolError>,
    St: Stream<Item = ToolItem>,
{
    type Response = St;
    type Error = ToolError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        if let Err(err) = self.check(&request) {
            return ResponseFuture {
                kind: Kind::Rejected { error: Some(err) },
            };
        }
        // Asked with a waker that does nothing: a tool not ready now is
        // handed to the future, whose polls register the caller's waker.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let kind = match self.inner.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => Kind::Called {
                future: self.inner.call(request),
            },
            Poll::Ready(Err(err)) => Kind::Rejected {
                error: Some(err.into()),
            },
            Poll::Pending => {
                let fresh = self.inner.clone();
                Kind::Readying {
                    service: std::mem::replace(&mut self.inner, fresh),
                    request: Some(request),
                    deadline: crate::call_context::deadline(),
                }
            }
        };
        ResponseFuture { kind }
    }
}

impl<S: fmt::Debug> fmt::Debug for Validate<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The compiled schema's own `Debug` is a large tree.
        f.debug_struct("Validate")
            .field("inner", &self.inner)
            .field(
                "schema",
                &match self.schema {
                    Schema::Fixed(_) => "fixed",
                    Schema::PerTool(_) => "per tool",
                },
            )
            .field("max_argument_bytes", &self.max_argument_bytes)
            .finish()
    }
}
