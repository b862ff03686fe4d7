"""The EMA weights of a finished training run, alone, in a file both validators read.

    python3 bench/ema_weights.py RUN_WEIGHTS OUT

RUN_WEIGHTS is LibreYOLO's `last.pt`/`best.pt` (its `model` entry holds the EMA) or this engine's
`last.safetensors`/`best.safetensors` (its `model.` keys hold the EMA). The optimizer state and the
raw training weights are left out, so the file is a third of the checkpoint: OUT is a `.pt` with
`{"model": state}` for LibreYOLO's, or a safetensors of the `model.` keys and the training-state
metadata for ours (bench/train_compare.py's validators and `libreyolo-run val` load both).
The safetensors side needs no package: the format is an 8-byte header length, a JSON header and
the raw bytes.
"""
import json
import struct
import sys


def main(src, dst):
    if src.endswith((".pt", ".pth")):
        import torch
        ck = torch.load(src, map_location="cpu", weights_only=False)
        torch.save({"model": ck["model"]}, dst)
        return len(ck["model"])
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    keep = {k: v for k, v in header.items() if k.startswith("model.")}
    out_header, chunks, offset = {}, [], 0
    for k, v in sorted(keep.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = v["data_offsets"]
        chunks.append(data[a:b])
        out_header[k] = {**v, "data_offsets": [offset, offset + b - a]}
        offset += b - a
    if "__metadata__" in header:
        out_header["__metadata__"] = header["__metadata__"]
    raw = json.dumps(out_header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(chunks))
    return len(keep)


if __name__ == "__main__":
    print(f"{sys.argv[2]}: {main(sys.argv[1], sys.argv[2])} tensors")
