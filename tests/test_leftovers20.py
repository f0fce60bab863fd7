"""Small defects found against torch 2.13 (leftovers20): each test compares with torch."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.tensor.strides import copy_order

F = rg.nn.functional


# -- (1) a fill through overlapping unfold windows / as_strided positions ------------------------
def test_copy_order_is_torch_s_copy_into_overlapping_strides():
    """The position torch's copy writes last into each memory location (what CopySlices'
    backward keeps) is the one of the highest copy_order."""
    cases = [((2, 1, 3), (1, 1, 1)), ((3, 2), (1, 1)), ((2, 3), (2, 1)), ((2, 2, 2), (1, 2, 1))]
    cases += [((3, 3), (1, 2)), ((2, 3, 1), (2, 1, 1)), ((4,), (1,))]
    for shape, strides in cases:
        size = sum((n - 1) * s for n, s in zip(shape, strides)) + 1
        storage = torch.full((size,), -1, dtype=torch.int64)
        storage.as_strided(shape, strides).copy_(torch.arange(int(np.prod(shape))).reshape(shape))
        order = copy_order(shape, strides).reshape(-1)
        at = [sum(i * s for i, s in zip(idx, strides)) for idx in np.ndindex(*shape)]
        last = {}
        for position in np.argsort(order):
            last[at[position]] = position
        assert [last[k] for k in range(size)] == storage.tolist(), (shape, strides)


def _fill_through_view(lib, values, view, mask, op):
    x = lib.tensor(values, requires_grad=True)
    base = x * 1.0
    v = view(base)
    if op == "masked_fill_":
        v.masked_fill_(lib.tensor(mask), 7.0)
    else:
        index = np.argwhere(mask)
        v.index_put_(
            tuple(lib.tensor(index[:, k]) for k in range(index.shape[1])),
            lib.tensor(np.arange(1.0, 1.0 + len(index), dtype=np.float64) * 100),
        )
    weights = lib.tensor(np.arange(1.0, 1.0 + values.size).reshape(values.shape) * 10)
    loss = (base * weights).sum()
    if lib is torch:
        loss.backward()
        return base.detach().numpy(), x.grad.numpy()
    grads = loss.backward()
    return base.numpy(), x.grad(grads).numpy()


@pytest.mark.parametrize(
    ("shape", "view", "marked"),
    [
        ((4, 1), lambda b: b.unfold(0, 3, 1), [(0, 0, 1)]),  # torch: location 1's gradient 0
        ((4, 1), lambda b: b.unfold(0, 3, 1), [(1, 0, 0)]),  # ... and here its old value's
        ((4, 1), lambda b: b.unfold(0, 3, 1), [(0, 0, 2)]),
        ((4, 2), lambda b: b.unfold(0, 3, 1), [(0, 1, 1)]),
        ((5, 4), lambda b: b.unfold(1, 3, 1), [(0, 1, 0), (2, 0, 1), (4, 1, 2)]),
        ((2, 4), lambda b: b.as_strided((1, 3, 3), (1, 1, 2), 0), [(0, 1, 0), (0, 0, 2)]),
        ((3, 3), lambda b: b.as_strided((3, 3), (1, 2), 1), [(0, 2), (1, 0), (2, 1)]),
    ],
)
@pytest.mark.parametrize("op", ["masked_fill_", "index_put_"])
def test_a_fill_through_overlapping_positions_keeps_torch_s_gradient(shape, view, marked, op):
    torch.manual_seed(0)
    values = np.random.default_rng(0).standard_normal(shape).round(2)
    mask = np.zeros(tuple(view(torch.zeros(shape)).shape), dtype=bool)
    for position in marked:
        mask[position] = True
    expected = _fill_through_view(torch, values, view, mask, op)
    got = _fill_through_view(rg, values, view, mask, op)
    np.testing.assert_allclose(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1])


# -- (2) conv_transpose with output_padding --------------------------------------------------------
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_conv_transpose_with_output_padding_matches_torch_with_gradients(spatial):
    rng = np.random.default_rng(spatial)
    name = f"conv_transpose{spatial}d"
    for stride, dilation, groups in [(2, 1, 1), (3, 2, 2), (1, 2, 1), (2, 2, 2)]:
        output_padding = max(stride, dilation) - 1  # the largest torch accepts
        x = rng.standard_normal((2, 4) + (3,) * spatial)
        w = rng.standard_normal((4, 3) + (2,) * spatial)
        b = rng.standard_normal(3 * groups)
        kwargs = dict(
            stride=stride, padding=1, output_padding=output_padding, groups=groups,
            dilation=dilation,
        )  # fmt: skip
        xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        yt = getattr(torch.nn.functional, name)(xt, wt, bt, **kwargs)
        seed = rng.standard_normal(tuple(yt.shape))
        yt.backward(torch.tensor(seed))
        xr, wr, br = (rg.tensor(a).require_grad() for a in (x, w, b))
        yr = getattr(F, name)(xr, wr, br, **kwargs)
        assert tuple(yr.shape) == tuple(yt.shape), kwargs
        np.testing.assert_allclose(yr.numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-10)
        grads = (yr * rg.tensor(seed)).sum().backward()
        for ours, theirs in ((xr, xt), (wr, wt), (br, bt)):
            np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), atol=1e-10)


# -- (3) a GPU asked of a machine or backend without one -------------------------------------------
def test_cuda_without_a_gpu_says_what_torch_says():
    if rg.cuda.is_available():
        pytest.skip("a CUDA device is present: the refusal names the backend instead")
    x = rg.ones(2)
    for move in (x.cuda, lambda: x.to("cuda"), lambda: rg.zeros(2, device="cuda")):
        # torch's CPU build raises AssertionError, a build without a driver RuntimeError
        with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
            move()
        with pytest.raises(RuntimeError, match=r"rg.cuda.is_available\(\) is False"):
            move()
        with pytest.raises(rg.DeviceUnavailableError):
            move()
    assert x.device.type == "cpu" and (x + 1).tolist() == [2.0, 2.0]  # still usable


# -- (4) cat and stack of a NumPy array ------------------------------------------------------------
@pytest.mark.parametrize("name", ["cat", "stack"])
@pytest.mark.parametrize("position", [0, 1])
def test_cat_and_stack_refuse_a_numpy_array_anywhere_as_torch(name, position):
    entries = [torch.ones(3), torch.ones(3)]
    entries[position] = np.ones(3)
    with pytest.raises(TypeError) as theirs:
        getattr(torch, name)(entries)
    ours_entries = [rg.ones(3), rg.ones(3)]
    ours_entries[position] = np.ones(3)
    with pytest.raises(rg.DTypeError) as ours:
        getattr(rg, name)(ours_entries)
    assert str(theirs.value) in str(ours.value)  # "expected Tensor as element 1 ..."
    assert getattr(rg, name)([rg.ones(3), rg.ones(3)]).numel() == 6


# -- (5, 6) optimizer state dicts, weights_only loads of NumPy values ----------------------------
def test_optimizer_state_dict_holds_tensors_and_round_trips_weights_only():
    rg.manual_seed(0)
    model = rg.nn.Linear(3, 2)
    optimizer = rg.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.step(model(rg.ones(4, 3)).square().sum().backward())
    saved = optimizer.state_dict()
    for entry in saved["state"].values():
        assert all(isinstance(value, rg.Tensor) for value in entry.values()), entry
    kept = saved["state"][0]["exp_avg"].clone()
    optimizer.step(model(rg.ones(4, 3)).square().sum().backward())  # a copy: left alone
    np.testing.assert_array_equal(saved["state"][0]["exp_avg"].numpy(), kept.numpy())
    buffer = io.BytesIO()
    rg.save(saved, buffer)
    for loaded in (
        rg.load(io.BytesIO(buffer.getvalue()), weights_only=True),
        torch.load(io.BytesIO(buffer.getvalue()), weights_only=True),
    ):
        for number, entry in saved["state"].items():
            for key, value in entry.items():
                got = loaded["state"][number][key]
                np.testing.assert_array_equal(np.asarray(got), value.numpy(), err_msg=key)
    restored = rg.optim.Adam(rg.nn.Linear(3, 2).parameters(), lr=0.1)
    restored.load_state_dict(rg.load(io.BytesIO(buffer.getvalue())))
    assert restored.state_dict()["state"][1]["step"].item() == 2


@pytest.mark.parametrize("value", [np.float64(1.5), np.int64(3), np.ones(2)])
def test_weights_only_load_of_numpy_values_refuses_as_torch(value):
    for save in (torch.save, rg.save):
        buffer = io.BytesIO()
        save({"v": value}, buffer)
        data = buffer.getvalue()
        if save is rg.save and isinstance(value, np.ndarray):
            # rg.save stores an array as a tensor: torch reads it, and so does rg.load
            assert torch.load(io.BytesIO(data))["v"].tolist() == value.tolist()
            assert rg.load(io.BytesIO(data))["v"].tolist() == value.tolist()
            continue
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
            torch.load(io.BytesIO(data), weights_only=True)
        with pytest.raises(pickle.UnpicklingError, match=r"Weights only load failed.*numpy"):
            rg.load(io.BytesIO(data), weights_only=True)
        expected = torch.load(io.BytesIO(data), weights_only=False)["v"]
        got = rg.load(io.BytesIO(data), weights_only=False)["v"]
        assert type(got) is type(expected) and np.array_equal(got, expected)


# -- (7) histc and bincount are not differentiable -----------------------------------------------
def test_bincount_weights_in_the_graph_refuse_backward_as_torch():
    weights = [0.5, 1.5, 2.5]
    theirs = torch.bincount(torch.tensor([0, 1, 1]), torch.tensor(weights, requires_grad=True))
    w = rg.tensor(weights).require_grad()
    ours = rg.bincount(rg.tensor([0, 1, 1]), weights=w)
    assert ours.requires_grad == theirs.requires_grad is True
    assert ours.tolist() == theirs.tolist()
    with pytest.raises(RuntimeError, match="bincount"):
        theirs.sum().backward()
    with pytest.raises(rg.AutodiffError, match=r"bincount.*not implemented"):
        ours.sum().backward()
    plain = rg.bincount(rg.tensor([0, 1, 1]), weights=rg.tensor(weights))
    assert not plain.requires_grad and plain.tolist() == theirs.tolist()


def test_histc_of_a_tensor_that_requires_grad_is_outside_the_graph_as_torch():
    values = [0.5, 1.5, 2.5, 2.7]
    theirs = torch.histc(torch.tensor(values, requires_grad=True), bins=3, min=0, max=3)
    ours = rg.histc(rg.tensor(values).require_grad(), bins=3, min=0, max=3)
    assert ours.requires_grad == theirs.requires_grad is False
    assert ours.tolist() == theirs.tolist()
    with pytest.raises(rg.AutodiffError, match="does not require grad"):
        ours.sum().backward()


def test_the_new_errors_are_in_the_hierarchy():
    for kind, builtins in (
        (rg.DeviceUnavailableError, (TypeError, RuntimeError, AssertionError)),
        (rg.serialization.WeightsOnlyError, (ValueError, pickle.UnpicklingError)),
    ):
        assert issubclass(kind, rg.RetrogradError)
        assert all(issubclass(kind, b) for b in builtins)
