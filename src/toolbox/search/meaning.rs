//! The ranking by meaning — each tool's vector against the query's — and
//! its reciprocal-rank fusion with the ranking by words.

use std::sync::Arc;

use crate::embed::{cosine, Embeddings};

/// The weights of words and of meaning in the fusion: chosen on the tuned
/// half of the demo catalogue's queries (the best sum of recall@1 and
/// recall@5 with all-MiniLM-L6-v2; docs/benchmarks.md).
pub(super) const DEFAULT_FUSION: (f32, f32) = (0.25, 1.0);

/// Reciprocal-rank fusion's constant: a tool's fused score is the sum,
/// over the rankings, of `1 / (RRF_K + its rank)`.
const RRF_K: f32 = 60.0;

/// The tools' vectors, by position in the toolbox.
pub(super) struct Meaning {
    pub(super) embeddings: Embeddings,
    pub(super) vectors: Vec<(usize, Arc<[f32]>)>,
}

impl Meaning {
    /// Every tool by its similarity to `query`, best first; equal
    /// similarities in the toolbox's order.
    pub(super) fn rank(&self, query: &[f32]) -> Vec<(usize, f32)> {
        let mut ranked: Vec<(usize, f32)> = self
            .vectors
            .iter()
            .map(|(at, vector)| (*at, cosine(query, vector)))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }
}

/// Reciprocal-rank fusion of two rankings (by position, best first): the
/// positions by the sum of `weight / (RRF_K + rank)` over the rankings
/// that hold them, best first; ties in the toolbox's order.
pub(super) fn fuse(
    by_words: &[(usize, f32)],
    by_meaning: &[(usize, f32)],
    weights: (f32, f32),
) -> Vec<usize> {
    let mut scores: std::collections::HashMap<usize, f32> =
        std::collections::HashMap::with_capacity(by_meaning.len());
    for (ranking, weight) in [(by_words, weights.0), (by_meaning, weights.1)] {
        if weight == 0.0 {
            continue;
        }
        for (rank, (at, _)) in ranking.iter().enumerate() {
            *scores.entry(*at).or_default() += weight / (RRF_K + rank as f32 + 1.0);
        }
    }
    let mut fused: Vec<(usize, f32)> = scores.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    fused.into_iter().map(|(at, _)| at).collect()
}
