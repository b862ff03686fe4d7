//! RT-DETR's network against LibreYOLO 1.6 on the CPU (fixtures of
//! tests/fixtures/make_rtdetr_fixture.py): the RT-DETR-r18 topology gives LibreYOLO's
//! state_dict keys, shapes and parameter count; a narrow RT-DETR-r18 (its layout at an eighth of
//! its widths) with the fixture's weights gives LibreYOLO's decoder outputs in eval mode and in
//! train mode (every decoder layer and the encoder's top-k queries), its BatchNorm running
//! statistics after the train-mode forward, and the gradient of every parameter under a fixed
//! random linear function of the train-mode outputs; and, trained on labelled images as
//! LibreYOLO's trainer runs it (the denoising groups from LibreYOLO's own random draws, then
//! `loss.rtdetr`'s criterion), every output, every loss term and every parameter's gradient; and
//! LibreYOLO's postprocess (top-k, no NMS) of its eval outputs.

use burn::tensor::{Device, FloatDType, Tensor, TensorData};
use libreyolo_families::rtdetr::{Denoising, DetrTargets, Noise, RtDetrDecoder};
use libreyolo_families::{Ctx, ParamId};
use libreyolo_run::parity::fixture::{Fixture, check_running_stats, fixture_network, keys_and_shapes, network_in, project_dir, read, rel_err};
use libreyolo_stages::loss::RtDetrLoss;
use libreyolo_stages::loss::rtdetr::{DenoisingLayout, DenoisingLevels, DetrTerms, Level};
use libreyolo_stages::val::nms::{self, NmsConfig};

/// Decoder outputs, relative to the largest value: the deformable attention's bilinear weights
/// and the top-k choice read float rounding from the whole network; measured ~1e-6.
const OUTPUTS: f64 = 1e-4;
/// Each gradient, relative to its largest value or a thousandth of the largest gradient.
const GRADS: f64 = 1e-3;

/// The device the fixture checks run on: the CPU, or the first GPU with
/// `LIBREYOLO_TEST_DEVICE=cuda` (this test binary run on a GPU machine checks the GPU's kernels
/// against LibreYOLO's values, in f32 as on the CPU). Set `BURN_MATMUL_KERNELS=fixed` there too,
/// as the engine does: autotuning every new matmul shape compiles ~20 candidates each, and the
/// denoising step did not finish in 125 s on an H100 without it.
fn test_device() -> Device {
    match std::env::var("LIBREYOLO_TEST_DEVICE").as_deref() {
        Ok("cuda") => Device::cuda(0),
        _ => Device::flex(),
    }
}

/// The `n` largest of `(parameter, error)` rows, largest first, one a line.
fn worst_of(mut errors: Vec<(String, f64)>, n: usize) -> String {
    errors.sort_by(|a, b| b.1.total_cmp(&a.1));
    errors.iter().take(n).map(|(name, e)| format!("  {name} {e:.2e}")).collect::<Vec<_>>().join("\n")
}

#[test]
fn rtdetr_r18_matches_libreyolo_keys_and_count() {
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(project_dir().join("rtdetr_keys.json")).unwrap()).unwrap();
    let (_, params) = fixture_network("rtdetr_r18", 80);
    assert_eq!(params.num_parameters() as u64, fixture["parameters"].as_u64().unwrap(), "RT-DETR-r18 parameters");
    assert_eq!(params.num_parameters(), 20_184_464);
    // The topology lists the encoder's layers in data-flow order (lateral, fusion, lateral, ...)
    // where the state dict groups them by kind: the same keys in another order.
    let mut ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
    let mut theirs = keys_and_shapes(&fixture["keys"]);
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "RT-DETR-r18: state_dict keys and shapes");
}

#[test]
fn narrow_rtdetr_outputs_batch_norm_and_gradients_match_libreyolo() {
    let dir = project_dir();
    let io = Fixture::open(&dir.join("rtdetr_narrow_io.safetensors")).unwrap();
    let nc = *io.get("eval_logits").shape.last().unwrap();
    let device = test_device();
    let (network, mut params) = network_in(&dir, "rtdetr_narrow", nc, &device).unwrap();
    libreyolo_families::weights::load_safetensors(&mut params, &dir.join("rtdetr_narrow.safetensors"), false).unwrap();
    let pixels = io.get("images_u8");
    let d = &pixels.shape;
    let images = Tensor::<4>::from_data(TensorData::new(pixels.to_f32(), [d[0], d[1], d[2], d[3]]), &device).div_scalar(255.0);

    let eval = network.forward(images.clone(), &Ctx::eval(&params), false).main;
    assert_eq!(eval.len(), 2, "eval: the last layer's boxes and logits");
    let check = |name: &str, ours: &Tensor<4>, tol: f64| {
        let err = rel_err(ours, &io.get(name).to_f32());
        eprintln!("{name}: {:?} relative error {err:.2e}", ours.dims());
        assert!(err < tol, "{name}: relative error {err:.2e} (tolerance {tol:.0e})");
    };
    check("eval_boxes", &eval[0], OUTPUTS);
    check("eval_logits", &eval[1], OUTPUTS);

    let cx = Ctx::train(&params);
    let maps = network.forward(images, &cx, false).main;
    let names = ["boxes", "logits", "enc_boxes", "enc_logits"];
    assert_eq!(maps.len(), names.len(), "train: every layer's boxes and logits, then the encoder's");
    let mut surrogate = Tensor::<1>::zeros([1], &device);
    for (map, name) in maps.iter().zip(names) {
        check(&format!("train_{name}"), map, OUTPUTS);
        let w = io.get(&format!("surrogate.{name}"));
        let w = Tensor::<4>::from_data(TensorData::new(w.to_f32(), map.dims()), &device);
        surrogate = surrogate.add(map.clone().mul(w).sum());
    }
    let want = io.get("surrogate").scalar();
    let got = read(&surrogate).1[0] as f64;
    assert!((got - want).abs() / want.abs() < OUTPUTS, "surrogate {got} vs LibreYOLO's {want}");

    let grads = libreyolo_run::parity::classifier::gradients(&io, &params, &cx.gradients(&surrogate.backward())).unwrap();
    assert_eq!(grads.len(), 325, "every trained parameter's gradient is in the fixture");
    let worst = grads.iter().cloned().fold((String::new(), 0.0), |m, g| if g.1 > m.1 { g } else { m });
    eprintln!("surrogate {got} (LibreYOLO {want}); worst gradients:\n{}", worst_of(grads.clone(), 8));
    assert!(worst.1 < GRADS, "d surrogate / d {}: error {:.2e} (tolerance {GRADS:.0e})", worst.0, worst.1);

    params.apply_batch_stats(cx.take_batch_stats());
    assert_eq!(check_running_stats(&io, &params, "after_train", 1e-4), 69 * 3, "running mean, var and count of every BatchNorm");
}

/// The denoising fixture: the narrow network with its weights, LibreYOLO's labelled images,
/// and its random draws laid out as denoising groups.
struct DenoisingStep {
    io: Fixture,
    network: libreyolo_families::Network,
    params: libreyolo_families::ParamStore,
    images: Tensor<4>,
    targets: DetrTargets,
    dn: Denoising,
}

impl DenoisingStep {
    fn open() -> Self {
        let dir = project_dir();
        let io = Fixture::open(&dir.join("rtdetr_narrow_dn_io.safetensors")).unwrap();
        let device = test_device();
        let (network, mut params) = network_in(&dir, "rtdetr_narrow", 5, &device).unwrap();
        libreyolo_families::weights::load_safetensors(&mut params, &dir.join("rtdetr_narrow.safetensors"), false).unwrap();
        let pixels = io.get("images_u8");
        let d = &pixels.shape;
        let images = Tensor::<4>::from_data(TensorData::new(pixels.to_f32(), [d[0], d[1], d[2], d[3]]), &device).div_scalar(255.0);
        let rows = io.get("targets");
        let targets = DetrTargets::from_rows(&rows.to_f32(), rows.shape[0]);
        let noise = Noise {
            flip: io.get("noise.flip").to_f32(),
            label: io.get("noise.label").to_f32().iter().map(|&v| v as usize).collect(),
            sign: io.get("noise.sign").to_f32(),
            part: io.get("noise.part").to_f32(),
        };
        let dn = Denoising::build(&targets, 5, 40, 100, |b, n| {
            assert_eq!(noise.flip.len(), b * n, "the fixture's draws are for {n} queries an image");
            noise.clone()
        })
        .expect("boxes, so denoising groups");
        assert_eq!((dn.groups, dn.queries, dn.slots), (20, 200, 200), "100 // 5 boxes = 20 groups of 2 x 5 queries, no padding");
        Self { io, network, params, images, targets, dn }
    }

    /// The step's maps, loss terms and gradients under the denoising queries `dn`.
    fn run(&self, dn: &Denoising) -> (Vec<Tensor<4>>, DetrTerms, Vec<(ParamId, Tensor<1>)>) {
        self.run_in(dn, None)
    }

    /// [`run`](Self::run) computing in `dtype` (mixed precision; `None`: f32).
    fn run_in(&self, dn: &Denoising, dtype: Option<FloatDType>) -> (Vec<Tensor<4>>, DetrTerms, Vec<(ParamId, Tensor<1>)>) {
        let cx = dtype.map_or_else(|| Ctx::train(&self.params), |d| Ctx::train_in(&self.params, d));
        let seam = self.network.layer_index("encoder.pan_blocks.1").unwrap();
        let feats = self.network.forward_until(seam, self.images.clone(), &cx, false);
        let head = self.network.head_layer().as_any().downcast_ref::<RtDetrDecoder>().expect("an RT-DETR head");
        let maps = head.forward_denoised(feats, &cx, Some(&dn.upload(&self.images.device())));
        // in f32, as the `loss.rtdetr` stage reads them
        let wide: Vec<Tensor<4>> = maps.iter().map(|m| m.clone().cast(FloatDType::F32)).collect();
        let levels = Level::in_order(&wide[0], &wide[1], &wide[2], &wide[3]);
        let denoising = DenoisingLevels::of(&wide[4], &wide[5], &DenoisingLayout { queries: dn.queries, groups: dn.groups });
        let terms = RtDetrLoss.compute(&levels, Some(&denoising), &self.targets, None);
        let grads = cx.gradients(&terms.total.backward());
        (maps, terms, grads)
    }
}

/// Every loss term's relative error against the fixture's LibreYOLO value (`loss.loss_vfl`,
/// `loss.loss_bbox_aux_0`, ..., `loss.loss_giou_dn_2`), then the sums by kind and the total.
fn term_errors(io: &Fixture, terms: &DetrTerms) -> Vec<(String, f64)> {
    let rel = |got: &Tensor<1>, name: &str| {
        let want = io.get(name).scalar();
        (read(got).1[0] as f64 - want).abs() / want.abs()
    };
    let suffix = |level: usize| match level {
        0 => String::new(),
        l if l <= 3 => format!("_aux_{}", l - 1),
        l => format!("_dn_{}", l - 4),
    };
    let mut out = vec![];
    for (level, parts) in terms.levels.iter().enumerate() {
        for (part, name) in parts.iter().zip(["vfl", "bbox", "giou"]) {
            let key = format!("loss.loss_{name}{}", suffix(level));
            out.push((key.clone(), rel(part, &key)));
        }
    }
    for (got, name) in [(&terms.vfl, "sum.vfl"), (&terms.bbox, "sum.bbox"), (&terms.giou, "sum.giou"), (&terms.total, "loss.total_loss")] {
        out.push((name.to_string(), rel(got, name)));
    }
    out
}

/// One training step's forward and loss with denoising groups, against LibreYOLO's
/// `model(x, targets)` and `RTDETRLoss` on the same draws; the gradients against the same step
/// in float64, since LibreYOLO's own float32 gradients of it are up to 2% from those (the
/// fixture records how far). The terms within 1e-4: our forward's logits are up to 7e-6 from
/// LibreYOLO's, and the small VFL terms (0.01) carry that to ~3e-5; on LibreYOLO's own outputs
/// the loss is within 1e-5 (`denoising_loss_on_libreyolo_outputs_matches_it`).
#[test]
fn narrow_rtdetr_denoising_step_matches_libreyolo() {
    let step = DenoisingStep::open();
    let io = &step.io;
    let (maps, terms, grads) = step.run(&step.dn);
    let names = ["boxes", "logits", "enc_boxes", "enc_logits", "dn_boxes", "dn_logits"];
    assert_eq!(maps.len(), names.len());
    for (map, name) in maps.iter().zip(names) {
        let err = rel_err(map, &io.get(&format!("train_{name}")).to_f32());
        eprintln!("train_{name}: {:?} relative error {err:.2e}", map.dims());
        assert!(err < OUTPUTS, "train_{name}: relative error {err:.2e}");
    }
    assert_eq!(terms.levels.len(), 7, "the last layer, two other layers, the encoder, three denoising layers");
    for (key, err) in term_errors(io, &terms) {
        eprintln!("{key}: relative error {err:.2e}");
        assert!(err < 1e-4, "{key}: relative error {err:.2e}");
    }
    let grads = libreyolo_run::parity::classifier::gradients(io, &step.params, &grads).unwrap();
    assert_eq!(grads.len(), 326, "every parameter's gradient, the denoising class embedding's too");
    let worst = grads.iter().cloned().fold((String::new(), 0.0), |m, g| if g.1 > m.1 { g } else { m });
    let theirs = io.get("libreyolo_f32_grad_err").scalar();
    eprintln!("worst gradients (LibreYOLO's float32 step: {theirs:.2e}):\n{}", worst_of(grads.clone(), 8));
    assert!(worst.1 < GRADS, "d loss / d {}: error {:.2e} (tolerance {GRADS:.0e})", worst.0, worst.1);
}

/// The loss alone on LibreYOLO's own outputs of that step (the forward's rounding taken out):
/// every level's terms, the denoising layers' among them, the sums by kind and the total within
/// 1e-5 of LibreYOLO's. (What found `box_ops`' 1e-6 guards: without them the VFL terms were
/// 5e-5 to 8e-5 off, the small boxes' IoU moved.)
#[test]
fn denoising_loss_on_libreyolo_outputs_matches_it() {
    let step = DenoisingStep::open();
    let io = &step.io;
    let device = test_device();
    let map = |name: &str| {
        let t = io.get(&format!("train_{name}"));
        let s = &t.shape;
        let dims = if s.len() == 3 { [1, s[0], s[1], s[2]] } else { [s[0], s[1], s[2], s[3]] };
        Tensor::<4>::from_data(TensorData::new(t.to_f32(), dims), &device)
    };
    let levels = Level::in_order(&map("boxes"), &map("logits"), &map("enc_boxes"), &map("enc_logits"));
    let layout = DenoisingLayout { queries: step.dn.queries, groups: step.dn.groups };
    let denoising = DenoisingLevels::of(&map("dn_boxes"), &map("dn_logits"), &layout);
    let terms = RtDetrLoss.compute(&levels, Some(&denoising), &step.targets, None);
    let worst = term_errors(io, &terms).into_iter().fold((String::new(), 0f64), |m, e| if e.1 > m.1 { e } else { m });
    eprintln!("worst loss term on LibreYOLO's outputs: {} {:.2e}", worst.0, worst.1);
    assert!(worst.1 < 1e-5, "{}: relative error {:.2e}", worst.0, worst.1);
}

/// The same step with its denoising queries in more slots than it has queries (the padding that
/// gives every batch one shape): the same outputs, loss and gradients, to float rounding.
#[test]
fn padded_denoising_slots_leave_the_step_unchanged() {
    let step = DenoisingStep::open();
    let (maps, terms, grads) = step.run(&step.dn);
    let padded = step.dn.clone().with_slots(step.dn.queries + 56, 40);
    let (padded_maps, padded_terms, padded_grads) = step.run(&padded);
    for (i, (a, b)) in maps.iter().zip(&padded_maps).enumerate() {
        // the denoising maps (4, 5) hold every slot: the real queries first
        let b = if i >= 4 { &b.clone().slice_dim(2, 0..step.dn.queries) } else { b };
        assert_eq!(a.dims(), b.dims(), "map {i}");
        let err = rel_err(b, &read(a).1);
        assert!(err < 1e-5, "map {i}: relative error {err:.2e} with padding");
    }
    let (a, b) = (read(&terms.total).1[0], read(&padded_terms.total).1[0]);
    assert!(((a - b) / a).abs() < 1e-5, "loss {a} unpadded, {b} padded");
    assert_eq!(grads.len(), padded_grads.len());
    let largest = grads.iter().map(|(_, g)| read(g).1.iter().fold(0f32, |m, v| m.max(v.abs()))).fold(0f32, f32::max);
    for ((id, g), (_, p)) in grads.iter().zip(&padded_grads) {
        let diff = read(g).1.iter().zip(read(p).1).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff <= 1e-4 * largest, "parameter {id:?}: gradients differ by {diff:.2e} of {largest:.2e} with padding");
    }
}

/// The denoising step — queries, forward, loss, backward — runs under bf16 with every map in
/// bf16 (the precision LibreYOLO's four seeds were matched with; the f32 decoder boxes and
/// residual stream tried on 2026-12-06 stalled the box losses in three of four GPU runs and
/// were withdrawn, docs/benchmarks.md), a finite loss and finite gradients.
#[test]
fn narrow_rtdetr_denoising_step_runs_in_bf16() {
    let step = DenoisingStep::open();
    let (maps, terms, grads) = step.run_in(&step.dn, Some(FloatDType::BF16));
    // (not compared with the f32 fixture: in bf16 the encoder's scores tie and the top-k picks
    // other queries)
    let names = ["boxes", "logits", "enc_boxes", "enc_logits", "dn_boxes", "dn_logits"];
    assert_eq!(maps.len(), names.len());
    for (map, name) in maps.iter().zip(names) {
        assert_eq!(FloatDType::from(map.dtype()), FloatDType::BF16, "{name} under bf16");
    }
    let total = read(&terms.total).1[0];
    assert!(total.is_finite() && total > 0.0, "bf16 loss {total}");
    assert!(grads.iter().all(|(_, g)| read(g).1.iter().all(|v| v.is_finite())), "a gradient is not finite");
}

/// The decoder's decode and top-k postprocess against LibreYOLO's (`postprocess.rtdetr`, fixture
/// of tests/fixtures/make_rtdetr_postprocess_fixture.py) on LibreYOLO's own eval outputs: the same
/// (query, class) pairs in the same order, scores and boxes to float rounding.
#[test]
fn rtdetr_postprocess_matches_libreyolo() {
    let dir = project_dir();
    let io = Fixture::open(&dir.join("rtdetr_narrow_io.safetensors")).unwrap();
    let want = Fixture::open(&dir.join("rtdetr_postprocess.safetensors")).unwrap();
    let device = Device::flex();
    let (network, _) = network_in(&dir, "rtdetr_narrow", 5, &device).unwrap();
    let map = |key: &str| {
        let t = io.get(key);
        let s = &t.shape;
        Tensor::<4>::from_data(TensorData::new(t.to_f32(), [1, s[0], s[1], s[2]]), &device)
    };
    let maps = vec![map("eval_boxes"), map("eval_logits")];
    let d = &io.get("images_u8").shape;
    let (h, w) = (d[2], d[3]);
    let head = network.detector("the postprocess test").unwrap();
    let (dims, values) = read(&head.decode(&maps, [h, w]));
    let (rows, a) = (dims[1], dims[2]);
    let cfg = NmsConfig { conf: 0.0, iou: 0.65, max_det: want.get("max_det").to_f32()[0] as usize, max_candidates: 30_000 };
    for i in 0..dims[0] {
        let dets = nms::detect(&values[i * rows * a..(i + 1) * rows * a], head.nc(), head.labels(), a, [1.0; 2], (w as u32, h as u32), &cfg);
        let (boxes, scores, classes) =
            (want.get(&format!("boxes_{i}")).to_f32(), want.get(&format!("scores_{i}")).to_f32(), want.get(&format!("classes_{i}")).to_f32());
        assert_eq!(dets.len(), scores.len(), "image {i}: max_det detections");
        for (k, det) in dets.iter().enumerate() {
            assert_eq!(det.class, classes[k] as usize, "image {i}, detection {k}: class");
            assert!((det.score - scores[k]).abs() < 1e-6, "image {i}, detection {k}: score {} vs {}", det.score, scores[k]);
            for j in 0..4 {
                assert!((det.xyxy[j] - boxes[k * 4 + j]).abs() < 1e-4, "image {i}, detection {k}: box {:?} vs {:?}", det.xyxy, &boxes[k * 4..k * 4 + 4]);
            }
        }
    }
}
