"""Round 24 of the reliability sweep: a differential pass over calls torch refuses (out-of-range
k and dims, mismatched shapes, empty reductions, bad modes, wrong dtypes), each checked to raise
an error of API.md section 7 that names the op and to leave the tensors it was given usable;
and errors raised mid-graph (in a forward, a forward hook or pre-hook, a full backward hook, a
custom ``autograd.Function``'s forward or backward, a dataset read by a loader) after which the
next training step gives torch's weights.

torch is the reference throughout: each refused call is refused by torch too, and the step after
an error moves the weights as torch's step moves them. The defects found this round are fixed
and kept by ``test_reliability_regressions_24.py``; what is here passed, and stays so."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn
from retrograd.utils.data import DataLoader, Dataset

A = np.random.default_rng(24).standard_normal((3, 4)).astype(np.float32)
IDX = np.array([[0, 2], [1, 3], [2, 0]])


def _lift(lib, value):
    if isinstance(value, np.ndarray):
        return torch.tensor(value) if lib is torch else rg.tensor(value)
    return value


#: (case, op named in the message, call of ``(lib, t)`` with ``t`` lifting arrays to ``lib``)
REFUSED = [
    ("topk k past the size", "topk", lambda m, t: t(A).topk(5)),
    ("kthvalue k = 0", "kthvalue", lambda m, t: t(A).kthvalue(0)),
    ("bincount of a negative", "bincount", lambda m, t: m.bincount(t(np.array([-1, 2])))),
    ("one_hot past num_classes", "one_hot", lambda m, t: m.nn.functional.one_hot(t(IDX), 3)),
    ("roll shifts and dims differ", "roll", lambda m, t: t(A).roll((1, 2), (0,))),
    ("combinations of a matrix", "combinations", lambda m, t: m.combinations(t(A))),
    ("cdist columns differ", "cdist", lambda m, t: m.cdist(t(A), t(np.ones((2, 5), "f4")))),
    ("einsum sizes differ", "einsum", lambda m, t: m.einsum("ij,jk->ik", t(A), t(A))),
    ("einsum operand count", "einsum", lambda m, t: m.einsum("ij,jk->ik", t(A))),
    ("tensordot sizes differ", "tensordot", lambda m, t: m.tensordot(t(A), t(A), ([1], [0]))),
    ("unfold step 0", "unfold", lambda m, t: t(A).unfold(1, 2, 0)),
    ("movedim lengths differ", "movedim", lambda m, t: t(A).movedim((0, 1), (1,))),
    ("repeat_interleave negative", "repeat_interleave", lambda m, t: t(A).repeat_interleave(-1)),
    ("where of a float condition", "where", lambda m, t: m.where(t(A), t(A), t(A))),
    ("quantile q past 1", "quantile", lambda m, t: m.quantile(t(A), 1.5)),
    ("quantile of no values", "quantile", lambda m, t: m.quantile(t(np.zeros(0, "f4")), 0.5)),
    ("max of no values", "max", lambda m, t: t(np.zeros(0, "f4")).max()),
    ("argmax of no values", "argmax", lambda m, t: t(np.zeros(0, "f4")).argmax()),
    ("amax along an empty dim", "amax", lambda m, t: t(np.zeros((0, 3), "f4")).amax(0)),
    ("diff of a negative order", "diff", lambda m, t: m.diff(t(A), -1)),
    ("meshgrid indexing", "meshgrid", lambda m, t: m.meshgrid(t(A[0]), indexing="x")),
    (
        "scatter_reduce mode",
        "scatter_reduce",
        lambda m, t: t(A).scatter_reduce(1, t(IDX), t(A), "x"),
    ),
    ("unique dim past the rank", "unique", lambda m, t: m.unique(t(A), dim=3)),
    ("histogram range reversed", "histogram", lambda m, t: m.histogram(t(A), 3, range=(1.0, 0.0))),
    ("trace of a vector", "trace", lambda m, t: m.trace(t(A[0]))),
    ("diagonal of one dim twice", "diagonal", lambda m, t: m.diagonal(t(A), 0, 1, 1)),
    ("rot90 in one dim", "rot90", lambda m, t: m.rot90(t(A), 1, (0, 0))),
    ("dot of matrices", "dot", lambda m, t: m.dot(t(A), t(A))),
    ("bmm of matrices", "bmm", lambda m, t: m.bmm(t(A), t(A.T))),
    ("addmm input shape", "addmm", lambda m, t: m.addmm(t(np.ones(5, "f4")), t(A), t(A.T))),
    ("cross without a dim of 3", "cross", lambda m, t: m.linalg.cross(t(A), t(A))),
    ("renorm of a negative p", "renorm", lambda m, t: t(A).renorm(-1, 0, 1.0)),
    ("polygamma of a negative n", "polygamma", lambda m, t: m.polygamma(-1, t(A))),
    ("int remainder by zero", "remainder", lambda m, t: m.remainder(t(IDX), 0)),
    ("div rounding mode", "div", lambda m, t: m.div(t(A), 2, rounding_mode="x")),
    ("bitwise_and of floats", "bitwise_and", lambda m, t: m.bitwise_and(t(A), t(A))),
    ("narrow past the start", "narrow", lambda m, t: t(A).narrow(1, -5, 1)),
    ("index_select of a matrix", "index_select", lambda m, t: t(A).index_select(1, t(IDX))),
    ("gather out of range", "gather", lambda m, t: t(A).gather(1, t(np.array([[-1]])))),
    ("masked_fill float mask", "masked_fill", lambda m, t: t(A).masked_fill(t(A), 1.0)),
    ("chunk of -1", "chunk", lambda m, t: t(A).chunk(-1)),
    ("hsplit uneven", "hsplit", lambda m, t: m.hsplit(t(A), 3)),
    ("stack of two shapes", "stack", lambda m, t: m.stack([t(A), t(A.T)])),
    ("cat dim past the rank", "cat", lambda m, t: m.cat([t(A), t(A)], 2)),
    ("broadcast_to fewer dims", "broadcast_to", lambda m, t: m.broadcast_to(t(A), (4,))),
    ("flatten start after end", "flatten", lambda m, t: t(A).flatten(1, 0)),
    ("item of many values", "item", lambda m, t: t(A).item()),
    ("matmul of a 0-d", "matmul", lambda m, t: t(np.array(1.0, "f4")) @ t(A)),
    ("softmax of ints", "softmax", lambda m, t: t(IDX).softmax(0)),
    ("neg of bools", "neg", lambda m, t: -t(A > 0)),
]


@pytest.mark.parametrize("op, call", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_call_torch_refuses_is_refused_by_name_and_leaves_the_tensors_usable(op, call):
    with pytest.raises((RuntimeError, ValueError, TypeError, IndexError)):
        call(torch, lambda v: _lift(torch, v))
    given = []

    def lift(value):
        given.append(_lift(rg, value))
        return given[-1]

    with pytest.raises(rg.RetrogradError) as caught:
        call(rg, lift)
    assert op in str(caught.value)
    for t in given:  # every tensor the failed call touched still computes
        if isinstance(t, rg.Tensor) and t.dtype != rg.bool:
            assert t.sum().isfinite().item() or t.numel() == 0


# == errors mid-graph leave the engine usable ====================================================
def _step_reference() -> list:
    """The weights of a Linear(3, 2) after one SGD step on sum((W x + b)^2), in torch."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(4, 3)).pow(2).sum().backward()
    optimizer.step()
    return model.weight.detach().numpy()


def _model() -> nn.Linear:
    torch.manual_seed(0)
    reference = torch.nn.Linear(3, 2)
    model = nn.Linear(3, 2)
    model.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    return model


def _step(model: nn.Linear) -> np.ndarray:
    optimizer = rg.optim.SGD(model.parameters(), lr=0.1)
    optimizer.step(model(rg.ones(4, 3)).pow(2).sum().backward())
    return model.weight.numpy()


class _UserError(Exception):
    pass


def _raise(*_):
    raise _UserError


def _through_hook(register):
    model = _model()
    handle = register(model)
    with pytest.raises(_UserError):  # the user's exception, unchanged
        model(rg.ones(4, 3)).pow(2).sum().backward()
    handle.remove()
    return model


@pytest.mark.parametrize(
    "register",
    [
        lambda m: m.register_forward_hook(_raise),
        lambda m: m.register_forward_pre_hook(_raise),
        lambda m: m.register_full_backward_hook(_raise),
    ],
    ids=["forward-hook", "forward-pre-hook", "full-backward-hook"],
)
def test_a_hook_that_raises_leaves_the_next_step_as_torchs(register):
    model = _through_hook(register)
    np.testing.assert_allclose(_step(model), _step_reference(), rtol=1e-6)


class _BadBackward(rg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise _UserError


class _BadForward(rg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise _UserError

    @staticmethod
    def backward(ctx, grad):
        return grad


@pytest.mark.parametrize("function", [_BadBackward, _BadForward], ids=["backward", "forward"])
def test_a_custom_function_that_raises_leaves_the_next_step_as_torchs(function):
    model = _model()
    with pytest.raises(_UserError):
        function.apply(model(rg.ones(4, 3))).sum().backward()
    assert rg.is_grad_enabled()
    np.testing.assert_allclose(_step(model), _step_reference(), rtol=1e-6)


def test_a_failed_op_in_the_middle_of_a_graph_leaves_that_graph_differentiable():
    x = rg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    with pytest.raises(rg.ShapeError, match="add"):
        y + rg.ones(4)
    assert x.grad(y.sum().backward()).tolist() == [2.0, 4.0, 6.0]


class _OneBadSample(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, index):
        if index == 3:
            raise KeyError(f"sample {index}")
        return np.float32(index)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_that_raises_stops_the_loop_and_the_loader_runs_again(workers):
    loader = DataLoader(_OneBadSample(), batch_size=2, num_workers=workers)
    for _ in range(2):  # a second pass over the same loader: the same batches, the same error
        batches = []
        with pytest.raises(KeyError, match="sample 3"):
            for batch in loader:
                batches.append(batch.tolist())
        assert batches == [[0.0, 1.0]]
    np.testing.assert_allclose(_step(_model()), _step_reference(), rtol=1e-6)
