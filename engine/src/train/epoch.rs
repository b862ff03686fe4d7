//! One epoch's steps: each batch through the executor, the step's losses queued on the device
//! and read one step late (the host queues the next step before it waits), the progress bar,
//! the probes, and Ctrl-C.

use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::tensor::Tensor;
use libreyolo_stages::data::Loader;
use libreyolo_stages::stage::{LossTerms, StepInfo};

use super::replica::Replica;
use super::run_dir::StepRecord;
use super::setup::{Probes, Trainer};
use super::{STOP, progress};
use crate::profile::{self, Profiler};
use crate::step::Probe;

/// How an epoch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochEnd {
    Complete,
    /// Ctrl-C: weights/last is saved and the run stops.
    Interrupted,
    /// The profile window completed with `profile.then_stop`: the run stops, nothing saved.
    ProfileOnly,
}

/// What an epoch's steps add up to.
pub struct EpochOut {
    /// The loss terms' names and their means over the epoch.
    pub losses: Vec<(String, f64)>,
    pub images: usize,
    pub end: EpochEnd,
    pub steps: Vec<StepRecord>,
}

/// A step's logged loss terms, copied into a buffer of their own on the device and read back
/// later: reading them one step late lets the host queue the next step before it waits, so the
/// GPU is not idle while the host prepares a step. (A captured step's outputs are rewritten by
/// the next replay; the copy runs before it, in stream order.)
pub struct QueuedLosses(Tensor<1>);

pub fn queue_losses(terms: &LossTerms) -> QueuedLosses {
    QueuedLosses(Tensor::cat(terms.parts.iter().map(|(_, t)| t.clone()).collect(), 0).detach())
}

impl QueuedLosses {
    /// The replicas' mean (a collective that waits for it, so it runs here, at the read, which
    /// every rank reaches in the same order), read back.
    pub fn read(self, replica: &Replica) -> Vec<f64> {
        replica.mean(self.0).into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default().into_iter().map(f64::from).collect()
    }
}

/// A step's losses queued on the device, with what its `steps.csv` row needs.
struct PendingLosses {
    queued: QueuedLosses,
    step: usize,
    lr: f64,
    iteration: usize,
}

/// The losses of an epoch's steps, as read back (the sum kept for the progress bar's mean).
#[derive(Default)]
struct EpochLosses {
    names: Vec<&'static str>,
    sum: Vec<f64>,
    steps: Vec<StepRecord>,
}

impl EpochLosses {
    /// Reads `pending`'s losses (waiting for its step; the replicas' mean), refuses a loss that
    /// is not finite, naming its step, and adds its row.
    fn record(&mut self, pending: Option<PendingLosses>, replica: &Replica, epoch: usize) -> anyhow::Result<()> {
        let Some(PendingLosses { queued, step, lr, iteration }) = pending else { return Ok(()) };
        let l = queued.read(replica);
        if !l.iter().all(|v| v.is_finite()) {
            anyhow::bail!("the loss is not finite at epoch {} step {} ({})", epoch + 1, step + 1, self.describe(&l, |v| format!("{v}")));
        }
        self.sum.resize(l.len(), 0.0);
        for (s, v) in self.sum.iter_mut().zip(&l) {
            *s += v;
        }
        self.steps.push(StepRecord { iteration, losses: l, lr });
        Ok(())
    }

    /// `box 1.2, dfl 0.8, ...` of `values`.
    fn describe(&self, values: &[f64], f: impl Fn(f64) -> String) -> String {
        self.names.iter().zip(values).map(|(n, v)| format!("{n} {}", f(*v))).collect::<Vec<_>>().join(" ")
    }

    fn mean(&self) -> Vec<(String, f64)> {
        let n = self.steps.len().max(1) as f64;
        self.names.iter().zip(&self.sum).map(|(name, s)| (name.to_string(), s / n)).collect()
    }
}

/// The profiler as the executor's probe (absent: nothing).
struct Probed<'a>(&'a mut Option<Profiler>);

impl Probe for Probed<'_> {
    fn enter(&mut self, phase: &str) {
        if let Some(p) = self.0.as_mut() {
            p.enter(phase);
        }
    }
    fn exit(&mut self) {
        if let Some(p) = self.0.as_mut() {
            p.exit();
        }
    }
    fn replayed(&mut self) {
        if let Some(p) = self.0.as_mut() {
            p.graph_replayed();
        }
    }
}

impl Trainer<'_> {
    /// One epoch over `loader`'s batches.
    pub fn run_epoch(&mut self, loader: &Loader, epoch: usize, epochs: usize) -> anyhow::Result<EpochOut> {
        let total = loader.batches_per_epoch();
        let bar = progress::epoch_bar(epoch, epochs, total);
        if !self.replica.is_main() {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let mut images = 0usize;
        let mut log = EpochLosses::default();
        // The last step's losses, queued on the device and read after the next step is queued.
        let mut pending: Option<PendingLosses> = None;
        let started = Instant::now();
        // A fixed batch needs no loader after the first epoch.
        let batches = self.fixed_batch.is_none().then(|| loader.epoch(epoch as u64));
        let accumulate = self.update.accumulate;
        let mosaic_closed = epoch >= epochs.saturating_sub(self.loaded.manifest.augment.no_aug_epochs as usize);
        let mut i = 0;
        let end = loop {
            if let Some(p) = self.probes.profiler.as_mut() {
                p.begin_step();
            }
            // `data.fixed_batch`: the epoch is `total` steps of the first batch; the loader's
            // other batches are never trained on (they differ in label rows, so under
            // `data.label_rows = "batch"` they would also miss the graph).
            let next = match (&self.fixed_batch, i < total) {
                (Some(b), true) => Some(b.clone()),
                (Some(_), false) => None,
                (None, _) => batches.as_ref().and_then(|b| b.recv().ok()),
            };
            let Some(batch) = next else {
                if let Some(p) = self.probes.profiler.as_mut() {
                    p.abandon_step();
                }
                break EpochEnd::Complete;
            };
            if self.loaded.manifest.data.fixed_batch && self.fixed_batch.is_none() {
                self.fixed_batch = Some(batch.clone());
            }
            if let Some(p) = self.probes.profiler.as_mut() {
                p.fetched();
            }
            let size = batch.size;
            self.follow_rows(batch.rows);
            if let Some(sampler) = self.probes.host_sampler.as_mut() {
                sampler.start()?;
            }
            let info = StepInfo { iteration: self.update.iteration.get(), last_micro: (i + 1) % accumulate == 0 || i + 1 == total, mosaic_closed };
            let out = self.exec.step(batch, info, &mut Probed(&mut self.probes.profiler))?;
            // The rate and the steps taken after this step (what `steps.csv` has always shown).
            let lr = self.lr();
            images += size;
            if let Some(loss) = &out.loss {
                if log.names.is_empty() {
                    log.names = loss.names();
                }
                self.probe(|p| p.enter("readback"));
                // This step's losses are queued; the previous step's are read now, after this
                // step was queued (the host no longer waits for a step before queuing the next).
                let queued = PendingLosses { queued: queue_losses(loss), step: i, lr, iteration: self.update.iteration.get() };
                log.record(pending.replace(queued), &self.replica, epoch)?;
                self.probe(|p| p.exit());
                let n = log.steps.len().max(1) as f64;
                let means: Vec<f64> = log.sum.iter().map(|s| s / n).collect();
                bar.set_message(format!(
                    "{} lr {:.5} {:.1} img/s{}",
                    log.describe(&means, |v| format!("{v:.3}")),
                    self.lr(),
                    images as f64 / started.elapsed().as_secs_f64(),
                    progress::memory(&self.device)
                ));
            }
            if let Some(sampler) = self.probes.host_sampler.as_mut()
                && sampler.step_ended()?
            {
                self.probes.host_sampler = None;
            }
            bar.inc(1);
            i += 1;
            if self.probes.profiler.as_mut().map(|p| p.end_step()) == Some(profile::Progress::Done) {
                log.record(pending.take(), &self.replica, epoch)?;
                if close_profile(&mut self.probes)? {
                    bar.abandon();
                    return Ok(EpochOut { losses: log.mean(), images, end: EpochEnd::ProfileOnly, steps: log.steps });
                }
            }
            self.replica.step_done();
            if self.replica.should_stop(i, STOP.load(Ordering::SeqCst)) {
                bar.abandon();
                break EpochEnd::Interrupted;
            }
        };
        log.record(pending.take(), &self.replica, epoch)?;
        if end == EpochEnd::Complete {
            bar.finish();
        }
        Ok(EpochOut { losses: log.mean(), images, end, steps: log.steps })
    }

    /// Growing target rows past the count the step's graphs hold: a smaller count never comes
    /// back, so those graphs are dropped with their memory, and the new count is captured at the
    /// threshold (at most a few times a run: 64, 128, 256, `max_labels`).
    fn follow_rows(&mut self, rows: usize) {
        if let Some((before, now)) = self.grown_rows.as_mut().and_then(|g| g.rise(rows))
            && let Some(graphs) = self.exec.graphs.as_mut()
        {
            graphs.invalidate(&format!("the target rows grew from {before} to {now}"));
        }
    }

    fn probe(&mut self, f: impl FnOnce(&mut Profiler)) {
        if let Some(p) = self.probes.profiler.as_mut() {
            f(p);
        }
    }
}

/// The window is complete: analyse, print, write the artifacts and drop the probes.
/// Returns whether the run stops here (`profile.then_stop`).
fn close_profile(probes: &mut Probes) -> anyhow::Result<bool> {
    let (Some(profiler), Some(out)) = (probes.profiler.take(), probes.profile_out.take()) else { return Ok(false) };
    let p = profiler.finish();
    let path = profile::artifacts::write(&out.dir, &p, out.trace)?;
    eprintln!("\n{}", profile::report(&p));
    eprintln!("  wrote {} (and profile_summary.json, {}timeline.html)", path.display(), if out.trace { "profile_trace.json, " } else { "" });
    if !out.then_stop {
        eprintln!("Profile window complete; training continues without the probes");
    }
    Ok(out.then_stop)
}
