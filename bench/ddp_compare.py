#!/usr/bin/env python3
"""Issue #11's comparison of one GPU with two (threads: `device=0,1`; processes: a torchrun-style
launch) at the same global batch, from the run directories `bench/ddp_check.sh` leaves in WORK
(`one/`, `one_again/`, `two/`, `procs/`, each with steps.csv and results.csv; `one_again` is the
one-GPU run repeated, whose difference to `one` is the spread any comparison has to be read
against).

    python3 bench/ddp_compare.py WORK

Prints the per-step loss table (first steps, then every 8th), the largest per-step relative
difference over the first 50 steps, the largest difference of the epoch means (to be read
against the one-GPU repeat's), the throughput of epochs 2+ (the first carries the warm-up)
with the scaling, and the step time of each run from rank 0's stage trace in WORK/NAME.log
(`LIBREYOLO_LOG=...train=debug`: the time between consecutive `data` stages, median of the last
two thirds of the steps, so capture and warm-up drop out) with the per-step scaling.
"""
import csv
import datetime
import os
import re
import statistics
import sys

KEYS = ("box_loss", "dfl_loss", "cls_loss")


def rows(work, name, file):
    path = os.path.join(work, name, file)
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []


def rel(a, b, keys):
    return max(abs(float(a[k]) - float(b[k])) / max(abs(float(a[k])), 1e-9) for k in keys)


def losses(r):
    return " / ".join(f"{float(r[k]):.4f}" for k in KEYS)


def epoch_gap(a, b):
    keys = ("train/box_loss", "train/dfl_loss", "train/cls_loss")
    return max((rel(x, y, keys) for x, y in zip(a, b)), default=float("nan"))


def speed(results):
    r = results[1:]
    return sum(float(x["images_per_s"]) for x in r) / len(r) if r else float("nan")


def step_ms(work, name):
    """Median step time (ms) of rank 0 over the last two thirds of its steps, from its stage
    trace; None without a trace."""
    path = os.path.join(work, f"{name}_0.log" if name == "procs" else f"{name}.log")
    if not os.path.exists(path):
        return None
    starts = []
    for line in open(path, errors="ignore"):
        m = re.match(r"(\S+Z)\s+DEBUG stage rank=0 stage=data\b", line)
        if m:
            starts.append(datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp())
    steps = [(b - a) * 1000.0 for a, b in zip(starts, starts[1:])]
    steps = steps[len(steps) // 3:]
    return statistics.median(steps) if steps else None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    work = sys.argv[1]
    one, again, two, procs = (rows(work, n, "steps.csv") for n in ("one", "one_again", "two", "procs"))
    shown, label = (two, "2 GPUs (threads)") if two else (procs, "2 processes")
    print(f"| step | 1 GPU box / dfl / cls | {label} box / dfl / cls | max rel. diff |")
    print("|---:|---|---|---:|")
    for i, (a, b) in enumerate(zip(one, shown)):
        if i < 10 or i % 8 == 0:
            print(f"| {i} | {losses(a)} | {losses(b)} | {rel(a, b, KEYS):.2e} |")
    print()
    for name, other in (("one GPU again", again), ("two GPUs (threads)", two), ("two processes", procs)):
        first = [rel(a, b, KEYS) for a, b in list(zip(one, other))[:50]]
        print(f"{name}: {len(other)} steps; per step, max relative difference to one GPU over the first "
              f"{len(first)}: {max(first, default=float('nan')):.3e}")
    gap = max((rel(a, b, KEYS) for a, b in zip(two, procs)), default=float("nan"))
    print(f"threads vs processes, per step: {gap:.3e}")
    r1, ra, r2, rp = (rows(work, n, "results.csv") for n in ("one", "one_again", "two", "procs"))
    print(f"epoch means, max relative difference to one GPU: one GPU again {epoch_gap(r1, ra):.3e} (the spread), "
          f"threads {epoch_gap(r1, r2):.3e}, processes {epoch_gap(r1, rp):.3e}")
    s1, s2, sp = speed(r1), speed(r2), speed(rp)
    print(f"throughput (images/s, epochs 2+): 1 GPU {s1:.1f}, 2 GPUs threads {s2:.1f} ({s2 / s1:.2f}x), "
          f"processes {sp:.1f} ({sp / s1:.2f}x); target 1.8x")
    t1, t2, tp = step_ms(work, "one"), step_ms(work, "two"), step_ms(work, "procs")
    fmt = lambda t: "–" if t is None else f"{t:.1f}"
    ratio = lambda t: "–" if t is None or t1 is None else f"{t1 / t:.2f}x"
    print(f"step time (ms, rank 0, median of the last two thirds): 1 GPU {fmt(t1)}, 2 GPUs threads {fmt(t2)} ({ratio(t2)}), "
          f"processes {fmt(tp)} ({ratio(tp)})")


if __name__ == "__main__":
    main()
