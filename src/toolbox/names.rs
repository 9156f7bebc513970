//! Tool names: the rules a name follows, the repair of near-miss names a
//! model writes, and the suggestions of an unknown tool's error.

use std::collections::HashMap;
use std::sync::Arc;

use http::Extensions;

use crate::{ToolError, ToolInfo, ToolRequest};

use super::error::ToolboxError;
use super::Toolbox;

/// The longest tool name, in characters: MCP's limit (specification
/// 2025-11-25).
///
/// [`Toolbox::rename`] and [`Toolbox::prefix`] refuse to make a longer
/// name. A call of a longer name is answered as an unknown tool without
/// looking for the closest name, and its message quotes only the first
/// [`QUOTED_NAME_CHARS`] characters: a model or a network can send a name
/// of any length, and the closest-name search costs the product of the two
/// names' lengths.
pub const MAX_NAME_CHARS: usize = 128;

/// A name the toolbox quotes in an error message is cut after this many
/// characters (and `…` added).
pub const QUOTED_NAME_CHARS: usize = 64;

/// How [`Toolbox::dispatch`] repairs a name no tool has: by case, or by
/// an alias.
#[derive(Clone, Debug, Default)]
pub(super) struct NameRepair {
    // Lowercased alias → the tool's name.
    aliases: HashMap<String, String>,
}

impl Toolbox {
    /// Repairs the tool names a model gets nearly right, at dispatch: a
    /// name that differs from a visible tool's only in case (`Get_Weather`
    /// for `get_weather`) calls that tool, as does any
    /// [`alias`](Self::alias). A repair is logged (`tool call repaired`).
    /// Names are matched exactly otherwise, and an unknown name stays an
    /// error listing the tools.
    ///
    /// ```
    /// # futures_util::FutureExt::now_or_never(async {
    /// use toolstack::{tool, ToolError, ToolRequest, ToolResult, Toolbox};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Args {}
    ///
    /// let tools = Toolbox::new()
    ///     .tool(tool::from_fn("get_weather", |_: Args| async { Ok::<_, ToolError>("sunny") }))
    ///     .repair_names()
    ///     .alias("weather", "get_weather");
    /// for name in ["Get_Weather", "WEATHER"] {
    ///     let stream = tools.dispatch(ToolRequest::new(name, "{}")).await?;
    ///     assert_eq!(ToolResult::collect(stream).await.into_text(), "sunny");
    /// }
    /// # Ok::<_, ToolError>(())
    /// # }).unwrap().unwrap();
    /// ```
    pub fn repair_names(mut self) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        inner.names.get_or_insert_with(Default::default);
        self
    }

    /// A name models use for tool `name` (`weather` for `get_weather`),
    /// matched without regard to case; turns on
    /// [`repair_names`](Self::repair_names).
    pub fn alias(mut self, alias: &str, name: &str) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        let names = Arc::make_mut(inner.names.get_or_insert_with(Default::default));
        names.aliases.insert(alias.to_lowercase(), name.to_owned());
        self
    }

    /// The visible tool `wanted` nearly names, if name repair is on.
    pub(crate) fn repaired_name(&self, wanted: &str, extensions: &Extensions) -> Option<String> {
        let names = self.inner.names.as_ref()?;
        if is_longer_than(wanted, MAX_NAME_CHARS) {
            return None;
        }
        let lower = wanted.to_lowercase();
        if let Some(name) = names.aliases.get(&lower) {
            return Some(name.clone());
        }
        self.infos_for(extensions)
            .find(|info| info.name().to_lowercase() == lower)
            .map(|info| info.name().to_owned())
    }

    /// The error for a call of a tool that is missing or hidden from this
    /// caller: the name, the closest visible name, and the visible tools.
    ///
    /// The closest name is looked for only among names of at most
    /// [`MAX_NAME_CHARS`], and only for a wanted name that short: a longer
    /// one is refused as such, quoted up to [`QUOTED_NAME_CHARS`]. An empty
    /// name (a model's tool call without one) is an unknown tool too.
    pub fn unknown_tool(&self, request: &ToolRequest) -> ToolError {
        let wanted = request.name();
        let too_long = is_longer_than(wanted, MAX_NAME_CHARS);
        let mut names: Vec<(f64, &str)> = self
            .infos_for(request.extensions())
            .map(|info| {
                let name = info.name();
                // Levenshtein costs the product of the lengths: a name past
                // the limit is never a suggestion, whichever side it is on.
                let score = if too_long || is_longer_than(name, MAX_NAME_CHARS) {
                    0.0
                } else {
                    strsim::normalized_levenshtein(wanted, name)
                };
                (score, name)
            })
            .collect();
        // Closest first; ties keep the order the tools were added in.
        names.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut message = if wanted.is_empty() {
            "the tool call names no tool".to_owned()
        } else if too_long {
            format!(
                "unknown tool `{}`: the name is longer than the {MAX_NAME_CHARS} characters of a tool name",
                quoted(wanted)
            )
        } else {
            format!("unknown tool `{}`", quoted(wanted))
        };
        match names.first() {
            None => message.push_str("; no tools are available"),
            Some(&(score, best)) => {
                if score >= 0.5 {
                    message.push_str(&format!("; did you mean `{best}`?"));
                } else {
                    message.push(';');
                }
                message.push_str(" available tools: ");
                let list: Vec<&str> = names.iter().map(|(_, n)| *n).collect();
                message.push_str(&list.join(", "));
            }
        }
        ToolError::not_found(message)
    }
}

/// Whether `name` has more than `chars` characters, without counting past.
pub(super) fn is_longer_than(name: &str, chars: usize) -> bool {
    name.len() > chars && name.chars().nth(chars).is_some()
}

/// `name` as an error message quotes it: cut after [`QUOTED_NAME_CHARS`].
pub(super) fn quoted(name: &str) -> std::borrow::Cow<'_, str> {
    match name.char_indices().nth(QUOTED_NAME_CHARS) {
        Some((cut, _)) => format!("{}…", &name[..cut]).into(),
        None => name.into(),
    }
}

/// `info` under another name.
pub(super) fn renamed(info: &ToolInfo, name: String) -> ToolInfo {
    info.clone().with_name(name)
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

pub(super) const NAME_CHARS: &str = "ASCII letters, digits, `_`, `-` and `.`";

pub(super) fn check_prefix(prefix: &str, separator: char) -> Result<(), ToolboxError> {
    if !matches!(separator, '.' | '_' | '-') {
        return Err(ToolboxError::invalid_name(
            prefix,
            format!("`{separator}` cannot join a prefix to a tool name: use `.`, `_` or `-`"),
        ));
    }
    if prefix.is_empty() {
        return Err(ToolboxError::invalid_name(
            prefix,
            "a tool name prefix cannot be empty".to_owned(),
        ));
    }
    if !prefix.chars().all(is_name_char) {
        return Err(ToolboxError::invalid_name(
            prefix,
            format!("`{prefix}` is not a tool name prefix: tool names are made of {NAME_CHARS}"),
        ));
    }
    if prefix.starts_with(separator) || prefix.ends_with(separator) {
        return Err(ToolboxError::invalid_name(
            prefix,
            format!(
                "`{prefix}` is not a tool name prefix: it cannot start or end with the `{separator}` that joins it to the names"
            ),
        ));
    }
    Ok(())
}

pub(super) fn check_name(name: &str) -> Result<(), ToolboxError> {
    if name.is_empty() || name.len() > MAX_NAME_CHARS || !name.chars().all(is_name_char) {
        return Err(ToolboxError::invalid_name(
            name,
            format!(
                "`{}` is not a tool name: tool names are 1 to {MAX_NAME_CHARS} {NAME_CHARS}",
                quoted(name)
            ),
        ));
    }
    Ok(())
}
