"""Cut a heap trace (written by ``rtrace.so``) into a file ``replay.c`` replays.

- ``heaptrace.py step TRACE K OUT``: every allocation and free before step ``K`` (the heap's
  history) as the prefix, then step ``K``'s events as the step section; the objects a step
  leaves live are renamed at its end to the names of the older ones it freed (matched by
  size and alignment), so that replaying the section again and again is the steady state.
- ``heaptrace.py large IN OUT [BYTES]``: the section with only its allocations of ``BYTES``
  (default 1,000,000) or more and their frees.
- ``heaptrace.py graft PREFIX_FILE STEP_FILE OUT``: one file's prefix with another's section
  (its names moved apart), to compare two steps on the same heap.
"""

from __future__ import annotations

import sys
from collections import defaultdict, deque


def _lines(path: str):
    with open(path) as f:
        yield from f


def step(path: str, k: str, out: str) -> None:
    live: dict[int, tuple[int, int, int]] = {}
    prefix: list[str] = []
    section: list[str] = []
    mine: dict[int, tuple[int, int]] = {}
    older: list[tuple[int, int, int]] = []
    count, inside = 0, False
    for line in _lines(path):
        parts = line.split()
        if parts[0] == "=":
            label = " ".join(parts[1:])
            if label == f"=== step {k}":
                inside = True
            elif inside and label.startswith("=== step"):
                break
            continue
        op, size, align = parts[0], int(parts[1]), int(parts[2])
        ptr, old = int(parts[3], 16), int(parts[4], 16)
        lines = section if inside else prefix
        if op in "MA":
            count += 1
            live[ptr] = (count, size, align)
            lines.append(f"{'A' if align else 'M'} {size} {align} {count:x} 0")
            if inside:
                mine[count] = (size, align)
        elif op == "F":
            obj = live.pop(ptr, None)
            if obj is None:
                continue
            if inside and obj[0] not in mine:
                older.append(obj)
            lines.append(f"F 0 0 {obj[0]:x} 0")
        elif op == "R":
            obj = live.pop(old, None) if old else None
            count += 1
            live[ptr] = (count, size, 0)
            if inside:
                mine[count] = (size, 0)
                if obj is not None and obj[0] not in mine:
                    older.append(obj)
            lines.append(f"R {size} 0 {count:x} {obj[0] if obj else 0:x}")
    left = defaultdict(deque)
    for name in sorted(i for i, _, _ in live.values() if i in mine):
        left[mine[name]].append(name)
    renames = []
    for name, size, align in older:
        if left[size, align]:
            renames.append((left[size, align].popleft(), name))
    with open(out, "w") as f:
        f.write("\n".join([*prefix, "S 0 0 0 0", *section]) + "\n")
        f.writelines(f"L 0 0 {new:x} {name:x}\n" for new, name in renames)


def large(src: str, out: str, least: int = 1_000_000) -> None:
    dropped, inside = set(), False
    with open(out, "w") as f:
        for line in _lines(src):
            if line.startswith("S"):
                inside = True
            elif inside:
                op, size, _, name, _ = line.split()
                if op in "MA" and int(size) < least:
                    dropped.add(name)
                    continue
                if op == "F" and name in dropped:
                    continue
            f.write(line)


def graft(prefix_file: str, step_file: str, out: str) -> None:
    shift = 0x10000000
    with open(out, "w") as f:
        for line in _lines(prefix_file):
            if line.startswith("S"):
                break
            f.write(line)
        f.write("S 0 0 0 0\n")
        inside = False
        for line in _lines(step_file):
            if line.startswith("S"):
                inside = True
            elif inside:
                op, size, align, name, old = line.split()
                name = f"{int(name, 16) + shift:x}"
                if op in "RL" and int(old, 16):
                    old = f"{int(old, 16) + shift:x}"
                f.write(f"{op} {size} {align} {name} {old}\n")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "large" and len(args) == 3:
        large(args[0], args[1], int(args[2]))
    else:
        {"step": step, "large": large, "graft": graft}[command](*args)
