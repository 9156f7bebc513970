//! Deferred tools, and the search that finds them.
//!
//! A toolbox merged from a few MCP servers easily holds hundreds of tools,
//! and their definitions cost tens of thousands of tokens on every model
//! call. [`Toolbox::deferred`](crate::Toolbox::deferred) marks tools to keep out of the model's
//! view; a [`ToolSearch`] ranks them for a query, and the agent shows the
//! model a `search_tools` tool that loads what it finds for the rest of
//! the run (see the agent's docs).
//!
//! A search ranks by words (BM25 over each tool's name, description and
//! parameters, see `words.rs`) and, given [`Embeddings`](crate::embed::Embeddings), by meaning too:
//! the cosine similarity of the query's vector to each tool's, the two
//! rankings fused by reciprocal rank. A query that the embedder cannot
//! embed in time is ranked by words alone, and the search says so.
//!
//! * `deferred`: the mark on a toolbox's tools;
//! * `tool_search`: [`ToolSearch`], the index and its searches;
//! * `found`: what a search answers ([`Found`], [`Ranking`]);
//! * `text`: what a tool is indexed by, for words and for meaning;
//! * `words`: the ranking by words (BM25);
//! * `meaning`: the ranking by meaning, and the fusion of the two.

mod deferred;
mod found;
mod meaning;
mod text;
mod tool_search;
mod words;

pub use found::{Found, Ranking};
pub use tool_search::{ToolSearch, MAX_QUERY_CHARS};
