//! Deferred tools, and the search that finds them.
//!
//! A toolbox merged from a few MCP servers easily holds hundreds of tools,
//! and their definitions cost tens of thousands of tokens on every model
//! call. [`Toolbox::deferred`] marks tools to keep out of the model's
//! view; a [`ToolSearch`] ranks them for a query, and the agent shows the
//! model a `search_tools` tool that loads what it finds for the rest of
//! the run (see the agent's docs).
//!
//! The ranking is BM25 (the `bm25` crate's scorer) over each tool's name,
//! description and parameters (names and descriptions), with our own
//! small tokenizer: words
//! split at punctuation, `snake_case` and `camelCase`, English stop words
//! dropped, each word stemmed (Snowball's English stemmer), and a query's
//! words widened by a table of the words tool descriptions and people use
//! for the same thing (`delete` finds `remove`, `bug` finds `issue`,
//! `rain` finds `forecast`).

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, OnceLock};

use bm25::{
    Embedder, EmbedderBuilder, Embedding, Scorer, TokenEmbedder, TokenEmbedding, Tokenizer,
};
use http::Extensions;
use rust_stemmers::{Algorithm, Stemmer};

use crate::ToolInfo;

use super::Toolbox;

/// The longest query a search takes, in characters: a model writes it, so
/// it is bounded.
pub const MAX_QUERY_CHARS: usize = 1_000;

/// The most distinct words of a query that are scored.
const MAX_QUERY_WORDS: usize = 32;

/// How much more a word of the tool's name counts than one of its
/// description (the name is repeated in the indexed text).
const NAME_WEIGHT: usize = 2;

impl Toolbox {
    /// Marks every tool now in this toolbox as *deferred*: listed and
    /// callable as before (by [`infos`](Toolbox::infos), over HTTP and
    /// MCP), but kept out of a model's view by an agent until a search
    /// finds it.
    ///
    /// The mark goes with each tool through [`merge`](Toolbox::merge),
    /// [`nest`](Toolbox::nest), renames and layers, so a large remote
    /// toolbox is deferred as it is merged:
    ///
    /// ```
    /// use toolstack::{tool, ToolError, Toolbox};
    ///
    /// # #[derive(serde::Deserialize, schemars::JsonSchema)] struct Q { q: String }
    /// let always = Toolbox::new().tool(tool::from_fn("search_docs", |_: Q| async {
    ///     Ok::<_, ToolError>("…")
    /// }));
    /// let many = Toolbox::new().tool(tool::from_fn("create_issue", |_: Q| async {
    ///     Ok::<_, ToolError>("…")
    /// }));
    /// let toolbox = Toolbox::new().merge(always).nest_with("github", '_', many.deferred());
    /// assert!(!toolbox.is_deferred("search_docs"));
    /// assert!(toolbox.is_deferred("github_create_issue"));
    /// ```
    pub fn deferred(mut self) -> Self {
        if self.inner.entries.iter().all(|e| e.deferred) {
            return self;
        }
        for entry in &mut std::sync::Arc::make_mut(&mut self.inner).entries {
            entry.deferred = true;
        }
        self
    }

    /// Whether the tool of that name is deferred (`false` for a name not
    /// in the toolbox).
    pub fn is_deferred(&self, name: &str) -> bool {
        self.entry(name).is_some_and(|e| e.deferred)
    }

    /// Whether any tool in the toolbox is deferred.
    pub fn has_deferred(&self) -> bool {
        self.inner.entries.iter().any(|e| e.deferred)
    }
}

/// A search over a toolbox's deferred tools, ranked by BM25 over their
/// names, descriptions and parameters.
///
/// Built once (it indexes every deferred tool, whoever may see it); each
/// search returns only the tools the caller may see, by the toolbox's
/// resolvers, so a caller never finds a tool it could not call.
///
/// ```
/// use toolstack::toolbox::ToolSearch;
/// use toolstack::{tool, ToolError, Toolbox};
///
/// # #[derive(serde::Deserialize, schemars::JsonSchema)] struct Args { id: String }
/// fn tool_named(name: &'static str, description: &'static str) -> Toolbox {
///     Toolbox::new().tool(
///         tool::from_fn(name, |_: Args| async { Ok::<_, ToolError>("") }).with_description(description),
///     )
/// }
/// let toolbox = Toolbox::new()
///     .merge(tool_named("jira_create_issue", "Create a new issue in a Jira project."))
///     .merge(tool_named("slack_post_message", "Post a message to a Slack channel."))
///     .deferred();
/// let search = ToolSearch::new(&toolbox);
/// let found = search.search("file a bug in jira", &http::Extensions::new(), 1);
/// assert_eq!(found[0].name(), "jira_create_issue");
/// ```
#[derive(Clone)]
pub struct ToolSearch {
    toolbox: Toolbox,
    index: Arc<(Embedder<u32, Words>, Scorer<usize, u32>)>,
    /// The entries indexed, by position in the toolbox.
    indexed: usize,
}

impl ToolSearch {
    /// A search over `toolbox`'s deferred tools.
    pub fn new(toolbox: &Toolbox) -> Self {
        Self::over(toolbox, |deferred| deferred)
    }

    /// A search over every tool of `toolbox`, deferred or not.
    pub fn all(toolbox: &Toolbox) -> Self {
        Self::over(toolbox, |_| true)
    }

    fn over(toolbox: &Toolbox, take: impl Fn(bool) -> bool) -> Self {
        let documents: Vec<(usize, String)> = toolbox
            .inner
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| take(e.deferred))
            .map(|(at, e)| (at, document(e.tool.info())))
            .collect();
        let corpus: Vec<&str> = documents.iter().map(|(_, text)| text.as_str()).collect();
        let embedder: Embedder<u32, Words> =
            EmbedderBuilder::with_tokenizer_and_fit_to_corpus(Words::new(), &corpus).build();
        let mut scorer = Scorer::new();
        for (at, text) in &documents {
            scorer.upsert(at, embedder.embed(text));
        }
        ToolSearch {
            toolbox: toolbox.clone(),
            index: Arc::new((embedder, scorer)),
            indexed: documents.len(),
        }
    }

    /// The number of tools indexed.
    pub fn len(&self) -> usize {
        self.indexed
    }

    /// Whether no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.indexed == 0
    }

    /// The (at most `limit`) tools that best match `query` among those a
    /// caller with these `extensions` may see, best first; none when no
    /// word of the query (or a synonym of one) is in any tool's text. A query longer than [`MAX_QUERY_CHARS`] is cut there, and
    /// at most its first 32 distinct words are scored.
    pub fn search<'a>(
        &'a self,
        query: &str,
        extensions: &Extensions,
        limit: usize,
    ) -> Vec<&'a ToolInfo> {
        let query = match query.char_indices().nth(MAX_QUERY_CHARS) {
            Some((cut, _)) => &query[..cut],
            None => query,
        };
        let embedding = Words::new().query(query);
        if embedding.is_empty() || limit == 0 {
            return Vec::new();
        }
        let entries = &self.toolbox.inner.entries;
        let mut matches = self.index.1.matches(&embedding);
        // Equal scores in the toolbox's order: the same answer every time.
        matches.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        matches
            .into_iter()
            .filter_map(|m| entries.get(m.id))
            .filter(|entry| self.toolbox.is_visible(entry, extensions))
            .take(limit)
            .map(|entry| entry.tool.info())
            .collect()
    }
}

impl fmt::Debug for ToolSearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSearch")
            .field("tools", &self.indexed)
            .finish()
    }
}

/// What a tool is indexed by: its name (weighted), description, and its
/// parameters' names and descriptions.
fn document(info: &ToolInfo) -> String {
    let mut text = String::new();
    for _ in 0..NAME_WEIGHT {
        text.push_str(info.name());
        text.push(' ');
    }
    if let Some(description) = info.description() {
        text.push_str(description);
        text.push(' ');
    }
    if let Some(properties) = info
        .input_schema()
        .get("properties")
        .and_then(|p| p.as_object())
    {
        for (name, property) in properties {
            text.push_str(name);
            text.push(' ');
            if let Some(description) = property.get("description").and_then(|d| d.as_str()) {
                text.push_str(description);
                text.push(' ');
            }
        }
    }
    text
}

/// Our tokenizer: words split at punctuation, `snake_case` and
/// `camelCase`, lowercased, English stop words dropped, stemmed.
#[derive(Clone, Copy, Default)]
struct Words;

impl Words {
    fn new() -> Self {
        Words
    }

    fn each(self, text: &str, mut f: impl FnMut(String)) {
        let stemmer = Stemmer::create(Algorithm::English);
        for word in split(text) {
            if word.len() < 2 || STOP_WORDS.contains(&word.as_str()) {
                continue;
            }
            f(stemmer.stem(&word).into_owned());
        }
    }

    /// A query's distinct words, each widened by its synonyms, as the
    /// scorer takes them (only which words: a query's own counts do not
    /// weigh).
    fn query(self, text: &str) -> Embedding<u32> {
        let mut seen = HashSet::new();
        let mut words = Vec::new();
        self.each(text, |word| {
            if seen.len() < MAX_QUERY_WORDS && seen.insert(word.clone()) {
                words.push(word);
            }
        });
        for word in words.clone() {
            for synonym in synonyms(&word) {
                if seen.insert(synonym.to_owned()) {
                    words.push(synonym.to_owned());
                }
            }
        }
        Embedding(
            words
                .iter()
                .map(|word| TokenEmbedding {
                    index: u32::embed(word),
                    value: 1.0,
                })
                .collect(),
        )
    }
}

impl Tokenizer for Words {
    fn tokenize(&self, text: &str) -> Vec<String> {
        let mut words = Vec::new();
        self.each(text, |word| words.push(word));
        words
    }
}

/// `text`'s words, lowercased: split at anything but letters and digits,
/// and where a lowercase letter is followed by an uppercase one.
fn split(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .flat_map(|piece| {
            let mut words = Vec::new();
            let mut start = 0;
            let mut previous_lower = false;
            for (at, c) in piece.char_indices() {
                if c.is_uppercase() && previous_lower {
                    words.push(&piece[start..at]);
                    start = at;
                }
                previous_lower = c.is_lowercase() || c.is_ascii_digit();
            }
            words.push(&piece[start..]);
            words
        })
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
}

/// Words too common to tell tools apart.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been",
    "before", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has",
    "have", "he", "her", "here", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "just", "me", "my", "need", "no", "not", "now", "of", "on", "or", "our", "out", "please",
    "she", "should", "so", "some", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "to", "up", "us", "use", "want", "was", "we", "were", "what",
    "when", "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your",
];

/// Groups of words that tool descriptions and the people asking for tools
/// use for the same thing (or for things found together: `rain` and
/// `forecast`). A query's word adds the others of its groups. Written from
/// half of the benchmark's queries; the other half measures how far it
/// carries (docs/benchmarks.md).
const SYNONYMS: &[&[&str]] = &[
    &["create", "make", "new", "add", "file"],
    &[
        "delete", "remove", "erase", "destroy", "drop", "trash", "wipe", "clear",
    ],
    &["list", "show", "enumerate"],
    &[
        "get", "fetch", "retrieve", "read", "view", "lookup", "open", "contents",
    ],
    &["search", "find", "query", "lookup", "look"],
    &["update", "edit", "modify", "change", "set"],
    &["send", "post", "notify", "dm"],
    &[
        "message",
        "msg",
        "chat",
        "said",
        "say",
        "mention",
        "conversation",
        "discuss",
    ],
    &["bug", "issue", "ticket", "defect"],
    &["document", "doc", "docs"],
    &["folder", "directory", "dir", "mkdir"],
    &["meeting", "event", "appointment"],
    &["user", "member", "person", "people"],
    &["image", "picture", "photo", "screenshot"],
    &["run", "execute", "exec", "invoke", "trigger"],
    &["stop", "halt", "kill", "terminate", "cancel"],
    &["deploy", "release", "rollout", "ship"],
    &["schedule", "book", "reserve"],
    &["upload", "store"],
    &["charge", "payment", "pay", "billed", "money"],
    &["refund", "back", "return"],
    &["directions", "route", "navigate", "way", "travel"],
    &[
        "incident", "outage", "alert", "page", "paging", "firing", "oncall",
    ],
    &["pr", "pull"],
    &["repo", "repository"],
    &["comment", "reply", "respond", "note"],
    &["close", "resolve"],
    &["spreadsheet", "sheet", "excel", "tracker"],
    &["row", "line", "entry", "record"],
    &["append", "bottom", "end"],
    &["container", "docker"],
    &["pod", "kubernetes", "k8s", "cluster"],
    &["server", "instance", "vm", "machine"],
    &["convert", "conversion", "exchange"],
    &[
        "calculate",
        "compute",
        "math",
        "evaluate",
        "expression",
        "percent",
        "arithmetic",
    ],
    &[
        "weather",
        "forecast",
        "temperature",
        "rain",
        "snow",
        "sunny",
        "hot",
        "cold",
        "warm",
        "wind",
        "humid",
        "jacket",
        "umbrella",
    ],
    &[
        "warning",
        "alert",
        "advisory",
        "tornado",
        "storm",
        "hurricane",
        "flood",
    ],
    &[
        "unit",
        "units",
        "fahrenheit",
        "celsius",
        "feet",
        "meters",
        "miles",
        "kilometers",
        "inches",
        "pounds",
        "kilograms",
        "kg",
    ],
    &[
        "currency", "euro", "euros", "dollar", "dollars", "usd", "eur", "jpy", "gbp", "yen",
        "pound",
    ],
    &["elevation", "altitude", "height", "high", "sea"],
    &["duration", "days", "weeks", "months", "later", "ago"],
    &["time", "timezone", "clock", "hour"],
    &["share", "access", "permission", "grant", "invite"],
    &["replace", "substitute", "swap"],
    &["database", "db", "sql"],
    &["call", "ring", "phone", "dial", "voice"],
    &["sms", "text"],
    &["log", "logs"],
    &["worklog", "hours", "timesheet", "spent"],
    &["macro", "macros", "canned", "template", "snippet"],
    &["monitor", "threshold", "watch"],
    &["assign", "give", "owner", "assignee"],
    &["latency", "metric", "metrics", "p99", "cpu", "memory"],
    &[
        "translate",
        "translation",
        "language",
        "german",
        "french",
        "spanish",
        "english",
    ],
    &[
        "geocode",
        "coordinates",
        "lat",
        "latitude",
        "longitude",
        "address",
    ],
    &["news", "headlines"],
    &["video", "youtube", "tutorial"],
    &["discount", "promo", "coupon"],
    &["product", "catalog", "item"],
    &["quote", "price", "pricing"],
    &["ack", "acknowledge"],
    &["mute", "silence", "snooze", "quiet"],
];

/// The synonyms of a (stemmed) word, stemmed.
fn synonyms(word: &str) -> impl Iterator<Item = &'static str> + '_ {
    static STEMMED: OnceLock<Vec<Vec<String>>> = OnceLock::new();
    let groups = STEMMED.get_or_init(|| {
        let stemmer = Stemmer::create(Algorithm::English);
        SYNONYMS
            .iter()
            .map(|group| group.iter().map(|w| stemmer.stem(w).into_owned()).collect())
            .collect()
    });
    groups
        .iter()
        .filter(move |group| group.iter().any(|w| w == word))
        .flat_map(|group| group.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_at_case_and_punctuation_and_are_stemmed() {
        let words = Words::new().tokenize("github_createIssue: Creates issues in the repos");
        assert_eq!(words, ["github", "creat", "issu", "creat", "issu", "repo"]);
    }

    #[test]
    fn a_query_is_widened_by_synonyms_once() {
        let query = Words::new().query("remove remove the file");
        let remove = u32::embed("remov");
        let delete = u32::embed("delet");
        assert_eq!(query.iter().filter(|t| t.index == remove).count(), 1);
        assert!(query.iter().any(|t| t.index == delete));
    }
}
