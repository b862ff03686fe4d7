//! ResNet's network and loss against LibreYOLO 1.6 on the CPU (fixtures of
//! tests/fixtures/make_resnet_fixture.py): the ResNet-18 topology gives LibreYOLO's state_dict
//! keys, shapes and parameter count; a narrow ResNet-18 (its layout at an eighth of its widths)
//! with the fixture's weights gives LibreYOLO's logits in eval and train mode (from u8 pixels
//! through the ImageNet normalisation), its BatchNorm running statistics after the train-mode
//! forward, its cross-entropy and the gradient of every parameter.

use burn::tensor::Device;
use libreyolo_run::parity::classifier::check_classifier;
use libreyolo_run::parity::fixture::{fixture_network, project_dir as fixtures};

#[test]
fn resnet18_matches_libreyolo_keys_and_count() {
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("resnet_keys.json")).unwrap()).unwrap();
    let (_, params) = fixture_network("resnet18", 1000);
    assert_eq!(params.num_parameters() as u64, fixture["parameters"].as_u64().unwrap(), "ResNet-18 parameters");
    assert_eq!(params.num_parameters(), 11_689_512);
    let ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
    assert_eq!(ours, libreyolo_run::parity::fixture::keys_and_shapes(&fixture["keys"]), "ResNet-18: state_dict keys and shapes, in order");
}

#[test]
fn narrow_resnet_logits_batch_norm_loss_and_gradients_match_libreyolo() {
    let (grads, stats) = check_classifier("resnet_narrow");
    assert_eq!(grads, 62, "every parameter's gradient is in the fixture");
    assert_eq!(stats, 20 * 3, "running mean, var and count of 20 BatchNorms");
}

/// Two layers whose `params` prefixes make the same parameter are a topology error naming the
/// layer and the key, not a store with two entries of one name.
#[test]
fn clashing_params_prefixes_are_an_error() {
    #[derive(serde::Deserialize)]
    struct Topology {
        layers: Vec<libreyolo_families::LayerSpec>,
    }
    let text = r#"layers = [
      { name = "stem", params = "", block = "ResNetStem", args = { out = 8 } },
      { name = "stem2", params = "", from = "images", block = "ResNetStem", args = { out = 8 } },
      { name = "head", params = "", block = "Classify" },
    ]"#;
    let topology: Topology = toml::from_str(text).unwrap();
    let Err(err) = libreyolo_families::Network::build(&topology.layers, 5, false, &Device::flex(), 0) else { panic!("the clash was not an error") };
    assert_eq!((err.layer, err.key.as_deref()), (1, Some("params")));
    assert!(err.message.contains("`conv1.weight`"), "{}", err.message);
}
