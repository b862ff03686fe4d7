//! The data stage on COCO128 and on a folder of broken files: loading, labels, background
//! images, letterbox geometry, bad-file handling with warnings, determinism of the loader.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use libreyolo_stages::data::augment::resize::Resize;
use libreyolo_stages::data::cache::CacheMode;
use libreyolo_stages::data::labels::label_path;
use libreyolo_stages::data::loader::largest_labels;
use libreyolo_stages::data::{Augment, Dataset, DatasetConfig, LabelRows, Loader, LoaderConfig, Transform, sample};

fn coco128() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128/coco128.yaml")
}

fn augment() -> Augment {
    Augment {
        mosaic_prob: 1.0,
        mixup_prob: 0.0,
        pipeline: Default::default(),
        mixup_scale: [0.5, 1.5],
        degrees: 0.0,
        translate: 0.1,
        scale: [0.5, 1.5],
        shear: 0.0,
        hsv_prob: 1.0,
        flip_prob: 0.5,
        flipud: 0.0,
        resize: Default::default(),
    }
}

fn loader(ds: Arc<Dataset>, batch: usize, workers: usize, seed: u64, size: u32) -> Loader {
    sharded(ds, batch, workers, seed, size, (0, 1))
}

fn sharded(ds: Arc<Dataset>, batch: usize, workers: usize, seed: u64, size: u32, shard: (usize, usize)) -> Loader {
    Loader::new(
        ds,
        LoaderConfig {
            batch,
            height: size,
            width: size,
            workers,
            seed,
            max_labels: 300,
            label_rows: LabelRows::Fixed,
            shuffle: true,
            drop_last: true,
            prefetch: 2,
            transform: Transform::Detect(augment()),
            shard,
        },
    )
}

/// Rows in the label files of COCO128, counted independently of the parser.
fn label_rows(cfg: &DatasetConfig) -> usize {
    let dir = cfg.root.join("labels/train2017");
    std::fs::read_dir(dir).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap().lines().filter(|l| !l.trim().is_empty()).count()).sum()
}

#[test]
fn coco128_loads_with_its_backgrounds_and_every_box() {
    let cfg = DatasetConfig::load(&coco128()).unwrap();
    assert_eq!(cfg.nc(), 80);
    assert_eq!(cfg.names[0], "person");
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), (640, 640), CacheMode::None).unwrap();
    assert_eq!(ds.len(), 128);
    assert!(ds.report.row_warnings.is_empty() && ds.report.bad_images.is_empty());
    assert_eq!(ds.num_boxes(), label_rows(&cfg));
    for stem in ["000000000250", "000000000508"] {
        let item = ds.items.iter().find(|i| i.image.file_stem().unwrap() == stem).unwrap();
        assert!(item.labels.is_empty(), "{stem} is a background image");
        assert!(!label_path(&item.image).exists());
    }
}

#[test]
fn background_images_yield_empty_targets() {
    let cfg = DatasetConfig::load(&coco128()).unwrap();
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), (320, 320), CacheMode::None).unwrap();
    let i = ds.items.iter().position(|i| i.image.file_stem().unwrap() == "000000000250").unwrap();
    let (s, _) = sample::val_sample(&ds, i, (320, 320), Resize::Letterbox);
    assert!(s.targets.is_empty());
    let assemble = |rows: LabelRows| {
        let samples = std::slice::from_ref(&s);
        libreyolo_stages::data::loader::assemble(samples, 320, 320, 300, rows.rows(largest_labels(samples), 300))
    };
    let batch = assemble(LabelRows::Fixed);
    assert_eq!(batch.rows, 300);
    assert!(batch.targets.chunks_exact(5).all(|r| r == [-1.0, 0.0, 0.0, 0.0, 0.0]));
    // Padded to the batch: at least 8 rows, all padding.
    let batch = assemble(LabelRows::Batch);
    assert_eq!((batch.rows, batch.targets.len()), (8, 8 * 5));
    assert!(batch.targets.chunks_exact(5).all(|r| r == [-1.0, 0.0, 0.0, 0.0, 0.0]));
}

#[test]
fn letterboxed_boxes_map_back_to_the_original_pixels() {
    let cfg = DatasetConfig::load(&coco128()).unwrap();
    // A rectangular size so that both the pre-resize and the letterbox scale.
    let (h, w) = (384u32, 512u32);
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), (h, w), CacheMode::None).unwrap();
    let mut checked = 0;
    for (i, item) in ds.items.iter().enumerate().take(20) {
        let (s, [r2, _]) = sample::val_sample(&ds, i, (h, w), Resize::Letterbox);
        let (ow, oh) = item.size;
        let r1 = (h as f32 / oh as f32).min(w as f32 / ow as f32);
        assert_eq!(s.targets.len(), item.labels.len());
        for (t, l) in s.targets.iter().zip(&item.labels) {
            let back = [t[1] * w as f32, t[2] * h as f32, t[3] * w as f32, t[4] * h as f32].map(|v| v / (r1 * r2));
            let orig = [l.x1 * ow as f64, l.y1 * oh as f64, l.x2 * ow as f64, l.y2 * oh as f64].map(|v| v as f32);
            for (a, b) in back.iter().zip(orig) {
                assert!((a - b).abs() <= 1.0, "{}: {back:?} vs {orig:?}", item.image.display());
            }
            checked += 1;
        }
    }
    assert!(checked > 50);
}

/// RT-DETR's stretch reads the images as decoded (no pre-resize) and scales each axis on its
/// own: a box of the input divided by the scale is the original box.
#[test]
fn stretched_boxes_map_back_to_the_original_pixels() {
    let cfg = DatasetConfig::load(&coco128()).unwrap();
    let (h, w) = (384u32, 512u32);
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), None, CacheMode::None).unwrap();
    let mut checked = 0;
    for (i, item) in ds.items.iter().enumerate().take(20) {
        let (s, [sx, sy]) = sample::val_sample(&ds, i, (h, w), Resize::Stretch);
        assert_eq!(s.image.dimensions(), (w, h));
        let (ow, oh) = item.size;
        assert_eq!([sx, sy], [w as f32 / ow as f32, h as f32 / oh as f32]);
        assert_eq!(s.targets.len(), item.labels.len());
        for (t, l) in s.targets.iter().zip(&item.labels) {
            let back = [t[1] * w as f32 / sx, t[2] * h as f32 / sy, t[3] * w as f32 / sx, t[4] * h as f32 / sy];
            let orig = [l.x1 * ow as f64, l.y1 * oh as f64, l.x2 * ow as f64, l.y2 * oh as f64].map(|v| v as f32);
            for (a, b) in back.iter().zip(orig) {
                assert!((a - b).abs() <= 1e-2, "{}: {back:?} vs {orig:?}", item.image.display());
            }
            checked += 1;
        }
    }
    assert!(checked > 50);
}

#[test]
fn the_loader_is_deterministic_whatever_the_worker_count() {
    let cfg = DatasetConfig::load(&coco128()).unwrap();
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), (256, 256), CacheMode::Ram).unwrap();
    let first = |workers: usize, seed: u64| {
        let l = loader(ds.clone(), 4, workers, seed, 256);
        let rx = l.epoch(3);
        let a = rx.recv().unwrap();
        let b = rx.recv().unwrap();
        (a, b)
    };
    let (a1, b1) = first(1, 7);
    let (a2, b2) = first(2, 7);
    assert_eq!(a1.images, a2.images);
    assert_eq!(a1.targets, a2.targets);
    assert_eq!(b1.indices, b2.indices);
    // 8 workers make 4 batches of 4 at a time (the loader's groups): the same batches.
    let (a8, b8) = first(8, 7);
    assert_eq!((&a1.images, &a1.targets), (&a8.images, &a8.targets));
    assert_eq!((&b1.images, &b1.targets, &b1.indices), (&b8.images, &b8.targets, &b8.indices));
    let (c, _) = first(2, 8);
    assert_ne!(a1.images, c.images, "another seed gives other batches");
    assert_eq!(a1.images.len(), 4 * 3 * 256 * 256);
    assert_eq!(a1.targets.len(), 4 * 300 * 5);
    assert!(a1.targets.chunks_exact(5).any(|r| r[0] >= 0.0), "mosaic batches carry boxes");
    for r in a1.targets.chunks_exact(5).filter(|r| r[0] >= 0.0) {
        assert!(r[1] >= 0.0 && r[3] <= 1.0 && r[1] < r[3] && r[2] < r[4], "{r:?}");
    }
    assert_eq!(l_batches(&ds), 32);
}

/// `LabelRows::Batch` pads a batch to its largest label count rounded up to a power of two: the
/// same labels in the same order as the fixed rows, only less padding.
#[test]
fn batches_padded_to_their_largest_label_count_keep_every_label() {
    let cfg = DatasetConfig::load(&coco128()).unwrap();
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), (256, 256), CacheMode::Ram).unwrap();
    let batches = |rows: LabelRows| with_rows(loader(ds.clone(), 4, 2, 7, 256), rows).epoch(0).iter().take(6).collect::<Vec<_>>();
    for (fixed, batch) in batches(LabelRows::Fixed).iter().zip(batches(LabelRows::Batch)) {
        assert_eq!(fixed.rows, 300);
        assert_eq!(fixed.images, batch.images);
        let kept = labels(&batch.targets, batch.rows);
        assert_eq!(labels(&fixed.targets, 300), kept);
        let largest = kept.iter().map(Vec::len).max().unwrap();
        assert!(
            batch.rows.is_power_of_two() && batch.rows >= 8 && batch.rows >= largest && batch.rows < 2 * largest.max(8),
            "{} rows for {largest}",
            batch.rows
        );
        assert_eq!(batch.targets.len(), 4 * batch.rows * 5);
    }
}

/// `LabelRows::Growing`: every batch holds the most rows any batch before it needed (at least
/// 64), so the count never falls and the run's shapes are the few counts it rises through; the
/// labels are those of the fixed rows. The no-mosaic loader sharing the count starts where the
/// mosaic one stands.
#[test]
fn growing_rows_never_fall_and_keep_every_label() {
    let cfg = DatasetConfig::load(&coco128()).unwrap();
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), (256, 256), CacheMode::Ram).unwrap();
    let with = |rows: LabelRows| with_rows(loader(ds.clone(), 8, 2, 3, 256), rows);
    let growing = with(LabelRows::Growing);
    let (fixed, grown): (Vec<_>, Vec<_>) = (with(LabelRows::Fixed).epoch(0).iter().collect(), growing.epoch(0).iter().collect());
    let mut most = 0;
    for (f, g) in fixed.iter().zip(&grown) {
        let kept = labels(&g.targets, g.rows);
        assert_eq!(labels(&f.targets, 300), kept);
        let need = kept.iter().map(Vec::len).max().unwrap();
        assert!(g.rows >= 64 && g.rows >= need && g.rows >= most && g.rows.is_power_of_two(), "{} rows after {most}, {need} labels", g.rows);
        most = g.rows;
    }
    let mut closed = with(LabelRows::Growing);
    closed.share_rows(&growing);
    assert!(closed.epoch(1).iter().all(|b| b.rows >= most), "the shared count starts at {most}");
    // Unshared, a loader starts from its own first batch.
    assert_eq!(with(LabelRows::Growing).epoch(0).iter().next().unwrap().rows, grown[0].rows);
}

fn with_rows(mut loader: Loader, rows: LabelRows) -> Loader {
    loader.set_label_rows(rows);
    loader
}

/// Each image's real label rows of a batch's targets (`rows` an image; padding has class -1).
fn labels(targets: &[f32], rows: usize) -> Vec<Vec<[f32; 5]>> {
    targets.chunks_exact(rows * 5).map(|image| image.chunks_exact(5).filter(|r| r[0] >= 0.0).map(|r| r.try_into().unwrap()).collect()).collect()
}

fn l_batches(ds: &Arc<Dataset>) -> usize {
    loader(ds.clone(), 4, 1, 0, 256).batches_per_epoch()
}

/// A YOLO folder with broken files of every kind.
fn broken_dataset() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("images/train")).unwrap();
    std::fs::create_dir_all(root.join("labels/train")).unwrap();
    let good = image::RgbImage::from_fn(64, 48, |x, y| image::Rgb([(x * 4) as u8, (y * 5) as u8, 90]));
    for name in ["a", "b", "c"] {
        good.save(root.join(format!("images/train/{name}.png"))).unwrap();
    }
    // A JPEG whose data is garbage after a valid header.
    let mut jpeg = vec![];
    image::codecs::jpeg::JpegEncoder::new(&mut jpeg).encode_image(&good).unwrap();
    let half = jpeg.len() / 2;
    for b in &mut jpeg[half..] {
        *b = 0xAB;
    }
    std::fs::write(root.join("images/train/corrupt.jpg"), jpeg).unwrap();
    // A truncated PNG.
    let mut png = std::io::Cursor::new(vec![]);
    good.write_to(&mut png, image::ImageFormat::Png).unwrap();
    let png = png.into_inner();
    std::fs::write(root.join("images/train/truncated.png"), &png[..png.len() / 3]).unwrap();
    // Not an image at all.
    std::fs::write(root.join("images/train/garbage.jpg"), b"this is not a jpeg").unwrap();
    std::fs::write(root.join("labels/train/a.txt"), "0 0.5 0.5 0.4 0.4\n").unwrap();
    std::fs::write(root.join("labels/train/b.txt"), "1 0.5 0.5 0.2 0.2\nnot a row\n").unwrap();
    std::fs::write(root.join("labels/train/c.txt"), "0 0.5 0.5 0.3 0.3\n1 1.7 0.5 0.2 0.2\n").unwrap();
    std::fs::write(root.join("labels/train/corrupt.txt"), "0 0.5 0.5 0.2 0.2\n").unwrap();
    std::fs::write(root.join("data.yaml"), "path: .\ntrain: images/train\nval: images/train\nnames: [cat, dog]\n").unwrap();
    let yaml = root.join("data.yaml");
    (dir, yaml)
}

#[test]
fn broken_files_are_skipped_with_warnings() {
    let (_dir, yaml) = broken_dataset();
    let cfg = DatasetConfig::load(&yaml).unwrap();
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), (64, 64), CacheMode::None).unwrap();
    // The file that is not an image fails its header and is skipped at once.
    let bad: Vec<String> = ds.report.bad_images.iter().map(|(p, _)| file_name(p)).collect();
    assert!(bad.contains(&"garbage.jpg".to_string()), "{bad:?}");
    // Bad rows: one malformed, one out of range, each named by file and line.
    let rows: Vec<(String, usize)> = ds.report.row_warnings.iter().map(|w| (file_name(&w.file), w.line)).collect();
    assert_eq!(rows, vec![("b.txt".to_string(), 2), ("c.txt".to_string(), 2)]);
    // The corrupt JPEG fails either at its header (skipped at once) or when decoded; the
    // truncated PNG has a sound header and fails when decoded.
    let corrupt_at_scan = bad.contains(&"corrupt.jpg".to_string());
    assert_eq!(ds.num_boxes(), if corrupt_at_scan { 3 } else { 4 }, "a, b, c (and corrupt) keep their good rows");
    // Every batch still comes, and the decode failures are counted.
    let l = loader(ds.clone(), 2, 2, 0, 64);
    for epoch in 0..3 {
        let rx = l.epoch(epoch);
        let batches: Vec<_> = rx.iter().collect();
        assert_eq!(batches.len(), l.batches_per_epoch());
    }
    let failed = ds.failed_decodes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(failed >= 1, "the truncated PNG is counted");
}

#[test]
fn an_empty_split_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("images/train")).unwrap();
    let err = Dataset::open("train", &[dir.path().join("images/train")], 2, (64, 64), CacheMode::None).err().unwrap();
    assert!(err.to_string().contains("the train split has no images"), "{err}");
    let err = Dataset::open("val", &[dir.path().join("nope")], 2, (64, 64), CacheMode::None).err().unwrap();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[test]
fn dataset_yaml_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("d.yaml");
    std::fs::write(&yaml, "train: images\nnc: 3\nnames: [a, b]\n").unwrap();
    let err = DatasetConfig::load(&yaml).unwrap_err().to_string();
    assert!(err.contains("`nc: 3` but `names` lists 2 classes"), "{err}");
    std::fs::write(&yaml, "train: [images\n").unwrap();
    let err = DatasetConfig::load(&yaml).unwrap_err().to_string();
    assert!(err.contains("not valid YAML"), "{err}");
    std::fs::write(&yaml, "names: {0: a, 1: b}\n").unwrap();
    let err = DatasetConfig::load(&yaml).unwrap_err().to_string();
    assert!(err.contains("`train` is missing"), "{err}");
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Two ranks read disjoint halves of one shared epoch permutation, and each sample is the one
/// a single-GPU run makes at the same place of the epoch (same image, same augmentation).
#[test]
fn ranks_shard_the_epoch_like_a_single_gpu_run() {
    let cfg = DatasetConfig::load(&coco128()).unwrap();
    let ds = Dataset::open("train", &cfg.train, cfg.nc(), (128, 128), CacheMode::Ram).unwrap();
    let one = sharded(ds.clone(), 4, 2, 7, 128, (0, 1));
    let ranks = [sharded(ds.clone(), 2, 2, 7, 128, (0, 2)), sharded(ds.clone(), 2, 2, 7, 128, (1, 2))];
    for epoch in [0, 3] {
        let (o0, o1) = (ranks[0].order(epoch), ranks[1].order(epoch));
        assert_eq!(o0.len(), 64);
        let mut all: Vec<usize> = o0.iter().chain(&o1).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..128).collect::<Vec<_>>(), "the ranks partition the epoch");
        let single = one.order(epoch);
        assert!(o0.iter().zip(&o1).enumerate().all(|(p, (a, b))| single[2 * p] == *a && single[2 * p + 1] == *b));
    }
    assert_ne!(ranks[0].order(0), ranks[0].order(1), "a new permutation every epoch");

    let b = one.epoch(1).recv().unwrap();
    let r: Vec<_> = ranks.iter().map(|l| l.epoch(1).recv().unwrap()).collect();
    let image = |batch: &libreyolo_stages::data::Batch, i: usize| {
        let n = 3 * (batch.height * batch.width) as usize;
        batch.images[i * n..(i + 1) * n].to_vec()
    };
    let rows = |batch: &libreyolo_stages::data::Batch, i: usize| batch.targets[i * 300 * 5..(i + 1) * 300 * 5].to_vec();
    for p in 0..2 {
        for (rank, rb) in r.iter().enumerate() {
            let i = 2 * p + rank;
            assert_eq!(rb.indices[p], b.indices[i]);
            assert!(image(rb, p) == image(&b, i), "rank {rank} sample {p} differs from the single-GPU sample {i}");
            assert_eq!(rows(rb, p), rows(&b, i));
        }
    }
}

/// An ImageFolder directory: classes from `train/`'s sub-folders (sorted), their own sub-folders
/// read too, `test/` when there is no `val/`, a split folder given for the root, a broken image
/// and a class `train/` lacks skipped, and the evaluation transform's centre crop of the resized
/// image.
#[test]
fn imagefolder_datasets_read_like_torchvision() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("flowers");
    for (split, class, n) in [("train", "tulip", 3), ("train", "daisy", 2), ("test", "daisy", 1), ("test", "rose", 1)] {
        let folder = root.join(split).join(class);
        std::fs::create_dir_all(&folder).unwrap();
        for i in 0..n {
            // 80 x 40: a left half black, right half white.
            image::RgbImage::from_fn(80, 40, |x, _| image::Rgb(if x < 40 { [0; 3] } else { [255; 3] })).save(folder.join(format!("{i}.png"))).unwrap();
        }
    }
    std::fs::write(root.join("train/tulip/broken.jpg"), b"not an image").unwrap();
    // A sub-folder of a class folder belongs to the class (torchvision walks them).
    std::fs::create_dir_all(root.join("train/tulip/more")).unwrap();
    std::fs::copy(root.join("train/tulip/0.png"), root.join("train/tulip/more/9.png")).unwrap();
    let cfg = DatasetConfig::load(&root.join("train")).unwrap();
    assert_eq!(cfg.layout, libreyolo_stages::data::Layout::Folder);
    assert_eq!(cfg.names, ["daisy", "tulip"]);
    assert_eq!(cfg.val, [root.join("test")]);
    let train = Dataset::open_folder("train", &cfg.train, &cfg.names, CacheMode::Ram).unwrap();
    assert_eq!(train.len(), 6, "the broken file is skipped, the nested one read");
    assert_eq!(train.report.bad_images.len(), 1);
    let classes: Vec<u32> = train.items.iter().map(|i| i.labels[0].cls).collect();
    assert_eq!(classes, [0, 0, 1, 1, 1, 1]);
    let val = Dataset::open_folder("val", &cfg.val, &cfg.names, CacheMode::None).unwrap();
    assert_eq!(val.len(), 1, "`rose` is not a training class");

    // Evaluation at 16 px, crop_pct 0.5: the shorter side to 32 (64 x 32), the centre 16 x 16
    // straddles the black/white edge at x = 32.
    let cfg_val = LoaderConfig {
        batch: 1,
        height: 16,
        width: 16,
        workers: 1,
        seed: 0,
        max_labels: 1,
        label_rows: LabelRows::Fixed,
        shuffle: false,
        drop_last: false,
        prefetch: 1,
        transform: Transform::CentreCrop { crop_pct: 0.5, interpolation: Default::default() },
        shard: (0, 1),
    };
    let b = Loader::new(val, cfg_val).epoch(0).recv().unwrap();
    assert_eq!(b.targets, [0.0, 0.0, 0.0, 1.0, 1.0], "class 0 (daisy) as a whole-image row");
    let red = &b.images[..256];
    assert!(red[16 * 8..16 * 8 + 7].iter().all(|&v| v == 0) && red[16 * 8 + 9..16 * 9].iter().all(|&v| v == 255), "{:?}", &red[16 * 8..16 * 9]);

    let err = DatasetConfig::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("needs a `train/` folder"), "{err}");
}
