"""Leftovers of earlier rounds, each checked against torch 2.13: memory formats (channels-last
strides and ``is_contiguous(memory_format=)``), ``StepLR`` with a step size below 1,
``load_state_dict``'s ``_IncompatibleKeys``, optimizer state after the model is cast, and the
settings lines of real training scripts."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg

nn = rg.nn
F = rg.nn.functional


# -- (1) memory formats ---------------------------------------------------------------------------
def _both(make):
    """``make(lib)`` for torch and retrograd."""
    return make(torch), make(rg)


@pytest.mark.parametrize(
    "shape",
    [(2, 3, 4, 5), (2, 1, 4, 5), (2, 3, 1, 1), (0, 3, 4, 5), (1, 3, 1, 5)],
)
def test_channels_last_strides_and_queries_are_torchs(shape):
    def probe(lib):
        x = lib.ones(*shape)
        cl = lib.channels_last
        converted = x.to(memory_format=cl)
        made = x.contiguous(memory_format=cl)
        return (
            x.is_contiguous(memory_format=cl),
            x.stride(),
            converted.stride(),
            converted.is_contiguous(memory_format=cl),
            converted.is_contiguous(),
            made.stride(),
            made.is_contiguous(memory_format=cl),
            converted.contiguous().stride(),
            converted.to(memory_format=lib.contiguous_format).is_contiguous(),
        )

    theirs, ours = _both(probe)
    assert tuple(ours) == tuple(theirs)


def test_channels_last_copies_follow_and_keep_values():
    torch.manual_seed(0)
    np.random.seed(0)
    data = np.random.standard_normal((2, 3, 4, 5))

    def probe(lib):
        x = lib.tensor(data)
        cl = lib.channels_last
        y = x.to(memory_format=cl)
        return {
            "same": y.to(memory_format=cl) is y and y.contiguous(memory_format=cl) is y,
            "clone": y.clone().stride(),
            "preserve": y.clone(memory_format=lib.preserve_format).stride(),
            "clone_cl": x.clone(memory_format=cl).stride(),
            "empty_like": lib.empty_like(y, memory_format=lib.preserve_format).stride(),
            "zeros_like": lib.zeros_like(y).stride(),
            "zeros_like_cl": lib.zeros_like(x, memory_format=cl).stride(),
            "ones_like_contig": lib.ones_like(y, memory_format=lib.contiguous_format).stride(),
            "relu": lib.relu(y).stride(),
            "sum_first": (y + x).stride(),
            "sum_second": (x + y).stride(),
            "float_cl": x.float(memory_format=cl).stride(),
            "cast_keeps": y.float().stride(),
            "to_dtype_cl": x.to(lib.float32, memory_format=cl).stride(),
            "copy": x.to("cpu", copy=True, memory_format=cl).stride(),
            "permuted": y.permute(0, 2, 3, 1).is_contiguous(),
            "reshape": y.reshape(2, -1).stride(),
            "values": (y * 2).contiguous().numpy().tolist(),
            "volume": lib.ones(2, 3, 2, 4, 5)
            .to(memory_format=lib.channels_last_3d)
            .is_contiguous(memory_format=lib.channels_last_3d),
            "volume_strides": lib.ones(2, 3, 2, 4, 5)
            .contiguous(memory_format=lib.channels_last_3d)
            .stride(),
            "other_rank": (
                lib.ones(2, 3, 4, 5, 6).is_contiguous(memory_format=cl),
                x.is_contiguous(memory_format=lib.channels_last_3d),
                x.is_contiguous(memory_format=lib.preserve_format),
            ),
        }

    theirs, ours = _both(probe)
    assert ours == theirs
    # a view that torch refuses on channels-last strides is refused here too
    with pytest.raises(RuntimeError, match="view size"):
        torch.ones(2, 3, 4, 5).to(memory_format=torch.channels_last).view(2, -1)
    with pytest.raises(rg.ShapeError, match="view size"):
        rg.ones(2, 3, 4, 5).to(memory_format=rg.channels_last).view(2, -1)


def test_memory_format_errors_name_the_op():
    with pytest.raises(TypeError):
        torch.ones(2, 3, 4, 5).is_contiguous(memory_format="channels_last")
    with pytest.raises(TypeError, match="is_contiguous: memory_format"):
        rg.ones(2, 3, 4, 5).is_contiguous(memory_format="channels_last")
    with pytest.raises(RuntimeError, match="rank 4"):
        torch.ones(2, 3, 4).clone(memory_format=torch.channels_last)
    with pytest.raises(rg.ShapeError, match="clone: required rank 4"):
        rg.ones(2, 3, 4).clone(memory_format=rg.channels_last)
    with pytest.raises(rg.ShapeError, match="like: required rank 4"):
        rg.zeros_like(rg.ones(2, 3), memory_format=rg.channels_last)
    with pytest.raises(RuntimeError, match="rank 4"):
        torch.nn.Conv3d(2, 2, 1).to(memory_format=torch.channels_last)
    with pytest.raises(rg.ShapeError, match=r"Module\.to: required rank 4"):
        nn.Conv3d(2, 2, 1).to(memory_format=rg.channels_last)


def test_channels_last_model_layers_and_training_as_torchs():
    """A channels-last CNN step, as real training scripts write it: the weights' and each
    layer's outputs' layouts, and the values, against torch's."""
    torch.manual_seed(0)
    np.random.seed(0)
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(inplace=True),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 4, 3, groups=4),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 2),
    ).double()
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 4, 3, groups=4),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 2),
    ).double()
    model.load_state_dict({k: v.numpy() for k, v in reference.state_dict().items()})
    assert model.to(memory_format=rg.channels_last) is model
    reference = reference.to(memory_format=torch.channels_last)
    for (name, theirs), ours in zip(reference.named_parameters(), model.parameters()):
        assert ours.stride() == theirs.stride(), name
        assert ours.is_contiguous(memory_format=rg.channels_last) == theirs.is_contiguous(
            memory_format=torch.channels_last
        )
    data = np.random.standard_normal((2, 3, 8, 8))
    labels = np.array([0, 1])

    def layouts(net, x):
        out = []
        for layer in net:
            x = layer(x)
            out.append(tuple(x.stride()))
        return out, x

    x_t = torch.tensor(data).to("cpu", non_blocking=True, memory_format=torch.channels_last)
    x_r = rg.tensor(data).to("cpu", non_blocking=True, memory_format=rg.channels_last)
    strides_t, out_t = layouts(reference, x_t)
    strides_r, out_r = layouts(model, x_r)
    assert strides_r == strides_t
    plain_t, _ = layouts(reference, torch.tensor(data))  # channels-last weights decide
    plain_r, _ = layouts(model, rg.tensor(data))
    assert plain_r == plain_t
    np.testing.assert_allclose(out_r.numpy(), out_t.detach().numpy(), rtol=1e-10, atol=1e-12)

    # one optimizer step keeps the weights' layout, as torch's in-place step does
    opt_t = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    opt_r = rg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.nn.functional.cross_entropy(reference(x_t), torch.tensor(labels)).backward()
    opt_t.step()
    opt_r.step(F.cross_entropy(model(x_r), rg.tensor(labels)).backward())
    assert model[0].weight.stride() == reference[0].weight.stride()
    np.testing.assert_allclose(
        model[0].weight.numpy(), reference[0].weight.detach().numpy(), rtol=1e-10, atol=1e-12
    )


def test_conv_and_pool_outputs_follow_channels_last_inputs():
    def probe(lib):
        fn = lib.nn.functional
        x = lib.ones(2, 3, 4, 5)
        y = x.to(memory_format=lib.channels_last)
        return (
            fn.conv2d(y, lib.ones(4, 3, 3, 3)).stride(),
            fn.conv2d(x, lib.ones(4, 3, 3, 3).to(memory_format=lib.channels_last)).stride(),
            fn.conv2d(x, lib.ones(3, 1, 3, 3), groups=3).stride(),
            fn.conv_transpose2d(y, lib.ones(3, 2, 3, 3)).stride(),
            fn.avg_pool2d(y, 2).stride(),
            fn.max_pool2d(y, 2, return_indices=True)[1].stride(),
            fn.batch_norm(y, lib.zeros(3), lib.ones(3), training=True).stride(),
            fn.batch_norm(y, lib.zeros(3), lib.ones(3)).stride(),
        )

    theirs, ours = _both(probe)
    assert ours == theirs


# -- (2) StepLR's step size ----------------------------------------------------------------------
def _rates(lib, step_size, steps=6):
    optimizer = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=1.0)
    schedule = lib.optim.lr_scheduler.StepLR(optimizer, step_size=step_size, gamma=0.5)
    rates = []
    for _ in range(steps):
        schedule.step()
        rates.append(schedule.get_last_lr()[0])
    return rates, optimizer


def test_steplr_takes_any_step_size_as_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step_size in (-2, -1):
            assert _rates(rg, step_size)[0] == _rates(torch, step_size)[0]
        with pytest.raises(ZeroDivisionError):
            _rates(torch, 0)
        optimizer = rg.optim.SGD([nn.Parameter(rg.ones(1))], lr=1.0)
        schedule = rg.optim.lr_scheduler.StepLR(optimizer, step_size=0)  # made, as torch's
        with pytest.raises(rg.InvalidArgumentError, match="step_size is 0") as caught:
            schedule.step()
        assert isinstance(caught.value, ZeroDivisionError)
        # the failed step leaves the schedule and the rate where they were
        assert optimizer.param_groups[0]["lr"] == 1.0 and schedule.last_epoch == 0


# -- (3) load_state_dict's result ----------------------------------------------------------------
def test_incompatible_keys_print_and_compare_as_torchs():
    def probe(lib):
        lib.manual_seed(0)
        layer = lib.nn.Linear(2, 2)
        keys = layer.load_state_dict({"weight": lib.ones(2, 2), "extra": lib.ones(1)}, strict=False)
        missing, unexpected = keys
        complete = layer.load_state_dict(layer.state_dict())
        return (
            repr(keys),
            str(keys),
            keys == (["bias"], ["extra"]),
            tuple(keys),
            (missing, unexpected),
            keys.missing_keys,
            keys._fields,
            type(keys).__name__,
            repr(complete),
            complete == ([], []),
        )

    theirs, ours = _both(probe)
    assert ours == theirs
    keys = nn.Linear(2, 2).load_state_dict({"extra": rg.ones(1)}, strict=False)
    assert pickle.loads(pickle.dumps(keys)) == keys


# -- (4) a model cast after the optimizer stepped -------------------------------------------------
def _cast_after_step(lib, name, **options):
    lib.manual_seed(0)
    layer = lib.nn.Linear(3, 2)
    if lib is rg:
        layer.load_state_dict({k: v.numpy() for k, v in _cast_after_step.reference.items()})
    else:
        _cast_after_step.reference = {k: v.clone() for k, v in layer.state_dict().items()}
    optimizer = getattr(lib.optim, name)(layer.parameters(), lr=0.1, **options)
    x = lib.tensor(np.linspace(-1.0, 1.0, 12).reshape(4, 3))

    def step(inputs):
        loss = layer(inputs).pow(2).sum()
        if lib is torch:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        else:
            optimizer.step(loss.backward())

    step(x.float())
    layer.double()
    before = layer.weight.detach().numpy().copy()
    try:
        step(x.double())
    except (RuntimeError, rg.DTypeError) as error:
        return "raises", error, before, layer.weight.detach().numpy()
    state = optimizer.state_dict()["state"][0]
    dtypes = {k: str(v.dtype).split(".")[-1] for k, v in state.items() if k != "step"}
    return "steps", dtypes, layer.weight.detach().numpy(), None


@pytest.mark.parametrize(
    ("name", "options"),
    [("Adam", {}), ("AdamW", {}), ("RMSprop", {"centered": True}), ("SGD", {"momentum": 0.9}),
     ("Adagrad", {}), ("RMSprop", {})],
)  # fmt: skip
def test_optimizer_after_model_double_as_torch(name, options):
    torch.manual_seed(0)
    theirs = _cast_after_step(torch, name, **options)
    ours = _cast_after_step(rg, name, **options)
    assert ours[0] == theirs[0]
    if theirs[0] == "raises":
        assert isinstance(ours[1], rg.DTypeError) and f"{name}.step" in str(ours[1])
        # refused before any parameter moved
        np.testing.assert_array_equal(ours[3], ours[2])
        return
    assert ours[1] == theirs[1]  # the state keeps its float32 dtype, as torch's in-place update
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-6, atol=1e-7)


# -- (5) training scripts' settings lines ----------------------------------------------------------
def test_training_script_settings_lines_run():
    saved = (
        rg.backends.cudnn.benchmark,
        rg.backends.cuda.matmul.allow_tf32,
        rg.backends.cudnn.allow_tf32,
        rg.get_float32_matmul_precision(),
    )
    try:
        rg.backends.cudnn.benchmark = True
        rg.backends.cudnn.deterministic = False
        rg.backends.cuda.matmul.allow_tf32 = True
        rg.backends.cudnn.allow_tf32 = True
        rg.set_float32_matmul_precision("high")
        assert rg.get_float32_matmul_precision() == "high"
        assert rg.backends.cudnn.benchmark is True
        model = nn.Conv2d(3, 2, 1).to(memory_format=rg.channels_last)
        model = model.to("cpu", non_blocking=True, memory_format=rg.channels_last)
        x = rg.ones(1, 3, 2, 2).to("cpu", non_blocking=True, memory_format=rg.channels_last)
        assert model(x).is_contiguous(memory_format=rg.channels_last)
    finally:
        rg.backends.cudnn.benchmark = saved[0]
        rg.backends.cuda.matmul.allow_tf32 = saved[1]
        rg.backends.cudnn.allow_tf32 = saved[2]
        rg.set_float32_matmul_precision(saved[3])
