//! The engine thread: intake, admission from the conversation cache, batched steps,
//! sampling, and the end of each sequence.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use rwkv_engine::sampler::Sampler;
use rwkv_engine::{
    Engine, EngineError, InitState, PrefixCache, Resumed, Rows, SeqInput, Tokenizer,
};

use super::seq::Seq;
use super::{embed_now, handle_parts, Event, GenJob, Job, Spawned};
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// Most states the conversation cache holds (whatever their size).
const CACHE_MAX_ENTRIES: usize = 4096;
/// Sequences sampled per CPU thread at least before sampling goes parallel.
const SAMPLE_PER_THREAD: usize = 4;

struct Sched {
    tok: Tokenizer,
    rx: mpsc::Receiver<Job>,
    waiting: Arc<AtomicUsize>,
    cache: PrefixCache,
    metrics: Metrics,
    parallel: usize,
    chunk: usize,
    init: Option<Arc<InitState>>,
    queue: VecDeque<GenJob>,
    running: Vec<Seq>,
}

/// Starts the engine thread with `eng`; the returned handle queues requests, and the
/// thread hands the engine back when the server shuts down.
///
/// Errors: the thread cannot be started.
pub fn spawn(mut eng: Engine, cfg: &ServerConfig, metrics: Metrics) -> std::io::Result<Spawned> {
    let (handle, rx, waiting) = handle_parts(cfg, &metrics);
    let tok = eng.tokenizer().clone();
    // The running batch, and room for the cache's GPU share.
    let per_state = (4 * eng.state_len()).max(1) as u64;
    let entry = per_state + 4 * tok.vocab_size() as u64;
    let (budget, gpu_share) = cfg.cache_budgets(entry);
    let cached = (gpu_share / per_state) as usize;
    let slots = reserve_slots(&mut eng, cfg.parallel + 1, cached);
    let cache = PrefixCache::with_gpu_budget(budget, gpu_share, CACHE_MAX_ENTRIES);
    // The batch is capped by the slots the device gave (one kept for the cache's copy of a
    // finished prompt).
    let fit = slots.min(eng.max_states()).saturating_sub(1).max(1);
    if cfg.parallel > fit {
        log::warn!(
            "--parallel {} is above the {fit} states this device holds for this model: \
             {fit} run at once, the rest wait",
            cfg.parallel
        );
    }
    let mut s = Sched {
        tok,
        rx,
        waiting,
        cache,
        metrics,
        parallel: cfg.parallel.min(fit),
        chunk: cfg.prefill_chunk,
        init: cfg.init_state.clone(),
        queue: VecDeque::new(),
        running: Vec::new(),
    };
    let thread = std::thread::Builder::new()
        .name("rwkv-scheduler".into())
        .spawn(move || {
            let mut eng = eng;
            loop {
                match s.run(&mut eng) {
                    Exit::Shutdown => {
                        s.close(&mut eng);
                        return Some(eng);
                    }
                    Exit::Lend(loan) => {
                        // Serving pauses until the engine comes back.
                        let (give, back) = *loan;
                        if let Err(mpsc::SendError(e)) = give.send(eng) {
                            eng = e;
                            continue;
                        }
                        match back.recv() {
                            Ok(e) => eng = e,
                            Err(_) => {
                                log::error!("a borrower kept the engine: the server stops");
                                s.abandon();
                                return None;
                            }
                        }
                    }
                }
            }
        })?;
    Ok(Spawned { handle, thread })
}

/// Grows the engine's state slots up front to `batch` (the running sequences and one
/// for the cache's copy of a finished prompt) plus `cached` (the cache's GPU share):
/// growing rebuilds the graph, better at start than in the middle of serving. Where the
/// device has less room, serving goes on with what fits — the batch without the cache's
/// share (cached states then spill to host memory at once), else what the engine holds.
/// Returns the slots the engine has.
fn reserve_slots(eng: &mut Engine, batch: usize, cached: usize) -> usize {
    let n = batch + cached;
    match eng.reserve_slots(n) {
        Ok(got) => {
            if got < n {
                log::warn!("state slots: {got} of {n} fit (a layer of each in one binding)");
            }
            got
        }
        Err(e) if cached > 0 => {
            log::warn!("state slots for the batch and the cache's GPU share ({n}): {e}");
            reserve_slots(eng, batch, 0)
        }
        Err(e) => {
            log::warn!("state slots: {e}");
            eng.reserve_slots(0).unwrap_or(1)
        }
    }
}

/// Why [`Sched::run`] returned.
enum Exit {
    Shutdown,
    Lend(Box<Loan>),
}

/// The engine goes out on the first channel and comes back on the second.
type Loan = (mpsc::SyncSender<Engine>, mpsc::Receiver<Engine>);

impl Sched {
    /// Serves until shutdown or a loan of the engine.
    fn run(&mut self, eng: &mut Engine) -> Exit {
        loop {
            if self.running.is_empty() && self.queue.is_empty() {
                match self.rx.recv() {
                    Ok(job) => {
                        if let Some(exit) = self.take(eng, job) {
                            return exit;
                        }
                    }
                    Err(_) => return Exit::Shutdown,
                }
            }
            let busy = Instant::now();
            while let Ok(job) = self.rx.try_recv() {
                if let Some(exit) = self.take(eng, job) {
                    return exit;
                }
            }
            self.reap(eng);
            self.admit(eng);
            if !self.running.is_empty() {
                self.step(eng);
            }
            self.metrics.active.set(self.running.len() as i64);
            self.metrics
                .queued
                .set(self.waiting.load(Ordering::SeqCst) as i64);
            let cs = self.cache.stats();
            self.metrics.cache_entries.set(cs.entries as i64);
            self.metrics.cache_host_entries.set(cs.host_entries as i64);
            self.metrics.cache_spills.set(cs.spills as i64);
            self.metrics
                .busy_seconds
                .inc_by(busy.elapsed().as_secs_f64());
        }
    }

    /// Takes one job off the channel; `Some` to leave the serving loop.
    fn take(&mut self, eng: &mut Engine, job: Job) -> Option<Exit> {
        match job {
            Job::Generate(g) => self.queue.push_back(*g),
            Job::Embed(e) => {
                let r = embed_now(eng, &e.inputs, self.init.as_deref());
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                let _ = e.reply.send(r);
            }
            Job::Lend(give, back) => return Some(Exit::Lend(Box::new((give, back)))),
            Job::Shutdown => return Some(Exit::Shutdown),
        }
        None
    }

    /// Frees the sequences whose clients went away, and drops their queued requests.
    fn reap(&mut self, eng: &mut Engine) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].cancelled() {
                let s = self.running.swap_remove(i);
                let _ = eng.free_state(s.state);
                self.metrics.cancelled.inc();
            } else {
                i += 1;
            }
        }
        let before = self.queue.len();
        self.queue.retain(|j| !j.events.is_closed());
        let gone = before - self.queue.len();
        if gone > 0 {
            self.waiting.fetch_sub(gone, Ordering::SeqCst);
            self.metrics.cancelled.inc_by(gone as u64);
        }
    }

    /// Moves queued requests into the batch while it has room, each resumed from the
    /// longest cached prefix of its prompt.
    fn admit(&mut self, eng: &mut Engine) {
        while self.running.len() < self.parallel {
            let Some(job) = self.queue.pop_front() else {
                break;
            };
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            let sampler = match Sampler::new(job.params.sampler.clone(), self.tok.vocab_size()) {
                Ok(s) => s,
                Err(e) => {
                    let _ = job
                        .events
                        .send(Event::Error(ApiError::invalid(None, e.to_string())));
                    continue;
                }
            };
            let Resumed {
                state,
                depth,
                logits: ready,
            } = match self.resume(eng, &job.prompt) {
                Ok(r) => r,
                // Every slot is taken (by running sequences): the request waits.
                Err(EngineError::TooLarge { .. }) if !self.running.is_empty() => {
                    self.waiting.fetch_add(1, Ordering::SeqCst);
                    self.queue.push_front(job);
                    break;
                }
                Err(e) => {
                    let _ = job
                        .events
                        .send(Event::Error(ApiError::server(e.to_string())));
                    continue;
                }
            };
            self.metrics
                .queue_seconds
                .observe(job.arrived.elapsed().as_secs_f64());
            self.metrics.prompt_tokens.inc_by(job.prompt.len() as u64);
            self.metrics.cached_tokens.inc_by(depth as u64);
            if depth > 0 {
                self.metrics.cache_hits.inc();
            } else {
                self.metrics.cache_misses.inc();
            }
            let _ = job.events.send(Event::Started {
                cached_tokens: depth,
            });
            let mut seq = Seq::new(job, state, depth, sampler, &self.tok);
            seq.ready = ready;
            self.running.push(seq);
        }
    }

    /// A state for `prompt`: resumed from the cache, else a zero state; when the engine
    /// has no slot left, cached states move to host memory to make room.
    fn resume(&mut self, eng: &mut Engine, prompt: &[u32]) -> rwkv_engine::Result<Resumed> {
        let t = Instant::now();
        let r = self.resume_state(eng, prompt);
        self.metrics.cache_seconds.inc_by(t.elapsed().as_secs_f64());
        r
    }

    fn resume_state(&mut self, eng: &mut Engine, prompt: &[u32]) -> rwkv_engine::Result<Resumed> {
        loop {
            let r = match self.cache.resume(eng, prompt) {
                Ok(Some(r)) => Ok(r),
                Ok(None) => self.fresh_state(eng).map(|state| Resumed {
                    state,
                    depth: 0,
                    logits: None,
                }),
                Err(e) => Err(e),
            };
            match r {
                Err(EngineError::TooLarge { .. }) if self.cache.spill_lru(eng) => {}
                r => return r,
            }
        }
    }

    /// A state holding no tokens: zeros, or the server's initial state.
    fn fresh_state(&mut self, eng: &mut Engine) -> rwkv_engine::Result<rwkv_engine::StateId> {
        match &self.init {
            Some(init) => eng.new_state_from(init),
            None => eng.new_state(),
        }
    }

    /// One batched step: every generating sequence feeds its last token, prompts add a
    /// chunk, and the sequences with logits sample their next token.
    fn step(&mut self, eng: &mut Engine) {
        let t0 = Instant::now();
        // Sequences whose whole prompt was cached with its logits sample at once.
        let tok = self.tok.clone();
        for s in self.running.iter_mut() {
            if let Some(l) = s.ready.take() {
                s.fed = s.job.prompt.len();
                s.sample(&mut l.to_vec(), &tok);
                self.metrics.generated(1);
            }
        }
        // (running index, tokens, rows)
        let mut plan: Vec<(usize, Vec<u32>, Rows)> = Vec::new();
        for (i, s) in self.running.iter().enumerate() {
            if let (Some(t), None) = (s.next, s.finish) {
                plan.push((i, vec![t], Rows::Last));
            }
        }
        let mut budget = self.chunk;
        for (i, s) in self.running.iter().enumerate() {
            let left = s.prompt_left();
            if budget == 0 {
                break;
            }
            if left.is_empty() || s.finish.is_some() {
                continue;
            }
            let n = left.len().min(budget);
            budget -= n;
            let rows = if n == left.len() {
                Rows::Last
            } else {
                Rows::None
            };
            plan.push((i, left[..n].to_vec(), rows));
        }
        if !plan.is_empty() {
            self.run_plan(eng, plan);
            self.metrics
                .step_seconds
                .observe(t0.elapsed().as_secs_f64());
        }
        self.finish_done(eng);
    }

    fn run_plan(&mut self, eng: &mut Engine, plan: Vec<(usize, Vec<u32>, Rows)>) {
        let inputs: Vec<SeqInput> = plan
            .iter()
            .map(|(i, t, rows)| SeqInput {
                state: self.running[*i].state,
                tokens: t,
                rows: *rows,
            })
            .collect();
        self.metrics.batch_size.observe(inputs.len() as f64);
        // Logits come back for prompt pieces (a finished prompt's are cached) and for the
        // sequences the CPU samples; a greedy decode step needs only its row's argmax after
        // its bans and penalties, both done on the GPU.
        let adjust: Vec<Option<Vec<(u32, f32)>>> = plan
            .iter()
            .map(|(i, _, _)| {
                let s = &self.running[*i];
                s.next.and_then(|_| s.greedy_adjustments())
            })
            .collect();
        let greedy: Vec<Option<&[(u32, f32)]>> = adjust.iter().map(|a| a.as_deref()).collect();
        // Constrained sequences compute their next mask on another thread while the GPU
        // runs this step (the mask depends only on the tokens committed so far).
        let self_forward = self.metrics.forward_seconds.clone();
        let out = std::thread::scope(|sc| {
            let pending: Vec<&mut rwkv_engine::Constraint> = self
                .running
                .iter_mut()
                .filter(|s| s.finish.is_none())
                .filter_map(|s| s.constraint.as_deref_mut())
                .collect();
            if !pending.is_empty() {
                sc.spawn(move || {
                    for c in pending {
                        // An error shows again (and ends the reply) when the mask is used.
                        let _ = c.prepare();
                    }
                });
            }
            let t = Instant::now();
            let out = eng.forward_greedy(&inputs, &greedy, None);
            self_forward.observe(t.elapsed().as_secs_f64());
            out
        });
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                let err = ApiError::server(format!("the forward pass failed: {e}"));
                log::error!("{err}");
                for (i, _, _) in &plan {
                    let _ = self.running[*i].job.events.send(Event::Error(err.clone()));
                    self.running[*i].finish = Some(super::Finish::Stop);
                    self.running[*i].generated.clear();
                }
                return;
            }
        };
        let mut to_sample: Vec<(usize, Vec<f32>)> = Vec::new();
        let mut picked: Vec<(usize, (u32, f32))> = Vec::new();
        // (running index, logits) of the prompts this step finished.
        let mut prompts_done: Vec<(usize, Arc<[f32]>)> = Vec::new();
        let rows = out.logits.into_iter().zip(out.argmax);
        for ((i, toks, _), (logits, argmax)) in plan.into_iter().zip(rows) {
            let s = &mut self.running[i];
            if s.next.take().is_some() {
                // A decode token: fed.
            } else {
                s.fed += toks.len();
                self.metrics.prefilled_tokens.inc_by(toks.len() as u64);
                if s.fed == s.job.prompt.len() && !logits.is_empty() {
                    prompts_done.push((i, logits.clone().into()));
                }
            }
            if !logits.is_empty() {
                to_sample.push((i, logits));
            } else if let Some(&best) = argmax.last() {
                picked.push((i, best));
            }
        }
        let t = Instant::now();
        self.metrics.generated(picked.len() as u64);
        for (i, best) in picked {
            self.running[i].take_argmax(best);
        }
        self.sample_all(to_sample);
        self.metrics
            .sample_seconds
            .observe(t.elapsed().as_secs_f64());
        // The state after each finished prompt, with its logits, so a regenerate of the
        // prompt samples at once: kept after the first tokens went out (a store may spill
        // older entries to host memory), before the next step feeds those tokens.
        let t = Instant::now();
        for (i, logits) in prompts_done {
            let s = &self.running[i];
            if let Err(e) = self.cache.store(eng, &s.job.prompt, s.state, Some(logits)) {
                log::warn!("conversation cache: {e}");
            }
        }
        self.metrics.cache_seconds.inc_by(t.elapsed().as_secs_f64());
    }

    /// Samples each listed sequence's next token, on several CPU threads when many.
    fn sample_all(&mut self, mut work: Vec<(usize, Vec<f32>)>) {
        let n = work.len();
        self.metrics.generated(n as u64);
        let tok = &self.tok;
        let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
        let mut seqs: Vec<Option<&mut Seq>> = self.running.iter_mut().map(Some).collect();
        let mut jobs: Vec<(&mut Seq, Vec<f32>)> = work
            .drain(..)
            .filter_map(|(i, l)| seqs[i].take().map(|s| (s, l)))
            .collect();
        if n < 2 * SAMPLE_PER_THREAD || threads < 2 {
            for (s, l) in jobs.iter_mut() {
                s.sample(l, tok);
            }
            return;
        }
        let per = n.div_ceil(threads.min(n / SAMPLE_PER_THREAD).max(1));
        std::thread::scope(|sc| {
            for part in jobs.chunks_mut(per) {
                sc.spawn(move || {
                    for (s, l) in part.iter_mut() {
                        s.sample(l, tok);
                    }
                });
            }
        });
    }

    /// Ends the finished sequences: every client hears `Done` first, then their states go
    /// to the cache and their slots are freed.
    fn finish_done(&mut self, eng: &mut Engine) {
        let mut ended = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].finish.is_none() {
                i += 1;
                continue;
            }
            let mut s = self.running.swap_remove(i);
            // The clients hear first: keeping the states (GPU copies, perhaps spills of
            // older entries to host memory) is the server's business, and no request can
            // look them up before this call is through.
            if !s.generated.is_empty() {
                s.done();
            }
            ended.push(s);
        }
        let t = Instant::now();
        for s in ended {
            // A reply of one token fed none: its state is the one after the prompt,
            // which the cache already holds with its logits (kept, not replaced).
            if s.generated.len() > 1 {
                let key = s.state_tokens();
                if let Err(e) = self.cache.store(eng, &key, s.state, None) {
                    log::warn!("conversation cache: {e}");
                }
            }
            let _ = eng.free_state(s.state);
        }
        self.metrics.cache_seconds.inc_by(t.elapsed().as_secs_f64());
    }

    /// The engine is gone (a borrower kept it): every open request gets 503.
    fn abandon(&mut self) {
        for s in self.running.drain(..) {
            let _ = s.job.events.send(Event::Error(ApiError::unavailable()));
        }
        for j in self.queue.drain(..) {
            let _ = j.events.send(Event::Error(ApiError::unavailable()));
        }
    }

    /// Shutdown: every request still open gets 503, the cache is released.
    fn close(&mut self, eng: &mut Engine) {
        for s in self.running.drain(..) {
            let _ = s.job.events.send(Event::Error(ApiError::unavailable()));
            let _ = eng.free_state(s.state);
        }
        for j in self.queue.drain(..) {
            let _ = j.events.send(Event::Error(ApiError::unavailable()));
        }
        while let Ok(job) = self.rx.try_recv() {
            match job {
                Job::Generate(g) => {
                    let _ = g.events.send(Event::Error(ApiError::unavailable()));
                }
                Job::Embed(e) => {
                    let _ = e.reply.send(Err(ApiError::unavailable()));
                }
                Job::Shutdown | Job::Lend(..) => {}
            }
        }
        let _ = self.cache.release(eng);
    }
}
