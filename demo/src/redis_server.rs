//! A `redis-server` of a proof's own: a free loopback port, a temporary
//! directory; stopped with SIGKILL, restarted on the same port — empty, or
//! ([`RedisProcess::start_durable`]) from its append-only file, written
//! with `appendfsync always` so that no write it acknowledged is lost. The
//! examples that prove scale-out (`shared_quota`, `durable_runs`) start
//! one.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `redis-server`, killed (and its directory removed) on drop.
#[derive(Debug)]
pub struct RedisProcess {
    child: Option<Child>,
    port: u16,
    dir: std::path::PathBuf,
    /// Writes its append-only file (`appendfsync always`) and reloads it
    /// on a restart.
    durable: bool,
}

impl RedisProcess {
    /// Starts one on a free loopback port; `name` names its directory.
    pub fn start(name: &str) -> Result<RedisProcess, Box<dyn std::error::Error>> {
        Self::start_with(name, false)
    }

    /// Starts one that keeps every write it acknowledges in its
    /// append-only file (`appendonly yes`, `appendfsync always`: the
    /// settings a run store needs) and reloads it when restarted — a store
    /// that goes away and comes back.
    pub fn start_durable(name: &str) -> Result<RedisProcess, Box<dyn std::error::Error>> {
        Self::start_with(name, true)
    }

    fn start_with(name: &str, durable: bool) -> Result<RedisProcess, Box<dyn std::error::Error>> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(format!("toolstack-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut redis = RedisProcess {
            child: None,
            port,
            dir,
            durable,
        };
        redis.restart()?;
        Ok(redis)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:{port}/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Stops it (if running) and starts it again on the same port — empty,
    /// or from its append-only file when durable; returns once it answers
    /// `PING` (a durable one answers once its file is loaded).
    pub fn restart(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        self.stop();
        let persistence: &[&str] = if self.durable {
            &[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ]
        } else {
            &["--save", "", "--appendonly", "no"]
        };
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--dir",
            ])
            .arg(&self.dir)
            .args(persistence)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server (Debian: apt-get install redis-server): {e}")
            })?;
        self.child = Some(child);
        for _ in 0..500 {
            if self.pong() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err("redis-server did not answer PING within 5 s".into())
    }

    fn pong(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let mut answer = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG\r\n"
    }

    /// Stops it with SIGKILL and waits for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
