//! Learning-rate and momentum schedules, per optimizer iteration (LibreYOLO
//! `training/scheduler.py`). The schedule advances after each optimizer step.
//!
//! - warm-up (`it <= W`, `W = warmup_epochs * iters_per_epoch`): lr linear from
//!   `min(warmup_lr_start, lr0)` to `lr0`, momentum linear from `warmup_momentum` to `momentum`;
//! - `linear`: `lr0 - (lr0 - lr0 * min_lr_ratio) * (it - W) / max(1, T - W)`;
//! - `cos`: cosine from `lr0` down to `lr0 * min_lr_ratio` over `T - W`;
//! - `yoloxwarmcos` (LibreYOLO's `WarmupCosineScheduler`): the warm-up is quadratic,
//!   `(lr0 - start) * (it / W)^2 + start`, with no momentum warm-up; then cosine from `lr0` to
//!   `lr0 * min_lr_ratio` over `T - W - P` and that minimum for the last `P` iterations
//!   (`P = plateau_epochs * iters_per_epoch`, the epochs without mosaic);
//! - `constant` (LibreYOLO's `ConstantLRScheduler`, RT-DETR's): after the warm-up, `lr0`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Linear,
    Cos,
    YoloxWarmCos { plateau_epochs: usize },
    Constant,
}

#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub kind: Kind,
    pub lr0: f64,
    pub momentum: f64,
    pub warmup_epochs: f64,
    pub warmup_lr_start: f64,
    pub warmup_momentum: f64,
    pub min_lr_ratio: f64,
    pub epochs: usize,
    pub iters_per_epoch: usize,
}

impl Schedule {
    /// `(lr, momentum)` for optimizer iteration `it` (0-based).
    pub fn at(&self, it: usize) -> (f64, f64) {
        let w = (self.warmup_epochs * self.iters_per_epoch as f64).round();
        let t = (self.epochs * self.iters_per_epoch) as f64;
        let it = it as f64;
        let min_lr = self.lr0 * self.min_lr_ratio;
        if w > 0.0 && it <= w {
            let start = self.warmup_lr_start.min(self.lr0);
            return match self.kind {
                // YOLOX warms the rate up quadratically and leaves the momentum.
                Kind::YoloxWarmCos { .. } => ((self.lr0 - start) * (it / w).powi(2) + start, self.momentum),
                Kind::Linear | Kind::Cos | Kind::Constant => {
                    ((self.lr0 - start) * it / w + start, self.warmup_momentum + (self.momentum - self.warmup_momentum) * it / w)
                }
            };
        }
        let cosine = |angle: f64| min_lr + (self.lr0 - min_lr) * 0.5 * (1.0 + angle.cos());
        let pi = std::f64::consts::PI;
        let progress = ((it - w) / (t - w).max(1.0)).min(1.0);
        let lr = match self.kind {
            Kind::Linear => self.lr0 - (self.lr0 - min_lr) * progress,
            Kind::Cos => cosine(pi * progress),
            Kind::Constant => self.lr0,
            Kind::YoloxWarmCos { plateau_epochs } => {
                let plateau = (plateau_epochs * self.iters_per_epoch) as f64;
                if it >= t - plateau { min_lr } else { cosine(pi * (it - w) / (t - w - plateau)) }
            }
        };
        (lr, self.momentum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_holds_lr0_after_its_warm_up() {
        let s = Schedule { kind: Kind::Constant, warmup_epochs: 1.0, warmup_lr_start: 0.0, lr0: 1e-4, ..yolo9(72, 10) };
        assert_eq!(s.at(5).0, 0.5e-4, "linear warm-up");
        assert_eq!([s.at(10).0, s.at(11).0, s.at(719).0], [1e-4; 3]);
        let none = Schedule { warmup_epochs: 0.0, ..s };
        assert_eq!(none.at(0).0, 1e-4, "no warm-up: lr0 from the first step (RT-DETR's default)");
    }

    fn yolo9(epochs: usize, iters: usize) -> Schedule {
        Schedule {
            kind: Kind::Linear,
            lr0: 0.01,
            momentum: 0.937,
            warmup_epochs: 3.0,
            warmup_lr_start: 1e-4,
            warmup_momentum: 0.8,
            min_lr_ratio: 0.01,
            epochs,
            iters_per_epoch: iters,
        }
    }

    #[test]
    fn matches_libreyolo_measured_warmup() {
        // LibreYOLO, measured: 1 epoch of 10 iterations with W = 30 ends at lr 0.0034.
        let (lr, m) = yolo9(100, 10).at(10);
        assert!((lr - ((0.01 - 1e-4) * 10.0 / 30.0 + 1e-4)).abs() < 1e-12 && (lr - 0.0034).abs() < 1e-4);
        assert!((m - (0.8 + 0.137 / 3.0)).abs() < 1e-12);
        assert_eq!(yolo9(100, 10).at(0), (1e-4, 0.8));
    }

    #[test]
    fn decays_to_the_minimum() {
        let s = yolo9(10, 10);
        assert!((s.at(30).0 - 0.01).abs() < 1e-12);
        assert!((s.at(100).0 - 1e-4).abs() < 1e-12);
        let c = Schedule { kind: Kind::Cos, ..s };
        assert!((c.at(100).0 - 1e-4).abs() < 1e-12);
        assert!(c.at(65).0 < 0.01 && c.at(65).0 > 1e-4);
    }

    /// LibreYOLO's `WarmupCosineScheduler(lr=0.01, iters_per_epoch=10, total_epochs=20,
    /// warmup_epochs=5, warmup_lr_start=0, plateau_epochs=5, min_lr_ratio=0.05)`, values
    /// computed from its formula.
    #[test]
    fn yoloxwarmcos_is_quadratic_then_cosine_then_flat() {
        let s = Schedule {
            kind: Kind::YoloxWarmCos { plateau_epochs: 5 },
            lr0: 0.01,
            momentum: 0.9,
            warmup_epochs: 5.0,
            warmup_lr_start: 0.0,
            warmup_momentum: 0.8,
            min_lr_ratio: 0.05,
            epochs: 20,
            iters_per_epoch: 10,
        };
        assert_eq!(s.at(0), (0.0, 0.9), "no momentum warm-up");
        assert!((s.at(25).0 - 0.01 * 0.25).abs() < 1e-15);
        assert!((s.at(50).0 - 0.01).abs() < 1e-15);
        // Half-way through the cosine (iterations 50..150): the mean of lr0 and the minimum.
        assert!((s.at(100).0 - (0.0005 + 0.5 * 0.0095)).abs() < 1e-12);
        assert_eq!(s.at(150).0, 0.0005);
        assert_eq!(s.at(199).0, 0.0005);
    }
}
