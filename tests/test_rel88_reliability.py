"""Reliability round 88: exceptions raised by user code in the middle of autodiff, threads,
and reference cycles (the regressions; what was probed and found right is in CHANGELOG.md).

* Forward AD's test of tangents under ``no_grad`` was one process-wide switch, installed
  when a thread opened a dual level and removed when one closed it: a thread closing its
  level removed it under another thread still inside its own, whose ``no_grad`` ops on duals
  then lost their tangents (``None``, where torch's forward AD gives the dual's tangent
  times 3 under ``no_grad``).
* ``autograd.set_multithreading_enabled`` was one process-wide flag; torch's is per thread.
* A data-parallel backward that raised (a user's tensor hook) never reached the sync hook's
  ``end``: what ``begin`` kept for it by ``id(grads)`` stayed (a ``no_sync`` backward's
  parameter slots, for good), and a later backward whose ``Gradients`` reused the id took
  it for its own (``list.remove(x): x not in list`` from a ``no_sync`` backward after a
  synced one raised).
* A synced data-parallel backward that raised on every rank (before any gradient was ready)
  left its round open: the rank that began its next backward first was paired with the
  other's raising one, and from then on each rank's step N was averaged with the other's
  step N - 1 or N + 1, with no error (torch's next steps sync as usual). A backward that
  raises now fails its round at once, and rounds gather each device's n-th synced backward.

Threads are joined with a deadline, so a regression fails instead of hanging.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.autograd.forward_ad as fwAD  # noqa: N812 (torch's name)
from cycle_probe import library_objects
from retrograd.distributed.reducer.backward_hook import HOOK
from retrograd.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 (as scripts write it)
from test_distributed_breadth_1 import run_ranks

DEADLINE = 30.0


class UserHookError(Exception):
    """The user's own exception, raised by a hook."""


def _raise(*_: object) -> None:
    raise UserHookError("the user's hook")


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(DEADLINE)
    hung = [thread.name for thread in threads if thread.is_alive()]
    assert not hung, f"threads {hung} still running after {DEADLINE} s: a deadlock"


def _tangent_by_differences() -> np.ndarray:
    """The tangent of ``x * 3`` at ``x = 1`` along ``2``, by central differences in float64
    (torch's forward AD costs seconds to import on first use)."""
    x, tangent, step = np.ones(3), np.full(3, 2.0), 1e-6
    return ((x + step * tangent) * 3 - (x - step * tangent) * 3) / (2 * step)


@pytest.mark.parametrize("closing_first", ["other", "self"])
def test_a_dual_level_closed_on_one_thread_leaves_another_thread_s_tangents(closing_first):
    """Two threads each inside a dual level of their own; one closes its level while the
    other is still inside: the other's ``no_grad`` op on a dual keeps its tangent, as a
    thread alone gets (torch's value)."""
    expected = _tangent_by_differences()
    opened = [threading.Event(), threading.Event()]
    closed = threading.Event()
    found: dict[str, object] = {}
    errors: list[BaseException] = []

    def closer() -> None:
        try:
            with fwAD.dual_level():
                opened[0].set()
                opened[1].wait(DEADLINE)
            closed.set()
        except BaseException as error:  # reported by the test's thread
            errors.append(error)

    def keeper() -> None:
        try:
            opened[0].wait(DEADLINE)
            with fwAD.dual_level():
                opened[1].set()
                closed.wait(DEADLINE)
                dual = fwAD.make_dual(rg.ones(3), rg.full((3,), 2.0))
                with rg.no_grad():
                    out = dual * 3
                found["tangent"] = fwAD.unpack_dual(out).tangent
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=closer), threading.Thread(target=keeper)]
    if closing_first == "self":
        threads.reverse()
    for thread in threads:
        thread.start()
    _join(threads)
    assert not errors, errors[0]
    tangent = found["tangent"]
    assert tangent is not None, "the tangent was lost when the other thread closed its level"
    np.testing.assert_allclose(tangent.numpy(), expected, rtol=1e-6)


@pytest.mark.backend_independent("a flag of the autograd module; no op runs")
def test_set_multithreading_enabled_holds_for_its_thread_only_as_torch_s():
    def seen(lib) -> tuple[bool, bool]:
        out: list[bool] = []
        with lib.autograd.set_multithreading_enabled(False):
            here = lib.autograd.is_multithreading_enabled()
            thread = threading.Thread(
                target=lambda: out.append(lib.autograd.is_multithreading_enabled())
            )
            thread.start()
            _join([thread])
        return here, out[0]

    assert seen(rg) == seen(torch)
    assert rg.autograd.is_multithreading_enabled() is torch.autograd.is_multithreading_enabled()


def _micro(rank: int, k: int) -> rg.Tensor:
    return rg.tensor(np.random.default_rng(40 + 4 * rank + k).standard_normal((2, 3)))


_WEIGHT = np.random.default_rng(7).standard_normal((2, 3))
_BIAS = np.random.default_rng(8).standard_normal(2)


def _linear(lib):
    """A ``Linear(3, 2)`` in float64 holding fixed weights (the rank threads share one
    random generator, so seeded draws would interleave)."""
    layer = lib.nn.Linear(3, 2).double()
    layer.load_state_dict({"weight": lib.tensor(_WEIGHT), "bias": lib.tensor(_BIAS)})
    return layer


def test_no_sync_backwards_that_raised_leave_nothing_behind():
    """20 ``no_sync`` backwards stopped by a raising tensor hook on each rank: the sync
    hook keeps nothing of them (it kept each one's parameter slots for good), and the
    accumulation idiom run after them gives the gradients of a run without them."""

    def script(failures: int):
        def run(rank: int):
            model = DDP(_linear(rg))
            for _ in range(failures):
                with model.no_sync():
                    out = model(_micro(rank, 3))
                    out.register_hook(_raise)
                    with pytest.raises(UserHookError):
                        out.square().sum().backward()
                del out
            with model.no_sync():
                (model(_micro(rank, 0)).square().sum() / 2).backward()
            grads = (model(_micro(rank, 1)).square().sum() / 2).backward()
            return [p.grad(grads).numpy().copy() for p in model.parameters()]

        return run

    clean = run_ranks(2, script(0))
    gc.collect()
    before = library_objects()["ParamSlot"]
    failed = run_ranks(2, script(20))
    gc.collect()
    left = library_objects()["ParamSlot"] - before
    assert left == 0, f"{left} parameter slots of no_sync backwards that raised left behind"
    assert not HOOK._local
    for clean_grads, failed_grads in zip(clean, failed, strict=True):
        for a, b in zip(clean_grads, failed_grads, strict=True):
            np.testing.assert_array_equal(b, a)


def test_a_no_sync_backward_after_a_synced_one_raised_runs():
    """A synced backward stopped by a raising tensor hook on every rank, then ``no_sync``
    micro-batches: each returns its local gradients, as torch's accumulate into ``.grad``
    (a stale entry of the raised backward, found under the reused ``id`` of a later
    ``Gradients``, made one fail with ``ValueError: list.remove(x): x not in list``)."""

    def run(rank: int):
        model = DDP(_linear(rg))
        out = model(_micro(rank, 3))
        out.register_hook(_raise)
        with pytest.raises(UserHookError):
            out.square().sum().backward()
        del out
        found = []
        for k in range(4):
            with model.no_sync():
                grads = model(_micro(rank, k)).square().sum().backward()
            found.append(model.module.weight.grad(grads).numpy().copy())
        return found

    for rank, found in enumerate(run_ranks(2, run)):
        for k, got in enumerate(found):
            reference = _linear(torch)
            reference(torch.tensor(_micro(rank, k).numpy())).square().sum().backward()
            np.testing.assert_allclose(got, reference.weight.grad.numpy(), rtol=1e-12)


def _torch_mean_gradient(k: int) -> np.ndarray:
    """The weight gradient DDP's mean all-reduce gives at micro-batch ``k`` of both ranks."""
    total = []
    for rank in range(2):
        reference = _linear(torch)
        reference(torch.tensor(_micro(rank, k).numpy())).square().sum().backward()
        total.append(reference.weight.grad.numpy())
    return (total[0] + total[1]) / 2


def test_a_synced_backward_that_raised_on_every_rank_leaves_the_next_steps_synced():
    """A tensor hook raises in a synced backward on both ranks (before any gradient is
    ready), five times, each followed by synced steps: each step's gradients are the mean of
    both ranks' of that step, as torch's DDP gives after such a backward. Before, the rank
    that began its next backward first was paired with the other's raising one: that step
    failed on one rank, and from then on each rank's step N was averaged with the other's
    step N - 1 or N + 1, with no error."""

    def run(rank: int):
        model = DDP(_linear(rg))
        found = []
        for _ in range(5):
            out = model(_micro(rank, 3))
            out.register_hook(_raise)
            with pytest.raises(UserHookError):
                out.square().sum().backward()
            del out
            for k in range(3):
                grads = model(_micro(rank, k)).square().sum().backward()
                found.append((k, model.module.weight.grad(grads).numpy().copy()))
        return found

    expected = [_torch_mean_gradient(k) for k in range(3)]
    for found in run_ranks(2, run):
        for k, got in found:
            np.testing.assert_allclose(got, expected[k], rtol=1e-12)
