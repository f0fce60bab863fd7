"""create_graph connectivity and second derivatives of ``nn.functional`` against torch 2.13.

torch's backward kernels of pooling (max/avg/adaptive/fractional, 1-3 d), ``nll_loss`` (so
``cross_entropy``), reflect/replicate ``pad``, ``grid_sample``, the margin losses, eval-mode
``batch_norm`` and the joint convolution/normalization kernels take the input (or a sibling
input) as an argument, so under ``create_graph=True`` torch's gradient is a function of it: it
requires grad, and differentiated again gives zeros (max pooling's ``self``), no gradient
(``None``: a convolution's bias gradient in the input) or a refusal (``multi_margin_loss``).
Where retrograd's gradient was a constant it raised "not used in the graph", or a
``.backward()`` of a function of it raised where torch's leaves the leaf's gradient unset.

Each case takes float64 leaves, the gradient of ``sum(f(leaves) * w)`` with
``create_graph=True`` for a random ``w``, then for each gradient ``g_i``: its values, its
``requires_grad``, and ``autograd.grad(sum(g_i * v_i), leaves, allow_unused=True)`` (which
leaves get ``None``, the values of the others, or the refusal's class), a third derivative
the same way where torch's second requires grad, and ``sum(g * g * v).backward()``.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def F(lib):  # noqa: N802 (torch's own spelling)
    return lib.nn.functional


def _t(lib, array):
    return lib.tensor(np.asarray(array))


_TARGETS = [[0, 2, 1, -100, 1, 1, 0], [2, 2, 1, 0, -100, 1, 1]]
_LABELS = [[0, 2, -1, 1, 0, 0, 0], [3, -1, 0, 0, 0, 0, 0], [1, 2, 3, -1, 0, 0, 0]]
_GRID = np.random.default_rng(5).uniform(-1, 1, (2, 3, 2, 2))

# name -> (f(lib, *leaves), shapes of the float64 leaves)
CASES = {
    # pooling: torch's backward kernels take self (zeros)
    "max_pool1d": (lambda lib, x: F(lib).max_pool1d(x, 2), [(2, 3, 7)]),
    "max_pool2d": (lambda lib, x: F(lib).max_pool2d(x, 2, 1, 1), [(2, 3, 6, 5)]),
    "max_pool2d_dilated": (
        lambda lib, x: F(lib).max_pool2d(x, 2, 2, 1, dilation=2, ceil_mode=True),
        [(2, 3, 6, 5)],
    ),
    "max_pool3d": (lambda lib, x: F(lib).max_pool3d(x, 2), [(1, 2, 4, 5, 4)]),
    "avg_pool1d": (lambda lib, x: F(lib).avg_pool1d(x, 3, 2, 1), [(2, 3, 7)]),
    "avg_pool2d": (
        lambda lib, x: F(lib).avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        [(2, 3, 6, 5)],
    ),
    "avg_pool3d": (lambda lib, x: F(lib).avg_pool3d(x, 2), [(1, 2, 4, 5, 4)]),
    "adaptive_avg_pool2d": (lambda lib, x: F(lib).adaptive_avg_pool2d(x, (4, 3)), [(2, 3, 6, 5)]),
    "adaptive_max_pool1d": (lambda lib, x: F(lib).adaptive_max_pool1d(x, 4), [(2, 3, 7)]),
    "adaptive_max_pool2d": (lambda lib, x: F(lib).adaptive_max_pool2d(x, (4, 3)), [(2, 3, 6, 5)]),
    "adaptive_max_pool3d": (lambda lib, x: F(lib).adaptive_max_pool3d(x, 2), [(1, 2, 4, 5, 4)]),
    "fractional_max_pool2d": (
        lambda lib, x: F(lib).fractional_max_pool2d(
            x, 2, output_size=(3, 2), _random_samples=_t(lib, np.full((2, 3, 2), 0.5))
        ),
        [(2, 3, 6, 5)],
    ),
    "interpolate_area": (
        lambda lib, x: F(lib).interpolate(x, size=(4, 3), mode="area"),
        [(2, 3, 6, 5)],
    ),
    # nll_loss_backward takes self (zeros); through log_softmax, cross_entropy's are values
    "nll_loss": (lambda lib, x: F(lib).nll_loss(x[:, :, 0], lib.tensor([0, 2])), [(2, 3, 7)]),
    "nll_loss_weight_ignore": (
        lambda lib, x: F(lib).nll_loss(x, lib.tensor(_TARGETS), weight=_t(lib, [0.5, 1.0, 2.0])),
        [(2, 3, 7)],
    ),
    "nll_loss_1d_sum": (
        lambda lib, x: F(lib).nll_loss(x[0, :, 0], lib.tensor(1), reduction="sum"),
        [(2, 3, 7)],
    ),
    "cross_entropy_weight_smoothing": (
        lambda lib, x: F(lib).cross_entropy(
            x, lib.tensor(_TARGETS), weight=_t(lib, [0.5, 1.0, 2.0]), label_smoothing=0.2
        ),
        [(2, 3, 7)],
    ),
    "cross_entropy_ignore_none": (
        lambda lib, x: F(lib).cross_entropy(x, lib.tensor(_TARGETS).abs() % 3, ignore_index=1),
        [(2, 3, 7)],
    ),
    # reflection/replication pads' backward kernels take self (zeros); circular is a copy
    "pad_reflect": (lambda lib, x: F(lib).pad(x, (2, 1), mode="reflect"), [(2, 3, 7)]),
    "pad_replicate": (lambda lib, x: F(lib).pad(x, (2, 1, 1, 0), mode="replicate"), [(2, 3, 6, 5)]),
    "pad_reflect3d": (
        lambda lib, x: F(lib).pad(x, (1, 1, 1, 1, 1, 1), mode="reflect"),
        [(1, 2, 4, 5, 4)],
    ),
    "pad_circular": (lambda lib, x: F(lib).pad(x, (2, 1), mode="circular"), [(2, 3, 7)]),
    # convolutions: the weight's gradient a function of the input and the upstream gradient;
    # the bias's requires grad, of no derivative
    "conv1d_bias": (
        lambda lib, x, w, b: F(lib).conv1d(x, w, b, stride=2, padding=1),
        [(2, 3, 7), (4, 3, 2), (4,)],
    ),
    "conv2d_groups_dilation": (
        lambda lib, x, w: F(lib).conv2d(x, w, groups=3, dilation=2, padding=1),
        [(2, 3, 6, 5), (6, 1, 2, 2)],
    ),
    "conv2d_stride_bias": (
        lambda lib, x, w, b: F(lib).conv2d(x, w, b, stride=(2, 1), padding=1),
        [(2, 3, 6, 5), (4, 3, 3, 2), (4,)],
    ),
    "conv3d": (lambda lib, x, w: F(lib).conv3d(x, w), [(1, 2, 4, 5, 4), (2, 2, 2, 2, 2)]),
    "conv_transpose1d": (
        lambda lib, x, w: F(lib).conv_transpose1d(x, w, stride=2),
        [(2, 3, 7), (3, 2, 3)],
    ),
    "conv_transpose2d_groups_bias": (
        lambda lib, x, w, b: F(lib).conv_transpose2d(x, w, b, stride=2, groups=3, output_padding=1),
        [(2, 3, 6, 5), (3, 2, 2, 2), (6,)],
    ),
    "conv_transpose3d_dilation": (
        lambda lib, x, w: F(lib).conv_transpose3d(x, w, stride=2, dilation=2),
        [(1, 2, 4, 5, 4), (2, 2, 2, 2, 2)],
    ),
    # one of the kernel's inputs tracked: every gradient it computes requires grad
    "conv1d_input_only": (
        lambda lib, x: F(lib).conv1d(x, _t(lib, np.linspace(-1, 1, 12).reshape(2, 3, 2))),
        [(2, 3, 7)],
    ),
    "conv_transpose1d_weight_only": (
        lambda lib, w: F(lib).conv_transpose1d(_t(lib, np.ones((1, 3, 4))), w),
        [(3, 2, 2)],
    ),
    "layer_norm_bias_only": (
        lambda lib, b: F(lib).layer_norm(_t(lib, np.arange(14.0).reshape(2, 7)), (7,), None, b),
        [(7,)],
    ),
    "batch_norm_train_weight_only": (
        lambda lib, w: F(lib).batch_norm(
            _t(lib, np.linspace(-2, 3, 42).reshape(2, 3, 7)), None, None, w, None, training=True
        ),
        [(3,)],
    ),
    "instance_norm_weight_only": (
        lambda lib, w: F(lib).instance_norm(
            _t(lib, np.linspace(-2, 3, 42).reshape(2, 3, 7)), weight=w
        ),
        [(3,)],
    ),
    "instance_norm_running_stats": (
        lambda lib, x: F(lib).instance_norm(
            x, _t(lib, [0.1, 0.2, 0.3]), _t(lib, [1.0, 2.0, 3.0]), use_input_stats=False
        ),
        [(2, 3, 7)],
    ),
    # a gradient that reaches the kernel already a function of the input (values, no zeros)
    "max_pool2d_squared": (lambda lib, x: F(lib).max_pool2d(x, 2).square(), [(2, 3, 6, 5)]),
    "pad_reflect_squared": (
        lambda lib, x: F(lib).pad(x, (2, 1), mode="reflect").square(),
        [(2, 3, 7)],
    ),
    "nll_loss_squared": (
        lambda lib, x: F(lib).nll_loss(x[:, :, 0], lib.tensor([0, 2]), reduction="none").square(),
        [(2, 3, 7)],
    ),
    "conv1d_bias_squared": (
        lambda lib, x, w, b: F(lib).conv1d(x, w, b).square(),
        [(2, 3, 7), (4, 3, 2), (4,)],
    ),
    # grid_sample: the input's gradient requires grad (none in the input, zeros in the grid)
    "grid_sample_input": (
        lambda lib, x: F(lib).grid_sample(x, _t(lib, _GRID), align_corners=True),
        [(2, 3, 6, 5)],
    ),
    "grid_sample_both": (
        lambda lib, x, g: F(lib).grid_sample(x, g.tanh(), align_corners=False),
        [(2, 3, 6, 5), (2, 3, 2, 2)],
    ),
    "grid_sample_nearest": (
        lambda lib, x, g: F(lib).grid_sample(x, g.tanh(), mode="nearest", align_corners=False),
        [(2, 3, 6, 5), (2, 3, 2, 2)],
    ),
    # normalizations: eval-mode batch_norm's input gradient, the kernels' bias gradients
    "batch_norm_eval": (
        lambda lib, x: F(lib).batch_norm(x, _t(lib, [0.1, 0.2, 0.3]), _t(lib, [1.0, 2.0, 3.0])),
        [(2, 3, 7)],
    ),
    "batch_norm_eval_affine": (
        lambda lib, x, w, b: F(lib).batch_norm(
            x, _t(lib, [0.1, 0.2, 0.3]), _t(lib, [1.0, 2.0, 3.0]), w, b, training=False
        ),
        [(2, 3, 7), (3,), (3,)],
    ),
    "batch_norm_train_affine": (
        lambda lib, x, w, b: F(lib).batch_norm(x, None, None, w, b, training=True),
        [(2, 3, 7), (3,), (3,)],
    ),
    "layer_norm_affine": (
        lambda lib, x, w, b: F(lib).layer_norm(x, (7,), w, b),
        [(2, 3, 7), (7,), (7,)],
    ),
    "group_norm_affine": (
        lambda lib, x, w, b: F(lib).group_norm(x, 3, w, b),
        [(2, 3, 7), (3,), (3,)],
    ),
    "instance_norm_affine": (
        lambda lib, x, w, b: F(lib).instance_norm(x, weight=w, bias=b),
        [(2, 3, 7), (3,), (3,)],
    ),
    "prelu": (lambda lib, x, w: F(lib).prelu(x, w), [(2, 3, 7), (3,)]),
    # torch differentiates these once: the gradient requires grad, a second one is refused
    "multi_margin_loss": (
        lambda lib, x: F(lib).multi_margin_loss(x[:, :, 0], lib.tensor([0, 2])),
        [(2, 3, 7)],
    ),
    "multi_margin_loss_p2_weight": (
        lambda lib, x: F(lib).multi_margin_loss(
            x[:, :, 0], lib.tensor([0, 2]), p=2, weight=_t(lib, [1.0, 2.0, 3.0]), reduction="none"
        ),
        [(2, 3, 7)],
    ),
    "multilabel_margin_loss": (
        lambda lib, x: F(lib).multilabel_margin_loss(x[0], lib.tensor(_LABELS)),
        [(2, 3, 7)],
    ),
    # unchanged neighbours: constant gradients in torch too
    "embedding_bag": (
        lambda lib, w: F(lib).embedding_bag(lib.tensor([[0, 2], [1, 1]]), w),
        [(3, 4)],
    ),
    "interpolate_bilinear": (
        lambda lib, x: F(lib).interpolate(x, scale_factor=1.5, mode="bilinear"),
        [(2, 3, 6, 5)],
    ),
    "interpolate_nearest": (
        lambda lib, x: F(lib).interpolate(x, size=11, mode="nearest"),
        [(2, 3, 7)],
    ),
    "linear_bias": (lambda lib, x, w, b: F(lib).linear(x, w, b), [(2, 3, 7), (4, 7), (4,)]),
}


def _numpy(t):
    if t is None:
        return None
    if isinstance(t, torch.Tensor):
        return t.detach().numpy(force=True).copy()  # force: torch's zero tensors
    return t.detach().numpy().copy()


def _derivatives(lib, outputs, leaves, weights):
    """For each of ``outputs``: ``None`` where it does not require grad, the refusal, or the
    derivative of ``sum(output * weight)`` in each leaf (``None`` where unused)."""
    found = []
    for out, weight in zip(outputs, weights):
        if out is None or not out.requires_grad:
            found.append(None)
            continue
        try:
            grads = lib.autograd.grad(
                (out * lib.tensor(weight)).sum(), leaves, allow_unused=True, retain_graph=True
            )
        except Exception as e:  # either library's refusal is a result here
            found.append(e)
            continue
        found.append(list(grads))
    return found


def run(lib, name, arrays, w, vs, us):
    fn, _ = CASES[name]
    leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
    y = fn(lib, *leaves)
    loss = (y * lib.tensor(w[: y.numel()].reshape(tuple(y.shape)))).sum()
    grads = lib.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
    result = {
        "g": [_numpy(g) for g in grads],
        "requires_grad": [g is not None and bool(g.requires_grad) for g in grads],
        "h": [],
        "third": [],
    }
    for second in _derivatives(lib, grads, leaves, vs):
        if second is None or isinstance(second, Exception):
            result["h"].append(second)
            result["third"].append(None)
            continue
        result["h"].append([_numpy(h) for h in second])
        third = _derivatives(lib, second, leaves, us)
        result["third"].append(
            [t if t is None or isinstance(t, Exception) else [_numpy(a) for a in t] for t in third]
        )
    # a function of the gradients, backward (torch: fine, leaves unset where unreached)
    try:
        tracked = [(g, v) for g, v in zip(grads, vs) if g is not None and g.requires_grad]
        if tracked:
            total = sum((g * g * lib.tensor(v)).sum() for g, v in tracked)
            got = total.backward()
            found = [leaf.grad(got) if lib is rg else leaf.grad for leaf in leaves]
            result["backward"] = [_numpy(a) for a in found]
        else:
            result["backward"] = None
    except Exception as e:
        result["backward"] = e
    return result


def _same_refusal(label, got, want):
    assert isinstance(got, Exception), f"{label}: torch raises {want!r}, we give {got!r}"
    assert isinstance(got, type(want)), f"{label}: {got!r} is not a {type(want).__name__}"
    assert isinstance(got, rg.RetrogradError), f"{label}: bare {got!r}"


def _same_arrays(label, got, want):
    """Two lists of arrays, ``None`` where unused: the same ``None``s, close values."""
    assert len(got) == len(want), label
    for i, (a, b) in enumerate(zip(got, want)):
        where = f"{label}, leaf {i}"
        assert (a is None) == (b is None), f"{where}: torch {'None' if b is None else 'a tensor'}"
        if b is not None:
            scale = max(1.0, float(np.nanmax(np.abs(b), initial=0.0)))
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11 * scale, err_msg=where)


def _same_derivatives(label, got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        where = f"{label} of gradient {i}"
        if b is None:
            assert a is None, f"{where}: torch's does not require grad, ours does"
        elif isinstance(b, Exception):
            _same_refusal(where, a, b)
        else:
            assert a is not None and not isinstance(a, Exception), f"{where}: ours {a!r}"
            _same_arrays(where, a, b)


@pytest.mark.parametrize("name", sorted(CASES))
def test_connectivity_and_higher_derivatives_match_torch(name):
    rng = np.random.default_rng([82, sorted(CASES).index(name)])
    shapes = CASES[name][1]
    arrays = [rng.standard_normal(shape) for shape in shapes]
    w = rng.standard_normal(2000)
    vs = [rng.standard_normal(shape) for shape in shapes]
    us = [rng.standard_normal(shape) for shape in shapes]
    want = run(torch, name, arrays, w, vs, us)
    got = run(rg, name, arrays, w, vs, us)
    _same_arrays(f"{name}: first gradients", got["g"], want["g"])
    assert got["requires_grad"] == want["requires_grad"], (
        f"{name}: gradients' requires_grad {got['requires_grad']}, torch's {want['requires_grad']}"
    )
    _same_derivatives(f"{name}: second derivative", got["h"], want["h"])
    for i, (a, b) in enumerate(zip(got["third"], want["third"])):
        if b is not None:
            _same_derivatives(f"{name}: third derivative through gradient {i}", a, b)
    if isinstance(want["backward"], Exception):
        _same_refusal(
            f"{name}: backward of a function of the gradients", got["backward"], want["backward"]
        )
    elif want["backward"] is None:
        assert got["backward"] is None, f"{name}: ours requires grad, torch's does not"
    else:
        assert not isinstance(got["backward"], Exception), f"{name}: {got['backward']!r}"
        _same_arrays(
            f"{name}: backward of a function of the gradients", got["backward"], want["backward"]
        )


def test_links_are_made_under_create_graph_only():
    """A first-order backward of max pooling under nll_loss gives a constant gradient (no
    link recorded, nothing of the input kept for it); under create_graph it requires grad."""
    x = rg.tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 5)), requires_grad=True)
    for create_graph in (False, True):
        loss = F(rg).nll_loss(F(rg).max_pool2d(x, 2).flatten(1), rg.tensor([1, 3]))
        (g,) = rg.autograd.grad(loss, x, create_graph=create_graph)
        assert g.requires_grad == create_graph
