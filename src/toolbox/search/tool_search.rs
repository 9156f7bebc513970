//! [`ToolSearch`]: the index of a toolbox's (deferred) tools, and the
//! searches over it — by exact names, by words, by words and meaning
//! fused — each answering only with tools the caller may see.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use http::Extensions;

use super::found::{Found, Ranking};
use super::meaning::{fuse, Meaning, DEFAULT_FUSION};
use super::text::{document, meaning_text};
use super::words::WordIndex;
use crate::embed::{EmbedError, Embeddings};
use crate::toolbox::Toolbox;
use crate::ToolInfo;

/// The longest query a search takes, in characters: a model writes it, so
/// it is bounded.
pub const MAX_QUERY_CHARS: usize = 1_000;

/// A search over a toolbox's deferred tools: ranked by words (BM25 over
/// their names, descriptions and parameters) and, when built with
/// [`Embeddings`], by meaning as well.
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
    index: Arc<Index>,
    /// The least cosine similarity of the best tool to a query for a
    /// search by meaning to find anything.
    min_similarity: f32,
    /// The weights of the rankings by words and by meaning in the fusion.
    weights: (f32, f32),
}

struct Index {
    words: WordIndex,
    /// The indexed tools' positions, by name.
    names: HashMap<String, usize>,
    meaning: Option<Meaning>,
    /// The entries indexed, by position in the toolbox.
    indexed: usize,
    /// Why the tools could not be embedded, when they could not.
    unembedded: Option<EmbedError>,
}

impl ToolSearch {
    /// A search over `toolbox`'s deferred tools, by words.
    pub fn new(toolbox: &Toolbox) -> Self {
        Self::by_words(toolbox, |deferred| deferred)
    }

    /// A search over every tool of `toolbox`, deferred or not, by words.
    pub fn all(toolbox: &Toolbox) -> Self {
        Self::by_words(toolbox, |_| true)
    }

    /// A search over `toolbox`'s deferred tools by words and by meaning:
    /// each tool's indexed text is embedded now, through `embeddings`'
    /// cache (a tool whose text did not change since the cache saw it is
    /// not embedded again). When the embedder fails, the search ranks by
    /// words alone and [`find`](Self::find) says why; the error is logged.
    pub async fn hybrid(toolbox: &Toolbox, embeddings: &Embeddings) -> Self {
        Self::with_meaning(toolbox, embeddings, |deferred| deferred).await
    }

    /// [`hybrid`](Self::hybrid) over every tool of `toolbox`.
    pub async fn hybrid_all(toolbox: &Toolbox, embeddings: &Embeddings) -> Self {
        Self::with_meaning(toolbox, embeddings, |_| true).await
    }

    fn documents(toolbox: &Toolbox, take: impl Fn(bool) -> bool) -> Vec<(usize, String)> {
        toolbox
            .inner
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| take(e.deferred))
            .map(|(at, e)| (at, document(e.tool.info())))
            .collect()
    }

    fn by_words(toolbox: &Toolbox, take: impl Fn(bool) -> bool) -> Self {
        let documents = Self::documents(toolbox, take);
        Self::from_index(
            toolbox,
            Index {
                words: WordIndex::new(&documents),
                names: names(toolbox, &documents),
                meaning: None,
                indexed: documents.len(),
                unembedded: None,
            },
        )
    }

    async fn with_meaning(
        toolbox: &Toolbox,
        embeddings: &Embeddings,
        take: impl Fn(bool) -> bool,
    ) -> Self {
        let documents = Self::documents(toolbox, take);
        let texts: Vec<String> = documents
            .iter()
            .map(|(at, _)| meaning_text(toolbox.inner.entries[*at].tool.info()))
            .collect();
        let (meaning, unembedded) = match embeddings.embed(&texts).await {
            Ok(vectors) => (
                Some(Meaning {
                    embeddings: embeddings.clone(),
                    vectors: documents.iter().map(|(at, _)| *at).zip(vectors).collect(),
                }),
                None,
            ),
            Err(err) => {
                tracing::warn!(
                    model = embeddings.model(),
                    error = %err,
                    "tool search: the tools could not be embedded; ranking by words alone"
                );
                (None, Some(err))
            }
        };
        Self::from_index(
            toolbox,
            Index {
                words: WordIndex::new(&documents),
                names: names(toolbox, &documents),
                meaning,
                indexed: documents.len(),
                unembedded,
            },
        )
    }

    fn from_index(toolbox: &Toolbox, index: Index) -> Self {
        ToolSearch {
            toolbox: toolbox.clone(),
            index: Arc::new(index),
            min_similarity: 0.0,
            weights: DEFAULT_FUSION,
        }
    }

    /// The least cosine similarity between a query and its best tool for a
    /// search by meaning to find anything (0 by default: any). Below it,
    /// [`find`](Self::find) answers that no tool fits and names the
    /// closest. What fits depends on the model; measure it on queries that
    /// have no right tool (docs/benchmarks.md has the figure for
    /// all-MiniLM-L6-v2).
    pub fn min_similarity(mut self, least: f32) -> Self {
        self.min_similarity = least;
        self
    }

    /// How much the ranking by words and the ranking by meaning each count
    /// when fused (0.25 and 1 by default: meaning leads, words break its
    /// near-ties): a tool's score is the sum over the
    /// rankings of `weight / (60 + rank)`. A weight of 0 leaves that
    /// ranking out (`(0.0, 1.0)` ranks by meaning alone). Negative or
    /// non-finite weights count as 0.
    pub fn fusion(mut self, words: f32, meaning: f32) -> Self {
        let weight = |w: f32| if w.is_finite() && w > 0.0 { w } else { 0.0 };
        self.weights = (weight(words), weight(meaning));
        self
    }

    /// The number of tools indexed.
    pub fn len(&self) -> usize {
        self.index.indexed
    }

    /// Whether no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.index.indexed == 0
    }

    /// Whether this search ranks by meaning (built with embeddings that
    /// embedded its tools).
    pub fn ranks_by_meaning(&self) -> bool {
        self.index.meaning.is_some()
    }

    /// The (at most `limit`) tools that best match `query` among those a
    /// caller with these `extensions` may see, best first, **by words
    /// alone**; none when no word of the query (or a synonym of one) is in
    /// any tool's text. A query longer than [`MAX_QUERY_CHARS`] is cut
    /// there, and at most its first 32 distinct words are scored.
    /// [`find`](Self::find) ranks by meaning too.
    pub fn search<'a>(
        &'a self,
        query: &str,
        extensions: &Extensions,
        limit: usize,
    ) -> Vec<&'a ToolInfo> {
        if limit == 0 {
            return Vec::new();
        }
        let ranked = self.index.words.rank(bounded(query));
        self.visible(ranked.into_iter().map(|(at, _)| at), extensions)
            .take(limit)
            .collect()
    }

    /// The (at most `limit`) tools that best match `query` among those a
    /// caller with these `extensions` may see, best first, with how they
    /// were ranked. With embeddings, by words and meaning fused; when the
    /// best visible tool's similarity to the query is below
    /// [`min_similarity`](Self::min_similarity), no tool fits and
    /// [`Found::closest`] names the nearest three. When the query cannot be
    /// embedded (the embedder failed or took longer than its bound), by
    /// words alone, logged and said in [`Found::ranking`] — never an error.
    pub async fn find<'a>(
        &'a self,
        query: &str,
        extensions: &Extensions,
        limit: usize,
    ) -> Found<'a> {
        let query = bounded(query);
        if let Some(tools) = self.named(query, extensions, limit) {
            return Found {
                tools,
                closest: Vec::new(),
                ranking: Ranking::Names,
                similarity: None,
            };
        }
        let Some(meaning) = &self.index.meaning else {
            let ranking = match &self.index.unembedded {
                Some(err) => Ranking::WordsAfter(err.clone()),
                None => Ranking::Words,
            };
            return Found {
                tools: self.search(query, extensions, limit),
                closest: Vec::new(),
                ranking,
                similarity: None,
            };
        };
        let vector = match meaning.embeddings.embed_query(query).await {
            Ok(vector) => vector,
            Err(err) => {
                tracing::warn!(
                    model = meaning.embeddings.model(),
                    error = %err,
                    "tool search: the query could not be embedded; ranking by words alone"
                );
                return Found {
                    tools: self.search(query, extensions, limit),
                    closest: Vec::new(),
                    ranking: Ranking::WordsAfter(err),
                    similarity: None,
                };
            }
        };
        let by_meaning = meaning.rank(&vector);
        let best = self
            .visible_with(
                by_meaning.iter().map(|&(at, similarity)| (at, similarity)),
                extensions,
            )
            .next();
        let similarity = best.map(|(_, similarity)| similarity);
        if let Some(similarity) = similarity {
            if similarity < self.min_similarity {
                let closest = self
                    .visible(by_meaning.iter().map(|&(at, _)| at), extensions)
                    .take(3)
                    .map(ToolInfo::name)
                    .collect();
                return Found {
                    tools: Vec::new(),
                    closest,
                    ranking: Ranking::Hybrid,
                    similarity: Some(similarity),
                };
            }
        }
        let by_words = match self.weights.0 {
            0.0 => Vec::new(),
            _ => self.index.words.rank(query),
        };
        let fused = fuse(&by_words, &by_meaning, self.weights);
        Found {
            tools: self
                .visible(fused.into_iter(), extensions)
                .take(limit)
                .collect(),
            closest: Vec::new(),
            ranking: Ranking::Hybrid,
            similarity,
        }
    }

    /// The tools `query` names exactly (names separated by commas or
    /// spaces, at most `limit`), when every one is an indexed tool the
    /// caller may see; else `None` (the query is ranked).
    pub fn named<'a>(
        &'a self,
        query: &str,
        extensions: &Extensions,
        limit: usize,
    ) -> Option<Vec<&'a ToolInfo>> {
        let names: Vec<&str> = query
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|name| !name.is_empty())
            .collect();
        if names.is_empty() || names.len() > limit {
            return None;
        }
        let positions: Vec<usize> = names
            .iter()
            .map(|name| self.index.names.get(*name).copied())
            .collect::<Option<_>>()?;
        let mut tools: Vec<&ToolInfo> = Vec::with_capacity(positions.len());
        for info in self.visible(positions.into_iter(), extensions) {
            if !tools.iter().any(|seen| seen.name() == info.name()) {
                tools.push(info);
            }
        }
        let distinct = names.iter().collect::<std::collections::HashSet<_>>().len();
        (tools.len() == distinct).then_some(tools)
    }

    /// The tools at `positions` that a caller with `extensions` may see.
    fn visible<'a: 'e, 'e>(
        &'a self,
        positions: impl Iterator<Item = usize> + 'e,
        extensions: &'e Extensions,
    ) -> impl Iterator<Item = &'a ToolInfo> + 'e {
        self.visible_with(positions.map(|at| (at, ())), extensions)
            .map(|(info, ())| info)
    }

    fn visible_with<'a: 'e, 'e, T: 'e>(
        &'a self,
        positions: impl Iterator<Item = (usize, T)> + 'e,
        extensions: &'e Extensions,
    ) -> impl Iterator<Item = (&'a ToolInfo, T)> + 'e {
        let entries = &self.toolbox.inner.entries;
        positions
            .filter_map(|(at, t)| entries.get(at).map(|entry| (entry, t)))
            .filter(|(entry, _)| self.toolbox.is_visible(entry, extensions))
            .map(|(entry, t)| (entry.tool.info(), t))
    }
}

/// The indexed tools' positions by name.
fn names(toolbox: &Toolbox, documents: &[(usize, String)]) -> HashMap<String, usize> {
    documents
        .iter()
        .map(|(at, _)| {
            (
                toolbox.inner.entries[*at].tool.info().name().to_owned(),
                *at,
            )
        })
        .collect()
}

/// `query` cut at [`MAX_QUERY_CHARS`] characters.
fn bounded(query: &str) -> &str {
    match query.char_indices().nth(MAX_QUERY_CHARS) {
        Some((cut, _)) => &query[..cut],
        None => query,
    }
}

impl fmt::Debug for ToolSearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSearch")
            .field("tools", &self.index.indexed)
            .field("by_meaning", &self.ranks_by_meaning())
            .field("min_similarity", &self.min_similarity)
            .field("fusion", &self.weights)
            .finish()
    }
}
