//! The training profiler (LibreYOLO's `TrainStepProfiler` on the engine's terms): the executor
//! calls a probe around every stage, so every stage of the manifest is a phase, plus `dataload`
//! (the host waiting for the loader) and `readback` (the read of the previous step's loss terms).
//!
//! The window: `warmup` steps discarded, then `max(2, steps)` measured; the first half
//! unsynchronised (step time and dataloader stall; the verdict comes only from it), the second
//! half with a device sync around each phase (composition), with the kernel observer installed
//! (device times per kernel, attributed to phases). Then the report is printed and written, and
//! the profiler is dropped: with `profile=false` the executor holds `None` and each probe is one
//! branch on it.

pub mod analysis;
pub mod artifacts;
pub mod cupti;
pub mod host_sampler;
pub mod kernels;
pub mod timeline;
pub mod trace;

use std::time::Instant;

use burn::tensor::Device;

use analysis::{Measurements, Meta, PhaseSpan, Profile, StepRecord};
use kernels::KernelRecorder;

/// Where the window stands after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Measuring,
    Done,
}

pub struct Profiler {
    device: Device,
    meta: Meta,
    warmup: usize,
    active: usize,
    /// Steps seen since the profiler started (warm-up included).
    seen: usize,
    clock: Instant,
    steps: Vec<StepRecord>,
    current: Option<Open>,
    kernels: Option<KernelRecorder>,
    /// Whether the backend issues cubecl kernels the observer can time.
    observe_kernels: bool,
    /// Whether CUPTI times the kernels of graph replays ([`Self::trace_graph_kernels`]).
    trace_graphs: bool,
    replays: Replays,
    pages_at_real_start: Option<u64>,
    pages_per_step: Option<f64>,
    peak_bytes: Option<u64>,
    probe_ns: u128,
    /// Seconds since `clock` at the end of the first step, and at the window's start.
    first_step_s: Option<f64>,
    warmup_s: Option<f64>,
    warmup_compile: Option<crate::kernel_cache::CompileCost>,
}

/// The step being measured.
struct Open {
    start: Instant,
    fetched: Option<Instant>,
    phase: Option<(String, Instant)>,
    phases: Vec<PhaseSpan>,
}

impl Profiler {
    /// `observe_kernels`: the device is a cubecl (CUDA) device.
    pub fn new(device: Device, meta: Meta, warmup: usize, steps: usize, observe_kernels: bool) -> Self {
        Self {
            device,
            meta,
            warmup,
            active: steps.max(2),
            seen: 0,
            clock: Instant::now(),
            steps: vec![],
            current: None,
            kernels: None,
            observe_kernels,
            trace_graphs: false,
            replays: Replays::default(),
            pages_at_real_start: None,
            pages_per_step: None,
            peak_bytes: None,
            probe_ns: 0,
            first_step_s: None,
            warmup_s: None,
            warmup_compile: None,
        }
    }

    /// Times the kernels of graph replays with CUPTI when the run captures on a CUDA device and
    /// `LIBREYOLO_CUPTI` is not `0`: the driver's tracing is turned on now, before any graph is
    /// recorded; the records are kept from the synced half on. Only on a device with a driver
    /// (CUPTI's own calls crash without one), so the CPU tests never ask.
    pub fn trace_graph_kernels(mut self) -> Self {
        if self.observe_kernels && self.meta.capture && cupti::requested() != cupti::Wanted::Off {
            match cupti::enable() {
                Ok(()) => self.trace_graphs = true,
                Err(why) => tracing::warn!("profile: each graph replay is one kernel in the kernel view (CUPTI: {why})"),
            }
        }
        self
    }

    fn measured_index(&self) -> Option<usize> {
        self.seen.checked_sub(self.warmup).filter(|&i| i < self.active)
    }

    fn synced(&self) -> bool {
        self.measured_index().is_some_and(|i| i >= self.active / 2)
    }

    fn ms(&self, t: Instant) -> f64 {
        t.duration_since(self.clock).as_secs_f64() * 1e3
    }

    /// Just before the batch fetch.
    pub fn begin_step(&mut self) {
        let Some(i) = self.measured_index() else { return };
        if i == 0 {
            self.pages_at_real_start = pool_pages(&self.device);
            if self.warmup_s.is_none() {
                self.warmup_s = Some(self.clock.elapsed().as_secs_f64());
                self.warmup_compile = crate::kernel_cache::compile_cost();
            }
        }
        if i == self.active / 2 {
            self.pages_per_step =
                self.pages_at_real_start.zip(pool_pages(&self.device)).map(|(a, b)| b.saturating_sub(a) as f64 / (self.active / 2).max(1) as f64);
            // Once: a fetch that finds the epoch over begins this step again, and a second
            // recorder would uninstall the process-wide observer when it replaced the first
            // (every batch-16 COCO128 profile on the H200 had an empty kernel view).
            if self.observe_kernels && self.kernels.is_none() {
                let _ = self.device.sync();
                self.kernels = Some(KernelRecorder::start());
                if self.trace_graphs {
                    self.replays.trace_kernels(self.clock);
                }
            }
        }
        self.current = Some(Open { start: Instant::now(), fetched: None, phase: None, phases: vec![] });
    }

    /// The batch arrived.
    pub fn fetched(&mut self) {
        if let Some(open) = self.current.as_mut() {
            open.fetched = Some(Instant::now());
        }
    }

    /// A phase starts (a stage, or `readback`).
    pub fn enter(&mut self, phase: &str) {
        let synced = self.synced();
        let step = self.seen;
        let Some(open) = self.current.as_mut() else { return };
        let t0 = Instant::now();
        if synced {
            let _ = self.device.sync();
            if let Some(k) = &self.kernels {
                k.enter(phase, step);
            }
            self.replays.enter();
        }
        let now = Instant::now();
        open.phase = Some((phase.to_string(), now));
        if !synced {
            self.probe_ns += now.duration_since(t0).as_nanos();
        }
    }

    /// A captured graph was replayed in the current phase.
    pub fn graph_replayed(&mut self) {
        self.replays.in_phase = true;
        self.replays.in_step = true;
    }

    /// The phase entered last ends.
    pub fn exit(&mut self) {
        let synced = self.synced();
        let replayed = std::mem::take(&mut self.replays.in_phase);
        let step = self.seen;
        let Some(open) = self.current.as_mut() else { return };
        let t0 = Instant::now();
        if synced {
            let _ = self.device.sync();
            if let Some(k) = &self.kernels {
                k.enter("unphased", 0);
            }
        }
        let end = Instant::now();
        if let Some((phase, start)) = open.phase.take() {
            let start_ms = start.duration_since(self.clock).as_secs_f64() * 1e3;
            let dur_ms = end.duration_since(start).as_secs_f64() * 1e3;
            if synced && replayed && self.observe_kernels {
                self.replays.phase_ended(analysis::KernelEvent { name: "cuda graph replay".into(), phase: phase.clone(), step, start_ms, dur_ms });
            }
            open.phases.push(PhaseSpan { phase, start_ms, dur_ms });
        }
        if synced && let Some(u) = self.device.memory_pool_report() {
            let peak: u64 = u.iter().map(|p| p.pages_peak * p.page_size).sum();
            self.peak_bytes = Some(self.peak_bytes.unwrap_or(0).max(peak));
        } else if !synced {
            self.probe_ns += Instant::now().duration_since(t0).as_nanos();
        }
    }

    /// The step ended (after `images` images); `Done` once the window is complete.
    pub fn end_step(&mut self) -> Progress {
        let synced = self.synced();
        let replayed = self.replays.step_ended(synced);
        if let Some(open) = self.current.take() {
            let end = Instant::now();
            let start = self.ms(open.start);
            let dataload_ms = open.fetched.map(|f| f.duration_since(open.start).as_secs_f64() * 1e3).unwrap_or(0.0);
            self.steps.push(StepRecord {
                index: self.seen,
                synced,
                start_ms: start,
                dur_ms: end.duration_since(open.start).as_secs_f64() * 1e3,
                dataload_ms,
                phases: open.phases,
                replayed,
            });
        }
        if self.seen == 0 {
            self.first_step_s = Some(self.clock.elapsed().as_secs_f64());
        }
        self.seen += 1;
        if self.seen >= self.warmup + self.active { Progress::Done } else { Progress::Measuring }
    }

    /// A fetch found the epoch over: the open step is dropped, the next one starts afresh.
    pub fn abandon_step(&mut self) {
        self.current = None;
    }

    /// Ends the window: resolves kernel times and analyses.
    pub fn finish(mut self) -> Profile {
        let _ = self.device.sync();
        let mut kernels = self.kernels.take().map(|k| k.finish(self.clock)).unwrap_or_default();
        let timing = format!("device (cubecl launch observer, deferred events{})", self.replays.finish(&mut kernels));
        let real = self.steps.iter().filter(|s| !s.synced).count().max(1);
        let m = Measurements {
            steps: self.steps,
            kernels,
            kernel_timing: self.observe_kernels.then_some(timing),
            pool_pages_per_step: self.pages_per_step,
            peak_memory_mb: self.peak_bytes.map(|b| b as f64 / 1e6),
            probe_overhead_us_per_step: self.probe_ns as f64 / 1e3 / real as f64,
            first_step_s: self.first_step_s,
            warmup_s: self.warmup_s,
            warmup_compile: self.warmup_compile.take(),
        };
        analysis::analyse(self.meta, self.warmup, m)
    }
}

/// The graph replays of the synced half in the kernel view: the kernels each ran, traced by
/// CUPTI when the run captures and CUPTI is on, else one kernel a replay, timed by the synced
/// wall time of the phase that replayed it (device time plus the replay's launch).
#[derive(Default)]
struct Replays {
    /// One event a replay: the kernel view's fallback.
    events: Vec<analysis::KernelEvent>,
    traced: Option<cupti::GraphKernels>,
    /// A graph was replayed in the current phase, and in the current step (for its
    /// [`StepRecord::replayed`]).
    in_phase: bool,
    in_step: bool,
}

impl Replays {
    /// Turns CUPTI's kernel tracing on for the synced half, when it can be.
    fn trace_kernels(&mut self, clock: Instant) {
        match cupti::GraphKernels::start(clock) {
            Ok(g) => self.traced = Some(g),
            Err(why) => tracing::info!("profile: each graph replay is one kernel in the kernel view (CUPTI: {why})"),
        }
    }

    /// A synced phase starts (the device drained).
    fn enter(&mut self) {
        if let Some(g) = self.traced.as_mut() {
            g.enter();
        }
    }

    /// A synced phase that replayed a graph ended, `replay` its span as one kernel.
    fn phase_ended(&mut self, replay: analysis::KernelEvent) {
        if let Some(g) = self.traced.as_mut() {
            g.exit(&replay.phase, replay.step);
        }
        self.events.push(replay);
    }

    /// A step ended: whether it replayed a graph (the traced records collected when synced).
    fn step_ended(&mut self, synced: bool) -> bool {
        if let Some(g) = self.traced.as_ref().filter(|_| synced) {
            g.step_done();
        }
        std::mem::take(&mut self.in_step)
    }

    /// Adds the replays' kernels to `kernels`; returns what `kernel_timing` says of them.
    fn finish(&mut self, kernels: &mut Vec<analysis::KernelEvent>) -> &'static str {
        match self.traced.take().map(cupti::GraphKernels::finish) {
            Some(Ok(graph)) if !graph.is_empty() => {
                kernels.extend(graph);
                "; graph replays: CUPTI activity records"
            }
            other => {
                if let Some(why) = other.map(|r| r.err().unwrap_or_else(|| "no kernel record came from a graph".into())) {
                    tracing::warn!("profile: CUPTI traced no graph kernel ({why}); each replay is one kernel in the kernel view");
                }
                kernels.append(&mut self.events);
                ""
            }
        }
    }
}

/// Pages held by the device's memory pools (each new page is one device allocation).
fn pool_pages(device: &Device) -> Option<u64> {
    device.memory_pool_report().map(|r| r.iter().map(|p| p.pages).sum())
}

/// The report printed when the window completes.
pub fn report(p: &Profile) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "profile: {} on {} (batch {}, {}, {})", p.meta.model, p.meta.device, p.meta.batch, p.meta.imgsz, p.meta.precision);
    let _ = writeln!(
        s,
        "  step {:.2} ms ({:.1} img/s), dataload {:.2} ms ({:.0}%), window: {} warm-up, {} real, {} synced steps",
        p.real.step_ms,
        p.real.img_per_s,
        p.real.dataload_ms,
        p.real.dataload_frac * 100.0,
        p.window.warmup,
        p.window.real_steps,
        p.window.synced_steps
    );
    if p.meta.capture {
        let total = p.window.real_steps + p.window.synced_steps;
        let ran = if p.window.replayed_steps == 0 { " (none: the measured steps ran eager; the log's cuda_graph lines say why)" } else { "" };
        let _ = writeln!(s, "  captured: {} of {total} window steps replayed the graph{ran}", p.window.replayed_steps);
    }
    match &p.kernel_timing {
        Some(_) => {
            let _ = writeln!(
                s,
                "  GPU util {:.0}% ({:.2} ms busy/step), {:.0} kernels/step at {:.1} us, host overhead {:.2} ms/step",
                p.gpu_util * 100.0,
                p.gpu_busy_ms_per_step,
                p.kernels_per_step,
                p.mean_kernel_us,
                p.host_overhead_ms_per_step
            );
        }
        None => {
            let _ = writeln!(s, "  no kernel view on this device (CPU): utilisation counts as 0%");
        }
    }
    if let (Some(first), Some(all)) = (p.window.first_step_s, p.window.warmup_s) {
        let _ = writeln!(
            s,
            "  warm-up {all:.1} s before the window ({} steps; the first step {first:.1} s: kernel compilation, autotune, capture)",
            p.window.warmup
        );
        if let Some(cost) = &p.window.warmup_compile {
            let _ = writeln!(s, "  warm-up compilation: {cost}");
        }
    }
    if let Some(mb) = p.peak_memory_mb {
        let _ = writeln!(s, "  peak pool memory {mb:.0} MB, {:.1} new pool pages/step", p.pool_pages_per_step.unwrap_or(0.0));
    }
    let _ = writeln!(s, "  phases (synced ms/step): {}", p.composition_ms.iter().map(|(k, v)| format!("{k} {v:.2}")).collect::<Vec<_>>().join(", "));
    let _ = writeln!(s, "  verdict: {} — {}", p.bound, p.bound_why);
    let _ = write!(s, "  levers: {}", p.levers);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window: warm-up steps are not recorded, then half the measured steps unsynced and
    /// half synced; `Done` comes with the last one; an abandoned fetch records nothing.
    #[test]
    fn the_window_splits_measured_steps_in_halves() {
        let mut p = Profiler::new(Device::flex(), Meta { batch: 4, ..Default::default() }, 2, 4, false);
        let mut progress = vec![];
        for i in 0..6 {
            p.begin_step();
            if i == 3 {
                p.abandon_step(); // the epoch ended at this fetch; the next step starts afresh
                p.begin_step();
            }
            p.fetched();
            for phase in ["data", "forward"] {
                p.enter(phase);
                p.exit();
            }
            progress.push(p.end_step());
        }
        assert_eq!(progress.iter().filter(|s| **s == Progress::Done).count(), 1);
        assert_eq!(progress.last(), Some(&Progress::Done));
        let profile = p.finish();
        let m = &profile.measurements;
        assert_eq!(m.steps.iter().map(|s| (s.index, s.synced)).collect::<Vec<_>>(), vec![(2, false), (3, false), (4, true), (5, true)]);
        assert!(m.steps.iter().all(|s| s.phases.iter().map(|p| p.phase.as_str()).eq(["data", "forward"])));
        assert_eq!((profile.window.real_steps, profile.window.synced_steps, profile.window.warmup), (2, 2, 2));
        assert!(profile.kernel_timing.is_none());
    }

    /// An epoch that ends at the fetch of the first synced step begins that step twice: the
    /// kernel recorder started for it is kept, not replaced.
    #[test]
    fn the_kernel_recorder_survives_an_epoch_boundary_at_the_synced_half() {
        let mut p = Profiler::new(Device::flex(), Meta { batch: 4, ..Default::default() }, 1, 4, true);
        for _ in 0..3 {
            p.begin_step();
            p.end_step();
        }
        p.begin_step(); // measured step 2 of 4: the synced half starts, the recorder with it
        let first = p.kernels.as_ref().expect("recording from the synced half").observer_id();
        p.abandon_step();
        p.begin_step();
        assert_eq!(p.kernels.as_ref().unwrap().observer_id(), first, "the recorder was replaced");
    }

    /// Without CUPTI (`LIBREYOLO_CUPTI` unset, as in the tests) a graph replay in the synced
    /// half is one `cuda graph replay` kernel of the phase that replayed it, timed by that
    /// phase's span; replays in the real half and phases without one add none.
    #[test]
    fn a_replay_is_one_kernel_of_its_phase_without_cupti() {
        let meta = Meta { batch: 4, capture: true, ..Default::default() };
        let mut p = Profiler::new(Device::flex(), meta, 1, 4, true);
        for _ in 0..5 {
            p.begin_step();
            p.fetched();
            p.enter("data");
            p.exit();
            p.enter("forward");
            p.graph_replayed();
            p.exit();
            p.end_step();
        }
        let profile = p.finish();
        let m = &profile.measurements;
        let replays: Vec<_> = m.kernels.iter().filter(|k| k.name == "cuda graph replay").collect();
        assert_eq!(replays.len(), 2, "one a synced step: {:?}", m.kernels);
        assert!(replays.iter().all(|k| k.phase == "forward" && k.dur_ms >= 0.0));
        assert_eq!(replays.iter().map(|k| k.step).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(m.steps.iter().filter(|s| s.replayed).count(), 4);
        assert_eq!(profile.kernel_timing.as_deref(), Some("device (cubecl launch observer, deferred events)"));
    }

    /// The warm-up is its own figure: the first step (compilation, capture) and everything
    /// before the window, never part of a measured step.
    #[test]
    fn the_warm_up_is_reported_apart_from_the_steps() {
        let mut p = Profiler::new(Device::flex(), Meta { batch: 4, ..Default::default() }, 2, 2, false);
        for i in 0..4 {
            p.begin_step();
            p.fetched();
            if i == 0 {
                std::thread::sleep(std::time::Duration::from_millis(30)); // a slow first step
            }
            p.end_step();
        }
        let profile = p.finish();
        let (first, warmup) = (profile.window.first_step_s.unwrap(), profile.window.warmup_s.unwrap());
        assert!(first >= 0.03, "{first}");
        assert!(warmup >= first, "{warmup} < {first}");
        assert!(profile.real.step_ms < 30.0, "the slow first step leaked into the window: {}", profile.real.step_ms);
    }
}
