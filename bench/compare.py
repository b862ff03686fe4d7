#!/usr/bin/env python3
"""Side-by-side benchmark: LibreYOLO 1.6 (PyTorch) and libreyolo-run, same machine, same run.

Both train YOLOv9-t from scratch on the same dataset with the same batch, image size,
precision and loader settings, through their own profilers (the same window: `warmup` steps
discarded, then `steps` measured, the first half unsynchronised). Each configuration is run
eager and with CUDA graphs (LibreYOLO `cuda_graph=True`; libreyolo-run the same two graphs, and the whole step
captured). Prints a table of ratios, writes a JSON under OUT and, with --docs, appends a dated
table to docs/performance.md.

    python3 bench/compare.py BIN DATA_YAML OUT [--device cuda|cpu] [--batch 8,16] [--imgsz 640]
        [--dtype bf16] [--warmup 5] [--steps 20] [--workers 8] [--docs]

DATA_YAML must hold an absolute `path:`. LibreYOLO comes from the wheels prepared beforehand
(docs/performance.md); nothing is downloaded. CUDA graphs are skipped on the CPU.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def libreyolo_run(args, batch, graph, out):
    """LibreYOLO's own profiled training (its `profile run`, through the Python API)."""
    import torch
    from libreyolo import LibreYOLO9

    torch.manual_seed(0)
    name = f"libreyolo_b{batch}_{args.dtype}_{'graph' if graph else 'eager'}"
    model = LibreYOLO9(None, size="t", nb_classes=80, device=args.device)
    amp = args.dtype != "f32" and args.device != "cpu"
    t0 = time.time()
    model.train(data=args.data, epochs=args.warmup + args.steps + 5, batch=batch, imgsz=args.imgsz, device=args.device,
                workers=args.workers, seed=0, project=out, name=name, exist_ok=True, val=False, no_aug_epochs=0,
                amp=amp, amp_dtype={"bf16": "bfloat16", "f16": "float16"}.get(args.dtype, "float16"),
                profile=True, profile_warmup=args.warmup, profile_steps=args.steps, profile_then_stop=True,
                profile_open=False, cuda_graph=graph, cache="ram")
    wall = time.time() - t0
    s = json.load(open(os.path.join(out, name, "profile_summary.json")))
    a = s.get("analysis", {})
    return {"engine": "LibreYOLO 1.6", "mode": "cuda_graph" if graph else "eager", "batch": batch,
            "step_ms": s["real"]["step_ms"], "img_per_s": s["real"]["img_per_s"], "dataload_ms": s["real"]["dataload_ms"],
            "gpu_util": a.get("gpu_util"), "bound": s.get("bound"), "peak_memory_mb": a.get("peak_vram_mb"), "wall_s": wall}


# libreyolo-run's capture modes: eager; LibreYOLO's contract (the shipped marks: forward and
# backward as two graphs, the loss eager), which is what `cuda_graph=True` does there; the whole
# step as one graph.
OUR_MODES = {
    "eager": [],
    "two graphs": ["cuda_graph=true"],
    "whole-step graph": ["cuda_graph=true", "stage.loss.capture=true", "stage.optimizer.capture=true", "stage.ema.capture=true"],
}


def ours(args, batch, mode, out):
    """libreyolo-run's `profile run` with the same settings, in capture mode `mode` (OUR_MODES)."""
    name = f"ours_b{batch}_{args.dtype}_{mode.replace(' ', '-')}"
    device = "cpu" if args.device == "cpu" else args.device.replace("cuda:", "").replace("cuda", "0")
    cmd = [args.bin, "profile", "run", os.path.join(ROOT, "manifests/yolo9t.toml"), f"data={args.data}", f"batch={batch}",
           f"imgsz={args.imgsz}", f"device={device}", f"workers={args.workers}", "cache=ram", f"profile.warmup={args.warmup}",
           f"profile.steps={args.steps}", f"project={out}", f"name={name}", "seed=0",
           f"precision.dtype={'fp16' if args.dtype == 'f16' else 'bf16'}",
           f"precision.amp={'false' if args.dtype == 'f32' else 'true'}"]
    cmd += OUR_MODES[mode]
    if args.isolated:
        cmd += ["data.fixed_batch=true"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(f"libreyolo-run failed ({r.returncode}):\n{r.stderr[-4000:]}")
    p = json.load(open(os.path.join(out, name, "profile.json")))
    return {"engine": "libreyolo-run", "mode": mode, "batch": batch,
            "step_ms": p["real"]["step_ms"], "img_per_s": p["real"]["img_per_s"], "dataload_ms": p["real"]["dataload_ms"],
            "step_ms_min": p["real"].get("step_ms_min"), "step_ms_median": p["real"].get("step_ms_median"),
            "gpu_util": p["gpu_util"] if p.get("kernel_timing") else None, "bound": p["bound"],
            "peak_memory_mb": p.get("peak_memory_mb"), "wall_s": wall, "captured": p["meta"]["capture"]}


def libreyolo_epochs(args, batch, epochs, out):
    """Wall time of a LibreYOLO training of `epochs` epochs (no profiler, no validation)."""
    import torch
    from libreyolo import LibreYOLO9

    torch.manual_seed(0)
    model = LibreYOLO9(None, size="t", nb_classes=80, device=args.device)
    amp = args.dtype != "f32" and args.device != "cpu"
    t0 = time.time()
    model.train(data=args.data, epochs=epochs, batch=batch, imgsz=args.imgsz, device=args.device, workers=args.workers,
                seed=0, project=out, name=f"libreyolo_tp_b{batch}_e{epochs}", exist_ok=True, val=False, no_aug_epochs=0,
                amp=amp, amp_dtype={"bf16": "bfloat16", "f16": "float16"}.get(args.dtype, "float16"), cache="ram")
    return time.time() - t0


def ours_epochs(args, batch, epochs, out):
    """Wall time of a libreyolo-run training of `epochs` epochs (no validation)."""
    device = "cpu" if args.device == "cpu" else args.device.replace("cuda:", "").replace("cuda", "0")
    cmd = [args.bin, os.path.join(ROOT, "manifests/yolo9t.toml"), f"data={args.data}", f"batch={batch}", f"imgsz={args.imgsz}",
           f"device={device}", f"workers={args.workers}", "cache=ram", f"epochs={epochs}", "val=false", "no_aug_epochs=0",
           f"project={out}", f"name=ours_tp_b{batch}_e{epochs}", "exist_ok=true", "seed=0",
           f"precision.dtype={'fp16' if args.dtype == 'f16' else 'bf16'}", f"precision.amp={'false' if args.dtype == 'f32' else 'true'}"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"libreyolo-run failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return time.time() - t0


def throughput(args, batch, out, images):
    """Images/s over whole epochs, start-up and warm-up excluded: the same training for 1 and for
    1 + E epochs, the difference divided by E epochs (both engines measured the same way)."""
    rows = []
    for engine, run in (("LibreYOLO 1.6", libreyolo_epochs), ("libreyolo-run", ours_epochs)):
        one = run(args, batch, 1, out)
        more = run(args, batch, 1 + args.throughput, out)
        per_epoch = (more - one) / args.throughput
        rows.append({"engine": engine, "batch": batch, "epoch_s": per_epoch, "img_per_s": images / per_epoch,
                     "first_epoch_s": one})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows, args):
    lines = [f"| engine | mode | batch | step ms | img/s | dataload ms | GPU util | verdict | ours / LibreYOLO step |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    ref = {(r["batch"], r["mode"] == "eager"): r for r in rows if r["engine"].startswith("LibreYOLO")}
    for r in rows:
        base = ref.get((r["batch"], r["mode"] == "eager"))
        ratio = f"{r['step_ms'] / base['step_ms']:.2f}x" if r["engine"] == "libreyolo-run" and base else ""
        util = f"{r['gpu_util'] * 100:.0f}%" if r.get("gpu_util") is not None else "–"
        lines.append(f"| {r['engine']} | {r['mode']} | {r['batch']} | {r['step_ms']:.1f} | {r['img_per_s']:.1f} | "
                     f"{r['dataload_ms']:.1f} | {util} | {r['bound']} | {ratio} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", default="8,16")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--docs", action="store_true", help="append the table to docs/performance.md")
    ap.add_argument("--throughput", type=int, default=0, metavar="E",
                    help="also measure images/s over E whole epochs (1 and 1+E epochs trained, the difference used)")
    ap.add_argument("--isolated", action="store_true",
                    help="libreyolo-run trains every step on one batch (data.fixed_batch=true): step time without the loader")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    graphs = [False] if args.device == "cpu" else [False, True]
    rows = []
    for batch in [int(b) for b in args.batch.split(",")]:
        for graph in graphs:
            print(f"[compare] LibreYOLO batch {batch} {'cuda_graph' if graph else 'eager'} ...", flush=True)
            rows.append(libreyolo_run(args, batch, graph, args.out))
            print(json.dumps(rows[-1]), flush=True)
            for mode in (["two graphs", "whole-step graph"] if graph else ["eager"]):
                print(f"[compare] libreyolo-run batch {batch} {mode} ...", flush=True)
                rows.append(ours(args, batch, mode, args.out))
                print(json.dumps(rows[-1]), flush=True)
    tp_rows = []
    if args.throughput > 0:
        import yaml
        cfg = yaml.safe_load(open(args.data))
        train_dir = os.path.join(cfg["path"], cfg["train"])
        images = len([f for f in os.listdir(train_dir) if f.lower().endswith((".jpg", ".jpeg", ".png", ".bmp"))])
        for batch in [int(b) for b in args.batch.split(",")]:
            tp_rows += throughput(args, batch, args.out, images)
    import torch
    import libreyolo
    version = subprocess.run([args.bin, "--version"], capture_output=True, text=True).stdout.strip()
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {"host": platform.node(), "cpu_count": os.cpu_count(), "device": args.device,
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
        "software": {"libreyolo": libreyolo.__version__, "torch": torch.__version__, "libreyolo-run": version},
        "settings": {k: getattr(args, k) for k in ("batch", "imgsz", "dtype", "warmup", "steps", "workers", "isolated")},
        "units": {"step_ms": "ms", "img_per_s": "images/s", "dataload_ms": "ms", "peak_memory_mb": "MB", "wall_s": "s",
                  "epoch_s": "s", "first_epoch_s": "s"},
        "rows": rows,
        "throughput": tp_rows,
    }
    path = os.path.join(args.out, f"compare-{result['date']}-{args.device}.json")
    json.dump(result, open(path, "w"), indent=1)
    text = table(rows, args)
    if tp_rows:
        text += "\n\n| engine | batch | s/epoch | images/s (whole epochs) | 1-epoch run s (start-up included) |\n|---|---:|---:|---:|---:|\n"
        text += "\n".join(f"| {r['engine']} | {r['batch']} | {r['epoch_s']:.1f} | {r['img_per_s']:.1f} | {r['first_epoch_s']:.1f} |" for r in tp_rows)
    print("\n" + text + f"\n\nwrote {path}")
    if args.docs:
        with open(os.path.join(ROOT, "docs/performance.md"), "a") as f:
            f.write(f"\n## {result['date']}: side by side on {args.device} (bench/compare.py)\n\n"
                    f"YOLOv9-t from scratch, {args.imgsz} px, {args.dtype}, workers {args.workers}, RAM cache, profiler window "
                    f"{args.warmup} + {args.steps} steps; LibreYOLO {libreyolo.__version__} (torch {torch.__version__}) vs "
                    f"{version}. JSON: {os.path.basename(path)}.\n\n{text}\n")


if __name__ == "__main__":
    sys.exit(main())
