//! A `redis-server` of a proof's own: a free loopback port, a temporary
//! directory, nothing saved; stopped with SIGKILL, restarted on the same
//! port. The examples that prove scale-out (`shared_quota`,
//! `durable_runs`) start one.

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
}

impl RedisProcess {
    /// Starts one on a free loopback port; `name` names its directory.
    pub fn start(name: &str) -> Result<RedisProcess, Box<dyn std::error::Error>> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(format!("toolstack-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut redis = RedisProcess {
            child: None,
            port,
            dir,
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

    /// Stops it (if running) and starts it again on the same port, empty;
    /// returns once it answers `PING`.
    pub fn restart(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        self.stop();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--dir",
            ])
            .arg(&self.dir)
            .args(["--save", "", "--appendonly", "no"])
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
