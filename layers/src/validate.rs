//! Checks a call's arguments against the tool's input schema before the
//! tool runs.
//!
//! [`Validate`] compiles the tool's JSON Schema once (with the
//! [`jsonschema`] crate), checks every call's arguments against it, and
//! answers a call that does not match with an
//! [`ErrorKind::InvalidArguments`](toolstack::ErrorKind::InvalidArguments)
//! error *without calling the tool*. The message lists each violation on a
//! line of its own — the JSON pointer of the offending value and what was
//! expected — so a model can correct its call; the error's source is a
//! [`ValidationError`] holding the same [`Violation`]s for code.
//!
//! ```
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt};
//! use toolstack::{tool, ErrorKind, ToolInfo, ToolRequest, Toolbox};
//! use toolstack_layers::validate::{ValidateLayer, ValidationError};
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let info = ToolInfo::new("forecast").with_input_schema(json!({
//!     "type": "object",
//!     "properties": {"days": {"type": "integer"}},
//!     "required": ["days"]
//! }));
//! let forecast = tool::raw(info, |_| futures_util::stream::empty());
//! let tools = Toolbox::new().layered(forecast, ServiceBuilder::new().layer(ValidateLayer::new()));
//!
//! let err = tools.oneshot(ToolRequest::new("forecast", r#"{"days":"x"}"#)).await.unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::InvalidArguments);
//! assert_eq!(err.message(), r#"invalid arguments: /days: "x" is not of type "integer""#);
//!
//! let source = std::error::Error::source(&err).unwrap();
//! let violations = source.downcast_ref::<ValidationError>().unwrap().violations();
//! assert_eq!(violations[0].pointer(), "/days");
//! # }).unwrap();
//! ```
//!
//! Arguments follow the [argument rules](toolstack::arguments): empty
//! arguments are read as `{}`. The value parsed for the schema is kept
//! with the request ([`arguments::parsed`](toolstack::arguments::parsed)):
//! a layer below that wants it (a cache's key, an agent tool's message, an
//! MCP tool's call) does not parse the text again.
//!
//! **Bounds.** Arguments longer than
//! [`max_argument_bytes`](ValidateLayer::max_argument_bytes) (by default
//! [`DEFAULT_MAX_ARGUMENT_BYTES`], 1 MiB, the limit typed tools use) are
//! refused before they are parsed; nesting is bounded by serde_json's
//! recursion limit ([`arguments::MAX_DEPTH`](toolstack::arguments::MAX_DEPTH)).
//! Only the first ten violations are kept and formatted (the message
//! counts the rest), each cut after a few kilobytes: jsonschema quotes the
//! offending value, which may be large. (jsonschema 0.61 finds every
//! violation before its iterator yields the first; finding them is linear
//! in the bounded argument size, formatting them is what the cap saves.)
//!
//! A tool whose described schema does not
//! compile is not validated at all (see [`ValidateLayer`]); use
//! [`Validate::with_schema`] to get the [`SchemaError`] instead.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use serde_json::Value;
use toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES;
use toolstack::{ToolError, ToolInfo, ToolItem, ToolRequest};
use tower_layer::Layer;
use tower_service::Service;

/// At most this many violations are kept and listed in the message.
const MAX_LISTED: usize = 10;
/// A violation's line in the model-facing message is cut after this many
/// bytes: jsonschema quotes the offending value, which may be large.
const MAX_LINE: usize = 240;
/// A violation's [message](Violation::message) is cut after this many
/// bytes.
const MAX_MESSAGE: usize = 4096;

/// Wraps a tool in [`Validate`], which checks each call's arguments
/// against the input schema of the tool the call was dispatched to
/// ([`ToolRequest::info`]).
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
        Validate {
            inner,
            schema: Schema::PerTool(Arc::default()),
            max_argument_bytes: self.max_argument_bytes,
        }
    }
}

/// A tool whose arguments are checked against a JSON Schema before it is
/// called; see the [module docs](self).
///
/// Cloning shares the compiled schemas.
#[derive(Clone)]
pub struct Validate<S> {
    inner: S,
    schema: Schema,
    max_argument_bytes: usize,
}

#[derive(Clone)]
enum Schema {
    /// One schema for every call ([`Validate::with_schema`]).
    Fixed(Arc<jsonschema::Validator>),
    /// The schema of the tool each call was dispatched to.
    PerTool(Arc<Compiled>),
}

/// The compiled schemas of the tools seen so far, keyed by their shared
/// description: the first tool's without a lock (the common case, one
/// `Validate` per tool), any others' behind one.
#[derive(Default)]
struct Compiled {
    first: OnceLock<Entry>,
    others: Mutex<Vec<Entry>>,
}

/// A tool's description and its compiled schema (`None`: it does not
/// compile).
type Entry = (Arc<ToolInfo>, Option<Arc<jsonschema::Validator>>);

/// At most this many tools' schemas are kept past the first; a `Validate`
/// over a toolbox larger than that compiles the rest on every call.
const MAX_CACHED: usize = 1024;

/// Whether two descriptions hold the very same schema (the entry's
/// `Arc<ToolInfo>` keeps it alive, so its address is not reused).
fn same_schema(a: &ToolInfo, b: &ToolInfo) -> bool {
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

fn compile_or_warn(info: &ToolInfo) -> Option<Arc<jsonschema::Validator>> {
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
    /// [`ValidateLayer::max_argument_bytes`].
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
                    deadline: crate::call::deadline(),
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

pin_project! {
    /// The response future of [`Validate`]: the tool made ready and called,
    /// or an invalid-arguments error when the arguments did not match.
    pub struct ResponseFuture<S>
    where
        S: Service<ToolRequest>,
    {
        #[pin]
        kind: Kind<S, S::Future>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, F> {
        // Waiting for the tool's readiness (a permit below), which is
        // reported as such; past the call's deadline the call is held,
        // never made (`call.rs`).
        Readying {
            service: S,
            request: Option<ToolRequest>,
            deadline: Option<crate::call::Deadline>,
        },
        Called { #[pin] future: F },
        Rejected { error: Option<ToolError> },
    }
}

impl<S, St> Future for ResponseFuture<S>
where
    S: Service<ToolRequest, Response = St>,
    S::Error: Into<ToolError>,
{
    type Output = Result<St, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        loop {
            match kind.as_mut().project() {
                KindProj::Readying {
                    service,
                    request,
                    deadline,
                } => {
                    match service.poll_ready(cx) {
                        Poll::Ready(Ok(())) if !crate::call::too_late(*deadline) => {}
                        Poll::Ready(Err(err)) => {
                            kind.set(Kind::Rejected { error: None });
                            return Poll::Ready(Err(err.into()));
                        }
                        Poll::Ready(Ok(())) | Poll::Pending => {
                            crate::call::report(crate::call::Wait::Permit);
                            return Poll::Pending;
                        }
                    }
                    let Some(request) = request.take() else {
                        kind.set(Kind::Rejected { error: None });
                        continue;
                    };
                    let future = crate::call::lend_later(*deadline, || service.call(request));
                    kind.set(Kind::Called { future });
                }
                KindProj::Called { future } => {
                    let result = ready!(future.poll(cx));
                    kind.set(Kind::Rejected { error: None });
                    return Poll::Ready(result.map_err(Into::into));
                }
                KindProj::Rejected { error } => {
                    return Poll::Ready(Err(error.take().unwrap_or_else(|| {
                        ToolError::polled_after_completion("validate::ResponseFuture")
                    })))
                }
            }
        }
    }
}

impl<S: Service<ToolRequest>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// The arguments of a call did not match the tool's input schema: the
/// source of the [`ToolError`] that [`Validate`] answers with.
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

fn compile(schema: &Value) -> Result<Arc<jsonschema::Validator>, SchemaError> {
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

fn check(validator: &jsonschema::Validator, request: &ToolRequest) -> Result<(), ToolError> {
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
fn bounded(value: &impl fmt::Display, limit: usize) -> String {
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
fn model_message(violations: &[Violation], unlisted: usize) -> String {
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
