#!/usr/bin/env python3
"""Which kernels two builds generate differently: why a rebuilt binary compiles kernels again.

    python3 bench/kernel_source_diff.py OLD.log NEW.log [NAME ...]

Each log is cubecl's full compilation log of one cold run (`CUBECL_DEBUG_LOG=PATH`: every
kernel's name, id and generated source). cubecl-cuda finds a rebuilt binary's kernels only
through its second-line cache, keyed by the hash of the generated source, so a kernel whose
source differs between builds is compiled again (docs/gpu.md). Prints, per kernel name, how many
of NEW's sources OLD also generated, then for each NAME given (default: every name with a
source OLD lacks) a unified diff of one NEW source against OLD's most similar one.
"""
import difflib
import re
import sys
from collections import defaultdict

ENTRY = re.compile(r"\[START_KERNEL_COMPILATION\]\nname: (?P<name>.*?)\n(?:id: .*?\n)?source:\n```[^\n]*\n(?P<source>.*?)\n```\n\[END_KERNEL_COMPILATION\]", re.S)


def kernels(path):
    by_name = defaultdict(list)
    with open(path, errors="replace") as f:
        for m in ENTRY.finditer(f.read()):
            name = m.group("name").split("<")[0].strip()
            by_name[name].append(m.group("source"))
    return by_name


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
    wanted = sys.argv[3:]
    print(f"| kernel | new sources | also in old | old sources |\n|---|---:|---:|---:|")
    differing = []
    for name in sorted(new):
        seen = set(old.get(name, []))
        shared = sum(1 for s in new[name] if s in seen)
        print(f"| {name} | {len(new[name])} | {shared} | {len(old.get(name, []))} |")
        if shared < len(new[name]) and old.get(name):
            differing.append(name)
    for name in wanted or differing:
        fresh = [s for s in new.get(name, []) if s not in set(old.get(name, []))]
        if not fresh or not old.get(name):
            continue
        source = fresh[0]
        nearest = max(old[name], key=lambda s: difflib.SequenceMatcher(None, s, source, autojunk=False).quick_ratio())
        diff = list(difflib.unified_diff(nearest.splitlines(), source.splitlines(), "old", "new", n=1, lineterm=""))
        print(f"\n## {name}: {len(fresh)} sources OLD lacks; one against OLD's nearest ({len(diff)} diff lines)\n")
        print("\n".join(diff[:80]))


if __name__ == "__main__":
    main()
