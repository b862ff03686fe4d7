#!/usr/bin/env python3
"""Trained classification accuracy, side by side: LibreYOLO 1.6 and libreyolo-run train a classifier
(`--family resnet|mobilenetv4`) from scratch on the same ImageFolder dataset with the same settings (each engine's defaults for
the family: AdamW 1e-3, one warm-up epoch, cosine, EMA, validated every epoch), for several
seeds, all runs at once on one GPU; prints each run's top-1/top-5 per epoch and the final and
best top-1 per engine, and writes OUT/classify_compare.json.

    python3 bench/classify_compare.py BIN DATA_DIR OUT [--family resnet] [--size 18] [--seeds 0,1] [--epochs 30]
        [--batch 64] [--imgsz 224] [--dtype bf16] [--workers 4] [--engines ours,libreyolo] [--graph] [--device cuda|cpu]

DATA_DIR: an ImageFolder directory (train/CLASS/*, val/CLASS/*), e.g. from bench/make_crops.py.
`--graph`: LibreYOLO with `cuda_graph=True` (ours captures the whole step by default on CUDA).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LIBREYOLO = """
import sys, torch, libreyolo
cls, data, out, name, seed, size, epochs, batch, imgsz, dtype, workers, nc, graph, device = sys.argv[1:]
torch.manual_seed(int(seed))
m = getattr(libreyolo, cls)(None, size=size, nb_classes=int(nc), device=device)
m.train(data=data, epochs=int(epochs), batch=int(batch), imgsz=int(imgsz), device=device, workers=int(workers), seed=int(seed),
        project=out, name=name, exist_ok=True, amp=dtype != "f32" and device != "cpu", amp_dtype={"bf16": "bfloat16", "f16": "float16"}.get(dtype, "bfloat16"),
        cuda_graph=graph == "1")
"""


LIBREYOLO_CLASS = {"resnet": "LibreResNet", "mobilenetv4": "LibreMobileNetV4"}


def classes(data):
    return sorted(d for d in os.listdir(os.path.join(data, "train")) if os.path.isdir(os.path.join(data, "train", d)) and not d.startswith("."))


def command(args, engine, seed):
    name = f"{engine}{seed}"
    if engine == "libreyolo":
        return [sys.executable, "-c", LIBREYOLO, LIBREYOLO_CLASS[args.family], args.data, args.out, name, str(seed), args.size, str(args.epochs), str(args.batch),
                str(args.imgsz), args.dtype, str(args.workers), str(len(classes(args.data))), "1" if args.graph else "0", args.device]
    return [args.bin, os.path.join(ROOT, f"manifests/{args.family}{args.size}.toml"), f"data={args.data}", f"epochs={args.epochs}",
            f"batch={args.batch}", f"imgsz={args.imgsz}", f"seed={seed}", f"workers={args.workers}", f"project={args.out}",
            f"name={name}", "exist_ok=true", f"precision.dtype={'fp16' if args.dtype == 'f16' else 'bf16'}",
            f"precision.amp={'false' if args.dtype == 'f32' else 'true'}", f"device={'cpu' if args.device == 'cpu' else '0'}"]


def epochs_of(run_dir):
    """[(epoch from 1, top1, top5, loss)] of a run: our results.csv or LibreYOLO's metrics.jsonl."""
    csv_path, jsonl = os.path.join(run_dir, "results.csv"), os.path.join(run_dir, "metrics.jsonl")
    rows = []
    if os.path.exists(csv_path):
        import csv
        for r in csv.DictReader(open(csv_path)):
            rows.append((int(r["epoch"]) + 1, float(r["metrics/accuracy_top1"] or "nan"), float(r["metrics/accuracy_top5"] or "nan"),
                         float(r["train/ce_loss"])))
    elif os.path.exists(jsonl):
        for line in open(jsonl):
            r = json.loads(line)
            r.update(r.pop("val_metrics", None) or {})
            rows.append((int(r["epoch"]), float(r.get("metrics/accuracy_top1", "nan")), float(r.get("metrics/accuracy_top5", "nan")),
                         float(r.get("train/ce_loss", r.get("train/loss", "nan")))))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--family", default="resnet", choices=sorted(LIBREYOLO_CLASS))
    ap.add_argument("--size", default="18")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--imgsz", type=int, default=224)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--engines", default="ours,libreyolo")
    ap.add_argument("--graph", action="store_true", help="LibreYOLO with cuda_graph=True")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    args.bin, args.data, args.out = (os.path.abspath(p) for p in (args.bin, args.data, args.out))
    os.makedirs(args.out, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    engines = args.engines.split(",")
    procs, t0 = {}, time.time()
    for engine in engines:
        for seed in seeds:
            log = open(os.path.join(args.out, f"{engine}{seed}.log"), "w")
            # Each of our concurrent runs its own kernel cache: cubecl's cache file takes one writer.
            env = dict(os.environ, LIBREYOLO_KERNEL_CACHE=os.path.join(args.out, f"kernels{seed}")) if engine == "ours" else None
            procs[(engine, seed)] = (subprocess.Popen(command(args, engine, seed), stdout=log, stderr=subprocess.STDOUT, env=env), time.time())
    runs = []
    for (engine, seed), (p, started) in procs.items():
        rc = p.wait()
        rows = epochs_of(os.path.join(args.out, f"{engine}{seed}"))
        runs.append({"engine": engine, "seed": seed, "exit": rc, "wall_s": round(time.time() - started, 1), "epochs": rows,
                     "final_top1": rows[-1][1] if rows else None, "best_top1": max((r[1] for r in rows), default=None),
                     "final_top5": rows[-1][2] if rows else None})
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "epochs"}), flush=True)
    summary = {}
    for engine in engines:
        mine = [r for r in runs if r["engine"] == engine and r["final_top1"] is not None]
        if mine:
            summary[engine] = {"mean_final_top1": round(statistics.mean(r["final_top1"] for r in mine), 4),
                               "mean_best_top1": round(statistics.mean(r["best_top1"] for r in mine), 4),
                               "final_top1": [r["final_top1"] for r in mine]}
    print("\n| engine | seeds | final top-1 each | mean final top-1 | mean best top-1 |\n|---|---|---|---:|---:|")
    for engine, s in summary.items():
        print(f"| {engine} | {args.seeds} | {', '.join(f'{v:.4f}' for v in s['final_top1'])} | {s['mean_final_top1']:.4f} | {s['mean_best_top1']:.4f} |")
    if "ours" in summary and "libreyolo" in summary:
        d = summary["ours"]["mean_final_top1"] - summary["libreyolo"]["mean_final_top1"]
        print(f"\nours - LibreYOLO, mean final top-1: {d:+.4f}")
    print("\nper epoch (top-1), " + ", ".join(f"{r['engine']}{r['seed']}" for r in runs))
    for i in range(max(len(r["epochs"]) for r in runs)):
        print(f"  {i + 1:3d}: " + "  ".join(f"{r['epochs'][i][1]:.3f}" if i < len(r["epochs"]) else "  -  " for r in runs))
    with open(os.path.join(args.out, "classify_compare.json"), "w") as f:
        json.dump({"settings": vars(args), "classes": len(classes(args.data)), "wall_s": round(time.time() - t0, 1), "runs": runs,
                   "summary": summary}, f, indent=1)
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
