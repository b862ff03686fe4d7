//! Kernel times from the device without serialising the stream: a cubecl launch observer
//! asking for deferred timing (an event pair per launch, read after the window). The observer is
//! called on the issuing thread before submission, so each kernel is tagged with the phase the
//! executor is in. Backends without cubecl launches (flex) report no kernels.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use cubecl_runtime::logging::{LaunchObservation, LaunchObserver, ProfileDuration, TimingRequest};

use super::analysis::KernelEvent;

/// The phase and step kernels are attributed to right now.
#[derive(Default)]
struct Context {
    phase: String,
    step: usize,
}

#[derive(Default)]
struct Observer {
    context: Mutex<Context>,
    pending: Mutex<Vec<(&'static str, String, usize, ProfileDuration)>>,
}

impl LaunchObserver for Observer {
    fn launched(&self, _kernel: &'static str) {}

    fn timing(&self) -> TimingRequest {
        TimingRequest::Deferred
    }

    fn profiled(&self, kernel: &'static str, duration: ProfileDuration) {
        let cx = self.context.lock().expect("profiler context");
        self.pending.lock().expect("profiler kernels").push((kernel, cx.phase.clone(), cx.step, duration));
    }

    fn timed(&self, kernel: &'static str, duration: std::time::Duration, _method: cubecl_runtime::logging::TimingMethod) {
        // Only when cubecl's profiling logger is also on: the launch was timed by reading back.
        let _ = (kernel, duration);
    }
}

/// Kernel recording for one window of steps.
pub struct KernelRecorder {
    observer: Arc<Observer>,
    _installed: LaunchObservation,
}

impl KernelRecorder {
    /// Installs the observer (process-wide until [`finish`](Self::finish)).
    pub fn start() -> Self {
        let observer = Arc::new(Observer::default());
        let installed = LaunchObservation::new(observer.clone());
        Self { observer, _installed: installed }
    }

    /// Which observer this is (tests).
    #[cfg(test)]
    pub(super) fn observer_id(&self) -> usize {
        Arc::as_ptr(&self.observer) as usize
    }

    /// Attributes the following launches to `phase` of `step`.
    pub fn enter(&self, phase: &str, step: usize) {
        let mut cx = self.observer.context.lock().expect("profiler context");
        cx.phase.clear();
        cx.phase.push_str(phase);
        cx.step = step;
    }

    /// Uninstalls the observer and resolves every measurement (the device has been synced by
    /// then), on the clock that starts at `epoch`.
    pub fn finish(self, epoch: Instant) -> Vec<KernelEvent> {
        let Self { observer, _installed } = self;
        drop(_installed);
        let pending = std::mem::take(&mut *observer.pending.lock().expect("profiler kernels"));
        pending
            .into_iter()
            .filter_map(|(name, phase, step, duration)| {
                let ticks = cubecl_environment::future::block_on(duration.resolve())?;
                let start = ticks.start_duration_since(epoch).as_secs_f64() * 1e3;
                Some(KernelEvent { name: name.to_string(), phase, step, start_ms: start, dur_ms: ticks.duration().as_secs_f64() * 1e3 })
            })
            .collect()
    }
}
