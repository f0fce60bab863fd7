"""Leftovers closed by leftovers17, each against torch 2.13: inference tensors (what
``inference_mode()`` makes, with torch's rules), a custom ``autograd.Function``'s one backward
call with a gradient per output, ``grad_fn.next_functions`` walking torch's graph, one check of
bool flags with torch's error classes, and ``isinstance(x, rg.Tensor)`` without a Python hook
until a sparse tensor exists."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.utils.data import BatchSampler, RandomSampler, WeightedRandomSampler


def _leaf(library, values):
    return library.tensor(values, dtype=library.float64, requires_grad=True)


# -- (1) inference tensors -------------------------------------------------------------------
def _inference_kinds(library):
    """Which tensors of one program are inference tensors, by label."""
    plain = library.ones(3)
    weight = _leaf(library, [1.0, 2.0, 3.0])
    layer = library.nn.Linear(3, 2)
    with library.inference_mode():
        made = library.ones(3)
        scaled = plain * 2  # an op on an ordinary tensor
        exp = plain.exp()
        view = plain.view(3)  # a view of an ordinary tensor: ordinary
        tracked = weight * 2
        first, second = library.ones(2, 3).unbind(0)
        output = layer(made)
        plain.add_(1)  # written in the block: stays ordinary
        with library.inference_mode(False):
            inner = library.ones(3)
    with library.no_grad():
        untracked = library.ones(3)
    kinds = {
        "made": made,
        "scaled": scaled,
        "exp": exp,
        "view_of_ordinary": view,
        "tracked_input": tracked,
        "unbind_first": first,
        "unbind_second": second,
        "layer_output": output,
        "layer_weight": layer.weight,
        "written_in_block": plain,
        "inference_mode_false": inner,
        "no_grad": untracked,
        "view_outside": made.view(3),
        "select_outside": made[0],
        "detach_outside": made.detach(),
        "op_outside": made * 2,
        "clone_outside": made.clone(),
    }
    return {label: t.is_inference() for label, t in kinds.items()}


def test_inference_mode_makes_inference_tensors_as_torch():
    ours, theirs = _inference_kinds(rg), _inference_kinds(torch)
    assert ours == theirs
    assert theirs["made"] and not theirs["view_of_ordinary"]  # (the cases differ)


def _writes(library, x):
    yield "add_", lambda: x.add_(1)
    yield "iadd", lambda: x.__iadd__(1)
    yield "setitem", lambda: x.__setitem__(0, 5.0)
    yield "view_mul_", lambda: x.view(3).mul_(2)
    yield "copy_", lambda: x.copy_(library.zeros(3))
    yield "requires_grad_", lambda: x.requires_grad_()
    yield "requires_grad", lambda: setattr(x, "requires_grad", True)
    yield "parameter", lambda: library.nn.Parameter(x)


def test_inference_tensors_refuse_writes_and_grad_outside_the_block():
    for library, error in ((torch, RuntimeError), (rg, rg.AutodiffError)):
        with library.inference_mode():
            x = library.tensor([1.0, 2.0, 3.0])
            x.add_(1)  # inside the block: allowed
            x[0] = 0.0
        for _label, write in _writes(library, x):
            with pytest.raises(error, match="nference tensor"):
                write()
        assert not x.requires_grad
        if library is rg:  # unchanged by the refused writes (torch's copy_ writes, then refuses)
            assert x.tolist() == [0.0, 3.0, 4.0]
        with library.inference_mode():  # inside again: writable
            x.fill_(1.0)
        assert x.tolist() == [1.0, 1.0, 1.0]


def _saved_use(library):
    weight = _leaf(library, [1.0, 2.0, 3.0])
    plain = library.tensor([0.5, 0.5, 0.5], dtype=library.float64)
    with library.inference_mode():
        x = library.tensor([4.0, 5.0, 6.0], dtype=library.float64)
        copied = plain.clone()  # an inference tensor; ``plain`` stays ordinary
    refused = {}
    for label, use in (("mul", lambda: weight * x), ("matmul", lambda: weight @ x)):
        try:
            use()
            refused[label] = False
        except RuntimeError as error:
            assert "Inference tensors cannot be saved for backward" in str(error)
            refused[label] = True
    total = (weight + x).sum() + (weight * x.clone()).sum() + (weight * plain).sum()
    if library is torch:
        total.backward()
        gradient = weight.grad
    else:
        gradient = weight.grad(total.backward())
    return refused, gradient.tolist(), copied.is_inference(), plain.is_inference()


def test_inference_tensors_cannot_be_saved_for_backward_but_can_be_read():
    ours, theirs = _saved_use(rg), _saved_use(torch)
    assert ours == theirs
    assert theirs[0] == {"mul": True, "matmul": True}


def test_inference_mode_leaves_ordinary_ops_unwatched():
    from retrograd.errors import RESULT_WATCH
    from retrograd.tensor import _dispatch

    with rg.inference_mode():
        assert RESULT_WATCH[0] is not None and _dispatch.dispatch is not _dispatch._plain_dispatch
    assert RESULT_WATCH[0] is None
    assert rg.Tensor._apply is _dispatch._plain_dispatch is _dispatch.dispatch


# -- (2) a custom Function with several outputs ----------------------------------------------
def _function_calls(library, materialize, use):
    calls = []

    class Three(library.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(materialize)
            position = library.argmax(x).reshape(1).to(x.dtype)
            ctx.mark_non_differentiable(position)
            return x * 2, x.sum(), position

        @staticmethod
        def backward(ctx, g_double, g_sum, g_position):
            calls.append([None if g is None else g.tolist() for g in (g_double, g_sum, g_position)])
            total = library.zeros(3, dtype=library.float64)
            if g_double is not None:
                total = total + 2 * g_double
            if g_sum is not None:
                total = total + g_sum
            return total

    x = _leaf(library, [1.0, 5.0, 3.0])
    double, summed, position = Three.apply(x)
    loss = use(double, summed, position)
    if library is torch:
        loss.backward()
        gradient = x.grad
    else:
        gradient = x.grad(loss.backward())
    return calls, gradient.tolist(), position.requires_grad


@pytest.mark.parametrize("materialize", [True, False])
def test_function_backward_gets_one_gradient_per_output_in_one_call(materialize):
    uses = (
        lambda d, s, p: (d * 3).sum(),  # the first output only
        lambda d, s, p: s * 4,  # the second only
        lambda d, s, p: d.sum() + s,  # both
        lambda d, s, p: (d + p).sum() + s,  # the non-differentiable one too
    )
    for use in uses:
        ours, theirs = (
            _function_calls(rg, materialize, use),
            _function_calls(torch, materialize, use),
        )
        assert ours == theirs
        assert len(theirs[0]) == 1  # one call per backward


def _hooked_outputs(library):
    calls, hooked = [], []

    class Pair(library.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g_first, g_second):
            calls.append((g_first.tolist(), g_second.tolist()))
            return g_first * 2 + g_second * 3

    x = _leaf(library, [1.0, 2.0])
    first, second = Pair.apply(x)
    first.register_hook(lambda g: hooked.append("first") or g * 10)
    second.register_hook(lambda g: hooked.append("second") or g * 100)
    loss = (first * second).sum()
    if library is torch:
        loss.backward()
        gradient = x.grad
    else:
        gradient = x.grad(loss.backward())
    return calls, gradient.tolist(), sorted(hooked)


def test_function_backward_gets_its_outputs_hooked_gradients_once():
    assert _hooked_outputs(rg) == _hooked_outputs(torch)


# -- (3) grad_fn.next_functions ----------------------------------------------------------------
def _walked(node, depth=4):
    if node is None:
        return None
    name = type(node).__name__
    if name == "AccumulateGrad" or depth == 0:
        return name
    return (
        name,
        tuple((_walked(parent, depth - 1), index) for parent, index in node.next_functions),
    )


def _graphs(library):
    torch.manual_seed(0)
    np.random.seed(0)
    values = np.random.randn(2, 3)
    a = library.tensor(values, requires_grad=True)
    b = library.tensor(values * 2, requires_grad=True)
    constant = library.tensor(values + 1)
    first, second = a.unbind(0)
    left, right = a.split([1, 2], dim=1)
    top, bottom = a.chunk(2, 0)
    F = library.nn.functional  # noqa: N806 (torch's idiom)
    return {
        "constant_operand": constant * a,
        "number_operand": a * 2,
        "cat": library.cat([a, constant, b]),
        "stack": library.stack([a, b]),
        "unbind": second * first,
        "split_with_sizes": right.sum() + left.sum(),
        "chunk": bottom - top,
        "where": library.where(constant > 1, a, b),
        "where_constant": library.where(constant > 1, constant, b),
        "linear": F.linear(constant, a, b[0, :2]),
        "linear_without_bias": F.linear(constant, a),
        "select_then_slice": a[1, 1:],
        "index": a[library.tensor([0, 1])],
        "sum_dim": a.sum(1),
        "max_dim": a.max(1).values,
        "cross_entropy": F.cross_entropy(a, library.tensor([0, 2])),
        "mse_loss": F.mse_loss(a, constant),
    }


def test_next_functions_walk_torchs_graph():
    ours, theirs = _graphs(rg), _graphs(torch)
    mismatched = {
        label: (_walked(ours[label].grad_fn), _walked(theirs[label].grad_fn))
        for label in theirs
        if _walked(ours[label].grad_fn) != _walked(theirs[label].grad_fn)
    }
    assert not mismatched
    leaf_node = ours["number_operand"].grad_fn.next_functions[0][0]
    assert (
        leaf_node.name()
        == torch.ones(1, requires_grad=True).mul(2).grad_fn.next_functions[0][0].name()
    )


def test_next_functions_name_a_custom_functions_output():
    def outputs(library):
        class Pair(library.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g_first, g_second):
                return 2 * g_first + 3 * g_second

        first, second = Pair.apply(library.ones(2, requires_grad=True))
        return [index for _, index in (second * first).grad_fn.next_functions]

    assert outputs(rg) == outputs(torch) == [1, 0]


# -- (4) bool flags ------------------------------------------------------------------------------
def _flag_calls(library):
    F = library.nn.functional  # noqa: N806
    image = library.ones(1, 1, 4, 4)
    yield "max_pool2d", lambda v: F.max_pool2d(image, 2, ceil_mode=v)
    yield "avg_pool2d", lambda v: F.avg_pool2d(image, 2, count_include_pad=v)
    yield "embedding", lambda v: F.embedding(library.tensor([0]), library.ones(3, 2), sparse=v)
    yield "kl_div", lambda v: F.kl_div(library.ones(3), library.ones(3), log_target=v)
    yield "sum", lambda v: library.ones(2, 2).sum(0, keepdim=v)
    yield "Parameter", lambda v: library.nn.Parameter(library.ones(2), requires_grad=v)
    yield "requires_grad_", lambda v: library.nn.Linear(2, 2).requires_grad_(v)
    yield "requires_grad_", lambda v: library.ones(2).requires_grad_(v)
    yield "nonzero", lambda v: library.ones(2).nonzero(as_tuple=v)


@pytest.mark.parametrize("value", [1, np.bool_(True), None])
def test_flags_that_are_not_bools_raise_torchs_type_error(value):
    for (name, ours), (_, theirs) in zip(_flag_calls(rg), _flag_calls(torch), strict=True):
        with pytest.raises(TypeError):
            theirs(value)
        with pytest.raises(rg.DTypeError, match=f"{name}: .* must be a bool, got"):
            ours(value)


def test_sampler_flags_raise_torchs_error_classes():
    def samplers(library_sampler_classes):
        random, weighted, batch = library_sampler_classes
        yield lambda: random(range(3), replacement=1)
        yield lambda: weighted([1.0, 2.0], 2, replacement=1)
        yield lambda: batch(range(3), 2, drop_last=1)

    from torch.utils import data as torch_data

    ours = samplers((RandomSampler, WeightedRandomSampler, BatchSampler))
    theirs = samplers(
        (torch_data.RandomSampler, torch_data.WeightedRandomSampler, torch_data.BatchSampler)
    )
    for our_call, their_call in zip(ours, theirs, strict=True):
        with pytest.raises((TypeError, ValueError)) as torch_error:
            their_call()
        with pytest.raises(rg.RetrogradError, match="should be a boolean value") as our_error:
            our_call()
        builtin = TypeError if isinstance(torch_error.value, TypeError) else ValueError
        assert isinstance(our_error.value, builtin)


# -- (5) isinstance(x, rg.Tensor) ----------------------------------------------------------------
def test_tensor_isinstance_has_no_python_hook_until_a_sparse_tensor_exists():
    from retrograd.tensor import sparse_coo

    meta = type(rg.Tensor)
    hook = meta.__dict__.get("__instancecheck__")  # (installed if an earlier test made one)
    admitted = sparse_coo._ADMITTED[0]
    try:
        if hook is not None:  # as in a process that has made no sparse tensor yet
            del meta.__instancecheck__
        sparse_coo._ADMITTED[0] = False
        assert isinstance(rg.nn.Parameter(rg.ones(1)), rg.Tensor)
        assert not isinstance(3.0, rg.Tensor)
        assert "__instancecheck__" not in meta.__dict__
        sparse = rg.sparse_coo_tensor(rg.tensor([[0, 1], [1, 0]]), rg.tensor([1.0, 2.0]), (2, 2))
        assert "__instancecheck__" in meta.__dict__
        assert isinstance(sparse, rg.Tensor) and not isinstance(sparse, rg.nn.Parameter)
        assert isinstance(rg.nn.Parameter(rg.ones(1)), rg.Tensor)
    finally:
        if hook is None:
            if "__instancecheck__" in meta.__dict__:
                del meta.__instancecheck__
        else:
            meta.__instancecheck__ = hook
        sparse_coo._ADMITTED[0] = admitted
