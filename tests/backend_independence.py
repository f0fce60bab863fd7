"""The ``backend_independent`` and ``own_checkpointing`` markers' checks (``tests/conftest.py``
applies them).

A test so marked claims that its outcome cannot depend on the suite's inner backend, so that
the suite's pass on a second backend skips it. The claim is checked, not trusted:

- :func:`module_problems`, at collection on every pass that collects the module (another
  backend's pass leaves out a module marked so as a whole: :func:`skipped_whole_off_numpy`):
  the module holding the test does not import ``tests/backends.py`` (the inner backend's
  choice), does not name ``RETROGRAD_INNER`` or ``torch_scripts`` (processes that follow the
  choice), and made no tensor or module on the default backend as it was imported;
- :func:`default_backend_withheld`, around the test's setup, call and teardown on the NumPy
  pass: the process default backend, which the suite's conftest sets to the chosen inner
  backend, is withheld, so that a test reaching it (``rg.tensor(...)`` outside
  ``rg.use_backend``, ``rg.default_backend()``) fails, even where its code catches the error.

What passes both is code that makes no tensor, or only tensors of backends it names itself:
the same on every pass.

The ``own_checkpointing`` marker makes the narrower claim that a test's outcome cannot depend
on the suite's checkpointing strategy (``RETROGRAD_CHECKPOINTING``: CI's budget pass), because
it builds every backend it uses with a strategy of its own. The same withholding checks it, on
every pass without a strategy (:func:`default_backend_withheld`, with the marker's name), and
:func:`strategy_problems` at collection: the module does not name the suite's strategy.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import retrograd as rg
from retrograd import context

#: What a module holding a ``backend_independent`` test may not name: the inner backend's
#: switch, and the scripts that follow it in their own processes.
FOLLOWS_THE_INNER_BACKEND = ("RETROGRAD_INNER", "torch_scripts")
#: What a module holding an ``own_checkpointing`` test may not name: the suite's strategy
#: (``backends.checkpointing()``, ``backends.CHECKPOINTING``) and its switch.
FOLLOWS_THE_STRATEGY = ("RETROGRAD_CHECKPOINTING", "CHECKPOINTING", "checkpointing()")
#: The markers whose tests a backend other than NumPy skips (``tests/conftest.py``).
SKIPPED_WHOLE = ("numpy_only", "backend_independent")


class DefaultBackendWithheldError(AssertionError):
    """A test marked ``backend_independent`` asked for the default backend."""


def imports_backends(source: str) -> bool:
    """Whether Python ``source`` imports the suite's ``backends`` module."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "backends" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "backends" and not node.level:
            return True
    return False


def module_problems(path: Path, module: ModuleType) -> list[str]:
    """Why the test ``module`` at ``path`` may not hold ``backend_independent`` tests (none:
    it may)."""
    problems = []
    made = [
        name for name, value in vars(module).items() if isinstance(value, (rg.Tensor, rg.nn.Module))
    ]
    if made:
        problems.append(f"makes {', '.join(made)} on the default backend at import")
    source = path.read_text()
    if imports_backends(source):
        problems.append("imports tests/backends.py")
    problems.extend(f"names {name}" for name in FOLLOWS_THE_INNER_BACKEND if name in source)
    return problems


def strategy_problems(path: Path) -> list[str]:
    """Why the test module at ``path`` may not hold ``own_checkpointing`` tests (none: it
    may): it names the suite's checkpointing strategy, which its backends would then follow."""
    source = path.read_text()
    return [f"names {name}" for name in FOLLOWS_THE_STRATEGY if name in source]


@contextlib.contextmanager
def default_backend_withheld(test: str, marker: str = "backend_independent") -> Iterator[list[str]]:
    """Within: ``rg.default_backend`` (through which every tensor made without a backend of
    its own finds one) records the call and raises :class:`DefaultBackendWithheldError`.
    On leaving, raises that error if it was called at all, even if the caller caught it."""
    asked: list[str] = []

    def withheld() -> rg.Backend:
        asked.append(test)
        raise DefaultBackendWithheldError(
            f"{test} is marked {marker} but asked for the default backend"
        )

    saved = context.default_backend, rg.default_backend
    context.default_backend = rg.default_backend = withheld
    try:
        yield asked
    finally:
        context.default_backend, rg.default_backend = saved
    if asked:
        raise DefaultBackendWithheldError(
            f"{test} is marked {marker} but asked for the default backend {len(asked)} time(s)"
        )


def skipped_whole_off_numpy(path: Path) -> str | None:
    """The marker of :data:`SKIPPED_WHOLE` that the test module at ``path`` gives every test it
    holds (its one module-level ``pytestmark =``: that mark, or a list or tuple holding it), or
    ``None``. Read from the source, before any import (``tests/conftest.py`` then leaves the
    module out on a backend other than NumPy); only files naming both ``pytestmark`` and a
    marker are parsed."""
    source = path.read_text()
    if "pytestmark" not in source or not any(name in source for name in SKIPPED_WHOLE):
        return None
    assignments = [
        node.value
        for node in ast.parse(source).body
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        and any(
            isinstance(target, ast.Name) and target.id == "pytestmark"
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    ]
    if len(assignments) != 1:  # none, or reassigned: left to collection
        return None
    (value,) = assignments
    for mark in value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]:
        if isinstance(mark, ast.Call):  # pytest.mark.numpy_only("reason")
            mark = mark.func
        if (  # pytest.mark.numpy_only
            isinstance(mark, ast.Attribute)
            and mark.attr in SKIPPED_WHOLE
            and ast.unparse(mark.value) == "pytest.mark"
        ):
            return mark.attr
    return None
