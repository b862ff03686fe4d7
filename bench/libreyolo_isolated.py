#!/usr/bin/env python3
"""LibreYOLO 1.6's training step in isolation: one real batch replayed.

LibreYOLO's profiler reports only the mean of its unsynchronised steps, and its trainer has no
per-batch callback. This runs LibreYOLO's own `train()` (its loop, AMP, `cuda_graph`, optimizer,
EMA, schedule untouched) with two hooks on the trainer class:
  * the training loader yields its first real batch (augmented as usual) `warmup + steps` times,
    so the step time has no data loading in it;
  * each step's end is stamped where the loop calls `_apply_scheduler`, right after the step's
    `loss.item()` (a device sync), so consecutive stamps are whole synchronised steps.
The first `warmup` steps (CUDA-graph capture at the 3rd included) are discarded; the fastest and
the median of the next `steps` are reported with the peak GPU memory (reserved, as our pool
counts it, and allocated) and the warm-up as its own
figures (seconds from the epoch's start to the end of the first step and to the window).

    python3 bench/libreyolo_isolated.py DATA_YAML OUT [--family yolo9|yolox] --size t --batch 8 --dtype bf16 [--graph]
        [--imgsz 640] [--warmup 10] [--steps 24] [--device cuda]

Prints one JSON line (also written to OUT/NAME.json). DATA_YAML must hold an absolute `path:`.
"""
import argparse
import csv
import json
import os
import statistics
import sys
import time


class RepeatFirstBatch:
    """A loader of `n` batches, each the first batch of `loader`."""

    def __init__(self, loader, n):
        self.loader, self.n = loader, n
        self.sampler = getattr(loader, "sampler", None)
        self.batch = None

    def __len__(self):
        return self.n

    def __iter__(self):
        if self.batch is None:
            self.batch = next(iter(self.loader))
        for _ in range(self.n):
            yield self.batch


# The families both engines train: LibreYOLO's class of each.
LIBREYOLO_CLASS = {"yolo9": "LibreYOLO9", "yolox": "LibreYOLOX", "resnet": "LibreResNet", "mobilenetv4": "LibreMobileNetV4", "rtdetr": "LibreRTDETR"}

def epoch_rows(results_csv):
    """An engine's per-epoch rows as dicts: its results.csv, or, where LibreYOLO writes only its
    metrics log (YOLOX), the metrics.jsonl beside it (validation figures nested under
    `val_metrics` or flat)."""
    if os.path.exists(results_csv):
        with open(results_csv) as f:
            return list(csv.DictReader(f))
    jsonl = os.path.join(os.path.dirname(results_csv), "metrics.jsonl")
    if not os.path.exists(jsonl):
        return []
    rows = []
    for line in open(jsonl):
        r = json.loads(line)
        r.update(r.pop("val_metrics", None) or {})
        rows.append({k: v for k, v in r.items() if not isinstance(v, (dict, list))})
    return rows


def libreyolo_network(family, size, nc, device, seed):
    """A fresh LibreYOLO 1.6 network of `family` and `size` with `nc` classes, initialised from
    `seed` (the same seed, the same weights)."""
    import torch
    import libreyolo

    torch.manual_seed(seed)
    cls = getattr(libreyolo, LIBREYOLO_CLASS[family])
    if family == "rtdetr":
        # A scratch build, as ours trains: no ImageNet backbone download (nothing is reachable on
        # the GPU machine), and no stem freeze (LibreYOLO freezes it only for a trained backbone).
        return cls._from_scratch(size=size, nb_classes=nc, device=device, seed=seed)
    return cls(None, size=size, nb_classes=nc, device=device)


def libreyolo_model(size, device, family="yolo9"):
    """A fresh LibreYOLO 1.6 network of `family` and `size` (random init, seed 0, 80 classes)."""
    return libreyolo_network(family, size, 80, device, 0)


def libreyolo_train(model, data, out, name, batch, dtype, imgsz, device, workers, graph, **extra):
    """`model.train(...)` with the settings every harness run shares: seed 0, RAM cache, no
    validation, mosaic throughout, AMP in `dtype` on a GPU (f32 on the CPU, as LibreYOLO runs
    it), `cuda_graph=graph`; `extra` adds or overrides keyword arguments (epochs, profiler)."""
    kwargs = dict(data=data, epochs=1, batch=batch, imgsz=imgsz, device=device, workers=workers, seed=0, project=out, name=name,
                  exist_ok=True, val=False, no_aug_epochs=0, amp=dtype != "f32" and device != "cpu",
                  amp_dtype={"bf16": "bfloat16", "f16": "float16"}.get(dtype, "float16"), cuda_graph=graph, cache="ram")
    kwargs.update(extra)
    model.train(**kwargs)


def measure(data, out, size="t", batch=8, dtype="bf16", graph=False, imgsz=640, warmup=10, steps=24, device="cuda", workers=8,
            family="yolo9"):
    import torch
    from libreyolo.training import trainer as trainer_mod

    total = warmup + steps
    stamps, started = [], []
    base = trainer_mod.BaseTrainer
    orig_epoch, orig_sched = base._train_epoch, base._apply_scheduler

    def train_epoch(self, epoch):
        if not isinstance(self.train_loader, RepeatFirstBatch):
            self.train_loader = RepeatFirstBatch(self.train_loader, total)
            started.append(time.perf_counter())
        return orig_epoch(self, epoch)

    def apply_scheduler(self, iters):
        if started:  # the trainer also sets the schedule once before the first epoch
            stamps.append(time.perf_counter())
        return orig_sched(self, iters)

    base._train_epoch, base._apply_scheduler = train_epoch, apply_scheduler
    cuda = device != "cpu" and torch.cuda.is_available()
    name = f"libreyolo_{family}{size}_b{batch}_{dtype}_{'graph' if graph else 'eager'}_isolated"
    try:
        model = libreyolo_model(size, device, family)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        libreyolo_train(model, data, out, name, batch, dtype, imgsz, device, workers, graph)
    finally:
        base._train_epoch, base._apply_scheduler = orig_epoch, orig_sched
    if len(stamps) < total:
        raise RuntimeError(f"LibreYOLO ran {len(stamps)} steps, expected {total}")
    # Step i ends at stamps[i]; the measured steps are warmup .. total-1.
    durations = [(b - a) * 1000.0 for a, b in zip(stamps[warmup - 1:total - 1], stamps[warmup:total])]
    return {
        "engine": "LibreYOLO 1.6", "size": size, "batch": batch, "dtype": dtype, "mode": "cuda_graph" if graph else "eager",
        "isolated": True, "steps": len(durations),
        "step_ms_min": round(min(durations), 3), "step_ms_median": round(statistics.median(durations), 3),
        "img_per_s": round(batch * 1000.0 / statistics.median(durations), 2),
        # From the epoch's start (the first batch fetched included), as libreyolo-run's profiler
        # counts from the trainer's: to the end of the first step, and to the measured window.
        "first_step_s": round(stamps[0] - started[0], 3),
        "warmup_s": round(stamps[warmup - 1] - started[0], 3),
        # Reserved by PyTorch's caching allocator: what our pool's peak pages are (memory taken
        # from the device), not the smaller peak of live tensors, which comes as well.
        "peak_memory_mb": round(torch.cuda.max_memory_reserved() / 1e6, 1) if cuda else None,
        "peak_allocated_mb": round(torch.cuda.max_memory_allocated() / 1e6, 1) if cuda else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--family", default="yolo9", choices=sorted(LIBREYOLO_CLASS))
    ap.add_argument("--size", default="t")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--graph", action="store_true", help="cuda_graph=True")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    row = measure(a.data, a.out, a.size, a.batch, a.dtype, a.graph, a.imgsz, a.warmup, a.steps, a.device, a.workers, a.family)
    line = json.dumps(row)
    print(line, flush=True)
    with open(os.path.join(a.out, f"libreyolo_{a.size}_b{a.batch}_{a.dtype}_{row['mode']}_isolated.json"), "w") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
