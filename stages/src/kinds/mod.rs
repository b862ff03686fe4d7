//! The stage kinds a manifest's `[[stage]]` can name, one file each. A new kind is a file here
//! and one line in [`builtin`].

pub mod data_classify;
pub mod data_yolo;
pub mod denoise_rtdetr;
pub mod ema;
pub mod grad_clip;
pub mod grad_sync;
pub mod loss_classify;
pub mod loss_rtdetr;
pub mod loss_yolo9;
pub mod loss_yolox;
pub mod network_backward;
pub mod network_forward;
pub mod optimizer;
pub mod schedule;

use crate::stage::Kind;

/// The kinds a manifest can name, in the order `--help`-style listings show them.
pub fn builtin() -> Registry {
    Registry {
        kinds: vec![
            &data_yolo::KIND,
            &data_classify::KIND,
            &network_forward::KIND,
            &loss_yolo9::KIND,
            &loss_yolox::KIND,
            &loss_classify::KIND,
            &denoise_rtdetr::KIND,
            &loss_rtdetr::KIND,
            &network_backward::KIND,
            &grad_clip::KIND,
            &optimizer::KIND,
            &ema::KIND,
            &schedule::KIND,
        ],
    }
}

/// A set of stage kinds by name: the built-in ones, and any a caller adds (a test's toy kind).
#[derive(Debug, Clone)]
pub struct Registry {
    kinds: Vec<&'static Kind>,
}

impl Registry {
    /// The registry with `kind` added.
    pub fn with(mut self, kind: &'static Kind) -> Self {
        self.kinds.retain(|k| k.name != kind.name);
        self.kinds.push(kind);
        self
    }

    /// The kind called `name`.
    pub fn get(&self, name: &str) -> Option<&'static Kind> {
        self.kinds.iter().copied().find(|k| k.name == name)
    }

    pub fn kinds(&self) -> impl Iterator<Item = &'static Kind> + '_ {
        self.kinds.iter().copied()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.kinds.iter().map(|k| k.name).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::stage::Ty;

    /// A graph replays the host values it was captured with: only a kind that is never captured
    /// may read one.
    #[test]
    fn only_kinds_that_run_eager_read_host_values() {
        for kind in super::builtin().kinds() {
            let reads_host = kind.inputs.iter().any(|p| matches!(p.ty, Ty::Host(_)));
            assert!(!reads_host || !kind.capturable(), "`{}` reads a host value but could be captured", kind.name);
        }
    }
}
