#!/usr/bin/env python3
"""YOLOv9-t (LibreYOLO 1.6, random init) forward and forward+backward time in PyTorch eager.

    python3 bench/torch_network.py [--batch 16] [--imgsz 640] [--dtypes f32,bf16] [--json OUT]

The PyTorch side of `libreyolo-run bench network` (same batch, size, dtype; bf16 as autocast,
which is how LibreYOLO trains). Needs torch and the libreyolo package.
"""
import argparse
import json

import torch

from torch_ops import network_rows

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--imgsz", type=int, default=640)
ap.add_argument("--dtypes", default="f32,bf16")
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--json")
a = ap.parse_args()
rows = []
for dn in a.dtypes.split(","):
    rows += network_rows(a.batch, a.imgsz, dn, a.device, a.warmup, a.iters)
if not rows:
    raise SystemExit("libreyolo is not importable: nothing measured")
for r in rows:
    print(f"{r['category']:<28} {r['dtype']:<5} {r['torch_ms']:9.3f} ms  (first run {r['first_s']:.2f} s)")
if a.json:
    json.dump({"torch": torch.__version__, "device": a.device, "batch": a.batch, "imgsz": a.imgsz, "rows": rows}, open(a.json, "w"), indent=1)
