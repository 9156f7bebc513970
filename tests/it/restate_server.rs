//! The demo's `restate-server` harness (`toolstack_demo::restate_server`),
//! which the Restate tests start their server with: it starts on free
//! ports and answers, refuses a deployment that does not answer with the
//! server's reason, and — SIGKILLed and restarted on its data directory —
//! still knows the deployment registered before the kill.
//!
//! Without the binary (`npm ci` in `restate/`, or
//! `TOOLSTACK_RESTATE_SERVER`) the test says SKIPPED loudly and returns —
//! and fails when `TOOLSTACK_REQUIRE_RESTATE` is set (CI sets it when npm
//! installed the server).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};

use toolstack_demo::restate_server::{RestateError, RestateProcess};

/// A server for `test`, or `None` (after a loud SKIPPED) when the binary
/// is not there and not required.
pub(crate) fn start(test: &str) -> Option<RestateProcess> {
    match RestateProcess::start(test) {
        Ok(restate) => Some(restate),
        Err(missing @ RestateError::Missing { .. }) => {
            assert!(
                std::env::var_os("TOOLSTACK_REQUIRE_RESTATE").is_none(),
                "TOOLSTACK_REQUIRE_RESTATE is set but {missing}"
            );
            // Straight to the process's stderr: the harness captures
            // `eprintln!` of tests that pass.
            let _ = writeln!(
                std::io::stderr(),
                "!! SKIPPED: {test} did NOT run: {missing}"
            );
            None
        }
        Err(e) => panic!("restate-server did not start: {e}"),
    }
}

/// A deployment's discovery endpoint and nothing else, over HTTP/1.1: what
/// the server asks when a deployment is registered (the request-response
/// protocol mode, one service with one handler). Its thread answers until
/// the test process ends.
fn discovery_endpoint() -> String {
    const MANIFEST: &str = r#"{"minProtocolVersion":5,"maxProtocolVersion":5,"protocolMode":"REQUEST_RESPONSE","services":[{"name":"Echo","ty":"SERVICE","handlers":[{"name":"echo"}]}]}"#;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free loopback port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // The request's head; a GET has no body.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.restate.endpointmanifest.v1+json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{MANIFEST}",
                MANIFEST.len()
            );
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn a_killed_server_restarts_on_its_data_directory() {
    let Some(mut restate) = start("a_killed_server_restarts_on_its_data_directory") else {
        return;
    };
    assert!(restate.healthy(), "a started server answers");

    // Nothing listens on a port just freed: the server's own reason comes
    // back.
    let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    match restate.register_http1(&format!("http://127.0.0.1:{closed}")) {
        Err(RestateError::Refused { status, body, .. }) => {
            assert!(status >= 400, "an error status, got {status}");
            assert!(!body.is_empty(), "the server says why");
        }
        other => panic!("a deployment that does not answer is refused, got {other:?}"),
    }

    let registered = restate
        .register_http1(&discovery_endpoint())
        .unwrap_or_else(|e| panic!("{e}"));
    let id = registered["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a deployment id in {registered}"))
        .to_owned();

    restate.kill();
    assert!(!restate.healthy(), "a killed server does not answer");

    restate.restart().unwrap_or_else(|e| panic!("{e}"));
    assert!(restate.healthy(), "a restarted server answers");
    let deployments = restate.deployments().unwrap_or_else(|e| panic!("{e}"));
    let known = deployments["deployments"]
        .as_array()
        .is_some_and(|all| all.iter().any(|d| d["id"] == id.as_str()));
    assert!(
        known,
        "the deployment {id} registered before the kill is known after the restart: {deployments}"
    );
}
