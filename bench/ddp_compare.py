#!/usr/bin/env python3
"""Issue #11's comparison of one GPU with two (threads: `device=0,1`; processes: a torchrun-style
launch) at the same global batch, from the run directories `bench/ddp_check.sh` leaves in WORK
(`one/`, `one_again/`, `two/`, `procs/`, each with steps.csv and results.csv; `one_again` is the
one-GPU run repeated, whose difference to `one` is the spread any comparison has to be read
against).

    python3 bench/ddp_compare.py WORK

Prints the per-step loss table (first steps, then every 8th), the largest per-step relative
difference over the first 50 steps, the largest difference of the epoch means (to be read
against the one-GPU repeat's), and the throughput of epochs 2+ (the first carries the warm-up)
with the scaling.
"""
import csv
import os
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


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    work = sys.argv[1]
    one, again, two, procs = (rows(work, n, "steps.csv") for n in ("one", "one_again", "two", "procs"))
    print("| step | 1 GPU box / dfl / cls | 2 GPUs box / dfl / cls | max rel. diff |")
    print("|---:|---|---|---:|")
    for i, (a, b) in enumerate(zip(one, two)):
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


if __name__ == "__main__":
    main()
