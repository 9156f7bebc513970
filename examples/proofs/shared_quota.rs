//! The scale-out proof for the shared rate limit: W worker processes (this
//! binary, `--worker`) call a tool behind one `RateLimitLayer` quota kept
//! in Redis (`RedisLimiter`, same prefix), as hard as they can, for S
//! seconds. The parent starts its own `redis-server`, sums what the
//! workers admitted, and compares it with the quota; then it runs the
//! workers again and stops Redis half-way, once failing open (each worker's
//! local limiter takes over) and once failing closed (`Unavailable`).
//!
//! A quota can only be given to calls that ask for it: when no ask reaches
//! Redis for longer than one cell (the machine gave the workers, or Redis,
//! no CPU), the cells of that gap are gone — GCRA keeps a burst, not a
//! backlog. The parent therefore watches what Redis runs (`MONITOR`, with
//! the server's own timestamps) and judges the admitted count against the
//! quota less what those gaps cost: within 2 % where demand was
//! continuous, and never over the quota plus its burst.
//!
//! ```text
//! cargo build --release --example shared_quota
//! target/release/examples/shared_quota --quota 2000 --seconds 30 --workers 4 --outage-seconds 10
//! ```

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::num::NonZeroU32;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tower::{ServiceBuilder, ServiceExt};

use toolstack::{tool, ErrorKind, ToolError, ToolRequest, ToolResult};
use toolstack_demo::redis_server::RedisProcess;
use toolstack_layers::rate_limit::{Quota, RateLimitLayer, RedisLimiter};

/// Counts are kept per slot of this length.
const SLOT: Duration = Duration::from_millis(100);

/// The command timeout of the shared-quota run, in milliseconds: Redis
/// stays up, so an answer is waited for (the outage runs keep 250 ms).
const PATIENT_MS: u64 = 10_000;

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

const USAGE: &str = "\
Usage: shared_quota [--quota N] [--seconds S] [--workers W] [--outage-seconds S] [--outage-quota N]
  (cargo run --release --example shared_quota -- ...; needs redis-server on PATH)

W worker processes call a tool behind one quota kept in Redis; then Redis
stops half-way, once failing open and once failing closed.
  --quota N            calls per second for all workers (2000)
  --seconds S          how long the first round lasts (30)
  --workers W          worker processes (4)
  --outage-seconds S   how long each outage round lasts (4)
  --outage-quota N     the outage rounds' quota (a tenth of --quota)
  -h, --help           this text
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--worker") {
        return worker(&args).await;
    }
    let quota: u32 = flag(&args, "--quota", 2000);
    let seconds: u64 = flag(&args, "--seconds", 30);
    let workers: usize = flag(&args, "--workers", 4);
    let outage_seconds: u64 = flag(&args, "--outage-seconds", 4);
    let mut redis = RedisProcess::start("shared-quota")?;
    println!(
        "{workers} worker processes share a quota of {quota} calls/s in Redis ({})",
        redis.url()
    );

    // A small burst (a hundredth of a second, and at least 2: with 1 the
    // bucket has no tolerance, and a refused ask would bound no gap), so
    // that the steady rate is the quota's.
    let burst = (quota / 100).max(2);

    // 1. The shared quota, Redis up. Failing closed: a store that does not
    // answer then refuses rather than admitting on the local limiters,
    // which could hide a quota that is not shared.
    let monitor = Monitor::start(redis.port())?;
    let run = run_workers(
        workers,
        &redis.url(),
        // A patient timeout: a slow answer is waited for, not refused as
        // `Unavailable` after Redis took the cell.
        (quota, burst, PATIENT_MS),
        seconds,
        "closed",
        "shared",
        None,
        &mut redis,
    )?;
    let asks = monitor.stop();
    let window = (run.start_us + 1_000_000, run.start_us + seconds * 1_000_000);
    let interval_us = 1_000_000 / u64::from(quota);
    let gaps = Gaps::measure(&asks, window, interval_us);
    // What the gaps cost when the ask before each was refused (as nearly
    // every ask is, under saturation): their time beyond the tolerance.
    let tolerance_us = interval_us * u64::from(burst - 1);
    let likely = Gaps::measure(&asks, window, tolerance_us.max(interval_us));
    let steady = run.rate(1.0, seconds as f64);
    let span = (seconds - 1) as f64;
    let expected = f64::from(quota) * span;
    let admitted = steady * span;
    let lost = gaps.lost_us as f64 / interval_us as f64;
    let error = (admitted - expected) / expected * 100.0;
    let error_continuous = (admitted - (expected - lost)) / (expected - lost) * 100.0;
    println!(
        "\nshared quota, {seconds} s: admitted {} calls ({steady:.1}/s from 1 s to the end; {error:+.2} % of the quota), refused {}, unavailable {}, per worker {:?}",
        run.admitted(),
        run.refused,
        run.unavailable,
        run.per_worker
    );
    println!(
        "Redis ran {} asks from 1 s to the end; {} gaps longer than a cell ({interval_us} µs), longest {:.1} ms, {:.1} ms beyond a cell in all: at most {lost:.0} calls no ask was there to take ({} gaps past the burst's tolerance of {tolerance_us} µs, {:.0} calls, when the ask before each was refused); admitted {error_continuous:+.2} % of the quota where demand was continuous",
        gaps.asks,
        gaps.count,
        gaps.longest_us as f64 / 1000.0,
        gaps.lost_us as f64 / 1000.0,
        likely.count,
        likely.lost_us as f64 / interval_us as f64,
    );
    let burst = f64::from(burst);
    // GCRA never gives more than the quota and its burst, whatever the
    // machine does; it gives less only by the cells of the gaps.
    let not_over = admitted <= expected * 1.02 + burst;
    let not_under = admitted >= (expected - lost) * 0.98 - burst;
    // A run whose demand was mostly gaps proves nothing either way; nor
    // does one where Redis left a call unanswered for 10 s.
    let judged = gaps.lost_us <= (window.1 - window.0) * 3 / 4 && run.unavailable == 0;
    if run.unavailable > 0 {
        println!(
            "!! {} calls got no answer from Redis within {PATIENT_MS} ms: too busy to judge the quota",
            run.unavailable
        );
    }
    if gaps.lost_us > (window.1 - window.0) * 3 / 4 {
        println!(
            "!! the machine left Redis without asks for {:.0} ms of {:.0}: too busy to judge the quota",
            gaps.lost_us as f64 / 1000.0,
            (window.1 - window.0) as f64 / 1000.0
        );
    }
    let within = not_over && not_under && judged;

    // 2. Redis stopped half-way, failing open, then failing closed, at a
    // tenth of the quota: what tells the modes apart (one quota shared,
    // one per process, none) then needs little of the machine.
    let half = outage_seconds as f64 / 2.0;
    let small = flag(&args, "--outage-quota", (quota / 10).max(1));
    let mut outcomes = Vec::new();
    for mode in ["open", "closed"] {
        redis.restart()?;
        let stop_at = Duration::from_secs_f64(half);
        let run = run_workers(
            workers,
            &redis.url(),
            // A tenth of a second of burst: a process that the machine
            // leaves off the CPU for a moment does not lose its cells.
            (small, (small / 10).max(2), 250),
            outage_seconds,
            mode,
            mode,
            Some(stop_at),
            &mut redis,
        )?;
        let before = run.rate(0.5, half);
        let after = run.rate(half + 0.5, outage_seconds as f64);
        println!(
            "fail {mode} at {small} calls/s, Redis stopped at {half} s: {before:.0} admitted/s before, {after:.0}/s after; {} unavailable",
            run.unavailable
        );
        outcomes.push((before, after, run.unavailable));
    }
    let small = f64::from(small);
    let shared = |rate: f64| rate < small * 1.5;
    let (open_before, open_after, open_unavailable) = outcomes[0];
    let (closed_before, closed_after, closed_unavailable) = outcomes[1];
    // Failing open, each process has its own quota: together more than
    // one, at most one each.
    let open_ok = shared(open_before)
        && open_after > small * 1.5
        && open_after < small * (workers as f64 + 0.5)
        && open_unavailable == 0;
    let closed_ok = shared(closed_before) && closed_after < small * 0.05 && closed_unavailable > 0;
    println!(
        "\nnot over the quota and its burst: {not_over}; within 2 % of the quota where demand was continuous: {within}; fail open admits on the local limiters: {open_ok}; fail closed refuses: {closed_ok}"
    );
    if !(within && open_ok && closed_ok) {
        return Err("the shared-quota proof failed (see above)".into());
    }
    Ok(())
}

/// What the workers of one run counted, summed.
struct Run {
    /// The common start, in microseconds since the epoch.
    start_us: u64,
    /// Admitted calls per slot since the common start.
    slots: Vec<u64>,
    refused: u64,
    unavailable: u64,
    per_worker: Vec<u64>,
}

impl Run {
    fn admitted(&self) -> u64 {
        self.slots.iter().sum()
    }

    /// Admitted calls per second from `from` to `to` seconds.
    fn rate(&self, from: f64, to: f64) -> f64 {
        let slot = SLOT.as_secs_f64();
        let (a, b) = ((from / slot).round() as usize, (to / slot).round() as usize);
        let n: u64 = self.slots[a.min(self.slots.len())..b.min(self.slots.len())]
            .iter()
            .sum();
        n as f64 / (to - from)
    }
}

#[allow(clippy::too_many_arguments)]
fn run_workers(
    workers: usize,
    url: &str,
    (quota, burst, timeout_ms): (u32, u32, u64),
    seconds: u64,
    mode: &str,
    prefix: &str,
    stop_redis_at: Option<Duration>,
    redis: &mut RedisProcess,
) -> Result<Run, Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    // A common start, a moment ahead, so every worker counts from the same instant.
    let start = now_ms() + 1500;
    let children: Vec<Child> = (0..workers)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--worker", "--redis", url, "--mode", mode, "--prefix", prefix,
                ])
                .args([
                    "--quota",
                    &quota.to_string(),
                    "--burst",
                    &burst.to_string(),
                    "--timeout-ms",
                    &timeout_ms.to_string(),
                    "--seconds",
                    &seconds.to_string(),
                ])
                .args(["--start", &start.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    if let Some(at) = stop_redis_at {
        let wait = (start + at.as_millis()).saturating_sub(now_ms());
        std::thread::sleep(Duration::from_millis(wait as u64));
        redis.stop();
    }
    let mut run = Run {
        start_us: start as u64 * 1000,
        slots: Vec::new(),
        refused: 0,
        unavailable: 0,
        per_worker: Vec::new(),
    };
    for mut child in children {
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        child.wait()?;
        let report: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| format!("a worker's report {line:?}: {e}"))?;
        let slots: Vec<u64> = serde_json::from_value(report["slots"].clone())?;
        if run.slots.len() < slots.len() {
            run.slots.resize(slots.len(), 0);
        }
        for (sum, n) in run.slots.iter_mut().zip(&slots) {
            *sum += n;
        }
        run.per_worker.push(slots.iter().sum());
        run.refused += report["refused"].as_u64().unwrap_or(0);
        run.unavailable += report["unavailable"].as_u64().unwrap_or(0);
    }
    Ok(run)
}

/// One worker: calls as hard as it can through the shared quota and
/// reports, as one JSON line, what was admitted per slot.
async fn worker(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let url: String = flag(args, "--redis", String::new());
    let quota: u32 = flag(args, "--quota", 2000);
    let seconds: u64 = flag(args, "--seconds", 30);
    let prefix: String = flag(args, "--prefix", "shared".to_owned());
    let start: u128 = flag(args, "--start", now_ms());
    let closed = flag(args, "--mode", "open".to_owned()) == "closed";
    let timeout = Duration::from_millis(flag(args, "--timeout-ms", 250));

    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    let manager = ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?;
    let limiter = RedisLimiter::new(manager)
        .prefix(format!("proof:{prefix}"))
        .timeout(timeout);
    let limiter = if closed {
        limiter.fail_closed()
    } else {
        limiter.fail_open()
    };
    // The burst the parent chose (small: the steady rate is the quota's).
    let per_second = NonZeroU32::new(quota).ok_or("the quota must be positive")?;
    let burst = NonZeroU32::new(flag(args, "--burst", 1)).ok_or("the burst must be positive")?;
    let limit = RateLimitLayer::global(Quota::per_second(per_second).allow_burst(burst))
        .reject()
        .redis(limiter);
    let work = tool::from_fn("work", |_: serde_json::Value| async {
        Ok::<_, ToolError>("done")
    });
    // In a toolbox: its calls are boxed, so the spawned loops are `Send`.
    let work = toolstack::Toolbox::new().layered(work, ServiceBuilder::new().layer(limit));

    let wait = start.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    // Counted from the common start, even by a worker that reached it late.
    let late = Duration::from_millis(now_ms().saturating_sub(start) as u64);
    let now = tokio::time::Instant::now();
    let began = now.checked_sub(late).unwrap_or(now);
    let end = began + Duration::from_secs(seconds);
    let slots = Arc::new(Mutex::new(vec![
        0u64;
        (seconds * 1000 / SLOT.as_millis() as u64)
            as usize
            + 1
    ]));
    let (refused, unavailable) = (Arc::new(Mutex::new(0u64)), Arc::new(Mutex::new(0u64)));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (work, slots, refused, unavailable, stop) = (
                work.clone(),
                slots.clone(),
                refused.clone(),
                unavailable.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < end {
                    let outcome = match work.clone().oneshot(ToolRequest::new("work", "{}")).await {
                        Ok(stream) => ToolResult::collect(stream).await.error.map_or(Ok(()), Err),
                        Err(err) => Err(err),
                    };
                    let at = began.elapsed();
                    match outcome {
                        Ok(()) => {
                            let slot = (at.as_millis() / SLOT.as_millis()) as usize;
                            if let Some(n) = slots.lock().unwrap().get_mut(slot) {
                                *n += 1;
                            }
                        }
                        Err(err) if matches!(err.kind(), ErrorKind::RateLimited { .. }) => {
                            *refused.lock().unwrap() += 1
                        }
                        Err(err) if err.kind() == ErrorKind::Unavailable => {
                            *unavailable.lock().unwrap() += 1;
                            // Failing closed is at once: do not spin on it.
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        Err(err) => return Err(err),
                    }
                }
                Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    stop.store(true, Ordering::Relaxed);
    let slots = slots.lock().unwrap().clone();
    let report = serde_json::json!({
        "slots": slots,
        "refused": *refused.lock().unwrap(),
        "unavailable": *unavailable.lock().unwrap(),
    });
    println!("{report}");
    Ok(())
}

/// What Redis ran, as it ran it: a `MONITOR` connection read on a thread,
/// keeping the server's timestamp (microseconds since the epoch) of each
/// script call.
struct Monitor {
    stop: Arc<AtomicBool>,
    reader: std::thread::JoinHandle<Vec<u64>>,
}

impl Monitor {
    fn start(port: u16) -> Result<Monitor, Box<dyn std::error::Error>> {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        stream.write_all(b"MONITOR\r\n")?;
        stream.set_read_timeout(Some(Duration::from_millis(100)))?;
        let mut lines = BufReader::new(stream);
        let mut ok = String::new();
        lines.read_line(&mut ok)?;
        if ok.trim_end() != "+OK" {
            return Err(format!("MONITOR answered {ok:?}").into());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let reader = std::thread::spawn(move || {
            let mut asks = Vec::new();
            let mut line = Vec::new();
            // Until told to stop and then nothing more comes for 100 ms:
            // what Redis buffered for this connection is read to the end.
            loop {
                match lines.read_until(b'\n', &mut line) {
                    // `+1764600000.123456 [0 127.0.0.1:5000] "EVALSHA" …`
                    Ok(n) if n > 0 && line.ends_with(b"\n") => {
                        if let Some(at) = script_call_at(&line) {
                            asks.push(at);
                        }
                        line.clear();
                    }
                    Ok(0) => break,
                    // A timeout (mid-line keeps what was read).
                    _ if stopped.load(Ordering::Relaxed) => break,
                    _ => {}
                }
            }
            asks
        });
        Ok(Monitor { stop, reader })
    }

    fn stop(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let mut asks = self.reader.join().unwrap_or_default();
        asks.sort_unstable();
        asks
    }
}

/// The server's timestamp of a `MONITOR` line, when it is a script call.
fn script_call_at(line: &[u8]) -> Option<u64> {
    let line = std::str::from_utf8(line).ok()?;
    let (stamp, rest) = line.strip_prefix('+')?.split_once(' ')?;
    if !(rest.contains("\"EVALSHA\"") || rest.contains("\"EVAL\"")) {
        return None;
    }
    let (secs, micros) = stamp.split_once('.')?;
    Some(secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?)
}

/// The gaps between asks, within a window, that were longer than a cell.
/// After an ask, the bucket's arrival time is at least a cell ahead (it
/// was admitted) or the burst tolerance ahead (refused; with a burst of at
/// least 2, the tolerance is at least a cell), so a gap loses at most what
/// it lasts beyond one cell: the admitted count falls short of the quota
/// by at most `lost_us` over the cell.
struct Gaps {
    asks: usize,
    count: usize,
    longest_us: u64,
    lost_us: u64,
}

impl Gaps {
    fn measure(asks: &[u64], (from, to): (u64, u64), cell_us: u64) -> Gaps {
        let inside: Vec<u64> = asks
            .iter()
            .copied()
            .filter(|at| (from..=to).contains(at))
            .collect();
        let mut gaps = Gaps {
            asks: inside.len(),
            count: 0,
            longest_us: 0,
            lost_us: 0,
        };
        // The window's ends count as asks: no ask at all is one long gap.
        let edges = std::iter::once(from)
            .chain(inside.iter().copied())
            .chain(std::iter::once(to));
        let mut previous = None;
        for at in edges {
            if let Some(before) = previous {
                let gap: u64 = at - before;
                if gap > cell_us {
                    gaps.count += 1;
                    gaps.lost_us += gap - cell_us;
                }
                gaps.longest_us = gaps.longest_us.max(gap);
            }
            previous = Some(at);
        }
        gaps
    }
}
