//! COCO mAP equal to pycocotools: the fixture's synthetic detections on COCO128 give all 12
//! numbers of `map_expected.json` within 1e-4 (fixture folder: `LIBREYOLO_PARITY_DIR`).

use std::path::PathBuf;

use libreyolo_run::parity::fixture;
use libreyolo_stages::data::cache::CacheMode;
use libreyolo_stages::data::{Dataset, DatasetConfig};
use libreyolo_stages::val::coco::{self, Detection, STAT_NAMES};
use libreyolo_stages::val::ground_truth;

#[test]
fn map_matches_pycocotools() {
    let yaml = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128/coco128.yaml");
    let cfg = DatasetConfig::load(&yaml).unwrap();
    let ds = Dataset::open("val", &cfg.val, cfg.nc(), (640, 640), CacheMode::None).unwrap();
    let gts = ground_truth(&ds);

    let dir = fixture::default_dir();
    let expected: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("map_expected.json")).unwrap()).unwrap();
    assert_eq!(gts.len() as u64, expected["counts"]["gt_boxes"].as_u64().unwrap());
    let rows: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(dir.join("map_detections.json")).unwrap()).unwrap();
    let stems: Vec<String> = ds.items.iter().map(|i| i.image.file_stem().unwrap().to_string_lossy().into_owned()).collect();
    let dets: Vec<Detection> = rows
        .iter()
        .map(|r| {
            let image = stems.iter().position(|s| s == r["image"].as_str().unwrap()).unwrap();
            let [x1, y1, x2, y2] = ["x1", "y1", "x2", "y2"].map(|k| r[k].as_f64().unwrap());
            Detection { image, category: r["cls"].as_u64().unwrap() as usize, bbox: [x1, y1, x2 - x1, y2 - y1], score: r["score"].as_f64().unwrap() }
        })
        .collect();
    let stats = coco::evaluate(ds.len(), cfg.nc(), &gts, &dets);
    for (i, name) in STAT_NAMES.iter().enumerate() {
        let want = expected["stats"][name].as_f64().unwrap();
        eprintln!("{name}: {:.12} expected {want:.12}", stats[i]);
        assert!((stats[i] - want).abs() <= 1e-4, "{name}: {} vs {want}", stats[i]);
    }
}
