//! MobileNetV4's network and loss against LibreYOLO 1.6 on the CPU (fixtures of
//! tests/fixtures/make_mobilenetv4_fixture.py): the shipped MobileNetV4-conv s/m/l manifests give
//! LibreYOLO's state_dict keys, shapes and parameter counts; narrow copies of the "s" layout (a
//! quarter of its widths: the stem, 'cn' blocks, every UIR variant — start and middle depthwise
//! convolutions, either alone — and the conv_head/norm_head classifier) and of the "m" layout
//! (an eighth; its EdgeResidual too) with the fixtures' weights give LibreYOLO's logits in eval
//! and train mode, its BatchNorm statistics after the train-mode forward, its cross-entropy and
//! the gradient of every parameter.

use burn::tensor::Device;
use libreyolo_run::parity::classifier::check_classifier;
use libreyolo_run::parity::fixture::{keys_and_shapes, project_dir as fixtures};

#[test]
fn every_mobilenetv4_manifest_matches_libreyolo_keys_and_count() {
    #[derive(serde::Deserialize)]
    struct Manifest {
        model: Model,
    }
    #[derive(serde::Deserialize)]
    struct Model {
        layers: Vec<libreyolo_families::LayerSpec>,
    }
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("mobilenetv4_keys.json")).unwrap()).unwrap();
    for size in ["s", "m", "l"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../manifests/mobilenetv4{size}.toml"));
        let manifest: Manifest = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let (_, params) = libreyolo_families::Network::build(&manifest.model.layers, 1000, false, &Device::flex(), 0).unwrap();
        let want = &fixture[size];
        assert_eq!(params.num_parameters() as u64, want["parameters"].as_u64().unwrap(), "MobileNetV4-conv-{size} parameters");
        let ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
        assert_eq!(ours, keys_and_shapes(&want["keys"]), "MobileNetV4-conv-{size}: state_dict keys and shapes, in order");
    }
}

#[test]
fn narrow_mobilenetv4_logits_batch_norm_loss_and_gradients_match_libreyolo() {
    let keys: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("mobilenetv4_keys.json")).unwrap()).unwrap();
    // The "s" layout (ConvBnAct and UIR) and the "m" layout (EdgeResidual too).
    for (name, size) in [("mobilenetv4_narrow", "s"), ("mobilenetv4m_narrow", "m")] {
        let (grads, stats) = check_classifier(name);
        // A narrow network has its full one's tensors: every parameter's gradient, every
        // BatchNorm's three buffers.
        let names: Vec<String> = keys[size]["keys"].as_array().unwrap().iter().map(|k| k[0].as_str().unwrap().to_string()).collect();
        let buffers = names.iter().filter(|n| n.contains("running_") || n.ends_with("num_batches_tracked")).count();
        assert_eq!(stats, buffers, "{name}: every BatchNorm buffer is in the fixture");
        assert_eq!(grads, names.len() - buffers, "{name}: every parameter's gradient is in the fixture");
    }
}
