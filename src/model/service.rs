//! [`ModelService`]: what the agent asks of a model, named once.

use futures_core::Stream;
use tower_service::Service;

use super::{ChatRequest, ModelDelta};
use crate::ToolError;

/// A model the agent (and everything that drives one) can use: any
/// `Service<ChatRequest>` that answers with a stream of
/// [`ModelDelta`]s, errors convertible into a [`ToolError`], cloneable
/// and sendable. Implemented for every service that is all of that —
/// [`ScriptedModel`](super::ScriptedModel), the OpenAI client, and either
/// of them under any stack of layers; never implemented by hand.
///
/// ```
/// use toolstack::model::{ModelService, ScriptedModel, Turn};
///
/// fn drives<M: ModelService>(_: &M) {}
/// drives(&ScriptedModel::new([Turn::new().text("hi")]));
/// ```
pub trait ModelService:
    Service<
        ChatRequest,
        Response: Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
        Error: Into<ToolError>,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<M> ModelService for M where
    M: Service<
            ChatRequest,
            Response: Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
            Error: Into<ToolError>,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}
