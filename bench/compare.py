#!/usr/bin/env python3
"""Side-by-side benchmark: LibreYOLO 1.6 (PyTorch) and libreyolo-run, same machine, same run.

Both train YOLOv9 (sizes t, s) from scratch on the same dataset with the same batch, image
size, precision and loader settings. Each configuration is run eager and with CUDA graphs
(LibreYOLO `cuda_graph=True`; libreyolo-run the same two graphs, and the whole step captured).

* Default: each engine's own profiler over the same window (`warmup` steps discarded, then
  `steps` measured, the first half unsynchronised; the real loader, so the dataloader's share
  shows).
* `--isolated`: the GPU step alone, one real batch replayed (LibreYOLO through
  bench/libreyolo_isolated.py, ours with `data.fixed_batch=true`): the fastest and the median of
  `steps` steps after `warmup`, as the step-time figures of LibreYOLO's documentation are taken.
* `--throughput E`: images/s over whole epochs with the real loader and augmentation.
* `--cold-cache`: our warm-up once more with an empty kernel cache (cold), next to the warm one.

Every row has the peak GPU memory and the warm-up (seconds before the measured window) as their
own figures. Prints the tables with the ratio ours / LibreYOLO, writes the JSON to OUT and
bench/results/, and with --docs appends the tables to docs/performance.md.

    python3 bench/compare.py BIN DATA_YAML OUT [--device cuda|cpu] [--sizes t,s] [--batch 8,16]
        [--dtype bf16,f16] [--imgsz 640] [--warmup 10] [--steps 24] [--workers 8] [--isolated]
        [--throughput E] [--cold-cache] [--docs]

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
sys.path.insert(0, HERE)
import libreyolo_isolated as iso  # noqa: E402 (LibreYOLO's side; imports LibreYOLO only when called)


AMP_DTYPE = {"bf16": "bfloat16", "f16": "float16"}


def libreyolo_profiled(args, size, batch, dtype, graph, out):
    """LibreYOLO's own profiled training (its `profile run`, through the Python API)."""
    name = f"libreyolo_{size}_b{batch}_{dtype}_{'graph' if graph else 'eager'}"
    model = iso.libreyolo_model(size, args.device)
    t0 = time.time()
    iso.libreyolo_train(model, args.data, out, name, batch, dtype, args.imgsz, args.device, args.workers, graph,
                        epochs=args.warmup + args.steps + 5, profile=True, profile_warmup=args.warmup, profile_steps=args.steps,
                        profile_then_stop=True, profile_open=False)
    wall = time.time() - t0
    s = json.load(open(os.path.join(out, name, "profile_summary.json")))
    a = s.get("analysis", {})
    return {"step_ms": s["real"]["step_ms"], "img_per_s": s["real"]["img_per_s"], "dataload_ms": s["real"]["dataload_ms"],
            "gpu_util": a.get("gpu_util"), "bound": s.get("bound"), "peak_memory_mb": a.get("peak_vram_mb"), "wall_s": wall}


def libreyolo_isolated(args, size, batch, dtype, graph, out):
    """LibreYOLO's step on one real batch replayed (bench/libreyolo_isolated.py)."""
    r = iso.measure(args.data, out, size, batch, dtype, graph, args.imgsz, args.warmup, args.steps, args.device, args.workers)
    return {"step_ms": r["step_ms_median"], "step_ms_min": r["step_ms_min"], "step_ms_median": r["step_ms_median"],
            "img_per_s": r["img_per_s"], "dataload_ms": 0.0, "peak_memory_mb": r["peak_memory_mb"], "warmup_s": r["warmup_s"],
            "first_step_s": r["first_step_s"]}


# libreyolo-run's capture modes: eager; LibreYOLO's contract (the shipped marks: forward and
# backward as two graphs, the loss eager), which is what `cuda_graph=True` does there; the whole
# step as one graph.
OUR_MODES = {
    "eager": [],
    "two graphs": ["cuda_graph=true"],
    "whole-step graph": ["cuda_graph=true", "stage.loss.capture=true", "stage.optimizer.capture=true", "stage.ema.capture=true"],
}


def device_arg(args):
    return "cpu" if args.device == "cpu" else args.device.replace("cuda:", "").replace("cuda", "0")


def precision_args(dtype):
    return [f"precision.dtype={'fp16' if dtype == 'f16' else 'bf16'}", f"precision.amp={'false' if dtype == 'f32' else 'true'}"]


def our_command(args, size, batch, dtype, out, name, command=()):
    """libreyolo-run (`command`: a subcommand such as `profile run`) on the size's manifest with
    the settings every harness run shares: the data, batch, size, device, workers, RAM cache,
    seed 0 and `dtype`'s precision, writing to OUT/NAME."""
    return [args.bin, *command, os.path.join(ROOT, f"manifests/yolo9{size}.toml"), f"data={args.data}", f"batch={batch}",
            f"imgsz={args.imgsz}", f"device={device_arg(args)}", f"workers={args.workers}", "cache=ram", f"project={out}",
            f"name={name}", "exist_ok=true", "seed=0"] + precision_args(dtype)


def run_ours(cmd, env=None):
    """Runs libreyolo-run; its stderr, or an error with its tail."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"libreyolo-run failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return r.stderr


def ours(args, size, batch, dtype, mode, out, kernel_cache=None):
    """libreyolo-run's `profile run` with the same settings, in capture mode `mode` (OUR_MODES).
    Isolated: one batch replayed, and twice the steps so that the profiler's unsynchronised half
    holds `steps` of them (the synced half times each phase)."""
    name = f"ours_{size}_b{batch}_{dtype}_{mode.replace(' ', '-')}{'_cold' if kernel_cache else ''}"
    steps = 2 * args.steps if args.isolated else args.steps
    cmd = our_command(args, size, batch, dtype, out, name, ("profile", "run"))
    cmd += [f"profile.warmup={args.warmup}", f"profile.steps={steps}"] + OUR_MODES[mode]
    if args.isolated:
        cmd += ["data.fixed_batch=true"]
    # A cold run: an empty kernel cache, and an empty driver JIT cache with it.
    env = dict(os.environ, **({"LIBREYOLO_KERNEL_CACHE": kernel_cache, "CUDA_CACHE_PATH": os.path.join(kernel_cache, "nv")} if kernel_cache else {}))
    t0 = time.time()
    stderr = run_ours(cmd, env)
    wall = time.time() - t0
    p = json.load(open(os.path.join(out, name, "profile.json")))
    real, window = p["real"], p.get("window", {})
    return {"step_ms": real["step_ms_median"] if args.isolated else real["step_ms"], "img_per_s": real["img_per_s"],
            "dataload_ms": real["dataload_ms"], "step_ms_min": real.get("step_ms_min"), "step_ms_median": real.get("step_ms_median"),
            "gpu_util": p["gpu_util"] if p.get("kernel_timing") else None, "bound": p["bound"],
            "peak_memory_mb": p.get("peak_memory_mb"), "warmup_s": window.get("warmup_s"), "first_step_s": window.get("first_step_s"),
            "wall_s": wall, "captured": p["meta"]["capture"],
            "fell_back": "falling back to eager" in stderr or "ignored" in stderr}


def train_seconds(args, engine, size, batch, dtype, epochs, out, graph=False):
    """Wall time of a training of `epochs` epochs (no profiler, no validation) by `engine`;
    `graph`: LibreYOLO's `cuda_graph=True`, our whole step captured."""
    t0 = time.time()
    if engine == "LibreYOLO 1.6":
        model = iso.libreyolo_model(size, args.device)
        iso.libreyolo_train(model, args.data, out, f"libreyolo_tp_{size}_b{batch}_{dtype}_e{epochs}{'_graph' if graph else ''}", batch,
                            dtype, args.imgsz, args.device, args.workers, graph, epochs=epochs)
    else:
        name = f"ours_tp_{size}_b{batch}_{dtype}_e{epochs}{'_graph' if graph else ''}"
        cmd = our_command(args, size, batch, dtype, out, name) + [f"epochs={epochs}", "val=false", "no_aug_epochs=0"]
        run_ours(cmd + (OUR_MODES["whole-step graph"] if graph else []))
    return time.time() - t0


def throughput(args, size, batch, dtype, out, images):
    """Images/s over whole epochs, start-up and warm-up excluded: the same training for 1 and for
    1 + E epochs, the difference divided by E epochs (both engines measured the same way), eager
    and, on a GPU, with graphs (LibreYOLO's `cuda_graph=True`, our whole step)."""
    rows = []
    for graph in ([False] if args.device == "cpu" else [False, True]):
        for engine in ("LibreYOLO 1.6", "libreyolo-run"):
            one = train_seconds(args, engine, size, batch, dtype, 1, out, graph)
            more = train_seconds(args, engine, size, batch, dtype, 1 + args.throughput, out, graph)
            per_epoch = (more - one) / args.throughput
            rows.append({"engine": engine, "size": size, "batch": batch, "dtype": dtype, "mode": "graphs" if graph else "eager",
                         "epoch_s": per_epoch, "img_per_s": images / per_epoch, "first_epoch_s": one})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def fmt(v, spec=".1f"):
    return "–" if v is None else format(v, spec)


def table(rows, args):
    """Step times side by side; the ratio is ours / LibreYOLO's in the same graph mode."""
    step = "median step ms" if args.isolated else "step ms"
    lines = [f"| engine | size | dtype | batch | mode | {step} | fastest ms | img/s | dataload share | peak MB | warm-up s | verdict | ours / LibreYOLO |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    ref = {(r["size"], r["dtype"], r["batch"], r["mode"] == "eager"): r for r in rows if r["engine"].startswith("LibreYOLO")}
    for r in rows:
        base = ref.get((r["size"], r["dtype"], r["batch"], r["mode"] == "eager"))
        ratio = f"{r['step_ms'] / base['step_ms']:.2f}x" if r["engine"] == "libreyolo-run" and base else ""
        share = f"{100 * r['dataload_ms'] / r['step_ms']:.0f}%" if r.get("dataload_ms") is not None and r["step_ms"] else "–"
        mode = r["mode"] + (" (fell back to eager)" if r.get("fell_back") else "")
        lines.append(f"| {r['engine']} | {r['size']} | {r['dtype']} | {r['batch']} | {mode} | {r['step_ms']:.1f} | {fmt(r.get('step_ms_min'))} | "
                     f"{r['img_per_s']:.1f} | {share} | {fmt(r.get('peak_memory_mb'), '.0f')} | {fmt(r.get('warmup_s'))} | {r.get('bound') or '–'} | {ratio} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", default="t", help="YOLOv9 sizes, comma-separated (t,s)")
    ap.add_argument("--batch", default="8,16")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--dtype", default="bf16", help="comma-separated: bf16, f16, f32")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--modes", default="eager,two graphs,whole-step graph", help="our capture modes (OUR_MODES), comma-separated")
    ap.add_argument("--docs", action="store_true", help="append the tables to docs/performance.md")
    ap.add_argument("--throughput", type=int, default=0, metavar="E",
                    help="also measure images/s over E whole epochs (1 and 1+E epochs trained, the difference used)")
    ap.add_argument("--isolated", action="store_true", help="the step alone: one real batch replayed, fastest and median of STEPS")
    ap.add_argument("--cold-cache", action="store_true", help="also our warm-up with an empty kernel cache (the first mode of each row)")
    args = ap.parse_args()
    dtypes = args.dtype.split(",")
    for d in dtypes:
        if d not in ("bf16", "f16", "f32"):
            ap.error(f"--dtype {d}: expected bf16, f16 or f32")
    modes = args.modes.split(",")
    for m in modes:
        if m not in OUR_MODES:
            ap.error(f"--modes {m}: expected one of {', '.join(OUR_MODES)}")
    os.makedirs(args.out, exist_ok=True)
    graphs = [False] if args.device == "cpu" else [False, True]
    lib = libreyolo_isolated if args.isolated else libreyolo_profiled
    rows, cold = [], []
    for size in args.sizes.split(","):
        for dtype in dtypes:
            for batch in [int(b) for b in args.batch.split(",")]:
                key = {"size": size, "dtype": dtype, "batch": batch}
                for graph in graphs:
                    print(f"[compare] LibreYOLO {size} {dtype} b{batch} {'cuda_graph' if graph else 'eager'} ...", flush=True)
                    rows.append({"engine": "LibreYOLO 1.6", **key, "mode": "cuda_graph" if graph else "eager",
                                 **lib(args, size, batch, dtype, graph, args.out)})
                    print(json.dumps(rows[-1]), flush=True)
                    for mode in [m for m in modes if (m != "eager") == graph]:
                        print(f"[compare] libreyolo-run {size} {dtype} b{batch} {mode} ...", flush=True)
                        rows.append({"engine": "libreyolo-run", **key, "mode": mode, **ours(args, size, batch, dtype, mode, args.out)})
                        print(json.dumps(rows[-1]), flush=True)
                if args.cold_cache:
                    import tempfile

                    with tempfile.TemporaryDirectory(prefix="kernels-cold-") as empty:
                        print(f"[compare] libreyolo-run {size} {dtype} b{batch} {modes[0]}, cold kernel cache ...", flush=True)
                        cold.append({"engine": "libreyolo-run", **key, "mode": modes[0], "cache": "cold",
                                     **ours(args, size, batch, dtype, modes[0], args.out, kernel_cache=empty)})
                        print(json.dumps(cold[-1]), flush=True)
    tp_rows = []
    if args.throughput > 0:
        import yaml
        cfg = yaml.safe_load(open(args.data))
        train_dir = os.path.join(cfg["path"], cfg["train"])
        images = len([f for f in os.listdir(train_dir) if f.lower().endswith((".jpg", ".jpeg", ".png", ".bmp"))])
        for size in args.sizes.split(","):
            for dtype in dtypes:
                for batch in [int(b) for b in args.batch.split(",")]:
                    tp_rows += throughput(args, size, batch, dtype, args.out, images)
    import torch
    import libreyolo
    version = subprocess.run([args.bin, "--version"], capture_output=True, text=True).stdout.strip()
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {"host": platform.node(), "cpu_count": os.cpu_count(), "device": args.device,
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
        "software": {"libreyolo": libreyolo.__version__, "torch": torch.__version__, "libreyolo-run": version},
        "settings": {k: getattr(args, k) for k in ("sizes", "batch", "imgsz", "dtype", "warmup", "steps", "workers", "isolated", "modes")},
        "units": {"step_ms": "ms", "step_ms_min": "ms", "step_ms_median": "ms", "img_per_s": "images/s", "dataload_ms": "ms",
                  "peak_memory_mb": "MB", "warmup_s": "s", "first_step_s": "s", "wall_s": "s", "epoch_s": "s", "first_epoch_s": "s"},
        "rows": rows,
        "cold_cache": cold,
        "throughput": tp_rows,
    }
    name = f"{result['date']}-{args.device.replace(':', '')}-compare{'-isolated' if args.isolated else ''}.json"
    paths = [os.path.join(args.out, name), os.path.join(ROOT, "bench", "results", name)]
    for path in paths:
        json.dump(result, open(path, "w"), indent=1)
    text = table(rows, args)
    if cold:
        text += "\n\n| ours, warm-up | size | dtype | batch | mode | cold cache s (first step) | warm cache s (first step) |\n|---|---|---|---:|---|---:|---:|\n"
        for c in cold:
            warm = next((r for r in rows if r["engine"] == "libreyolo-run" and all(r[k] == c[k] for k in ("size", "dtype", "batch", "mode"))), {})
            text += (f"| libreyolo-run | {c['size']} | {c['dtype']} | {c['batch']} | {c['mode']} | {fmt(c.get('warmup_s'))} "
                     f"({fmt(c.get('first_step_s'))}) | {fmt(warm.get('warmup_s'))} ({fmt(warm.get('first_step_s'))}) |\n")
    if tp_rows:
        text += "\n\n| engine | size | dtype | batch | mode | s/epoch | images/s (whole epochs) | 1-epoch run s (start-up included) |\n|---|---|---|---:|---|---:|---:|---:|\n"
        text += "\n".join(f"| {r['engine']} | {r['size']} | {r['dtype']} | {r['batch']} | {r['mode']} | {r['epoch_s']:.1f} | {r['img_per_s']:.1f} | {r['first_epoch_s']:.1f} |"
                           for r in tp_rows)
    print("\n" + text + f"\n\nwrote {' and '.join(paths)}")
    if args.docs:
        with open(os.path.join(ROOT, "docs/performance.md"), "a") as f:
            f.write(f"\n## {result['date']}: side by side on {args.device} (bench/compare.py{' --isolated' if args.isolated else ''})\n\n"
                    f"YOLOv9 {args.sizes} from scratch, {args.imgsz} px, {args.dtype}, workers {args.workers}, RAM cache, "
                    f"{args.warmup} warm-up + {args.steps} measured steps; LibreYOLO {libreyolo.__version__} (torch {torch.__version__}) vs "
                    f"{version}. JSON: bench/results/{name}.\n\n{text}\n")


if __name__ == "__main__":
    sys.exit(main())
