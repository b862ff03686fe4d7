#!/usr/bin/env python3
"""Generates "coco128-crops", a small image-classification dataset in the ImageFolder layout
(`train/CLASS/*.png`, `val/CLASS/*.png`) from COCO128's boxes, so classification trains and is
checked without a download:

    python3 bench/make_crops.py COCO128_DIR OUT_DIR [--min-side 24] [--min-count 12] [--max-count 50] [--pad 0.1] [--val-every 4]

Each labelled box whose sides are both at least `--min-side` pixels is cut out with `--pad` of its
size as context on every side (clipped to the image) and saved as a lossless PNG under its class
name; classes with fewer than `--min-count` such boxes are left out, and a class keeps its first
`--max-count` (COCO128 is a third people). The split is per class: every `--val-every`-th crop of
a class (in image order) goes to val, so every class has both splits (crops of one image may fall
in both, as several donuts of one plate do).
Deterministic: the same arguments give the same files. Needs Pillow. Prints the per-class counts.
"""
import argparse
import collections
import os

from PIL import Image


def boxes(coco, min_side, pad):
    """(image index, class id, crop) for every large enough box, in sorted image order."""
    images = sorted(os.listdir(os.path.join(coco, "images", "train2017")))
    for i, name in enumerate(images):
        label = os.path.join(coco, "labels", "train2017", os.path.splitext(name)[0] + ".txt")
        if not os.path.exists(label):
            continue
        img = Image.open(os.path.join(coco, "images", "train2017", name)).convert("RGB")
        w, h = img.size
        for n, line in enumerate(open(label).read().split("\n")):
            if not line.strip():
                continue
            k, cx, cy, bw, bh = line.split()
            cx, cy, bw, bh = float(cx) * w, float(cy) * h, float(bw) * w, float(bh) * h
            if min(bw, bh) < min_side:
                continue
            x1, y1 = max(0, round(cx - bw / 2 - pad * bw)), max(0, round(cy - bh / 2 - pad * bh))
            x2, y2 = min(w, round(cx + bw / 2 + pad * bw)), min(h, round(cy + bh / 2 + pad * bh))
            yield i, int(k), f"{os.path.splitext(name)[0]}_{n}.png", img.crop((x1, y1, x2, y2))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("coco")
    p.add_argument("out")
    p.add_argument("--min-side", type=int, default=24)
    p.add_argument("--min-count", type=int, default=12)
    p.add_argument("--pad", type=float, default=0.1)
    p.add_argument("--max-count", type=int, default=50)
    p.add_argument("--val-every", type=int, default=4)
    args = p.parse_args()
    if os.path.isdir(args.out) and os.listdir(args.out):
        # Crops are only ever added: a second run into the same folder would mix two datasets.
        raise SystemExit(f"{args.out} exists and is not empty; remove it or give another OUT_DIR")
    names = [l.strip() for l in open(os.path.join(args.coco, "names.txt")) if l.strip()]
    crops = list(boxes(args.coco, args.min_side, args.pad))
    counts = collections.Counter(k for _, k, _, _ in crops)
    kept = sorted(k for k, c in counts.items() if c >= args.min_count)
    per_split, taken = collections.Counter(), collections.Counter()
    for _, k, file, crop in crops:
        if k not in kept or taken[k] == args.max_count:
            continue
        taken[k] += 1
        split = "val" if taken[k] % args.val_every == 0 else "train"
        folder = os.path.join(args.out, split, names[k].replace(" ", "_"))
        os.makedirs(folder, exist_ok=True)
        crop.save(os.path.join(folder, file), optimize=False)
        per_split[split, k] += 1
    print(f"{len(kept)} classes, {sum(per_split.values())} crops into {args.out}")
    for k in kept:
        print(f"  {names[k]:<16} train {per_split['train', k]:>4}  val {per_split['val', k]:>3}")


if __name__ == "__main__":
    main()
