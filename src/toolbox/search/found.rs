//! What a search answers: the tools it [`Found`], and how it ranked them
//! ([`Ranking`]).

use crate::embed::EmbedError;
use crate::ToolInfo;

/// What a [`ToolSearch::find`](crate::toolbox::ToolSearch::find) found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Found<'a> {
    /// The tools that fit the query, best first: empty when none does.
    pub tools: Vec<&'a ToolInfo>,
    /// When no tool fits well enough (below the search's
    /// [`min_similarity`](crate::toolbox::ToolSearch::min_similarity)):
    /// the closest tools' names, best first, none of them loaded.
    pub closest: Vec<&'a str>,
    /// How the tools were ranked.
    pub ranking: Ranking,
    /// The cosine similarity of the query to the closest tool the caller
    /// may see, when ranked by meaning: what
    /// [`min_similarity`](crate::toolbox::ToolSearch::min_similarity) is
    /// compared with.
    pub similarity: Option<f32>,
}

/// How a search ranked the tools.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Ranking {
    /// By exact name: the query was the names of tools, which a model
    /// shown the deferred tools' names loads them with.
    Names,
    /// By words alone: the search has no embeddings.
    Words,
    /// By words and by meaning, fused.
    Hybrid,
    /// By words alone, because the embedder failed (on the query, or on
    /// the tools when the search was built).
    WordsAfter(EmbedError),
}

impl Ranking {
    /// A short name for spans and logs: `words`, `hybrid`, or
    /// `words (embedder failed)`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Ranking::Names => "names",
            Ranking::Words => "words",
            Ranking::Hybrid => "hybrid",
            Ranking::WordsAfter(_) => "words (embedder failed)",
        }
    }
}
