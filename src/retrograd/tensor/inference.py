"""Inference tensors: what ``inference_mode()`` makes, with torch's rules.

A tensor an op makes while its thread runs in ``inference_mode()`` is an *inference tensor*
(``is_inference()``), and so is every view of one, wherever it is taken; a view of an ordinary
tensor taken inside the block stays ordinary, as does any op's result outside it. Outside the
block an inference tensor cannot be written in place, made to require grad, or saved for a
backward (torch's ``RuntimeError``s, :class:`~retrograd.errors.AutodiffError` here); an op that
only reads it (``w + x``, whose node saves nothing of ``x``) runs as in torch.

Nothing is paid for it outside the block: the guarded entry points and ``Tensor._apply`` see
each result only while some thread is inside one (:data:`~retrograd.errors.RESULT_WATCH`,
:func:`._dispatch.watch_results`), views check their base's flag, a class default, and
in-place entries read the flag of the tensor they write.
"""

from __future__ import annotations

import threading
from typing import Any

from ..autodiff.grad_mode import in_inference_mode
from ..errors import RESULT_WATCH, WRITE_WATCH, AutodiffError
from ._dispatch import watch_results

__all__ = ["inference_block_entered", "inference_block_left", "mark_inference"]

_BLOCKS = [0]  # inference_mode(True) blocks open now, in all threads
_LOCK = threading.Lock()

_WRITE_REFUSED = (
    "Inplace update to inference tensor outside InferenceMode is not allowed. You can make a "
    "clone to get a normal tensor before doing inplace update."
)
_REQUIRE_GRAD_REFUSED = (
    "Setting requires_grad=True on inference tensor outside InferenceMode is not allowed."
)


def mark_inference(t: Any, inference: bool = True) -> None:
    """Make ``t`` an inference tensor (its backend's primitive too, which a backward's record
    then refuses to save), or, ``inference=False``, an ordinary one."""
    t._inference = inference
    backend = t._backend
    if backend.is_autodiff:
        t._prim = backend.inference_primitive(t._prim, inference)


def _mark_results(args: tuple, result: Any) -> None:
    """:data:`RESULT_WATCH`'s: the tensors a guarded entry made in this thread's inference
    block are inference tensors; a view is its base's kind (:func:`.views.link` says), and an
    argument handed back (``x.contiguous()``, an in-place op's ``self``) stays what it was."""
    if not in_inference_mode():
        return
    results = result if isinstance(result, tuple | list) else (result,)
    for t in results:
        if (
            getattr(t, "_inference", True)
            or getattr(t, "_view", None) is not None
            or not hasattr(t, "_prim")
        ):
            continue
        if any(t is a for a in args):
            continue
        mark_inference(t)


def _refuse_write(op: str, t: Any) -> None:
    """:data:`WRITE_WATCH`'s: an in-place write into an inference tensor outside the block."""
    if not in_inference_mode():
        raise AutodiffError(f"{op}: {_WRITE_REFUSED}")


def refuse_write(op: str, t: Any) -> None:
    """torch's refusal of an in-place write into an inference tensor outside the block, for
    the in-place paths that are not guarded entries (``t[i] = v``)."""
    if t._inference:
        _refuse_write(op, t)


def refuse_require_grad(op: str, t: Any) -> None:
    """torch's refusal of ``requires_grad_()`` on an inference tensor outside the block."""
    if t._inference and not in_inference_mode():
        raise AutodiffError(f"{op}: {_REQUIRE_GRAD_REFUSED}")


def inference_block_entered() -> None:
    """An ``inference_mode(True)`` block begins: guarded entries mark what they make."""
    with _LOCK:
        _BLOCKS[0] += 1
        if _BLOCKS[0] == 1:
            RESULT_WATCH[0] = _mark_results
            watch_results(True)


def inference_block_left() -> None:
    """An ``inference_mode(True)`` block ends; with the last one the entries stop looking."""
    with _LOCK:
        _BLOCKS[0] -= 1
        if not _BLOCKS[0]:
            RESULT_WATCH[0] = None
            watch_results(False)


WRITE_WATCH[0] = _refuse_write
