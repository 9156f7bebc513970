//! The OpenAI client over HTTPS (feature `openai-tls`), against a loopback
//! TLS server with a certificate made for the test.

use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use toolstack::model::{ChatRequest, Message, ModelDelta, OpenAiModel};
use toolstack::ErrorKind;
use tower::ServiceExt;

use crate::http_request;

/// A certificate for `localhost`, its PEM, and a TLS server on 127.0.0.1
/// answering every request with the same SSE body. Returns the base URL.
async fn tls_server() -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let pem = cert.cert.pem();
    let chain = vec![CertificateDer::from(cert.cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake.
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                http_request::read_body(&mut tls).await;
                let mut response = String::from(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                );
                for text in ["Hello", " over", " TLS"] {
                    let chunk = json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
                    response.push_str(&format!("data: {chunk}\n\n"));
                }
                response.push_str("data: [DONE]\n\n");
                tls.write_all(response.as_bytes()).await.unwrap();
                tls.shutdown().await.unwrap();
            });
        }
    });
    (format!("https://localhost:{port}/v1"), pem)
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

#[tokio::test]
async fn streams_a_chat_over_https_with_a_trusted_certificate() {
    let (url, pem) = tls_server().await;
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let model = OpenAiModel::new(url, "test-model").with_client(client);
    let deltas: Vec<_> = model.oneshot(request()).await.unwrap().collect().await;
    let text: String = deltas
        .into_iter()
        .filter_map(|d| match d.unwrap() {
            ModelDelta::Text(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello over TLS");
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_typed_error() {
    let (url, _) = tls_server().await;
    let model = OpenAiModel::new(url, "test-model");
    let err = match model.oneshot(request()).await {
        Ok(mut stream) => stream.next().await.unwrap().unwrap_err(),
        Err(err) => err,
    };
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err:?}");
    let chain = format!("{err} {:?}", std::error::Error::source(&err));
    assert!(chain.to_lowercase().contains("certificate"), "{chain}");
}
