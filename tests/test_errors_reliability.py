"""Bad input found by a differential sweep of the public surface against PyTorch (every call
made on both): each case below was a silent result where torch refuses (a probability above
1 in binary cross-entropy, a negative std in ``normal``, a negative p in ``cdist``), or a bare
Python exception (``ValueError`` from NumPy's broadcasting in a distribution, an
``AttributeError`` from inside ``autograd.backward``), or a message that did not name the op.
Each now raises the class of API.md section 7 naming the op and the values or shapes at fault,
and the same tensors, modules and optimizers work afterwards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from retrograd import distributions as D  # noqa: N812  (torch's idiom)
from retrograd import optim
from retrograd.errors import KeyMismatchError
from retrograd.utils.data import DataLoader

A = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
B = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -2.0]], dtype=np.float32)
P = np.array([[0.2, 0.5, 0.9], [0.1, 0.7, 0.4]], dtype=np.float32)


@pytest.fixture
def leaves():
    return rg.tensor(A).require_grad(), rg.tensor(B).require_grad()


def _backward(outputs):
    return rg.autograd.backward(outputs)


# (op the message names, error class, call on the leaves a and b, fragments of the message)
CASES = [
    # values torch refuses that gave a silent result (NaN losses, draws from a negative std)
    ("binary_cross_entropy", rg.InvalidArgumentError,
     lambda a, b: F.binary_cross_entropy(a, rg.ones((2, 3))), ["between 0 and 1", "[2, 3]"]),
    ("binary_cross_entropy", rg.InvalidArgumentError,
     lambda a, b: F.binary_cross_entropy(rg.tensor([0.5, -0.1]), rg.ones((2,))), ["[2]"]),
    ("binary_cross_entropy", rg.InvalidArgumentError,
     lambda a, b: F.binary_cross_entropy(rg.tensor([0.5, float("nan")]), rg.ones((2,))), []),
    ("BCELoss", rg.InvalidArgumentError,
     lambda a, b: rg.nn.BCELoss()(a * 0.5, rg.ones((2, 3))), ["between 0 and 1"]),
    ("normal", rg.InvalidArgumentError, lambda a, b: rg.normal(0.0, -1.0, (2,)), ["std -1.0"]),
    ("normal", rg.InvalidArgumentError, lambda a, b: rg.normal(0.0, float("nan"), (2,)), ["nan"]),
    ("normal", rg.InvalidArgumentError, lambda a, b: rg.normal(a, -1.0), ["std -1.0"]),
    ("normal", rg.InvalidArgumentError, lambda a, b: rg.normal(a, b), ["std [2, 3]"]),
    ("cdist", rg.InvalidArgumentError, lambda a, b: rg.cdist(a, b, -1.0), ["p=-1.0"]),
    ("cdist", rg.DTypeError, lambda a, b: rg.cdist(a, b, "two"), ["'two'"]),
    ("renorm", rg.InvalidArgumentError, lambda a, b: a.renorm(0, 0, 1.0), ["p=0"]),
    ("renorm", rg.InvalidArgumentError, lambda a, b: a.renorm(2, 0, -1.0), ["-1.0"]),
    ("Adagrad", rg.InvalidArgumentError, lambda a, b: optim.Adagrad([a], lr_decay=-1.0),
     ["lr_decay", "-1.0"]),
    ("Adagrad", rg.InvalidArgumentError,
     lambda a, b: optim.Adagrad([a], initial_accumulator_value=-1.0), ["initial_accumulator"]),
    ("NAdam", rg.InvalidArgumentError, lambda a, b: optim.NAdam([a], momentum_decay=-1.0),
     ["momentum_decay"]),
    # autograd's functions given what is not a tensor: an AttributeError from inside before
    ("autograd.backward", rg.DTypeError, lambda a, b: rg.autograd.backward("a"), ["'a'"]),
    ("autograd.backward", rg.DTypeError, lambda a, b: rg.autograd.backward([a.sum(), 5]),
     ["int"]),
    ("autograd.grad", rg.DTypeError, lambda a, b: rg.autograd.grad((a * b).sum(), "a"), ["'a'"]),
    ("autograd.grad", rg.DTypeError,
     lambda a, b: rg.autograd.grad([a * b], [a], grad_outputs=["x"]), ["str"]),
    # iter() of a 0-d tensor fails at once, as torch's, not at the first next()
    ("iter", rg.DTypeError, lambda a, b: iter(rg.tensor(1.0)), ["0-d"]),
    # a bool mask given to take was read as the indices 0 and 1
    ("take", rg.DTypeError, lambda a, b: a.take(rg.ones((2, 3), dtype="bool")), ["bool"]),
    # the message named the index after its wrap (-7 of 6 elements read "index -1")
    ("take", rg.IndexOutOfRangeError, lambda a, b: a.take(rg.tensor([0, -7])),
     ["index -7", "6 elements", "[2, 3]"]),
    ("take", rg.IndexOutOfRangeError, lambda a, b: a.take(rg.tensor([[6]])), ["index 6"]),
    # random fills with parameters torch refuses: reversed ranges, negative std, lambda <= 0
    ("uniform_", rg.InvalidArgumentError, lambda a, b: rg.zeros(3).uniform_(5.0, 1.0),
     ["from=5.0", "to=1.0"]),
    ("uniform_", rg.InvalidArgumentError, lambda a, b: rg.zeros(3).uniform_(float("nan")),
     ["nan"]),
    ("uniform_", rg.DTypeError, lambda a, b: rg.zeros(3).uniform_("a"), ["str"]),
    ("normal_", rg.InvalidArgumentError, lambda a, b: rg.zeros(3).normal_(0.0, -1.0),
     ["std -1.0"]),
    ("exponential_", rg.InvalidArgumentError, lambda a, b: rg.zeros(3).exponential_(0.0),
     ["lambda=0.0"]),
    ("exponential_", rg.InvalidArgumentError, lambda a, b: rg.zeros(3).exponential_(-2),
     ["lambda=-2"]),
    # the rank check of q ran after q was flattened: a 2-d q gave a 1-d result
    ("quantile", rg.ShapeError, lambda a, b: a.quantile(rg.tensor([[0.5]])), ["[1, 1]"]),
    ("nanquantile", rg.ShapeError, lambda a, b: a.nanquantile([[0.5, 0.2]]), ["[1, 2]"]),
    # a float k rotated by k % 4 quarter turns (1.5: none at all); values torch refuses
    ("rot90", rg.DTypeError, lambda a, b: a.rot90(1.5), ["1.5"]),
    ("rot90", rg.DTypeError, lambda a, b: a.rot90(float("nan")), ["nan"]),
    ("celu", rg.InvalidArgumentError, lambda a, b: F.celu(a - 3.0, 0.0), ["alpha cannot be 0"]),
    ("softshrink", rg.InvalidArgumentError, lambda a, b: F.softshrink(a, float("nan")),
     ["nan"]),
    ("softshrink", rg.InvalidArgumentError, lambda a, b: F.softshrink(a, float("inf")),
     ["inf"]),
    ("pdist", rg.InvalidArgumentError, lambda a, b: F.pdist(a, float("nan")), ["nan"]),
    # a missing name: a bare KeyError('b') before; still a KeyError
    ("ModuleDict", KeyMismatchError,
     lambda a, b: rg.nn.ModuleDict({"a": rg.nn.Linear(3, 2)})["b"], ["'b'", "['a']"]),
    # distributions: NumPy's broadcast ValueError, a tuple IndexError, a float() ValueError
    ("Normal", rg.ShapeError, lambda a, b: D.Normal(rg.zeros(3), rg.ones(2)), ["[3]", "[2]"]),
    ("Beta", rg.ShapeError, lambda a, b: D.Beta(rg.ones(2), rg.ones(3)), ["[2]", "[3]"]),
    ("Categorical", rg.ShapeError, lambda a, b: D.Categorical(probs=rg.tensor(1.0)),
     ["one-dimensional"]),
    ("Categorical.log_prob", rg.ShapeError,
     lambda a, b: D.Categorical(probs=rg.ones((2, 3)) / 3).log_prob(rg.tensor([0, 1, 2])),
     ["[3]", "[2]"]),
    ("Normal.log_prob", rg.InvalidArgumentError, lambda a, b: D.Normal(0.0, 1.0).log_prob("a"),
     ["'a'"]),
    ("Normal.cdf", rg.InvalidArgumentError, lambda a, b: D.Normal(0.0, 1.0).cdf("a"), []),
    ("Normal.entropy", rg.DTypeError, lambda a, b: D.Normal(0.0, 1.0).entropy(5), []),
    # a parameter outside its constraint: torch's words, on one line
    ("Normal", rg.InvalidArgumentError, lambda a, b: D.Normal(0.0, -1.0),
     ["scale", "found invalid values: -1.0"]),
    ("MultivariateNormal", rg.InvalidArgumentError,
     lambda a, b: D.MultivariateNormal(rg.zeros(2), rg.tensor([[1.0, 2.0], [2.0, 1.0]])),
     ["[[1.0, 2.0], [2.0, 1.0]]"]),
    # data loading: messages that named no op
    ("DataLoader", rg.InvalidArgumentError, lambda a, b: DataLoader([1, 2], batch_size=0),
     ["batch_size=0"]),
    ("DataLoader", rg.InvalidArgumentError, lambda a, b: DataLoader([1, 2], batch_size=-1),
     ["batch_size=-1"]),
    ("DataLoader", rg.InvalidArgumentError,
     lambda a, b: DataLoader([1, 2], shuffle=True, sampler=[0, 1]), ["shuffle"]),
    ("default_collate", rg.ShapeError,
     lambda a, b: list(DataLoader([rg.ones(2), rg.ones(3)], batch_size=2)), ["[2]", "[3]"]),
    ("default_collate", rg.DTypeError, lambda a, b: rg.utils.data.default_collate(None), []),
    ("random_split", rg.DTypeError, lambda a, b: rg.utils.data.random_split(a, "a"), []),
    # namespaces that were not guarded: an AttributeError of a str or None from inside
    ("normal_", rg.DTypeError, lambda a, b: rg.nn.init.normal_("a"), ["'a'"]),
    ("xavier_uniform_", rg.DTypeError, lambda a, b: rg.nn.init.xavier_uniform_(None), ["None"]),
    ("uniform_", rg.DTypeError, lambda a, b: rg.nn.init.uniform_(rg.zeros(2), "a"), []),
    ("orthogonal_", rg.DTypeError, lambda a, b: rg.nn.init.orthogonal_(rg.zeros((2, 2)), "a"),
     []),
    ("get_total_norm", rg.InvalidArgumentError,
     lambda a, b: rg.nn.utils.get_total_norm([a], "bogus"), ["'bogus'"]),
    ("parameters_to_vector", rg.DTypeError,
     lambda a, b: rg.nn.utils.parameters_to_vector("a"), []),
    ("vector_to_parameters", rg.DTypeError,
     lambda a, b: rg.nn.utils.vector_to_parameters(rg.ones(6), ["a"]), []),
    ("fuse_linear_bn_eval", rg.DTypeError, lambda a, b: rg.nn.utils.fuse_linear_bn_eval(a, b),
     []),
    ("weight_norm", rg.DTypeError, lambda a, b: rg.nn.utils.weight_norm(None), []),
    ("pad_sequence", rg.DTypeError, lambda a, b: rg.nn.utils.rnn.pad_sequence(None), []),
    ("pad_packed_sequence", rg.DTypeError,
     lambda a, b: rg.nn.utils.rnn.pad_packed_sequence(a), ["Tensor [2, 3]"]),
    ("solve", rg.DTypeError, lambda a, b: rg.linalg.solve(rg.tensor(A[:, :2]), [1.5]), ["[1.5]"]),
    ("multi_dot", rg.DTypeError, lambda a, b: rg.linalg.multi_dot(None), []),
    ("is_parametrized", rg.DTypeError,
     lambda a, b: rg.nn.utils.parametrize.is_parametrized("a"), []),
    ("register_parametrization", rg.DTypeError,
     lambda a, b: rg.nn.utils.parametrize.register_parametrization(
         rg.nn.Linear(3, 2), "weight", "a"), ["parametrization", "str"]),
    # transforms given something that is not a function
    ("autograd.functional.jacobian", rg.DTypeError,
     lambda a, b: rg.autograd.functional.jacobian(a, b), ["func must be callable", "[2, 3]"]),
    ("autograd.functional.hessian", rg.DTypeError,
     lambda a, b: rg.autograd.functional.hessian(a, b), ["callable"]),
    ("autograd.functional.vjp", rg.DTypeError, lambda a, b: rg.autograd.functional.vjp(a, b),
     ["callable"]),
    ("func.vjp", rg.DTypeError, lambda a, b: rg.func.vjp(None, a), ["None"]),
    ("func.jacrev", rg.DTypeError, lambda a, b: rg.func.jacrev(a), ["callable"]),
    ("func.grad_and_value", rg.DTypeError, lambda a, b: rg.func.grad(5), ["5"]),
    ("gradcheck", rg.DTypeError, lambda a, b: rg.autograd.gradcheck(a, (b,)), ["callable"]),
    ("skip_init", rg.DTypeError, lambda a, b: rg.nn.utils.skip_init("a"), ["'a'"]),
    ("add_safe_globals", rg.DTypeError, lambda a, b: rg.serialization.add_safe_globals(None),
     ["NoneType"]),
    # gradients as a value: Python's TypeError spoke of sequences or named nothing
    ("Gradients *", rg.DTypeError, lambda a, b: (a * b).sum().backward() * "a", ["str"]),
    ("Gradients *", rg.DTypeError, lambda a, b: "a" * (a * b).sum().backward(), ["str"]),
    ("Gradients +", rg.DTypeError, lambda a, b: (a * b).sum().backward() + 5, ["int"]),
    ("Gradients +", rg.DTypeError, lambda a, b: [1] + (a * b).sum().backward(), ["list"]),
    ("Gradients /", rg.DTypeError, lambda a, b: (a * b).sum().backward() / "a", ["str"]),
    # torch's keywords of Tensor.backward (a bare "unexpected keyword" TypeError before)
    ("backward", rg.ShapeError, lambda a, b: (a * b).sum().backward(gradient=rg.ones(3)),
     ["[3]"]),
    ("backward", rg.DTypeError, lambda a, b: (a * b).sum().backward(inputs=["a"]), ["['a']"]),
    ("backward", rg.DTypeError,
     lambda a, b: (a * b).sum().backward(rg.tensor(1.0), gradient=rg.tensor(1.0)), ["twice"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "op, error, call, fragments", CASES, ids=[f"{case[0]}-{i}" for i, case in enumerate(CASES)]
)
def test_bad_input_raises_the_hierarchy_naming_op_and_values(leaves, op, error, call, fragments):
    a, b = leaves
    pending = a * b + 1.0  # a graph in progress that the failure must not disturb
    with pytest.raises(rg.RetrogradError) as raised:
        call(a, b)
    assert isinstance(raised.value, error), f"{type(raised.value).__name__}: {raised.value}"
    message = str(raised.value)
    assert message.startswith(op), message
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message
    grads = pending.sum().backward()
    np.testing.assert_array_equal(a.grad(grads).numpy(), B)
    np.testing.assert_array_equal(b.grad(grads).numpy(), A)


# -- the same calls with valid values still agree with torch ----------------------------------
def test_binary_cross_entropy_of_probabilities_still_matches_torch():
    y = (P > 0.45).astype(np.float32)
    x = rg.tensor(P).require_grad()
    t = torch.tensor(P, requires_grad=True)
    ours = F.binary_cross_entropy(x, rg.tensor(y))
    theirs = torch.nn.functional.binary_cross_entropy(t, torch.tensor(y))
    theirs.backward()
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad(ours.backward()).numpy(), t.grad.numpy(), rtol=1e-5)
    # 0 and 1 themselves are probabilities (a saturated sigmoid): finite, as torch's
    edges = np.array([0.0, 1.0], np.float32)
    ours = F.binary_cross_entropy(rg.tensor(edges), rg.tensor([1.0, 0.0]))
    theirs = torch.nn.functional.binary_cross_entropy(torch.tensor(edges), torch.tensor([1.0, 0.0]))
    np.testing.assert_allclose(ours.item(), theirs.item())


def test_a_zero_std_p_and_zero_lr_decay_are_still_accepted():
    rg.seed(0)
    drawn = rg.normal(rg.zeros(3), rg.tensor([1.0, 0.0, 2.0]))
    assert drawn.tolist()[1] == 0.0
    assert rg.normal(1.5, 0.0, (2,)).tolist() == [1.5, 1.5]
    x1, x2 = rg.tensor(A), rg.tensor(B)
    ours = rg.cdist(x1, x2, 0.0)
    theirs = torch.cdist(torch.tensor(A), torch.tensor(B), 0.0)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ours = rg.tensor(A).renorm(1, 0, 5.0)
    theirs = torch.tensor(A).renorm(1, 0, 5.0)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    w = rg.nn.Parameter(rg.tensor([1.0, 2.0]))
    opt = optim.Adagrad([w], lr=0.1, lr_decay=0.0)
    opt.step((w * w).sum().backward())
    np.testing.assert_allclose(w.tolist(), [0.9, 1.9], rtol=1e-6)


def test_an_optimizer_whose_constructor_failed_leaves_the_parameter_trainable():
    w = rg.nn.Parameter(rg.tensor([1.0, 2.0]))
    with pytest.raises(rg.InvalidArgumentError, match="Adagrad: lr_decay"):
        optim.Adagrad([w], lr_decay=-0.5)
    opt = optim.Adagrad([w], lr=0.1)
    opt.step((w * w).sum().backward())
    np.testing.assert_allclose(w.tolist(), [0.9, 1.9], rtol=1e-6)


def test_autograd_functions_still_take_tensors_and_sequences():
    x = rg.tensor([1.0, 2.0]).require_grad()
    assert rg.autograd.grad((x * x).sum(), x)[0].tolist() == [2.0, 4.0]
    (g,) = rg.autograd.grad([x * x], (x,), grad_outputs=(rg.tensor([1.0, 10.0]),))
    assert g.tolist() == [2.0, 40.0]
    grads = rg.autograd.backward(iter([(x * x).sum()]))
    assert x.grad(grads).tolist() == [2.0, 4.0]


def test_iterating_tensors_still_yields_their_rows():
    assert [row.tolist() for row in rg.tensor(A)] == A.tolist()
    assert list(rg.zeros((0, 2))) == []


def test_distributions_still_broadcast_and_their_methods_pickle_by_name():
    import pickle

    normal = D.Normal(rg.zeros((2, 1)), rg.ones(3))
    assert normal.batch_shape == (2, 3)
    value = rg.tensor([0.5, -1.0, 2.0])
    theirs = torch.distributions.Normal(torch.zeros(2, 1), torch.ones(3)).log_prob(
        torch.tensor(value.numpy())
    )
    np.testing.assert_allclose(normal.log_prob(value).numpy(), theirs.numpy(), rtol=1e-6)
    logits = rg.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])
    ours = D.Categorical(logits=logits).log_prob(rg.tensor([[2], [0]]))
    theirs = torch.distributions.Categorical(logits=torch.tensor(logits.numpy())).log_prob(
        torch.tensor([[2], [0]])
    )
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    assert pickle.loads(pickle.dumps(D.Normal.log_prob)) is D.Normal.log_prob


def test_a_users_distribution_subclass_keeps_its_own_exceptions():
    class Mine(D.Normal):
        def log_prob(self, value):
            raise KeyError("the user's own")

    with pytest.raises(KeyError) as raised:
        Mine(0.0, 1.0).log_prob(rg.tensor(0.0))
    assert not isinstance(raised.value, rg.RetrogradError)


def test_data_loaders_with_good_batch_sizes_still_batch():
    loader = DataLoader([rg.ones(2) * i for i in range(3)], batch_size=2)
    assert [batch.shape for batch in loader] == [(2, 2), (1, 2)]
    assert [batch for batch in DataLoader([1, 2, 3], batch_size=None)] == [1, 2, 3]


def test_backward_takes_torchs_gradient_and_inputs_keywords():
    x = rg.tensor([1.0, 2.0]).require_grad()
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    (x * x).backward(gradient=rg.tensor([1.0, 10.0]))
    grads = (x * x).backward(gradient=rg.tensor([1.0, 10.0]), inputs=[x])
    (t * t).backward(gradient=torch.tensor([1.0, 10.0]), inputs=[t])
    assert x.grad(grads).tolist() == t.grad.tolist() == [2.0, 40.0]
    grads = (x * x).sum().backward(None, True)  # torch's positional retain_graph
    assert x.grad(grads).tolist() == [2.0, 4.0]


def test_gradients_still_add_and_scale_by_numbers():
    w = rg.tensor([1.0, 2.0]).require_grad()
    first, second = (w * 3).sum().backward(), (w * w).sum().backward()
    assert w.grad(sum([first, second])).tolist() == [5.0, 7.0]
    assert w.grad(first * np.float32(0.5)).tolist() == [1.5, 1.5]
    assert w.grad(2 * first).tolist() == [6.0, 6.0]
    assert w.grad(first / 3).tolist() == [1.0, 1.0]


def test_guarded_namespaces_keep_their_functions_pickling_and_their_aliases_one_object():
    import pickle

    from retrograd import nn

    assert optim.clip_grad_norm is nn.utils.clip_grad_norm_ is nn.utils.clip_grad_norm
    for function in (nn.init.normal_, nn.utils.clip_grad_norm_, nn.utils.rnn.pad_sequence,
                     rg.linalg.solve, rg.utils.data.random_split,
                     nn.utils.parametrize.is_parametrized):  # fmt: skip
        assert pickle.loads(pickle.dumps(function)) is function
        assert getattr(function, "__retrograd_guarded__", False), function


def test_a_users_function_given_to_a_transform_keeps_its_own_exceptions():
    def broken(x):
        raise KeyError("the user's own")

    for transform in (
        lambda: rg.autograd.functional.jacobian(broken, rg.ones(2)),
        lambda: rg.func.grad(broken)(rg.ones(2)),
        lambda: rg.nn.utils.skip_init(
            type("Mine", (), {"__init__": lambda s, device=None: broken(0)})
        ),
    ):
        with pytest.raises(KeyError) as raised:
            transform()
        assert not isinstance(raised.value, rg.RetrogradError)


def test_init_functions_still_fill_in_place_after_a_failed_call():
    w = rg.nn.Parameter(rg.zeros((2, 3)))
    with pytest.raises(rg.DTypeError):
        rg.nn.init.uniform_(w, "a")
    assert w.tolist() == [[0.0] * 3] * 2
    rg.nn.init.constant_(w, 0.5)
    assert w.tolist() == [[0.5] * 3] * 2


def _schedule(kind: str):
    sched = optim.lr_scheduler
    w = rg.nn.Parameter(rg.tensor([1.0, 2.0]))
    opt = optim.SGD([w], lr=0.1)
    make = {
        "StepLR": lambda: sched.StepLR(opt, 2, 0.5),
        "CosineAnnealingLR": lambda: sched.CosineAnnealingLR(opt, 10),
        "OneCycleLR": lambda: sched.OneCycleLR(opt, max_lr=0.1, total_steps=10),
    }[kind]
    return w, opt, make()


@pytest.mark.parametrize("kind", ["StepLR", "CosineAnnealingLR", "OneCycleLR"])
@pytest.mark.parametrize("epoch", ["a", [1], {"epoch": 1}, rg.ones((3, 3))])
def test_a_schedule_stepped_to_a_bad_epoch_refuses_and_keeps_stepping(kind, epoch):
    """``step(epoch)`` set the epoch to the bad value before failing (a bare TypeError), and
    every later ``step()`` failed too."""
    w, opt, schedule = _schedule(kind)
    _, _, reference = _schedule(kind)
    with pytest.raises(rg.DTypeError, match=rf"{kind}\.step: epoch must be a number"):
        schedule.step(epoch)
    for _ in range(3):
        opt.step((w * w).sum().backward())
        assert schedule.step() == reference.step()
    assert schedule.get_last_lr() == reference.get_last_lr()


@pytest.mark.parametrize("bad", ["a", None, [1, 2]])
def test_schedule_state_and_plateau_metrics_of_the_wrong_kind_are_refused(bad):
    _, opt, schedule = _schedule("StepLR")
    with pytest.raises(rg.DTypeError, match=r"StepLR\.load_state_dict: expected the dict"):
        schedule.load_state_dict(bad)
    schedule.load_state_dict(schedule.state_dict())
    plateau = optim.lr_scheduler.ReduceLROnPlateau(opt)
    with pytest.raises(rg.DTypeError, match=r"ReduceLROnPlateau\.step: metrics must"):
        plateau.step(bad)
    plateau.step(rg.tensor(1.0))
    plateau.step(0.5)
    assert plateau.best == 0.5


def test_module_lookups_and_save_refuse_what_is_not_a_name_or_a_path(tmp_path):
    from retrograd import nn

    model = nn.Sequential(nn.Linear(3, 2))
    for call, op in (
        (lambda: model.get_parameter(None), "get_parameter"),
        (lambda: model.get_buffer(["0"]), "get_buffer"),
        (lambda: model.get_submodule(0), "get_submodule"),
        (lambda: model.save(None), "save"),
    ):
        with pytest.raises(rg.DTypeError) as raised:
            call()
        assert str(raised.value).startswith(op), raised.value
    assert model.get_parameter("0.weight") is model[0].weight
    model.save(tmp_path / "m.npz")
    assert (tmp_path / "m.npz").exists()


def test_extending_a_module_list_with_a_bad_item_adds_nothing():
    from retrograd import nn

    layers = nn.ModuleList([nn.Linear(3, 3)])
    with pytest.raises(rg.DTypeError, match="item 2 is not a Module"):
        layers.extend([nn.Linear(3, 3), 5])
    assert len(layers) == 1
    with pytest.raises(rg.DTypeError, match=r"ModuleList\.extend: expected an iterable"):
        layers.extend(None)
    layers.extend(nn.Sequential(nn.Linear(3, 3), nn.ReLU()))  # a module is an iterable
    assert len(layers) == 3


@pytest.mark.numpy_only("the command line: nothing here depends on the suite's inner backend")
@pytest.mark.parametrize(
    "arguments, said",
    [
        (["train", "--epochs", "abc"], "argument --epochs: must be a positive integer, got 'abc'"),
        (["train", "--lr", "x"], "argument --lr: must be a positive finite number, got 'x'"),
        (["sample", "--tokens", "1.5"], "argument --tokens: must be a positive integer"),
    ],
)
def test_the_cli_says_what_a_number_flag_expected(capsys, arguments, said):
    from retrograd.app import cli

    with pytest.raises(SystemExit) as raised:
        cli.main(arguments)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "_positive" not in err and "Traceback" not in err, err


def test_valid_random_fills_takes_and_quantiles_still_work():
    rg.seed(0)
    x = rg.zeros((200,))
    assert x.uniform_(-1.0, 1.0).min().item() >= -1.0 and x.max().item() < 1.0
    assert x.uniform_(2.0, 2.0).tolist() == [2.0] * 200  # an empty range: torch's from == to
    assert x.normal_(1.5, 0.0).tolist() == [1.5] * 200
    assert x.exponential_(rg.tensor(2.0)).min().item() >= 0.0
    values = rg.tensor(A)
    taken = values.take(rg.tensor([[0, -1], [4, 2]]))
    np.testing.assert_array_equal(
        taken.numpy(), torch.tensor(A).take(torch.tensor([[0, -1], [4, 2]]))
    )
    q = [0.25, 0.5]
    np.testing.assert_allclose(
        values.quantile(rg.tensor(q), dim=1).numpy(),
        torch.tensor(A).quantile(torch.tensor(q), dim=1).numpy(),
        rtol=1e-6,
    )
    layers = rg.nn.ModuleDict({"a": rg.nn.Linear(3, 2)})
    assert "b" not in layers and layers["a"] is layers.a


def test_rot90_celu_softshrink_and_pdist_with_good_values_match_torch():
    x, t = rg.tensor(A - 3.5), torch.tensor(A - 3.5)
    for k in (1, 2, 3, -1, 5, np.int64(2)):
        np.testing.assert_array_equal(x.rot90(k).numpy(), t.rot90(int(k)).numpy())
    pairs = [
        (F.celu(x, 0.5), torch.nn.functional.celu(t, 0.5)),
        (F.softshrink(x, 1.0), torch.nn.functional.softshrink(t, 1.0)),
        (F.pdist(x, 0.0), torch.nn.functional.pdist(t, 0.0)),
        (F.pdist(x, 1.5), torch.nn.functional.pdist(t, 1.5)),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_value_checks_on_a_device_are_deferred_to_the_next_host_read_as_index_checks_are():
    """``check_values`` rides on the backend's index check: with deferred checks (a GPU's
    default) the BCE range check costs no synchronisation and raises its own class, the
    hierarchy's value error, at the next host read, folded or not."""
    backend = rg.Autodiff(rg.TorchBackend("cpu", deferred_index_checks=True))
    bad = rg.tensor([0.5, 1.5], backend=backend)
    good = rg.tensor([0.5, 0.25], backend=backend)
    target = rg.tensor([1.0, 0.0], backend=backend)
    loss = F.binary_cross_entropy(bad, target)  # no error yet: nothing read back
    with pytest.raises(rg.InvalidArgumentError, match="binary_cross_entropy: all elements"):
        loss.item()
    for _ in range(80):  # past the fold of pending checks into one pair of vectors
        F.binary_cross_entropy(good, target)
    F.binary_cross_entropy(bad, target)
    with pytest.raises(rg.InvalidArgumentError, match="between 0 and 1"):
        backend.inner.synchronize()
    expected = torch.nn.functional.binary_cross_entropy(
        torch.tensor([0.5, 0.25]), torch.tensor([1.0, 0.0])
    )
    assert F.binary_cross_entropy(good, target).item() == pytest.approx(expected.item())
