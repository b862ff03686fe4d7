//! MobileNetV4's network and loss against LibreYOLO 1.6 on the CPU (fixtures of
//! tests/fixtures/make_mobilenetv4_fixture.py): the shipped MobileNetV4-conv-small manifest gives
//! LibreYOLO's state_dict keys, shapes and parameter count; a narrow one (its layout at a
//! quarter of its widths: the stem, 'cn' blocks, every UIR variant — start and middle depthwise
//! convolutions, either alone — and the conv_head/norm_head classifier) with the fixture's
//! weights gives LibreYOLO's logits in eval and train mode, its BatchNorm statistics after the
//! train-mode forward, its cross-entropy and the gradient of every parameter.

use burn::tensor::Device;
use libreyolo_run::parity::fixture::{check_classifier, keys_and_shapes, project_dir as fixtures};

#[test]
fn mobilenetv4_conv_small_matches_libreyolo_keys_and_count() {
    #[derive(serde::Deserialize)]
    struct Manifest {
        model: Model,
    }
    #[derive(serde::Deserialize)]
    struct Model {
        layers: Vec<libreyolo_families::LayerSpec>,
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/mobilenetv4s.toml");
    let manifest: Manifest = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (_, params) = libreyolo_families::Network::build(&manifest.model.layers, 1000, false, &Device::flex(), 0).unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("mobilenetv4_keys.json")).unwrap()).unwrap();
    assert_eq!(params.num_parameters() as u64, fixture["parameters"].as_u64().unwrap(), "MobileNetV4-conv-small parameters");
    let ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
    assert_eq!(ours, keys_and_shapes(&fixture["keys"]), "MobileNetV4-conv-small: state_dict keys and shapes, in order");
}

#[test]
fn narrow_mobilenetv4_logits_batch_norm_loss_and_gradients_match_libreyolo() {
    let (grads, stats) = check_classifier("mobilenetv4_narrow", 5);
    let keys: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("mobilenetv4_keys.json")).unwrap()).unwrap();
    // The narrow network has the full one's tensors: every parameter's gradient, every
    // BatchNorm's three buffers.
    let names: Vec<String> = keys["keys"].as_array().unwrap().iter().map(|k| k[0].as_str().unwrap().to_string()).collect();
    let buffers = names.iter().filter(|n| n.contains("running_") || n.ends_with("num_batches_tracked")).count();
    assert_eq!(stats, buffers, "every BatchNorm buffer is in the fixture");
    assert_eq!(grads, names.len() - buffers, "every parameter's gradient is in the fixture");
}
