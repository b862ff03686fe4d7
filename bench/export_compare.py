#!/usr/bin/env python3
"""Our ONNX export beside LibreYOLO 1.6's, on the CPU, with onnxruntime as the runtime.

The same YOLOv9-t weights (LibreYOLO's parity fixture, ../shared/parity/yolo9t_nc80.safetensors:
a state dict LibreYOLO made) are exported by LibreYOLO (`model.export(format="onnx")`) and by
`libreyolo-run export`, at the fixture's image size; both models then run in onnxruntime on

* the fixture's two images, where LibreYOLO's own eval decode (`eval_pred`) is known, and
* COCO128 images letterboxed to the same size, with the same weights but every BatchNorm's
  running statistics recalibrated on those images (both engines export that state dict).

Prints and writes (OUT, JSON) the max |difference| of the outputs, pairwise and against
LibreYOLO's eager decode (the rounding two correct runtimes differ by), and how many detections after NMS (conf 0.25 or --conf, iou 0.45) of ours have
their counterpart in LibreYOLO's.

The fixture's weights are a perturbed random initialisation made for its own synthetic images
(see ../shared/parity/yolo9t_fixture.md): on COCO128 images as they are, the network's maps
grow to ~1e15 and any rounding difference flips class scores, which compares two runtimes of
chaotic arithmetic, not the exports. Recalibrated BatchNorms keep the maps in range, as trained
weights do.

    python3 bench/export_compare.py BIN OUT [--parity ../shared/parity] [--coco ../shared/data/coco128] [--images 8]
        [--weights TRAINED.safetensors]

With `--weights` (for example the EMA weights of a `libreyolo-run` training run, as
`bench/checkpoint_state_dict.py` writes them), the COCO128 images also go through those trained
weights as they are.

Needs: torch, libreyolo==1.6.0, onnx, onnxruntime, safetensors, numpy, pillow (CPU only).
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def letterbox(path, size):
    from PIL import Image

    im = Image.open(path).convert("RGB")
    r = min(size / im.height, size / im.width)
    nw, nh = int(im.width * r), int(im.height * r)
    canvas = Image.new("RGB", (size, size), (114, 114, 114))
    canvas.paste(im.resize((nw, nh), Image.BILINEAR), (0, 0))
    return np.asarray(canvas, dtype=np.float32).transpose(2, 0, 1) / 255.0


def nms(pred, conf, iou=0.45):
    """Class-aware NMS of one (4 + nc, A) output: [(class, score, box)] best first."""
    boxes, scores = pred[:4].T, pred[4:].T
    dets = [(c, s, boxes[a]) for a, c in zip(*np.nonzero(scores > conf)) for s in [scores[a, c]]]
    dets.sort(key=lambda d: -d[1])
    kept = []
    for c, s, b in dets:
        def overlap(k):
            x1, y1 = max(b[0], k[2][0]), max(b[1], k[2][1])
            x2, y2 = min(b[2], k[2][2]), min(b[3], k[2][3])
            inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
            union = (b[2] - b[0]) * (b[3] - b[1]) + (k[2][2] - k[2][0]) * (k[2][3] - k[2][1]) - inter
            return inter / max(union, 1e-9)
        if all(k[0] != c or overlap(k) <= iou for k in kept):
            kept.append((int(c), float(s), b))
    return kept


def matched(a, b):
    """How many of detections `a` have one in `b` of the same class, score within 1e-4 and box
    within 1e-2 px. Not an ordered comparison: among thousands of near-equal scores the two
    runtimes' rounding reorders ties."""
    by_class = {}
    for c, s, box in b:
        by_class.setdefault(c, []).append(np.concatenate([[s], box]))
    by_class = {c: np.stack(v) for c, v in by_class.items()}
    n = 0
    for c, s, box in a:
        k = by_class.get(c)
        if k is not None and (np.maximum(np.abs(k[:, 0] - s) / 1e-4, np.abs(k[:, 1:] - box).max(axis=1) / 1e-2) <= 1).any():
            n += 1
    return n


def load(model, state):
    """`state` into LibreYOLO's eval model; our checkpoints also hold the training-only PGI
    branch (`aux.`, `aux_head.`), which the eval model does not have."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    unexpected = [k for k in unexpected if not k.startswith(("aux.", "aux_head."))]
    if missing or unexpected:
        raise SystemExit(f"weights do not fit LibreYOLO's YOLOv9-t: missing {missing[:5]}, unexpected {unexpected[:5]}")


def calibrated(state, images):
    """`state` with every BatchNorm's running statistics set to its batch statistics on `images`
    (one training-mode forward at momentum 1): the eval forward on those images is then
    normalised layer by layer, as a trained network's is."""
    import torch
    from libreyolo import LibreYOLO9

    model = LibreYOLO9._from_scratch(size="t", nb_classes=80, device="cpu", seed=0).model
    load(model, state)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 1.0
    model.train()
    with torch.no_grad():
        model(torch.from_numpy(images))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def eager_decode(state, images):
    """LibreYOLO's eager (unfused) eval decode of `images` with `state`, (B, 84, A)."""
    import torch
    from libreyolo import LibreYOLO9

    model = LibreYOLO9._from_scratch(size="t", nb_classes=80, device="cpu", seed=0).model
    load(model, state)
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(images))["predictions"].numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("out")
    ap.add_argument("--parity", default="../shared/parity")
    ap.add_argument("--coco", default="../shared/data/coco128")
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--conf", type=float, default=0.25, help="the NMS score threshold of the --weights rows (the others: 0.25)")
    ap.add_argument("--weights", help="trained YOLOv9-t weights (a state dict with LibreYOLO's key names) for COCO128 rows of their own")
    args = ap.parse_args()

    import onnxruntime as ort
    import torch
    from safetensors.numpy import load_file
    from safetensors.torch import load_file as load_torch, save_file as save_torch
    from libreyolo import LibreYOLO9
    import libreyolo

    weights = os.path.join(args.parity, "yolo9t_nc80.safetensors")
    io = load_file(os.path.join(args.parity, "yolo9t_io.safetensors"))
    fixture_images = io["images_u8"].astype(np.float32) / 255.0
    size = fixture_images.shape[-1]
    tmp = tempfile.mkdtemp()

    def export_pair(state, tag, nms=False, conf=0.25):
        """LibreYOLO's and our ONNX export of the state dict `state`, as onnxruntime sessions
        (with the embedded NMS at `conf`, iou 0.45, max_det 300 when `nms`)."""
        path = os.path.join(tmp, f"{tag}.safetensors")
        save_torch({k: v.contiguous() for k, v in state.items()}, path)
        model = LibreYOLO9._from_scratch(size="t", nb_classes=80, device="cpu", seed=0)
        load(model.model, state)
        extra = {"nms": True, "dynamic": False, "conf": conf} if nms else {}
        theirs = model.export(format="onnx", imgsz=size, output_path=os.path.join(tmp, f"{tag}-libreyolo.onnx"), simplify=False, **extra)
        ours = os.path.join(tmp, f"{tag}-ours.onnx")
        flags = ["nms=true", "dynamic=false", f"conf={conf}"] if nms else []
        subprocess.run([args.bin, "export", "manifests/yolo9t.toml", f"weights={path}", f"imgsz={size}", f"out={ours}", *flags], check=True)
        return [ort.InferenceSession(p, providers=["CPUExecutionProvider"]) for p in (ours, theirs)]

    files = sorted(glob.glob(os.path.join(args.coco, "images/train2017/*.jpg")))[: args.images]
    coco = np.stack([letterbox(f, size) for f in files]).astype(np.float32)
    fixture_state = load_torch(weights)
    sets = [
        ("fixture images, fixture weights", fixture_state, fixture_images, 0.25),
        (f"COCO128 images ({len(files)}), BatchNorms calibrated on them", calibrated(fixture_state, coco), coco, 0.25),
    ]
    if args.weights:
        sets.append((f"COCO128 images ({len(files)}), {os.path.basename(args.weights)}", load_torch(args.weights), coco, args.conf))
    rows = {}
    for name, state, x, conf in sets:
        ours, theirs = export_pair(state, f"set{len(rows)}")
        a, b = ours.run(None, {"images": x})[0], theirs.run(None, {"images": x})[0]
        row = {
            "shape": list(a.shape),
            "ours_vs_libreyolo_onnx": float(np.abs(a - b).max()),
            "ours_vs_libreyolo_onnx_scores": float(np.abs(a[:, 4:] - b[:, 4:]).max()),
            "conf": conf,
            "detections_ours": sum(len(nms(p, conf)) for p in a),
            "detections_libreyolo": sum(len(nms(q, conf)) for q in b),
            "ours_matched_in_libreyolo": sum(matched(nms(p, conf), nms(q, conf)) for p, q in zip(a, b)),
        }
        # LibreYOLO's eager eval decode: the fixture's for its images, recomputed for COCO128.
        eager = io["eval_pred"] if x is fixture_images else eager_decode(state, x)
        row["ours_vs_libreyolo_eager"] = float(np.abs(a - eager).max())
        row["libreyolo_onnx_vs_libreyolo_eager"] = float(np.abs(b - eager).max())
        rows[name] = row
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    # The embedded NMS (batch 1): each engine's (1, 300, 6) rows on each image.
    for i, (name, state, x, conf) in enumerate(sets):
        name = "embedded NMS, " + name
        ours, theirs = export_pair(state, f"nms{i}", nms=True, conf=conf)
        per_image = []
        for image in x:
            a, b = ours.run(None, {"images": image[None]}), theirs.run(None, {"images": image[None]})
            dets = [[(int(r[5]), float(r[4]), r[:4]) for r in out[0][0] if r[4] > 0] for out in (a, b)]
            per_image.append((len(dets[0]), len(dets[1]), matched(dets[0], dets[1]), float(np.abs(a[1] - b[1]).max())))
        row = {
            "conf": conf,
            "detections_ours": sum(p[0] for p in per_image),
            "detections_libreyolo": sum(p[1] for p in per_image),
            "ours_matched_in_libreyolo": sum(p[2] for p in per_image),
            "raw_ours_vs_libreyolo": max(p[3] for p in per_image),
        }
        rows[name] = row
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    result = {
        "what": "ONNX export of YOLOv9-t (LibreYOLO's parity weights): ours vs LibreYOLO 1.6's, in onnxruntime on the CPU",
        "libreyolo": libreyolo.__version__ if hasattr(libreyolo, "__version__") else "1.6",
        "torch": torch.__version__,
        "onnxruntime": ort.__version__,
        "imgsz": size,
        "rows": rows,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
