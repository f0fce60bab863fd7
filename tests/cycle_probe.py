"""What retrograd's own code leaves to the garbage collector: reference cycles and tracked
objects, counted by origin.

A pytest worker runs many files in one process, and a daemon thread an earlier test left (a
reducer, a timed-out worker) or the interpreter itself may make garbage while a test
measures. Counting every unreachable object made these checks fail under load (``ci25``:
39,788 objects in a check of one ``func.grad`` call). An object counts as retrograd's when its
class is defined in the package, or it is a function, frame or generator of the package's
code: any cycle retrograd's code makes holds one of those (a closure that refers to itself is
a function of the package; a node, a tensor or a plan is an instance of its classes).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import types
from collections.abc import Iterator

import retrograd

_PACKAGE = os.path.dirname(os.path.abspath(retrograd.__file__)) + os.sep

__all__ = ["collected_cycles", "heap_set_aside", "library_objects", "ours"]


def ours(obj: object) -> bool:
    """Whether ``obj`` belongs to retrograd: an instance of its classes, or code of its own.
    Read through ``type(obj)``, never the object: ``isinstance`` asks a ``weakref.proxy`` for
    its ``__class__``, which raises ``ReferenceError`` once its referent is gone (Numba's
    code generator leaves such proxies among the objects a collection finds)."""
    kind = type(obj)
    if issubclass(kind, types.FunctionType):
        return obj.__code__.co_filename.startswith(_PACKAGE)
    if issubclass(kind, types.FrameType):
        return obj.f_code.co_filename.startswith(_PACKAGE)
    if issubclass(kind, types.GeneratorType):
        return obj.gi_code.co_filename.startswith(_PACKAGE)
    module = getattr(kind, "__module__", None) or ""
    return module == "retrograd" or module.startswith("retrograd.")


def collected_cycles(generation: int = 2) -> list[str]:
    """Run the collector on the generations up to ``generation`` (2: every object); the type
    names of the unreachable objects that are retrograd's.

    ``generation=0`` looks at the objects made since the last collection only, older ones
    being references from outside: with the collector off since a full collection, that is
    what a loop made, and a cycle a loop leaves a step is made of objects of that step (a full
    collection costs a few tenths of a second in a worker holding what earlier tests left)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect(generation)
        found = [type(obj).__qualname__ for obj in gc.garbage if ours(obj)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    # what DEBUG_SAVEALL kept (moved one generation up), freed now
    gc.collect(min(generation + 1, 2))
    return found


def library_objects() -> collections.Counter:
    """Objects of retrograd's types and torch tensors alive now (the collector's view), by
    type name; not other torch objects: a ``torch.Size`` is made afresh at each ``.shape``, and
    which one a bounded table (a budget's op timings) keeps as its key varies from step to
    step. Counted by type first, at C speed: a loop in Python over every object took half a
    second a call in a test worker, with tracemalloc on."""
    counts: collections.Counter = collections.Counter()
    for kind, number in collections.Counter(map(type, gc.get_objects())).items():
        module = kind.__module__
        if isinstance(module, str) and (
            module.startswith("retrograd")
            or (module.startswith("torch") and kind.__name__ in ("Tensor", "Parameter"))
        ):
            counts[kind.__qualname__] += number
    return counts


@contextlib.contextmanager
def heap_set_aside() -> Iterator[None]:
    """Every object alive on entry set aside (``gc.freeze``) until the block ends: the block's
    collections, :func:`library_objects` and ``gc.get_objects()`` see only the objects made
    since. A pytest worker holds millions of objects by its later files, and a soak's full
    collections and counts walked all of them each time: ``test_memsoak2`` took 89 s of CPU
    in a CI worker against 29 s alone (set aside, in a process that ran 450 other tests
    first: 18.9 s against 37.9 s). A leak is objects made in the block and alive at its end,
    which are all seen; an object from before the block that the steps replace is replaced
    in the warm-up, which the block therefore encloses.

    After the block the heap stays set aside, as ``tests/conftest.py`` leaves it after
    collection: the block's garbage is collected and what it left alive joins the rest.
    Unfreezing instead handed the whole heap back to the collector for every later test of
    the worker (``gc.get_referrers`` in each capture and every full collection walked it)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
