//! What kind of input a request asks for: elicitation, sampling or
//! roots, the client capability each needs, and the shape of its answer.

use rmcp::model::{ClientCapabilities, CreateMessageResult, ElicitResult, ListRootsResult};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What kind of input a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Elicitation,
    Sampling,
    Roots,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Elicitation => "elicitation",
            Kind::Sampling => "sampling",
            Kind::Roots => "roots",
        }
    }

    pub(super) fn declared_by(self, caps: &ClientCapabilities) -> bool {
        match self {
            Kind::Elicitation => caps.elicitation.is_some(),
            Kind::Sampling => caps.sampling.is_some(),
            Kind::Roots => caps.roots.is_some(),
        }
    }

    /// The capability, as the `-32021` error's `requiredCapabilities`.
    pub(super) fn capability(self) -> ClientCapabilities {
        let mut caps = ClientCapabilities::default();
        match self {
            Kind::Elicitation => caps.elicitation = Some(Default::default()),
            Kind::Sampling => caps.sampling = Some(Default::default()),
            Kind::Roots => caps.roots = Some(Default::default()),
        }
        caps
    }

    /// Whether `value` is a well-formed answer to a request of this kind.
    pub(super) fn accepts(self, value: &Value) -> bool {
        match self {
            Kind::Elicitation => ElicitResult::deserialize_from(value),
            Kind::Sampling => CreateMessageResult::deserialize_from(value),
            Kind::Roots => ListRootsResult::deserialize_from(value),
        }
    }
}

trait DeserializeFrom {
    fn deserialize_from(value: &Value) -> bool;
}

impl<T: DeserializeOwned> DeserializeFrom for T {
    fn deserialize_from(value: &Value) -> bool {
        T::deserialize(value).is_ok()
    }
}
