"""NumPy's compiled 2-d max pooling (channels-last, :mod:`retrograd.backend.compiled_pool`)
against its NumPy path, bit for bit: values, positions and the backward's adds, with ties,
NaN, infinities, padding, dilation, ceil mode and overlapping windows; and against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd.backend import numpy_nn

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.numpy_only

RNG = np.random.default_rng(27)
NUMPY = rg.NumpyBackend()

# name: (input shape [N, C, H, W], kernel, stride, padding, dilation, ceil_mode)
POOLS = {
    "2x2": ((3, 5, 8, 6), (2, 2), (2, 2), (0, 0), (1, 1), False),
    "3x3-overlapping": ((2, 4, 9, 7), (3, 3), (1, 2), (1, 1), (1, 1), False),
    "dilated-padded": ((2, 3, 11, 10), (3, 2), (2, 1), (1, 1), (2, 3), False),
    "ceil-mode": ((2, 3, 7, 9), (2, 3), (2, 2), (0, 1), (1, 1), True),
}


def channels_last_input(shape, dtype, specials):
    """A channels-last ``[N, C, H, W]`` array of small integers (many ties), with NaN and
    infinities in some windows when ``specials``."""
    n, c, h, w = shape
    x = RNG.integers(-3, 3, (n, h, w, c)).astype(dtype)
    if specials:
        x[0, 0, 0, 0] = np.nan
        x[0, 1, 1, 0] = np.nan
        x[0, :3, :3, 1] = -np.inf
        x[1, 2, 3, 2] = np.inf
    return np.moveaxis(x, -1, 1)


def run_pool(x, params, grad, compiled, monkeypatch):
    monkeypatch.setattr(numpy_nn, "COMPILED_POOL_MIN_SIZE", 0 if compiled else 1 << 62)
    best, indices = NUMPY.max_pool(x, *params)
    return best, indices, NUMPY.max_pool_backward(grad, indices, x.shape[2:], *params)


@pytest.mark.parametrize("specials", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", POOLS)
def test_the_compiled_max_pool_gives_numpys_bits(name, dtype, specials, monkeypatch):
    shape, *params = POOLS[name]
    x = channels_last_input(shape, dtype, specials)
    out_shape = NUMPY.max_pool(x, *params)[0].shape
    grad = RNG.standard_normal(out_shape).astype(dtype)
    for grad_layout in (grad, np.moveaxis(np.ascontiguousarray(np.moveaxis(grad, 1, -1)), -1, 1)):
        compiled = run_pool(x, params, grad_layout, True, monkeypatch)
        numpy = run_pool(x, params, grad_layout, False, monkeypatch)
        for a, b in zip(compiled, numpy):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype
            assert a.shape == b.shape
        assert numpy_nn.channels_last(compiled[0]) and numpy_nn.channels_last(compiled[2])
        with torch.no_grad():
            values, positions = torch.nn.functional.max_pool2d(
                torch.from_numpy(x), *params, return_indices=True
            )
        np.testing.assert_array_equal(compiled[0], values.numpy())
        np.testing.assert_array_equal(compiled[1], positions.numpy())


@pytest.mark.parametrize(
    "shape, kernel, stride",
    [
        ((3, 4, 9, 9), (3, 3), (1, 1)),
        ((2, 3, 11), (3,), (2,)),
        ((2, 2, 5, 6, 7), (2, 2, 2), (1, 2, 1)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_channels_first_max_pool_backward_adds_as_np_add_at(shape, kernel, stride, dtype):
    """The compiled backward of channels-first pooling (any rank, overlapping windows): the
    same bits as ``np.add.at`` over the flat gradient, the reference order."""
    backend = rg.NumpyBackend()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    zeros, ones = (0,) * len(kernel), (1,) * len(kernel)
    values, indices = backend.max_pool(x, kernel, stride, zeros, ones, False)
    grad = rng.standard_normal(values.shape).astype(dtype)
    out = backend.max_pool_backward(grad, indices, shape[2:], kernel, stride, zeros, ones, False)
    planes, cells = shape[0] * shape[1], int(np.prod(shape[2:]))
    flat = indices.reshape(planes, -1) + (np.arange(planes) * cells)[:, None]
    expected = np.zeros(planes * cells, dtype)
    np.add.at(expected, flat.ravel(), grad.ravel())
    np.testing.assert_array_equal(out, expected.reshape(out.shape))


def planes_input(shape, dtype, specials):
    """A contiguous ``[N, C, H, W]`` tensor of small integers (many ties), with -inf in whole
    windows and +inf somewhere when ``specials``."""
    x = torch.from_numpy(RNG.integers(-3, 3, shape).astype(dtype))
    if specials:
        x[0, 1, :3, :3] = -np.inf
        x[-1, -1] = -np.inf
        x[1, 2, 3, 2] = np.inf
    return x


@pytest.mark.parametrize("specials", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", [*POOLS, "resnet-stem"])
def test_torch_backends_compiled_max_pool_gives_torchs_values_and_indices(
    name, dtype, specials, monkeypatch
):
    from retrograd.backend import torch_nn

    monkeypatch.setattr(torch_nn, "COMPILED_POOL_MIN_SIZE", 0)
    shape, *params = POOLS.get(name) or ((2, 3, 16, 15), (3, 3), (2, 2), (1, 1), (1, 1), False)
    x = planes_input(shape, dtype, specials)
    assert torch_nn._compiled_max_pool2d(x, *params) is not None  # the compiled kernel ran
    values, indices = rg.TorchBackend("cpu").max_pool(x, *params)
    expected = torch.ops.aten.max_pool2d_with_indices(x, *params)
    assert torch.equal(values, expected[0]) and values.dtype == expected[0].dtype
    assert torch.equal(indices, expected[1])


@pytest.mark.parametrize("layout", ["nan", "channels-last", "strided"])
def test_torch_backends_max_pool_leaves_nan_and_other_layouts_to_torch(layout, monkeypatch):
    """Where the compiled kernel does not apply (a NaN read, whose rule is torch's; a layout
    other than contiguous planes) torch's kernel runs, with torch's results."""
    from retrograd.backend import torch_nn

    monkeypatch.setattr(torch_nn, "COMPILED_POOL_MIN_SIZE", 0)
    shape, *params = POOLS["3x3-overlapping"]
    x = planes_input(shape, "float32", True)
    if layout == "nan":
        x[0, 0, 0, 0] = x[0, 0, 0, 1] = x[1, 3, 4, 4] = np.nan
    elif layout == "channels-last":
        x = x.contiguous(memory_format=torch.channels_last)
    else:
        x = x.transpose(2, 3)
    if layout == "nan":
        assert torch_nn._compiled_max_pool2d(x, *params) is None
    values, indices = rg.TorchBackend("cpu").max_pool(x, *params)
    expected = torch.ops.aten.max_pool2d_with_indices(x, *params)
    assert torch.equal(values.isnan(), expected[0].isnan())
    assert torch.equal(values.nan_to_num(), expected[0].nan_to_num())
    assert torch.equal(indices, expected[1])
