//! A step's kernels compiled on every core before its first real run on a new input shape.
//!
//! On a cold kernel cache the first training step compiles ~600 kernels with NVRTC, one after
//! another on the thread that launches them: 73 s of a 105 s warm-up on the H200 (YOLOv9-t,
//! batch 8; docs/history/). Run first as cubecl's dry run, where every launch is compiled
//! and dropped, the step hands each compilation to our cubecl-cuda's compiler threads
//! (vendor/README.md) and returns; its first real run then waits only for what is still
//! compiling, and loads it.
//!
//! On a warm cache a dry run compiles nothing and costs a step's host work (~2 s of a 6.6 s
//! first step on the H200, up to 6.3 s for a whole step), so [`Precompile`] remembers beside the
//! kernel cache how many kernels each step's first run compiled last time, and by which build of
//! the binary, and skips the dry run where that was few, or where this build ran it: what it
//! compiled is in the cache now. (A rebuilt binary compiles some kernels again: cubecl-cuda keys
//! its cache by the build id too. After such a first run, its next process dry-ran for nothing.)
//!
//! A dry run computes nothing, and it is process-wide: it suits a computation with no host
//! reads, must not overlap real work on another thread, and whatever state it writes must be
//! restored after it (the caller's part). A captured step is dry-run as it is captured; an eager
//! step (whose stages read the host: the fp16 loss scale's check, the logged losses) through
//! the same forward, loss, backward and update run as one segment, which reads nothing.
//! Data-parallel runs do without: their replicas share a process (threads) or meet in
//! collectives inside the step (processes).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;
use cubecl_runtime::dry_run::DryRun;
use serde::{Deserialize, Serialize};

use crate::device::Backend;

/// Environment variable: `0` compiles each kernel at its first real launch instead (upstream's
/// way; for A/B measurements of the warm-up); `force` dry-runs every new step whatever the
/// history says, on any backend (the CPU has no dry run: the step runs for real and the engine
/// undoes it, which is what the tests check).
pub const ENV: &str = "LIBREYOLO_PRECOMPILE";

/// When a step's first batch of a shape runs as a dry run first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Unless the step's last first run compiled at most [`FEW_KERNELS`] (CUDA's default).
    WhenWorthIt,
    /// Always (`LIBREYOLO_PRECOMPILE=force`).
    Always,
}

/// Whether and when a step's first batch of a shape runs as a dry run first: on CUDA, on one GPU,
/// unless `LIBREYOLO_PRECOMPILE=0`; `force` on any backend.
pub fn wanted(backend: Backend, world: usize) -> Option<Mode> {
    let setting = std::env::var(ENV).unwrap_or_default();
    match setting.as_str() {
        _ if world != 1 || setting == "0" => None,
        "force" => Some(Mode::Always),
        _ => (backend == Backend::Cuda).then_some(Mode::WhenWorthIt),
    }
}

/// A first run that compiled at most this many kernels last time is not worth a dry run.
pub const FEW_KERNELS: u64 = 20;

/// File beside the kernel cache: step -> its last first run ([`FirstRun`]).
pub const HISTORY_FILE: &str = "precompile.json";

/// What a step's last first run compiled, and which build of the binary ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum FirstRun {
    Built {
        compiled: u64,
        build: Option<String>,
    },
    /// A history written before the build was kept: the count alone.
    Count(u64),
}

impl FirstRun {
    /// Whether a new first run would compile enough to be worth a dry run, for a process of
    /// `build` (`None`: unknown, never the same as another).
    fn worth_a_dry_run(&self, build: Option<&str>) -> bool {
        match self {
            FirstRun::Built { build: Some(ran), .. } if Some(ran.as_str()) == build => false,
            FirstRun::Built { compiled, .. } | FirstRun::Count(compiled) => *compiled > FEW_KERNELS,
        }
    }
}

/// This binary's GNU build id in hex, which every relink changes (`None` without one).
fn this_build() -> Option<String> {
    buildid::build_id().map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Which steps of this process were seen, and what their first runs compiled in earlier ones.
#[derive(Debug)]
pub struct Precompile {
    mode: Mode,
    /// The kinds of step and input shapes this process ran (a process's family, size and
    /// precision do not change).
    seen: HashSet<(&'static str, [usize; 4])>,
    history: BTreeMap<String, FirstRun>,
    path: PathBuf,
    build: Option<String>,
}

impl Precompile {
    /// The history kept in `dir` (empty when missing or unreadable: a dry run too many costs
    /// seconds, a lost history nothing else).
    pub fn load(mode: Mode, dir: &Path) -> Self {
        Self::load_as(mode, dir, this_build())
    }

    /// [`load`](Self::load) for a process of `build`.
    fn load_as(mode: Mode, dir: &Path, build: Option<String>) -> Self {
        let path = dir.join(HISTORY_FILE);
        let history = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        Self { mode, seen: HashSet::new(), history, path, build }
    }

    /// `None` when a step of this `kind` already ran on `dims` in this process (checked before
    /// `name` is asked for: it runs every step); else the step's name in the history and whether
    /// to dry-run it first: unless its last first run compiled at most [`FEW_KERNELS`] or was
    /// this build's (in [`Mode::WhenWorthIt`]).
    pub fn first_run(&mut self, kind: &'static str, dims: [usize; 4], name: impl FnOnce() -> String) -> Option<(String, bool)> {
        if !self.seen.insert((kind, dims)) {
            return None;
        }
        let step = name();
        let dry = self.mode == Mode::Always || self.history.get(&step).is_none_or(|last| last.worth_a_dry_run(self.build.as_deref()));
        Some((step, dry))
    }

    /// Keeps what `step`'s first run compiled (the dry run included) for the next process.
    /// Written whole to a temporary file and renamed, so a crash leaves the old history.
    pub fn record(&mut self, step: &str, compiled: u64) {
        self.history.insert(step.to_string(), FirstRun::Built { compiled, build: self.build.clone() });
        let tmp = self.path.with_extension("json.tmp");
        let written = serde_json::to_vec_pretty(&self.history)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            tracing::debug!("{}: {e}", self.path.display());
        }
    }
}

/// Kernels this process compiled so far (none on the CPU).
pub fn compiled_so_far() -> u64 {
    cubecl_cuda::compile_stats().compiled
}

/// Runs `step` on `device` as a dry run: its kernels are compiled (in the background) and none
/// runs. `what` names the step in the log.
pub fn dry_run<T>(device: &Device, what: &str, step: impl FnOnce() -> T) {
    let started = Instant::now();
    let before = cubecl_cuda::compile_stats().background;
    // What was queued before (the batch's upload and normalisation, the caller's snapshot of
    // the state) runs for real first: flushed inside the dry run, those launches would be
    // dropped too, and the real step would read buffers nothing wrote. On the H200 an eager
    // fp16 run with the dry run differed from one without it from the first step on
    // (2026-12-01); without the dry run two runs are bit-identical.
    let _ = device.sync();
    {
        let _dry = DryRun::new();
        drop(step());
        // Fused operations launch when their stream is flushed: inside the dry run.
        let _ = device.sync();
    }
    let handed = cubecl_cuda::compile_stats().background - before;
    tracing::info!("{what}: {handed} kernels handed to the compiler threads by a dry run in {:.1} s", started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step is dry-run the first time this process sees it, unless its last first run
    /// compiled next to nothing; the history survives the process and a corrupt file.
    #[test]
    fn the_history_skips_dry_runs_that_would_compile_nothing() {
        let dir = tempfile::tempdir().unwrap();
        const B8: [usize; 4] = [8, 3, 640, 640];
        let dry = |p: &mut Precompile, kind, name: &str| p.first_run(kind, B8, || name.to_string()).map(|(_, dry)| dry);
        let mut p = Precompile::load(Mode::WhenWorthIt, dir.path());
        assert_eq!(p.first_run("step", B8, || "t b8".into()), Some(("t b8".into(), true)), "never seen: dry run");
        assert_eq!(dry(&mut p, "step", "t b8"), None, "seen in this process");
        assert_eq!(p.first_run("step", [16, 3, 640, 640], || "t b16".into()).map(|(_, dry)| dry), Some(true), "another shape");
        p.record("t b8", 617);
        p.record("s b8", FEW_KERNELS);
        // A process of another build (this one's first runs are cached: see the next test).
        let mut next = Precompile::load_as(Mode::WhenWorthIt, dir.path(), Some("another build".into()));
        assert_eq!(dry(&mut next, "step", "t b8"), Some(true), "617 compiled last time");
        assert_eq!(dry(&mut next, "eager", "s b8"), Some(false), "few compiled last time");
        assert_eq!(dry(&mut Precompile::load(Mode::Always, dir.path()), "step", "s b8"), Some(true), "forced");
        std::fs::write(dir.path().join(HISTORY_FILE), "{not json").unwrap();
        assert_eq!(dry(&mut Precompile::load(Mode::WhenWorthIt, dir.path()), "step", "s b8"), Some(true));
    }

    /// A build that ran a step's first run compiled its kernels into the cache then: its next
    /// process skips the dry run however many that was; another build (which compiles some
    /// kernels again) does not, and neither does one of unknown build. Histories written
    /// before builds were kept still read.
    #[test]
    fn the_build_that_ran_a_first_run_does_not_dry_run_it_again() {
        let dir = tempfile::tempdir().unwrap();
        const B16: [usize; 4] = [16, 3, 640, 640];
        let as_build = |build: Option<&str>| Precompile::load_as(Mode::WhenWorthIt, dir.path(), build.map(String::from));
        let dry = |p: &mut Precompile| p.first_run("captured", B16, || "t b16".to_string()).map(|(_, dry)| dry);
        let mut first = as_build(Some("aa"));
        assert_eq!(dry(&mut first), Some(true));
        first.record("t b16", 58);
        assert_eq!(dry(&mut as_build(Some("aa"))), Some(false), "same build: its 58 kernels are cached");
        assert_eq!(dry(&mut as_build(Some("bb"))), Some(true), "a rebuilt binary");
        assert_eq!(dry(&mut as_build(None)), Some(true), "unknown build");
        let mut unknown = as_build(None);
        unknown.record("t b16", 58);
        assert_eq!(dry(&mut as_build(None)), Some(true), "unknown is never the same build");

        std::fs::write(dir.path().join(HISTORY_FILE), r#"{"t b16": 617, "t b8": 3}"#).unwrap();
        let mut old = as_build(Some("aa"));
        assert_eq!(dry(&mut old), Some(true), "an old history's count");
        assert_eq!(old.first_run("captured", [8, 3, 640, 640], || "t b8".into()).map(|(_, d)| d), Some(false));
    }

    /// The CPU backend has no dry run (it would run the step for real), and replicas would
    /// share the process-wide dry run or meet inside it.
    #[test]
    fn only_a_single_cuda_device_dry_runs() {
        assert_eq!(wanted(Backend::Cuda, 2), None);
        if std::env::var_os(ENV).is_none() {
            assert_eq!(wanted(Backend::Cpu, 1), None);
            assert_eq!(wanted(Backend::Cuda, 1), Some(Mode::WhenWorthIt));
        }
    }
}
