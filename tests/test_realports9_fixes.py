"""Defects found by realports9 beyond the ports themselves (``test_real_ports_50.py``),
each checked against torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize(
    ("shape", "normalized"), [((2, 0), (0,)), ((2, 3, 0), (3, 0)), ((2, 0, 3), (0, 3))]
)
def test_layer_norm_over_a_zero_size_shape_is_empty_as_torch(shape, normalized):
    # was refused ("normalized_shape must be positive"); torch returns the empty result and
    # empty gradients of the input's, weight's and bias's shapes
    theirs = torch.nn.LayerNorm(normalized)
    x = torch.zeros(shape, requires_grad=True)
    y = theirs(x)
    y.sum().backward()
    ours = rg.nn.LayerNorm(normalized)
    ours_x = rg.zeros(shape, requires_grad=True)
    out = ours(ours_x)
    grads = out.sum().backward()
    assert out.shape == tuple(y.shape)
    assert ours_x.grad(grads).shape == tuple(x.grad.shape)
    assert ours.weight.grad(grads).shape == tuple(theirs.weight.grad.shape)
    assert ours.bias.grad(grads).shape == tuple(theirs.bias.grad.shape)
    assert rg.nn.functional.layer_norm(rg.zeros(shape), normalized).shape == shape
    assert rg.nn.functional.rms_norm(rg.zeros(shape), normalized).shape == tuple(
        torch.nn.functional.rms_norm(torch.zeros(shape), normalized).shape
    )


@pytest.mark.parametrize("fn", ["layer_norm", "rms_norm"])
def test_norm_over_an_empty_normalized_shape_is_refused_as_torch(fn):
    # torch: "Expected normalized_shape to be at least 1-dimensional"; retrograd normalized
    # over nothing and returned zeros
    with pytest.raises(RuntimeError, match="at least 1-dimensional"):
        getattr(torch.nn.functional, fn)(torch.ones(2, 3), ())
    with pytest.raises(rg.errors.ShapeError, match="at least one dimension"):
        getattr(rg.nn.functional, fn)(rg.ones((2, 3)), ())


def test_layer_norm_of_a_nonempty_shape_is_unchanged():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(
        rg.nn.functional.layer_norm(rg.tensor(x), (4,)).numpy(),
        torch.nn.functional.layer_norm(torch.tensor(x), (4,)).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


def test_jit_overload_method_marks_typed_stubs_as_torch():
    # torchvision's _DenseLayer declares its forward's overloads with
    # @torch.jit._overload_method; retrograd had no such name
    class Layer(rg.nn.Module):
        @rg.jit._overload_method
        def forward(self, x: list) -> rg.Tensor:
            pass

        def forward(self, x):  # noqa: F811
            return x * 2

    assert Layer()(rg.ones(2)).tolist() == [2.0, 2.0]
    assert rg.jit._overload(len) is len


@pytest.mark.parametrize("cls", ["BatchNorm2d", "InstanceNorm1d"])
def test_old_checkpoint_without_num_batches_tracked_loads_as_torch(cls):
    # checkpoints from before torch 0.4 (torchvision's DenseNet weights) have no
    # num_batches_tracked; torch's norms keep their own count when the state carries no
    # version, retrograd refused the state as missing a key
    kwargs = {"track_running_stats": True} if cls == "InstanceNorm1d" else {}
    theirs = getattr(torch.nn, cls)(3, **kwargs)
    ours = getattr(rg.nn, cls)(3, **kwargs)
    old = {
        k: v.numpy() * 0 + 0.5
        for k, v in theirs.state_dict().items()
        if not k.endswith("num_batches_tracked")
    }
    theirs.num_batches_tracked.fill_(3)
    ours.num_batches_tracked.fill_(3)
    theirs.load_state_dict({k: torch.tensor(v) for k, v in old.items()})
    ours.load_state_dict({k: rg.tensor(v) for k, v in old.items()})
    for name, value in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[name], value.numpy(), err_msg=name)
    assert int(ours.num_batches_tracked) == 3


def test_num_batches_tracked_is_required_of_a_versioned_state_as_torch():
    # a state dict torch made carries version 2 in _metadata: the key is then required
    state = torch.nn.BatchNorm1d(2).state_dict()
    del state["num_batches_tracked"]
    with pytest.raises(RuntimeError, match="num_batches_tracked"):
        torch.nn.BatchNorm1d(2).load_state_dict(state)
    with pytest.raises(rg.errors.KeyMismatchError, match="num_batches_tracked"):
        rg.nn.BatchNorm1d(2).load_state_dict(state)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("SGD", {"lr": 0.1}),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
        ("RMSprop", {"lr": 0.1, "centered": True, "momentum": 0.5}),
        ("Adam", {"lr": 0.1, "weight_decay": 0.2}),
        ("AdamW", {"lr": 0.1}),
    ],
)
def test_fused_steps_on_a_zero_d_parameter_match_torch(name, kwargs):
    # CLIP's logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07)): its value is a
    # NumPy scalar; Adam and RMSprop failed ("return arrays must be of ArrayType") and SGD
    # left it unchanged
    ours = rg.nn.Parameter(rg.ones(()) * 2.0)
    theirs = torch.nn.Parameter(torch.ones(()) * 2.0)
    our_opt = getattr(rg.optim, name)([ours], **kwargs)
    their_opt = getattr(torch.optim, name)([theirs], **kwargs)
    for _ in range(3):
        our_opt.step((ours * ours * 3).sum().backward())
        their_opt.zero_grad()
        (theirs * theirs * 3).sum().backward()
        their_opt.step()
    assert ours.shape == ()
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-5)


def test_state_dict_casts_answer_tensor_idioms_as_torch():
    # {k: v.float().numpy() for k, v in model.state_dict().items()} failed: the casts and
    # clone returned plain NumPy arrays (no .numpy()); a cast to the value's own dtype is the
    # value itself in torch (its writes reach the module)
    for lib in (torch, rg):
        layer = lib.nn.Linear(2, 3)
        value = layer.state_dict()["weight"]
        assert value.float().numpy().dtype == np.float32
        assert value.double().numpy().dtype == np.float64
        assert value.clone().numpy().shape == (3, 2)
        assert value.long().numel() == 6
        value.double().fill_(5.0)
        value.clone().fill_(5.0)
        assert float(layer.weight.abs().max()) < 5.0
        value.float().fill_(5.0)
        assert float(layer.weight.min()) == 5.0


def test_top_level_and_method_matrix_exp_match_torch():
    # the parametrizations tutorial's MatrixExponential calls torch.matrix_exp; retrograd had
    # only rg.linalg.matrix_exp
    a = np.random.default_rng(3).standard_normal((2, 3, 3))
    theirs = torch.tensor(a, requires_grad=True)
    (torch.matrix_exp(theirs).sin().sum() + theirs.matrix_exp().sum()).backward()
    ours = rg.tensor(a, requires_grad=True)
    out = rg.matrix_exp(ours)
    grads = (out.sin().sum() + ours.matrix_exp().sum()).backward()
    np.testing.assert_allclose(out.numpy(), torch.matrix_exp(theirs).detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-8)
    with pytest.raises(rg.errors.ShapeError, match="matrix_exp"):
        rg.matrix_exp(rg.ones((2, 3)))


@pytest.mark.parametrize(
    ("layers", "bidirectional", "batch_first", "with_state"),
    [(1, False, False, False), (2, True, True, True), (2, False, False, True)],
)
def test_lstm_with_projections_matches_torch(layers, bidirectional, batch_first, with_state):
    # nn.LSTM(proj_size=...) was refused; torch projects each h by weight_hr_l{k}
    rng = np.random.default_rng(9)
    theirs = torch.nn.LSTM(3, 5, num_layers=layers, proj_size=2, bidirectional=bidirectional,
                           batch_first=batch_first).double()  # fmt: skip
    ours = rg.nn.LSTM(3, 5, num_layers=layers, proj_size=2, bidirectional=bidirectional,
                      batch_first=batch_first, dtype=rg.float64)  # fmt: skip
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = rng.standard_normal((4, 6, 3) if batch_first else (6, 4, 3))
    d = 2 if bidirectional else 1
    h0, c0 = rng.standard_normal((layers * d, 4, 2)), rng.standard_normal((layers * d, 4, 5))
    tx = torch.tensor(x, requires_grad=True)
    out, (h, c) = theirs(tx, (torch.tensor(h0), torch.tensor(c0)) if with_state else None)
    (out.sin().sum() + h.sum() + c.cos().sum()).backward()
    ox = rg.tensor(x, requires_grad=True)
    mine, (oh, oc) = ours(ox, (rg.tensor(h0), rg.tensor(c0)) if with_state else None)
    grads = (mine.sin().sum() + oh.sum() + oc.cos().sum()).backward()
    for a, b in ((mine, out), (oh, h), (oc, c), (ox.grad(grads), tx.grad)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-12)
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(
            getattr(ours, name).grad(grads).numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12
        )


def test_lstm_projection_packed_and_unbatched_match_torch():
    rng = np.random.default_rng(10)
    theirs = torch.nn.LSTM(3, 4, proj_size=1).double()
    ours = rg.nn.LSTM(3, 4, proj_size=1, dtype=rg.float64)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = rng.standard_normal((5, 3))
    out, (h, c) = theirs(torch.tensor(x))
    mine, (oh, oc) = ours(rg.tensor(x))
    for a, b in ((mine, out), (oh, h), (oc, c)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10)
    batch = rng.standard_normal((5, 3, 3))
    packs = [
        lib.nn.utils.rnn.pack_padded_sequence(lib.tensor(batch), [5, 3, 2]) for lib in (torch, rg)
    ]
    (out, (h, c)), (mine, (oh, oc)) = theirs(packs[0]), ours(packs[1])
    for a, b in ((mine.data, out.data), (oh, h), (oc, c)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10)


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        ("LSTM", {"proj_size": 5}, "smaller than hidden_size"),
        ("LSTM", {"proj_size": -1}, "positive integer or zero"),
        ("GRU", {"proj_size": 2}, "only supported for LSTM"),
    ],
)
def test_bad_proj_size_is_refused_as_torch(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        getattr(torch.nn, cls)(3, 5, **kwargs)
    with pytest.raises(rg.errors.InvalidArgumentError, match=message):
        getattr(rg.nn, cls)(3, 5, **kwargs)


def test_autograd_grad_under_no_grad_of_a_graph_built_with_grad():
    # torch seeds the outputs whatever the grad mode; retrograd built its weighted sum of the
    # outputs under the caller's no_grad and found nothing to differentiate
    results = []
    for lib in (torch, rg):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * x
        with lib.no_grad():
            (g,) = lib.autograd.grad(y, x, lib.tensor([1.0, 0.5, -1.0]))
        results.append(g.numpy())
    np.testing.assert_allclose(results[1], results[0])


def checkpoint_function(lib):
    """latent diffusion's ``CheckpointFunction`` (``ldm/modules/diffusionmodules/util.py``)
    over ``lib``."""

    class CheckpointFunction(lib.autograd.Function):
        @staticmethod
        def forward(ctx, run_function, length, *args):
            ctx.run_function = run_function
            ctx.input_tensors = list(args[:length])
            ctx.input_params = list(args[length:])
            with lib.no_grad():
                return ctx.run_function(*ctx.input_tensors)

        @staticmethod
        def backward(ctx, *output_grads):
            ctx.input_tensors = [x.detach().requires_grad_(True) for x in ctx.input_tensors]
            with lib.enable_grad():
                output_tensors = ctx.run_function(*[x.view_as(x) for x in ctx.input_tensors])
            input_grads = lib.autograd.grad(
                output_tensors,
                ctx.input_tensors + ctx.input_params,
                output_grads,
                allow_unused=True,
            )
            return (None, None) + input_grads

    return CheckpointFunction


def test_checkpoint_function_recomputing_in_backward_matches_torch():
    # latent diffusion's CheckpointFunction: forward under no_grad, backward recomputes under
    # enable_grad and calls autograd.grad for the inputs and the module's parameters
    results = []
    for lib in (torch, rg):
        CheckpointFunction = checkpoint_function(lib)  # noqa: N806 (the authors' name)
        layer = lib.nn.Linear(3, 2)
        with lib.no_grad():
            layer.weight.copy_(lib.tensor(np.arange(6.0).reshape(2, 3) / 10))
            layer.bias.copy_(lib.tensor([0.5, -1.0]))
        x = lib.tensor(np.linspace(-1, 1, 12).reshape(4, 3), dtype=lib.float32, requires_grad=True)
        y = CheckpointFunction.apply(layer, 1, x, *layer.parameters())
        loss = (y * y).sum()
        grads = loss.backward()
        if lib is torch:
            results.append([x.grad.numpy(), layer.weight.grad.numpy(), layer.bias.grad.numpy()])
        else:
            results.append([t.grad(grads).numpy() for t in (x, layer.weight, layer.bias)])
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("shape", "orthogonal_map", "use_trivialization"),
    [
        ((3, 3), None, True),
        ((3, 3), "cayley", True),
        ((3, 3), "householder", True),
        ((3, 3), "matrix_exp", False),
        ((3, 3), "cayley", False),
    ],
)
def test_orthogonal_parametrization_trains_as_torch(shape, orthogonal_map, use_trivialization):
    # nn.utils.parametrizations.orthogonal did not exist
    rng = np.random.default_rng(0)
    w0, x = rng.standard_normal(shape) * 0.5, rng.standard_normal((5, shape[1]))
    records = []
    for lib in (torch, rg):
        layer = lib.nn.Linear(shape[1], shape[0], bias=False, dtype=lib.float64)
        with lib.no_grad():
            layer.weight.copy_(lib.tensor(w0))
        lib.nn.utils.parametrizations.orthogonal(
            layer, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization
        )
        record = [sorted(layer.state_dict()), layer.weight.detach().numpy().copy()]
        optimizer = lib.optim.SGD(layer.parameters(), lr=0.1)
        for _ in range(3):
            loss = (layer(lib.tensor(x)) - lib.tensor(x[:, :1])).pow(2).mean()
            if lib is torch:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
            record.append(loss.item())
        record.append(layer.weight.detach().numpy().copy())
        records.append(record)
    assert records[1][0] == records[0][0]
    for ours, theirs in zip(records[1][1:], records[0][1:]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=1e-10)
    final = records[1][-1]
    np.testing.assert_allclose(final.T @ final, np.eye(shape[1]), atol=1e-10)


@pytest.mark.parametrize("shape", [(4, 2), (2, 4)])
def test_orthogonal_parametrization_of_a_rectangle_as_torch(shape):
    w0 = np.random.default_rng(1).standard_normal(shape)
    weights = []
    for lib in (torch, rg):
        layer = lib.nn.Linear(shape[1], shape[0], bias=False, dtype=lib.float64)
        with lib.no_grad():
            layer.weight.copy_(lib.tensor(w0))
        lib.nn.utils.parametrizations.orthogonal(layer)  # householder, the default here
        weights.append(layer.weight.detach().numpy())
    np.testing.assert_allclose(weights[1], weights[0], rtol=1e-10, atol=1e-12)
    with pytest.raises(rg.errors.InvalidArgumentError, match="orthogonal_map"):
        rg.nn.utils.parametrizations.orthogonal(rg.nn.Linear(2, 2), orthogonal_map="qr")
    # without trivialization, the Householder map's right_inverse is torch's geqrf of the weight
    plain = []
    for lib in (torch, rg):
        layer = lib.nn.Linear(shape[1], shape[0], bias=False, dtype=lib.float64)
        with lib.no_grad():
            layer.weight.copy_(lib.tensor(w0))
        lib.nn.utils.parametrizations.orthogonal(layer, "weight", "householder",
                                                 use_trivialization=False)  # fmt: skip
        plain.append(layer.weight.detach().numpy())
    np.testing.assert_allclose(plain[1], plain[0], rtol=1e-10, atol=1e-12)


def test_parameter_diagonal_and_take_as_torch():
    # p.diagonal(), p.diag(), p.take(list) and p.uniform_(generator=) built their index (or
    # draws) as a Parameter, whose constructor refused it
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.tensor(np.arange(9.0).reshape(3, 3)))
        assert p.diagonal(dim1=-2, dim2=-1).tolist() == [0.0, 4.0, 8.0]
        assert p.diag().tolist() == [0.0, 4.0, 8.0]
        assert p.take(lib.tensor([0, 4])).tolist() == [0.0, 4.0]
    assert rg.nn.Parameter(rg.ones((3, 3))).take([0, 4]).tolist() == [1.0, 1.0]
    generator = rg.Generator()
    generator.manual_seed(0)
    p = rg.nn.Parameter(rg.zeros(3))
    with rg.no_grad():
        p.uniform_(generator=generator)
    assert isinstance(p, rg.nn.Parameter) and float(p.abs().sum()) > 0


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("uniform_", (-1.0, 1.0)),
        ("normal_", (0.0, 2.0)),
        ("trunc_normal_", (0.0, 1.0, -1.0, 1.0)),
        ("xavier_uniform_", ()),
        ("xavier_normal_", ()),
        ("kaiming_uniform_", ()),
        ("kaiming_normal_", ()),
        ("orthogonal_", ()),
        ("sparse_", (0.5,)),
    ],
)
def test_init_draws_from_the_generator_given_as_torch(name, args):
    # torch 2.13's nn.init functions take generator=; retrograd's refused it, or (orthogonal_,
    # sparse_) accepted it and drew from the global stream
    assert "generator" in __import__("inspect").signature(getattr(torch.nn.init, name)).parameters
    draws = []
    for _ in range(2):
        generator = rg.Generator()
        generator.manual_seed(7)
        weight = rg.empty((4, 6))
        rg.manual_seed(0)
        getattr(rg.nn.init, name)(weight, *args, generator=generator)
        draws.append((weight.numpy().copy(), rg.rand(1).item()))
    np.testing.assert_array_equal(draws[1][0], draws[0][0])
    rg.manual_seed(0)
    assert draws[0][1] == rg.rand(1).item()  # the global stream was not drawn from
    with pytest.raises(rg.errors.DTypeError, match="generator"):
        getattr(rg.nn.init, name)(rg.empty((4, 6)), *args, generator=7)
