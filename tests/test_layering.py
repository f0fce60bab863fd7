"""The layering the architecture promises, read from the import statements (``ast``, so that a
comment or a string naming a module proves nothing either way): no module above the backend
layer imports the NumPy kernels, which a torch backend on a GPU would not have."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import retrograd

pytestmark = pytest.mark.backend_independent("reads the source with ast")

PACKAGE = Path(retrograd.__file__).parent
KERNELS = "retrograd.backend.numpy_nn"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved; ``from p import n`` counts
    as importing ``p`` and ``p.n`` (``n`` may be a submodule)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return found


def test_the_import_parser_resolves_relative_imports():
    path = PACKAGE / "backend" / "numpy_backend.py"
    assert KERNELS in imported_modules(path)  # "from .numpy_nn import NumpyNNKernels"
    assert "retrograd.backend.sizes" in imported_modules(PACKAGE / "autodiff" / "nn_ops.py")


def test_no_module_outside_backend_imports_the_numpy_kernels():
    backend = PACKAGE / "backend"
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if backend not in path.parents
        and any(m == KERNELS or m.startswith(KERNELS + ".") for m in imported_modules(path))
    ]
    assert offenders == [], f"modules above the backend layer import {KERNELS}: {offenders}"


def test_the_size_arithmetic_imports_no_array_library():
    imports = imported_modules(PACKAGE / "backend" / "sizes.py")
    assert not any(m.split(".")[0] in ("numpy", "torch") for m in imports), imports
