//! Bearer-token auth for the examples and tests: `Authorization: Bearer
//! <token>` mapped to a caller, put in the request's extensions for the
//! toolbox's resolver (and a per-caller rate limit, and the tool) to read.
//!
//! ```
//! use axum::body::Body;
//! use axum::http::{Request, StatusCode};
//! use tower::ServiceExt;
//! use axum::middleware::from_fn_with_state;
//! use toolstack_demo::auth::{require_bearer, Tokens};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! #[derive(Clone, Copy, Debug, PartialEq)]
//! enum Caller { Guest, Admin }
//!
//! const TOKENS: Tokens<Caller> = &[("guest-token", Caller::Guest), ("admin-token", Caller::Admin)];
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|caller: axum::Extension<Caller>| async move { format!("{:?}", caller.0) }))
//!     .layer(from_fn_with_state(TOKENS, require_bearer::<Caller>));
//! let asked = Request::get("/").header("authorization", "Bearer admin-token").body(Body::empty()).unwrap();
//! assert_eq!(app.clone().oneshot(asked).await.unwrap().status(), StatusCode::OK);
//! let anonymous = Request::get("/").body(Body::empty()).unwrap();
//! let refused = app.oneshot(anonymous).await.unwrap();
//! assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
//! assert_eq!(refused.headers()["www-authenticate"], "Bearer");
//! # }
//! ```

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The known tokens, each with the caller it stands for.
pub type Tokens<C> = &'static [(&'static str, C)];

/// Middleware (for [`middleware::from_fn_with_state`], with the tokens as
/// its state): maps `Authorization: Bearer <token>` to its caller (a clone
/// of `C`, in the request's extensions), or answers `401` with a
/// `WWW-Authenticate` challenge — `Bearer` for a missing token,
/// `Bearer error="invalid_token"` for an unknown one.
///
/// [`middleware::from_fn_with_state`]: axum::middleware::from_fn_with_state
pub async fn require_bearer<C: Clone + Send + Sync + 'static>(
    State(tokens): State<Tokens<C>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let Some(token) = token else {
        return unauthorized("Bearer", "a bearer token is required");
    };
    let Some((_, caller)) = tokens.iter().find(|(known, _)| *known == token) else {
        return unauthorized(
            r#"Bearer error="invalid_token""#,
            "the bearer token is not valid",
        );
    };
    request.extensions_mut().insert(caller.clone());
    next.run(request).await
}

fn unauthorized(challenge: &'static str, message: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(WWW_AUTHENTICATE, challenge)],
        axum::Json(serde_json::json!({"error": message, "kind": "unauthorized"})),
    )
        .into_response()
}
