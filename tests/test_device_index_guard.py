"""Out-of-range indices on a backend that defers its index checks, as a CUDA device does.

On a GPU, torch's index kernels stop at a device-side assert for an index out of range, and
after one every later CUDA call of the process fails: the whole session is lost, not one op.
``TorchBackend(..., deferred_index_checks=True)`` is the CPU stand-in for that device (its
checks are deferred exactly as on CUDA): these tests check that no index kernel ever receives
an index out of range there (the op returns, torch's CPU kernel would have raised at once), that
the error is raised at the next host read naming the op, and that the backend computes
correctly afterwards. The first run on an H200 lost its test session this way
(``benchmarks/gpu_session.sh``: ``indexSelectSmallIndex`` and ``scatter gather kernel index
out of bounds`` asserts).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")
F = rg.nn.functional

pytestmark = pytest.mark.backend_independent(
    "builds its own TorchBackend with deferred checks, whatever the suite's inner backend"
)


@pytest.fixture
def backend():
    return rg.Autodiff(rg.TorchBackend("cpu", deferred_index_checks=True))


def _ops(backend):
    x = rg.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4), backend=backend)
    ones = {shape: rg.ones(shape, backend=backend) for shape in ((3, 2), (2, 4))}
    bad = rg.tensor([0, 7], dtype="int64", backend=backend)
    bad_rows = rg.tensor([[0, 7], [1, 2], [0, 0]], dtype="int64", backend=backend)
    return {
        "gather": lambda: x.gather(1, bad_rows),
        "scatter": lambda: x.scatter(1, bad_rows, 1.0),
        "scatter_add": lambda: x.scatter_add(1, bad_rows, ones[(3, 2)]),
        "index_select": lambda: x.index_select(0, bad),
        "index_add": lambda: x.index_add(0, bad, ones[(2, 4)]),
        "index_copy": lambda: x.index_copy(0, bad, ones[(2, 4)]),
        "take_along_dim": lambda: x.take_along_dim(bad_rows, 1),
        "embedding": lambda: F.embedding(bad, x),
        "cross_entropy": lambda: F.cross_entropy(x[:2], bad),
        "one_hot": lambda: F.one_hot(bad, 3),
        "getitem": lambda: x[bad],
        "getitem columns": lambda: x[:, rg.tensor([1, 9], dtype="int64", backend=backend)],
    }


@pytest.mark.parametrize("name", list(_ops(rg.Autodiff(rg.TorchBackend("cpu")))))
def test_the_kernel_never_sees_the_bad_index_and_the_error_comes_at_the_host_read(backend, name):
    out = _ops(backend)[name]()  # torch's CPU kernel would have raised here
    with pytest.raises(rg.IndexOutOfRangeError, match=r"7|9"):
        out.numpy()
    # the backend is usable, and nothing stale is reported twice
    good = rg.tensor([[1.0, 2.0]], backend=backend)
    assert (good * 2).numpy().tolist() == [[2.0, 4.0]]


def test_the_gradient_of_a_bad_gather_is_reported_too(backend):
    x = rg.tensor(np.ones((2, 3), np.float32), backend=backend).require_grad()
    index = rg.tensor([[0, 5], [1, 2]], dtype="int64", backend=backend)
    grads = x.gather(1, index).sum().backward()  # no kernel saw 5, forward or backward
    with pytest.raises(rg.IndexOutOfRangeError, match="5"):
        x.grad(grads).numpy()
    index = rg.tensor([[0, 2], [1, 2]], dtype="int64", backend=backend)
    grads = x.gather(1, index).sum().backward()
    assert x.grad(grads).numpy().tolist() == [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]


def test_one_hot_checks_on_the_device_and_names_the_value(backend):
    with pytest.raises(rg.IndexOutOfRangeError, match="non-negative, got -2"):
        F.one_hot(rg.tensor([1, -2], dtype="int64", backend=backend), 3).numpy()
    with pytest.raises(rg.IndexOutOfRangeError, match="num_classes=3, got 4"):
        F.one_hot(rg.tensor([4], dtype="int64", backend=rg.NumpyBackend()), 3)  # at once
    expected = torch.nn.functional.one_hot(torch.tensor([2, 0]), 3).tolist()
    assert F.one_hot(rg.tensor([2, 0], dtype="int64", backend=backend), 3).tolist() == expected


def test_a_graph_capture_records_its_checks_and_every_replay_reports_them():
    """``rg.capture`` on CUDA replays a step through a CUDA graph: Python runs once, at the
    capture, so the checks it makes there must be reported after every replay, with the
    values that replay wrote, not once with the capture's unwritten memory."""
    from retrograd.backend.torch_backend import checks_recorded, checks_replayed

    inner = rg.TorchBackend("cpu", deferred_index_checks=True)
    indices = inner.from_data(np.array([0, 5]), None, None)
    with checks_recorded() as checks:
        inner.check_index_range(indices, 3, lambda bad: f"replayed step: index {bad}")
    assert len(checks) == 1 and not inner._pending  # nothing of the capture is pending
    for _ in range(2):  # each replay's checks are reported at the next read
        checks_replayed(checks)
        with pytest.raises(rg.IndexOutOfRangeError, match="replayed step: index 5"):
            inner.synchronize()
    inner.synchronize()
