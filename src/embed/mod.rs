//! Text embeddings: what lets a [tool search](crate::toolbox::ToolSearch)
//! rank tools by what a request means, beside the words it shares with
//! them.
//!
//! [`Embed`] is the small trait a model implements: a batch of texts in,
//! one vector each out. [`Embeddings`] is what a search holds: an
//! embedder with its bounds (texts per batch, characters per text, time
//! per batch), the vectors it returned checked (one per text, one
//! dimension, finite) and made unit length, and a cache by text, so a
//! tool whose indexed text did not change is never embedded twice.
//!
//! Two embedders come with the crate: [`HttpEmbedder`] over any
//! OpenAI-compatible `/v1/embeddings` endpoint (feature `openai`), and
//! [`LocalEmbedder`], a sentence-transformers BERT model run on the CPU in
//! pure Rust (feature `local-embeddings`).
#![cfg_attr(
    not(feature = "openai"),
    doc = "\n[`HttpEmbedder`]: https://docs.rs/toolstack/latest/toolstack/embed/struct.HttpEmbedder.html"
)]
#![cfg_attr(
    not(feature = "local-embeddings"),
    doc = "\n[`LocalEmbedder`]: https://docs.rs/toolstack/latest/toolstack/embed/struct.LocalEmbedder.html"
)]

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(feature = "openai")]
mod http;
#[cfg(feature = "local-embeddings")]
mod local;

#[cfg(feature = "openai")]
pub use http::HttpEmbedder;
#[cfg(feature = "local-embeddings")]
pub use local::LocalEmbedder;

/// The longest text embedded, in characters: longer texts are cut here
/// (a tool's description rarely comes near; small models read 256 to 512
/// tokens at most).
pub const MAX_TEXT_CHARS: usize = 2_000;

/// The most vectors a cache keeps; past it, the vectors not asked for
/// since the cache was last full are dropped.
pub const MAX_CACHED: usize = 100_000;

/// The boxed future an [`Embed`] returns.
pub type EmbedFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Vec<f32>>, EmbedError>> + Send + 'a>>;

/// A text-embedding model: texts in, one vector each out, in order.
///
/// [`Embeddings`] calls it with at most [`max_batch`](Embed::max_batch)
/// texts of at most [`MAX_TEXT_CHARS`] characters each, bounds each call
/// in time, and checks what comes back; an implementation need not
/// normalize its vectors.
pub trait Embed: Send + Sync + 'static {
    /// The model's name: a span attribute, and part of what a cached
    /// vector is kept by.
    fn model(&self) -> &str;

    /// One vector for each of `texts`, in their order.
    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a>;

    /// The most texts one call takes.
    fn max_batch(&self) -> usize {
        32
    }
}

/// A shared embedder is one.
impl<E: Embed + ?Sized> Embed for Arc<E> {
    fn model(&self) -> &str {
        (**self).model()
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        (**self).embed(texts)
    }

    fn max_batch(&self) -> usize {
        (**self).max_batch()
    }
}

/// Why texts could not be embedded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmbedError {
    /// The model could not be loaded: a directory that does not hold a
    /// model, or a file of it that does not read.
    Load(String),
    /// The embedder failed (an endpoint's error, a model's).
    Failed(String),
    /// A call took longer than its bound.
    Timeout(Duration),
    /// The embedder answered with something other than one finite vector
    /// per text, all of one dimension.
    Invalid(String),
}

impl fmt::Display for EmbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmbedError::Load(why) => write!(f, "the embedding model could not be loaded: {why}"),
            EmbedError::Failed(why) => write!(f, "the embedder failed: {why}"),
            EmbedError::Timeout(bound) => write!(f, "the embedder did not answer within {bound:?}"),
            EmbedError::Invalid(why) => write!(f, "the embedder's answer is unusable: {why}"),
        }
    }
}

impl std::error::Error for EmbedError {}

/// An embedder with its bounds, checks and cache: what a
/// [`ToolSearch`](crate::toolbox::ToolSearch) ranks by meaning with.
/// Cheap to clone (the clones share the cache).
#[derive(Clone)]
pub struct Embeddings {
    embedder: Arc<dyn Embed>,
    batch_timeout: Duration,
    query_timeout: Duration,
    cache: Arc<Cache>,
}

impl fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Embeddings")
            .field("model", &self.embedder.model())
            .field("batch_timeout", &self.batch_timeout)
            .field("query_timeout", &self.query_timeout)
            .field("cached", &self.cached())
            .finish()
    }
}

impl Embeddings {
    /// `embedder`, with each batch of tool texts bounded to 60 s and each
    /// query to 2 s.
    pub fn new(embedder: impl Embed) -> Self {
        Embeddings {
            embedder: Arc::new(embedder),
            batch_timeout: Duration::from_secs(60),
            query_timeout: Duration::from_secs(2),
            cache: Arc::default(),
        }
    }

    /// The bound on each batch of texts embedded while a search is built.
    pub fn batch_timeout(mut self, timeout: Duration) -> Self {
        self.batch_timeout = timeout;
        self
    }

    /// The bound on a query's embedding; past it, the search ranks by
    /// words alone.
    pub fn query_timeout(mut self, timeout: Duration) -> Self {
        self.query_timeout = timeout;
        self
    }

    /// The model's name.
    pub fn model(&self) -> &str {
        self.embedder.model()
    }

    /// How many vectors the cache holds.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Unit vectors for `texts`, in order: those of texts embedded before
    /// (by this value or a clone) from the cache, the others from the
    /// embedder, in batches.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        self.embed_within(texts, self.batch_timeout).await
    }

    /// A query's unit vector, bounded by the query timeout.
    pub async fn embed_query(&self, query: &str) -> Result<Arc<[f32]>, EmbedError> {
        let mut vectors = self
            .embed_within(&[query.to_owned()], self.query_timeout)
            .await?;
        Ok(vectors.remove(0))
    }

    async fn embed_within(
        &self,
        texts: &[String],
        timeout: Duration,
    ) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        let texts: Vec<&str> = texts.iter().map(|text| cut(text)).collect();
        let keys: Vec<u64> = texts
            .iter()
            .map(|text| self.cache.key(self.model(), text))
            .collect();
        let mut vectors: Vec<Option<Arc<[f32]>>> = self.cache.get_all(&keys);
        let missing: Vec<usize> = (0..texts.len())
            .filter(|&at| vectors[at].is_none())
            .collect();
        let batch = self.embedder.max_batch().max(1);
        let mut dimension = vectors.iter().flatten().next().map(|v| v.len());
        for chunk in missing.chunks(batch) {
            let asked: Vec<String> = chunk.iter().map(|&at| texts[at].to_owned()).collect();
            let answer = tokio::time::timeout(timeout, self.embedder.embed(&asked))
                .await
                .map_err(|_| EmbedError::Timeout(timeout))??;
            if answer.len() != asked.len() {
                return Err(EmbedError::Invalid(format!(
                    "{} vectors for {} texts",
                    answer.len(),
                    asked.len()
                )));
            }
            let mut fresh = Vec::with_capacity(chunk.len());
            for (&at, vector) in chunk.iter().zip(answer) {
                let vector = unit(vector, &mut dimension)?;
                fresh.push((keys[at], Arc::clone(&vector)));
                vectors[at] = Some(vector);
            }
            self.cache.put_all(fresh);
        }
        Ok(vectors.into_iter().flatten().collect())
    }
}

/// `text` cut at [`MAX_TEXT_CHARS`] characters.
fn cut(text: &str) -> &str {
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// `vector` checked (finite, not zero, of the dimension seen so far) and
/// scaled to unit length.
fn unit(mut vector: Vec<f32>, dimension: &mut Option<usize>) -> Result<Arc<[f32]>, EmbedError> {
    if vector.is_empty() {
        return Err(EmbedError::Invalid("an empty vector".into()));
    }
    match *dimension {
        Some(seen) if seen != vector.len() => {
            return Err(EmbedError::Invalid(format!(
                "vectors of {seen} and of {} dimensions",
                vector.len()
            )))
        }
        _ => *dimension = Some(vector.len()),
    }
    if vector.iter().any(|x| !x.is_finite()) {
        return Err(EmbedError::Invalid(
            "a vector with a value that is not a finite number".into(),
        ));
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        return Err(EmbedError::Invalid("a vector of zeros".into()));
    }
    for x in &mut vector {
        *x /= norm;
    }
    Ok(vector.into())
}

/// The cosine similarity of two unit vectors (their dot product); 0 when
/// their dimensions differ.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Vectors by (model, text), bounded by [`MAX_CACHED`].
#[derive(Default)]
struct Cache {
    seed: RandomState,
    vectors: Mutex<Generations>,
}

/// The vectors asked for since the cache was last full, and those from
/// before: when the current generation fills, the older one is dropped.
#[derive(Default)]
struct Generations {
    current: HashMap<u64, Arc<[f32]>>,
    older: HashMap<u64, Arc<[f32]>>,
}

impl Cache {
    fn key(&self, model: &str, text: &str) -> u64 {
        self.seed.hash_one((model, text))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.vectors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn len(&self) -> usize {
        let vectors = self.lock();
        vectors.current.len() + vectors.older.len()
    }

    fn get_all(&self, keys: &[u64]) -> Vec<Option<Arc<[f32]>>> {
        let mut vectors = self.lock();
        keys.iter()
            .map(|key| {
                if let Some(vector) = vectors.current.get(key) {
                    return Some(Arc::clone(vector));
                }
                let vector = vectors.older.remove(key)?;
                vectors.insert(*key, Arc::clone(&vector));
                Some(vector)
            })
            .collect()
    }

    fn put_all(&self, fresh: Vec<(u64, Arc<[f32]>)>) {
        let mut vectors = self.lock();
        for (key, vector) in fresh {
            vectors.insert(key, vector);
        }
    }
}

impl Generations {
    fn insert(&mut self, key: u64, vector: Arc<[f32]>) {
        if self.current.len() >= MAX_CACHED / 2 {
            self.older = std::mem::take(&mut self.current);
        }
        self.current.insert(key, vector);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Embeds a text as its counts of a few letters; counts its calls.
    struct Letters {
        calls: Arc<AtomicUsize>,
        texts: Arc<AtomicUsize>,
    }

    impl Embed for Letters {
        fn model(&self) -> &str {
            "letters"
        }
        fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.texts.fetch_add(texts.len(), Ordering::SeqCst);
            Box::pin(async move {
                Ok(texts
                    .iter()
                    .map(|t| {
                        "aeiou"
                            .chars()
                            .map(|c| t.matches(c).count() as f32 + 0.5)
                            .collect()
                    })
                    .collect())
            })
        }
        fn max_batch(&self) -> usize {
            2
        }
    }

    fn letters() -> (Embeddings, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let texts = Arc::new(AtomicUsize::new(0));
        let embeddings = Embeddings::new(Letters {
            calls: Arc::clone(&calls),
            texts: Arc::clone(&texts),
        });
        (embeddings, calls, texts)
    }

    #[tokio::test]
    async fn batches_are_bounded_vectors_are_unit_and_cached_by_text() {
        let (embeddings, calls, texts) = letters();
        let some: Vec<String> = ["read a file", "write a file", "send an email"]
            .map(String::from)
            .into();
        let vectors = embeddings.embed(&some).await.unwrap();
        assert_eq!(vectors.len(), 3);
        assert_eq!(calls.load(Ordering::SeqCst), 2, "3 texts in batches of 2");
        for vector in &vectors {
            let norm: f32 = vector.iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-5, "unit length: {norm}");
        }
        // One text changed: only it is embedded again.
        let changed: Vec<String> = ["read a file", "write two files", "send an email"]
            .map(String::from)
            .into();
        let again = embeddings.embed(&changed).await.unwrap();
        assert_eq!(texts.load(Ordering::SeqCst), 4);
        assert_eq!(again[0], vectors[0]);
        assert_eq!(embeddings.cached(), 4);
    }

    struct Broken(Vec<Vec<f32>>);

    impl Embed for Broken {
        fn model(&self) -> &str {
            "broken"
        }
        fn embed<'a>(&'a self, _: &'a [String]) -> EmbedFuture<'a> {
            let answer = self.0.clone();
            Box::pin(async move { Ok(answer) })
        }
    }

    #[tokio::test]
    async fn unusable_answers_are_typed_errors() {
        let two: Vec<String> = vec!["a".into(), "b".into()];
        let cases = [
            (vec![vec![1.0]], "1 vectors for 2 texts"),
            (
                vec![vec![1.0, 0.0], vec![1.0]],
                "vectors of 2 and of 1 dimensions",
            ),
            (vec![vec![f32::NAN], vec![1.0]], "not a finite number"),
            (vec![vec![0.0], vec![1.0]], "a vector of zeros"),
        ];
        for (answer, said) in cases {
            let err = Embeddings::new(Broken(answer))
                .embed(&two)
                .await
                .unwrap_err();
            assert!(matches!(err, EmbedError::Invalid(_)), "{err}");
            assert!(err.to_string().contains(said), "{err}");
        }
    }

    struct Slow;

    impl Embed for Slow {
        fn model(&self) -> &str {
            "slow"
        }
        fn embed<'a>(&'a self, _: &'a [String]) -> EmbedFuture<'a> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(vec![vec![1.0]])
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_query_is_bounded_in_time() {
        let embeddings = Embeddings::new(Slow).query_timeout(Duration::from_millis(300));
        let err = embeddings.embed_query("anything").await.unwrap_err();
        assert!(
            matches!(err, EmbedError::Timeout(t) if t == Duration::from_millis(300)),
            "{err}"
        );
    }

    #[test]
    fn long_texts_are_cut_at_a_char_boundary() {
        let long = "é".repeat(MAX_TEXT_CHARS + 10);
        assert_eq!(cut(&long).chars().count(), MAX_TEXT_CHARS);
    }
}
