//! Inputs the fuzz targets in `fuzz/` found (or that were found while
//! writing them), each pinned as an ordinary test on stable. See
//! `fuzz/README.md`.

#[cfg(feature = "openai")]
use crate::http_request;

/// The OpenAI client's SSE parser (`fuzz/fuzz_targets/openai_sse.rs`),
/// against an in-process endpoint on 127.0.0.1 that sends a raw body.
#[cfg(feature = "openai")]
mod openai_sse {
    use std::time::Duration;

    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;
    use toolstack::model::{ChatRequest, Message, ModelDelta, OpenAiModel};
    use toolstack::{ErrorKind, ToolError};
    use tower::ServiceExt;

    use super::http_request;

    /// Serves `body` (raw bytes after a 200 head) to one connection; with
    /// `hold`, keeps the connection open afterwards instead of closing it.
    async fn server(body: Vec<u8>, hold: bool) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let _ = http_request::read_body(&mut socket).await;
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&body).await;
            if hold {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            let _ = socket.shutdown().await;
        });
        url
    }

    /// The answer's items, or a panic if they take longer than `within`.
    async fn deltas(url: &str, within: Duration) -> Vec<Result<ModelDelta, ToolError>> {
        let model = OpenAiModel::new(url, "test-model");
        let stream = model
            .oneshot(ChatRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap();
        tokio::time::timeout(within, stream.collect())
            .await
            .expect("the answer was not parsed in time")
    }

    fn texts(items: &[Result<ModelDelta, ToolError>]) -> Vec<&str> {
        items
            .iter()
            .filter_map(|item| match item {
                Ok(ModelDelta::Text(text)) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    const HELLO: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n";

    /// A body that starts with a UTF-8 byte-order mark (which the SSE
    /// specification says to skip) panicked inside eventsource-stream
    /// 0.2.3, which slices one byte of the mark's three off.
    #[tokio::test]
    async fn a_body_starting_with_a_byte_order_mark_is_read_not_a_panic() {
        let body = format!("\u{feff}{HELLO}data: [DONE]\n\n");
        let url = server(body.into_bytes(), false).await;
        let items = deltas(&url, Duration::from_secs(30)).await;
        assert_eq!(texts(&items), ["hello"], "{items:?}");
        assert!(items.iter().all(Result::is_ok), "{items:?}");
    }

    /// Two marks: the second would reach eventsource-stream's slicing too.
    #[tokio::test]
    async fn a_body_starting_with_two_byte_order_marks_is_read_not_a_panic() {
        let body = format!("\u{feff}\u{feff}{HELLO}data: [DONE]\n\n");
        let url = server(body.into_bytes(), false).await;
        let items = deltas(&url, Duration::from_secs(30)).await;
        assert_eq!(texts(&items), ["hello"], "{items:?}");
    }

    /// Bytes that are not UTF-8 were held, with everything after them,
    /// until the body ended — an endpoint that kept the connection open got
    /// no error, and its later bytes were buffered without a bound. The
    /// error now comes with the line that carries them.
    #[tokio::test]
    async fn text_that_is_not_utf8_ends_the_answer_when_it_arrives() {
        let mut body = HELLO.as_bytes().to_vec();
        body.extend_from_slice(b"data: \xff\xfe\n\n");
        body.extend_from_slice(HELLO.repeat(1000).as_bytes());
        let url = server(body, true).await;
        let items = deltas(&url, Duration::from_secs(30)).await;
        assert_eq!(items.len(), 2, "{items:?}");
        assert_eq!(texts(&items), ["hello"]);
        let err = items[1].as_ref().unwrap_err();
        // After a delta: failed, not worth asking again.
        assert_eq!(err.kind(), ErrorKind::Failed);
        assert!(err.message().contains("not UTF-8"), "{}", err.message());
    }

    /// The same before any delta: as retryable as a dropped connection.
    #[tokio::test]
    async fn text_that_is_not_utf8_before_any_delta_is_unavailable() {
        let url = server(b"data: {\"choices\":\xc3(\n\n".to_vec(), true).await;
        let items = deltas(&url, Duration::from_secs(30)).await;
        assert_eq!(items.len(), 1, "{items:?}");
        let err = items[0].as_ref().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(err.message().contains("not UTF-8"), "{}", err.message());
    }
}
