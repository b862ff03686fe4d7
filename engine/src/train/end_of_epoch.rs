//! What follows an epoch: its record, validation of the EMA weights (replayed as graphs when the
//! step is captured), `best`/`last` checkpoints written atomically, the records and plots, and
//! the decisions to stop (Ctrl-C, `patience`) that every replica agrees on.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use libreyolo_stages::data::Loader;

use super::STOP;
use super::checkpoint::TrainState;
use super::epoch::{EpochEnd, EpochOut};
use super::plots;
use super::run_dir::{EpochRecord, RunDir};
use super::setup::Trainer;
use super::validate;
use crate::capture::CaptureManager;
use crate::capture::forward::{Forward, ForwardFn, ForwardGraph};

/// Whether the run goes on after an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Continue,
    Stop,
}

/// What the ends of epochs share.
pub struct EndOfEpoch {
    pub nms: libreyolo_stages::val::nms::NmsConfig,
    pub val_graphs: Option<CaptureManager<ForwardGraph<'static>>>,
    pub last: Option<EpochRecord>,
    pub interrupted: bool,
    pub stopped_early: bool,
}

impl EndOfEpoch {
    /// Records epoch `epoch` (`out`, `seconds` long); on rank 0 validates, checkpoints and
    /// decides whether to go on, which every replica then follows.
    #[allow(clippy::too_many_arguments)]
    pub fn epoch_done(
        &mut self,
        t: &Trainer<'_>,
        run: Option<&mut RunDir>,
        val: Option<&Loader>,
        state: &mut TrainState,
        epoch: usize,
        out: EpochOut,
        seconds: f64,
    ) -> anyhow::Result<After> {
        let m = &t.loaded.manifest;
        let epochs = m.run.epochs as usize;
        let mut record = EpochRecord {
            epoch,
            losses: out.losses,
            lr: t.lr(),
            // Every replica trains on as many images.
            images_per_s: (out.images * t.replica.world()) as f64 / seconds,
            seconds,
            metrics: None,
        };
        if out.end == EpochEnd::Interrupted {
            // Interrupted mid-epoch (every replica at the same step): keep what was learnt, but
            // this epoch is not complete.
            state.next_epoch = epoch;
            if let Some(run) = run {
                t.save(&run.weights("last"), state)?;
                run.log(&format!("interrupted in epoch {}; weights/last saved", epoch + 1));
            }
            self.interrupted = true;
            return Ok(After::Stop);
        }
        state.next_epoch = epoch + 1;
        state.iteration = t.update.iteration.get();
        let Some(run) = run else {
            // Rank 0 validates, saves and decides whether to go on; the others wait for it.
            return Ok(if t.replica.agree_stop_after_epoch(false) { After::Stop } else { After::Continue });
        };
        let validate_now = m.val.enabled && m.val.eval_interval > 0 && ((epoch + 1).is_multiple_of(m.val.eval_interval as usize) || epoch + 1 == epochs);
        if validate_now && let Some(vl) = val {
            record.metrics = Some(self.validate(t, vl)?);
        }
        self.checkpoint(t, run, state, &record, epoch)?;
        let validated = record.metrics.is_some();
        self.last = Some(record);
        if STOP.load(Ordering::SeqCst) {
            self.interrupted = true;
        }
        // Early stopping: `patience` epochs since the best validated fitness (0: never).
        if !self.interrupted
            && validated
            && m.run.patience > 0
            && let Some(best) = state.best_epoch
            && epoch - best >= m.run.patience as usize
            && epoch + 1 < epochs
        {
            let line = format!(
                "early stopping: no improvement in {} for {} epochs (best {:.4} at epoch {}); patience={}",
                t.task().metric_names()[0],
                epoch - best,
                state.best_fitness.unwrap_or(0.0),
                best + 1,
                m.run.patience
            );
            eprintln!("{line}");
            run.log(&line);
            self.stopped_early = true;
        }
        Ok(if t.replica.agree_stop_after_epoch(self.interrupted || self.stopped_early) { After::Stop } else { After::Continue })
    }

    /// The task's metrics of the EMA weights (the model's without EMA) on the validation set.
    fn validate(&mut self, t: &Trainer<'_>, loader: &Loader) -> anyhow::Result<Vec<f64>> {
        let started = Instant::now();
        let forward = validation_forward(t);
        let (device, network, dtype) = (&t.device, &t.model.network, t.precision.compute);
        let out = match self.val_graphs.as_mut() {
            // A captured run replays validation's forward too (LibreYOLO's validation graph).
            Some(graphs) => validate::run(network, loader, device, &self.nms, &mut |x| {
                let mut ops = Forward { f: forward.clone(), device: device.clone(), input: x, dtype };
                graphs.run(&ops.key(), &mut ops)
            })?,
            None => validate::run(network, loader, device, &self.nms, &mut |x| forward(x))?,
        };
        let figures = t.task().summary(&out.metrics, 2, "  ");
        let detections = if t.task() == validate::Task::Detect { format!("{} detections, ", out.detections.len()) } else { String::new() };
        eprintln!("  val: {figures}  ({detections}{:.1}s)", started.elapsed().as_secs_f64());
        Ok(out.metrics)
    }

    /// `last` (and `best` when this epoch's fitness is the best yet, `epoch_N` every
    /// `save_period`), the records, the log line and the plots.
    fn checkpoint(&self, t: &Trainer<'_>, run: &mut RunDir, state: &mut TrainState, record: &EpochRecord, epoch: usize) -> anyhow::Result<()> {
        let m = &t.loaded.manifest;
        if let Some(metrics) = &record.metrics {
            let fitness = metrics[0].max(0.0);
            if state.best_fitness.is_none_or(|b| fitness > b) {
                state.best_fitness = Some(fitness);
                state.best_epoch = Some(epoch);
                t.save(&run.weights("last"), state)?;
                std::fs::copy(run.weights("last"), run.weights("best.tmp")).and_then(|_| std::fs::rename(run.weights("best.tmp"), run.weights("best")))?;
            }
        }
        t.save(&run.weights("last"), state)?;
        if m.run.save_period > 0 && (epoch + 1).is_multiple_of(m.run.save_period as usize) {
            std::fs::copy(run.weights("last"), run.weights(&format!("epoch_{}", epoch + 1)))?;
        }
        let names = t.task().metric_names();
        run.record(record, names)?;
        let losses: Vec<String> = record.losses.iter().map(|(n, v)| format!("{n} {v:.4}")).collect();
        run.log(&format!(
            "epoch {}/{}: {} lr {:.6} {:.1} img/s{}",
            epoch + 1,
            m.run.epochs,
            losses.join(" "),
            record.lr,
            record.images_per_s,
            record.metrics.as_ref().map(|m| format!(" {}", t.task().summary(m, 2, " "))).unwrap_or_default()
        ));
        if let Err(e) = plots::draw(&run.path, &run.records(), names) {
            tracing::warn!("could not draw the plots: {e:#}");
        }
        Ok(())
    }
}

/// Validation's forward: the EMA weights (or the model's without EMA), read at call time, so a
/// captured validation graph follows their in-place updates.
fn validation_forward(t: &Trainer<'_>) -> ForwardFn<'static> {
    let (network, compute) = (t.model.network.clone(), t.precision.compute);
    match &t.update.ema {
        Some(ema) => {
            let ema = ema.clone();
            Rc::new(move |x| crate::capture::forward::run(&network, &ema.borrow().store, compute, x))
        }
        None => {
            let params = t.model.params.clone();
            Rc::new(move |x| crate::capture::forward::run(&network, &params.borrow(), compute, x))
        }
    }
}
