"""Import, once, every installed module the test suite imports anywhere (at the top of a
test module or inside a test), so that Python compiles their bytecode here, before the
pytest workers and the processes they start import them side by side.

Compiling the whole site-packages instead (``compileall``) took 48 s of CPU for ~10,700
files, of which the suite imports ~2,700 (9 s of CPU to compile and import). The suite's own
helpers (``backends``, ``real_ports``, ...) are not on the path here and are skipped, as is
anything that fails to import: that module is then compiled by its first importer, as
without this step."""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import sys
from pathlib import Path


def imported_names(folder: Path) -> set[str]:
    """The absolute module names every ``import``/``from ... import`` in ``folder``'s Python
    files names (and, for ``from m import x``, ``m.x``, which may be a submodule)."""
    names: set[str] = set()
    for path in sorted(folder.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def main() -> int:
    names = imported_names(Path(sys.argv[1] if len(sys.argv) > 1 else "tests"))
    done = 0
    for name in sorted(names):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                importlib.import_module(name)
                done += 1
            except BaseException:  # any failure: the module is left to its first importer
                pass
    print(f"imported {done} of {len(names)} names the tests import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
