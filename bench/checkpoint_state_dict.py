#!/usr/bin/env python3
"""The EMA weights of a libreyolo-run checkpoint as a plain safetensors state dict, with
LibreYOLO's key names (what `model.load_state_dict` and the other engines read).

    python3 bench/checkpoint_state_dict.py runs/train/exp/weights/best.safetensors OUT.safetensors

A checkpoint holds the EMA weights under `model.`, the raw ones under `train_model.` and the
optimizer's state under `optimizer.`; this keeps the first, without the prefix and without the
checkpoint's metadata (which would mark the file a checkpoint again). Standard library only, so
that it runs on a machine with a bare Python.
"""

import json
import struct
import sys


def main(src, dst):
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out, blobs, offset = {}, [], 0
    for key, v in header.items():
        if not key.startswith("model."):
            continue
        a, b = v["data_offsets"]
        blobs.append(data[a:b])
        out[key[len("model."):]] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [offset, offset + b - a]}
        offset += b - a
    if not out:
        sys.exit(f"{src} holds no `model.` tensors: not a libreyolo-run checkpoint")
    head = json.dumps(out).encode()
    head += b" " * (-len(head) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    print(f"{dst}: {len(out)} tensors, {offset} bytes")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
