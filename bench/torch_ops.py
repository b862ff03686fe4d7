#!/usr/bin/env python3
"""PyTorch side of the op-level benchmark (issue: Burn's CUDA backend on YOLO workloads).

Times every op of `libreyolo-run bench ops --spec SPEC` (the exact layer shapes of YOLOv9-t's
training step) the way `bench ops` times them: REPS launches per timed run, a device sync after
each run, warm-up runs first. With OURS (the JSON of `bench ops --json`) it prints the per-step
table of ratios ours / PyTorch and writes both to OUT.

    python3 bench/torch_ops.py SPEC [OURS] [OUT] [--device cuda] [--dtypes f32,bf16]

No network: needs only torch. LibreYOLO, when importable, adds the whole network forward and
forward+backward (YOLOv9-t, random init) to the table.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
OURS_NAME = {"f32": "F32", "bf16": "BF16", "f16": "F16"}
CATEGORY = {
    "conv_forward": "conv forward",
    "conv_input_grad": "conv input-grad",
    "conv_weight_grad": "conv weight-grad",
    "batch_norm_fwd_bwd": "batchnorm (+silu) fwd+bwd",
    "silu_fwd_bwd": "silu fwd+bwd",
    "max_pool": "max-pool",
    "avg_pool": "avg-pool",
    "upsample": "upsample",
    "concat": "concat",
    "gather_rows_fwd_bwd": "gather rows fwd+bwd",
}


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def first_run(fn, device):
    """Seconds of fn's first call (cuDNN's algorithm choice, lazy initialisation)."""
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def samples_ms(run, device, iters, reps):
    """Mean ms a launch over `iters` timed calls of `run`, which launches `reps` times."""
    samples = []
    for _ in range(iters):
        t = time.perf_counter()
        run()
        sync(device)
        samples.append((time.perf_counter() - t) * 1e3 / reps)
    return statistics.mean(samples)


def timed(fn, device, warmup, iters, reps):
    first = first_run(fn, device)

    def burst():
        for _ in range(reps):
            fn()

    for _ in range(warmup):
        burst()
    sync(device)
    return samples_ms(burst, device, iters, reps), first


def timed_graph(fn, device, warmup, iters, reps):
    """As `timed`, but `reps` calls of fn are captured as one CUDA graph and each timed run is a
    replay: the kernels' GPU time without the host's launch cost (libreyolo-run's `--graph`)."""
    first = first_run(fn, device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # PyTorch's capture recipe: warm up on a side stream
        for _ in range(max(warmup, 3)):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    sync(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    sync(device)
    return samples_ms(graph.replay, device, iters, reps), first


def make_op(spec, dtype, device):
    r = lambda *shape: torch.rand(*shape, device=device, dtype=dtype) * 2 - 1  # noqa: E731
    op = spec["op"]
    if op in ("conv_forward", "conv_input_grad", "conv_weight_grad"):
        n, c, h, w = spec["input"]
        co, k, s, p, g = spec["c_out"], spec["k"], spec["stride"], spec["padding"], spec["groups"]
        x, wt = r(n, c, h, w), r(co, c // g, k, k)
        ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        gout = r(n, co, ho, wo)
        if op == "conv_forward":
            b = torch.zeros(co, device=device, dtype=dtype) if spec.get("bias") else None
            return lambda: F.conv2d(x, wt, b, s, p, 1, g)
        if op == "conv_input_grad":
            return lambda: torch.nn.grad.conv2d_input(x.shape, wt, gout, s, p, 1, g)
        return lambda: torch.nn.grad.conv2d_weight(x, wt.shape, gout, s, p, 1, g)
    if op in ("batch_norm_fwd_bwd", "silu_fwd_bwd"):
        x = r(*spec["input"]).requires_grad_(True)
        gout = r(*spec["input"])
        if op == "batch_norm_fwd_bwd" and spec.get("act"):
            # A Conv block's BatchNorm and SiLU (one fused operation on our side).
            f = lambda t: F.silu(F.batch_norm(t, None, None, training=True, eps=1e-3))  # noqa: E731
        elif op == "batch_norm_fwd_bwd":
            f = lambda t: F.batch_norm(t, None, None, training=True, eps=1e-3)  # noqa: E731
        else:
            f = F.silu
        return lambda: torch.autograd.grad(f(x), x, gout)
    x = r(*spec["input"]) if "input" in spec else None
    if op == "max_pool":
        return lambda: F.max_pool2d(x, spec["k"], spec["stride"], spec["padding"])
    if op == "avg_pool":
        return lambda: F.avg_pool2d(x, spec["k"], spec["stride"], spec["padding"], count_include_pad=True)
    if op == "upsample":
        return lambda: F.interpolate(x, scale_factor=spec["scale"], mode="nearest")
    if op == "concat":
        xs = [r(*d) for d in spec["inputs"]]
        return lambda: torch.cat(xs, 1)
    if op == "gather_rows_fwd_bwd":
        maps, tokens, channels = spec["input"]
        x = r(maps, tokens, channels).requires_grad_(True)
        idx = torch.randint(0, tokens, (maps, spec["rows"], 1), device=device).expand(-1, -1, channels)
        gout = r(maps, spec["rows"], channels)
        return lambda: torch.autograd.grad(torch.gather(x, 1, idx), x, gout)
    raise ValueError(f"unknown op {op}")


def network_rows(batch, imgsz, dtype_name, device, warmup, iters, timer):
    """YOLOv9-t (LibreYOLO, random init) forward and forward+backward, when LibreYOLO is there."""
    try:
        from libreyolo import LibreYOLO9
    except ImportError:
        return []
    model = LibreYOLO9(None, size="t", nb_classes=80, device=device).model
    dtype = DTYPES[dtype_name]
    x = torch.rand(batch, 3, imgsz, imgsz, device=device)
    rows = []
    model.eval()
    # cache_enabled=False: autocast's weight-cast cache cannot live across a graph capture.
    amp = lambda: torch.autocast(device.split(":")[0], dtype=dtype, enabled=dtype != torch.float32, cache_enabled=False)  # noqa: E731

    def forward():
        with torch.no_grad(), amp():
            return model(x)

    ms, first = timer(forward, device, warmup, iters, 1)
    rows.append({"category": "network forward (eval)", "dtype": OURS_NAME[dtype_name], "torch_ms": ms, "launches": 1, "first_s": first})
    model.train()

    params = [p for p in model.parameters() if p.requires_grad]

    def step():  # gradients returned, not accumulated into .grad: the same work, capturable
        with amp():
            out = model(x)
        leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        return torch.autograd.grad(sum(t.float().mean() for t in leaves), params, allow_unused=True)

    ms, first = timer(step, device, warmup, iters, 1)
    rows.append({"category": "network forward+backward", "dtype": OURS_NAME[dtype_name], "torch_ms": ms, "launches": 1, "first_s": first})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec")
    ap.add_argument("ours", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--graph", action="store_true", help="time replays of each op captured as a CUDA graph (libreyolo-run bench --graph)")
    ap.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark (PyTorch's default is off)")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    spec = json.load(open(a.spec))
    reps = spec.get("reps", 10)
    timer = timed_graph if a.graph and a.device.startswith("cuda") else timed
    timings = []
    for dn in a.dtypes.split(","):
        for i, o in enumerate(spec["ops"]):
            fn = make_op(o["spec"], DTYPES[dn], a.device)
            ms, first = timer(fn, a.device, a.warmup, a.iters, reps)
            timings.append({"spec": o["spec"], "count": o["count"], "dtype": OURS_NAME[dn], "ms": ms, "first_s": first})
            print(f"[{i + 1}/{len(spec['ops'])}] {CATEGORY[o['spec']['op']]} {dn}: {ms:.4f} ms", flush=True)
    # Per-category totals per training step.
    rows = {}
    for t in timings:
        key = (CATEGORY[t["spec"]["op"]], t["dtype"])
        r = rows.setdefault(key, {"category": key[0], "dtype": key[1], "torch_ms": 0.0, "launches": 0})
        r["torch_ms"] += t["ms"] * t["count"]
        r["launches"] += t["count"]
    table = list(rows.values())
    for dn in a.dtypes.split(","):
        table += network_rows(spec["batch"], spec["imgsz"], dn, a.device, a.warmup, a.iters, timer)
    if a.ours:
        ours = json.load(open(a.ours))
        mine = {}
        for t in ours["ops"]:
            key = (CATEGORY[t["spec"]["op"]], t["dtype"])
            mine[key] = mine.get(key, 0.0) + t["ms"] * t["count"]
        for t in ours.get("network", []):
            mine[(t["category"], t["dtype"])] = t["ms"]
        for r in table:
            r["ours_ms"] = mine.get((r["category"], r["dtype"]))
            r["ratio"] = r["ours_ms"] / r["torch_ms"] if r["ours_ms"] and r["torch_ms"] else None
        seen = {(r["category"], r["dtype"]) for r in table}
        for (cat, dt), ms in mine.items():
            if (cat, dt) not in seen:  # e.g. the whole network when LibreYOLO is not installed
                table.append({"category": cat, "dtype": dt, "launches": 1, "torch_ms": None, "ours_ms": ms, "ratio": None})
    how = "replayed CUDA graphs" if timer is timed_graph else "eager launches"
    print(f"\nYOLOv9-t training-step ops, batch {spec['batch']}, {spec['imgsz']} px, {a.device} ({torch.__version__}), {how}: ms per step\n")
    print("| op | dtype | launches/step | libreyolo-run ms | PyTorch ms | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    for r in table:
        ours_ms = f"{r['ours_ms']:.3f}" if r.get("ours_ms") is not None else "–"
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") else "–"
        torch_ms = f"{r['torch_ms']:.3f}" if r.get("torch_ms") is not None else "–"
        print(f"| {r['category']} | {r['dtype']} | {r['launches']} | {ours_ms} | {torch_ms} | {ratio} |")
    if a.out:
        json.dump({"device": a.device, "torch": torch.__version__, "batch": spec["batch"], "imgsz": spec["imgsz"],
                   "cudnn_benchmark": a.cudnn_benchmark, "timing": timer.__name__, "table": table, "torch_ops": timings}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
