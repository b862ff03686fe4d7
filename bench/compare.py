#!/usr/bin/env python3
"""Side-by-side benchmark: LibreYOLO 1.6 (PyTorch) and libreyolo-run, same machine, same run.

Both train a family (`--family`: YOLOv9, YOLOX; sizes t, s) from scratch on the same dataset with the same batch, image
size, precision and loader settings. Each configuration is run eager and with CUDA graphs
(LibreYOLO `cuda_graph=True`; libreyolo-run the same two graphs, and the whole step captured).

* Default: each engine's own profiler over the same window (`warmup` steps discarded, then
  `steps` measured, the first half unsynchronised; the real loader, so the dataloader's share
  shows).
* `--isolated`: the GPU step alone, one real batch replayed (LibreYOLO through
  bench/libreyolo_isolated.py, ours with `data.fixed_batch=true`): the fastest and the median of
  `steps` steps after `warmup`, as the step-time figures of LibreYOLO's documentation are taken.
* `--throughput E`: images/s over whole epochs with the real loader and augmentation (1 + E
  epochs trained, each engine's own per-epoch seconds, the first epoch reported apart).
* `--cold-cache`: our warm-up once more with an empty kernel cache (cold), next to the warm one
  (once per size and dtype, at the first batch, over a short window).
* `--gpus 0,1`: the runs spread over several GPUs of the machine, one run per GPU at a time
  (each in its own process with CUDA_VISIBLE_DEVICES set; ours on a copy of the kernel cache
  after the first GPU, as cubecl's cache file takes one writer). A run has its GPU to itself, so
  its figures are those of a one-GPU machine; the CPU is shared.
* `--merge A.json B.json ...`: the tables of several runs (e.g. remote runs split by size or
  dtype) as one, written like a run's JSON.

Every row has the peak GPU memory and the warm-up (seconds before the measured window) as their
own figures. Prints the tables with the ratio ours / LibreYOLO, writes the JSON to OUT and
bench/results/, and with --docs appends the tables to the month's results history,
docs/history/YYYY-MM.md (docs/benchmarks.md keeps the current figures, edited by hand).

    python3 bench/compare.py BIN DATA_YAML OUT [--device cuda|cpu] [--family yolo9|yolox|resnet|mobilenetv4|rtdetr] [--sizes t,s] [--batch 8,16]
        [--dtype bf16,f16] [--imgsz 640] [--warmup 10] [--steps 24] [--workers 8] [--isolated]
        [--throughput E] [--cold-cache] [--gpus 0,1] [--docs]
    python3 bench/compare.py --merge A.json B.json ... [--docs]

DATA_YAML must hold an absolute `path:`. LibreYOLO comes from the wheels prepared beforehand
(docs/gpu.md); nothing is downloaded. CUDA graphs are skipped on the CPU.
"""
import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import libreyolo_isolated as iso  # noqa: E402 (LibreYOLO's side; imports LibreYOLO only when called)

# Our step times without CUPTI's kernel tracing (the profiler's default), whose per-kernel cost the
# real half would include; LIBREYOLO_CUPTI set by the caller wins.
os.environ.setdefault("LIBREYOLO_CUPTI", "0")


AMP_DTYPE = {"bf16": "bfloat16", "f16": "float16"}


def libreyolo_profiled(args, size, batch, dtype, graph, out):
    """LibreYOLO's own profiled training (its `profile run`, through the Python API)."""
    name = f"libreyolo_{args.family}{size}_b{batch}_{dtype}_{'graph' if graph else 'eager'}"
    model = iso.libreyolo_model(size, args.device, args.family)
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
    r = iso.measure(args.data, out, size, batch, dtype, graph, args.imgsz, args.warmup, args.steps, args.device, args.workers, args.family)
    return {"step_ms": r["step_ms_median"], "step_ms_min": r["step_ms_min"], "step_ms_median": r["step_ms_median"],
            "img_per_s": r["img_per_s"], "dataload_ms": 0.0, "peak_memory_mb": r["peak_memory_mb"], "warmup_s": r["warmup_s"],
            "first_step_s": r["first_step_s"]}


# libreyolo-run's capture modes: eager; LibreYOLO's contract (forward and backward as two
# graphs, the loss, optimizer and EMA eager), which is what `cuda_graph=True` does there; the
# whole step as one graph (what the shipped manifests mark).
OUR_MODES = {
    "eager": ["cuda_graph=false"],
    "two graphs": ["cuda_graph=true", "stage.loss.capture=false", "stage.optimizer.capture=false", "stage.ema.capture=false"],
    "whole-step graph": ["cuda_graph=true", "stage.loss.capture=true", "stage.optimizer.capture=true", "stage.ema.capture=true"],
    # The manifest's own marks (RT-DETR: backbone and encoder captured, decoder and loss eager).
    "manifest graphs": ["cuda_graph=true"],
    # RT-DETR with its decoder captured too: the forward's cut taken out, the Hungarian loss
    # eager between the forward's graph and the backward's.
    "decoder graphs": ["cuda_graph=true", "stage.forward.until="],
}


def device_arg(args):
    return "cpu" if args.device == "cpu" else args.device.replace("cuda:", "").replace("cuda", "0")


def precision_args(dtype):
    return [f"precision.dtype={'fp16' if dtype == 'f16' else 'bf16'}", f"precision.amp={'false' if dtype == 'f32' else 'true'}"]


def our_command(args, size, batch, dtype, out, name, command=()):
    """libreyolo-run (`command`: a subcommand such as `profile run`) on the size's manifest with
    the settings every harness run shares: the data, batch, size, device, workers, RAM cache,
    seed 0 and `dtype`'s precision, writing to OUT/NAME."""
    return [args.bin, *command, os.path.join(ROOT, f"manifests/{args.family}{size}.toml"), f"data={args.data}", f"batch={batch}",
            f"imgsz={args.imgsz}", f"device={device_arg(args)}", f"workers={args.workers}", "cache=ram", f"project={out}",
            f"name={name}", "exist_ok=true", "seed=0"] + precision_args(dtype)


def run_ours(cmd, log, env=None):
    """Runs libreyolo-run, keeping its stderr in `log` (what it logged, e.g. why capture fell
    back); its stderr, or an error with its tail."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    with open(log, "w") as f:
        f.write(r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"libreyolo-run failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return r.stderr


def ours(args, size, batch, dtype, mode, out, kernel_cache=None):
    """libreyolo-run's `profile run` with the same settings, in capture mode `mode` (OUR_MODES).
    Isolated: one batch replayed, and twice the steps so that the profiler's unsynchronised half
    holds `steps` of them (the synced half times each phase). `kernel_cache`: an empty directory
    for a cold start, whose window is the same warm-up and 2 steps (only the warm-up is read)."""
    name = f"ours_{args.family}{size}_b{batch}_{dtype}_{mode.replace(' ', '-')}{'_cold' if kernel_cache else ''}"
    steps = 2 if kernel_cache else 2 * args.steps if args.isolated else args.steps
    cmd = our_command(args, size, batch, dtype, out, name, ("profile", "run"))
    cmd += [f"profile.warmup={args.warmup}", f"profile.steps={steps}"] + OUR_MODES[mode]
    if args.isolated:
        cmd += ["data.fixed_batch=true"]
    # A cold run: an empty kernel cache, and an empty driver JIT cache with it.
    env = dict(os.environ, **({"LIBREYOLO_KERNEL_CACHE": kernel_cache, "CUDA_CACHE_PATH": os.path.join(kernel_cache, "nv")} if kernel_cache else {}))
    t0 = time.time()
    stderr = run_ours(cmd, os.path.join(out, f"{name}.stderr.log"), env)
    wall = time.time() - t0
    p = json.load(open(os.path.join(out, name, "profile.json")))
    real, window = p["real"], p.get("window", {})
    reason = fallback_reason(stderr)
    kernels = kernel_breakdown(os.path.join(out, name, "profile_summary.json"))
    return {"step_ms": real["step_ms_median"] if args.isolated else real["step_ms"], "img_per_s": real["img_per_s"],
            "dataload_ms": real["dataload_ms"], "step_ms_min": real.get("step_ms_min"), "step_ms_median": real.get("step_ms_median"),
            "gpu_util": p["gpu_util"] if p.get("kernel_timing") else None, "bound": p["bound"],
            "peak_memory_mb": p.get("peak_memory_mb"), "warmup_s": window.get("warmup_s"), "first_step_s": window.get("first_step_s"),
            "wall_s": wall, "captured": p["meta"]["capture"], "replayed_steps": window.get("replayed_steps"),
            "fell_back": reason is not None, "fallback_reason": reason, **kernels}


def kernel_breakdown(summary_path):
    """Where the GPU time of a step went, from the profiler's summary: ms per step by kernel
    category and the top kernels. Eager rows only say something here: a captured step's kernels
    run inside graph launches, which the profiler times as one 'cuda graph replay' each."""
    try:
        a = json.load(open(summary_path))["analysis"]
    except (OSError, KeyError, ValueError):
        return {}
    return {"categories_ms": {c["name"]: round(c["ms_per_step"], 2) for c in a.get("categories", [])},
            "top_kernels": [{k: t.get(k) for k in ("kernel", "phase", "category", "ms_per_step", "count_per_step")} for t in a.get("top_kernels", [])[:12]]}


def fallback_reason(stderr):
    """Our one line saying why capture was dropped (`falling back to eager: WHY`) or ignored
    (`cuda_graph=true ignored (WHY)`), or None when the run kept its graphs."""
    for line in stderr.splitlines():
        if "falling back to eager" in line or "cuda_graph=true ignored" in line:
            return line.strip()[-600:]
    return None


def ours_cold(args, size, batch, dtype, mode, out):
    """`ours` from an empty kernel cache (removed afterwards)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernels-cold-") as empty:
        return ours(args, size, batch, dtype, mode, out, kernel_cache=empty)


# One LibreYOLO training (bench/libreyolo_isolated.py's settings) in a fresh interpreter:
# argv[1] this folder, argv[2] the job as JSON.
LIBREYOLO_TRAIN = """import json, sys
sys.path.insert(0, sys.argv[1])
import libreyolo_isolated as iso
j = json.loads(sys.argv[2])
model = iso.libreyolo_model(j["size"], j["device"], j["family"])
iso.libreyolo_train(model, j["data"], j["out"], j["name"], j["batch"], j["dtype"], j["imgsz"], j["device"], j["workers"], j["graph"],
                    epochs=j["epochs"])
"""


def train_epochs(args, engine, size, batch, dtype, epochs, out, graph=False):
    """Seconds of each epoch of a training of `epochs` epochs (no profiler, no validation) by
    `engine`, as the engine's own results.csv records them (LibreYOLO's `time`, our `seconds`:
    the epoch's training loop); `graph`: LibreYOLO's `cuda_graph=True`, our whole step captured."""

    if engine == "LibreYOLO 1.6":
        name = f"libreyolo_tp_{args.family}{size}_b{batch}_{dtype}_e{epochs}{'_graph' if graph else ''}"
        # In a process of its own, as a user runs it: inside this harness's spawned job process
        # the same YOLOX-t training took 86 s an epoch (H200, 2026-12-04) where its own process
        # takes 7.4 s (H100, bench/results/2026-12-06-h100-yolox-throughput-alone.json).
        job = dict(size=size, device=args.device, family=args.family, data=args.data, out=out, name=name, batch=batch, dtype=dtype,
                   imgsz=args.imgsz, workers=args.workers, graph=graph, epochs=epochs)
        log = os.path.join(out, f"{name}.log")
        with open(log, "w") as f:
            done = subprocess.run([sys.executable, "-c", LIBREYOLO_TRAIN, HERE, json.dumps(job)], stdout=f, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            tail = open(log, errors="replace").read()[-3000:]
            raise RuntimeError(f"LibreYOLO's training exited with {done.returncode} ({log}):\n{tail}")
        column = "time"
    else:
        name = f"ours_tp_{args.family}{size}_b{batch}_{dtype}_e{epochs}{'_graph' if graph else ''}"
        cmd = our_command(args, size, batch, dtype, out, name) + [f"epochs={epochs}", "val=false", "no_aug_epochs=0"]
        run_ours(cmd + (OUR_MODES["whole-step graph"] if graph else []), os.path.join(out, f"{name}.stderr.log"))
        column = "seconds"
    return [float(r[column]) for r in iso.epoch_rows(os.path.join(out, name, "results.csv"))]


def training_images(data):
    """The number of training images DATA_YAML names."""
    import yaml
    cfg = yaml.safe_load(open(data))
    train_dir = os.path.join(cfg["path"], cfg["train"])
    return len([f for f in os.listdir(train_dir) if f.lower().endswith((".jpg", ".jpeg", ".png", ".bmp"))])


# Throughput over whole epochs means something only when an epoch is long enough that each
# engine's per-epoch start-up (LibreYOLO starts its loader's workers every epoch) is amortised.
MIN_EPOCH_IMAGES = 1000


def repeated_dataset(data, out, minimum=MIN_EPOCH_IMAGES):
    """DATA_YAML's training split repeated (symbolic links, labels beside) until an epoch holds at
    least `minimum` images, as OUT/repeatedN/data.yaml with the same validation split; DATA_YAML
    itself when it already does."""
    import math
    import yaml
    cfg = yaml.safe_load(open(data))
    root = cfg["path"] if os.path.isabs(cfg["path"]) else os.path.join(os.path.dirname(data), cfg["path"])
    train_dir = os.path.join(root, cfg["train"])
    images = sorted(f for f in os.listdir(train_dir) if f.lower().endswith((".jpg", ".jpeg", ".png", ".bmp")))
    times = math.ceil(minimum / max(1, len(images)))
    if times <= 1:
        return data
    label_dir = os.path.join(root, cfg["train"].replace("images", "labels", 1))
    dst = os.path.join(out, f"repeated{times}")
    os.makedirs(os.path.join(dst, "images", "train"), exist_ok=True)
    os.makedirs(os.path.join(dst, "labels", "train"), exist_ok=True)
    for i in range(times):
        for f in images:
            stem, ext = os.path.splitext(f)
            link = os.path.join(dst, "images", "train", f"{stem}_{i}{ext}")
            if not os.path.lexists(link):
                os.symlink(os.path.join(train_dir, f), link)
            label = os.path.join(label_dir, stem + ".txt")
            label_link = os.path.join(dst, "labels", "train", f"{stem}_{i}.txt")
            if os.path.exists(label) and not os.path.lexists(label_link):
                os.symlink(label, label_link)
    cfg.update(path=dst, train="images/train", val=os.path.join(root, cfg["val"]))
    path = os.path.join(dst, "data.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    print(f"[compare] throughput on {len(images)} x {times} = {len(images) * times} images an epoch: {path}", flush=True)
    return path


def throughput(args, engine, size, batch, dtype, graph, out):
    """Images/s over whole epochs with the real loader: a training of 1 + E epochs, the first
    (start-up, kernel compilation, graph capture) reported apart and the mean of the other E
    used (both engines measured the same way), eager or with graphs (LibreYOLO's
    `cuda_graph=True`, our whole step)."""
    seconds = train_epochs(args, engine, size, batch, dtype, 1 + args.throughput, out, graph)
    per_epoch = sum(seconds[1:]) / len(seconds[1:])
    return {"epoch_s": per_epoch, "img_per_s": training_images(args.data) / per_epoch, "first_epoch_s": seconds[0], "epochs_s": seconds}


# The runs of a comparison. Each is a job: (table, row key, function name, arguments after
# `args`); a job's function returns its row's figures. `cost` orders the jobs over the GPUs,
# longest first (our eager steps are the slowest).
JOBS = {"libreyolo_isolated": libreyolo_isolated, "libreyolo_profiled": libreyolo_profiled, "ours": ours, "ours_cold": ours_cold,
        "throughput": throughput}


def plan_jobs(args, modes):
    graphs = [False] if args.device == "cpu" else [False, True]
    lib = "libreyolo_isolated" if args.isolated else "libreyolo_profiled"
    jobs = []
    for size in args.sizes.split(","):
        scale = 2.5 if size != "t" else 1.0
        for dtype in args.dtype.split(","):
            for i, batch in enumerate(int(b) for b in args.batch.split(",")):
                key = {"size": size, "dtype": dtype, "batch": batch}
                for graph in graphs:
                    jobs.append(("rows", {"engine": "LibreYOLO 1.6", **key, "mode": "cuda_graph" if graph else "eager"},
                                 lib, (size, batch, dtype, graph, args.out), scale))
                    for mode in [m for m in modes if (m != "eager") == graph]:
                        jobs.append(("rows", {"engine": "libreyolo-run", **key, "mode": mode},
                                     "ours", (size, batch, dtype, mode, args.out), scale * (3.0 if mode == "eager" else 1.5)))
                if args.cold_cache and i == 0:
                    jobs.append(("cold_cache", {"engine": "libreyolo-run", **key, "mode": modes[0], "cache": "cold"},
                                 "ours_cold", (size, batch, dtype, modes[0], args.out), scale * 3.0))
                if args.throughput > 0:
                    for graph in graphs:
                        for engine in ("LibreYOLO 1.6", "libreyolo-run"):
                            jobs.append(("throughput", {"engine": engine, **key, "mode": "graphs" if graph else "eager"},
                                         "throughput", (engine, size, batch, dtype, graph, args.out), scale * 2.0))
    return jobs


def job_label(job):
    """`TABLE ENGINE SIZE DTYPE bBATCH MODE`, what `--only` matches."""
    table_name, key = job[0], job[1]
    return f"{table_name} {key['engine']} {key['size']} {key['dtype']} b{key['batch']} {key['mode']}"


def pin_lane(env):
    """A lane's worker process: its GPU (and kernel cache) before anything touches CUDA."""
    os.environ.update(env)


def run_job(args, job):
    table_name, key, fn, params, _ = job
    print(f"[compare] {key} on GPU {os.environ.get('CUDA_VISIBLE_DEVICES', '-')} ...", flush=True)
    row = {**key, **JOBS[fn](args, *params)}
    print(json.dumps(row), flush=True)
    return row


def lane_envs(args):
    """One environment per lane: its GPU; after the first, a copy of the kernel cache."""
    envs = []
    cache = os.environ.get("LIBREYOLO_KERNEL_CACHE") or os.path.expanduser("~/.cache/libreyolo-run/kernels")
    for i, gpu in enumerate(args.gpus.split(",")):
        # On the CPU the lanes are only concurrent runs (a check of this harness).
        env = {} if args.device == "cpu" else {"CUDA_VISIBLE_DEVICES": gpu}
        if i > 0:
            import shutil
            copy = f"{cache.rstrip('/')}-lane{i}"
            shutil.rmtree(copy, ignore_errors=True)
            if os.path.isdir(cache):
                shutil.copytree(cache, copy, symlinks=True)
            env.update(LIBREYOLO_KERNEL_CACHE=copy, CUDA_CACHE_PATH=os.path.join(copy, "nv-compute-cache"))
        envs.append(env)
    return envs


def run_jobs(args, jobs):
    """Every job once, each in a fresh process on the first free lane (GPU), longest first; the
    rows in the jobs' order. A failing job is reported and leaves its row out."""
    import concurrent.futures as cf
    import multiprocessing
    import queue
    import threading

    pending = queue.Queue()
    for i in sorted(range(len(jobs)), key=lambda i: -jobs[i][4]):
        pending.put(i)
    results, failures = {}, []

    def lane(env):
        # A fresh process a job: LibreYOLO's peak memory and state start clean, and the GPU is
        # pinned before CUDA is initialised.
        with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=pin_lane, initargs=(env,),
                                    max_tasks_per_child=1) as pool:
            while True:
                try:
                    i = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[i] = pool.submit(run_job, args, jobs[i]).result()
                except Exception as e:  # noqa: BLE001 (one failed run must not lose the others)
                    failures.append(f"{jobs[i][1]}: {e}")
                    print(f"[compare] FAILED {jobs[i][1]}: {e}", flush=True)

    threads = [threading.Thread(target=lane, args=(env,)) for env in lane_envs(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tables = {"rows": [], "cold_cache": [], "throughput": []}
    for i, job in enumerate(jobs):
        if i in results:
            tables[job[0]].append(results[i])
    return tables, failures


def fmt(v, spec=".1f"):
    return "–" if v is None else format(v, spec)


def table(rows, isolated):
    """Step times side by side; the ratio is ours / LibreYOLO's in the same graph mode."""
    step = "median step ms" if isolated else "step ms"
    lines = [f"| engine | size | dtype | batch | mode | {step} | fastest ms | img/s | dataload share | peak MB | warm-up s | verdict | ours / LibreYOLO |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    ref = {(r["size"], r["dtype"], r["batch"], r["mode"] == "eager"): r for r in rows if r["engine"].startswith("LibreYOLO")}
    order = ["eager", "cuda_graph", "two graphs", "whole-step graph"]
    rows = sorted(rows, key=lambda r: ("ts".find(r["size"]), r["dtype"], r["batch"], order.index(r["mode"]) if r["mode"] in order else 9))
    for r in rows:
        base = ref.get((r["size"], r["dtype"], r["batch"], r["mode"] == "eager"))
        ratio = f"{r['step_ms'] / base['step_ms']:.2f}x" if r["engine"] == "libreyolo-run" and base else ""
        share = f"{100 * r['dataload_ms'] / r['step_ms']:.0f}%" if r.get("dataload_ms") is not None and r["step_ms"] else "–"
        mode = r["mode"] + (" (fell back to eager)" if r.get("fell_back") else "")
        lines.append(f"| {r['engine']} | {r['size']} | {r['dtype']} | {r['batch']} | {mode} | {r['step_ms']:.1f} | {fmt(r.get('step_ms_min'))} | "
                     f"{r['img_per_s']:.1f} | {share} | {fmt(r.get('peak_memory_mb'), '.0f')} | {fmt(r.get('warmup_s'))} | {r.get('bound') or '–'} | {ratio} |")
    return "\n".join(lines)


def loader_share(tp, rows):
    """1 - steps per epoch x the isolated median step / the epoch's seconds, for a throughput row
    `tp`, from the step row of the same engine, size, dtype, batch and graph mode ("–" without)."""
    graph = {"eager": ("eager",), "graphs": ("cuda_graph", "whole-step graph")}[tp["mode"]]
    step = next((r for r in rows if r["engine"] == tp["engine"] and r["mode"] in graph and not r.get("fell_back")
                 and all(r[k] == tp[k] for k in ("size", "dtype", "batch"))), None)
    if not step or not step.get("step_ms_median"):
        return "–"
    steps = math.ceil(round(tp["img_per_s"] * tp["epoch_s"]) / tp["batch"])
    return f"{100 * max(0.0, 1 - steps * step['step_ms_median'] / 1000 / tp['epoch_s']):.0f}%"


def tables_text(result):
    """The step table, the warm-up table (cold cache next to warm) and the throughput table."""
    rows, cold, tp_rows = result["rows"], result["cold_cache"], result["throughput"]
    text = table(rows, result["settings"]["isolated"]) if rows else ""
    if cold:
        text += "\n\n| ours, warm-up | size | dtype | batch | mode | cold cache s (first step) | warm cache s (first step) |\n|---|---|---|---:|---|---:|---:|\n"
        for c in cold:
            warm = next((r for r in rows if r["engine"] == "libreyolo-run" and all(r[k] == c[k] for k in ("size", "dtype", "batch", "mode"))), {})
            text += (f"| libreyolo-run | {c['size']} | {c['dtype']} | {c['batch']} | {c['mode']} | {fmt(c.get('warmup_s'))} "
                     f"({fmt(c.get('first_step_s'))}) | {fmt(warm.get('warmup_s'))} ({fmt(warm.get('first_step_s'))}) |\n")
    broken_down = [r for r in rows if r.get("categories_ms") and (r["mode"] == "eager" or r.get("fell_back"))]
    if broken_down:
        names = sorted({c for r in broken_down for c in r["categories_ms"]})
        text += (f"\n\n| ours, GPU ms per step by kernel category (eager) | {' | '.join(names)} |\n"
                 f"|---|{'---:|' * len(names)}\n")
        for r in broken_down:
            text += (f"| {r['size']} {r['dtype']} b{r['batch']} {r['mode']} | "
                     f"{' | '.join(fmt(r['categories_ms'].get(n)) for n in names)} |\n")
    if tp_rows:
        ref = {(r["size"], r["dtype"], r["batch"], r["mode"]): r for r in tp_rows if r["engine"].startswith("LibreYOLO")}
        text += ("\n\n| engine | size | dtype | batch | mode | s/epoch | images/s (whole epochs) | first epoch s (warm-up) | outside the GPU step | ours / LibreYOLO images/s |\n"
                 "|---|---|---|---:|---|---:|---:|---:|---:|---:|\n")
        for r in tp_rows:
            base = ref.get((r["size"], r["dtype"], r["batch"], r["mode"]))
            ratio = f"{r['img_per_s'] / base['img_per_s']:.2f}x" if r["engine"] == "libreyolo-run" and base else ""
            text += (f"| {r['engine']} | {r['size']} | {r['dtype']} | {r['batch']} | {r['mode']} | {r['epoch_s']:.1f} | {r['img_per_s']:.1f} | "
                     f"{r['first_epoch_s']:.1f} | {loader_share(r, rows)} | {ratio} |\n")
        text += ("\n*outside the GPU step*: the share of an epoch not explained by its steps at the isolated median step time "
                 "of the step table (same engine, size, dtype, batch and graph mode): the dataloader, and host work between steps.")
    return text.rstrip("\n")


def write_result(result, device, docs, heading):
    """The JSON to OUT (when set) and bench/results/; the tables printed and, with `docs`, appended
    to the month's history, docs/history/YYYY-MM.md, under `heading`."""
    name = f"{result['date']}-{device.replace(':', '')}-compare{'-isolated' if result['settings']['isolated'] else ''}.json"
    paths = [os.path.join(ROOT, "bench", "results", name)]
    if result.get("out"):
        paths.insert(0, os.path.join(result["out"], name))
    for path in paths:
        json.dump(result, open(path, "w"), indent=1)
    text = tables_text(result)
    print("\n" + text + f"\n\nwrote {' and '.join(paths)}")
    if docs:
        with open(os.path.join(ROOT, "docs", "history", f"{result['date'][:7]}.md"), "a") as f:
            f.write(f"\n## {result['date']}: {heading} (bench/results/{name})\n\n{text}\n")


def rows_from_log(path):
    """The rows a run printed (its compare.txt, or the remote run's steps.log) when it was cut
    short before writing its JSON: the settings are the first JSON file's."""
    result = {"rows": [], "cold_cache": [], "throughput": [], "settings": {"isolated": None}, "software": None, "date": ""}
    for line in open(path, errors="replace"):
        if line.startswith('{"engine"'):
            row = json.loads(line)
            result["cold_cache" if row.get("cache") == "cold" else "throughput" if "epoch_s" in row else "rows"].append(row)
    return result


def merge(paths):
    """Several runs' JSON as one: the rows of each, in order; settings and software from the first,
    with every run's settings kept under `runs`."""
    parts = [json.load(open(p)) if p.endswith(".json") else rows_from_log(p) for p in paths]
    first = parts[0]
    merged = {k: v for k, v in first.items() if k not in ("rows", "cold_cache", "throughput", "out")}
    merged["date"] = max(p["date"] for p in parts)
    if not first.get("machine"):
        raise SystemExit("--merge: the first file must be a run's JSON (it gives the settings and the machine)")
    merged["settings"] = dict(first["settings"], isolated=all(p["settings"]["isolated"] in (True, None) for p in parts if p["rows"]))
    merged["runs"] = [{"file": os.path.basename(path), "settings": p["settings"], "software": p["software"]} for path, p in zip(paths, parts)]
    for k in ("rows", "cold_cache", "throughput"):
        merged[k] = [r for p in parts for r in p.get(k, [])]
    return merged


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--merge":
        ap = argparse.ArgumentParser(prog="compare.py --merge", description="one table from several runs' JSON")
        ap.add_argument("json", nargs="+")
        ap.add_argument("--docs", action="store_true")
        a = ap.parse_args(sys.argv[2:])
        merged = merge(a.json)
        write_result(merged, merged["machine"]["device"] + "-merged", a.docs, f"side by side on the GPU, {len(a.json)} runs merged")
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gpus", default="0", help="GPUs to spread the runs over, comma-separated (one run per GPU at a time)")
    ap.add_argument("--family", default="yolo9", choices=sorted(iso.LIBREYOLO_CLASS), help="the family both engines train")
    ap.add_argument("--sizes", default="t", help="sizes of the family, comma-separated (t,s)")
    ap.add_argument("--batch", default="8,16")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--dtype", default="bf16", help="comma-separated: bf16, f16, f32")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--modes", default="eager,two graphs,whole-step graph", help="our capture modes (OUR_MODES), comma-separated")
    ap.add_argument("--docs", action="store_true", help="append the tables to docs/history/YYYY-MM.md")
    ap.add_argument("--throughput", type=int, default=0, metavar="E",
                    help="also measure images/s over E whole epochs (1+E epochs trained, the first reported apart)")
    ap.add_argument("--isolated", action="store_true", help="the step alone: one real batch replayed, fastest and median of STEPS")
    ap.add_argument("--cold-cache", action="store_true", help="also our warm-up with an empty kernel cache (the first mode, first batch)")
    ap.add_argument("--only", metavar="REGEX", help="only the runs whose label (TABLE ENGINE SIZE DTYPE bBATCH MODE, printed at the "
                    "start; TABLE is rows, cold_cache or throughput) matches, e.g. to finish a matrix cut short")
    ap.add_argument("--no-steps", action="store_true", help="only the throughput (and cold-cache) runs, not the step-time table")
    args = ap.parse_args()
    for d in args.dtype.split(","):
        if d not in ("bf16", "f16", "f32"):
            ap.error(f"--dtype {d}: expected bf16, f16 or f32")
    modes = args.modes.split(",")
    for m in modes:
        if m not in OUR_MODES:
            ap.error(f"--modes {m}: expected one of {', '.join(OUR_MODES)}")
    args.bin, args.data, args.out = (os.path.abspath(p) for p in (args.bin, args.data, args.out))
    os.makedirs(args.out, exist_ok=True)
    if args.throughput:
        # Whole-epoch figures need long epochs for both engines: a short training split is
        # repeated to at least MIN_EPOCH_IMAGES (and then every table runs on it).
        args.data = repeated_dataset(args.data, args.out)
    jobs = [j for j in plan_jobs(args, modes) if not (args.no_steps and j[0] == "rows")]
    if args.only:
        import re
        jobs = [j for j in jobs if re.search(args.only, job_label(j))]
    print("[compare] runs:\n  " + "\n  ".join(job_label(j) for j in jobs), flush=True)
    tables, failures = run_jobs(args, jobs)
    import torch
    import libreyolo
    version = subprocess.run([args.bin, "--version"], capture_output=True, text=True).stdout.strip()
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {"host": platform.node(), "cpu_count": os.cpu_count(), "device": args.device, "gpus": args.gpus,
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
        "software": {"libreyolo": libreyolo.__version__, "torch": torch.__version__, "libreyolo-run": version},
        "settings": {k: getattr(args, k) for k in ("family", "sizes", "batch", "imgsz", "dtype", "warmup", "steps", "workers", "isolated", "modes",
                                                   "throughput")},
        "units": {"step_ms": "ms", "step_ms_min": "ms", "step_ms_median": "ms", "img_per_s": "images/s", "dataload_ms": "ms",
                  "peak_memory_mb": "MB", "warmup_s": "s", "first_step_s": "s", "wall_s": "s", "epoch_s": "s", "first_epoch_s": "s"},
        **tables,
        "failures": failures,
        "out": args.out,
    }
    write_result(result, args.device, args.docs,
                 f"side by side on {args.device} (bench/compare.py{' --isolated' if args.isolated else ''}): {args.family} {args.sizes}, "
                 f"{args.imgsz} px, {args.dtype}, workers {args.workers}, RAM cache, {args.warmup} warm-up + {args.steps} measured steps; "
                 f"LibreYOLO {libreyolo.__version__} (torch {torch.__version__}) vs {version}")
    if failures:
        print("failed runs:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
