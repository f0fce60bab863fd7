"""Float32 values and first gradients that are torch's bits on the torch inner backend, where
retrograd runs torch's kernels (7 December): sums and means over several dims (one reduction,
not a chain of one-dim ones), the 2-norm (torch's norm kernel) and the ops built on it, and
``rms_norm`` (torch's rsqrt). The NumPy backend's bits may differ from torch's."""

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch

pytestmark = pytest.mark.skipif(
    not on_torch(), reason="torch's bits are the torch inner backend's to give"
)

INPUTS = {
    "normal": lambda g, shape: g.standard_normal(shape),
    "large": lambda g, shape: 1e3 * g.standard_normal(shape),
    "zeros": lambda g, shape: g.standard_normal(shape) * (g.random(shape) > 0.3),
}


def _bits(program, *shapes, kind="normal", seed=0):
    """Each of ``program``'s value and gradients (of ``(out * v).sum()``) under retrograd and
    under torch, as float32 arrays."""
    g = np.random.default_rng(seed)
    arrays = [INPUTS[kind](g, s).astype(np.float32) for s in shapes]
    results = []
    for lib in (rg, torch):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = program(lib, *xs)
        v = lib.tensor(
            np.random.default_rng(seed + 1).standard_normal(tuple(out.shape)).astype(np.float32)
        )
        grads = lib.autograd.grad((out * v).sum(), xs)
        results.append([out.detach().numpy()] + [q.numpy() for q in grads])
    return results


def _assert_same_bits(program, *shapes):
    for seed, kind in enumerate(INPUTS):
        ours, theirs = _bits(program, *shapes, kind=kind, seed=seed)
        for a, b in zip(ours, theirs):
            assert a.dtype == b.dtype == np.float32
            np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32), err_msg=kind)


@pytest.mark.parametrize(
    "program",
    [
        lambda lib, x: x.sum((1, 2)),
        lambda lib, x: x.mean((1, 2)),
        lambda lib, x: x.mean((0, 2), keepdim=True),
        lambda lib, x: lib.nansum(x, dim=(0, 1)),
    ],
    ids=["sum", "mean", "mean_keepdim", "nansum"],
)
def test_reductions_over_several_dims_are_torchs(program):
    _assert_same_bits(program, (3, 17, 29))


@pytest.mark.parametrize(
    "program",
    [
        lambda lib, x: lib.linalg.vector_norm(x, dim=-1),
        lambda lib, x: x.norm(p=2, dim=1, keepdim=True),
        lambda lib, x: lib.linalg.matrix_norm(x),
        lambda lib, x: lib.nn.functional.normalize(x, dim=-1),
        lambda lib, x: lib.nn.functional.cosine_similarity(x[0], x[1], dim=-1),
    ],
    ids=["vector_norm", "norm_p2", "frobenius", "normalize", "cosine_similarity"],
)
def test_two_norms_are_torchs(program):
    _assert_same_bits(program, (2, 9, 31))


@pytest.mark.parametrize("with_weight", [False, True])
def test_rms_norm_is_torchs(with_weight):
    if with_weight:
        program = lambda lib, x, w: lib.nn.functional.rms_norm(x, (32,), w)  # noqa: E731
        _assert_same_bits(program, (4, 6, 32), (32,))
    else:
        program = lambda lib, x: lib.nn.functional.rms_norm(x, (6, 32), eps=1e-6)  # noqa: E731
        _assert_same_bits(program, (4, 6, 32))
