//! Conversions between toolstack's vocabulary and rmcp's model types.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool};
use serde_json::Value;

use crate::{Json, Media, Resource, ToolError, ToolInfo, ToolItem, ToolOutput, ToolResult};

/// A [`ToolInfo`] as an MCP tool definition (name, description, input and
/// output schema, annotations).
///
/// `ToolInfo` serializes in the MCP shape already. An input schema that is
/// not a JSON object (MCP requires one) is replaced by
/// `{"type": "object"}`; such an output schema is left out, since no
/// promise about the result can be made with it.
pub fn tool_to_mcp(info: &ToolInfo) -> Tool {
    let mut value = serde_json::to_value(info).expect("a ToolInfo always serializes");
    if let Some(schema) = value.get_mut("inputSchema") {
        if !schema.is_object() {
            *schema = serde_json::json!({ "type": "object" });
        }
    }
    if let Some(map) = value.as_object_mut() {
        if map.get("outputSchema").is_some_and(|s| !s.is_object()) {
            map.remove("outputSchema");
        }
    }
    serde_json::from_value(value).unwrap_or_else(|err| {
        // Only reachable if rmcp's model stops accepting the MCP shape.
        tracing::warn!(tool = info.name(), %err, "tool definition not accepted by rmcp");
        let schema = serde_json::Map::from_iter([("type".to_owned(), Value::from("object"))]);
        Tool::new_with_raw(info.name().to_owned(), None, schema)
    })
}

/// A remote MCP tool definition as a [`ToolInfo`].
pub fn tool_from_mcp(tool: &Tool) -> ToolInfo {
    let mut info = ToolInfo::new(tool.name.as_ref())
        .with_input_schema(Value::Object((*tool.input_schema).clone()));
    if let Some(description) = &tool.description {
        info = info.with_description(description.as_ref());
    }
    if let Some(schema) = &tool.output_schema {
        info = info.with_output_schema(Value::Object((**schema).clone()));
    }
    if let Some(annotations) = &tool.annotations {
        if let Ok(value) = serde_json::to_value(annotations) {
            if let Ok(ours) = serde_json::from_value(value) {
                info = info.with_annotations(ours);
            }
        }
    }
    info
}

/// One output item as an MCP content block; progress has none.
///
/// A JSON item becomes its text copy (the structured value travels in
/// `structuredContent`, see [`call_result`]).
pub fn content_block(output: &ToolOutput) -> Option<ContentBlock> {
    Some(match output {
        ToolOutput::Text { text } => ContentBlock::text(text.as_str()),
        ToolOutput::Json { value } => ContentBlock::text(value.as_str()),
        ToolOutput::Image(media) => {
            let Media { data, mime_type } = &**media;
            ContentBlock::image(data.as_str(), mime_type.as_str())
        }
        ToolOutput::Audio(media) => {
            let Media { data, mime_type } = &**media;
            ContentBlock::audio(data.as_str(), mime_type.as_str())
        }
        ToolOutput::Resource(resource) => ContentBlock::resource(resource_contents(resource)),
        // In `structuredContent` only (see `call_result`).
        ToolOutput::Progress(_) | ToolOutput::Structured { .. } => return None,
    })
}

fn resource_contents(resource: &Resource) -> ResourceContents {
    match (&resource.text, &resource.blob) {
        (_, Some(blob)) => ResourceContents::BlobResourceContents {
            uri: resource.uri.clone(),
            mime_type: resource.mime_type.clone(),
            blob: blob.clone(),
            meta: None,
        },
        (text, None) => ResourceContents::TextResourceContents {
            uri: resource.uri.clone(),
            mime_type: resource.mime_type.clone(),
            text: text.clone().unwrap_or_default(),
            meta: None,
        },
    }
}

/// A collected [`ToolResult`] as an MCP `CallToolResult`: content blocks in
/// order, the structured value, and `isError` with the model-facing error text when the call failed.
pub fn call_result(result: ToolResult) -> CallToolResult {
    let content = result.content.iter().filter_map(content_block).collect();
    let mut out = if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    // rmcp drops a non-object value for peers whose protocol requires an
    // object (before 2026-07-28) and keeps it for those that allow any.
    // The one place a JSON item's text becomes a tree.
    out.structured_content = result.structured_content();
    out
}

/// An MCP `CallToolResult` as the items of a local tool's stream.
///
/// Content blocks become items in order; `structuredContent` becomes a JSON
/// item when the content is only its text copy (or empty), and otherwise a
/// [`Structured`](ToolOutput::Structured) item — for programs, not the
/// model, which reads the content blocks: each result once; `isError` ends
/// the stream with a [`ToolError`] read back from the model-facing JSON
/// when the server is toolstack, or `failed` with the text otherwise.
pub fn result_items(result: CallToolResult) -> Vec<ToolItem> {
    let mut items = Vec::with_capacity(result.content.len() + 1);
    let is_error = result.is_error == Some(true);
    let mut structured = result.structured_content;
    for block in result.content {
        let output = match block {
            ContentBlock::Text(text) => match &structured {
                Some(value)
                    if serde_json::from_str::<Value>(&text.text).ok().as_ref() == Some(value) =>
                {
                    // The text parsed, so it is JSON: kept as sent.
                    structured = None;
                    ToolOutput::from(Json::from_json_text(text.text))
                }
                _ => ToolOutput::text(text.text),
            },
            ContentBlock::Image(image) => ToolOutput::image(image.data, image.mime_type),
            ContentBlock::Audio(audio) => ToolOutput::audio(audio.data, audio.mime_type),
            ContentBlock::Resource(embedded) => ToolOutput::resource(match embedded.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => Resource {
                    uri,
                    mime_type,
                    text: Some(text),
                    blob: None,
                },
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => Resource {
                    uri,
                    mime_type,
                    text: None,
                    blob: Some(blob),
                },
                #[allow(unreachable_patterns)]
                _ => continue,
            }),
            ContentBlock::ResourceLink(link) => ToolOutput::resource(Resource {
                uri: link.uri.clone(),
                mime_type: link.mime_type.clone(),
                text: None,
                blob: None,
            }),
            #[allow(unreachable_patterns)]
            _ => continue,
        };
        items.push(Ok(output));
    }
    if let Some(value) = structured {
        // The content blocks say it already, for the model (a file's text
        // and `{"content": text}`, an image and its base64 in JSON).
        let said = items.iter().any(|item| item.is_ok());
        items.push(Ok(match said {
            true => ToolOutput::structured(value),
            false => ToolOutput::json(value),
        }));
    }
    if is_error {
        let err = error_from_items(&mut items);
        items.push(Err(err));
    }
    items
}

/// The error of an `isError` result: a toolstack server sends the
/// model-facing JSON as the last text block (after any partial output);
/// any other server's text blocks are the message.
fn error_from_items(items: &mut Vec<ToolItem>) -> ToolError {
    if let Some(Ok(ToolOutput::Text { text })) = items.last() {
        if let Some(err) = serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|value| ToolError::from_model_json(&value))
        {
            items.pop();
            return err;
        }
    }
    let mut message = String::new();
    items.retain(|item| match item {
        Ok(ToolOutput::Text { text }) => {
            if !message.is_empty() {
                message.push('\n');
            }
            message.push_str(text);
            false
        }
        _ => true,
    });
    if message.is_empty() {
        message.push_str("the remote tool reported an error without a message");
    }
    ToolError::failed(message)
}
