//! The embedder over an OpenAI-compatible `/v1/embeddings` endpoint,
//! against an in-process server on 127.0.0.1: what it sends, a refusal it
//! rides out, one it does not, and an answer that is not one vector per
//! text.
#![cfg(feature = "openai")]

use serde_json::{json, Value};
use toolstack::embed::{EmbedError, Embeddings, HttpEmbedder};

use crate::http_request;

/// Serves one canned response per connection, in order; returns the base
/// URL and a channel of the request bodies received.
async fn server(responses: Vec<String>) -> (String, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    http_request::canned(responses).await
}

fn response(status: &str, headers: &[&str], body: &str) -> String {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for header in headers {
        out.push_str(header);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    out
}

fn answer(vectors: &[&[f32]]) -> String {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| json!({"object": "embedding", "index": index, "embedding": v}))
        .collect();
    response(
        "200 OK",
        &[],
        &json!({"object": "list", "data": data}).to_string(),
    )
}

#[tokio::test]
async fn a_busy_endpoint_is_asked_again_and_the_vectors_come_back_unit_length() {
    let (url, mut bodies) = server(vec![
        response(
            "503 Service Unavailable",
            &["retry-after-ms: 10"],
            r#"{"error": {"message": "busy"}}"#,
        ),
        answer(&[&[3.0, 4.0], &[0.0, 2.0]]),
    ])
    .await;
    let embeddings = Embeddings::new(HttpEmbedder::new(url, "text-embedding-3-small").api_key("k"));
    let texts = vec!["read a file".to_owned(), "send a message".to_owned()];
    let vectors = embeddings.embed(&texts).await.expect("embedded");
    assert_eq!(&*vectors[0], &[0.6, 0.8]);
    assert_eq!(&*vectors[1], &[0.0, 1.0]);
    let sent = bodies.recv().await.unwrap();
    assert_eq!(
        sent,
        json!({"model": "text-embedding-3-small", "input": texts})
    );
    assert_eq!(bodies.recv().await.unwrap(), sent, "asked again, the same");
}

#[tokio::test]
async fn a_refusal_that_will_not_pass_is_not_asked_again() {
    let (url, mut bodies) = server(vec![
        response(
            "401 Unauthorized",
            &[],
            r#"{"error": {"message": "bad key"}}"#,
        ),
        answer(&[&[1.0]]),
    ])
    .await;
    let embeddings = Embeddings::new(HttpEmbedder::new(url, "m"));
    let err = embeddings.embed_query("anything").await.unwrap_err();
    assert!(matches!(err, EmbedError::Failed(_)), "{err}");
    assert!(err.to_string().contains("bad key"), "{err}");
    bodies.recv().await.unwrap();
    assert!(bodies.try_recv().is_err(), "sent once");
}

#[tokio::test]
async fn an_answer_short_of_a_vector_is_refused() {
    let (url, _bodies) = server(vec![answer(&[&[1.0, 0.0]])]).await;
    let embeddings = Embeddings::new(HttpEmbedder::new(url, "m"));
    let texts = vec!["a".to_owned(), "b".to_owned()];
    let err = embeddings.embed(&texts).await.unwrap_err();
    assert!(matches!(err, EmbedError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("no vector for text 1"), "{err}");
}
