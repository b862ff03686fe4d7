#!/usr/bin/env python3
"""Trained weights scored by both validators: each WEIGHTS file by this engine's `val` and by
LibreYOLO 1.6's, in each --dtype, on one dataset; prints one row per file and writes OUT/scores.json.

    python3 bench/score_weights.py BIN DATA_YAML OUT WEIGHTS... [--family yolox] [--size t]
        [--dtypes f32] [--validators ours,libreyolo] [--device cpu] [--batch 16] [--imgsz 640] [--workers 2]

WEIGHTS are LibreYOLO `.pt` checkpoints or this engine's checkpoints / state dicts (for example the
EMA weights bench/ema_weights.py cuts out of a run); both validators read both kinds. It is how an
accuracy comparison is read when the two engines were trained apart (different runs, or LibreYOLO
could not validate during training), with one validator and one dtype for every file.
"""
import argparse
import json
import os

from train_compare import libreyolo_val, ours_val

VALIDATORS = (("ours", "libreyolo-run", ours_val), ("libreyolo", "LibreYOLO 1.6", libreyolo_val))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("weights", nargs="+")
    p.add_argument("--family", default="yolo9")
    p.add_argument("--size", default="t")
    p.add_argument("--dtypes", default="f32")
    p.add_argument("--validators", default="ours,libreyolo", help="which validators score (LibreYOLO's takes minutes a file on a CPU)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    print("| weights | validator | dtype | mAP50-95 | mAP50 |\n|---|---|---|---:|---:|", flush=True)
    for path in args.weights:
        for dtype in args.dtypes.split(","):
            for key, validator, score in VALIDATORS:
                if key not in args.validators.split(","):
                    continue
                tag = f"{os.path.basename(path).split('.')[0]}-by-{key}-{dtype}"
                m, err = score(args, args.out, os.path.abspath(path), dtype, args.device, tag)
                if m is None:
                    print(f"| {path} | {validator} | {dtype} | failed: {err[-200:]!r} | |", flush=True)
                    continue
                rows.append({"weights": path, "validator": validator, "dtype": dtype, **m})
                print(f"| {os.path.basename(path)} | {validator} | {dtype} | {m['mAP50-95']:.4f} | {m['mAP50']:.4f} |", flush=True)
    json.dump(rows, open(os.path.join(args.out, "scores.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
