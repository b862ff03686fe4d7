//! A stage kind added from outside the engine: a test module defines it (one `Kind` and its
//! `Stage`), registers it on the built-in registry, and trains with it in the step, eager and
//! inside captured segments (software graphs on the CPU). The kind scales the loss: a
//! differentiable stage between the loss and the backward, so the program's autodiff seam runs
//! through it wherever the capture marks put it.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use libreyolo_families::ParamStore;
use libreyolo_run::dag::StepDag;
use libreyolo_run::device::{Backend, ResolvedDevice};
use libreyolo_stages::kinds::builtin;
use libreyolo_stages::stage::{AnyTensor, Autodiff, Io, Kind, LossTerms, Port, Stage, Ty, Value, no_collective, port};

/// `loss * K`.
struct ScaleLoss<const K1000: u32>;

impl<const K1000: u32> Stage for ScaleLoss<K1000> {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let loss = io.loss(0)?;
        let k = K1000 as f64 / 1000.0;
        io.output(0, Value::Loss(LossTerms { total: loss.total.mul_scalar(k), parts: loss.parts }));
        Ok(())
    }
}

const LOSS: &[Port] = &[port("loss", Ty::Loss)];

const fn scale_kind<const K1000: u32>(name: &'static str) -> Kind {
    Kind {
        name,
        summary: "multiplies the loss by a constant",
        inputs: LOSS,
        outputs: LOSS,
        not_capturable: None,
        autodiff: Autodiff::Through,
        collective: no_collective,
        recapture_on: &[],
        settings: None,
        build: |_| Ok(Rc::new(ScaleLoss::<K1000>)),
    }
}

static SCALE_ONE: Kind = scale_kind::<1000>("toy.scale_one");
static SCALE_HALF: Kind = scale_kind::<500>("toy.scale_half");

/// The loss, then twice the loss from the stage's fourth run on: a stage with state it does not
/// declare (`Stage::state`), which a capture can neither save nor put back. Its warm-up runs
/// agree, its replay does not.
struct Drifts(Cell<u32>);

impl Stage for Drifts {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let loss = io.loss(0)?;
        self.0.set(self.0.get() + 1);
        let k = if self.0.get() >= 4 { 2.0 } else { 1.0 };
        io.output(0, Value::Loss(LossTerms { total: loss.total.mul_scalar(k), parts: loss.parts }));
        Ok(())
    }
}

/// The loss unchanged, and a second handle to the network's first trainable tensor kept from
/// then on: the optimizer can no longer update that tensor in its own buffer.
struct HoldsAParameter {
    params: Rc<RefCell<ParamStore>>,
    held: RefCell<Option<AnyTensor>>,
}

impl Stage for HoldsAParameter {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let first = self.params.borrow().entries().iter().find(|e| e.trains()).and_then(|e| e.value.float().cloned());
        *self.held.borrow_mut() = first;
        let loss = io.loss(0)?;
        io.output(0, Value::Loss(loss));
        Ok(())
    }
}

static HOLDS: Kind = Kind {
    name: "toy.holds_a_parameter",
    summary: "keeps a handle to a parameter",
    build: |b| Ok(Rc::new(HoldsAParameter { params: b.model.params.clone(), held: RefCell::new(None) })),
    ..scale_kind::<1000>("")
};

static DRIFTS: Kind =
    Kind { name: "toy.drifts", summary: "doubles the loss from its fourth run on", build: |_| Ok(Rc::new(Drifts(Cell::new(0)))), ..scale_kind::<1000>("") };

fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The shipped YOLOv9-t manifest with a stage of `kind` between the loss and the backward: a
/// copy of the shared base with the stage added, and the size manifest beside it.
fn manifest_with(dir: &Path, kind: Option<&str>) -> PathBuf {
    let root = project_root();
    let dir = dir.join(kind.unwrap_or("plain"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root.join("manifests/yolo9t.toml"), dir.join("yolo9t.toml")).unwrap();
    let text = std::fs::read_to_string(root.join("manifests/yolo9-base.toml")).unwrap();
    let text = match kind {
        None => text,
        Some(kind) => text.replace(
            "[[stage]]\nname = \"backward\"\nkind = \"network.backward\"\ninputs = [\"loss.loss\"]",
            &format!("[[stage]]\nname = \"scale\"\nkind = \"{kind}\"\ninputs = [\"loss.loss\"]\n\n[[stage]]\nname = \"backward\"\nkind = \"network.backward\"\ninputs = [\"scale.loss\"]"),
        ),
    };
    assert!(kind.is_none() || text.contains("scale.loss"), "the manifest's backward stage moved");
    std::fs::write(dir.join("yolo9-base.toml"), text).unwrap();
    dir.join("yolo9t.toml")
}

/// One epoch at 64 px on the CPU; the checkpoint's bytes. With capture marks, the step's region
/// must have been captured once and replayed for the rest of the epoch.
fn train(dir: &Path, kind: Option<&str>, name: &str, marks: &[&str]) -> Vec<u8> {
    let summary = train_summary(dir, kind, name, marks);
    if let Some(info) = summary.capture {
        assert!(info.fallback_reason.is_none(), "{name}: {:?}", info.fallback_reason);
        assert_eq!(info.captured.len(), 1, "{name}: {info:?}");
        assert_eq!(info.captured[0].replays, 7, "{name}: 8 steps, the first eager, the second captured: {info:?}");
    }
    std::fs::read(summary.run_dir.join("weights/last.safetensors")).unwrap()
}

fn train_summary(dir: &Path, kind: Option<&str>, name: &str, marks: &[&str]) -> libreyolo_run::train::TrainSummary {
    // Eager unless `marks` ask for graphs (the shipped `auto` would capture on software graphs).
    let mut overrides: Vec<String> =
        ["cuda_graph=false", "epochs=1", "imgsz=64", "batch=16", "device=cpu", "workers=2", "val=false", "exist_ok=true"].map(String::from).to_vec();
    overrides.push(format!("data={}", project_root().join("../shared/data/coco128/coco128.yaml").display()));
    overrides.push(format!("project={}", dir.display()));
    overrides.push(format!("name={name}"));
    overrides.extend(marks.iter().map(|m| m.to_string()));
    let loaded = libreyolo_run::manifest::load(&manifest_with(dir, kind), &overrides).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let registry = builtin().with(&SCALE_ONE).with(&SCALE_HALF).with(&DRIFTS).with(&HOLDS);
    let dag = StepDag::build_with(&loaded, &registry).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let cpu = ResolvedDevice { backend: Backend::Cpu, ids: vec![], reason: "device=cpu".into() };
    let summary = libreyolo_run::train::train(&loaded, &dag, &cpu).unwrap();
    assert_eq!(summary.epochs_run, 1);
    summary
}

#[test]
fn a_stage_kind_from_a_test_runs_eager_and_inside_captured_segments() {
    // Software graphs stand in for CUDA graphs on the CPU (this test binary runs no other test).
    unsafe { std::env::set_var("LIBREYOLO_CAPTURE_SOFTWARE", "1") };
    let dir = tempfile::tempdir().unwrap();
    let plain = train(dir.path(), None, "plain", &[]);
    // Scaling by one changes nothing, eager...
    assert!(train(dir.path(), Some("toy.scale_one"), "one-eager", &[]) == plain, "an identity stage changed eager training");
    let graphs = ["cuda_graph=true", "capture.threshold=2"];
    // ...inside the whole step's graph...
    let inside: Vec<&str> = graphs.iter().copied().chain(["stage.scale.capture=true"]).collect();
    assert!(train(dir.path(), Some("toy.scale_one"), "one-inside", &inside) == plain, "the stage inside the whole step's graph");
    // ...and eager between two graphs: its backward eager, the network's a graph after it.
    assert!(train(dir.path(), Some("toy.scale_one"), "one-between", &graphs) == plain, "the stage eager between graphs");
    // Halving the loss trains differently, the same wherever the stage runs.
    let half = train(dir.path(), Some("toy.scale_half"), "half-eager", &[]);
    assert!(half != plain, "halving the loss changed nothing");
    assert!(train(dir.path(), Some("toy.scale_half"), "half-inside", &inside) == half);
    assert!(train(dir.path(), Some("toy.scale_half"), "half-between", &graphs) == half);
    // A stage whose replay computes something else than its eager runs: the check refuses the
    // graph, names the state tensors the replay left furthest from eager, and training goes on.
    // Captured on the first step: two warm-up runs (the stage's first two), the recording (its
    // third), the checked replay (its fourth, doubled).
    let first = ["cuda_graph=true", "capture.threshold=1", "stage.scale.capture=true"];
    let drifts = train_summary(dir.path(), Some("toy.drifts"), "drifts", &first);
    let info = format!("{:?}", drifts.capture);
    let why = drifts.capture.and_then(|c| c.fallback_reason).unwrap_or_else(|| panic!("the check let a replay that differs from eager stand: {info}"));
    assert!(why.contains("differs from eager") && why.contains("furthest apart: optimizer ") && !why.contains(" #"), "{why}");
    assert!(drifts.run_dir.join("weights/last.safetensors").exists());

    // The optimizer eager between two graphs, with another handle on a parameter: its update
    // would land in a new buffer while the EMA's graph reads the old one, so the check's replay
    // is refused with the parameter's name, and training goes on eager.
    let between = ["cuda_graph=true", "capture.threshold=1", "stage.scale.capture=true", "stage.optimizer.capture=false"];
    let held = train_summary(dir.path(), Some("toy.holds_a_parameter"), "holds", &between);
    let why = held.capture.and_then(|c| c.fallback_reason).expect("an update out of its buffer between graphs is refused");
    assert!(why.contains("`optimizer`, eager between the graphs") && why.contains("backbone.conv0.conv.weight"), "{why}");
}
