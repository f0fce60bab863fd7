"""The defects round 27 of the differential fuzzer found (nn modules and nn.functional with
random configurations), each against torch's result."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _leaf(lib, array):
    t = lib.tensor(array)
    return t.requires_grad_(True) if lib is torch else t.require_grad()


def _value_and_grads(lib, fn, arrays, weights):
    """``fn``'s output, and the gradients of ``sum(output * weights)`` for each array."""
    leaves = [_leaf(lib, a) for a in arrays]
    out = fn(lib, *leaves)
    loss = (out * lib.tensor(weights)).sum()
    if lib is torch:
        loss.backward()
        grads = [leaf.grad.numpy() for leaf in leaves]
    else:
        gradients = loss.backward()
        grads = [np.asarray(leaf.grad(gradients)) for leaf in leaves]
    return np.asarray(out.detach()), grads


def _assert_matches_torch(fn, arrays, out_shape):
    weights = np.random.default_rng(1).standard_normal(out_shape)
    want, want_grads = _value_and_grads(torch, fn, arrays, weights)
    got, got_grads = _value_and_grads(rg, fn, arrays, weights)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    for g, w in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bias_shape", [(), (1,), (1, 4), (2, 4)])
def test_linear_adds_any_bias_that_broadcasts_to_the_output(bias_shape):
    # torch's addmm broadcasts the bias; anything but a [out] bias was a ShapeError
    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal((2, 3)),
        rng.standard_normal((4, 3)),
        rng.standard_normal(bias_shape),
    ]

    def fn(lib, x, w, b):
        return lib.nn.functional.linear(x, w, b)

    _assert_matches_torch(fn, arrays, (2, 4))


def test_linear_refuses_a_bias_that_would_grow_the_output():
    x, w, b = np.ones((2, 3)), np.ones((4, 3)), np.ones((3, 4))
    with pytest.raises(RuntimeError):
        torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), torch.tensor(b))
    with pytest.raises(rg.ShapeError, match=r"linear: bias \[3, 4\] does not broadcast"):
        rg.nn.functional.linear(rg.tensor(x), rg.tensor(w), rg.tensor(b))


@pytest.mark.parametrize(
    ("x_shape", "bias_shape", "out_shape"),
    [((2, 3), None, (2,)), ((4, 2, 3), None, (4, 2)), ((3,), None, ()), ((3,), (), ())],
)
def test_linear_with_a_weight_vector(x_shape, bias_shape, out_shape):
    # torch's matmul takes a 1-d weight (one output per row); it was a ShapeError
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(x_shape), rng.standard_normal(3)]
    if bias_shape is not None:
        arrays.append(rng.standard_normal(bias_shape))

    def fn(lib, *args):
        return lib.nn.functional.linear(*args)

    _assert_matches_torch(fn, arrays, out_shape)


def test_linear_with_a_weight_vector_and_a_bias_on_a_batch_is_refused_as_torch():
    x, w, b = np.ones((2, 3)), np.ones(3), np.ones(())
    with pytest.raises(RuntimeError):
        torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), torch.tensor(b))
    with pytest.raises(rg.ShapeError, match="linear: a weight vector takes a bias"):
        rg.nn.functional.linear(rg.tensor(x), rg.tensor(w), rg.tensor(b))


@pytest.mark.parametrize("given", ["running_mean", "running_var"])
def test_instance_norm_wants_both_running_statistics_or_neither(given):
    # torch raises ValueError; one of them alone was silently ignored
    x = np.random.default_rng(3).standard_normal((2, 3, 4))
    for lib, error in ((torch, ValueError), (rg, rg.InvalidArgumentError)):
        stats = {given: lib.tensor(np.ones(3))}
        with pytest.raises(error, match="running_mean and running_var"):
            lib.nn.functional.instance_norm(lib.tensor(x), **stats)


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("request_", [{"size": 0}, {"scale_factor": 0.2}])
def test_area_interpolation_to_an_empty_size_gives_an_empty_tensor(spatial, request_):
    # torch's area mode is adaptive average pooling, which makes empty outputs; it was a
    # ShapeError ("output size must be non-empty")
    x = np.random.default_rng(4).standard_normal((2, 3, *([4] * spatial)))
    want = torch.nn.functional.interpolate(torch.tensor(x), mode="area", **request_)
    leaf = rg.tensor(x).require_grad()
    got = rg.nn.functional.interpolate(leaf, mode="area", **request_)
    assert got.shape == tuple(want.shape)
    assert np.array_equal(np.asarray(leaf.grad(got.sum().backward())), np.zeros(x.shape))
    module = rg.nn.Upsample(mode="area", **request_)
    assert module(rg.tensor(x)).shape == tuple(want.shape)


@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_of_no_entries_with_per_sample_weights(include_last_offset):
    # every bag empty: torch gives zero bags; gathering the (empty) per-sample weights was an
    # IndexOutOfRangeError
    torch.manual_seed(0)
    table = torch.randn(4, 3, dtype=torch.float64).numpy()
    results = []
    for lib in (torch, rg):
        module = lib.nn.EmbeddingBag(4, 3, mode="sum", include_last_offset=include_last_offset)
        module = module.double()
        module.load_state_dict({"weight": lib.tensor(table)})
        weights = _leaf(lib, np.zeros(0))
        out = module(
            lib.tensor(np.zeros(0, dtype=np.int64)),
            lib.tensor([0, 0, 0]),
            per_sample_weights=weights,
        )
        loss = (out * lib.tensor(np.arange(out.shape[0] * 3.0).reshape(-1, 3))).sum()
        if lib is torch:
            loss.backward()
            grads = (weights.grad.numpy(), module.weight.grad.numpy())
        else:
            gradients = loss.backward()
            grads = (np.asarray(weights.grad(gradients)), np.asarray(module.weight.grad(gradients)))
        results.append((np.asarray(out.detach()), grads))
    (want, want_grads), (got, got_grads) = results
    assert np.array_equal(got, want)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert g.shape == w.shape and np.array_equal(g, w)


def test_embedding_bag_refuses_per_sample_weights_of_another_dtype():
    # torch refuses them; they were promoted (a float64 result from a float32 table)
    with pytest.raises(RuntimeError, match="per_sample_weights"):
        torch.nn.EmbeddingBag(4, 3, mode="sum")(
            torch.tensor([1, 2]), torch.tensor([0]), per_sample_weights=torch.ones(2).double()
        )
    with pytest.raises(rg.DTypeError, match="embedding_bag: per_sample_weights"):
        rg.nn.EmbeddingBag(4, 3, mode="sum")(
            rg.tensor([1, 2]), rg.tensor([0]), per_sample_weights=rg.ones(2).double()
        )


@pytest.mark.parametrize("name", ["soft_margin_loss", "multilabel_soft_margin_loss"])
@pytest.mark.parametrize("target_shape", [(3,), (2, 1), (1, 1), ()])
@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_soft_margin_losses_broadcast_the_target_to_the_input(name, target_shape, reduction):
    # torch broadcasts the target to the input's shape; anything but the same shape was a
    # ShapeError
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3))
    target = rng.integers(0, 2, size=target_shape) * 2.0 - 1.0
    out_shape = {"none": (2, 3) if name == "soft_margin_loss" else (2,), "sum": ()}[reduction]

    def fn(lib, leaf):
        return getattr(lib.nn.functional, name)(leaf, lib.tensor(target), reduction=reduction)

    _assert_matches_torch(fn, [x], out_shape)


@pytest.mark.parametrize("name", ["soft_margin_loss", "multilabel_soft_margin_loss"])
def test_soft_margin_losses_refuse_a_target_that_would_grow_the_input(name):
    x, target = np.ones((2, 3)), np.ones((1, 3, 1))
    with pytest.raises(RuntimeError):
        getattr(torch.nn.functional, name)(torch.tensor(x), torch.tensor(target))
    # both shapes named, in either order (round 69 names the input's first for the
    # multilabel loss, as its other refusals do)
    with pytest.raises(rg.ShapeError, match=rf"{name}: (?=.*\[1, 3, 1\])(?=.*\[2, 3\])"):
        getattr(rg.nn.functional, name)(rg.tensor(x), rg.tensor(target))


@pytest.mark.parametrize("dims", [(1,), (0, 1), (2, -1), (-2,)])
def test_flatten_of_a_0d_tensor_checks_its_dimensions(dims):
    # torch's range for a 0-d tensor is -1..0; any dimension was accepted (nn.Flatten(),
    # start_dim=1, flattened a scalar to [1] where torch raises)
    with pytest.raises(IndexError):
        torch.flatten(torch.tensor(2.0), *dims)
    with pytest.raises(rg.ShapeError, match=r"flatten: dimension .* 0-d tensor"):
        rg.flatten(rg.tensor(2.0), *dims)
    with pytest.raises(rg.ShapeError, match="Flatten: flatten"):
        rg.nn.Flatten(*dims)(rg.tensor(2.0))


def test_flatten_of_a_0d_tensor_in_range_gives_one_element():
    for dims in [(), (0,), (-1,), (0, -1), (-1, 0)]:
        want = torch.flatten(torch.tensor(2.0), *dims)
        assert rg.flatten(rg.tensor(2.0), *dims).tolist() == want.tolist()


def _parameter_dict_keys(lib):
    from collections import OrderedDict

    params = lib.nn.ParameterDict({"w": lib.ones(2), "b": lib.ones(1)})
    params.update({"z": lib.ones(1), "a": lib.ones(1)})
    params.update([("y", lib.ones(1)), ("c", lib.ones(1))])
    params.update(OrderedDict([("x", lib.ones(1)), ("d", lib.ones(1))]))
    return (
        list(params.keys()),
        list(params.state_dict()),
        [name for name, _ in params.named_parameters()],
    )


def test_parameter_dict_from_a_plain_mapping_sorts_its_keys_as_torch():
    # torch adds a plain dict's entries sorted by key (an OrderedDict's and a sequence's in
    # their order); they went in insertion order, so named_parameters(), the state dict and
    # an optimizer's parameter order differed from torch's
    assert _parameter_dict_keys(rg) == _parameter_dict_keys(torch)


def _container_reprs(lib):
    nn = lib.nn
    module = nn.Module()
    module.singles = nn.ParameterList([nn.Parameter(lib.ones(1))])
    return [
        repr(nn.ParameterList([nn.Parameter(lib.ones(2)), nn.Parameter(lib.zeros(3, 2))])),
        repr(nn.ParameterDict({"w": nn.Parameter(lib.ones(2)), "b": lib.ones(())})),
        repr(nn.ParameterDict({"w": nn.Parameter(lib.ones(2))})),
        repr(nn.ParameterList()),
        repr(module),
    ]


def test_parameter_containers_repr_their_entries_as_torch():
    # they printed as empty (``ParameterList()``) whatever they held; torch lists each entry
    # (its dtype named by the library: torch.float32 / retrograd.float32, and torch's
    # ParameterDict its tensor type: torch.FloatTensor / retrograd.FloatTensor)
    want = [text.replace("torch.", "retrograd.") for text in _container_reprs(torch)]
    assert _container_reprs(rg) == want
