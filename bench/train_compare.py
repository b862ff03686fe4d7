#!/usr/bin/env python3
"""Issue #7's acceptance run: YOLOv9-t trained from scratch by LibreYOLO 1.6 and by
libreyolo-run with the same schedule, on the same machine, in the same run; prints the mAP of
both at every validation and writes a JSON under OUT.

    python3 bench/train_compare.py BIN DATA_YAML OUT [--epochs 100] [--batch 16] [--imgsz 640]
        [--dtype bf16] [--workers 8] [--seed 0] [--limit 540] [--device cuda] [--sequential]
        [-- extra key=value settings for libreyolo-run]

Both engines keep their defaults for everything the issue does not name (LibreYOLO 1.6's YOLOv9
schedule: SGD, warm-up 3 epochs, linear schedule, no_aug_epochs 15, EMA, validation every 10
epochs and after the last). Both run CUDA graphs (LibreYOLO `cuda_graph=True`, ours the whole
step captured): graphs change speed, not arithmetic. By default the two trainings run at the
same time on the one GPU, so both fit one remote run; their wall times are then shared-GPU
times, not step times (bench/compare.py measures those). `--limit` stops both, and a failing
engine stops the other; what they validated until then is still reported. Afterwards our `val`
scores both engines' best weights in f32 and in the compute dtypes (`cross_val` in the JSON), so
a gap in mAP can be told apart between training and validation.

DATA_YAML must hold an absolute `path:`. LibreYOLO comes from the wheels prepared beforehand
(docs/gpu.md); nothing is downloaded.
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from compare import precision_args  # noqa: E402 (the manifest's precision of a --dtype)

LIBREYOLO_TRAIN = r"""
import json, sys, time, torch
from libreyolo import LibreYOLO9
args = json.loads(sys.argv[1])
torch.manual_seed(args["seed"])
model = LibreYOLO9(None, size="t", nb_classes=80, device=args["device"])
t0 = time.time()
result = model.train(data=args["data"], epochs=args["epochs"], batch=args["batch"], imgsz=args["imgsz"],
                     device=args["device"], workers=args["workers"], seed=args["seed"], project=args["project"], name="libreyolo",
                     exist_ok=True, amp=args["amp"], amp_dtype=args["amp_dtype"], cuda_graph=args["graph"], cache="ram")
print("LIBREYOLO_RESULT " + json.dumps({"wall_s": time.time() - t0, "result": result}, default=str), flush=True)
"""


def libreyolo_command(args, out):
    amp = args.dtype != "f32" and args.device != "cpu"
    settings = dict(data=args.data, epochs=args.epochs, batch=args.batch, imgsz=args.imgsz, device=args.device,
                    workers=args.workers, seed=args.seed, project=out, amp=amp,
                    amp_dtype={"bf16": "bfloat16", "f16": "float16"}.get(args.dtype, "float16"),
                    graph=args.device != "cpu")
    return [sys.executable, "-c", LIBREYOLO_TRAIN, json.dumps(settings)]


def ours_command(args, out):
    device = "cpu" if args.device == "cpu" else "0"
    cmd = [args.bin, "train", os.path.join(ROOT, "manifests/yolo9t.toml"), f"data={args.data}", f"device={device}",
           f"batch={args.batch}", f"imgsz={args.imgsz}", f"epochs={args.epochs}", f"workers={args.workers}",
           "cache=ram", f"seed={args.seed}", f"project={out}", "name=ours", "exist_ok=true"] + precision_args(args.dtype)
    if args.device != "cpu":
        cmd += ["cuda_graph=true", "stage.loss.capture=true", "stage.optimizer.capture=true", "stage.ema.capture=true"]
    return cmd + args.extra


def validations(results_csv, first_epoch):
    """(epoch counted from 1, mAP50-95, mAP50) of every validated epoch of a results.csv (either
    engine's; LibreYOLO numbers epochs from 1, libreyolo-run from 0, as `first_epoch` says)."""
    if not os.path.exists(results_csv):
        return []
    rows = []
    with open(results_csv) as f:
        for row in csv.DictReader(f):
            row = {k.strip(): (v or "").strip() for k, v in row.items() if k}
            m5095 = next((row[k] for k in row if k.endswith("mAP50-95") and "(B)" not in k), "")
            m50 = next((row[k] for k in row if k.endswith("mAP50") and "(B)" not in k), "")
            try:
                rows.append((int(float(row.get("epoch", "nan"))) + 1 - first_epoch, float(m5095), float(m50) if m50 else None))
            except ValueError:
                continue  # an epoch without validation
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bin")
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--seed", type=int, default=0, help="both engines' seed (initialisation, augmentation)")
    p.add_argument("--limit", type=int, default=540, help="seconds before both trainings are stopped")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--sequential", action="store_true", help="run LibreYOLO first, then ours")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[:len(argv) - len(extra) - (1 if extra or "--" in argv else 0)])
    args.extra = extra
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    runs = {"LibreYOLO 1.6": (libreyolo_command(args, out), os.path.join(out, "libreyolo")),
            "libreyolo-run": (ours_command(args, out), os.path.join(out, "ours"))}
    deadline = time.time() + args.limit
    procs, walls = {}, {}
    for engine, (cmd, _) in runs.items():
        print(f"[train_compare] {engine}: {' '.join(cmd[:2] if engine.startswith('Libre') else cmd)}", flush=True)
        log = open(os.path.join(out, engine.split()[0].lower() + ".log"), "w")
        procs[engine] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.time())
        if args.sequential:
            try:
                procs[engine][0].wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                procs[engine][0].terminate()
            walls[engine] = time.time() - procs[engine][1]
    # Concurrent runs: poll both; a failing engine stops the other (the comparison is void and
    # device time is scarce), the limit stops both.
    def stop(engine, why):
        print(f"[train_compare] {engine} stopped: {why}", flush=True)
        proc = procs[engine][0]
        proc.terminate()  # SIGTERM: ours saves `last` like Ctrl-C
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()

    while any(e not in walls for e in procs):
        for engine, (proc, start) in procs.items():
            if engine not in walls and proc.poll() is not None:
                walls[engine] = time.time() - start
                if proc.returncode != 0:
                    for other in procs:
                        if other not in walls:
                            stop(other, f"{engine} failed with exit code {proc.returncode}")
                            walls[other] = time.time() - procs[other][1]
        if time.time() > deadline:
            for engine in procs:
                if engine not in walls:
                    stop(engine, f"the {args.limit} s limit")
                    walls[engine] = time.time() - procs[engine][1]
        time.sleep(1)

    report = {"date": datetime.date.today().isoformat(), "issue": 7, "epochs": args.epochs, "batch": args.batch,
              "imgsz": args.imgsz, "dtype": args.dtype, "seed": args.seed, "concurrent": not args.sequential, "engines": {}}
    print(f"\nYOLOv9-t from scratch, {args.epochs} epochs, batch {args.batch}, {args.imgsz} px, {args.dtype}, "
          f"{'one after the other' if args.sequential else 'both at once on one GPU'}\n")
    print("| engine | exit | wall s | validated epochs | final mAP50-95 | final mAP50 | best mAP50-95 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for engine, (_, run_dir) in runs.items():
        vals = validations(os.path.join(run_dir, "results.csv"), 1 if engine.startswith("Libre") else 0)
        rc = procs[engine][0].returncode
        final = vals[-1] if vals else (None, None, None)
        best = max((v[1] for v in vals), default=None)
        report["engines"][engine] = {"exit": rc, "wall_s": round(walls[engine], 1), "run_dir": run_dir,
                                     "validations": [{"epoch": e, "mAP50-95": a, "mAP50": b} for e, a, b in vals]}
        fmt = lambda x: "" if x is None else f"{x:.4f}"
        print(f"| {engine} | {rc} | {walls[engine]:.0f} | {len(vals)} | {fmt(final[1])} | {fmt(final[2])} | {fmt(best)} |")
    print("\nper validation (epoch from 1: LibreYOLO / ours mAP50-95)")
    lib = {e: a for e, a, _ in report_rows(report, "LibreYOLO 1.6")}
    ours = {e: a for e, a, _ in report_rows(report, "libreyolo-run")}
    for e in sorted(set(lib) | set(ours)):
        print(f"  epoch {e}: {lib.get(e, float('nan')):.4f} / {ours.get(e, float('nan')):.4f}")
    report["cross_val"] = cross_validate(args, out, runs)
    path = os.path.join(out, f"train-compare-{report['date']}-seed{args.seed}.json")
    json.dump(report, open(path, "w"), indent=1)
    print(f"\nwrote {path}")


def cross_validate(args, out, runs):
    """Both engines' best weights scored by our `val` in f32 and in the training's compute dtype:
    tells a difference of training from one of validation (LibreYOLO validates in fp16 on CUDA,
    `half = amp and cuda`; our in-training validation uses the compute dtype)."""
    weights = {"LibreYOLO 1.6": os.path.join(runs["LibreYOLO 1.6"][1], "weights", "best.pt"),
               "libreyolo-run": os.path.join(runs["libreyolo-run"][1], "weights", "best.safetensors")}
    device = "cpu" if args.device == "cpu" else "0"
    dtypes = ["f32"] + ([args.dtype] if args.dtype != "f32" else []) + (["f16"] if args.device != "cpu" and args.dtype != "f16" else [])
    rows = []
    print("\nbest weights scored by libreyolo-run's val (mAP50-95 / mAP50)")
    for engine, path in weights.items():
        if not os.path.exists(path):
            continue
        for dtype in dtypes:
            json_path = os.path.join(out, f"val-{engine.split()[0].lower()}-{dtype}.json")
            precision = precision_args(dtype)
            cmd = [args.bin, "val", os.path.join(ROOT, "manifests/yolo9t.toml"), f"data={args.data}", f"device={device}",
                   f"batch={args.batch}", f"imgsz={args.imgsz}", f"workers={args.workers}", "cache=ram", f"weights={path}",
                   f"json={json_path}"] + precision
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"  {engine} {dtype}: val failed: {done.stderr.strip()[-300:]}")
                continue
            m = json.load(open(json_path))["metrics"]
            rows.append({"weights": engine, "dtype": dtype, "mAP50-95": m["metrics/mAP50-95"], "mAP50": m["metrics/mAP50"]})
            print(f"  {engine} weights, {dtype}: {m['metrics/mAP50-95']:.4f} / {m['metrics/mAP50']:.4f}")
    return rows


def report_rows(report, engine):
    return [(v["epoch"], v["mAP50-95"], v["mAP50"]) for v in report["engines"][engine]["validations"]]


if __name__ == "__main__":
    main()
