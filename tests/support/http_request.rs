//! Reads one HTTP/1.1 request (head, then the body by content-length) for
//! the tests' hand-written servers.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The request's body.
#[allow(dead_code)]
pub async fn read_body<S: AsyncRead + Unpin>(socket: &mut S) -> Vec<u8> {
    read_request(socket).await.1
}

/// The request's head (lowercased) and body.
pub async fn read_request<S: AsyncRead + Unpin>(socket: &mut S) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.unwrap();
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = socket.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
            }
            return (head, buf[end + 4..end + 4 + len].to_vec());
        }
    }
}

/// A server on 127.0.0.1 that answers one canned response per
/// connection, in order; returns its base URL (`http://…/v1`) and a
/// channel of the request bodies received, as JSON (`null` when not).
#[allow(dead_code)]
pub async fn canned(
    responses: Vec<String>,
) -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        for response in responses {
            let (mut socket, _) = listener.accept().await.unwrap();
            let body = read_body(&mut socket).await;
            let _ = tx.send(serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null));
            // A client that refuses the answer hangs up mid-write.
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    (url, rx)
}
