//! Every class of manifest error produces one clear diagnostic that names the file, line and
//! key (or the command-line argument), with a suggestion where a near name exists.

use std::path::{Path, PathBuf};

use libreyolo_run::dag::StepDag;
use libreyolo_run::manifest::{self, Diagnostic, LoadedManifest};

fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

/// The shipped YOLOv9-t manifest as one file: yolo9-base.toml with yolo9t.toml's name, size
/// and topology written into it (what `extends` merges), so a test can edit any line of it.
fn shipped_manifest() -> String {
    let base = std::fs::read_to_string(manifests().join("yolo9-base.toml")).expect("manifests/yolo9-base.toml is readable");
    let size = std::fs::read_to_string(manifests().join("yolo9t.toml")).expect("manifests/yolo9t.toml is readable");
    let layers = &size[size.find("layers = [").expect("yolo9t.toml has its layers")..];
    let base = base.replacen("[run]\n", "[run]\nname = \"yolo9t\"\n", 1);
    base.replacen("family = \"yolo9\"\n", &format!("family = \"yolo9\"\nsize = \"t\"\n{}\n", layers.trim_end()), 1)
}

/// Writes `text` as a manifest in a fresh temp dir and returns its path (the dir is leaked so
/// the file outlives the call).
fn write_manifest(text: &str) -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    let path = dir.join("m.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn load(text: &str, overrides: &[&str]) -> Result<(LoadedManifest, StepDag), Diagnostic> {
    let path = write_manifest(text);
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let loaded = manifest::load(&path, &overrides)?;
    let dag = StepDag::build(&loaded)?;
    Ok((loaded, dag))
}

/// The rendered error of a manifest that must fail.
fn error(text: &str, overrides: &[&str]) -> String {
    match load(text, overrides) {
        Ok(_) => panic!("expected an error for overrides {overrides:?}"),
        Err(d) => d.render(false),
    }
}

/// 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).expect("needle present") + 1
}

fn replace(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the shipped manifest contains `{from}`");
    text.replacen(from, to, 1)
}

#[test]
fn shipped_manifest_loads_with_reference_defaults() {
    let (loaded, dag) = load(&shipped_manifest(), &[]).unwrap();
    let m = &loaded.manifest;
    assert_eq!((m.run.epochs, m.run.batch, m.run.imgsz.height()), (300, 16, 640));
    assert_eq!((m.optim.lr0, m.optim.momentum, m.optim.weight_decay), (0.01, 0.937, 5e-4));
    assert_eq!((m.schedule.warmup_epochs, m.schedule.warmup_lr_start, m.schedule.min_lr_ratio), (3.0, 1e-4, 0.01));
    assert_eq!((m.ema.decay, m.model.aux_weight, m.data.max_labels), (0.9999, 0.25, 300));
    assert_eq!(dag.stages.len(), 7);
}

#[test]
fn unknown_key_names_line_and_suggests() {
    let text = replace(&shipped_manifest(), "epochs = 300", "epoch = 300");
    let out = error(&text, &[]);
    assert!(out.contains("unknown key `epoch` in [run]"), "{out}");
    assert!(out.contains(&format!("m.toml:{}:1", line_of(&text, "epoch = 300"))), "{out}");
    assert!(out.contains("did you mean `epochs`?"), "{out}");
}

#[test]
fn unknown_section_suggests() {
    let text = replace(&shipped_manifest(), "[capture]", "[captur]");
    let out = error(&text, &[]);
    assert!(out.contains("unknown key `captur` in the top level"), "{out}");
    assert!(out.contains("did you mean `capture`?"), "{out}");
    assert!(out.contains(&format!(":{}:", line_of(&text, "[captur]"))), "{out}");
}

#[test]
fn wrong_type_names_the_key() {
    let text = replace(&shipped_manifest(), "epochs = 300", "epochs = \"ten\"");
    let out = error(&text, &[]);
    assert!(out.contains("wrong type for `run.epochs`: expected a non-negative integer"), "{out}");
    assert!(out.contains(&format!(":{}:", line_of(&text, "epochs = \"ten\""))), "{out}");
}

#[test]
fn missing_required_key_names_it() {
    let text = replace(&shipped_manifest(), "family = \"yolo9\"\n", "");
    let out = error(&text, &[]);
    assert!(out.contains("missing key `family` in [model]"), "{out}");
    assert!(out.contains(&format!(":{}:", line_of(&text, "[model]"))), "{out}");
}

#[test]
fn missing_required_section_names_it() {
    let text = shipped_manifest();
    let cut = |from: &str, to: &str| format!("{}{}", &text[..text.find(from).unwrap()], &text[text.find(to).unwrap()..]);
    let out = error(&cut("[model]", "[precision]"), &[]);
    assert!(out.contains("missing key `model` in the top level"), "{out}");
    // `[data]` may go: its keys take their defaults, and the dataset comes from `data=`.
    let (loaded, _) = load(&cut("[data]", "[model]"), &["data=d.yaml"]).unwrap();
    assert_eq!((loaded.manifest.data.workers, loaded.manifest.data.max_labels), (8, 300));
    assert!(loaded.manifest.data.dataset.unwrap().ends_with("d.yaml"));
}

#[test]
fn invalid_enum_value_suggests() {
    let text = replace(&shipped_manifest(), "dtype = \"fp16\"", "dtype = \"bf61\"");
    let out = error(&text, &[]);
    assert!(out.contains("invalid value `bf61` for `precision.dtype`"), "{out}");
    assert!(out.contains("did you mean `bf16`?"), "{out}");
}

#[test]
fn toml_syntax_error_points_at_line() {
    let text = replace(&shipped_manifest(), "batch = 16", "batch = = 16");
    let out = error(&text, &[]);
    assert!(out.contains("invalid TOML"), "{out}");
    assert!(out.contains(&format!(":{}:", line_of(&text, "batch = = 16"))), "{out}");
}

#[test]
fn out_of_range_values_are_explained() {
    let out = error(&shipped_manifest(), &["imgsz=630"]);
    assert!(out.contains("imgsz must be a multiple of 32"), "{out}");
    assert!(out.contains("use 608 or 640"), "{out}");
    let out = error(&shipped_manifest(), &["mosaic=1.5"]);
    assert!(out.contains("`augment.mosaic_prob` must be between 0 and 1"), "{out}");
    let out = error(&shipped_manifest(), &["mixup=1.5"]);
    assert!(out.contains("`augment.mixup_prob` must be between 0 and 1"), "{out}");
    let out = error(&shipped_manifest(), &["perspective=0.001"]);
    assert!(out.contains("`augment.perspective` = 0.001: perspective warping is not implemented in libreyolo-run yet"), "{out}");
    let out = error(&shipped_manifest(), &["batch=0"]);
    assert!(out.contains("-1 for AutoBatch"), "{out}");
    let out = error(&shipped_manifest(), &["family=yolo8"]);
    assert!(out.contains("unknown model family `yolo8`"), "{out}");
    // A global batch that does not split over the GPUs: LibreYOLO's error, before any GPU is
    // touched (so it is checked here, on a machine without GPUs).
    let out = error(&shipped_manifest(), &["device=0,1", "batch=15"]);
    assert!(out.contains("batch=15 is the global batch and must be divisible by world_size=2"), "{out}");
    assert!(out.contains("Use batch=14 or batch=16."), "{out}");
    assert!(out.contains("batch=15"), "the report points at the argument: {out}");
    assert!(load(&shipped_manifest(), &["device=0,1", "batch=16"]).is_ok());
}

#[test]
fn overrides_apply_with_libreyolo_names() {
    let (loaded, dag) = load(
        &shipped_manifest(),
        &[
            "epochs=3",
            "lr0=0.02",
            "capture.threshold=5",
            "cuda_graph=true",
            "mosaic=0.5",
            "imgsz=[480,640]",
            "device=cpu",
            "name=2024",
            "ema=false",
            "stage.loss.capture=false",
            "data=other.yaml",
        ],
    )
    .unwrap();
    let m = &loaded.manifest;
    assert_eq!((m.run.epochs, m.optim.lr0, m.capture.threshold), (3, 0.02, 5));
    assert!(m.capture.enabled.wanted() && !m.ema.enabled);
    assert_eq!(m.augment.mosaic_prob, 0.5);
    assert_eq!((m.run.imgsz.height(), m.run.imgsz.width()), (480, 640));
    assert_eq!(m.run.name, "2024");
    assert_eq!(m.data.dataset, Some(PathBuf::from("other.yaml")), "command-line paths stay relative to the shell");
    assert!(!m.stages[2].capture);
    // The loss no longer in the graph: two captured segments around it.
    let plan = dag.plan(m.capture.enabled.wanted());
    let captured: Vec<Vec<&str>> =
        plan.segments.iter().filter(|s| s.captured).map(|s| s.stages.iter().map(|&i| dag.stages[i].name.as_str()).collect()).collect();
    assert_eq!(captured, vec![vec!["forward"], vec!["backward", "optimizer", "ema"]]);
}

#[test]
fn override_unknown_key_suggests() {
    let out = error(&shipped_manifest(), &["epoch=3"]);
    assert!(out.contains("unknown setting `epoch`"), "{out}");
    assert!(out.contains("command line"), "{out}");
    assert!(out.contains("did you mean `epochs` (run.epochs)?"), "{out}");
}

#[test]
fn override_unknown_section_suggests() {
    let out = error(&shipped_manifest(), &["captur.threshold=5"]);
    assert!(out.contains("unknown section `captur`"), "{out}");
    assert!(out.contains("did you mean `capture.threshold`?"), "{out}");
    let out = error(&shipped_manifest(), &["capture.treshold=5"]);
    assert!(out.contains("did you mean `capture.threshold`?"), "{out}");
}

#[test]
fn override_wrong_type_names_key_and_argument() {
    let out = error(&shipped_manifest(), &["capture.threshold=abc"]);
    assert!(out.contains("wrong type for `capture.threshold`"), "{out}");
    assert!(out.contains("capture.threshold=abc"), "{out}");
}

#[test]
fn override_ambiguous_and_malformed() {
    let out = error(&shipped_manifest(), &["enabled=true"]);
    assert!(out.contains("`enabled` is ambiguous"), "{out}");
    assert!(out.contains("`capture.enabled`"), "{out}");
    let out = error(&shipped_manifest(), &["epochs"]);
    assert!(out.contains("expected `key=value`, got `epochs`"), "{out}");
    let out = error(&shipped_manifest(), &["stage.forwrd.capture=false"]);
    assert!(out.contains("no stage is named `forwrd`"), "{out}");
    assert!(out.contains("did you mean `stage.forward.capture`?"), "{out}");
}

#[test]
fn unknown_stage_kind_suggests() {
    let text = replace(&shipped_manifest(), "kind = \"network.forward\"", "kind = \"network.foward\"");
    let out = error(&text, &[]);
    assert!(out.contains("unknown stage kind `network.foward` in stage `forward`"), "{out}");
    assert!(out.contains("did you mean `network.forward`?"), "{out}");
    assert!(out.contains(&format!(":{}:", line_of(&text, "network.foward"))), "{out}");
}

#[test]
fn missing_input_stage_is_named() {
    let text = replace(&shipped_manifest(), "inputs = [\"forward.preds\"", "inputs = [\"forwad.preds\"");
    let out = error(&text, &[]);
    assert!(out.contains("stage `loss` reads `forwad.preds`, but no stage is named `forwad`"), "{out}");
    assert!(out.contains("did you mean `forward.preds`?"), "{out}");
}

#[test]
fn unknown_output_is_named() {
    let text = replace(&shipped_manifest(), "inputs = [\"forward.preds\"", "inputs = [\"forward.pred\"");
    let out = error(&text, &[]);
    assert!(out.contains("stage `forward` (kind `network.forward`) has no output `pred`"), "{out}");
    assert!(out.contains("did you mean `preds`?"), "{out}");
}

#[test]
fn duplicate_stage_names_show_both() {
    let text = replace(&shipped_manifest(), "name = \"ema\"", "name = \"optimizer\"");
    let out = error(&text, &[]);
    assert!(out.contains("duplicate stage name `optimizer`"), "{out}");
    assert!(out.contains("first defined here"), "{out}");
    assert!(out.contains("defined again here"), "{out}");
}

#[test]
fn cycles_name_every_stage_involved() {
    // forward now also waits on the optimizer: forward -> loss -> backward -> optimizer -> forward.
    let text =
        replace(&shipped_manifest(), "kind = \"network.forward\"\ninputs = [\"data.images\"]", "kind = \"network.forward\"\ninputs = [\"optimizer.params\"]");
    let out = error(&text, &[]);
    assert!(out.contains("the step DAG has a cycle: forward -> loss -> backward -> optimizer -> forward"), "{out}");
}

#[test]
fn wrong_input_count_and_uncapturable_stage() {
    let text = replace(&shipped_manifest(), "inputs = [\"forward.preds\", \"data.targets\"]", "inputs = [\"forward.preds\"]");
    let out = error(&text, &[]);
    assert!(out.contains("stage `loss` (kind `loss.yolo9`) takes 2 input(s), got 1"), "{out}");
    let out = error(&shipped_manifest(), &["stage.data.capture=true"]);
    assert!(out.contains("stage `data` (kind `data.yolo`) cannot be captured"), "{out}");
    // network.forward's head input is optional: one or two inputs, not three
    let text = replace(&shipped_manifest(), "inputs = [\"data.images\"]", "inputs = [\"data.images\", \"data.targets\", \"data.images\"]");
    let out = error(&text, &[]);
    assert!(out.contains("stage `forward` (kind `network.forward`) takes 1 to 2 input(s), got 3") && out.contains("expected [images, head?]"), "{out}");
}

/// `stage.NAME.FIELD=` with nothing after the `=` removes the field: a seam experiment takes
/// the cut out of a manifest that has one.
#[test]
fn an_empty_stage_field_override_removes_the_field() {
    let until = |overrides: &[&str]| {
        let (loaded, _) = load(&shipped_manifest(), overrides).unwrap();
        loaded.manifest.stages.iter().find(|s| s.name == "forward").unwrap().until.clone()
    };
    assert_eq!(until(&[]), None);
    assert_eq!(until(&["stage.forward.until=neck.elan_down2"]).as_deref(), Some("neck.elan_down2"));
    assert_eq!(until(&["stage.forward.until=neck.elan_down2", "stage.forward.until="]), None);
}

#[test]
fn a_manifest_without_stages_is_an_error() {
    let text = shipped_manifest();
    let text = &text[..text.find("[[stage]]").unwrap()];
    let out = error(text, &[]);
    assert!(out.contains("missing key `stage`") || out.contains("no `[[stage]]` tables"), "{out}");
}

#[test]
fn plan_reproduces_libreyolo_contract() {
    // One marking away from the shipped whole step.
    let contract = ["cuda_graph=true", "stage.loss.capture=false", "stage.optimizer.capture=false", "stage.ema.capture=false"];
    let (loaded, dag) = load(&shipped_manifest(), &contract).unwrap();
    let plan = dag.plan(loaded.manifest.capture.enabled.wanted());
    let shape: Vec<(bool, Vec<&str>)> = plan.segments.iter().map(|s| (s.captured, s.stages.iter().map(|&i| dag.stages[i].name.as_str()).collect())).collect();
    assert_eq!(
        shape,
        vec![(false, vec!["data"]), (true, vec!["forward"]), (false, vec!["loss"]), (true, vec!["backward"]), (false, vec!["optimizer", "ema", "schedule"]),]
    );
    let crossing: Vec<Vec<String>> = plan.seams.iter().map(|s| s.values.iter().map(|v| dag.name(*v)).collect()).collect();
    assert_eq!(crossing[0], vec!["data.images", "data.targets"]);
    assert_eq!(crossing[1], vec!["data.targets", "forward.preds"]);
    assert_eq!(crossing[2], vec!["loss.loss"]);
    assert_eq!(crossing[3], vec!["backward.grads"]);
    // With capture off the whole step is one eager segment.
    assert_eq!(dag.plan(false).segments.len(), 1);
}

#[test]
fn unknown_recapture_event_is_named_and_suggested() {
    let out = error(&shipped_manifest(), &["stage.loss.recapture_on=[\"mosaic_closed\"]"]);
    assert!(out.contains("unknown run event `mosaic_closed` in stage `loss`"), "{out}");
    assert!(out.contains("did you mean `mosaic_close`?"), "{out}");
    assert!(out.contains("known events: mosaic_close"), "{out}");
    let (_, dag) = load(&shipped_manifest(), &["stage.loss.recapture_on=[\"mosaic_close\"]", "stage.loss.capture=true"]).unwrap();
    assert_eq!(dag.recapturing_on("mosaic_close"), ["loss"]);
}

/// A seam inside the network (`until` on the forward stage) names a layer of `model.layers`
/// at the line it is written, before every head, on a `network.forward` stage only.
#[test]
fn a_network_seam_names_a_layer_before_the_heads() {
    let text = replace(&shipped_manifest(), "kind = \"network.forward\"\n", "kind = \"network.forward\"\nuntil = \"neck.elan_dwn2\"\n");
    let e = error(&text, &[]);
    assert!(e.contains("stage `forward` cuts the network after `neck.elan_dwn2`, but `model.layers` has no layer of that name"), "{e}");
    assert!(e.contains(&format!(":{}:", line_of(&text, "until = \"neck.elan_dwn2\""))), "{e}");
    assert!(e.contains("did you mean `neck.elan_down2`?"), "{e}");
    let e = error(&shipped_manifest(), &["stage.forward.until=head"]);
    assert!(e.contains("cannot cut the network after `head`: the detection head `head` comes before it"), "{e}");
    let e = error(&shipped_manifest(), &["stage.forward.until=aux.spp"]);
    assert!(e.contains("auxiliary branch"), "{e}");
    let e = error(&shipped_manifest(), &["stage.loss.until=neck.elan_down2"]);
    assert!(e.contains("stage `loss` (kind `loss.yolo9`) takes no `until`"), "{e}");
    let (_, dag) = load(&shipped_manifest(), &["stage.forward.until=neck.elan_down2"]).unwrap();
    assert_eq!(dag.network_seam(), Some("neck.elan_down2"));
}

#[test]
fn an_input_of_the_wrong_type_is_named() {
    let text = replace(&shipped_manifest(), "kind = \"ema\"\ninputs = [\"optimizer.params\"]", "kind = \"ema\"\ninputs = [\"data.images\"]");
    let out = error(&text, &[]);
    assert!(out.contains("stage `ema` reads `data.images` as its `params` input, which takes an event, but `data.images` is a tensor"), "{out}");
    let line = text[..text.find("kind = \"ema\"\ninputs = [\"data.images\"]").unwrap()].lines().count() + 2;
    assert!(out.contains(&format!(":{line}:")), "{out}");
}

#[test]
fn a_key_the_loss_kind_does_not_take_is_an_error_at_its_line() {
    let text = replace(&shipped_manifest(), "box_gain = 7.5", "box_gian = 7.5");
    let out = error(&text, &[]);
    assert!(out.contains("[loss] unknown field `box_gian`"), "{out}");
    assert!(out.contains(&format!(":{}:", line_of(&text, "box_gian"))), "{out}");
    // On the command line the loss kind's keys are known too.
    let out = error(&shipped_manifest(), &["loss.box_gian=5"]);
    assert!(out.contains("unknown setting `box_gian` in [loss]"), "{out}");
    assert!(out.contains("did you mean `loss.box_gain`?"), "{out}");
}

/// A size manifest extends the shared base: the merged manifest is the base's settings and DAG
/// with the size's topology; an error in a key written only in the base points at the base.
#[test]
fn a_size_manifest_extends_the_base_and_errors_point_at_the_file_that_wrote_the_key() {
    let loaded = manifest::load(&manifests().join("yolo9s.toml"), &[]).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let m = &loaded.manifest;
    assert_eq!((m.model.size.as_str(), m.run.name.as_str(), m.optim.lr0, m.stages.len()), ("s", "yolo9s", 0.01, 7));
    assert!(m.stages.iter().filter(|s| s.capture).count() == 5, "the whole step is marked");
    // The base's key, wrong, reported in the base file (a copy of it, beside a size manifest).
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(manifests().join("yolo9-base.toml")).unwrap().replace("lr0 = 0.01", "lr0 = \"fast\"");
    std::fs::write(dir.path().join("yolo9-base.toml"), &base).unwrap();
    std::fs::copy(manifests().join("yolo9t.toml"), dir.path().join("t.toml")).unwrap();
    let out = manifest::load(&dir.path().join("t.toml"), &[]).err().expect("a wrong type").render(false);
    assert!(out.contains("yolo9-base.toml") && out.contains(&format!(":{}:", line_of(&base, "lr0 = \"fast\""))), "{out}");
    // A missing base and a cycle are named.
    std::fs::write(dir.path().join("a.toml"), "extends = \"nowhere.toml\"\n").unwrap();
    let out = manifest::load(&dir.path().join("a.toml"), &[]).err().unwrap().render(false);
    assert!(out.contains("the base manifest") && out.contains("nowhere.toml` does not exist"), "{out}");
    std::fs::write(dir.path().join("b.toml"), "extends = \"c.toml\"\n").unwrap();
    std::fs::write(dir.path().join("c.toml"), "extends = \"b.toml\"\n").unwrap();
    let out = manifest::load(&dir.path().join("b.toml"), &[]).err().unwrap().render(false);
    assert!(out.contains("extends a manifest that extends this one"), "{out}");
}

#[test]
fn compile_takes_libreyolo_spellings() {
    use libreyolo_run::manifest::CompileMode;
    let mode = |v: &str| load(&shipped_manifest(), &[v]).unwrap().0.manifest.capture.compile;
    assert_eq!(load(&shipped_manifest(), &[]).unwrap().0.manifest.capture.compile, CompileMode::Off);
    assert_eq!(mode("compile=true"), CompileMode::Default);
    assert_eq!(mode("compile=default"), CompileMode::Default);
    assert_eq!(mode("compile=reduce-overhead"), CompileMode::ReduceOverhead);
    assert_eq!(mode("compile=Max-Autotune"), CompileMode::MaxAutotune);
    assert_eq!(mode("capture.compile=max-autotune-no-cudagraphs"), CompileMode::MaxAutotuneNoCudagraphs);
    assert_eq!(mode("compile=no"), CompileMode::Off);
    // Numbers arrive as TOML integers: 1 and 0 as LibreYOLO reads them, others refused.
    assert_eq!(mode("compile=1"), CompileMode::Default);
    assert_eq!(mode("compile=0"), CompileMode::Off);
    assert!(load(&shipped_manifest(), &["compile=2"]).is_err());
    let out = error(&shipped_manifest(), &["compile=fast"]);
    assert!(out.contains("reduce-overhead") && out.contains("max-autotune-no-cudagraphs"), "{out}");
    assert!(out.contains("compile=fast"), "the report points at the argument: {out}");
}

#[test]
fn the_weight_gradient_kernel_is_a_named_choice() {
    use libreyolo_run::manifest::WeightGradientKernel;
    let kernel = |o: &[&str]| load(&shipped_manifest(), o).unwrap().0.manifest.run.weight_gradient;
    assert_eq!(kernel(&[]), WeightGradientKernel::Vectors);
    assert_eq!(kernel(&["run.weight_gradient=gather"]), WeightGradientKernel::Gather);
    assert_eq!(kernel(&["run.weight_gradient=cuda-cores"]), WeightGradientKernel::CudaCores);
    assert_eq!(WeightGradientKernel::Gather.env_value(), Some("gather"));
    assert_eq!(WeightGradientKernel::Vectors.env_value(), None);
    let out = error(&shipped_manifest(), &["run.weight_gradient=vector"]);
    assert!(out.contains("run.weight_gradient") && out.contains("vectors"), "{out}");
    // MobileNetV4-s ships with the gather kernel (vendor/README.md, the vector kernel's known fault).
    let mnv4 = manifest::load(&manifests().join("mobilenetv4s.toml"), &[]).unwrap_or_else(|d| panic!("{}", d.render(false)));
    assert_eq!(mnv4.manifest.run.weight_gradient, WeightGradientKernel::Gather);
}

#[test]
fn a_bad_parameter_pattern_is_named_with_its_key() {
    let text = replace(&shipped_manifest(), "[optim]\n", "[optim]\ngroups = [{ names = [\"backbone(\"], lr_scale = 0.1 }]\n");
    let out = error(&text, &[]);
    assert!(out.contains("`optim.groups` entry 1: regex parse error"), "{out}");
    assert!(out.contains("unclosed group"), "{out}");
    let text = replace(&shipped_manifest(), "family = \"yolo9\"\n", "family = \"yolo9\"\nfreeze = [\"[\"]\n");
    let out = error(&text, &[]);
    assert!(out.contains("`model.freeze`: regex parse error"), "{out}");
    let text = replace(&shipped_manifest(), "[optim]\n", "[optim]\ngroups = [{ names = [\"neck\"], weight_decay = -1.0 }]\n");
    assert!(error(&text, &[]).contains("must not be negative"));
}
