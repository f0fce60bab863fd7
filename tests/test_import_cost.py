"""What ``import retrograd`` loads: NumPy and the standard library, nothing heavier. Every
process pays its imports (each command, data-parallel rank, launched script and test worker);
SciPy (0.5 s of CPU), Numba (0.5 s), torch, matplotlib and scikit-learn load at the first call
that needs them."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend_independent("reads the modules a fresh interpreter loads")

HEAVY = {"scipy", "numba", "llvmlite", "torch", "matplotlib", "sklearn", "mpi4py", "pandas"}


@functools.cache
def modules_after(statement: str) -> frozenset[str]:
    """Every module a fresh interpreter holds after running ``statement``. Cached: the tests
    asking what ``import retrograd`` loads read one interpreter's answer (each launch imports
    retrograd again, about a second of CPU), which a second fresh interpreter would repeat."""
    probe = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return frozenset(completed.stdout.split())


def loaded_by(statement: str) -> set[str]:
    """The top-level packages of :func:`modules_after`."""
    return {name.partition(".")[0] for name in modules_after(statement)}


def test_import_retrograd_loads_none_of_the_heavy_libraries():
    assert loaded_by("import retrograd") & HEAVY == set()


def test_a_special_function_loads_scipy_at_its_call():
    assert "scipy" in loaded_by(
        "import retrograd as rg; rg.tensor([0.5], backend=rg.NumpyBackend()).lgamma()"
    )


def test_import_retrograd_imports_neither_vision_nor_pil():
    """retrograd.vision (torchvision's layout) and Pillow load when a script imports them."""
    assert "PIL" not in loaded_by("import retrograd")
    assert "retrograd" in modules_after("import retrograd")
    assert "retrograd.vision" not in modules_after("import retrograd")
    to_pil = "retrograd.vision.transforms.ToPILImage()(retrograd.zeros(1, 2, 2))"
    assert "PIL" in loaded_by(f"import retrograd, retrograd.vision; {to_pil}")


def test_import_retrograd_does_not_import_einops():
    assert "einops" not in loaded_by("import retrograd")


@pytest.mark.parametrize(
    "imports",
    ["import retrograd as rg; import einops", "import einops; import retrograd as rg"],
    ids=["retrograd-first", "einops-first"],
)
def test_einops_knows_retrograd_tensors_whichever_is_imported_first(imports):
    """einops finds backends among the subclasses already defined: retrograd's is defined when
    einops is imported after it (the watcher) and at once when einops came first."""
    pytest.importorskip("einops")
    probe = (
        f"{imports}; from einops.layers.retrograd import Rearrange; "
        "x = rg.tensor([[1.0, 2.0, 3.0]], backend=rg.NumpyBackend()); "
        "print(einops.rearrange(x, 'a b -> b a').shape, Rearrange('a b -> (a b)')(x).shape)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split("\n")[0] == "retrograd.Size([3, 1]) retrograd.Size([3])"


@pytest.mark.parametrize(
    "imports",
    ["import retrograd; import einops", "import einops; import retrograd"],
    ids=["retrograd-first", "einops-first"],
)
def test_a_backend_that_cannot_register_warns_and_breaks_no_import(imports):
    """A failure in retrograd's glue warns; neither ``import einops`` (for the frameworks
    einops serves without retrograd) nor ``import retrograd`` fails for it."""
    pytest.importorskip("einops")
    probe = (
        "import sys, warnings, numpy; sys.modules['retrograd.einops.backend'] = None\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        f"    warnings.simplefilter('always'); {imports}\n"
        "print(einops.rearrange(numpy.zeros((2, 3)), 'a b -> b a').shape)\n"
        "print([str(w.message) for w in caught if 'einops backend' in str(w.message)])"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    shape, warned = completed.stdout.splitlines()
    assert shape == "(3, 2)"
    assert "retrograd could not register its einops backend (ModuleNotFoundError" in warned
