"""Differences from torch that earlier rounds found and left (CHANGELOG, "Differences left by
earlier rounds, closed (2)"): each expected value comes from torch, and each test failed on
the old code."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


# -- Tensor.nonzero() is torch's [count, ndim] -------------------------------------------------
@pytest.mark.parametrize(
    "data",
    [
        [[0.0, 1.0, 0.0], [2.0, 0.0, -3.0]],
        [True, False, True, True],
        [[[0, 1], [1, 0]], [[0, 0], [2, 0]]],
        [[0.0, 0.0], [0.0, 0.0]],
        3.5,
        0.0,
    ],
)
def test_nonzero_and_argwhere_give_torchs_forms(data):
    # Tensor.nonzero() returned Burn's list of per-dimension index tensors; torch's is the
    # [count, ndim] matrix, as torch.nonzero and argwhere
    ours, theirs = rg.tensor(data), torch.tensor(data)
    for got, want in (
        (ours.nonzero(), theirs.nonzero()),
        (ours.nonzero(as_tuple=False), theirs.nonzero(as_tuple=False)),
        (rg.nonzero(ours), torch.nonzero(theirs)),
        (rg.argwhere(ours), torch.argwhere(theirs)),
        (ours.argwhere(), theirs.argwhere()),
    ):
        assert isinstance(got, rg.Tensor) and got.dtype == "int64"
        assert got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for got, want in (
        (ours.nonzero(as_tuple=True), theirs.nonzero(as_tuple=True)),
        (rg.nonzero(ours, as_tuple=True), torch.nonzero(theirs, as_tuple=True)),
    ):
        assert type(got) is tuple and len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == tuple(w.shape)
            np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_the_common_mask_nonzero_squeeze_line_runs_as_torchs():
    # Transformer-XL's adaptive softmax: ``indices_i = mask_i.nonzero().squeeze()``
    target = [3, 7, 1, 9, 4]
    got = ((rg.tensor(target) >= 2) & (rg.tensor(target) < 8)).nonzero().squeeze()
    want = ((torch.tensor(target) >= 2) & (torch.tensor(target) < 8)).nonzero().squeeze()
    assert got.tolist() == want.tolist() == [0, 1, 4]
    hidden = rg.arange(10.0).reshape(5, 2)
    assert hidden.index_select(0, got).tolist() == [[0.0, 1.0], [2.0, 3.0], [8.0, 9.0]]


@pytest.mark.parametrize("flag", [None, 1, "yes"])
def test_nonzero_refuses_an_as_tuple_that_is_not_a_bool(flag):
    with pytest.raises(TypeError):
        torch.tensor([1.0]).nonzero(as_tuple=flag)
    for call in (lambda: rg.tensor([1.0]).nonzero(as_tuple=flag),
                 lambda: rg.nonzero(rg.tensor([1.0]), as_tuple=flag)):  # fmt: skip
        with pytest.raises(rg.DTypeError, match=r"nonzero.*as_tuple"):  # torch's TypeError
            call()


# -- linalg.pinv(hermitian=True) ---------------------------------------------------------------
def _pinv_both(a, w, **kwargs):
    results = []
    for lib in (rg, torch):
        x = lib.tensor(a, dtype=lib.float64, requires_grad=True)
        p = lib.linalg.pinv(x, hermitian=True, **kwargs)
        (g,) = lib.autograd.grad((p * lib.tensor(w, dtype=lib.float64)).sum(), [x])
        results.append((p.detach().numpy(), g.numpy()))
    return results


@pytest.mark.parametrize("rank_deficient", [False, True])
def test_pinv_hermitian_gives_torchs_values_and_gradients(rank_deficient):
    # hermitian=True was refused by name; torch computes it by eigh
    rng = np.random.default_rng(1)
    b = rng.standard_normal((3, 4, 4))
    if rank_deficient:  # symmetric matrices of rank 2, indefinite
        u = rng.standard_normal((3, 4, 2))
        a = u @ np.diag([2.0, -1.5]) @ u.transpose(0, 2, 1)
    else:
        a = b + b.transpose(0, 2, 1)
    w = rng.standard_normal((3, 4, 4))
    (got, got_grad), (want, want_grad) = _pinv_both(a, w)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)
    if not rank_deficient:  # the gradient holds where the rank is stable
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-8, atol=1e-10)


def test_pinv_hermitian_reads_the_lower_triangle_and_its_tolerances():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 5))  # not symmetric: torch reads the lower triangle
    got = rg.linalg.pinv(rg.tensor(a), hermitian=True).numpy()
    want = torch.linalg.pinv(torch.tensor(a), hermitian=True).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)
    s = np.diag([4.0, -2.0, 1e-3, 0.0])  # atol / rtol cut the small eigenvalue as torch's
    for kwargs in ({"atol": 1e-2}, {"rtol": 1e-2}, {"atol": 1e-4, "rtol": 0.0}):
        got = rg.linalg.pinv(rg.tensor(s), hermitian=True, **kwargs).numpy()
        want = torch.linalg.pinv(torch.tensor(s), hermitian=True, **kwargs).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError):
        torch.linalg.pinv(torch.ones(2, 3), hermitian=True)
    with pytest.raises(rg.ShapeError, match=r"linalg\.pinv"):
        rg.linalg.pinv(rg.ones(2, 3), hermitian=True)


# -- var / std over a slice holding an infinity -------------------------------------------------
@pytest.mark.parametrize(
    "data",
    [
        [1.0, math.inf, 3.0],
        [-math.inf, 2.0, 5.0, 1.0],
        [math.inf, math.inf, 2.0],
        [[1.0, -math.inf, 3.0], [1.0, 2.0, 4.0]],
    ],
)
@pytest.mark.parametrize("op", ["var", "std", "var_mean"])
@pytest.mark.parametrize("correction", [0, 1])
def test_var_gradient_over_an_infinity_is_torchs(data, op, correction):
    # the mean's path in the composed var put inf - inf (NaN) at every element of the slice;
    # torch's var_backward, 2 (x - mean) / (n - c), is -inf or +inf at the finite ones
    results = []
    for lib in (rg, torch):
        x = lib.tensor(data, dtype=lib.float64, requires_grad=True)
        fn = getattr(lib, op)
        out = fn(x, dim=-1, correction=correction)
        out = out[0] if op == "var_mean" else out
        w = lib.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(out.shape), dtype=lib.float64)
        (g,) = lib.autograd.grad((out * w).sum(), [x])
        results.append((out.detach().numpy(), g.numpy()))
    (got, got_grad), (want, want_grad) = results
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=0)


def test_var_second_derivative_stays_torchs():
    rng = np.random.default_rng(3)
    data, w = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    for dim, correction in ((1, 1), (0, 0), (None, 2), ((0, 1), 1)):
        results = []
        for lib in (rg, torch):
            x = lib.tensor(data, dtype=lib.float64, requires_grad=True)
            v = x.var(dim=dim, correction=correction).sum()
            (g,) = lib.autograd.grad(v, [x], create_graph=True)
            (h,) = lib.autograd.grad((g * lib.tensor(w)).sum(), [x])
            results.append((g.detach().numpy(), h.numpy()))
        (got_g, got_h), (want_g, want_h) = results
        np.testing.assert_allclose(got_g, want_g, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got_h, want_h, rtol=1e-12, atol=1e-14)


# -- DataLoader(timeout=) ---------------------------------------------------------------------
class _SlowAt:
    """A map-style dataset of 4 one-element samples; index ``slow`` takes ``delay`` seconds."""

    def __init__(self, lib, slow=1, delay=1.0):
        self.lib, self.slow, self.delay = lib, slow, delay

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == self.slow:
            time.sleep(self.delay)
        return self.lib.tensor([float(i)])


def _read_with_timeout(lib, num_workers):
    # (margins of seconds: on a machine whose cores are all busy, a worker can take more than
    # a quarter of a second to hand back even the fast first batch)
    loader = lib.utils.data.DataLoader(
        _SlowAt(lib, delay=4.0), batch_size=1, num_workers=num_workers, timeout=1.5
    )
    batches, it = [], iter(loader)
    with pytest.raises(RuntimeError) as caught:
        for _ in range(4):
            batches.append(next(it).tolist())
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:  # torch's worker process, not left to a later test's census
        shutdown()
    return batches, str(caught.value)


def test_dataloader_timeout_raises_as_torchs_workers_do():
    # timeout was accepted and ignored: a batch that took longer than it came back anyway
    want = _read_with_timeout(torch, 1)
    got = _read_with_timeout(rg, 1)
    assert got == want == ([[[0.0]]], "DataLoader timed out after 1.5 seconds")


def test_dataloader_timeout_keeps_the_late_batch_for_the_next_call():
    loader = rg.utils.data.DataLoader(
        _SlowAt(rg, slow=0, delay=0.4), batch_size=2, num_workers=2, timeout=0.1
    )
    it = iter(loader)
    with pytest.raises(rg.RetrogradError, match=r"timed out after 0\.1 seconds"):
        next(it)
    time.sleep(0.5)  # torch's worker puts the batch in its queue meanwhile: the next call has it
    assert [next(it).tolist(), next(it).tolist()] == [[[0.0], [1.0]], [[2.0], [3.0]]]
    with pytest.raises(StopIteration):
        next(it)
    fast = rg.utils.data.DataLoader(list(range(5)), batch_size=2, num_workers=1, timeout=5)
    assert [b.tolist() for b in fast] == [[0, 1], [2, 3], [4]]


def test_dataloader_timeout_without_workers_is_refused_when_iterated_as_torchs():
    with pytest.raises(AssertionError, match="timeout == 0"):
        iter(torch.utils.data.DataLoader(list(range(3)), timeout=1.0))
    loader = rg.utils.data.DataLoader(list(range(3)), timeout=1.0)
    with pytest.raises(
        rg.InvalidArgumentError, match=r"DataLoader: timeout=1\.0 needs num_workers"
    ):
        iter(loader)
