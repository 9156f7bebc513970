//! A toolbox served over HTTP, nested under `/api` in an app that has a
//! route of its own, behind a bearer-token check: the app of
//! [`toolstack_demo::http`] (`demo/src/http.rs`, where the bearer check, the
//! per-caller resolver and the tools are; `tests/it/http.rs` pins the same app).
//!
//! Run with `cargo run --example http_server --features http` (the port is
//! `PORT`, 3000 by default); it prints curl commands to try.
//!
//! Tokens (send `Authorization: Bearer <token>`): `alice-token` (an admin,
//! sees every tool) and `bob-token` (sees every tool but the destructive
//! `purge_cache`). A missing or unknown token is a `401`.

use toolstack_demo::http::{app, toolbox};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse().map_err(|err| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("PORT={port:?} is not a port number: {err}"),
            )
        })?,
        Err(_) => 3000,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let base = format!("http://{}", listener.local_addr()?);
    println!("serving on {base} — try:\n");
    println!("  curl {base}/health");
    println!("  curl -H 'Authorization: Bearer bob-token' {base}/api/tools");
    println!(
        "  curl -N -H 'Authorization: Bearer bob-token' -d '{{\"to\":5}}' {base}/api/tools/count"
    );
    println!(
        "  curl -N -H 'Authorization: Bearer bob-token' -d '{{\"numbers\":[3,1,2]}}' {base}/api/tools/stats"
    );
    println!("  curl -N -H 'Authorization: Bearer bob-token' -d '{{\"a\":1,\"b\":\"two\"}}' {base}/api/tools/add   # 400");
    println!("  curl -N -H 'Authorization: Bearer bob-token' -X POST {base}/api/tools/purge_cache   # 404: bob may not see it");
    println!(
        "  curl -N -H 'Authorization: Bearer alice-token' -X POST {base}/api/tools/purge_cache"
    );
    println!("  curl -i {base}/api/tools   # 401\n");
    axum::serve(listener, app(toolbox())).await
}
