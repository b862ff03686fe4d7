//! The stage kinds a manifest's `[[stage]]` can name: what each reads and produces, and
//! whether it can run inside a captured CUDA graph.

/// One kind of stage.
#[derive(Debug)]
pub struct StageKind {
    pub name: &'static str,
    pub summary: &'static str,
    /// Input ports, bound in order to the stage's `inputs`.
    pub inputs: &'static [&'static str],
    /// Values other stages can read as `stage.output`.
    pub outputs: &'static [&'static str],
    /// `None` when the stage can be captured; otherwise why it cannot.
    pub not_capturable: Option<&'static str>,
}

impl StageKind {
    pub fn capturable(&self) -> bool {
        self.not_capturable.is_none()
    }
}

pub const KINDS: &[StageKind] = &[
    StageKind {
        name: "data.yolo",
        summary: "reads, augments and batches images and labels of a YOLO dataset",
        inputs: &[],
        outputs: &["images", "targets"],
        not_capturable: Some("it decodes and augments images on the host"),
    },
    StageKind {
        name: "network.forward",
        summary: "runs the network on a batch of images",
        inputs: &["images"],
        outputs: &["preds"],
        not_capturable: None,
    },
    StageKind {
        name: "loss.yolo9",
        summary: "YOLOv9 loss: TAL assignment, CIoU box loss, DFL and BCE class loss",
        inputs: &["preds", "targets"],
        outputs: &["loss"],
        not_capturable: None,
    },
    StageKind {
        name: "network.backward",
        summary: "back-propagates the loss into parameter gradients",
        inputs: &["loss"],
        outputs: &["grads"],
        not_capturable: None,
    },
    StageKind {
        name: "grad.clip",
        summary: "scales gradients to a global norm of at most optim.clip_max_norm",
        inputs: &["grads"],
        outputs: &["grads"],
        not_capturable: None,
    },
    StageKind {
        name: "optimizer",
        summary: "updates parameters in place (SGD with Nesterov momentum, or AdamW)",
        inputs: &["grads"],
        outputs: &["params"],
        not_capturable: None,
    },
    StageKind {
        name: "ema",
        summary: "updates the exponential moving average of all float state",
        inputs: &["params"],
        outputs: &["ema"],
        not_capturable: None,
    },
    StageKind {
        name: "schedule",
        summary: "advances the learning-rate and momentum schedule",
        inputs: &["params"],
        outputs: &["lr"],
        not_capturable: Some("it computes the next learning rate on the host"),
    },
];

/// The kind called `name`.
pub fn kind(name: &str) -> Option<&'static StageKind> {
    KINDS.iter().find(|k| k.name == name)
}
