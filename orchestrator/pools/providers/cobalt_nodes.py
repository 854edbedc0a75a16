"""Expand Theta's ``COBALT_PARTNAME`` into a node file, one ``nidNNNNN`` name per line.

On Theta a Cobalt job's nodes are given by ``COBALT_PARTNAME`` (a Cray node list such as
``3835-3838,3840``), not ``COBALT_NODEFILE`` (Cooley's): "The compute node name can be found
by reading the $COBALT_PARTNAME number, and prepending "nid" with the appropriate number of
0s to reach 5 digits" (ALCF, Theta job and queue scheduling, docs.alcf.anl.gov, read at the
last version before the Theta pages were removed, 2024-02-26).
"""

from __future__ import annotations

import re
import sys

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?\Z")


def expand(partname: str) -> list[str]:
    names: list[str] = []
    for part in partname.strip().split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise ValueError(f"COBALT_PARTNAME: cannot read {part!r} of {partname!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"COBALT_PARTNAME: range {part!r} runs backwards")
        names.extend(f"nid{n:05d}" for n in range(lo, hi + 1))
    return names


if __name__ == "__main__":
    try:
        print("\n".join(expand(sys.argv[1] if len(sys.argv) > 1 else "")))
    except ValueError as exc:
        sys.exit(f"cobalt_nodes: {exc}")
