"""torch 2.13 names that training code uses, against torch: ``nn.AdaptiveLogSoftmaxWithLoss``
(state dict, outputs and float64 gradients of ``forward``, ``log_prob``, ``predict``),
``torch.utils._pytree`` (leaves, structure and round trips of nested containers) and
``torch.autograd.graph``'s saved tensor hooks (gradients and call counts)."""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict, deque, namedtuple

import numpy as np
import pytest
import torch
import torch.utils._pytree as torch_pytree

import retrograd as rg
import retrograd.utils._pytree as rg_pytree
from backends import inner_backend
from retrograd.errors import (
    AutodiffError,
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    RetrogradError,
    ShapeError,
)


def _np(t):
    return np.asarray(t.tolist() if isinstance(t, rg.Tensor) else t.detach().numpy())


# -- nn.AdaptiveLogSoftmaxWithLoss ------------------------------------------------------------
def _asm_pair(in_features=8, n_classes=10, cutoffs=(3, 6), div_value=2.0, head_bias=True):
    torch.manual_seed(0)
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(
        in_features, n_classes, list(cutoffs), div_value=div_value, head_bias=head_bias
    ).double()
    ours = rg.nn.AdaptiveLogSoftmaxWithLoss(
        in_features, n_classes, cutoffs, div_value=div_value, head_bias=head_bias
    ).double()
    result = ours.load_state_dict({k: rg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    assert not result.missing_keys and not result.unexpected_keys
    return ours, theirs


def test_adaptive_log_softmax_holds_torchs_parameters_and_state_dict_keys():
    for head_bias, div_value in ((False, 4.0), (True, 2.0)):
        theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 10, 15], div_value, head_bias)
        ours = rg.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 10, 15], div_value, head_bias)
        shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
        assert shapes == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
        assert list(shapes) == list(theirs.state_dict())
        for name in ("cutoffs", "shortlist_size", "n_clusters", "head_size", "in_features"):
            assert getattr(ours, name) == getattr(theirs, name)
        assert str(ours) == str(theirs)
    assert rg.nn.modules.adaptive.AdaptiveLogSoftmaxWithLoss is rg.nn.AdaptiveLogSoftmaxWithLoss


@pytest.mark.parametrize("target", [[0, 4, 9, 2, 7, 6], [1, 0, 2, 2, 0, 1], [9, 8, 7, 6, 9, 6]])
def test_adaptive_log_softmax_forward_and_gradients_as_torchs(target):
    ours, theirs = _asm_pair()
    x = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    expected = theirs(x, torch.tensor(target))
    expected.loss.backward()
    x_ours = rg.tensor(x.detach().numpy()).require_grad()
    got = ours(x_ours, rg.tensor(target))
    assert type(got).__name__ == "_ASMoutput" and got._fields == ("output", "loss")
    assert got.output.shape == (6,) and got.output.dtype == rg.float64 and got.loss.shape == ()
    np.testing.assert_allclose(_np(got.output), _np(expected.output), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(got.loss), expected.loss.item(), rtol=1e-12)
    grads = got.loss.backward()
    np.testing.assert_allclose(_np(x_ours.grad(grads)), _np(x.grad), rtol=1e-10, atol=1e-12)
    for (name, p), (their_name, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == their_name
        g = p.grad(grads)
        expected_grad = np.zeros(q.shape) if q.grad is None else _np(q.grad)
        np.testing.assert_allclose(
            np.zeros(q.shape) if g is None else _np(g), expected_grad, rtol=1e-10, atol=1e-12
        )


def test_adaptive_log_softmax_unbatched_log_prob_and_predict_as_torchs():
    ours, theirs = _asm_pair()
    x = torch.randn(7, 8, dtype=torch.float64)
    x_ours = rg.tensor(x.numpy())
    single = ours(x_ours[2], rg.tensor(7))
    expected = theirs(x[2], torch.tensor(7))
    assert single.output.shape == () and single.loss.shape == ()
    np.testing.assert_allclose(float(single.output), expected.output.item(), rtol=1e-12)
    log_prob = ours.log_prob(x_ours)
    assert log_prob.shape == (7, 10)
    np.testing.assert_allclose(_np(log_prob), _np(theirs.log_prob(x)), rtol=1e-12, atol=1e-12)
    assert ours.predict(x_ours).tolist() == theirs.predict(x).tolist()
    # rows whose head prefers a cluster: predict's two other paths (some rows, all rows)
    for cluster_bias, all_in_clusters in ((0.0, False), (50.0, True)):
        with torch.no_grad():
            theirs.head.weight[3:] = theirs.head.weight[:1] * 4
            theirs.head.bias[3:] = cluster_bias
        ours.load_state_dict({k: rg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
        expected_predictions = theirs.predict(x).tolist()
        assert (min(expected_predictions) >= 3) == all_in_clusters
        assert max(expected_predictions) >= 3
        assert ours.predict(x_ours).tolist() == expected_predictions


@pytest.mark.parametrize(
    ("cutoffs", "n_classes"),
    [([], 10), ([5, 3], 10), ([0, 4], 10), ([4, 10], 10), ([3, 3], 10), ([2.5], 10)],
)
def test_adaptive_log_softmax_refuses_torchs_bad_cutoffs(cutoffs, n_classes):
    with pytest.raises(ValueError, match="cutoffs"):
        torch.nn.AdaptiveLogSoftmaxWithLoss(4, n_classes, cutoffs)
    with pytest.raises(InvalidArgumentError, match="cutoffs"):
        rg.nn.AdaptiveLogSoftmaxWithLoss(4, n_classes, cutoffs)


def test_adaptive_log_softmax_refuses_bad_inputs_as_torch_does():
    ours, theirs = _asm_pair()
    x = torch.randn(3, 8, dtype=torch.float64)
    cases = [
        (x, torch.tensor([0, 1]), ShapeError, "batch dimension"),
        (x[0], torch.tensor([0]), ShapeError, "2D input"),
        (x, torch.tensor(1), ShapeError, "1D input"),
        (x, torch.tensor([[0, 1, 2]]), ShapeError, "multi-target"),
        (x, torch.tensor([0, 10, 1]), IndexOutOfRangeError, r"\[0, 9\]"),
        (x, torch.tensor([0, -1, 1]), IndexOutOfRangeError, r"\[0, 9\]"),
    ]
    for inputs, target, error, message in cases:
        with pytest.raises((RuntimeError, IndexError)):
            theirs(inputs, target)
        with pytest.raises(error, match=message):
            ours(rg.tensor(inputs.numpy()), rg.tensor(target.numpy()))
    with pytest.raises(DTypeError, match="integer"):
        ours(rg.tensor(x.numpy()), rg.tensor([0.0, 1.0, 2.0]))
    # the module stays usable after a refusal
    assert ours(rg.tensor(x.numpy()), rg.tensor([0, 5, 9])).output.shape == (3,)


# -- torch.utils._pytree ----------------------------------------------------------------------
Point = namedtuple("Point", "x y")

TREES = [
    (1, [None, {"b": 2, "a": 3}], Point(4, OrderedDict(z=5, y=6))),
    None,
    5,
    (),
    [],
    {},
    [[], [[]]],
    {"x": (None, None), "w": [1]},
    defaultdict(list, {"k": [1, 2]}),
    deque([1, (2, 3)], maxlen=4),
    Point(None, [Point(1, 2)]),
    OrderedDict(b=[1, {"c": None}], a=()),
]


@pytest.mark.parametrize("tree", TREES, ids=range(len(TREES)))
def test_pytree_flattens_and_rebuilds_as_torchs(tree):
    their_leaves, their_spec = torch_pytree.tree_flatten(tree)
    leaves, spec = rg_pytree.tree_flatten(tree)
    assert leaves == their_leaves
    assert rg_pytree.tree_leaves(tree) == torch_pytree.tree_leaves(tree)
    assert list(rg_pytree.tree_iter(tree)) == their_leaves
    assert repr(spec) == repr(their_spec)
    assert (spec.num_nodes, spec.num_leaves, spec.num_children) == (
        their_spec.num_nodes,
        their_spec.num_leaves,
        their_spec.num_children,
    )
    assert spec.is_leaf() == their_spec.is_leaf() and spec.context == their_spec.context
    assert spec.type is their_spec.type
    assert rg_pytree.treespec_pprint(spec) == torch_pytree.treespec_pprint(their_spec)
    assert rg_pytree.tree_structure(tree) == spec and hash(rg_pytree.tree_structure(tree)) == hash(
        spec
    )
    rebuilt = rg_pytree.tree_unflatten(leaves, spec)
    assert rebuilt == tree and type(rebuilt) is type(tree)
    assert rg_pytree.tree_unflatten(spec, leaves) == tree  # torch accepts either order
    numbered = list(range(len(leaves)))
    assert rg_pytree.tree_unflatten(numbered, spec) == torch_pytree.tree_unflatten(
        numbered, their_spec
    )
    assert rg_pytree.tree_map(repr, tree) == torch_pytree.tree_map(repr, tree)
    ours_paths = [(rg_pytree.keystr(k), v) for k, v in rg_pytree.tree_leaves_with_path(tree)]
    their_paths = [(torch_pytree.keystr(k), v) for k, v in torch_pytree.tree_leaves_with_path(tree)]
    assert ours_paths == their_paths


def test_pytree_maps_over_several_trees_tensors_and_is_leaf_as_torchs():
    assert rg_pytree.tree_map(lambda x, y: [x] + y, [5, 6], [[7, 9], [1, 2]]) == [
        [5, 7, 9],
        [6, 1, 2],
    ]
    tree = {"w": rg.ones(2), "b": (rg.zeros(1), None), "n": 3}
    doubled = rg_pytree.tree_map_only(rg.Tensor, lambda t: t * 2, tree)
    assert doubled["w"].tolist() == [2.0, 2.0] and doubled["n"] == 3 and doubled["b"][1] is None
    assert rg_pytree.tree_all_only(rg.Tensor, lambda t: t.shape[0] <= 2, tree)
    assert not rg_pytree.tree_any(lambda x: x == 4, [1, (2, 3)])
    their_spec = torch_pytree.tree_structure([(1, 2), [3]], is_leaf=lambda x: isinstance(x, tuple))
    spec = rg_pytree.tree_structure([(1, 2), [3]], is_leaf=lambda x: isinstance(x, tuple))
    assert repr(spec) == repr(their_spec)
    # a dict's keys match across dict kinds, in the spec's order, as torch's flatten_up_to
    spec = rg_pytree.tree_structure({"a": 1, "b": 2})
    assert spec.flatten_up_to(OrderedDict(b=20, a=10)) == [10, 20]
    assert rg_pytree.tree_structure({"a": 1}) != rg_pytree.tree_structure(OrderedDict(a=1))


def test_pytree_register_pytree_node_as_torchs():
    class Pair:
        def __init__(self, first, second):
            self.first, self.second = first, second

    def flatten(p):
        return [p.first, p.second], "pair"

    def unflatten(values, context):
        return Pair(*values)

    rg_pytree.register_pytree_node(Pair, flatten, unflatten)
    torch_pytree.register_pytree_node(Pair, flatten, unflatten)
    tree = [Pair(1, (2, None)), 3]
    assert rg_pytree.tree_leaves(tree) == torch_pytree.tree_leaves(tree) == [1, 2, None, 3]
    assert repr(rg_pytree.tree_structure(tree)) == repr(torch_pytree.tree_structure(tree))
    rebuilt = rg_pytree.tree_map(lambda x: x, tree)
    assert isinstance(rebuilt[0], Pair) and rebuilt[0].second == (2, None)
    with pytest.raises(InvalidArgumentError, match="already registered"):
        rg_pytree.register_pytree_node(Pair, flatten, unflatten)


def test_pytree_mismatches_raise_torchs_errors():
    spec = rg_pytree.tree_structure((1, [2, 3]))
    their_spec = torch_pytree.tree_structure((1, [2, 3]))
    cases = [
        (lambda s: s.unflatten([1]), "has length 1"),
        (lambda s: s.flatten_up_to((1, [2])), "arity mismatch"),
        (lambda s: s.flatten_up_to([1, [2, 3]]), "type mismatch"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call(their_spec)
        with pytest.raises(InvalidArgumentError, match=message):
            call(spec)
    with pytest.raises(InvalidArgumentError, match="keys mismatch"):
        rg_pytree.tree_map(lambda a, b: a, {"a": 1}, {"b": 1})
    with pytest.raises(ValueError, match="keys mismatch"):
        torch_pytree.tree_map(lambda a, b: a, {"a": 1}, {"b": 1})
    with pytest.raises(RetrogradError, match="PyTreeSpec"):
        rg_pytree.tree_unflatten([1], [1])


# -- torch.autograd.graph: saved tensor hooks -------------------------------------------------
def _backend(strategy=None):
    return rg.Autodiff(inner_backend(), checkpointing=strategy or rg.NoCheckpointing())


def _counting_hooks(factor):
    calls = []

    def pack(t):
        calls.append("pack")
        return t * factor

    def unpack(t):
        calls.append("unpack")
        return t

    return pack, unpack, calls


def _mlp(lib, x, w1, w2):
    h = lib.nn.functional.relu(x @ w1.T)
    return ((lib.tanh(h @ w2.T) - 1.0) ** 2).mean()


def test_saved_tensors_hooks_reach_what_backward_reads_as_torchs():
    # a pack that scales what is saved, an unpack that does not undo it: every gradient read
    # from a saved value changes, as torch's does; the calls are counted as torch counts them
    torch.manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.float64)
    w1 = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    pack, unpack, their_calls = _counting_hooks(1.5)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = _mlp(torch, x, w1, w2)
    loss.backward()
    backend = _backend()
    ours = [rg.tensor(t.detach().numpy(), backend=backend) for t in (x, w1, w2)]
    ours[1].require_grad(), ours[2].require_grad()
    pack, unpack, calls = _counting_hooks(1.5)
    with rg.autograd.graph.saved_tensors_hooks(pack, unpack):
        our_loss = _mlp(rg, *ours)
    assert calls == their_calls[: their_calls.count("pack")]  # packed while recording
    grads = our_loss.backward()
    assert calls == their_calls
    np.testing.assert_allclose(float(our_loss), loss.item(), rtol=1e-12)
    for mine, theirs in zip(ours[1:], (w1, w2)):
        np.testing.assert_allclose(_np(mine.grad(grads)), _np(theirs.grad), rtol=1e-10)


def test_saved_tensors_hooks_under_balanced_checkpointing():
    # values the strategy recomputes are not saved, so not packed; what is packed is unpacked
    # once; hooks that keep the content (torch's contract for unpack_hook) keep the gradients
    torch.manual_seed(1)
    x = torch.randn(4, 3, dtype=torch.float64)
    w1 = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    _mlp(torch, x, w1, w2).backward()
    backend = _backend(rg.BalancedCheckpointing())
    ours = [rg.tensor(t.detach().numpy(), backend=backend) for t in (x, w1, w2)]
    ours[1].require_grad(), ours[2].require_grad()
    calls = []
    with rg.autograd.graph.saved_tensors_hooks(
        lambda t: calls.append("pack") or t * 4, lambda t: calls.append("unpack") or t / 4
    ):
        our_loss = _mlp(rg, *ours)
    grads = our_loss.backward()
    assert 0 < calls.count("pack") == calls.count("unpack")
    for mine, theirs in zip(ours[1:], (w1, w2)):
        np.testing.assert_allclose(_np(mine.grad(grads)), _np(theirs.grad), rtol=1e-10)


def test_saved_tensors_hooks_count_only_the_values_saved_under_them_as_torchs():
    def run(lib, hooks, a):
        calls = []
        first = a.sin()  # saves a, without hooks
        with hooks(lambda t: calls.append("pack") or t, lambda t: calls.append("unpack") or t):
            second = a.exp()  # saves its output
            third = a.cos()  # saves a again, packed
        (first + second + third * third).sum().backward()
        return calls

    theirs = run(
        torch,
        torch.autograd.graph.saved_tensors_hooks,
        torch.tensor([1.0, 2.0], requires_grad=True),
    )
    a = rg.tensor([1.0, 2.0], backend=_backend()).require_grad()
    ours = run(rg, rg.autograd.graph.saved_tensors_hooks, a)
    assert ours == theirs == ["pack", "pack", "unpack", "unpack"]


def test_saved_tensors_hooks_pack_and_unpack_that_undo_each_other_as_torchs_docs():
    a, b = torch.ones(5, requires_grad=True), torch.ones(5, requires_grad=True)
    their_calls = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: their_calls.append(t.tolist()) or t * 4, lambda t: t / 4
    ):
        y = a * (b * 2)
    y.sum().backward()
    backend = _backend()
    ra = rg.ones(5, backend=backend).require_grad()
    rb = rg.ones(5, backend=backend).require_grad()
    calls = []
    with rg.autograd.graph.saved_tensors_hooks(
        lambda t: calls.append(t.tolist()) or t * 4, lambda t: t / 4
    ):
        ry = ra * (rb * 2)
    # mul saves both operands (torch packs them in the other order)
    assert sorted(calls) == sorted(their_calls) == [[1.0] * 5, [2.0] * 5]
    grads = ry.sum().backward()
    assert ra.grad(grads).tolist() == a.grad.tolist() and rb.grad(grads).tolist() == b.grad.tolist()


def test_saved_tensors_hooks_innermost_pair_thread_second_backward_and_higher_order():
    backend = _backend()
    outer_pack, outer_unpack, outer_calls = _counting_hooks(1.0)
    inner_pack, inner_unpack, inner_calls = _counting_hooks(1.0)
    a = rg.tensor([0.5, 1.5], dtype=rg.float64, backend=backend).require_grad()
    with rg.autograd.graph.saved_tensors_hooks(outer_pack, outer_unpack):
        with rg.autograd.graph.saved_tensors_hooks(inner_pack, inner_unpack):
            y = (a.sin() * a).sum()
        z = a.exp().sum()
    w = a.cos().sum()  # after both: nothing packed
    with rg.autograd.graph.saved_tensors_hooks(inner_pack, inner_unpack):
        worker = threading.Thread(target=lambda: (a * a).sum().backward())
        worker.start()
        worker.join()  # the pair is this thread's: the worker's graph packs nothing
    assert inner_calls == ["pack"] * 3 and outer_calls == ["pack"]
    y.backward(retain_graph=True)
    y.backward()
    assert inner_calls == ["pack"] * 3 + ["unpack"] * 6  # each backward unpacks, as torch's
    z.backward(), w.backward()
    assert outer_calls == ["pack", "unpack"]
    # create_graph through unpacked values: second derivatives as torch's
    t = torch.tensor([0.5, 1.5], dtype=torch.float64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda v: v * 2, lambda v: v / 2):
        ty = (t.sin() * t).sum()
    (tg,) = torch.autograd.grad(ty, t, create_graph=True)
    (tgg,) = torch.autograd.grad(tg.sum(), t)
    with rg.autograd.graph.saved_tensors_hooks(lambda v: v * 2, lambda v: v / 2):
        y = (a.sin() * a).sum()
    (g,) = rg.autograd.grad(y, a, create_graph=True)
    (gg,) = rg.autograd.grad(g.sum(), a)
    np.testing.assert_allclose(_np(gg), _np(tgg), rtol=1e-12)


def test_save_on_cpu_and_disable_saved_tensors_hooks_as_torchs():
    backend = _backend()
    a = rg.tensor([1.0, -2.0, 3.0], dtype=rg.float64, backend=backend).require_grad()
    t = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    with rg.autograd.graph.save_on_cpu(pin_memory=False):
        y = (a * a.tanh()).sum()
    with torch.autograd.graph.save_on_cpu(pin_memory=False):
        ty = (t * t.tanh()).sum()
    ty.backward()
    np.testing.assert_allclose(_np(a.grad(y.backward())), _np(t.grad), rtol=1e-12)
    with rg.autograd.graph.disable_saved_tensors_hooks("hooks are off here"):
        with (
            pytest.raises(AutodiffError, match="hooks are off here"),
            rg.autograd.graph.save_on_cpu(),
        ):
            pass
        assert (a * a).sum().backward() is not None  # recording is unaffected
    with (
        rg.autograd.graph.saved_tensors_hooks(lambda v: v, lambda v: v),
        pytest.raises(AutodiffError, match="off"),
        rg.autograd.graph.disable_saved_tensors_hooks("off"),
    ):
        pass


def test_saved_tensors_hooks_refusals_leave_the_engine_usable():
    backend = _backend()
    a = rg.tensor([1.0, 2.0], backend=backend).require_grad()
    with rg.autograd.graph.saved_tensors_hooks(lambda v: v, lambda v: v.tolist()):
        y = (a * a).sum()
    with pytest.raises(DTypeError, match="unpack_hook expected to be a Tensor"):
        y.backward()
    with rg.autograd.graph.saved_tensors_hooks(lambda v: v, lambda v: v.reshape(2, 1)):
        y = (a * a).sum()
    with pytest.raises(ShapeError, match="unpack_hook returned a tensor of shape"):
        y.backward()
    with pytest.raises(DTypeError, match="pack_hook"):
        rg.autograd.graph.saved_tensors_hooks(3, lambda v: v)
    budget = _backend(rg.BudgetCheckpointing("1MB"))
    b = rg.tensor([1.0, 2.0], backend=budget).require_grad()
    with (
        rg.autograd.graph.saved_tensors_hooks(lambda v: v, lambda v: v),
        pytest.raises(AutodiffError, match="BudgetCheckpointing"),
    ):
        (b * b).sum()
    assert a.grad((a * a).sum().backward()).tolist() == [2.0, 4.0]
    assert b.grad((b * b).sum().backward()).tolist() == [2.0, 4.0]


def _multi_hook_scenario(register, make):
    calls, first = [], []
    a, b = make([1.0, 2.0]), make([3.0, 4.0])
    c, d = a * b, a * 2
    register(
        (a, b, c, d), lambda grads: calls.append([g if g is None else g.tolist() for g in grads])
    )
    register((d, c), lambda grad: first.append(grad.tolist()), mode="any")
    c.sum().backward(retain_graph=True)  # d is not reached: None in its place
    c.sum().backward(inputs=(a,), retain_graph=True)  # b is not an input: None
    (c.sum() + d.sum() * 3).backward()
    return calls, first


def test_register_multi_grad_hook_as_torchs():
    theirs = _multi_hook_scenario(
        torch.autograd.graph.register_multi_grad_hook, lambda v: torch.tensor(v, requires_grad=True)
    )
    ours = _multi_hook_scenario(
        rg.autograd.graph.register_multi_grad_hook, lambda v: rg.tensor(v).require_grad()
    )
    assert ours == theirs
    assert len(ours[0]) == 3 and ours[0][0][3] is None and ours[0][1][1] is None
    a = rg.tensor([1.0]).require_grad()
    calls = []
    handle = rg.autograd.graph.register_multi_grad_hook((a,), calls.append)
    handle.remove()
    (a * a).sum().backward()
    assert calls == []
    with pytest.raises(InvalidArgumentError, match="mode"):
        rg.autograd.graph.register_multi_grad_hook((a,), print, mode="some")


# -- nn.UninitializedParameter / UninitializedBuffer, weighted regression losses, pools ------
def test_uninitialized_parameter_and_buffer_at_nn_as_torchs():
    assert rg.nn.UninitializedParameter is rg.nn.parameter.UninitializedParameter
    assert rg.nn.UninitializedBuffer is rg.nn.parameter.UninitializedBuffer
    for ours, theirs in (
        (rg.nn.LazyLinear(3).weight, torch.nn.LazyLinear(3).weight),
        (rg.nn.LazyBatchNorm1d().running_mean, torch.nn.LazyBatchNorm1d().running_mean),
    ):
        assert type(ours).__name__ == type(theirs).__name__ and repr(ours) == repr(theirs)
    # a custom lazy module's materialize: the same object becomes a Parameter (a Tensor)
    theirs = torch.nn.UninitializedParameter()
    theirs.materialize((2, 3), dtype=torch.float64)
    ours = rg.nn.UninitializedParameter()
    ours.materialize((2, 3), dtype=rg.float64)
    assert type(ours) is rg.nn.Parameter and type(theirs) is torch.nn.Parameter
    assert ours.shape == tuple(theirs.shape) and ours.dtype == rg.float64
    assert ours.requires_grad and ours.grad((ours * 3).sum().backward()).tolist() == [[3.0] * 3] * 2
    buffer = rg.nn.UninitializedBuffer()
    buffer.materialize(4)
    their_buffer = torch.nn.UninitializedBuffer()
    their_buffer.materialize(4)
    assert type(buffer) is rg.Tensor and type(their_buffer) is torch.Tensor
    assert buffer.shape == (4,) and not buffer.requires_grad
    with pytest.raises(ShapeError, match="negative"):
        rg.nn.UninitializedParameter().materialize((2, -1))


@pytest.mark.parametrize("loss", ["l1_loss", "mse_loss", "huber_loss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weight_dtype", ["float32", "float64", "int64", "bool"])
def test_weighted_regression_losses_as_torchs(loss, reduction, weight_dtype):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(2, 3)), rng.normal(size=(2, 3)) * 2
    w = rng.integers(0, 3, size=(2, 3))
    w[0, 0] = 1
    tx = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    tw = torch.tensor(w).to(getattr(torch, weight_dtype))
    expected = getattr(torch.nn.functional, loss)(
        tx, torch.tensor(y).float(), reduction=reduction, weight=tw
    )
    rx = rg.tensor(x, dtype=rg.float32).require_grad()
    got = getattr(rg.nn.functional, loss)(
        rx,
        rg.tensor(y, dtype=rg.float32),
        reduction=reduction,
        weight=rg.tensor(w).to(weight_dtype),
    )
    assert got.dtype == str(expected.dtype).removeprefix("torch.") and got.shape == tuple(
        expected.shape
    )
    np.testing.assert_allclose(_np(got), _np(expected), rtol=1e-6, atol=1e-6)
    expected.sum().backward()
    np.testing.assert_allclose(
        _np(rx.grad(got.sum().backward())), _np(tx.grad), rtol=1e-6, atol=1e-6
    )


def test_weighted_l1_loss_float64_gradients_and_refusals():
    rng = np.random.default_rng(4)
    x, y, w = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.uniform(size=(3, 2))
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    torch.nn.functional.l1_loss(tx, torch.tensor(y), weight=tw).backward()
    rx, rw = rg.tensor(x).require_grad(), rg.tensor(w).require_grad()
    grads = rg.nn.functional.l1_loss(rx, rg.tensor(y), weight=rw).backward()
    np.testing.assert_allclose(_np(rx.grad(grads)), _np(tx.grad), rtol=1e-12)
    np.testing.assert_allclose(_np(rw.grad(grads)), _np(tw.grad), rtol=1e-12)
    for loss in ("l1_loss", "mse_loss", "huber_loss"):
        with pytest.raises(ValueError, match="Weights and input must have the same size"):
            getattr(torch.nn.functional, loss)(tx, torch.tensor(y), weight=torch.ones(2))
        with pytest.raises(ShapeError, match=f"{loss}: Weights and input must have the same size"):
            getattr(rg.nn.functional, loss)(rx, rg.tensor(y), weight=rg.ones(2))


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_pools_with_indices_take_torchs_return_indices_keyword(dims):
    x = torch.randn((1, 2) + (4,) * dims, generator=torch.Generator().manual_seed(dims))
    rx = rg.tensor(x.numpy())
    pairs = [
        (f"max_pool{dims}d_with_indices", (2,), {"return_indices": False}),
        (f"adaptive_max_pool{dims}d_with_indices", (2,), {"return_indices": False}),
        (f"max_pool{dims}d_with_indices", (2, 1, 0, 1, False, True), {}),
    ]
    for name, args, kwargs in pairs:
        values, indices = getattr(torch.nn.functional, name)(x, *args, **kwargs)
        ours = getattr(rg.nn.functional, name)(rx, *args, **kwargs)
        assert isinstance(ours, tuple) and len(ours) == 2
        assert ours[0].tolist() == values.tolist() and ours[1].tolist() == indices.tolist()
