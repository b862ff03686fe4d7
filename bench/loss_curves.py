#!/usr/bin/env python3
"""Two engines' per-epoch training losses, several seeds each: is ours within LibreYOLO's
seed-to-seed spread?

    python3 bench/loss_curves.py --ours A/results.csv B/results.csv --ref C/metrics.jsonl D/metrics.jsonl \
        [--json out.json] [--every 5]

Each file is one seed's run: our `results.csv` (epoch from 0, `train/<term>_loss` columns) or
LibreYOLO's `metrics.jsonl` (epoch from 1, the same keys). For each loss term and epoch both
engines present: the mean of our seeds, LibreYOLO's mean and its band (lowest to highest seed),
and whether our mean lies in that band or within LibreYOLO's spread of its mean. A term's verdict
counts the epochs that do. With two seeds a side the band is a weak estimate of the spread;
more seeds (or the same seed run twice, since LibreYOLO's augmentation is not reproducible
from its seed) widen it.
"""
import argparse
import csv
import json
import re
import sys


LOSS = re.compile(r"train/(\w+)_loss")


def losses(row):
    """{term: loss} of one epoch's row (a missing value left out)."""
    return {m.group(1): float(v) for k, v in row.items() if (m := LOSS.fullmatch(k)) and v not in (None, "")}


def read(path):
    """{epoch (from 1): {term: loss}} of one run."""
    if path.endswith(".jsonl"):
        rows = {int(j["epoch"]): losses(j) for j in map(json.loads, open(path))}
    else:
        rows = {int(r["epoch"]) + 1: losses(r) for r in csv.DictReader(open(path))}
    if not rows:
        sys.exit(f"error: no per-epoch loss rows in {path}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", nargs="+", required=True)
    ap.add_argument("--ref", nargs="+", required=True)
    ap.add_argument("--json")
    ap.add_argument("--every", type=int, default=5, help="print every Nth epoch (and the last)")
    a = ap.parse_args()
    ours, ref = [read(p) for p in a.ours], [read(p) for p in a.ref]
    epochs = sorted(set.intersection(*(set(r) for r in ours + ref)))
    terms = sorted(set.intersection(*(set(r[e]) for r in ours + ref for e in epochs)))
    if not epochs or not terms:
        sys.exit("error: no epoch and loss term common to every run")
    report = {"ours": a.ours, "ref": a.ref, "epochs": len(epochs), "terms": {}}
    for t in terms:
        rows = []
        for e in epochs:
            o = [r[e][t] for r in ours]
            f = [r[e][t] for r in ref]
            om, fm = sum(o) / len(o), sum(f) / len(f)
            rows.append({"epoch": e, "ours": o, "ref": f, "ours_mean": om, "ref_mean": fm,
                         "in_band": min(f) <= om <= max(f), "within_spread": abs(om - fm) <= max(f) - min(f),
                         "rel_diff": (om - fm) / fm})
        report["terms"][t] = {"in_band": sum(r["in_band"] for r in rows), "within_spread": sum(r["within_spread"] for r in rows),
                              "max_rel_diff": max(rows, key=lambda r: abs(r["rel_diff"]))["rel_diff"], "rows": rows}
        print(f"{t}: our mean in LibreYOLO's band {report['terms'][t]['in_band']}/{len(rows)} epochs, "
              f"within its spread of its mean {report['terms'][t]['within_spread']}/{len(rows)}, "
              f"largest difference {100 * report['terms'][t]['max_rel_diff']:+.1f}%")
        print("  epoch | ours (each seed) | LibreYOLO (each seed) | ours - LibreYOLO")
        for r in rows:
            if r["epoch"] % a.every == 0 or r is rows[0] or r is rows[-1]:
                fmt = lambda v: " ".join(f"{x:.3f}" for x in v)  # noqa: E731
                print(f"  {r['epoch']:5d} | {fmt(r['ours'])} | {fmt(r['ref'])} | {100 * r['rel_diff']:+.1f}%")
    if a.json:
        json.dump(report, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
