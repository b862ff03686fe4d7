//! Where the host's CPU time goes over a training's first steps (`LIBREYOLO_HOST_PROFILE`).
//!
//! The profiler proper times stages and GPU kernels; a first step that spends seconds on the host
//! with nothing compiled (burn-fusion's first sight of each op sequence, cache lookups, autotune)
//! is invisible to it. This samples every thread's stack ~500 times a CPU-second (pprof, a
//! SIGPROF timer: CPU time, so a thread blocked on the GPU or the disk is not sampled) from the
//! first step until `LIBREYOLO_HOST_PROFILE_STEPS` steps (1) have run, then writes:
//!
//! - `PATH`: samples per thread, the top functions by inclusive and by self samples, and self
//!   samples per crate;
//! - `PATH.folded`: every stack in flamegraph's folded format (`thread;root;...;leaf count`), for
//!   `inferno-flamegraph` or `flamegraph.pl`.
//!
//! A stripped binary has no symbol table: strip with `--strip-debug` to keep function names
//! (scripts/gpu.sh packs such a binary).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use super::artifacts::write_atomic;

pub const ENV: &str = "LIBREYOLO_HOST_PROFILE";
pub const STEPS_ENV: &str = "LIBREYOLO_HOST_PROFILE_STEPS";
const SAMPLES_PER_S: i32 = 499;
const TOP: usize = 40;

/// Samples the host from `start` until `steps` steps have ended.
pub struct HostSampler {
    path: PathBuf,
    steps_left: usize,
    #[cfg(target_os = "linux")]
    guard: Option<pprof::ProfilerGuard<'static>>,
}

impl HostSampler {
    /// The sampler `LIBREYOLO_HOST_PROFILE` asks for, not started yet; `None` when unset.
    pub fn from_env() -> anyhow::Result<Option<Self>> {
        let Some(path) = std::env::var_os(ENV).filter(|p| !p.is_empty()) else { return Ok(None) };
        let steps = match std::env::var(STEPS_ENV) {
            Ok(v) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| anyhow::anyhow!("{STEPS_ENV}={v:?}: expected a whole number of steps, at least 1"))?,
            Err(_) => 1,
        };
        Ok(Some(Self {
            path: PathBuf::from(path),
            steps_left: steps,
            #[cfg(target_os = "linux")]
            guard: None,
        }))
    }

    /// Starts sampling (once; later calls do nothing).
    pub fn start(&mut self) -> anyhow::Result<()> {
        #[cfg(target_os = "linux")]
        if self.guard.is_none() {
            let guard = pprof::ProfilerGuardBuilder::default()
                .frequency(SAMPLES_PER_S)
                // Unwinding through these from a signal handler can deadlock or crash.
                .blocklist(&["libc", "libgcc", "pthread", "vdso"])
                .build()
                .map_err(|e| anyhow::anyhow!("{ENV}: cannot start the host sampler: {e}"))?;
            self.guard = Some(guard);
            tracing::info!("{ENV}: sampling the host's stacks for {} step(s)", self.steps_left);
        }
        #[cfg(not(target_os = "linux"))]
        anyhow::bail!("{ENV}: host sampling needs Linux");
        Ok(())
    }

    /// A step ended. Returns true once the last step is in and the report is written.
    pub fn step_ended(&mut self) -> anyhow::Result<bool> {
        self.steps_left = self.steps_left.saturating_sub(1);
        if self.steps_left > 0 {
            return Ok(false);
        }
        self.finish()?;
        Ok(true)
    }

    #[cfg(target_os = "linux")]
    fn finish(&mut self) -> anyhow::Result<()> {
        let Some(guard) = self.guard.take() else { return Ok(()) };
        let report = guard.report().build().map_err(|e| anyhow::anyhow!("{ENV}: cannot build the host profile: {e}"))?;
        let elapsed = report.timing.duration.as_secs_f64();
        let stacks: Vec<Stack> = report
            .data
            .iter()
            .map(|(frames, &count)| Stack {
                thread: frames.thread_name.clone(),
                // pprof lists frames leaf first; each frame holds its inlined functions, innermost first.
                leaf_first: frames.frames.iter().flat_map(|f| f.iter().map(|s| function_name(&s.name()))).collect(),
                samples: count.max(0) as u64,
            })
            .collect();
        write_atomic(&self.path, summary(&stacks, elapsed).as_bytes())?;
        let mut folded_path = self.path.clone().into_os_string();
        folded_path.push(".folded");
        write_atomic(&PathBuf::from(folded_path), folded(&stacks).as_bytes())?;
        eprintln!("host profile: {} samples over {elapsed:.1} s written to {}", stacks.iter().map(|s| s.samples).sum::<u64>(), self.path.display());
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    fn finish(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

impl Drop for HostSampler {
    /// A run that ends (or fails) before the last sampled step still writes what it sampled.
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            eprintln!("{e:#}");
        }
    }
}

/// One sampled call stack and how often it was seen.
struct Stack {
    thread: String,
    leaf_first: Vec<String>,
    samples: u64,
}

/// A demangled symbol without its hash suffix (`::h0123456789abcdef`).
fn function_name(symbol: &str) -> String {
    match symbol.rsplit_once("::h") {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_string(),
        _ => symbol.to_string(),
    }
}

/// The crate a function belongs to: the first path segment after any leading `<`, `&`, `mut `,
/// `dyn ` (so `<burn_fusion::X as core::ops::Drop>::drop` is burn_fusion's, the implementing
/// type's crate, not the trait's).
fn crate_of(function: &str) -> &str {
    let trimmed = function.trim_start_matches(['<', '&', ' ']).trim_start_matches("mut ").trim_start_matches("dyn ");
    trimmed.split("::").next().unwrap_or(trimmed)
}

fn summary(stacks: &[Stack], elapsed_s: f64) -> String {
    let total: u64 = stacks.iter().map(|s| s.samples).sum();
    let mut per_thread: HashMap<&str, u64> = HashMap::new();
    let mut inclusive: HashMap<&str, u64> = HashMap::new();
    let mut own: HashMap<&str, u64> = HashMap::new();
    let mut per_crate: HashMap<&str, u64> = HashMap::new();
    for stack in stacks {
        *per_thread.entry(&stack.thread).or_default() += stack.samples;
        let mut seen: Vec<&str> = stack.leaf_first.iter().map(String::as_str).collect();
        seen.sort_unstable();
        seen.dedup(); // recursion counts a function once per sample
        for f in seen {
            *inclusive.entry(f).or_default() += stack.samples;
        }
        let leaf = stack.leaf_first.first().map(String::as_str).unwrap_or("?");
        *own.entry(leaf).or_default() += stack.samples;
        *per_crate.entry(crate_of(leaf)).or_default() += stack.samples;
    }
    let ms = |n: u64| n as f64 * 1000.0 / SAMPLES_PER_S as f64;
    let mut out = String::new();
    let _ = writeln!(out, "host CPU samples: {total} (~{:.0} ms of CPU time at {SAMPLES_PER_S} Hz) over {elapsed_s:.2} s of wall time", ms(total));
    for (title, table, limit) in
        [("per thread", &per_thread, TOP), ("inclusive, by function", &inclusive, TOP), ("self, by function", &own, TOP), ("self, by crate", &per_crate, 20)]
    {
        let _ = writeln!(out, "\n## {title}\n{:>8} {:>6}  name", "ms", "%");
        let mut rows: Vec<(&&str, &u64)> = table.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (name, &n) in rows.into_iter().take(limit) {
            let _ = writeln!(out, "{:>8.0} {:>5.1}%  {name}", ms(n), 100.0 * n as f64 / total.max(1) as f64);
        }
    }
    out
}

fn folded(stacks: &[Stack]) -> String {
    let mut out = String::new();
    for stack in stacks {
        let path: Vec<&str> = stack.leaf_first.iter().rev().map(|f| f.as_str()).collect();
        let _ = writeln!(out, "{};{} {}", stack.thread.replace(';', ":"), path.join(";").replace(' ', "_"), stack.samples);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(thread: &str, leaf_first: &[&str], samples: u64) -> Stack {
        Stack { thread: thread.into(), leaf_first: leaf_first.iter().map(|s| s.to_string()).collect(), samples }
    }

    #[test]
    fn names_lose_their_hash_and_map_to_crates() {
        assert_eq!(function_name("burn_fusion::stream::Processor::explore::h0123456789abcdef"), "burn_fusion::stream::Processor::explore");
        assert_eq!(function_name("main"), "main");
        assert_eq!(function_name("a::hash_map"), "a::hash_map");
        assert_eq!(crate_of("<burn_fusion::X as core::ops::Drop>::drop"), "burn_fusion");
        assert_eq!(crate_of("cubecl_cuda::compute::f"), "cubecl_cuda");
    }

    #[test]
    fn summary_counts_inclusive_once_per_sample_and_self_at_the_leaf() {
        let stacks = [stack("main", &["leaf", "rec", "rec", "root"], 3), stack("main", &["rec", "root"], 1), stack("worker", &["other", "root"], 2)];
        let text = summary(&stacks, 1.0);
        let row = |section: &str, name: &str| -> f64 {
            let body = text.split(&format!("## {section}\n")).nth(1).unwrap();
            let line = body.lines().find(|l| l.ends_with(&format!("  {name}"))).unwrap_or_else(|| panic!("{name} missing in {section}:\n{text}"));
            line.split_whitespace().nth(1).unwrap().trim_end_matches('%').parse().unwrap()
        };
        assert_eq!(row("inclusive, by function", "root"), 100.0);
        assert!((row("inclusive, by function", "rec") - 66.7).abs() < 0.1); // 4 of 6, not 7
        assert_eq!(row("self, by function", "leaf"), 50.0);
        assert!((row("per thread", "worker") - 33.3).abs() < 0.1);
        let folded = folded(&stacks);
        assert!(folded.contains("main;root;rec;rec;leaf 3"), "{folded}");
    }
}
