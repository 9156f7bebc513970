//! A real `redis-server` for one test: its own loopback port and
//! temporary directory, nothing saved, killed when the guard drops.
//!
//! Without `redis-server` on `PATH`, [`RedisServer::start`] says
//! `!! SKIPPED` on stderr and returns `None` — unless
//! `TOOLSTACK_REQUIRE_REDIS` is set, and then it panics.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// The command timeout the tests of a dead or silent Redis give the
/// layers: what a call may wait for Redis, by design.
pub const COMMAND_TIMEOUT: Duration = Duration::from_millis(250);

/// The command timeout of the layers (and connection managers) of the
/// tests in which Redis stays up: far longer than an answer takes even on
/// a stalled machine, so that only a dead or silent Redis makes them fall
/// back.
pub const PATIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a test waits for a call, or for a condition, before it calls
/// it stuck: longer than any timeout above, so that a call a timeout ends
/// is not taken for one that hangs.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// What a stalled machine may add to a call that the command timeout
/// bounds: seconds, so that only a call that waits for something else —
/// a hang, or the far longer timeouts of the connection managers in the
/// tests of a silent Redis — goes past the bound.
pub const STALL: Duration = Duration::from_secs(5);

/// A running `redis-server`, killed (and its directory removed) on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a server on a free loopback port, or says why not: `None`
    /// when `redis-server` is not installed (the test then returns).
    pub fn start(test: &str) -> Option<RedisServer> {
        for _ in 0..5 {
            match Self::try_start() {
                Ok(server) => return Some(server),
                Err(Start::Missing) => {
                    let why =
                        "`redis-server` is not on PATH (Debian: apt-get install redis-server)";
                    assert!(
                        std::env::var_os("TOOLSTACK_REQUIRE_REDIS").is_none(),
                        "TOOLSTACK_REQUIRE_REDIS is set but {why}"
                    );
                    // Straight to the process's stderr: the test harness
                    // captures `eprintln!` of tests that pass.
                    let _ = writeln!(std::io::stderr(), "!! SKIPPED: {test} did NOT run: {why}");
                    return None;
                }
                // Another process took the port between our probe and the
                // server's bind: try another.
                Err(Start::NotReady) => continue,
            }
        }
        panic!("redis-server did not start on five free ports in a row");
    }

    fn try_start() -> Result<RedisServer, Start> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "toolstack-redis-{}-{port}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
            .arg(&dir)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(err) if err.kind() == ErrorKind::NotFound => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Start::Missing);
            }
            Err(err) => panic!("redis-server could not be started: {err}"),
        };
        let mut server = RedisServer {
            child: Some(child),
            port,
            dir,
        };
        // A loaded machine may take seconds to start it; a server that
        // could not bind its port exits, which `wait_ready` sees at once.
        if server.wait_ready(PATIENCE) {
            Ok(server)
        } else {
            server.kill();
            Err(Start::NotReady)
        }
    }

    /// Whether the server answers within `within`.
    fn wait_ready(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            if self.answers() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Whether the server on the port answers, and is this one: two tests
    /// may pick the same free port, and the one whose server then cannot
    /// bind it must not take the other's for its own.
    fn answers(&self) -> bool {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return false;
        };
        let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"INFO server\r\n").is_err() {
            return false;
        }
        let mut reader = BufReader::new(stream);
        let mut header = String::new();
        let Some(len) = reader
            .read_line(&mut header)
            .ok()
            .and_then(|_| header.trim_end().strip_prefix('$')?.parse().ok())
        else {
            return false;
        };
        let mut info = vec![0; len];
        let ours = format!("process_id:{pid}");
        reader.read_exact(&mut info).is_ok()
            && String::from_utf8_lossy(&info)
                .lines()
                .any(|line| line == ours)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a Redis URL")
    }

    /// A connection manager as a process would make one: its own
    /// connection, timeouts near the layers' command timeout, one retry —
    /// for the tests of what a call does when Redis dies.
    pub async fn manager(&self) -> ConnectionManager {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200));
        ConnectionManager::new_with_config(self.client(), config)
            .await
            .expect("a connection to the test's redis-server")
    }

    /// A connection manager for a test in which Redis stays up: its own
    /// connection, [`PATIENT_TIMEOUT`] to connect and to answer.
    pub async fn patient_manager(&self) -> ConnectionManager {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(PATIENT_TIMEOUT))
            .set_response_timeout(Some(PATIENT_TIMEOUT));
        ConnectionManager::new_with_config(self.client(), config)
            .await
            .expect("a connection to the test's redis-server")
    }

    /// A plain connection, for the test to look at (or tamper with) keys.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to the test's redis-server")
    }

    /// Every key, sorted (the server is the test's own).
    pub async fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut self.connection().await)
            .await
            .expect("KEYS");
        keys.sort();
        keys
    }

    /// How many times the server has run `command` (lower case), from
    /// `INFO commandstats`.
    pub async fn command_calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.connection().await)
            .await
            .expect("INFO");
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().expect("a count"))
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

enum Start {
    Missing,
    NotReady,
}

/// Polls `condition` every 5 ms until it holds, for at most `within`;
/// panics with `what` when it never does.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if condition().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
