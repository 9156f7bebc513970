//! [`HttpEmbedder`]: any OpenAI-compatible `/v1/embeddings` endpoint
//! (OpenAI, Azure, Ollama, vLLM, llama.cpp's server, text-embeddings-
//! inference…).

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use super::{Embed, EmbedError, EmbedFuture};
use crate::model::provider::refusal;
use crate::ErrorKind;

/// The most bytes of an answer read: 64 texts of 4,096 dimensions written
/// out in JSON come to about 6 MB.
const MAX_ANSWER_BYTES: usize = 32 << 20;

/// How many times a refused or unreachable call is sent in all.
const ATTEMPTS: u32 = 3;

/// The longest wait between attempts, whatever the endpoint asks.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// An embedder over an OpenAI-compatible embeddings endpoint
/// (`POST {base_url}/embeddings` with `model` and `input`).
///
/// A call the endpoint refuses for a while (429, 5xx, unreachable) is sent
/// again, at most three times in all, after the wait the endpoint asks for
/// (`retry-after-ms`, `Retry-After`) or a doubling backoff, each at most
/// 5 s; [`Embeddings`](super::Embeddings) bounds the whole in time. Other
/// refusals, an answer over 32 MiB, or one that is not one vector per text
/// are [`EmbedError`]s that say what the endpoint said.
///
/// ```no_run
/// use toolstack::embed::{Embeddings, HttpEmbedder};
///
/// let embedder = HttpEmbedder::new("https://api.openai.com/v1", "text-embedding-3-small")
///     .api_key(std::env::var("OPENAI_API_KEY").unwrap_or_default());
/// let embeddings = Embeddings::new(embedder);
/// ```
#[derive(Debug, Clone)]
pub struct HttpEmbedder {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    max_batch: usize,
}

impl HttpEmbedder {
    /// An embedder for `base_url` (e.g. `http://127.0.0.1:11434/v1`) and
    /// `model`, 64 texts a call.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        HttpEmbedder {
            client: reqwest::Client::new(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            model: model.into(),
            max_batch: 64,
        }
    }

    /// Uses `client` for the requests (its proxy, certificates, timeouts).
    pub fn with_client(mut self, client: reqwest::Client) -> Self {
        self.client = client;
        self
    }

    /// Sends `api_key` as a bearer token.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// The most texts one call sends (at least 1).
    pub fn max_batch(mut self, texts: usize) -> Self {
        self.max_batch = texts.max(1);
        self
    }

    async fn once(
        &self,
        texts: &[String],
    ) -> Result<Vec<Vec<f32>>, (EmbedError, Option<Duration>)> {
        let mut post = self
            .client
            .post(format!("{}/embeddings", self.base_url))
            .header("content-type", "application/json")
            .body(json!({"model": self.model, "input": texts}).to_string());
        if let Some(key) = &self.api_key {
            post = post.bearer_auth(key);
        }
        let retryable = |message: String| (EmbedError::Failed(message), Some(Duration::ZERO));
        let response = post
            .send()
            .await
            .map_err(|err| retryable(format!("cannot reach the embeddings endpoint: {err}")))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let wait = refusal::retry_after(response.headers());
            let body = refusal::error_body(response.bytes_stream()).await;
            let refused = refusal::status_error(status, wait, &body);
            let again = matches!(
                refused.kind(),
                ErrorKind::RateLimited { .. } | ErrorKind::Unavailable
            );
            let err = EmbedError::Failed(format!(
                "the embeddings endpoint refused: {}",
                refused.message()
            ));
            return Err((err, again.then(|| wait.unwrap_or_default())));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|err| retryable(format!("the answer broke off: {err}")))?;
            if body.len() + piece.len() > MAX_ANSWER_BYTES {
                return Err((
                    EmbedError::Invalid(format!("an answer over {MAX_ANSWER_BYTES} bytes")),
                    None,
                ));
            }
            body.extend_from_slice(&piece);
        }
        vectors(&body, texts.len()).map_err(|err| (err, None))
    }
}

/// The vectors of an embeddings answer, in the order of the texts (by each
/// item's `index`, as the API gives them).
fn vectors(body: &[u8], texts: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    #[derive(serde::Deserialize)]
    struct Answer {
        data: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        index: usize,
        embedding: Vec<f32>,
    }
    let answer: Answer = serde_json::from_slice(body)
        .map_err(|err| EmbedError::Invalid(format!("not an embeddings answer: {err}")))?;
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; texts];
    for item in answer.data {
        match vectors.get_mut(item.index) {
            Some(slot @ None) => *slot = Some(item.embedding),
            Some(Some(_)) => {
                return Err(EmbedError::Invalid(format!(
                    "two vectors for text {}",
                    item.index
                )))
            }
            None => {
                return Err(EmbedError::Invalid(format!(
                    "a vector for text {} of {texts}",
                    item.index
                )))
            }
        }
    }
    vectors
        .into_iter()
        .enumerate()
        .map(|(at, v)| v.ok_or_else(|| EmbedError::Invalid(format!("no vector for text {at}"))))
        .collect()
}

impl Embed for HttpEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        Box::pin(async move {
            let mut backoff = Duration::from_millis(200);
            let mut attempt = 1;
            loop {
                match self.once(texts).await {
                    Ok(vectors) => return Ok(vectors),
                    Err((err, Some(asked))) if attempt < ATTEMPTS => {
                        let wait = if asked.is_zero() { backoff } else { asked };
                        tracing::debug!(attempt, error = %err, "embeddings: trying again");
                        tokio::time::sleep(wait.min(MAX_BACKOFF)).await;
                        backoff *= 2;
                        attempt += 1;
                    }
                    Err((err, _)) => return Err(err),
                }
            }
        })
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_come_back_in_the_texts_order() {
        let body =
            br#"{"data": [{"index": 1, "embedding": [0, 1]}, {"index": 0, "embedding": [1, 0]}]}"#;
        assert_eq!(vectors(body, 2).unwrap(), [vec![1.0, 0.0], vec![0.0, 1.0]]);
        for (body, said) in [
            (
                &br#"{"data": [{"index": 0, "embedding": [1]}]}"#[..],
                "no vector for text 1",
            ),
            (
                br#"{"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}"#,
                "two vectors",
            ),
            (
                br#"{"data": [{"index": 5, "embedding": [1]}]}"#,
                "a vector for text 5 of 2",
            ),
            (br#"{"error": "nope"}"#, "not an embeddings answer"),
        ] {
            let err = vectors(body, 2).unwrap_err();
            assert!(err.to_string().contains(said), "{err}");
        }
    }
}
