"""Round 13 of the reliability sweep (API.md section 7): the parts of the public surface the
earlier sweep (``tests/test_reliability_sweep.py``) does not draw from.

The earlier sweep calls ``rg.*`` functions, ``Tensor`` methods and ``nn.functional`` with bad
arguments. This one draws, from a fixed seed and the same argument pool, calls of

* the functions of the other namespaces (``rg.fft``, ``rg.linalg``, ``rg.special``,
  ``rg.func``, ``rg.autograd``, ``rg.futures``, ...), and
* the classes that are not modules or distributions: the distributions' transforms, the data
  classes (datasets, samplers, ``DataLoader``), the schedules and ``swa_utils``,
  ``amp.GradScaler``, ``futures.Future``, ``profiler.profile``, the ``nn`` containers and
  ``DataParallel``; each constructed with drawn arguments, then each public method of what was
  built called with drawn arguments.

Every call must give a result or an error of the hierarchy (``rg.RetrogradError``) naming the
operation, never a bare Python exception, a hang or a crash; a graph built before the calls
must still give its gradients. The sweep found the defects of
``tests/test_reliability_regressions_13.py``.
"""

from __future__ import annotations

import contextlib
import inspect
import random
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import retrograd as rg
from retrograd.distributions import transforms
from retrograd.utils import data as D  # noqa: N812  (torch's idiom)
from test_reliability_sweep import (
    _TENSORS,
    _arguments,
    _assert_pending_intact,
    _bindable,
    _check_outcome,
)

#: Functions that change the process's state (grad mode, anomaly mode), or whose purpose is
#: to raise something else: ``testing``'s assertions raise AssertionError as torch's do, and
#: ``jit.Final`` is ``typing.Final``.
_FUNCTIONS_SKIPPED = {"set_detect_anomaly", "set_grad_enabled", "Final"}
_NAMESPACES = ["fft", "signal", "sparse", "nested", "special", "linalg", "func", "autograd",
               "autograd.functional", "jit", "futures"]  # fmt: skip


def _namespace(path: str) -> Any:
    value: Any = rg
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _functions(path: str) -> list[tuple[str, Callable[..., Any]]]:
    module = _namespace(path)
    entries = []
    for name in getattr(module, "__all__", dir(module)):
        value = getattr(module, name, None)
        if name.startswith("_") or name in _FUNCTIONS_SKIPPED or value is None:
            continue
        if callable(value) and not inspect.isclass(value) and not inspect.ismodule(value):
            entries.append((f"{path}.{name}", value))
    return entries


@pytest.fixture
def pending():
    """A graph built before the sweep's calls, and the gradients it must still give."""
    a = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).require_grad()
    b = rg.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -2.0]]).require_grad()
    yield a, b, (a * b + a.exp()).sum()


@pytest.mark.parametrize("path", _NAMESPACES)
def test_the_functions_of_every_namespace_refuse_bad_arguments_with_the_hierarchy(
    pending, path, tmp_path, monkeypatch
):
    """Twelve drawn calls per function: the first argument a tensor of the pool, None, a
    str, an int or a list; up to three more of anything in the pool (a file a function
    would write goes to ``tmp_path``)."""
    monkeypatch.chdir(tmp_path)
    pool = _arguments()
    names = list(pool)
    rng = random.Random(1300 + _NAMESPACES.index(path))
    failures, outcomes = [], {"ok": 0, "refused": 0}
    # (the calls reach process-wide switches such as autograd.set_anomaly_enabled: the block
    # gives anomaly mode back as it was, so later tests in this process do not run under it)
    with warnings.catch_warnings(), rg.autograd.set_detect_anomaly(False):
        warnings.simplefilter("ignore")
        for label, function in _functions(path):
            for _ in range(12):
                first = rng.choice([*_TENSORS, "None", "str", "1", "-1", "list"])
                rest = [rng.choice(names) for _ in range(rng.randrange(4))]
                args = tuple(pool[name]() for name in [first, *rest])
                if not _bindable(function, args):
                    continue
                outcome = _check_outcome(f"{label}{(first, *rest)}", function, *args)
                if outcome in outcomes:
                    outcomes[outcome] += 1
                else:
                    failures.append(outcome)
    assert rg.is_grad_enabled()
    assert not failures, "\n".join(failures)
    assert outcomes["refused"] > 0, outcomes
    _assert_pending_intact(pending)


def _classes() -> dict[str, list[tuple[str, type]]]:
    """The swept classes by group: every public class of each namespace but the bases whose
    methods only subclasses define."""
    groups: dict[str, list[tuple[str, type]]] = {
        "transforms": [(f"transforms.{n}", getattr(transforms, n)) for n in transforms.__all__],
        "data": [(f"data.{n}", getattr(D, n)) for n in D.__all__],
        "schedules": [
            (f"lr_scheduler.{n}", getattr(rg.optim.lr_scheduler, n))
            for n in rg.optim.lr_scheduler.__all__
        ]
        + [(f"swa_utils.{n}", getattr(rg.optim.swa_utils, n)) for n in rg.optim.swa_utils.__all__],
        "runtime": [
            ("amp.GradScaler", rg.amp.GradScaler),
            ("futures.Future", rg.futures.Future),
            ("profiler.profile", rg.profiler.profile),
        ],
        "containers": [
            (f"nn.{n}", getattr(rg.nn, n))
            for n in (
                "Sequential",
                "ModuleList",
                "ModuleDict",
                "ParameterList",
                "ParameterDict",
                "DataParallel",
            )
        ],
    }
    return {
        group: [
            (label, cls)
            for label, cls in entries
            if inspect.isclass(cls)
            and not issubclass(cls, BaseException)
            and not label.rsplit(".", 1)[-1].startswith("_")
            and cls.__module__.startswith("retrograd")
        ]
        for group, entries in groups.items()
    }


def _class_arguments() -> dict[str, Callable[[], Any]]:
    """The argument pool with the objects the swept classes take (an optimizer, a module, a
    dataset, a transform, a function), so that constructions succeed and methods get drawn
    too, besides the tensors, numbers, strs and Nones of the first sweep."""
    pool = _arguments()
    pool.update(
        {
            "optimizer": lambda: rg.optim.SGD([rg.nn.Parameter(rg.ones(3))], lr=0.1),
            "module": lambda: rg.nn.Linear(3, 2),
            "dataset": lambda: D.TensorDataset(rg.arange(6).float()),
            "transform": lambda: transforms.ExpTransform(),
            "function": lambda: lambda *args: 0.5,
        }
    )
    return pool


_OBJECTS = ["optimizer", "module", "dataset", "transform", "function"]


#: Methods that are the Python or torch protocol of the object rather than an argument's op:
#: ``get_submodule`` raises torch's AttributeError for a missing name, ``load_state_dict``
#: reads a str as a file (FileNotFoundError, torch's), ``add_done_callback`` and ``then`` of
#: a callable run it, and a future's ``wait`` waits (for ever: nothing completes it here). The
#: state-dict hooks registered run the callable at every later ``state_dict()`` (its errors
#: are the user's, passed on unchanged as torch's).
_METHODS_SKIPPED = {"get_submodule", "load_state_dict", "add_done_callback", "then", "wait"}
_METHODS_SKIPPED |= {
    f"register_{kind}_hook"
    for kind in ("state_dict_pre", "state_dict_post", "load_state_dict_pre", "load_state_dict_post")
}


@pytest.mark.parametrize("group", list(_classes()))
def test_classes_built_and_called_with_bad_arguments_refuse_with_the_hierarchy(
    pending, group, tmp_path, monkeypatch
):
    """Twenty drawn constructions per class (half of them given first an object of the kind
    such classes wrap); then, for up to three of the objects built, four drawn calls of each
    public method (files a method writes go to ``tmp_path``)."""
    monkeypatch.chdir(tmp_path)
    pool = _class_arguments()
    names = list(pool)
    rng = random.Random(1310 + list(_classes()).index(group))
    failures, outcomes = [], {"ok": 0, "refused": 0}

    def note(outcome: str) -> None:
        if outcome in outcomes:
            outcomes[outcome] += 1
        else:
            failures.append(outcome)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, cls in _classes()[group]:
            built = []
            for _ in range(20):
                drawn = [rng.choice(names) for _ in range(rng.randrange(4))]
                if drawn and rng.random() < 0.5:  # the object the class wraps, half the time
                    drawn[0] = rng.choice(_OBJECTS)
                args = tuple(pool[name]() for name in drawn)
                if not _bindable(cls, args):
                    continue
                outcome = _check_outcome(f"{label}{tuple(drawn)}", cls, *args)
                note(outcome)
                if outcome == "ok" and len(built) < 3:
                    args = tuple(pool[name]() for name in drawn)
                    built.append((drawn, cls(*args)))
            for drawn, instance in built:
                try:
                    for method_name in dir(type(instance)):
                        static = inspect.getattr_static(type(instance), method_name)
                        if method_name.startswith("_") or method_name in _METHODS_SKIPPED:
                            continue
                        if isinstance(static, property) or not callable(static):
                            continue
                        method = getattr(instance, method_name)
                        for _ in range(4):
                            given = [rng.choice(names) for _ in range(rng.randrange(3))]
                            args = tuple(pool[name]() for name in given)
                            if _bindable(method, args):
                                call = f"{label}{tuple(drawn)}.{method_name}{tuple(given)}"
                                note(_check_outcome(call, method, *args))
                finally:
                    if isinstance(instance, rg.profiler.profile):
                        # a drawn start() records every op of the process until stop
                        with contextlib.suppress(rg.RetrogradError):
                            instance.stop()
    assert not failures, "\n".join(failures)
    assert outcomes["ok"] > 5 and outcomes["refused"] > 30, outcomes
    _assert_pending_intact(pending)
