"""Run as the ranks of one launch (``torchrun ... scripts_in_turn.py ENTRY... OUT`` or
``mpiexec ... python scripts_in_turn.py ENTRY... OUT``): each entry's script in turn, in this
one process, as if launched alone with its own output folder.

An entry is ``SCRIPT`` or ``SCRIPT:ARG:...``: a script's path relative to ``tests/`` and its
arguments, given before the output folder as a launch of its own gives them. The script's
output folder is ``OUT/`` followed by :func:`folder_name` of the entry.

One launch for several scripts, because a launch costs more than most of these scripts'
work: torchrun's agent and every rank import torch and retrograd again (7-8 s of CPU a
torchrun launch). A script that raises has its traceback written to ``rank{r}.error`` in its
folder and the next one still runs; its test then finds no report of that rank and reads
the traceback beside it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def folder_name(entry: str) -> str:
    """The output folder of ``entry`` inside ``OUT``: the script's name, and its arguments."""
    script, *args = entry.split(":")
    return "-".join([Path(script).stem, *args])


def launch_rank() -> str:
    """This process's rank as the launcher numbered it (torchrun's ``RANK``, Hydra's
    ``PMI_RANK``), known before any context starts."""
    return os.environ.get("RANK", os.environ.get("PMI_RANK", "unknown"))


def run_entry(entry: str, out: Path) -> None:
    """The entry script's ``main()`` with ``sys.argv`` as a launch of its own gives it."""
    script, *args = entry.split(":")
    path = TESTS / script
    spec = importlib.util.spec_from_file_location(f"in_turn_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    saved = sys.argv
    sys.argv = [str(path), *args, str(out)]
    try:
        module.main()
    finally:
        sys.argv = saved


def main() -> None:
    out = Path(sys.argv[-1])  # last, as the launches of a script alone give it
    for entry in sys.argv[1:-1]:
        folder = out / folder_name(entry)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            run_entry(entry, folder)
        except BaseException:
            (folder / f"rank{launch_rank()}.error").write_text(traceback.format_exc())


if __name__ == "__main__":
    main()
