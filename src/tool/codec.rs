//! Decoding arguments and encoding output items: the default JSON codec and
//! the hooks that replace it.

use std::any::Any;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{ToolError, ToolOutput};

/// Turns the raw argument text into the function's argument type.
///
/// Implemented by [`JsonDecoder`] and by any
/// `Fn(&str) -> Result<Args, ToolError>` closure.
pub trait Decode<Args> {
    /// Decodes `arguments`; a failure must say what is wrong and where.
    fn decode(&self, arguments: &str) -> Result<Args, ToolError>;
}

impl<F, Args> Decode<Args> for F
where
    F: Fn(&str) -> Result<Args, ToolError>,
{
    fn decode(&self, arguments: &str) -> Result<Args, ToolError> {
        self(arguments)
    }
}

/// Turns one item of the function's output into a [`ToolOutput`].
///
/// Implemented by [`JsonEncoder`] and by any
/// `Fn(T) -> Result<ToolOutput, ToolError>` closure.
pub trait Encode<T> {
    /// Encodes one item.
    fn encode(&self, item: T) -> Result<ToolOutput, ToolError>;
}

impl<F, T> Encode<T> for F
where
    F: Fn(T) -> Result<ToolOutput, ToolError>,
{
    fn encode(&self, item: T) -> Result<ToolOutput, ToolError> {
        self(item)
    }
}

/// The default decoder: the arguments are a JSON object deserialized with
/// serde.
///
/// The [argument rules](crate::arguments) apply: empty means `{}`, and the
/// arguments must be a JSON object. On failure the error names the problem
/// and, for a value of the wrong type, the path of the field
/// (`items[2].name`).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonDecoder;

impl<Args: DeserializeOwned> Decode<Args> for JsonDecoder {
    fn decode(&self, arguments: &str) -> Result<Args, ToolError> {
        // Serde would otherwise read a struct from an array, positionally.
        let text = crate::arguments::prepare(arguments)?;
        // The fast path parses once; only a failure pays for the second,
        // path-tracking parse that names the field.
        serde_json::from_str(text).map_err(|err| describe_error::<Args>(text, err))
    }
}

fn describe_error<Args: DeserializeOwned>(text: &str, err: serde_json::Error) -> ToolError {
    // serde_json reports an enum given a number, `null` or an array as a
    // syntax error ("expected value"), though the text is valid JSON: only
    // text that does not parse at all is "not valid JSON".
    if err.is_eof()
        || crate::arguments::is_too_deep(&err)
        || (err.is_syntax() && crate::arguments::check(text).is_err())
    {
        return crate::arguments::not_json(err);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let message = match serde_path_to_error::deserialize::<_, Args>(&mut de) {
        Err(e) if !is_root(e.path()) => {
            if e.inner().is_syntax() {
                not_a_variant::<Args>(text, e.path())
                    .unwrap_or_else(|| format!("invalid value at `{}`: {}", e.path(), e.inner()))
            } else {
                format!("invalid value at `{}`: {}", e.path(), e.inner())
            }
        }
        _ => err.to_string(),
    };
    ToolError::invalid_arguments(message).with_source(err)
}

/// For an enum field given something that cannot name a variant, what it
/// was given and the variants it takes (`invalid value at `unit`: got `42`,
/// expected one of `celsius`, `fahrenheit``): the value at `path` is swapped
/// for a string no enum has, and serde's "unknown variant" error lists them.
fn not_a_variant<Args: DeserializeOwned>(
    text: &str,
    path: &serde_path_to_error::Path,
) -> Option<String> {
    use serde_path_to_error::Segment;

    let mut root = crate::arguments::parse(text).ok()?;
    let mut at = &mut root;
    for segment in path.iter() {
        at = match segment {
            Segment::Seq { index } => at.get_mut(*index)?,
            Segment::Map { key } => at.get_mut(key.as_str())?,
            _ => return None,
        };
    }
    let found = match &*at {
        serde_json::Value::Array(_) => "an array".to_owned(),
        serde_json::Value::Object(_) => "an object".to_owned(),
        other => format!("`{other}`"),
    };
    *at = serde_json::Value::String(NO_VARIANT.to_owned());
    let err = serde_path_to_error::deserialize::<_, Args>(root).err()?;
    let message = err.inner().to_string();
    let expected = message.strip_prefix(&format!("unknown variant `{NO_VARIANT}`, "))?;
    Some(format!(
        "invalid value at `{path}`: got {found}, {expected}"
    ))
}

/// No enum has a variant of this name.
const NO_VARIANT: &str = "\0";

fn is_root(path: &serde_path_to_error::Path) -> bool {
    path.iter().next().is_none()
}

/// The default encoder.
///
/// A [`ToolOutput`] passes through unchanged, a `String` (or a value that
/// serializes to a JSON string) becomes a text item, and anything else
/// becomes a structured JSON item.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonEncoder;

impl<T: Serialize + 'static> Encode<T> for JsonEncoder {
    fn encode(&self, item: T) -> Result<ToolOutput, ToolError> {
        // Monomorphised type checks: each branch folds to a constant.
        let mut slot = Some(item);
        let any: &mut dyn Any = &mut slot;
        if let Some(output) = any
            .downcast_mut::<Option<ToolOutput>>()
            .and_then(Option::take)
        {
            return Ok(output);
        }
        if let Some(text) = any.downcast_mut::<Option<String>>().and_then(Option::take) {
            return Ok(ToolOutput::Text { text });
        }
        if let Some(value) = any
            .downcast_mut::<Option<crate::Json>>()
            .and_then(Option::take)
        {
            return Ok(ToolOutput::Json { value });
        }
        let Some(item) = slot else {
            return Err(ToolError::failed("output item was already taken"));
        };
        // Serialized once, to the text the model and the wire want; no
        // `serde_json::Value` tree in between.
        match serde_json::to_string(&item) {
            // A value that serializes to a JSON string is text.
            Ok(text) if text.starts_with('"') => serde_json::from_str(&text)
                .map(|text| ToolOutput::Text { text })
                .map_err(encode_error),
            Ok(text) => Ok(ToolOutput::Json {
                value: crate::Json::from_json_text(text),
            }),
            Err(err) => Err(encode_error(err)),
        }
    }
}

fn encode_error(err: serde_json::Error) -> ToolError {
    ToolError::failed(format!("the tool's output could not be encoded: {err}")).with_source(err)
}
