"""Regressions found by fuzzing round 18 (``tests/fuzz18_cases.py``), each checked against
torch 2.13 or the arithmetic it states."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def test_max_pool_window_over_padding_alone_points_into_the_input():
    # width 1, padding 1, dilation 2: every window's columns are -1 and 1 (kernel 3: -1, 1,
    # 3), padding alone. The NumPy path's fast branch took the padding's position for the
    # index (-2 for the first window), which max_unpool then refused.
    x = np.arange(7.0).reshape(1, 1, 7, 1)
    args = dict(kernel_size=3, stride=3, padding=1, dilation=2, ceil_mode=True)
    want = torch.nn.functional.max_pool2d(torch.tensor(x), **args)
    xt = rg.tensor(x, requires_grad=True)
    y, i = rg.nn.functional.max_pool2d(xt, return_indices=True, **args)
    np.testing.assert_array_equal(y.numpy(), want.numpy())  # -inf: padding alone
    assert ((i.numpy() >= 0) & (i.numpy() < 7)).all(), i.numpy()
    u = rg.nn.functional.max_unpool2d(y, i, 3, stride=3, padding=1, output_size=(7, 1))
    assert u.shape == (1, 1, 7, 1) and int(np.isneginf(u.numpy()).sum()) == 3
    # the gradient of every window goes into a cell of the input
    (g,) = rg.autograd.grad(y.sum(), [xt])
    assert g.numpy().sum() == 3.0


@pytest.mark.parametrize("return_indices", [False, True])
def test_adaptive_max_pool_of_an_empty_batch(return_indices):
    # with return_indices, each window was reshaped to [N, C, -1], which an empty batch
    # cannot infer: a ShapeError where torch returns empty results
    x = np.zeros((0, 2, 7, 3))
    want = torch.nn.functional.adaptive_max_pool2d(torch.tensor(x), (None, 2), return_indices)
    got = rg.nn.functional.adaptive_max_pool2d(rg.tensor(x), (None, 2), return_indices)
    want = want if return_indices else (want,)
    got = got if return_indices else (got,)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape) == (0, 2, 7, 2)
        assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1]
    y = rg.nn.functional.adaptive_max_pool1d(rg.tensor(np.zeros((0, 2, 4))), 3, True)
    assert tuple(y[0].shape) == tuple(y[1].shape) == (0, 2, 3)


@pytest.mark.parametrize("shape", [(0, 2, 1, 1), (0, 3, 1)])
def test_instance_norm_of_an_empty_batch_still_checks_its_spatial_size(shape):
    # one spatial element per channel cannot be normalized when training: torch refuses it
    # whatever the batch; an empty batch returned an empty result
    with pytest.raises(ValueError, match="spatial element"):
        torch.nn.functional.instance_norm(torch.zeros(shape))
    with pytest.raises(rg.RetrogradError, match=r"instance_norm.*spatial element"):
        rg.nn.functional.instance_norm(rg.zeros(shape))
    with pytest.raises(rg.RetrogradError, match="spatial element"):
        getattr(rg.nn, f"InstanceNorm{len(shape) - 2}d")(shape[1])(rg.zeros(shape))


@pytest.mark.parametrize(
    ("shape", "size"), [((1, 2, 3, 3), (2,)), ((1, 2, 3, 3), [2]), ((1, 2, 3, 3), (2, 2, 2))]
)
def test_interpolate_refuses_a_size_of_another_length_than_the_spatial_dims(shape, size):
    # a one-entry size was repeated over every spatial dimension; torch refuses it
    with pytest.raises(ValueError, match="spatial dimensions"):
        torch.nn.functional.interpolate(torch.zeros(shape), size=size)
    with pytest.raises(rg.ShapeError, match=r"interpolate.*size"):
        rg.nn.functional.interpolate(rg.zeros(shape), size=size)
    with pytest.raises(rg.ShapeError, match=r"interpolate.*size"):
        rg.nn.Upsample(size=size)(rg.zeros(shape))
    # (one entry for one spatial dimension, and an int for any number: as torch)
    assert rg.nn.functional.interpolate(rg.zeros((1, 2, 3)), size=(2,)).shape == (1, 2, 2)
    assert rg.nn.functional.interpolate(rg.zeros(shape), size=2).shape == (1, 2, 2, 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda lib: lib.nn.functional.unfold(lib.zeros((1, 1, 4, 4)), (2,)),
        lambda lib: lib.nn.functional.unfold(lib.zeros((1, 1, 4, 4)), 2, stride=(1,)),
        lambda lib: lib.nn.functional.unfold(lib.zeros((1, 1, 4, 4)), 2, padding=(1,)),
        lambda lib: lib.nn.functional.unfold(lib.zeros((1, 1, 4, 4)), 2, dilation=(1,)),
        lambda lib: lib.nn.functional.fold(lib.zeros((1, 4, 9)), (4,), 2),
        lambda lib: lib.nn.functional.fold(lib.zeros((1, 4, 9)), 4, (2,)),
        lambda lib: lib.nn.functional.adaptive_avg_pool2d(lib.zeros((1, 1, 4, 4)), (2,)),
        lambda lib: lib.nn.functional.adaptive_avg_pool3d(lib.zeros((1, 1, 4, 4, 4)), (2,)),
        lambda lib: lib.nn.AdaptiveAvgPool2d((2,))(lib.zeros((1, 1, 4, 4))),
    ],
)
def test_one_entry_tuples_are_not_repeated_where_torch_refuses_them(call):
    # unfold/fold's arguments and the adaptive average pools' output_size repeated a
    # one-entry tuple over every dimension; torch refuses it there (the convolutions and
    # the other pools repeat it, as torch's do)
    with pytest.raises(RuntimeError):
        call(torch)
    with pytest.raises(rg.ShapeError):
        call(rg)


def test_one_entry_tuples_still_repeat_where_torch_repeats_them():
    for lib in (torch, rg):
        assert tuple(lib.nn.functional.adaptive_avg_pool1d(lib.zeros((1, 1, 4)), (2,)).shape) == (
            1,
            1,
            2,
        )
        x = lib.zeros((1, 1, 4, 4))
        assert tuple(lib.nn.functional.max_pool2d(x, (2,)).shape) == (1, 1, 2, 2)
        assert tuple(lib.nn.functional.avg_pool2d(x, (2,)).shape) == (1, 1, 2, 2)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_same_padding_with_a_mode_and_a_one_entry_dilation(mode):
    # Conv3d(padding='same', dilation=(1,), padding_mode=mode) zipped the one-entry dilation
    # with the kernel size: only the last dimension was padded, the output not 'same'.
    # (torch's module has the same fault, padding the first dimension: the reference is
    # torch's module with dilation=1, which means the same)
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 3, 5))
    torch.manual_seed(0)
    want_m = torch.nn.Conv3d(2, 1, 2, padding="same", dilation=1, padding_mode=mode).double()
    m = rg.nn.Conv3d(2, 1, 2, padding="same", dilation=(1,), padding_mode=mode).double()
    m.load_state_dict({k: rg.tensor(v.detach().numpy()) for k, v in want_m.state_dict().items()})
    got = m(rg.tensor(x))
    want = want_m(torch.tensor(x)).detach().numpy()
    assert got.shape == want.shape == (1, 1, 5, 3, 5)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
