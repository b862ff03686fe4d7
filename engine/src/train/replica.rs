//! Data-parallel training in one process: one thread per GPU, each a replica that trains on its
//! shard of every batch and averages gradients with the others through NCCL (Burn's
//! `all_reduce`; nothing home-made for the collectives). Rank 0 owns every side effect.
//!
//! Replicas stay in lock-step because each issues the same collectives in the same order: the
//! gradient all-reduce every optimizer step, and, with SyncBatchNorm, one per BatchNorm in the
//! forward. Anything that could make one replica skip a step (Ctrl-C, early stopping, a failure)
//! is therefore agreed between them, never decided by one alone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use burn::tensor::distributed::{ReduceOperation, all_reduce};
use burn::tensor::{Device, Tensor};
use libreyolo_families::{ParamId, ParamStore};

use crate::capture::{Agreement, Verdict};

/// What the replicas of one run share on the host.
pub struct Shared {
    barrier: Barrier,
    /// The step of the epoch (batch index) at which every replica stops (Ctrl-C), `usize::MAX`
    /// while running. Replicas meet at every epoch's end, so the index is comparable.
    stop_at: AtomicUsize,
    /// Rank 0 decided to stop after this epoch (early stopping, interrupt).
    stop_after_epoch: AtomicBool,
    /// A replica failed: the others stop at their next check.
    failed: AtomicBool,
    /// The worst capture verdict cast so far in the current agreement ([`Replica::capture_agreement`]).
    verdict: AtomicUsize,
    /// The run directory, created by rank 0.
    run_dir: OnceLock<std::path::PathBuf>,
    /// Per rank: steps finished, and when the last one finished (ms since `started`).
    progress: Vec<(AtomicUsize, AtomicUsize)>,
    started: Instant,
}

impl Shared {
    /// The rank that has made no progress for longer than `limit`, if any, as an error line: a
    /// replica blocked in a collective that a peer never joins waits forever otherwise.
    fn stalled(&self, limit: Duration) -> Option<String> {
        let now = self.started.elapsed().as_millis() as usize;
        let (rank, (steps, at)) =
            self.progress.iter().map(|(steps, at)| (steps.load(Ordering::SeqCst), at.load(Ordering::SeqCst))).enumerate().min_by_key(|(_, (_, at))| *at)?;
        let idle = Duration::from_millis((now - at.min(now)) as u64);
        (idle > limit).then(|| {
            format!(
                "rank {rank} of {} made no progress for {}s (steps finished: {steps}); a rank waiting in an NCCL collective that another never reached. \
                 Set {STALL_ENV} to wait longer (the first step of a cold kernel cache compiles for minutes)",
                self.progress.len(),
                idle.as_secs()
            )
        })
    }
}

/// Seconds without a finished step after which a multi-GPU run is stopped as hung.
pub const STALL_ENV: &str = "LIBREYOLO_DDP_STALL_S";
const DEFAULT_STALL: Duration = Duration::from_secs(900);

/// Where the other replicas run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peers {
    /// Threads of this process (`device=0,1`): host agreement through [`Shared`].
    Threads,
    /// Other processes (a torchrun-style launch): agreement through NCCL votes.
    Processes,
}

/// This thread's place in the run.
#[derive(Clone)]
pub struct Replica {
    pub rank: usize,
    /// Every replica's device, rank order (one entry when training alone).
    pub devices: Vec<Device>,
    shared: Arc<Shared>,
    peers: Peers,
    /// This replica's slot in `shared` (its rank among threads; 0 for a process).
    local: usize,
}

/// Steps a replica may run ahead of rank 0 on the host: each step reads its loss back, and that
/// waits for the step's all-reduce, which waits for every replica.
const RUN_AHEAD: usize = 2;

impl Replica {
    /// One replica per device, each on a thread of this process.
    pub fn group(devices: Vec<Device>) -> Vec<Self> {
        let shared = Self::shared(devices.len());
        (0..devices.len()).map(|rank| Self { rank, devices: devices.clone(), shared: shared.clone(), peers: Peers::Threads, local: rank }).collect()
    }

    /// Rank `rank` of a multi-process launch over `devices` (this process drives `devices[rank]`).
    pub fn process(rank: usize, devices: Vec<Device>) -> Self {
        Self { rank, devices, shared: Self::shared(1), peers: Peers::Processes, local: 0 }
    }

    fn shared(threads: usize) -> Arc<Shared> {
        Arc::new(Shared {
            barrier: Barrier::new(threads),
            stop_at: AtomicUsize::new(usize::MAX),
            stop_after_epoch: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            verdict: AtomicUsize::new(Verdict::Captured as usize),
            run_dir: OnceLock::new(),
            progress: (0..threads).map(|_| (AtomicUsize::new(0), AtomicUsize::new(0))).collect(),
            started: Instant::now(),
        })
    }

    pub fn world(&self) -> usize {
        self.devices.len()
    }

    /// Whether this replica is a process of a multi-process launch (one GPU per process).
    pub fn is_process(&self) -> bool {
        self.peers == Peers::Processes
    }

    /// Rank 0: logs, progress bar, run directory, checkpoints, validation, profiler.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }

    pub fn device(&self) -> &Device {
        &self.devices[self.rank]
    }

    /// `(rank, world)`: which shard of every epoch this replica reads.
    pub fn shard(&self) -> (usize, usize) {
        (self.rank, self.world())
    }

    /// The devices collectives run over: `None` when training alone.
    pub fn group_devices(&self) -> Option<&[Device]> {
        (self.world() > 1).then_some(self.devices.as_slice())
    }

    /// Every gradient replaced by its mean over the replicas: one NCCL all-reduce per tensor,
    /// queued back to back on the collective stream, and one wait for the last of them. Each
    /// gradient is moved into its all-reduce, so a uniquely owned one is reduced in place, in
    /// its own buffer (what an update graph reading the backward graph's gradients needs), and
    /// no copy is made.
    ///
    /// Not one all-reduce of the gradients flattened: the concatenation and the split back are a
    /// slice kernel per parameter shape (~580 for YOLOv9-t), each compiled on first use, which
    /// held the first multi-GPU step for minutes (H200, 2026-11-30), and ~1,200 launches a step
    /// after that. NCCL's per-call cost is a few microseconds.
    pub fn average_gradients(&self, grads: Vec<(ParamId, Tensor<1>)>) -> Vec<(ParamId, Tensor<1>)> {
        let Some(devices) = self.group_devices() else { return grads };
        tracing::debug!(rank = self.rank, tensors = grads.len(), "gradient all-reduce");
        let last = grads.len().saturating_sub(1);
        let reduced = grads
            .into_iter()
            .enumerate()
            .map(|(i, (id, g))| {
                let reduced = all_reduce(g, ReduceOperation::Mean, devices.to_vec());
                let g = if i == last {
                    // Waits for the collective stream, where every all-reduce above ran in order.
                    reduced.resolve()
                } else {
                    // SAFETY: resolved by the wait on the last one, before any use of these
                    // gradients: the collective stream runs the all-reduces in the order queued.
                    unsafe { reduced.assume_resolved() }
                };
                (id, g)
            })
            .collect();
        tracing::debug!(rank = self.rank, "gradient all-reduce done");
        reduced
    }

    /// The mean of `t` over the replicas (the logged losses: the whole batch's, as on one GPU).
    pub fn mean(&self, t: Tensor<1>) -> Tensor<1> {
        match self.group_devices() {
            Some(devices) => all_reduce(t, ReduceOperation::Mean, devices.to_vec()).resolve(),
            None => t,
        }
    }

    /// Checks that this replica's trained weights are the replicas' mean: each applies the same
    /// averaged gradient, so they stay equal unless an all-reduce missed (an update graph reading
    /// a buffer the all-reduce did not write, say). One checksum per replica (the sum and the sum
    /// of squares of every trained tensor) all-reduced and read back, once an epoch.
    pub fn check_weights_in_sync(&self, params: &ParamStore, epoch: usize) -> anyhow::Result<()> {
        let Some(devices) = self.group_devices() else { return Ok(()) };
        let trained: Vec<Tensor<1>> = params.entries().iter().filter(|e| e.trains()).filter_map(|e| e.value.flat()).collect();
        let total = |f: fn(Tensor<1>) -> Tensor<1>| trained.iter().map(|t| f(t.clone()).sum()).reduce(|a, b| a.add(b)).expect("a network has trained tensors");
        let local = Tensor::cat(vec![total(|t| t), total(|t| t.square())], 0);
        let mean = all_reduce(local.clone(), ReduceOperation::Mean, devices.to_vec()).resolve();
        let read = |t: Tensor<1>| t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap_or_default();
        let (local, mean) = (read(local), read(mean));
        // Relative to the figure, or absolute near zero: a sum reduced with float atomics differs
        // in its last bits between two ranks holding the same weights.
        let off = local.iter().zip(&mean).any(|(a, m)| !((a - m).abs() <= 1e-5 * m.abs().max(1.0)));
        if off || local.len() != 2 {
            anyhow::bail!(
                "after epoch {}, rank {}'s weights differ from the other ranks' (checksum sum {:?}, squares {:?}; mean over the ranks {:?}, {:?}): the replicas no longer train one model",
                epoch + 1,
                self.rank,
                local.first(),
                local.get(1),
                mean.first(),
                mean.get(1)
            );
        }
        Ok(())
    }

    /// Waits for every replica thread of this process (a no-op alone or across processes).
    pub fn barrier(&self) {
        if self.peers == Peers::Threads && self.world() > 1 {
            self.shared.barrier.wait();
        }
    }

    /// Whether any replica votes `yes`: one NCCL all-reduce read back (a sync), so every
    /// replica gets the same answer at the same point.
    fn vote(&self, yes: bool) -> bool {
        let Some(devices) = self.group_devices() else { return yes };
        let ballot = Tensor::<1>::from_floats([if yes { 1.0 } else { 0.0 }], self.device());
        let total = all_reduce(ballot, ReduceOperation::Sum, devices.to_vec()).resolve();
        total.into_data().convert::<f32>().try_to_vec::<f32>().map(|v| v[0] > 0.5).unwrap_or(true)
    }

    /// The capture manager's agreement: the worst capture verdict over every replica, each
    /// casting its own at the same point of the same step; `None` when training alone.
    pub fn capture_agreement(&self) -> Option<Agreement> {
        if self.world() == 1 {
            return None;
        }
        let me = self.clone();
        Some(Box::new(move |mine| me.worst_verdict(mine)))
    }

    fn worst_verdict(&self, mine: Verdict) -> Verdict {
        if self.peers == Peers::Processes {
            // Every process casts both votes: any failure, else any doubt.
            let failed = self.vote(mine == Verdict::Failed);
            let unsure = self.vote(mine == Verdict::Unsure);
            return if failed {
                Verdict::Failed
            } else if unsure {
                Verdict::Unsure
            } else {
                Verdict::Captured
            };
        }
        self.shared.verdict.fetch_max(mine as usize, Ordering::SeqCst);
        self.barrier();
        let worst = self.shared.verdict.load(Ordering::SeqCst);
        self.barrier(); // nobody resets it before everyone has read it
        if self.local == 0 {
            self.shared.verdict.store(Verdict::Captured as usize, Ordering::SeqCst);
        }
        self.barrier(); // nobody casts the next before the reset
        [Verdict::Captured, Verdict::Unsure, Verdict::Failed][worst]
    }

    /// Rank 0 publishes the run directory; the others read it after [`barrier`](Self::barrier).
    pub fn publish_run_dir(&self, path: &std::path::Path) {
        let _ = self.shared.run_dir.set(path.to_path_buf());
    }

    pub fn run_dir(&self) -> Option<&std::path::Path> {
        self.shared.run_dir.get().map(|p| p.as_path())
    }

    /// Whether this replica stops after the epoch's `step`-th batch: when another replica
    /// failed, or at the batch agreed after Ctrl-C. `interrupted` is this replica's view of Ctrl-C; the
    /// first replica to see it fixes the stop far enough ahead that none has passed it yet.
    pub fn should_stop(&self, step: usize, interrupted: bool) -> bool {
        if self.shared.failed.load(Ordering::SeqCst) {
            return true;
        }
        if self.peers == Peers::Processes {
            // Each process sees its own SIGINT, at its own step: they stop on a vote.
            return self.vote(interrupted);
        }
        if interrupted && self.world() == 1 {
            return true;
        }
        if interrupted {
            let _ = self.shared.stop_at.compare_exchange(usize::MAX, step + RUN_AHEAD, Ordering::SeqCst, Ordering::SeqCst);
        }
        step >= self.shared.stop_at.load(Ordering::SeqCst)
    }

    /// Records a finished step (what the stall watchdog of [`run`] reads).
    pub fn step_done(&self) {
        let (steps, at) = &self.shared.progress[self.local];
        steps.fetch_add(1, Ordering::SeqCst);
        at.store(self.shared.started.elapsed().as_millis() as usize, Ordering::SeqCst);
    }

    /// Whether a replica failed (the others end their run early, without saving).
    pub fn peer_failed(&self) -> bool {
        self.shared.failed.load(Ordering::SeqCst)
    }

    /// Rank 0's decision at the end of an epoch (early stopping, interrupt), seen by all.
    pub fn agree_stop_after_epoch(&self, main_says_stop: bool) -> bool {
        if self.peers == Peers::Processes {
            return self.vote(self.is_main() && main_says_stop);
        }
        if self.is_main() {
            self.shared.stop_after_epoch.store(main_says_stop, Ordering::SeqCst);
        }
        self.barrier();
        let stop = self.shared.stop_after_epoch.load(Ordering::SeqCst);
        self.barrier(); // nobody resets the flag before everyone has read it
        stop
    }

    fn mark_failed(&self) {
        self.shared.failed.store(true, Ordering::SeqCst);
    }
}

/// The error of a replica that stopped because another failed: never the one reported.
#[derive(Debug)]
pub struct PeerFailed;

impl std::fmt::Display for PeerFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped: another rank failed")
    }
}

impl std::error::Error for PeerFailed {}

/// How long the other replicas get to stop after one failed, before the process exits: a
/// replica blocked in a collective its failed peer will never join cannot stop by itself.
pub const FAILURE_GRACE: Duration = Duration::from_secs(20);

/// Runs `train(replica)` on one thread per replica and returns rank 0's result. When a replica
/// fails (an error or a panic), the others are told to stop; the failing rank's error is
/// returned, or, when some replica does not stop within `grace`, printed before the process
/// exits with status 1 (not a hang). A replica that finishes no step for `LIBREYOLO_DDP_STALL_S`
/// seconds (default 900) is reported the same way.
pub fn run<T: Send>(replicas: Vec<Replica>, grace: Duration, train: impl Fn(Replica) -> anyhow::Result<T> + Sync) -> anyhow::Result<T> {
    let world = replicas.len();
    if world == 1 {
        return train(replicas.into_iter().next().expect("one replica"));
    }
    let shared = replicas[0].shared.clone();
    let stall = std::env::var(STALL_ENV).ok().and_then(|v| v.parse::<u64>().ok()).map(Duration::from_secs).unwrap_or(DEFAULT_STALL);
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for replica in replicas {
            let (tx, train) = (tx.clone(), &train);
            std::thread::Builder::new()
                .name(format!("rank-{}", replica.rank))
                .spawn_scoped(s, move || {
                    let rank = replica.rank;
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| train(replica.clone())))
                        .unwrap_or_else(|panic| Err(anyhow::anyhow!("panicked: {}", panic_message(&panic))));
                    if result.is_err() {
                        replica.mark_failed();
                    }
                    let _ = tx.send((rank, result));
                })
                .expect("spawn a replica thread");
        }
        drop(tx);
        let mut results: Vec<Option<anyhow::Result<T>>> = (0..world).map(|_| None).collect();
        // The first rank whose error is its own (not "another rank failed").
        let mut cause: Option<usize> = None;
        let mut failed_at: Option<Instant> = None;
        let mut pending = world;
        while pending > 0 {
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok((rank, result)) => {
                    if result.is_err() && failed_at.is_none() {
                        failed_at = Some(Instant::now());
                    }
                    if cause.is_none() && result.as_ref().err().is_some_and(|e| e.downcast_ref::<PeerFailed>().is_none()) {
                        cause = Some(rank);
                    }
                    results[rank] = Some(result);
                    pending -= 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // The process exits without unwinding (a blocked replica cannot be joined):
                    // the error goes straight to the terminal.
                    if failed_at.is_some_and(|t| t.elapsed() > grace) {
                        let rank = cause.or_else(|| results.iter().position(|r| r.as_ref().is_some_and(|r| r.is_err()))).expect("a failure");
                        let err = results[rank].as_ref().and_then(|r| r.as_ref().err()).expect("the failing rank's error");
                        eprintln!("error: rank {rank} of {world} failed: {err:#}\nthe other ranks did not stop within {}s; exiting", grace.as_secs());
                        std::process::exit(1);
                    }
                    if let Some(line) = shared.stalled(stall) {
                        eprintln!("error: {line}; exiting");
                        std::process::exit(1);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let failed = cause.or_else(|| results.iter().position(|r| r.as_ref().is_some_and(|r| r.is_err())));
        if let Some(rank) = failed {
            let err = results[rank].take().and_then(|r| r.err()).expect("the failing rank's error");
            return Err(err.context(format!("rank {rank} of {world} failed")));
        }
        results[0].take().expect("rank 0 reported")
    })
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replicas(n: usize) -> Vec<Replica> {
        Replica::group(vec![Device::flex(); n])
    }

    #[test]
    fn rank_zero_result_when_all_succeed() {
        let out = run(replicas(3), FAILURE_GRACE, |r| Ok(r.rank * 10 + r.world())).unwrap();
        assert_eq!(out, 3);
    }

    #[test]
    fn a_failing_rank_stops_the_others_with_its_error() {
        let err = run(replicas(2), FAILURE_GRACE, |r| {
            if r.rank == 1 {
                anyhow::bail!("out of memory on cuda:1");
            }
            // Rank 0 trains until it sees its peer fail (as its step loop does).
            let mut step = 0;
            while !r.should_stop(step, false) {
                std::thread::sleep(Duration::from_millis(1));
                step += 1;
            }
            Ok(step)
        })
        .unwrap_err();
        let text = format!("{err:#}");
        assert!(text.starts_with("rank 1 of 2 failed: out of memory on cuda:1"), "{text}");
    }

    #[test]
    fn a_panicking_rank_is_an_error_not_a_crash() {
        let err = run(replicas(2), FAILURE_GRACE, |r| if r.rank == 0 { panic!("index out of bounds") } else { Ok(()) }).unwrap_err();
        assert!(format!("{err:#}").contains("rank 0 of 2 failed: panicked: index out of bounds"), "{err:#}");
    }

    #[test]
    fn ctrl_c_stops_every_replica_at_the_same_step() {
        let stops = std::sync::Mutex::new(vec![]);
        run(replicas(2), FAILURE_GRACE, |r| {
            // Rank 1 sees the interrupt at step 5, rank 0 only later (its host ran behind).
            let mut step = 0;
            loop {
                let seen = (r.rank == 1 && step >= 5) || (r.rank == 0 && step >= 6);
                if r.should_stop(step, seen) {
                    break;
                }
                step += 1;
            }
            stops.lock().unwrap().push(step);
            Ok(())
        })
        .unwrap();
        let stops = stops.into_inner().unwrap();
        assert_eq!(stops[0], stops[1], "both replicas stop at the same step");
        assert!(stops[0] >= 5 + RUN_AHEAD, "{stops:?}");
    }

    #[test]
    fn the_watchdog_names_the_rank_that_stopped_finishing_steps() {
        let r = replicas(2);
        assert_eq!(r[0].shared.stalled(Duration::from_secs(60)), None);
        std::thread::sleep(Duration::from_millis(30));
        r[1].step_done();
        let line = r[0].shared.stalled(Duration::from_millis(10)).expect("rank 0 is stalled");
        assert!(line.starts_with("rank 0 of 2 made no progress for"), "{line}");
        assert!(line.contains("steps finished: 0"), "{line}");
        r[0].step_done();
        assert_eq!(r[0].shared.stalled(Duration::from_secs(5)), None);
    }

    #[test]
    fn every_replica_goes_by_the_worst_capture() {
        assert!(replicas(1)[0].capture_agreement().is_none(), "alone, nothing to agree");
        let seen = std::sync::Mutex::new(vec![]);
        run(replicas(3), FAILURE_GRACE, |r| {
            let agree = r.capture_agreement().expect("three replicas agree");
            let first = agree([Verdict::Captured, Verdict::Unsure, Verdict::Captured][r.rank]);
            let second = agree(if r.rank == 2 { Verdict::Failed } else { Verdict::Captured });
            let third = agree(Verdict::Captured);
            seen.lock().unwrap().push((first, second, third));
            Ok(())
        })
        .unwrap();
        // Every replica the same, and each agreement starts afresh.
        assert_eq!(seen.into_inner().unwrap(), [(Verdict::Unsure, Verdict::Failed, Verdict::Captured); 3]);
    }

    #[test]
    fn the_end_of_epoch_decision_is_rank_zeros() {
        let seen = run(replicas(2), FAILURE_GRACE, |r| {
            let a = r.agree_stop_after_epoch(r.rank == 0);
            let b = r.agree_stop_after_epoch(r.rank == 1); // rank 1's view is ignored
            Ok((a, b))
        })
        .unwrap();
        assert_eq!(seen, (true, false));
    }
}
