#!/usr/bin/env python3
"""Captured training steps against eager: same seed, same batches, compare what they produce.

    python3 bench/capture_check.py BIN OUT [KEY=VALUE ...]

Trains one epoch of manifests/yolo9t.toml (validation off) eager, with LibreYOLO's two graphs
(`cuda_graph=true`), with the whole step captured, and on the whole step's code path never
captured (the threshold out of reach), with the same settings (KEY=VALUE, e.g.
`device=0 batch=16 data=... cache=ram precision.dtype=bf16`). COCO128 at batch 16 is 8 steps:
steps 1-2 eager, the 3rd captures, 3-8 replay (six graphed steps). Then compares each captured
run with eager and the whole step with its uncaptured twin: the epoch's loss terms (results.csv) and every tensor of weights/last.safetensors
(weights, EMA, optimizer state), as max |a - b| and max |a - b| / max |a| per tensor. Prints a
table and writes OUT/capture_check.json. Needs numpy only (safetensors read by hand).

`BASE_BIN=path` with the `*_base` modes runs those with another build (e.g. the one before a
change to the optimizer's kernels), compared with the same mode of BIN; `BASE_MANIFEST=path` the
manifest that build reads (an older build may not read today's).

`CAPTURE_MODES=a,b,...` runs those modes only (`seams`: eager and every row of the seam table).
On the CPU add `LIBREYOLO_CAPTURE_SOFTWARE=1` to the environment (burn's software graphs).
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every stage's capture mark written out, so that a mode means the same with any build's manifest.
STAGES = ("forward", "loss", "backward", "optimizer", "ema")


def marks(*captured):
    return ["cuda_graph=true"] + [f"stage.{s}.capture={'true' if s in captured else 'false'}" for s in STAGES]


WHOLE = marks(*STAGES)
CONTRACT = marks("forward", "backward")
# The seam inside the network of the table's cut rows; the capture threshold out of reach (a
# marking's code path run eager).
UNTIL_NECK = ["stage.forward.until=neck.elan_down2"]
NEVER = ["capture.threshold=1000000"]
MODES = {
    "eager": ["cuda_graph=false"],
    # The same eager run again, in a new process: the spread the kernels themselves leave.
    "eager_again": ["cuda_graph=false"],
    # Eager with its first step dry-run first whatever the history says, and never: the dry run
    # must leave training exactly as it was (engine/src/precompile.rs).
    "eager_dry_run": ["cuda_graph=false"],
    "eager_no_dry_run": ["cuda_graph=false"],
    "two_graphs": CONTRACT,
    # More markings of the seam table (docs/manifest.md), each against eager over the epoch.
    "forward_loss": marks("forward", "loss"),
    "contract_update": marks("forward", "backward", "optimizer", "ema"),
    "two_segments": marks("forward", "optimizer", "ema"),
    "forward_loss_backward": marks("forward", "loss", "backward"),
    "loss": marks("loss"),
    "backward_optimizer": marks("backward", "optimizer"),
    "optimizer_ema": marks("optimizer", "ema"),
    "until_neck": CONTRACT + UNTIL_NECK,
    "until_neck_rest": WHOLE + UNTIL_NECK,
    "whole_step": WHOLE,
    # The whole step's code path (in-place updates, the segment's own forward/loss/backward)
    # run eager: the threshold is never reached. What the replay must reproduce exactly where
    # the kernels are deterministic; against plain eager, ulp-level differences of a different
    # operation order grow over the steps.
    "two_graphs_uncaptured": CONTRACT + NEVER,
    "whole_step_uncaptured": WHOLE + NEVER,
    # The three-graph program run eager: its backward in three parts sums the branch gradients
    # of the seam in another order than plain eager (bf16 rounding apart), not than its replay.
    "until_neck_rest_uncaptured": WHOLE + UNTIL_NECK + NEVER,
    # The loss row run eager: its backward in two parts (the loss's, then the network's).
    "loss_uncaptured": marks("loss") + NEVER,
    # The same without the dry run that compiles the step's kernels first (engine/src/precompile.rs):
    # the dry run must leave training exactly as it was.
    "whole_step_uncaptured_no_dry_run": WHOLE + NEVER,
    # Eager with burn-fusion's search at upstream's width (engine/src/fusion_search.rs): against
    # eager, what the search width alone changes.
    "eager_blocks5": ["cuda_graph=false"],
}
# The seam table's rows (docs/manifest.md) with eager, in its order: CAPTURE_MODES=seams.
SEAMS = ["eager", "whole_step", "two_graphs", "forward_loss", "forward_loss_backward", "loss", "contract_update", "backward_optimizer",
         "optimizer_ema", "two_segments", "until_neck", "until_neck_rest", "until_neck_rest_uncaptured", "loss_uncaptured"]
# The same runs by another build (BASE_BIN=path): does a change of the engine change training?
BASE_MODES = {f"{m}_base": MODES[m] for m in ("eager", "whole_step", "two_graphs", "whole_step_uncaptured")}
MODES.update(BASE_MODES)
# A mode's environment, beside the caller's.
ENVS = {"eager_dry_run": {"LIBREYOLO_PRECOMPILE": "force"}, "eager_no_dry_run": {"LIBREYOLO_PRECOMPILE": "0"}, "whole_step_uncaptured_no_dry_run": {"LIBREYOLO_PRECOMPILE": "0"},
        "eager_blocks5": {"LIBREYOLO_FUSION_MAX_BLOCKS": "5"}}
# (run, the run it is compared with)
# Every seam row against eager, then the pairs of the other modes.
PAIRS = [(m, "eager") for m in SEAMS[1:]] + [("until_neck_rest", "until_neck_rest_uncaptured"), ("loss", "loss_uncaptured"), ("eager_again", "eager"), ("eager_dry_run", "eager_no_dry_run"), ("two_graphs", "two_graphs_uncaptured"), ("two_graphs_uncaptured", "eager"), ("whole_step", "whole_step_uncaptured"), ("whole_step_uncaptured", "eager"), ("whole_step_uncaptured", "whole_step_uncaptured_no_dry_run"), ("eager_blocks5", "eager"),
         ("eager", "eager_base"), ("whole_step", "whole_step_base"), ("two_graphs", "two_graphs_base"), ("whole_step_uncaptured", "whole_step_uncaptured_base")]
DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    """name -> float64 array (bf16 widened by hand)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[start:end]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, DTYPES[info["dtype"]])
        out[name] = a.astype(np.float64)
    return out


def losses(run_dir):
    lines = open(os.path.join(run_dir, "results.csv")).read().splitlines()
    head, row = lines[0].split(","), lines[1].split(",")
    return {k: float(v) for k, v in zip(head, row) if "loss" in k}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, out, settings = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    logs = {}
    # CAPTURE_MODES=eager,whole_step,... runs a subset (a shorter run); pairs need both runs.
    # `seams` stands for the seam table's rows (docs/manifest.md) and eager.
    wanted = [m for m in os.environ.get("CAPTURE_MODES", ",".join(MODES)).split(",") if m]
    wanted = [x for m in wanted for x in (SEAMS if m == "seams" else [m])]
    modes = {m: MODES[m] for m in wanted}
    if any(m in BASE_MODES for m in modes) and "BASE_BIN" not in os.environ:
        sys.exit(f"modes {', '.join(m for m in modes if m in BASE_MODES)} run another build: set BASE_BIN=path")
    pairs = [(a, b) for a, b in PAIRS if a in modes and b in modes]
    for mode, extra in modes.items():
        exe = os.environ["BASE_BIN"] if mode in BASE_MODES else binary
        # The other build reads its own manifest (BASE_MANIFEST), which the marks make mean the same.
        manifest = os.environ.get("BASE_MANIFEST", "manifests/yolo9t.toml") if mode in BASE_MODES else "manifests/yolo9t.toml"
        cmd = [exe, manifest, "epochs=1", "val=false", "exist_ok=true", f"project={out}", f"name={mode}"]
        env = {**os.environ, **ENVS.get(mode, {})}
        run = subprocess.run(cmd + settings + extra, cwd=ROOT, capture_output=True, text=True, env=env)
        logs[mode] = [l[l.index("cuda_graph"):] for l in run.stderr.splitlines() if "cuda_graph" in l]
        if run.returncode != 0:
            sys.exit(f"{mode} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    report = {"settings": settings, "pairs": {}}
    print("| run | against | capture log | loss terms max rel diff | tensors equal | max abs diff | max rel diff (tensor) |")
    print("|---|---|---|---:|---:|---:|---|")
    for mode, base in pairs:
        base_tensors = read_safetensors(os.path.join(out, base, "weights", "last.safetensors"))
        base_loss = losses(os.path.join(out, base))
        other = read_safetensors(os.path.join(out, mode, "weights", "last.safetensors"))
        loss = losses(os.path.join(out, mode))
        loss_rel = max(abs(loss[k] - v) / max(abs(v), 1e-12) for k, v in base_loss.items())
        worst_abs, worst_rel, worst_name, equal = 0.0, 0.0, "", 0
        groups = {}
        for name, a in base_tensors.items():
            b = other[name]
            d = np.abs(a - b).max() if a.size else 0.0
            rel = d / max(np.abs(a).max(), 1e-12) if a.size else 0.0
            equal += int(d == 0.0)
            # weights, EMA, optimizer state (each moment apart): where a difference lives
            group = name.split(".")[0] if name.split(".")[0] in ("ema", "optimizer") else "weights"
            if group == "optimizer":
                group += "." + name.rsplit(".", 1)[-1]
            g = groups.setdefault(group, {"tensors": 0, "equal": 0, "max_rel_diff": 0.0})
            g["tensors"] += 1
            g["equal"] += int(d == 0.0)
            g["max_rel_diff"] = max(g["max_rel_diff"], rel)
            worst_abs = max(worst_abs, d)
            if rel > worst_rel:
                worst_rel, worst_name = rel, name
        report["pairs"][f"{mode} vs {base}"] = {
            "capture_log": logs[mode],
            "losses": loss,
            "base_losses": base_loss,
            "loss_max_rel_diff": loss_rel,
            "tensors": len(base_tensors),
            "tensors_equal": equal,
            "max_abs_diff": worst_abs,
            "max_rel_diff": worst_rel,
            "max_rel_tensor": worst_name,
            "groups": groups,
        }
        # The outcome first: a refused capture falls back to the same code path as the uncaptured
        # twin, so "equal" only means something next to "captured".
        outcome = [l for l in logs[mode] if "captured" in l or "disabled" in l]
        log = "; ".join(outcome or logs[mode]) or "(no capture line)"
        print(f"| {mode} | {base} | {log[:110]} | {loss_rel:.2e} | {equal}/{len(base_tensors)} | {worst_abs:.2e} | {worst_rel:.2e} ({worst_name}) |")
        print("  " + ", ".join(f"{k} {g['equal']}/{g['tensors']} equal, max rel {g['max_rel_diff']:.1e}" for k, g in sorted(groups.items())))
        # A refusal whole: its parts and the tensors furthest from eager say why.
        for line in logs[mode]:
            if "disabled" in line or "inconclusive" in line:
                print(f"  {line}")
    with open(os.path.join(out, "capture_check.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
