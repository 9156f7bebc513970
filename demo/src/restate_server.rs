//! A `restate-server` of a test's or a proof's own: free loopback ports
//! (ingress, admin, node-to-node), a temporary data directory; stopped
//! with SIGKILL and restarted on the same ports and the same data
//! directory, so that what it stored — deployments, journals, durable
//! promises — outlives the kill. Service deployments are registered
//! through its admin REST API.
//!
//! The binary is the one `restate/package.json` pins (npm's
//! `@restatedev/restate-server`, installed by `npm ci` in `restate/`), or
//! the one `TOOLSTACK_RESTATE_SERVER` names. Talking to it takes a few
//! plain HTTP/1.1 requests over a `TcpStream`, so this module needs no
//! HTTP client and no feature.

use std::fmt;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The environment variable that names the `restate-server` binary to
/// use instead of the one `npm ci` installs in `restate/`.
pub const SERVER_ENV: &str = "TOOLSTACK_RESTATE_SERVER";

/// How long [`RestateProcess::start`] and [`RestateProcess::restart`] wait
/// for the admin API and the ingress to answer: a cold start takes about
/// a second; a loaded machine may take many more.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one admin request may take: registering a deployment makes
/// the server call the service's discovery endpoint first.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The most of an admin answer read: a deployment's description lists
/// its services and their schemas, kilobytes, not megabytes.
const MAX_ANSWER_BYTES: u64 = 4 * 1024 * 1024;

/// How much of the server's log an error quotes.
const LOG_TAIL_BYTES: usize = 2048;

/// Why a `restate-server` could not be used.
#[derive(Debug)]
pub enum RestateError {
    /// No binary: neither `TOOLSTACK_RESTATE_SERVER` nor `restate/`'s
    /// `node_modules` holds one.
    Missing {
        /// Where it was looked for.
        looked_at: PathBuf,
    },
    /// The binary is there but could not be started.
    Spawn(std::io::Error),
    /// The temporary data directory or the log file could not be made.
    Dir(std::io::Error),
    /// No free loopback port could be had.
    Ports(std::io::Error),
    /// It exited before it answered (a port taken, a data directory it
    /// cannot read).
    Exited {
        /// How it ended.
        status: std::process::ExitStatus,
        /// The end of its log.
        log: String,
    },
    /// It did not answer within [`READY_TIMEOUT`].
    NotReady {
        /// The end of its log.
        log: String,
    },
    /// An admin request could not be sent or its answer read.
    Http {
        /// The request, `METHOD /path`.
        request: String,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The admin API answered with an error status.
    Refused {
        /// The request, `METHOD /path`.
        request: String,
        /// The HTTP status.
        status: u16,
        /// The answer's body: the server's own message.
        body: String,
    },
}

impl fmt::Display for RestateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestateError::Missing { looked_at } => write!(
                f,
                "no restate-server at {}: run `npm ci` in restate/, or set {SERVER_ENV} to the binary",
                looked_at.display()
            ),
            RestateError::Spawn(e) => write!(f, "cannot start restate-server: {e}"),
            RestateError::Dir(e) => {
                write!(f, "cannot make restate-server's data directory or log: {e}")
            }
            RestateError::Ports(e) => write!(f, "no free loopback port for restate-server: {e}"),
            RestateError::Exited { status, log } => {
                write!(f, "restate-server exited before it answered ({status}); its log ends:\n{log}")
            }
            RestateError::NotReady { log } => write!(
                f,
                "restate-server did not answer within {} s; its log ends:\n{log}",
                READY_TIMEOUT.as_secs()
            ),
            RestateError::Http { request, source } => {
                write!(f, "restate-server's admin API did not answer {request}: {source}")
            }
            RestateError::Refused {
                request,
                status,
                body,
            } => write!(f, "restate-server's admin API refused {request} ({status}): {body}"),
        }
    }
}

impl std::error::Error for RestateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RestateError::Spawn(e) | RestateError::Dir(e) | RestateError::Ports(e) => Some(e),
            RestateError::Http { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A running `restate-server`, killed (and its data directory removed) on
/// drop.
#[derive(Debug)]
pub struct RestateProcess {
    child: Option<Child>,
    binary: PathBuf,
    dir: PathBuf,
    ingress: u16,
    admin: u16,
    node: u16,
}

impl RestateProcess {
    /// The binary to run: `TOOLSTACK_RESTATE_SERVER` if set, else the one
    /// npm installs for this platform under `restate/node_modules` in the
    /// workspace; [`RestateError::Missing`] when that file is not there.
    pub fn binary() -> Result<PathBuf, RestateError> {
        let path = match std::env::var_os(SERVER_ENV) {
            Some(path) => PathBuf::from(path),
            None => npm_binary(),
        };
        if path.is_file() {
            Ok(path)
        } else {
            Err(RestateError::Missing { looked_at: path })
        }
    }

    /// Starts one on free loopback ports with an empty data directory
    /// (`name` names it); returns once its admin API and its ingress
    /// answer. A port another process took between our probe and the
    /// server's bind makes it exit: it is tried again on other ports.
    pub fn start(name: &str) -> Result<RestateProcess, RestateError> {
        let binary = Self::binary()?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "toolstack-restate-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(RestateError::Dir)?;
        let mut restate = RestateProcess {
            child: None,
            binary,
            dir,
            ingress: 0,
            admin: 0,
            node: 0,
        };
        let mut attempts = 0;
        loop {
            [restate.ingress, restate.admin, restate.node] = free_ports()?;
            match restate.restart() {
                Err(RestateError::Exited { .. }) if attempts < 4 => {
                    attempts += 1;
                    // Empty again: a node that began on other ports
                    // remembers them.
                    let _ = std::fs::remove_dir_all(&restate.dir);
                    std::fs::create_dir_all(&restate.dir).map_err(RestateError::Dir)?;
                }
                Err(e) => return Err(e),
                Ok(()) => return Ok(restate),
            }
        }
    }

    /// The ingress: `http://127.0.0.1:{port}` (invoke handlers at
    /// `/{service}/{handler}`, resolve a workflow's promise through its
    /// shared handlers).
    pub fn ingress_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ingress)
    }

    /// The admin API: `http://127.0.0.1:{port}` (`/deployments`,
    /// `/health`, `/query`).
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin)
    }

    /// The ingress port.
    pub fn ingress_port(&self) -> u16 {
        self.ingress
    }

    /// The admin port.
    pub fn admin_port(&self) -> u16 {
        self.admin
    }

    /// Its data directory (`--base-dir`), kept across restarts.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Stops it (if running) and starts it again on the same ports and the
    /// same data directory; returns once its admin API and its ingress
    /// answer.
    pub fn restart(&mut self) -> Result<(), RestateError> {
        self.kill();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(RestateError::Dir)?;
        let err = log.try_clone().map_err(RestateError::Dir)?;
        let child = Command::new(&self.binary)
            .arg("--base-dir")
            .arg(&self.dir)
            // One name for every start: a node keeps its identity (and
            // with it its data) only under the same name.
            .args(["--node-name", "toolstack", "--no-logo"])
            // TCP only: the unix sockets it would also make live in the
            // data directory, whose temporary path may pass the 108
            // bytes a socket's path may have.
            .args(["--listen-mode", "tcp"])
            .env("RESTATE_INGRESS__BIND_ADDRESS", loopback(self.ingress))
            .env("RESTATE_ADMIN__BIND_ADDRESS", loopback(self.admin))
            .env("RESTATE_BIND_ADDRESS", loopback(self.node))
            .env("RESTATE_LOG_DISABLE_ANSI_CODES", "true")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(RestateError::Spawn)?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), RestateError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(RestateError::Exited {
                        status,
                        log: self.log_tail(),
                    });
                }
            }
            if self.healthy() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(RestateError::NotReady {
            log: self.log_tail(),
        })
    }

    /// Whether its admin API (`GET /health`) and its ingress
    /// (`GET /restate/health`) both answer 200.
    pub fn healthy(&self) -> bool {
        let answers =
            |port: u16, path: &str| matches!(request(port, "GET", path, None), Ok((200, _)));
        answers(self.admin, "/health") && answers(self.ingress, "/restate/health")
    }

    /// Registers the service deployment at `uri` (an SDK's HTTP/2
    /// endpoint, e.g. `http://127.0.0.1:9080`): `POST /deployments`, with
    /// `force` so that a service that changed while developing replaces
    /// the one registered. The server asks the deployment for its services
    /// first (`GET {uri}/discover`), so it must be serving. Returns the
    /// admin API's answer: the deployment's id and its services, as JSON.
    pub fn register(&self, uri: &str) -> Result<serde_json::Value, RestateError> {
        self.register_with(uri, false)
    }

    /// Registers a deployment that speaks HTTP/1.1 only (`use_http_11`):
    /// its discovery must then declare the request-response protocol mode.
    pub fn register_http1(&self, uri: &str) -> Result<serde_json::Value, RestateError> {
        self.register_with(uri, true)
    }

    fn register_with(&self, uri: &str, http1: bool) -> Result<serde_json::Value, RestateError> {
        let body = serde_json::json!({ "uri": uri, "force": true, "use_http_11": http1 });
        self.admin_json("POST", "/deployments", Some(&body.to_string()))
    }

    /// The deployments it knows: `GET /deployments`, as JSON
    /// (`{"deployments": [{"id", "uri", "services", …}]}`).
    pub fn deployments(&self) -> Result<serde_json::Value, RestateError> {
        self.admin_json("GET", "/deployments", None)
    }

    fn admin_json(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<serde_json::Value, RestateError> {
        let name = || format!("{method} {path}");
        let (status, answer) =
            request(self.admin, method, path, body).map_err(|source| RestateError::Http {
                request: name(),
                source,
            })?;
        if !(200..300).contains(&status) {
            return Err(RestateError::Refused {
                request: name(),
                status,
                body: answer,
            });
        }
        serde_json::from_str(&answer).map_err(|e| RestateError::Http {
            request: name(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    /// Stops it with SIGKILL and waits for it to be gone; its data
    /// directory stays for [`RestateProcess::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("restate-server.log")
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read(self.log_path()).unwrap_or_default();
        let mut start = log.len().saturating_sub(LOG_TAIL_BYTES);
        // Start at a line.
        if let Some(newline) = log[start..].iter().position(|&b| b == b'\n') {
            if start > 0 {
                start += newline + 1;
            }
        }
        String::from_utf8_lossy(&log[start..]).into_owned()
    }
}

impl Drop for RestateProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where `npm ci` in `restate/` puts the server binary for this platform:
/// `@restatedev/restate-server` depends on one optional package per
/// platform (`@restatedev/restate-server-linux-x64`, …) that holds it.
fn npm_binary() -> PathBuf {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        os => os,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        arch => arch,
    };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../restate/node_modules/@restatedev")
        .join(format!("restate-server-{os}-{arch}"))
        .join("bin/restate-server")
}

fn free_ports() -> Result<[u16; 3], RestateError> {
    // All three held at once, so that they differ.
    let listeners = [(); 3].map(|()| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)));
    let mut ports = [0; 3];
    for (port, listener) in ports.iter_mut().zip(listeners) {
        *port = listener
            .and_then(|l| l.local_addr())
            .map_err(RestateError::Ports)?
            .port();
    }
    Ok(ports)
}

fn loopback(port: u16) -> String {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port)).to_string()
}

/// One HTTP/1.1 request to `127.0.0.1:port`, the connection closed after
/// it: the status and the body (bounded; a chunked body is not decoded —
/// the admin API sends its JSON with a length).
fn request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_secs(1),
    )?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n\
         content-type: application/json\r\naccept: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = Vec::new();
    stream.take(MAX_ANSWER_BYTES).read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("an answer without the end of its headers"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("an answer without a status line"))?;
    Ok((status, body.to_owned()))
}
