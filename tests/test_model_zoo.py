"""The model zoo against PyTorch: each model of ``tests/zoo_models.py`` is built from the same text
for both libraries, PyTorch's copy loads our weights, and in float64 the logits, the gradient of
the loss for every parameter, the parameters after two optimizer steps (SGD with momentum or
AdamW) and the BatchNorm statistics equal PyTorch's, in training mode (dropout and stochastic
depth off, BatchNorm on batch statistics) and in evaluation mode (dropout at its default rate,
BatchNorm on running statistics). The initializations, which the copy of the weights would hide,
are compared on their own: constant ones exactly, random ones by their spread.

Two training recipes (parameter groups, schedulers, gradient clipping) run four steps against
torch's, and the library defects the zoo found each have a focused test at the end: hard
activations' gradients on their bounds, torch's keyword forms of the shape methods,
``bernoulli_``'s probability check, ``rg.cummax``/``rg.cummin``'s ``(values, indices)``,
reductions over ``dim=()``, module attributes (pool strides, ``Upsample`` factors), optimizer
switches (``amsgrad``, ``maximize``, ``foreach``/``fused``), ``split``/``chunk`` tuples.

Runs on either inner backend (``RETROGRAD_INNER=torch``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
import zoo_models as zoo
from backends import inner_backend
from retrograd import nn as rnn
from retrograd import optim as roptim
from retrograd.nn import functional as RF  # noqa: N812

torch = pytest.importorskip("torch")
tnn, TF = torch.nn, torch.nn.functional

TOL = {"float64": (1e-9, 1e-11), "float32": (2e-4, 2e-6)}


def _classify(shape, classes=5):
    def inputs(rng):
        return [rng.standard_normal(shape)], rng.integers(0, classes, shape[:1])

    return inputs


def _ce(lib, F, out, y):  # noqa: N803
    return F.cross_entropy(out, y)


def _ce_aux(lib, F, out, y):  # noqa: N803
    # torchvision's references/classification: the main loss plus 0.3 of each auxiliary loss
    if isinstance(out, tuple):
        logits, aux2, aux1 = out
        return (
            F.cross_entropy(logits, y)
            + 0.3 * F.cross_entropy(aux1, y)
            + 0.3 * F.cross_entropy(aux2, y)
        )
    return F.cross_entropy(out, y)


def _dit_inputs(rng):
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    t = rng.integers(0, 1000, (2,))
    y = rng.integers(0, 10, (2,))
    return [x, t, y], rng.standard_normal((2, 8, 8, 8)).astype(np.float32)


def _llama_inputs(rng):
    ids = rng.integers(0, 32, (2, 7))
    return [ids, ids], None


def _llama_loss(lib, F, out, target):  # noqa: N803
    loss, _ = out  # the model's own shifted cross-entropy
    return loss


def _ce_inception(lib, F, out, y):  # noqa: N803
    # torchvision's references/classification: 0.4 of the auxiliary loss
    if isinstance(out, tuple):
        logits, aux = out
        return F.cross_entropy(logits, y) + 0.4 * F.cross_entropy(aux, y)
    return F.cross_entropy(out, y)


def _fpn_loss(lib, F, out, target):  # noqa: N803
    return sum((level**2).mean() * (i + 1) for i, level in enumerate(out.values()))


def _mse(lib, F, out, target):  # noqa: N803
    return F.mse_loss(out, target)


# name: (builder, options for training mode, options for evaluation mode, inputs, loss,
#        optimizer, dtype)
ZOO = {
    "mobilenet_v2": (
        zoo.make_mobilenet_v2,
        {"num_classes": 5, "last_channel": 64, "dropout": 0.0},
        {"num_classes": 5, "last_channel": 64},
        _classify((2, 3, 64, 64)),
        _ce,
        "sgd",
        "float64",
    ),
    "mobilenet_v3_small": (
        zoo.make_mobilenet_v3_small,
        {"num_classes": 5, "dropout": 0.0},
        {"num_classes": 5},
        _classify((2, 3, 64, 64)),
        _ce,
        "adamw",
        "float64",
    ),
    "efficientnet_b0": (
        zoo.make_efficientnet_b0,
        {"num_classes": 5, "dropout": 0.0, "stochastic_depth_prob": 0.0},
        {"num_classes": 5},
        _classify((2, 3, 64, 64)),
        _ce,
        "sgd",
        "float64",
    ),
    "densenet": (
        zoo.make_densenet,
        {"num_classes": 5},
        {"num_classes": 5, "drop_rate": 0.2},
        _classify((2, 3, 64, 64)),
        _ce,
        "sgd",
        "float64",
    ),
    "densenet_memory_efficient": (
        zoo.make_densenet,
        {"num_classes": 5, "memory_efficient": True},
        {"num_classes": 5, "memory_efficient": True},
        _classify((2, 3, 64, 64)),
        _ce,
        "sgd",
        "float64",
    ),
    "shufflenet_v2": (
        zoo.make_shufflenet_v2,
        {"num_classes": 5},
        {"num_classes": 5},
        _classify((2, 3, 64, 64)),
        _ce,
        "sgd",
        "float64",
    ),
    "squeezenet1_1": (
        zoo.make_squeezenet,
        {"num_classes": 5, "dropout": 0.0},
        {"num_classes": 5},
        _classify((2, 3, 48, 48)),
        _ce,
        "sgd",
        "float64",
    ),
    "squeezenet1_0": (
        zoo.make_squeezenet,
        {"version": "1_0", "num_classes": 5, "dropout": 0.0},
        {"version": "1_0", "num_classes": 5},
        _classify((2, 3, 45, 45)),
        _ce,
        "adamw",
        "float64",
    ),
    "googlenet": (
        zoo.make_googlenet,
        {"num_classes": 5, "dropout": 0.0, "dropout_aux": 0.0, "transform_input": True},
        {"num_classes": 5, "transform_input": True},
        _classify((2, 3, 64, 64)),
        _ce_aux,
        "sgd",
        "float64",
    ),
    "inception_v3": (
        zoo.make_inception_v3,
        {"num_classes": 5, "dropout": 0.0, "transform_input": True},
        {"num_classes": 5, "aux_logits": False},
        _classify((2, 3, 299, 299)),
        _ce_inception,
        "sgd",
        "float64",
    ),
    "vgg11_bn": (
        zoo.make_vgg11_bn,
        {"num_classes": 5, "dropout": 0.0},
        {"num_classes": 5},
        _classify((2, 3, 32, 32)),
        _ce,
        "sgd",
        "float64",
    ),
    "convnext": (
        zoo.make_convnext,
        {"num_classes": 5, "stochastic_depth_prob": 0.0, "layer_scale": 0.5},
        {"num_classes": 5, "layer_scale": 0.5},
        _classify((2, 3, 32, 32)),
        _ce,
        "adamw",
        "float64",
    ),
    "swin": (
        zoo.make_swin,
        {"num_classes": 5, "stochastic_depth_prob": 0.0},
        {"num_classes": 5},
        _classify((2, 3, 40, 40)),
        _ce,
        "adamw",
        "float64",
    ),
    "swin_v2": (
        zoo.make_swin,
        {"num_classes": 5, "stochastic_depth_prob": 0.0, "v2": True},
        {"num_classes": 5, "v2": True},
        _classify((2, 3, 40, 40)),
        _ce,
        "adamw",
        "float64",
    ),
    "torchvision_vit": (
        zoo.make_torchvision_vit,
        {"num_classes": 5},
        {"num_classes": 5, "representation_size": 8, "dropout": 0.1, "attention_dropout": 0.1},
        _classify((2, 3, 16, 16)),
        _ce,
        "adamw",
        "float64",
    ),
    "resnext": (
        zoo.make_resnext,
        {"num_classes": 5, "replace_stride_with_dilation": [False, True, True]},
        {"num_classes": 5, "zero_init_residual": True, "group_norm": True},
        _classify((2, 3, 32, 32)),
        _ce,
        "sgd",
        "float64",
    ),
    "resnet_fpn": (
        zoo.make_resnet_fpn,
        {},
        {"trainable_layers": 5, "returned_layers": [2, 3, 4]},
        _classify((2, 3, 64, 64)),
        _fpn_loss,
        "sgd",
        "float64",
    ),
    "vit": (
        zoo.make_vit,
        {"num_classes": 5, "init_values": 0.1},
        {"num_classes": 5, "global_pool": "avg", "drop_rate": 0.3, "drop_path_rate": 0.2},
        _classify((2, 3, 16, 16)),
        _ce,
        "adamw",
        "float64",
    ),
    "llama": (
        zoo.make_llama,
        {},
        {"attn_implementation": "sdpa", "tie_word_embeddings": True},
        _llama_inputs,
        _llama_loss,
        "adamw",
        "float32",
    ),
    "dit": (
        zoo.make_dit,
        {"class_dropout_prob": 0.0},
        {},
        _dit_inputs,
        _mse,
        "adamw",
        "float32",
    ),
}


def _close(got, expected, rtol, atol, name):
    """Elementwise within ``rtol``, and within ``rtol`` of the array's largest magnitude: deep
    BatchNorm nets on a batch of two amplify the last bits of small entries."""
    expected = np.asarray(expected)
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol + rtol * scale, err_msg=name)


# The reference built differently: torch's checkpoint re-runs the bottleneck's Python forward
# in backward, so each BatchNorm under it updates its running statistics twice per step
# (momentum 0.19 instead of 0.1); rg.utils.checkpoint leaves recomputation to the autodiff
# backend, which reruns no module, so the statistics move once -- as torch's own
# memory_efficient=False model's do, against which the checkpointed one is compared.
REFERENCE_OPTIONS = {"densenet_memory_efficient": {"memory_efficient": False}}


def _tensor(lib, a):
    return lib.from_numpy(np.array(a, copy=True))


def _optimizer(module, kind, params):
    if kind == "sgd":
        return module.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)
    return module.AdamW(params, lr=1e-3, weight_decay=0.05)


def _outputs(out):
    if isinstance(out, dict):  # an OrderedDict of feature maps (FPN)
        return list(out.values())
    return list(out) if isinstance(out, tuple) else [out]


def _build(name, mode):
    build, train_options, eval_options, *_ = ZOO[name]
    options = train_options if mode == "train" else eval_options
    dtype = ZOO[name][-1]
    rg.seed(1)
    model = build(rg, rnn, RF, **options)
    torch.manual_seed(1)
    reference = build(torch, tnn, TF, **{**options, **REFERENCE_OPTIONS.get(name, {})})
    if dtype == "float64":
        model, reference = model.double(), reference.double()
    return model, reference


@pytest.mark.own_checkpointing("a backend of its own, without checkpointing")
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_matches_torch(name, mode):
    _, _, _, inputs, loss_fn, kind, dtype = ZOO[name]
    rtol, atol = TOL[dtype]
    rng = np.random.default_rng(7)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        model, reference = _build(name, mode)
        state = model.state_dict()
        reference.load_state_dict({k: _tensor(torch, v) for k, v in state.items()})
        if mode == "eval":
            model.eval()
            reference.eval()
        ours = _optimizer(roptim, kind, model.parameters())
        theirs = _optimizer(torch.optim, kind, reference.parameters())
        trainable = {n for n, p in reference.named_parameters() if p.requires_grad}
        for _ in range(2):
            args, target = inputs(rng)
            out = model(*[_tensor(rg, a) for a in args])
            expected = reference(*[_tensor(torch, a) for a in args])
            assert type(out).__name__ == type(expected).__name__
            if isinstance(out, dict):
                assert list(out) == list(expected)
            for o, e in zip(_outputs(out), _outputs(expected), strict=True):
                _close(o.numpy(), e.detach().numpy(), rtol, atol, "output")
            loss = loss_fn(rg, RF, out, None if target is None else _tensor(rg, target))
            grads = loss.backward()
            theirs.zero_grad()
            loss_fn(
                torch, TF, expected, None if target is None else _tensor(torch, target)
            ).backward()
            theirs_by_name = dict(reference.named_parameters())
            for pname, p in model.named_parameters():
                if pname not in trainable:
                    assert not p.requires_grad, pname
                    continue
                expected_grad = theirs_by_name[pname].grad
                if expected_grad is None:  # a branch this mode skips (GoogLeNet's aux heads)
                    assert p.grad(grads) is None, pname
                    continue
                _close(p.grad(grads).numpy(), expected_grad.numpy(), rtol, atol, pname)
            ours.step(grads)
            theirs.step()
            expected_state = reference.state_dict()
            got_state = model.state_dict()
            assert list(got_state) == list(expected_state)
            for key, value in expected_state.items():
                _close(got_state[key], value.numpy(), rtol, atol, key)
                assert got_state[key].dtype == value.numpy().dtype, key


@pytest.mark.own_checkpointing("a backend of its own, without checkpointing")
@pytest.mark.parametrize("name", ZOO)
def test_zoo_initialization_matches_torch(name):
    """The copy of the weights hides the initialization; compare it on its own: a constant
    initialization exactly, a random one by the spread of its values."""
    with rg.use_backend(rg.Autodiff(inner_backend())):
        model, reference = _build(name, "eval")
        ours = model.state_dict()
        theirs = reference.state_dict()
        assert list(ours) == list(theirs)
        for key, value in theirs.items():
            expected = value.numpy()
            got = np.asarray(ours[key])
            assert got.shape == expected.shape, key
            assert got.dtype == expected.dtype, key
            if expected.size == 0:
                continue
            if np.all(expected == expected.flat[0]) or expected.dtype.kind in "iu":
                np.testing.assert_array_equal(got, expected, err_msg=key)
            elif expected.size >= 64:
                ratio = got.std() / expected.std()
                assert 0.6 < ratio < 1.6, (key, got.std(), expected.std())


# -- the library defects the zoo found, each on its own ---------------------------------------
@pytest.mark.parametrize(
    ("method", "args", "kwargs"),
    [
        ("reshape", (), {"shape": (3, 4)}),
        ("view", (), {"size": (4, 3)}),
        ("permute", (), {"dims": (1, 0)}),
        ("expand", (), {"size": (2, 2, 6)}),
        ("repeat", (), {"repeats": (2, 1)}),
        ("tile", (), {"dims": (2,)}),
        ("flip", (), {"dims": (0,)}),
        ("new_zeros", (), {"size": (3,)}),
        ("new_ones", (), {"size": (2, 1)}),
        ("new_empty", (), {"size": (2, 5)}),
        ("new_zeros", ((3, 2),), {}),
        ("new_ones", (3, 2), {}),
    ],
)
def test_shape_methods_take_torchs_keywords(method, args, kwargs):
    """DiT's ``x.reshape(shape=(...))``: torch's varargs methods also take their sequence by
    the keyword torch names it; giving it both ways is a ShapeError."""
    values = np.arange(12.0).reshape(2, 6)
    ours = getattr(rg.tensor(values), method)(*args, **kwargs)
    theirs = getattr(torch.from_numpy(values), method)(*args, **kwargs)
    assert tuple(ours.shape) == tuple(theirs.shape)
    if not method.startswith("new_empty"):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    if kwargs:
        (value,) = kwargs.values()
        with pytest.raises(rg.errors.ShapeError, match=method):
            getattr(rg.tensor(values), method)(value, **kwargs)


BOUNDS = [-6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.5, 3.0, 6.0, 7.0]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("relu6", lambda f, nn: f.relu6),
        ("ReLU6(inplace)", lambda f, nn: nn.ReLU6(inplace=True)),
        ("hardtanh", lambda f, nn: f.hardtanh),
        ("Hardtanh(-0.5, 2.5)", lambda f, nn: nn.Hardtanh(-0.5, 2.5)),
        ("hardsigmoid", lambda f, nn: f.hardsigmoid),
        ("Hardsigmoid", lambda f, nn: nn.Hardsigmoid()),
        ("hardswish", lambda f, nn: f.hardswish),
    ],
)
def test_hard_activations_gradient_matches_torch_at_the_bounds(name, build, dtype):
    """torch's ``hardtanh_backward`` passes the gradient strictly inside ``(min, max)`` (relu6:
    none at an exact 0, which a depthwise conv of a patch ReLU6 zeroed gives in MobileNetV2's
    eval mode), and its ``hardsigmoid_backward`` multiplies by 1/6 rounded to float32, in
    float64 too (MobileNetV3's squeeze-excitation)."""
    rng = np.random.default_rng(0)
    values = np.concatenate([BOUNDS, 4 * rng.standard_normal(40)]).astype(dtype)
    weights = rng.standard_normal(values.shape).astype(dtype)
    x = rg.tensor(values).require_grad()
    out = build(RF, rnn)(x * 1.0)
    grads = (out * rg.tensor(weights)).sum().backward()
    tx = torch.from_numpy(values.copy()).requires_grad_()
    expected = build(TF, tnn)(tx * 1.0)
    (expected * torch.from_numpy(weights)).sum().backward()
    exact = name != "hardswish"  # hardswish's x * (x + 3) / 6 rounds in its own order
    rtol = 1e-6 if dtype == "float32" else 1e-14

    def check(got, want):
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)

    check(out.numpy(), expected.detach().numpy())
    check(x.grad(grads).numpy(), tx.grad.numpy())
    assert str(out.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]


@pytest.mark.parametrize("which", ["torchvision", "timm"])
def test_stochastic_depth_in_training_keeps_or_zeroes_whole_rows(which):
    """torchvision's ``stochastic_depth(mode="row")`` and timm's ``drop_path`` in training: the
    noise (``empty(...).bernoulli_(survival)``, ``div_(survival)``) zeroes whole samples and
    scales the others by ``1 / survival``, and the gradient is the same mask; ``p = 1`` drops
    every sample (no division), eval mode is the identity."""
    if which == "torchvision":
        drop = zoo._ops(rg, rnn, RF).stochastic_depth

        def call(x, p, training):
            return drop(x, p, "row", training)

    else:
        timm_drop = zoo._timm_layers(rg, rnn, RF).drop_path

        def call(x, p, training):
            return timm_drop(x, p, training)

    rng = np.random.default_rng(0)
    values = rng.standard_normal((64, 3, 2)) + 5.0
    rg.seed(0)
    x = rg.tensor(values).require_grad()
    out = call(x, 0.25, True)
    grads = (out * 2.0).sum().backward()
    got = out.numpy()
    kept = np.all(got != 0, axis=(1, 2))
    assert 30 < kept.sum() < 64  # about 48 of 64 survive
    np.testing.assert_allclose(got[kept], values[kept] / 0.75, rtol=1e-15)
    np.testing.assert_array_equal(got[~kept], 0.0)
    mask = np.broadcast_to(kept[:, None, None] / 0.75, values.shape)
    np.testing.assert_allclose(x.grad(grads).numpy(), 2.0 * mask, rtol=1e-15)
    assert call(x, 0.25, False) is x
    np.testing.assert_array_equal(call(rg.tensor(values), 1.0, True).numpy(), 0.0)


def test_dit_label_dropout_with_forced_ids_matches_torch():
    """DiT's classifier-free-guidance label drop: ``torch.where(drop_ids, num_classes, labels)``
    with a Python int as the value picked, then the embedding of the null class."""
    labels = np.array([3, 1, 4, 1, 5])
    force = np.array([1, 0, 0, 1, 0])
    outputs = []
    for lib, nn, F in ((rg, rnn, RF), (torch, tnn, TF)):  # noqa: N806
        lib.manual_seed(0)
        model = zoo.make_dit(lib, nn, F, num_classes=6).double()
        embedder = model.y_embedder
        dropped = embedder.token_drop(_tensor(lib, labels), _tensor(lib, force))
        outputs.append(dropped.numpy())
        assert str(dropped.dtype).endswith("int64")
    np.testing.assert_array_equal(outputs[0], outputs[1])
    np.testing.assert_array_equal(outputs[0], [6, 1, 4, 6, 5])


def _param_groups(model, weight_decay):
    """timm's ``param_groups_weight_decay`` / nanoGPT's ``configure_optimizers``: no weight
    decay for biases, norms and 1-d parameters (position embeddings and tokens too)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias") or name in ("pos_embed", "cls_token"):
            no_decay.append(param)
        else:
            decay.append(param)
    return [
        {"params": no_decay, "weight_decay": 0.0},
        {"params": decay, "weight_decay": weight_decay},
    ]


@pytest.mark.parametrize(
    "recipe", ["vit_adamw_warmup_cosine_clip", "resnext_sgd_nesterov_onecycle"]
)
def test_zoo_training_recipe_matches_torch(recipe):
    """Four steps of a real recipe: parameter groups without weight decay on biases and norms,
    a scheduler (LambdaLR warmup + cosine, or OneCycleLR with momentum cycling), gradient
    clipping by global norm; losses, gradients and parameters equal torch's."""
    name = "vit" if recipe.startswith("vit") else "resnext"
    _, _, _, inputs, loss_fn, _, dtype = ZOO[name]
    rtol, atol = TOL[dtype]
    rng = np.random.default_rng(11)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        model, reference = _build(name, "train")
        reference.load_state_dict({k: _tensor(torch, v) for k, v in model.state_dict().items()})
        optimizers, schedulers = [], []
        for lib, net in ((rg, model), (torch, reference)):
            groups = _param_groups(net, 0.05)
            if name == "vit":
                opt = lib.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
                warmup, total = 2, 4

                def lr_lambda(step, warmup=warmup, total=total):
                    if step < warmup:
                        return (step + 1) / warmup
                    progress = (step - warmup) / max(1, total - warmup)
                    return 0.5 * (1.0 + math.cos(math.pi * progress))

                sched = lib.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
            else:
                opt = lib.optim.SGD(groups, lr=0.1, momentum=0.9, nesterov=True)
                sched = lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=4)
            optimizers.append(opt)
            schedulers.append(sched)
        (ours, theirs), (our_sched, their_sched) = optimizers, schedulers
        for _ in range(4):
            args, target = inputs(rng)
            out = model(*[_tensor(rg, a) for a in args])
            expected = reference(*[_tensor(torch, a) for a in args])
            loss = loss_fn(rg, RF, out, _tensor(rg, target))
            their_loss = loss_fn(torch, TF, expected, _tensor(torch, target))
            _close(loss.numpy(), their_loss.detach().numpy(), rtol, atol, "loss")
            grads = loss.backward()
            theirs.zero_grad()
            their_loss.backward()
            norm = rnn.utils.clip_grad_norm_(grads, model.parameters(), 0.5)
            their_norm = tnn.utils.clip_grad_norm_(reference.parameters(), 0.5)
            _close(np.asarray(norm), their_norm.numpy(), rtol, atol, "norm")
            ours.step(grads)
            theirs.step()
            our_sched.step()
            their_sched.step()
            assert our_sched.get_last_lr() == pytest.approx(their_sched.get_last_lr(), rel=1e-12)
            for key, value in reference.state_dict().items():
                _close(model.state_dict()[key], value.numpy(), rtol, atol, key)


@pytest.mark.parametrize("p", [1.5, -0.1, float("nan")])
def test_bernoulli_refuses_a_probability_outside_0_1(p):
    """torchvision's ``noise.bernoulli_(survival_rate)`` with a miscomputed rate: torch raises;
    drawing ``u < p`` would silently give all ones or all zeros."""
    with pytest.raises(rg.errors.InvalidArgumentError, match=r"bernoulli_: p must be in \[0, 1\]"):
        rg.zeros(3).bernoulli_(p)
    with pytest.raises(RuntimeError):
        torch.zeros(3).bernoulli_(p)
    with pytest.raises(rg.errors.InvalidArgumentError, match="probabilities must be in"):
        rg.bernoulli(rg.tensor([0.2, 1.0 + abs(p) if p == p else p]))
    assert rg.zeros(4).bernoulli_(1.0).numpy().tolist() == [1.0] * 4
    assert rg.bernoulli(rg.tensor([0.0, 1.0])).numpy().tolist() == [0.0, 1.0]


def test_conv_with_no_output_channels_is_a_shape_error():
    """A width multiplier that rounds a layer to 0 channels (ResNeXt's
    ``int(planes * base_width / 64) * groups``): torch refuses the weight; so do we, naming it,
    rather than failing inside the kernel on an index."""
    with pytest.raises(rg.errors.ShapeError, match="conv2d: weight has no output channels"):
        rnn.Conv2d(8, 0, 1)(rg.zeros(2, 8, 3, 3))
    with pytest.raises(RuntimeError, match="at least 1 at dimension 0"):
        tnn.Conv2d(8, 0, 1)(torch.zeros(2, 8, 3, 3))


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_and_cummin_return_values_and_indices_as_torch(name):
    """``torch.cummax(x, d)`` is a ``(values, indices)`` pair, and so is ``rg.cummax``: a bare
    tensor would let a ported ``torch.cummax(x, d)[0]`` read the first row instead of the
    values. The method ``x.cummax(d)`` keeps API.md's (Burn's) values-only form."""
    values = np.random.default_rng(5).standard_normal((3, 4, 5))
    x = rg.tensor(values).require_grad()
    tx = torch.from_numpy(values.copy()).requires_grad_()
    ours, theirs = getattr(rg, name)(x, dim=-1), getattr(torch, name)(tx, dim=-1)
    got, got_indices = ours  # unpacks as torch's
    np.testing.assert_array_equal(got.numpy(), theirs.values.detach().numpy())
    np.testing.assert_array_equal(ours[0].numpy(), theirs[0].detach().numpy())
    np.testing.assert_array_equal(got_indices.numpy(), theirs.indices.numpy())
    grads = (ours.values * 2.0).sum().backward()
    (theirs.values * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad(grads).numpy(), tx.grad.numpy())
    method = getattr(x, name)(1)
    np.testing.assert_array_equal(method.numpy(), getattr(tx, name)(1).values.detach().numpy())


@pytest.mark.parametrize("name", ["sum", "mean", "nansum", "nanmean"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_no_dims_reduce_everything_as_torch(name, keepdim):
    """``loss.sum(dim=tuple(range(1, loss.ndim)))`` on a 1-d loss passes ``dim=()``: torch
    reduces every dimension (as ``amax``/``var`` here already did); ``sum``/``mean`` returned
    the tensor unchanged."""
    values = np.arange(6.0).reshape(2, 3) - 2.0
    x = rg.tensor(values).require_grad()
    out = getattr(x, name)(dim=(), keepdim=keepdim)
    expected = getattr(torch.from_numpy(values), name)(dim=(), keepdim=keepdim)
    assert tuple(out.shape) == tuple(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-15)
    grads = out.sum().backward()
    scale = 1.0 / values.size if "mean" in name else 1.0
    np.testing.assert_allclose(x.grad(grads).numpy(), np.full(values.shape, scale), rtol=1e-15)


def test_module_attributes_read_as_torchs():
    """Ported code reads layer attributes: a pool's default stride is its kernel size, an
    ``Upsample``'s factor a float, and ModuleLists concatenate with ``+``."""
    for lib in (rg, torch):
        assert lib.nn.MaxPool2d(3).stride == 3
        assert lib.nn.AvgPool2d(2, padding=1).stride == 2
        assert lib.nn.MaxPool2d(3, 2).stride == 2
        assert lib.nn.Upsample(scale_factor=2).scale_factor == 2.0
        assert isinstance(lib.nn.Upsample(scale_factor=2).scale_factor, float)
        assert lib.nn.Upsample(scale_factor=(2, 3)).scale_factor == (2.0, 3.0)
        first, second = lib.nn.ModuleList([lib.nn.ReLU()]), lib.nn.ModuleList([lib.nn.Tanh()])
        both = first + second
        assert type(both) is lib.nn.ModuleList and len(both) == 2 and len(first) == 1
        assert both[0] is first[0] and both[1] is second[0]
    x = rg.tensor(np.arange(32.0).reshape(1, 2, 4, 4))
    np.testing.assert_array_equal(
        rnn.MaxPool2d(2)(x).numpy(), tnn.MaxPool2d(2)(torch.from_numpy(x.numpy())).numpy()
    )


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("Adam", {"amsgrad": True, "weight_decay": 0.1}),
        ("AdamW", {"amsgrad": True, "maximize": True, "foreach": False}),
        ("Adam", {"maximize": True, "weight_decay": 0.1, "fused": None}),
        ("Adam", {"weight_decay": 0.1, "decoupled_weight_decay": True}),
        ("SGD", {"momentum": 0.9, "weight_decay": 0.01, "maximize": True, "foreach": None}),
        ("RMSprop", {"centered": True, "momentum": 0.5, "maximize": True}),
    ],
)
def test_optimizer_switches_match_torch(kind, options):
    """torch's ``amsgrad``, ``maximize``, ``decoupled_weight_decay`` and the implementation
    switches (``foreach``, ``fused``) that training scripts pass: five steps of a small model
    equal torch's (they were refused as unexpected arguments)."""
    rng = np.random.default_rng(0)
    start = [rng.standard_normal((3, 4)), rng.standard_normal(3)]
    batches = [rng.standard_normal((5, 4)) for _ in range(5)]
    finals = []
    for lib in (rg, torch):
        params = [lib.nn.Parameter(lib.from_numpy(v.copy())) for v in start]
        opt = getattr(lib.optim, kind)(params, lr=0.01, **options)
        for batch in batches:
            loss = (lib.tanh(lib.from_numpy(batch) @ params[0].T + params[1]) ** 2).sum()
            if lib is rg:
                opt.step(loss.backward())
            else:
                opt.zero_grad()
                loss.backward()
                opt.step()
        finals.append([np.array(p.detach().numpy()) for p in params])
    for ours, theirs in zip(*finals, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)
    with pytest.raises(rg.errors.InvalidArgumentError, match="capturable"):
        rg.optim.Adam([rg.nn.Parameter(rg.zeros(2))], capturable=True)
    with pytest.raises(rg.errors.InvalidArgumentError, match="unexpected keyword"):
        rg.optim.SGD([rg.nn.Parameter(rg.zeros(2))], lr=0.1, bogus=1)


def test_split_and_chunk_return_tuples_as_torch():
    """``torch.split``/``chunk`` give tuples; code concatenates them with other tuples
    (``x.chunk(2) + (extra,)``), which a list refuses."""
    x = rg.arange(10)
    t = torch.arange(10)
    for ours, theirs in (
        (x.split(3), t.split(3)),
        (rg.split(x, [3, 7]), torch.split(t, [3, 7])),
        (x.chunk(3), t.chunk(3)),
        (rg.chunk(x, 4), torch.chunk(t, 4)),
    ):
        assert type(ours) is tuple and type(theirs) is tuple
        assert [p.tolist() for p in ours + (x[:1],)] == [p.tolist() for p in theirs + (t[:1],)]


def test_functional_keywords_torch_code_passes():
    """``F.silu(x, inplace=True)`` (EfficientNet-style code) is accepted as ``F.relu``'s
    ``inplace`` is; ``F.interpolate(..., antialias=False)`` and ``antialias=True`` resize as
    torch does, and ``antialias=True`` where torch refuses it is refused by name."""
    values = np.random.default_rng(6).standard_normal((1, 2, 4, 4))
    np.testing.assert_allclose(
        RF.silu(rg.tensor(values), inplace=True).numpy(),
        TF.silu(torch.from_numpy(values.copy()), inplace=True).numpy(),
        rtol=1e-14,
    )
    np.testing.assert_allclose(
        RF.interpolate(rg.tensor(values), scale_factor=2, mode="bilinear", antialias=False).numpy(),
        TF.interpolate(
            torch.from_numpy(values), scale_factor=2, mode="bilinear", antialias=False
        ).numpy(),
        rtol=1e-12,
        atol=1e-15,
    )
    np.testing.assert_allclose(  # torch's anti-aliasing filter (tests/test_leftovers_1.py)
        RF.interpolate(rg.tensor(values), size=2, mode="bilinear", antialias=True).numpy(),
        TF.interpolate(torch.from_numpy(values), size=2, mode="bilinear", antialias=True).numpy(),
        rtol=1e-12,
    )
    with pytest.raises(rg.errors.InvalidArgumentError, match="antialias"):  # torch's refusal
        RF.interpolate(rg.tensor(values), size=2, mode="nearest", antialias=True)
    # HRNet-style keyword calls: F.interpolate(input=score, size=...), F.pad(input=x, pad=...)
    np.testing.assert_allclose(
        RF.interpolate(input=rg.tensor(values), size=(5, 3), mode="nearest").numpy(),
        TF.interpolate(input=torch.from_numpy(values), size=(5, 3), mode="nearest").numpy(),
    )
    np.testing.assert_allclose(
        RF.pad(input=rg.tensor(values), pad=(1, 0, 2, 1), mode="reflect").numpy(),
        TF.pad(input=torch.from_numpy(values), pad=(1, 0, 2, 1), mode="reflect").numpy(),
    )
