//! What an MCP operation went over: its [`Transport`] (`network.*`, and
//! the server's address on the client), and the request's
//! `Mcp-Session-Id`.

use std::sync::Arc;

/// The longest `Mcp-Session-Id` recorded; a longer one is left out.
const MAX_SESSION_ID_BYTES: usize = 256;

/// What the operation went over: `network.transport` (`tcp` for
/// streamable HTTP, `pipe` for stdio), the application protocol (`http`
/// and its version), and, on the client, the server's address and port.
#[derive(Clone, Debug, Default)]
pub(crate) struct Transport {
    pub(crate) network: Option<&'static str>,
    pub(crate) protocol: Option<(&'static str, &'static str)>,
    pub(crate) server: Option<(Arc<str>, u16)>,
}

impl Transport {
    /// Streamable HTTP to `url`: its host and port (the scheme's default
    /// when it names none).
    pub(crate) fn http(url: &str) -> Self {
        let server = url.parse::<http::Uri>().ok().and_then(|uri| {
            let port = uri.port_u16().or(match uri.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            })?;
            Some((Arc::from(uri.host()?), port))
        });
        Transport {
            network: Some("tcp"),
            protocol: Some(("http", "")),
            server,
        }
    }

    /// A child process's stdin and stdout.
    pub(crate) fn stdio() -> Self {
        Transport {
            network: Some("pipe"),
            ..Transport::default()
        }
    }

    /// What a request the server received came over: the HTTP request that
    /// carried it (streamable HTTP), else a byte stream (stdio or any
    /// stream rmcp serves).
    pub(crate) fn of_request(parts: Option<&http::request::Parts>) -> Self {
        match parts {
            Some(parts) => Transport {
                network: Some("tcp"),
                protocol: Some(("http", http_version(parts.version))),
                server: None,
            },
            None => Self::stdio(),
        }
    }
}

fn http_version(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// The request's `Mcp-Session-Id`, when it has one of a sane length.
pub(crate) fn session_id(parts: Option<&http::request::Parts>) -> Option<&str> {
    parts?
        .headers
        .get("mcp-session-id")?
        .to_str()
        .ok()
        .filter(|id| !id.is_empty() && id.len() <= MAX_SESSION_ID_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_url_names_the_server_and_its_port() {
        let server = |url: &str| Transport::http(url).server.map(|(h, p)| (h.to_string(), p));
        assert_eq!(
            server("http://127.0.0.1:8000/mcp"),
            Some(("127.0.0.1".into(), 8000))
        );
        assert_eq!(
            server("http://example.com/mcp"),
            Some(("example.com".into(), 80))
        );
        assert_eq!(
            server("https://example.com/mcp"),
            Some(("example.com".into(), 443))
        );
        assert_eq!(server("not a url"), None);
        assert_eq!(Transport::http("http://h/mcp").network, Some("tcp"));
    }

    #[test]
    fn a_session_id_is_read_within_bounds() {
        let parts = |id: &str| {
            let (parts, ()) = http::Request::builder()
                .header("mcp-session-id", id)
                .body(())
                .unwrap()
                .into_parts();
            parts
        };
        assert_eq!(session_id(Some(&parts("abc"))), Some("abc"));
        assert_eq!(session_id(Some(&parts(&"a".repeat(257)))), None);
        assert_eq!(session_id(Some(&parts(""))), None);
        assert_eq!(session_id(None), None);
    }
}
