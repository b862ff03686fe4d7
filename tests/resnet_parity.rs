//! ResNet's network and loss against LibreYOLO 1.6 on the CPU (fixtures of
//! tests/fixtures/make_resnet_fixture.py): the ResNet-18 topology gives LibreYOLO's state_dict
//! keys, shapes and parameter count; a narrow ResNet-18 (its layout at an eighth of its widths)
//! with the fixture's weights gives LibreYOLO's logits in eval and train mode (from u8 pixels
//! through the ImageNet normalisation), its BatchNorm running statistics after the train-mode
//! forward, its cross-entropy and the gradient of every parameter.

use burn::tensor::{Device, Int, Tensor, TensorData};
use libreyolo_families::tensor::AnyTensor;
use libreyolo_families::{Ctx, Value};
use libreyolo_run::parity::fixture::{Fixture, fixture_network, project_dir as fixtures, read, rel_err};

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
    let device = Device::flex();
    let (network, mut params) = fixture_network("resnet_narrow", 5);
    libreyolo_families::weights::load_safetensors(&mut params, &fixtures().join("resnet_narrow.safetensors"), false).unwrap();
    let io = Fixture::open(&fixtures().join("resnet_narrow_io.safetensors")).unwrap();
    let pixels = io.get("images_u8");
    let d = &pixels.shape;
    // What the loader hands a network: RGB in [0, 1].
    let images = Tensor::<4>::from_data(TensorData::new(pixels.to_f32(), [d[0], d[1], d[2], d[3]]), &device).div_scalar(255.0);
    let labels: Vec<i64> = io.get("labels").to_f32().iter().map(|&v| v as i64).collect();
    let labels = Tensor::<1, Int>::from_data(TensorData::new(labels, [d[0]]), &device);
    let logits = |maps: Vec<Tensor<4>>| {
        let [b, nc, _, _] = maps[0].dims();
        maps[0].clone().reshape([b, nc])
    };

    let eval = logits(network.forward(images.clone(), &Ctx::eval(&params), false).main);
    let err = rel_err(&eval, &io.get("eval_logits").to_f32());
    assert!(err < 1e-4, "eval logits: max |ours - LibreYOLO| / max |LibreYOLO| = {err:.2e}");

    let cx = Ctx::train(&params);
    let train = logits(network.forward(images, &cx, false).main);
    let err = rel_err(&train, &io.get("train_logits").to_f32());
    assert!(err < 1e-4, "train logits: {err:.2e}");
    let loss = libreyolo_stages::loss::cross_entropy(train, labels);
    let (want, got) = (io.get("loss").scalar(), read(&loss).1[0] as f64);
    assert!((got - want).abs() / want < 1e-5, "cross-entropy {got} vs LibreYOLO's {want}");

    let grads = cx.gradients(&loss.backward());
    let mut checked = 0;
    for name in io.names() {
        let Some(key) = name.strip_prefix("grad.") else { continue };
        let id = params.find(key).unwrap_or_else(|| panic!("no parameter `{key}`"));
        let (_, g) = grads.iter().find(|(p, _)| *p == id).unwrap_or_else(|| panic!("no gradient for `{key}`"));
        let err = rel_err(g, &io.get(&name).to_f32());
        assert!(err < 1e-3, "d loss / d {key}: max |ours - LibreYOLO| / max |LibreYOLO| = {err:.2e}");
        checked += 1;
    }
    assert_eq!(checked, 62, "every parameter's gradient is in the fixture");

    params.apply_batch_stats(cx.take_batch_stats());
    let mut stats = 0;
    for name in io.names() {
        let Some(key) = name.strip_prefix("after_train.") else { continue };
        let id = params.find(key).unwrap_or_else(|| panic!("no parameter `{key}`"));
        let want = io.get(&name).to_f32();
        match &params.entry(id).value {
            Value::Float(AnyTensor::R1(t)) => {
                let err = rel_err(t, &want);
                assert!(err < 1e-4, "{key} after one train-mode forward: relative error {err:.2e}");
            }
            Value::Count(n) => assert_eq!(*n as f32, want[0], "{key}"),
            _ => panic!("{key}: unexpected rank"),
        }
        stats += 1;
    }
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
