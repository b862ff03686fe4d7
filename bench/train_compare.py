#!/usr/bin/env python3
"""Trained accuracy side by side: a network (`--family yolo9|yolox|rtdetr`, `--size t`; YOLOv9-t by
default) trained from scratch by LibreYOLO 1.6 and by libreyolo-run with the same schedule, on
the same machine, in the same run; prints the mAP of both at every validation and writes a JSON
under OUT.

    python3 bench/train_compare.py BIN DATA_YAML OUT [--epochs 100] [--batch 16] [--imgsz 640]
        [--dtype bf16] [--workers 8] [--seed 0] [--family yolo9|yolox|rtdetr] [--size t] [--no-aug-epochs N] [--eval-interval N]
        [--limit 540] [--device cuda] [--sequential]
        [--engines both|ours|libreyolo] [--init-from-libreyolo] [--no-cross-val]
        [-- extra key=value settings for libreyolo-run]

Both engines keep their family's defaults for everything not set here (LibreYOLO 1.6's YOLOv9
schedule: SGD, warm-up 3 epochs, linear schedule, no_aug_epochs 15, EMA, validation every 10
epochs and after the last; YOLOX's yoloxwarmcos, 5 warm-up epochs, MixUp). Both run CUDA graphs unless `--eager` (LibreYOLO `cuda_graph=True`, ours the whole
step captured): graphs change speed, not arithmetic. By default the two trainings run at the
same time on the one GPU, so both fit one remote run; their wall times are then shared-GPU
times, not step times (bench/compare.py measures those). `--limit` stops both, and a failing
engine stops the other; what they validated until then is still reported. Afterwards our `val`
scores both engines' best weights in f32 and in the compute dtypes, and LibreYOLO's `val` scores
them too (`cross_val` in the JSON), so a gap in mAP can be told apart between training and
validation. `--engines` trains one engine only (more seeds of one side in the same run);
`--init-from-libreyolo` starts ours from LibreYOLO's initial weights of the same seed (saved to
OUT/init-seedN.pt), so both engines start from the same network.

DATA_YAML must hold an absolute `path:`. LibreYOLO comes from the wheels prepared beforehand
(docs/gpu.md); nothing is downloaded.
"""
import argparse
import csv
import datetime
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from compare import precision_args  # noqa: E402 (the manifest's precision of a --dtype)
from libreyolo_isolated import LIBREYOLO_CLASS, epoch_rows  # noqa: E402 (LibreYOLO's class per family, its epoch rows)

# Each snippet builds its network through libreyolo_isolated.libreyolo_network (bench/ on the
# path): one place says how a family's network is made without a download.
# LibreYOLO 1.6's detection validator turns predictions into numpy arrays with `.numpy()`,
# which torch refuses for bfloat16: under bf16 autocast its DETR validation failed every time
# ("Got unsupported ScalarType BFloat16", RT-DETR-r18 on an H100 on 2026-12-06). Its training
# and validation otherwise untouched, the conversion widens bf16 to f32 (exact) instead.
BF16_NUMPY = r"""
import torch
_numpy = torch.Tensor.numpy
torch.Tensor.numpy = lambda self, *a, **k: _numpy(self.float() if self.dtype == torch.bfloat16 else self, *a, **k)
"""

LIBREYOLO_TRAIN = BF16_NUMPY + r"""
import json, sys, time, torch, libreyolo
args = json.loads(sys.argv[1])
sys.path.insert(0, args["bench"])
from libreyolo_isolated import libreyolo_network
model = libreyolo_network(args["family"], args["size"], args["nc"], args["device"], args["seed"])
t0 = time.time()
result = model.train(data=args["data"], epochs=args["epochs"], batch=args["batch"], imgsz=args["imgsz"],
                     device=args["device"], workers=args["workers"], seed=args["seed"], project=args["project"], name="libreyolo",
                     exist_ok=True, amp=args["amp"], amp_dtype=args["amp_dtype"], cuda_graph=args["graph"], cache="ram",
                     **args["recipe"])
print("LIBREYOLO_RESULT " + json.dumps({"wall_s": time.time() - t0, "result": result}, default=str), flush=True)
"""


LIBREYOLO_INIT = r"""
import sys, torch
sys.path.insert(0, sys.argv[6])
from libreyolo_isolated import libreyolo_network
model = libreyolo_network(sys.argv[4], sys.argv[5], int(sys.argv[3]), "cpu", int(sys.argv[1]))  # as LIBREYOLO_TRAIN
if hasattr(model.model, "enable_aux"):
    model.model.enable_aux(weight=0.25)  # YOLOv9: train() attaches the PGI branch next, from the same generator
torch.save({"model": model.model.state_dict()}, sys.argv[2])
"""

# LibreYOLO's validator on any weights with LibreYOLO's key names (ours are saved so): the
# network built as for training, the state dict loaded (the PGI branch may be absent), then
# LibreYOLO's `val` with autocast in `dtype` (`half`), as its in-training validation runs.
LIBREYOLO_VAL = BF16_NUMPY + r"""
import json, sys, torch, libreyolo
a = json.loads(sys.argv[1])
sys.path.insert(0, a["bench"])
from libreyolo_isolated import libreyolo_network
model = libreyolo_network(a["family"], a["size"], a["nc"], a["device"], 0)
if a["weights"].endswith(".safetensors"):
    from safetensors.torch import load_file
    state = load_file(a["weights"])
    # A training checkpoint holds the EMA network under `model.` (beside `train_model.` and
    # `optimizer.`), as LibreYOLO's checkpoints do; a weights file holds it bare.
    if any(k.startswith("model.") for k in state):
        state = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
else:
    state = torch.load(a["weights"], map_location="cpu", weights_only=False)
    state = state.get("ema") or state.get("model") or state
    state = state.state_dict() if hasattr(state, "state_dict") else state
missing, unexpected = model.model.load_state_dict(state, strict=False)
# The PGI branch is training-only: validation builds the network without it, as LibreYOLO's
# inference load strips `aux.*`.
missing = [k for k in missing if not k.startswith("aux")]
unexpected = [k for k in unexpected if not k.startswith("aux")]
if missing or unexpected:
    sys.exit(f"weights do not match LibreYOLO's {a['family']} {a['size']}: missing {missing[:5]}, unexpected {unexpected[:5]}")
half = a["dtype"] != "f32"
m = model.val(data=a["data"], batch=a["batch"], imgsz=a["imgsz"], device=a["device"], workers=a["workers"],
              half=half, amp_dtype={"bf16": "bfloat16"}.get(a["dtype"], "float16"), verbose=False,
              project=a["project"], name="val", exist_ok=True)
print("LIBREYOLO_VAL " + json.dumps({k: float(v) for k, v in m.items() if isinstance(v, (int, float))}), flush=True)
"""


def dataset_nc(data_yaml):
    """The class count of a dataset yaml (`nc:`, or the number of `names`)."""
    text = open(data_yaml).read()
    m = re.search(r"^nc:\s*(\d+)", text, re.M)
    if m:
        return int(m.group(1))
    return len(re.findall(r"^\s+\d+:", text.split("names:", 1)[1], re.M))


def libreyolo_command(args, out):
    amp = args.dtype != "f32" and args.device != "cpu"
    settings = dict(data=args.data, nc=dataset_nc(args.data), epochs=args.epochs, batch=args.batch, imgsz=args.imgsz, device=args.device,
                    workers=args.workers, seed=args.seed, project=out, amp=amp,
                    amp_dtype={"bf16": "bfloat16", "f16": "float16"}.get(args.dtype, "float16"),
                    graph=args.device != "cpu" and not args.eager, family=args.family, bench=HERE, size=args.size, recipe=recipe(args))
    return [sys.executable, "-c", LIBREYOLO_TRAIN, json.dumps(settings)]


def recipe(args):
    """LibreYOLO's `train()` keywords that this run sets for both engines (ours: `ours_command`)."""
    r = {"no_aug_epochs": args.no_aug_epochs} if args.no_aug_epochs is not None else {}
    return r | ({"eval_interval": args.eval_interval} if args.eval_interval else {})


def ours_command(args, out):
    device = "cpu" if args.device == "cpu" else "0"
    cmd = [args.bin, "train", os.path.join(ROOT, f"manifests/{args.family}{args.size}.toml"), f"data={args.data}", f"device={device}",
           f"batch={args.batch}", f"imgsz={args.imgsz}", f"epochs={args.epochs}", f"workers={args.workers}",
           "cache=ram", f"seed={args.seed}", f"project={out}", "name=ours", "exist_ok=true"] + precision_args(args.dtype)
    if args.device != "cpu":
        # the manifest marks the whole step; this turns capture on (or off: --eager)
        cmd += ["cuda_graph=false" if args.eager else "cuda_graph=true"]
    if args.init_from_libreyolo:
        cmd += [f"weights={libreyolo_init(args, out)}"]
    if args.no_aug_epochs is not None:
        cmd += [f"no_aug_epochs={args.no_aug_epochs}"]
    if args.eval_interval:
        cmd += [f"val.eval_interval={args.eval_interval}"]
    return cmd + args.extra


def libreyolo_init(args, out):
    """LibreYOLO's initial network (family, size) of `args.seed`, saved as a checkpoint our trainer loads."""
    path = os.path.join(out, f"init-seed{args.seed}.pt")
    subprocess.run([sys.executable, "-c", LIBREYOLO_INIT, str(args.seed), path, str(dataset_nc(args.data)), args.family, args.size, HERE],
                   check=True)
    return path


def validations(results_csv, first_epoch):
    """(epoch counted from 1, mAP50-95, mAP50) of every validated epoch of a results.csv (either
    engine's; LibreYOLO numbers epochs from 1, libreyolo-run from 0, as `first_epoch` says)."""
    rows = []
    for row in epoch_rows(results_csv):
        row = {k.strip(): ("" if v is None else str(v)).strip() for k, v in row.items() if k}
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
    p.add_argument("--family", default="yolo9", choices=sorted(LIBREYOLO_CLASS), help="the family both engines train")
    p.add_argument("--size", default="t")
    p.add_argument("--no-aug-epochs", type=int, help="both engines' epochs without mosaic at the end (default: the family's, 15)")
    p.add_argument("--eval-interval", type=int, help="both engines validate every N epochs (and after the last; default: the family's)")
    p.add_argument("--limit", type=int, default=540, help="seconds before both trainings are stopped")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--sequential", action="store_true", help="run LibreYOLO first, then ours")
    p.add_argument("--eager", action="store_true", help="both engines without CUDA graphs (the default captures both)")
    p.add_argument("--engines", default="both", choices=["both", "ours", "libreyolo"], help="which engines train")
    p.add_argument("--init-from-libreyolo", action="store_true", help="ours starts from LibreYOLO's initial weights")
    p.add_argument("--no-cross-val", action="store_true", help="skip scoring the best weights with both validators")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[:len(argv) - len(extra) - (1 if extra or "--" in argv else 0)])
    args.extra = extra
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    runs = {}
    if args.engines in ("both", "libreyolo"):
        runs["LibreYOLO 1.6"] = (libreyolo_command(args, out), os.path.join(out, "libreyolo"))
    if args.engines in ("both", "ours"):
        runs["libreyolo-run"] = (ours_command(args, out), os.path.join(out, "ours"))
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
    # GPU time is scarce), the limit stops both.
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

    report = {"date": datetime.date.today().isoformat(), "model": f"{args.family}{args.size}", "epochs": args.epochs, "batch": args.batch,
              "imgsz": args.imgsz, "dtype": args.dtype, "seed": args.seed, "concurrent": not args.sequential, "engines": {}}
    print(f"\n{args.family}-{args.size} from scratch, {args.epochs} epochs, batch {args.batch}, {args.imgsz} px, {args.dtype}, "
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
    lib = {e: a for e, a, _ in report_rows(report, "LibreYOLO 1.6")} if "LibreYOLO 1.6" in runs else {}
    ours = {e: a for e, a, _ in report_rows(report, "libreyolo-run")} if "libreyolo-run" in runs else {}
    for e in sorted(set(lib) | set(ours)):
        print(f"  epoch {e}: {lib.get(e, float('nan')):.4f} / {ours.get(e, float('nan')):.4f}")
    report["cross_val"] = [] if args.no_cross_val else cross_validate(args, out, runs)
    path = os.path.join(out, f"train-compare-{report['date']}-seed{args.seed}.json")
    json.dump(report, open(path, "w"), indent=1)
    print(f"\nwrote {path}")


def cross_validate(args, out, runs):
    """Every trained engine's best weights scored by both validators, in f32 and in the
    training's compute dtype: tells a difference of training from one of validation. Our `val`
    runs the network in the compute dtype; LibreYOLO's runs it under autocast (`half`), as its
    in-training validation does (`half = amp and cuda`, the same `amp_dtype`)."""
    # LibreYOLO writes best.pt only after a validation; LibreYOLO 1.6 cannot validate YOLOX in
    # bf16 ("nms_kernel" not implemented for 'BFloat16'), so its last (EMA) weights stand in.
    def best_or_last(run, ext):
        best = os.path.join(out, run, "weights", f"best.{ext}")
        return best if os.path.exists(best) else os.path.join(out, run, "weights", f"last.{ext}")
    weights = {"LibreYOLO 1.6": best_or_last("libreyolo", "pt"), "libreyolo-run": best_or_last("ours", "safetensors")}
    device = "cpu" if args.device == "cpu" else "0"
    dtypes = ["f32"] + ([args.dtype] if args.dtype != "f32" else [])
    rows = []
    print("\nbest weights scored by each validator (mAP50-95 / mAP50)")
    for engine, path in weights.items():
        if engine not in runs or not os.path.exists(path):
            continue
        for dtype in dtypes:
            for validator, score in (("libreyolo-run", ours_val), ("LibreYOLO 1.6", libreyolo_val)):
                tag = f"{engine.split()[0].lower()}-by-{validator.split()[0].lower()}-{dtype}"
                m, err = score(args, out, path, dtype, device, tag)
                if m is None:
                    print(f"  {engine} weights, {validator} val, {dtype}: failed: {err[-300:]}")
                    continue
                rows.append({"weights": engine, "validator": validator, "dtype": dtype, **m})
                print(f"  {engine} weights, {validator} val, {dtype}: {m['mAP50-95']:.4f} / {m['mAP50']:.4f}")
    return rows


def ours_val(args, out, path, dtype, device, tag):
    json_path = os.path.join(out, f"val-{tag}.json")
    cmd = [args.bin, "val", os.path.join(ROOT, f"manifests/{args.family}{args.size}.toml"), f"data={args.data}", f"device={device}",
           f"batch={args.batch}", f"imgsz={args.imgsz}", f"workers={args.workers}", "cache=ram", f"weights={path}",
           f"json={json_path}"] + precision_args(dtype)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip()
    m = json.load(open(json_path))["metrics"]
    return {"mAP50-95": m["metrics/mAP50-95"], "mAP50": m["metrics/mAP50"]}, ""


def libreyolo_val(args, out, path, dtype, device, tag):
    settings = dict(weights=path, family=args.family, bench=HERE, size=args.size, data=args.data, nc=dataset_nc(args.data), batch=args.batch, imgsz=args.imgsz, workers=args.workers, dtype=dtype,
                    device="cpu" if device == "cpu" else "cuda", project=os.path.join(out, f"libreyolo-val-{tag}"))
    done = subprocess.run([sys.executable, "-c", LIBREYOLO_VAL, json.dumps(settings)], capture_output=True, text=True)
    line = next((l for l in done.stdout.splitlines() if l.startswith("LIBREYOLO_VAL ")), None)
    if done.returncode != 0 or line is None:
        return None, (done.stderr or done.stdout).strip()
    m = json.loads(line[len("LIBREYOLO_VAL "):])
    return {"mAP50-95": m["metrics/mAP50-95"], "mAP50": m["metrics/mAP50"]}, ""


def report_rows(report, engine):
    return [(v["epoch"], v["mAP50-95"], v["mAP50"]) for v in report["engines"][engine]["validations"]]


if __name__ == "__main__":
    main()
