//! The round where the store itself goes away: two workers share one
//! `redis-server` that keeps an append-only file (`appendfsync always`);
//! every chat waits for approval; the approvals are answered in a shuffled
//! order, alternately through either worker, and once 60 % of them are
//! sent redis-server is killed with SIGKILL and started again from its
//! file after the outage.
//!
//! A client here does what a front end would: a `503` is asked again after
//! its `Retry-After`, a `409` (the run held elsewhere) after 100 ms, and a
//! response that ends with an `error` chunk (the run store gave up) is sent
//! again — through the other worker — after 500 ms.
//!
//! Within the bound a run rides out (the library's default, 15 s), every
//! run must finish as if nothing happened: no error chunk, no refusal, the
//! write reported written. Past it, every run must finish — after the store
//! returns, or once its answer is sent again — its write in the ledger
//! exactly once and reported truthfully ("wrote", or "may have run" for a
//! write whose result was never stored); every `503` must carry
//! `Retry-After`; and no run may be left `running` in the store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use toolstack::agent::store::redis::RedisStore;
use toolstack::agent::store::{RunStatus, RunStore};
use toolstack::agent::DEFAULT_STORE_OUTAGE;
use toolstack_demo::redis_server::RedisProcess;

use crate::{count_lines, percentile, Proof, Waiting};

/// The workers' lease: the library's default (60 s), so that the bound on
/// an outage a run rides out is the default too (15 s, half the lease at
/// most).
const LEASE_MS: u64 = 60_000;

/// The most one answer may take, refusals and resends included.
const ANSWER_DEADLINE: Duration = Duration::from_secs(240);

/// What one chat's answer met on its way to the end.
#[derive(Debug, Default)]
struct Answer {
    /// The write's result as the model read it, when the run finished.
    result: Option<String>,
    /// The last response's status and chunks, when it did not.
    failure: Option<String>,
    /// The texts of the `error` chunks that ended its responses.
    errors: Vec<String>,
    /// `503`s, and how many of them had no `Retry-After`.
    unavailable: usize,
    without_retry_after: usize,
    /// `409`s while the run was held by another process.
    held: usize,
    /// When it was first sent, and when it finished.
    began: Option<Instant>,
    ended: Option<Instant>,
}

/// What an outage round found.
#[derive(Debug, Default)]
pub(crate) struct OutageReport {
    outage: Duration,
    runs: usize,
    finished: usize,
    /// Finished without an error chunk or a refusal on the way.
    untouched: usize,
    lost: usize,
    twice: usize,
    interrupted: usize,
    stranded: usize,
    error_chunks: usize,
    /// Error chunks that do not say the store was unavailable and that
    /// the answer can be sent again.
    untrue_errors: usize,
    unavailable: usize,
    without_retry_after: usize,
    held: usize,
    /// For each answer sent before the store was back and ended after:
    /// how long after.
    recovered_us: Vec<u64>,
    /// From the store's return to the last run's end.
    all_done_ms: u64,
}

impl OutageReport {
    /// Within the bound a run rides out, nothing may show.
    fn ridden_out(&self) -> bool {
        self.outage < DEFAULT_STORE_OUTAGE
    }

    fn passed(&self) -> bool {
        let every_run = self.finished == self.runs
            && self.lost == 0
            && self.twice == 0
            && self.stranded == 0
            && self.untrue_errors == 0
            && self.without_retry_after == 0;
        every_run && (!self.ridden_out() || self.untouched == self.runs)
    }

    pub(crate) fn said(self) -> (String, bool) {
        (self.to_string(), self.passed())
    }
}

impl std::fmt::Display for OutageReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |q: f64| percentile(&self.recovered_us, q) as f64 / 1000.0;
        write!(
            f,
            "{}/{} runs finished ({} as if nothing happened), {} answered approvals lost, {} writes run twice, \
             {} runs left running, {} writes read as interrupted; {} error chunks ({} not saying the store was \
             unavailable and to send again), {} answers refused 503 ({} without Retry-After), {} refused while held; \
             of the {} answers sent before the store returned and unfinished then, half finished within {:.1} ms of its return, 99 % within {:.1} ms, the last after {} ms — {}",
            self.finished,
            self.runs,
            self.untouched,
            self.lost,
            self.twice,
            self.stranded,
            self.interrupted,
            self.error_chunks,
            self.untrue_errors,
            self.unavailable,
            self.without_retry_after,
            self.held,
            self.recovered_us.len(),
            ms(0.5),
            ms(0.99),
            self.all_done_ms,
            if self.passed() { "ok" } else { "FAILED" },
        )
    }
}

impl Proof {
    /// The round: see the [module docs](self).
    pub(crate) async fn outage_round(
        &self,
        outage: Duration,
    ) -> Result<OutageReport, Box<dyn std::error::Error>> {
        let name = format!("durable-runs-outage-{}", outage.as_millis());
        let mut redis = RedisProcess::start_durable(&name)?;
        let url = redis.url();
        let ledger = self.dir.join(format!("{name}.ledger"));
        let store = ["--store", "redis", "--url", url.as_str()];
        let a = self.spawn("a", &store, &ledger, LEASE_MS)?;
        let b = self.spawn("b", &store, &ledger, LEASE_MS)?;
        let mut waiting = self.ask_all(&a.url).await?;
        shuffle(&mut waiting);

        let (sent, back) = (&AtomicUsize::new(0), &OnceLock::<Instant>::new());
        let kill_at = (self.runs * 3 / 5).max(1);
        let ledger = &ledger;
        let fault = async move {
            // 60 % sent, and some write under way, so that the outage
            // meets runs at every stage.
            while sent.load(Ordering::SeqCst) < kill_at || count_lines(ledger).is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            redis.stop();
            tokio::time::sleep(outage).await;
            let restarted = tokio::task::spawn_blocking(move || {
                redis.restart().map(|()| redis).map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|restarted| restarted);
            let _ = back.set(Instant::now());
            restarted
        };
        let urls = [a.url.as_str(), b.url.as_str()];
        let answers = futures_util::stream::iter(waiting.iter().enumerate())
            .map(|(i, w)| {
                sent.fetch_add(1, Ordering::SeqCst);
                async move { (i, self.answer_through(urls, i, w).await) }
            })
            .buffer_unordered(64)
            .collect::<Vec<_>>();
        let (answers, redis) = futures_util::join!(answers, fault);
        let redis = redis.map_err(|e| format!("redis-server did not come back: {e}"))?;
        let back = *back.get().ok_or("the store never came back")?;

        let mut report = OutageReport {
            outage,
            runs: self.runs,
            ..OutageReport::default()
        };
        let counts = count_lines(ledger);
        report.twice = counts.values().filter(|n| **n > 1).count();
        for (i, answer) in answers {
            let w = &waiting[i];
            if !counts.contains_key(&w.row) {
                // An approved write that never ran.
                report.lost += 1;
                eprintln!(
                    "lost: {} never reached the ledger; its answer ended with {:?} after the errors {:?}",
                    w.row, answer.result, answer.errors
                );
            }
            report.tally(w, answer, back);
        }
        report.stranded = stranded(&redis.url(), &waiting).await?;
        drop((a, b));
        Ok(report)
    }

    /// Answers `w` through one worker (the other after an error chunk)
    /// until its run finishes, as a front end would: see the module docs.
    async fn answer_through(&self, urls: [&str; 2], i: usize, w: &Waiting) -> Answer {
        let mut answer = Answer {
            began: Some(Instant::now()),
            ..Answer::default()
        };
        let mut at = i % 2;
        let deadline = Instant::now() + ANSWER_DEADLINE;
        while Instant::now() < deadline {
            let answered = match self.post(urls[at], Proof::approved(w)).await {
                Ok(answered) => answered,
                Err(err) => {
                    answer.failure = Some(format!("{}: {err}", w.row));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            match answered.status {
                409 if answered.kind.as_deref() == Some("held") => {
                    answer.held += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                503 => {
                    answer.unavailable += 1;
                    answer.without_retry_after += usize::from(answered.retry_after.is_none());
                    let secs = answered.retry_after.unwrap_or(1);
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    continue;
                }
                _ => {}
            }
            let errors: Vec<String> = answered
                .chunks
                .iter()
                .filter(|c| c["type"] == "error")
                .map(|c| c["errorText"].as_str().unwrap_or_default().to_owned())
                .collect();
            if answered.status == 200 && !errors.is_empty() {
                answer.errors.extend(errors);
                at = 1 - at;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let stopped = answered.stopped();
            let output = answered.tool_result();
            // A run resumed past its write (its result stored before the
            // store went away) only answers: the model says what the
            // write returned ("{row}: {result}").
            let said = || {
                let text: String = answered
                    .chunks
                    .iter()
                    .filter(|c| c["type"] == "text-delta")
                    .filter_map(|c| c["delta"].as_str())
                    .collect();
                text.strip_prefix(&format!("{}: ", w.row))
                    .map(str::to_owned)
            };
            answer.result = output.or_else(said);
            if !stopped || answer.result.is_none() {
                answer.result = None;
                answer.failure = Some(format!(
                    "{}: status {}, {:?}",
                    w.row, answered.status, answered.chunks
                ));
            }
            answer.ended = Some(Instant::now());
            return answer;
        }
        answer.failure = Some(format!(
            "{}: not finished within {ANSWER_DEADLINE:?} ({})",
            w.row,
            answer.failure.as_deref().unwrap_or("refused throughout")
        ));
        answer
    }
}

impl OutageReport {
    fn tally(&mut self, w: &Waiting, answer: Answer, back: Instant) {
        self.error_chunks += answer.errors.len();
        // The truth, and what to do: the store, and that the answer can be
        // sent again.
        self.untrue_errors += answer
            .errors
            .iter()
            .filter(|e| !(e.contains("store") && e.contains("unavailable") && e.contains("again")))
            .inspect(|e| eprintln!("an error chunk that does not say what to do: {e}"))
            .count();
        self.unavailable += answer.unavailable;
        self.without_retry_after += answer.without_retry_after;
        self.held += answer.held;
        let in_flight = answer.began.is_some_and(|began| began < back);
        if let Some(ended) = answer.ended.filter(|ended| in_flight && *ended > back) {
            let after = ended - back;
            self.recovered_us.push(after.as_micros() as u64);
            self.all_done_ms = self.all_done_ms.max(after.as_millis() as u64);
        }
        let Some(result) = answer.result else {
            self.lost += 1;
            eprintln!("lost: {}", answer.failure.as_deref().unwrap_or("no result"));
            return;
        };
        let wrote = result == format!("wrote {}", w.row);
        let interrupted = result.contains("may have run");
        if !(wrote || interrupted) {
            self.lost += 1;
            eprintln!("lost: {} ended with {result:?}", w.row);
            return;
        }
        self.finished += 1;
        self.interrupted += usize::from(interrupted);
        let touched = !answer.errors.is_empty() || answer.unavailable > 0 || answer.held > 0;
        self.untouched += usize::from(wrote && !touched);
    }
}

/// How many of the chats' runs the store holds in any state but `done`:
/// none may be left `running` once every answer ended.
async fn stranded(url: &str, waiting: &[Waiting]) -> Result<usize, Box<dyn std::error::Error>> {
    let store = RedisStore::connect(url).await?;
    let mut stranded = 0;
    for w in waiting {
        // The approval id is `{run id}:{call id}`.
        let run_id = w.approval_id.split(':').next().unwrap_or_default();
        let status = store
            .load(run_id)
            .await?
            .map(|stored| stored.checkpoint.status);
        if !matches!(status, Some(RunStatus::Done { .. })) {
            eprintln!("stranded: {} (run {run_id}) is {status:?}", w.row);
            stranded += 1;
        }
    }
    Ok(stranded)
}

/// A fixed shuffle (xorshift), so that the answers come in an order of
/// their own, the same in every run of the proof.
fn shuffle<T>(items: &mut [T]) {
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..items.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        items.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}
