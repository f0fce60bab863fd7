"""``copy.deepcopy`` and ``pickle`` of tensors, modules and backends: a copy is a new leaf
with a node of its own on the same backend (a target network, an EMA model or a teacher copied
from a model gets gradients of its own), and a pickle holds values, never a graph or a
checkpointer's state. Expected gradients are by hand or torch's."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend


def test_a_copied_leaf_has_its_own_gradient():
    x = rg.tensor([1.0, 2.0]).require_grad()
    for copied in (copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert copied.is_require_grad() and copied.is_leaf
        grads = (copied * x * 3.0).sum().backward()
        # d/dx = 3 * copied = [3, 6], d/dcopied = 3 * x = [3, 6]; one shared node gave both 2x
        np.testing.assert_array_equal(x.grad(grads).numpy(), [3.0, 6.0])
        np.testing.assert_array_equal(copied.grad(grads).numpy(), [3.0, 6.0])
        grads = (copied * copied).sum().backward()
        assert x.grad(grads) is None


def test_a_copy_of_a_non_leaf_is_refused_as_torch_refuses_it():
    # torch 2.13: RuntimeError "Only Tensors created explicitly by the user (graph leaves)
    # support the deepcopy protocol"; the graph stays usable
    x = rg.tensor([1.0, -2.0]).require_grad()
    y = (x * 2.0).exp()
    with pytest.raises(rg.AutodiffError, match="deepcopy: only tensors created explicitly"):
        copy.deepcopy(y)
    grads = y.sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), 2.0 * np.exp([2.0, -4.0]), rtol=1e-6)


def teacher_and_student(lib, weights):
    """A student and its deep copy as the teacher (DINO, BYOL, mean teacher), the teacher's
    parameters frozen, a loss through both: each model's gradients."""
    student = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Tanh(), lib.nn.Linear(4, 2))
    for p, w in zip(student.parameters(), weights):
        p.data = lib.tensor(w) if lib is rg else torch.tensor(w)
    teacher = copy.deepcopy(student)
    for p in teacher.parameters():
        p.requires_grad_(False)
    x = lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    loss = ((student(x) - teacher(x * 0.5)) ** 2).sum() + (student(x) * teacher(x)).sum()
    return student, teacher, loss


def test_a_frozen_teacher_copied_from_its_student_matches_torch():
    rng = np.random.default_rng(0)
    shapes = [(4, 3), (4,), (2, 4), (2,)]
    weights = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    student, teacher, loss = teacher_and_student(rg, weights)
    grads = loss.backward()
    t_student, _, t_loss = teacher_and_student(torch, weights)
    t_loss.backward()
    for ours, theirs in zip(student.parameters(), t_student.parameters()):
        np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-5)
    assert all(p.grad(grads) is None for p in teacher.parameters())
    assert all(p.is_require_grad() for p in student.parameters())


def test_a_copied_module_keeps_tied_weights_classes_and_attributes():
    model = rg.nn.Module()
    model.embed = rg.nn.Embedding(5, 3)
    model.head = rg.nn.Linear(3, 5, bias=False)
    model.head.weight = model.embed.weight
    model.embed.weight.no_decay = True
    copied = copy.deepcopy(model)
    assert copied.head.weight is copied.embed.weight
    assert copied.embed.weight is not model.embed.weight
    assert type(copied.embed.weight) is rg.nn.Parameter
    assert copied.embed.weight.no_decay is True
    assert copied.embed.weight.backend is model.embed.weight.backend
    assert len(list(copied.parameters())) == 1


def test_a_copy_of_a_view_is_a_base_of_its_own():
    base = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    row = base[0]
    copied = copy.deepcopy(row)
    copied.add_(10.0)
    np.testing.assert_array_equal(base.numpy(), [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(copied.numpy(), [11.0, 12.0])
    row.add_(1.0)  # the view still writes through to its base
    np.testing.assert_array_equal(base.numpy()[0], [2.0, 3.0])
    np.testing.assert_array_equal(copied.numpy(), [11.0, 12.0])


def test_a_backend_is_copied_as_itself():
    backend = rg.Autodiff(inner_backend(), checkpointing=rg.BudgetCheckpointing(1 << 16))
    assert copy.deepcopy(backend) is backend
    assert copy.copy(backend) is backend
    assert copy.deepcopy({"backend": backend})["backend"] is backend


@pytest.mark.parametrize(
    "strategy",
    [rg.NoCheckpointing(), rg.BalancedCheckpointing(), rg.BudgetCheckpointing(4096)],
    ids=["none", "balanced", "budget"],
)
def test_models_copy_and_pickle_under_every_strategy(strategy):
    backend = rg.Autodiff(inner_backend(), checkpointing=strategy)
    with rg.use_backend(backend):
        model = rg.nn.Sequential(rg.nn.Linear(4, 8), rg.nn.GELU(), rg.nn.Linear(8, 1))
        x = rg.tensor(np.ones((3, 4), dtype=np.float32))
        for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            assert copied[0].weight.backend is backend
            grads = (copied(x).sum() + model(x).sum()).backward()
            for ours, theirs in zip(copied.parameters(), model.parameters()):
                np.testing.assert_array_equal(ours.grad(grads).numpy(), theirs.grad(grads).numpy())


def test_a_pickle_holds_no_graph():
    x = rg.tensor(np.ones(4, dtype=np.float32)).require_grad()
    y = x
    for _ in range(2000):
        y = y * 1.0001
    alone = len(pickle.dumps(rg.tensor(np.ones(4, dtype=np.float32))))
    assert len(pickle.dumps(y)) < alone + 200  # before: the graph, 2000 nodes, went with it
    unpickled = pickle.loads(pickle.dumps(y))
    assert unpickled.is_leaf and unpickled.is_require_grad()
    np.testing.assert_array_equal(unpickled.numpy(), y.numpy())


def test_a_pickled_tensor_joins_the_backend_running_where_it_is_read():
    backend = rg.Autodiff(inner_backend(), checkpointing=rg.BudgetCheckpointing(1 << 20))
    x = rg.tensor([1.0, 2.0], backend=backend).require_grad()
    data = pickle.dumps(x)
    with rg.use_backend(backend):
        assert pickle.loads(data).backend is backend
    elsewhere = pickle.loads(data).backend  # the current backend is another: an equal one
    assert elsewhere == backend and elsewhere is not backend
    assert elsewhere.checkpointing.max_bytes == 1 << 20


def test_a_distributed_mark_is_not_copied():
    backend = rg.Autodiff(inner_backend())
    p = rg.nn.Parameter(rg.tensor([1.0, 2.0], backend=backend)).set_distributed("w")
    assert backend.param_id(p.primitive) is not None
    assert backend.param_id(copy.deepcopy(p).primitive) is None
