"""Defects found by round 13 of the reliability sweep (``tests/test_reliability_sweep_13.py``
and probes of the product: containers, data loading, schedules, distributed setup, files).

Each was a bare Python exception from inside (``AttributeError``, ``TypeError`` "object is
not iterable", "'int' object has no len()"), a silent wrong result (``init_process_group``
with ``world_size=0`` started a job; ``ModuleDict.update`` of another ``ModuleDict`` read its
keys as pairs; ``rg.Tensor(x, tensor)`` made a tensor every later op failed on), a hang
(``VonMises.sample`` with a concentration its rejection sampler can never accept), or a
message that did not name the op. Each now raises the class of API.md section 7 naming the op
and the value at fault, leaves the object as it was, and good input still matches torch.
"""

from __future__ import annotations

import io
import os
import threading

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.distributed as dist
from retrograd.distributions import transforms as T  # noqa: N812  (torch's idiom)
from retrograd.errors import KeyMismatchError
from retrograd.utils import data as D  # noqa: N812  (torch's idiom)


def _sgd() -> rg.optim.SGD:
    return rg.optim.SGD([rg.nn.Parameter(rg.ones(3))], lr=0.1)


def _dataset() -> D.TensorDataset:
    return D.TensorDataset(rg.arange(6).float())


# (op the message names, error class, call, fragments of the message)
CASES = [
    # data: the samplers, datasets and DataLoader got "object of type 'int' has no len()",
    # "'int' object is not iterable" or a '<' between an int and a str from inside
    ("SequentialSampler", rg.DTypeError, lambda: D.SequentialSampler(5), ["length", "5"]),
    ("RandomSampler", rg.DTypeError, lambda: D.RandomSampler(True), ["data_source", "True"]),
    ("RandomSampler", rg.InvalidArgumentError,
     lambda: D.RandomSampler(_dataset(), num_samples="3"), ["num_samples", "'3'"]),
    ("SubsetRandomSampler", rg.DTypeError, lambda: D.SubsetRandomSampler(5), ["indices"]),
    ("WeightedRandomSampler", rg.DTypeError, lambda: D.WeightedRandomSampler(0, 3),
     ["weights", "iterable"]),
    ("WeightedRandomSampler", rg.ShapeError,
     lambda: D.WeightedRandomSampler([[1.0, 2.0]], 2), ["1d", "[1, 2]"]),
    ("WeightedRandomSampler", rg.InvalidArgumentError,
     lambda: D.WeightedRandomSampler([1.0, 2.0], "a"), ["num_samples", "'a'"]),
    ("WeightedRandomSampler", rg.InvalidArgumentError,
     lambda: D.WeightedRandomSampler([1.0, 2.0], 2, replacement="no"), ["replacement"]),
    ("BatchSampler", rg.InvalidArgumentError,
     lambda: D.BatchSampler(D.SequentialSampler(range(4)), 2, "yes"), ["drop_last", "'yes'"]),
    ("BatchSampler", rg.DTypeError, lambda: D.BatchSampler(5, 2, False), ["sampler", "5"]),
    ("ConcatDataset", rg.DTypeError, lambda: D.ConcatDataset(1.5), ["datasets", "1.5"]),
    ("ConcatDataset", rg.DTypeError, lambda: D.ConcatDataset([_dataset(), 3]),
     ["datasets[1]", "3"]),
    ("ConcatDataset", rg.DTypeError, lambda: D.ConcatDataset([_dataset()])["a"],
     ["index", "'a'"]),
    ("StackDataset", rg.DTypeError, lambda: D.StackDataset(_dataset(), -1),
     ["dataset 1", "-1"]),
    ("DataLoader", rg.DTypeError, lambda: D.DataLoader(_dataset(), sampler=5), ["sampler"]),
    ("DataLoader", rg.DTypeError, lambda: D.DataLoader(_dataset(), batch_sampler=5),
     ["batch_sampler"]),
    ("DataLoader", rg.InvalidArgumentError, lambda: D.DataLoader(_dataset(), timeout=-1),
     ["timeout", "-1"]),
    ("DataLoader", rg.InvalidArgumentError,
     lambda: D.DataLoader(_dataset(), prefetch_factor=2), ["prefetch_factor", "num_workers"]),
    ("DataLoader", rg.InvalidArgumentError,
     lambda: D.DataLoader(_dataset(), num_workers=1, prefetch_factor=0), ["prefetch_factor"]),
    ("DataLoader", rg.DTypeError,
     lambda: D.DataLoader(_dataset(), num_workers=1, worker_init_fn=5), ["worker_init_fn"]),
    ("DistributedSampler", rg.InvalidArgumentError,
     lambda: D.DistributedSampler(_dataset(), num_replicas=2, rank=5), ["rank 5", "[0, 1]"]),
    ("DistributedSampler", rg.InvalidArgumentError,
     lambda: D.DistributedSampler(_dataset(), num_replicas=0, rank=0), ["num_replicas", "0"]),
    ("DistributedSampler", rg.DTypeError,
     lambda: D.DistributedSampler(5, num_replicas=2, rank=0), ["dataset"]),
    ("DistributedSampler.set_epoch", rg.DTypeError,
     lambda: D.DistributedSampler(_dataset(), 2, 0).set_epoch("a"), ["epoch", "'a'"]),
    # the distributions' transforms: AttributeError or TypeError from inside, or later in a
    # property far from the mistake (a tensor given for the parts)
    ("ExpTransform", rg.DTypeError, lambda: T.ExpTransform()(None), ["NoneType"]),
    ("TanhTransform.inv", rg.DTypeError, lambda: T.TanhTransform().inv("a"), ["'a'"]),
    ("SigmoidTransform.forward_shape", rg.ShapeError,
     lambda: T.SigmoidTransform().forward_shape(None), ["shape", "None"]),
    ("SoftmaxTransform.inverse_shape", rg.ShapeError,
     lambda: T.SoftmaxTransform().inverse_shape(1.5), ["shape", "1.5"]),
    ("StickBreakingTransform.log_abs_det_jacobian", rg.DTypeError,
     lambda: T.StickBreakingTransform().log_abs_det_jacobian(rg.ones(3), 2.0), ["float"]),
    ("PowerTransform", rg.DTypeError, lambda: T.PowerTransform("a"), ["exponent", "'a'"]),
    ("AffineTransform", rg.DTypeError, lambda: T.AffineTransform(None, 1.0), ["loc", "None"]),
    ("ComposeTransform", rg.InvalidArgumentError, lambda: T.ComposeTransform([rg.ones(2)]),
     ["Transform", "Tensor"]),
    ("ComposeTransform", rg.DTypeError, lambda: T.ComposeTransform(5), ["iterable", "5"]),
    ("IndependentTransform", rg.InvalidArgumentError,
     lambda: T.IndependentTransform(rg.ones(2), 1), ["Transform", "Tensor"]),
    ("CatTransform", rg.InvalidArgumentError, lambda: T.CatTransform([]), ["at least one"]),
    ("StackTransform", rg.InvalidArgumentError, lambda: T.StackTransform([]), ["at least one"]),
    ("CumulativeDistributionTransform", rg.DTypeError,
     lambda: T.CumulativeDistributionTransform(rg.ones(2)), ["Distribution", "Tensor"]),
    ("ComposeTransform", rg.DTypeError,
     lambda: T.ComposeTransform([]).log_abs_det_jacobian(T.ExpTransform(), rg.ones(2)),
     ["tensor", "ExpTransform"]),
    ("IndependentTransform", rg.DTypeError,
     lambda: T.IndependentTransform(T.ExpTransform(), 1)([1.0, 2.0]), ["tensor", "list"]),
    ("Normal", rg.ShapeError,
     lambda: rg.distributions.Normal(rg.zeros(2), rg.ones(2)).expand("ab"), ["shape", "'ab'"]),
    # optimizers, schedules, the scaler, the averaged model
    ("Optimizer", rg.DTypeError, lambda: rg.optim.Optimizer([rg.nn.Parameter(rg.ones(1))], (1,)),
     ["defaults", "tuple"]),
    ("SGD", rg.DTypeError, lambda: _sgd().add_param_group({"params": 5}), ["params", "5"]),
    ("LRScheduler", rg.DTypeError, lambda: rg.optim.lr_scheduler.LRScheduler(rg.ones(2)),
     ["Tensor is not an optimizer"]),
    ("LambdaLR", rg.DTypeError, lambda: rg.optim.lr_scheduler.LambdaLR(None, lambda e: 1.0),
     ["NoneType is not an optimizer"]),
    ("LambdaLR", rg.DTypeError, lambda: rg.optim.lr_scheduler.LambdaLR(_sgd(), lambda e: "x"),
     ["lr_lambda(0) returned 'x'", "number"]),
    ("StepLR.lr_at", rg.DTypeError, lambda: rg.optim.lr_scheduler.StepLR(_sgd(), 2).lr_at("a"),
     ["'a'"]),
    ("SWALR.lr_at", rg.DTypeError, lambda: rg.optim.swa_utils.SWALR(_sgd(), 0.05).lr_at([]),
     ["[]"]),
    ("GradScaler", rg.InvalidArgumentError, lambda: rg.amp.GradScaler(init_scale="a"), ["'a'"]),
    ("GradScaler.update", rg.InvalidArgumentError, lambda: rg.amp.GradScaler("cpu").update("a"),
     ["'a'"]),
    ("GradScaler.load_state_dict", rg.DTypeError,
     lambda: rg.amp.GradScaler("cpu").load_state_dict(1), ["1"]),
    ("AveragedModel.update_parameters", rg.DTypeError,
     lambda: rg.optim.swa_utils.AveragedModel(rg.nn.Linear(2, 2)).update_parameters(5),
     ["Module", "int"]),
    # modules
    ("replicate", rg.DTypeError, lambda: rg.nn.Linear(2, 2).replicate(5), ["backend", "int"]),
    ("state_dict", rg.DTypeError, lambda: rg.nn.Linear(2, 2).state_dict(destination=[]),
     ["destination", "list"]),
    ("tensor", rg.DTypeError, lambda: rg.tensor([1.0], backend="numpy"), ["backend", "str"]),
    ("DataParallel", rg.DTypeError, lambda: rg.nn.DataParallel(rg.ones(2)), ["Module"]),
    ("DataParallel", rg.DTypeError, lambda: rg.nn.DataParallel(rg.nn.Linear(1, 1), 5),
     ["device_ids"]),
    ("SyncBatchNorm.convert_sync_batchnorm", rg.DTypeError,
     lambda: rg.nn.SyncBatchNorm.convert_sync_batchnorm(-5), ["Module", "int"]),
    # (torch's TypeError: a DTypeError since round 73)
    ("generate_square_subsequent_mask", rg.DTypeError,
     lambda: rg.nn.Transformer.generate_square_subsequent_mask(2.5), ["sz", "2.5"]),
    ("ModuleList.insert", rg.DTypeError,
     lambda: rg.nn.ModuleList([rg.nn.ReLU()]).insert("a", rg.nn.ReLU()), ["index", "'a'"]),
    ("ModuleDict.update", rg.DTypeError, lambda: rg.nn.ModuleDict().update(5), ["5"]),
    # (torch's ValueError: an iterable of the wrong length)
    ("ModuleDict.update", rg.InvalidArgumentError, lambda: rg.nn.ModuleDict().update([("a",)]),
     ["element #0", "pair"]),
    ("ParameterDict.update", rg.DTypeError, lambda: rg.nn.ParameterDict().update(None),
     ["None"]),
    ("ParameterList.extend", rg.DTypeError, lambda: rg.nn.ParameterList().extend(5), ["5"]),
    # the rest of the runtime: functions that ran or iterated what they were given
    ("Tensor", rg.DTypeError, lambda: rg.Tensor(float("nan"), rg.ones(2), rg.zeros(0)),
     ["3 arguments", "Tensor"]),
    ("Tensor", rg.DTypeError, lambda: rg.Tensor(rg.ones(2), backend="numpy"), ["backend"]),
    ("save", rg.DTypeError, lambda: rg.save({"a": rg.ones(2)}, io.StringIO()), ["text mode"]),
    ("collect_all", rg.DTypeError, lambda: rg.futures.collect_all(1), ["futures", "1"]),
    ("Future.then", rg.DTypeError, lambda: rg.futures.Future().then(5), ["callback"]),
    ("jit.wait", rg.DTypeError, lambda: rg.jit.wait(rg.ones(2)), ["Future", "Tensor"]),
    ("stack_module_state", rg.DTypeError, lambda: rg.func.stack_module_state([rg.ones(2)]),
     ["modules", "Tensor"]),
    ("stack_module_state", rg.DTypeError, lambda: rg.func.stack_module_state(3), ["models"]),
    ("functional_call", rg.DTypeError, lambda: rg.func.functional_call(5, {}), ["Module"]),
    ("profile", rg.DTypeError, lambda: rg.profiler.profile(schedule=5), ["schedule"]),
    ("profile", rg.DTypeError, lambda: rg.profiler.profile(activities=1.5), ["activities"]),
    ("export_chrome_trace", rg.DTypeError,
     lambda: rg.profiler.profile().export_chrome_trace(5), ["path", "int"]),
    ("ZeroRedundancyOptimizer", rg.DTypeError,
     lambda: dist.ZeroRedundancyOptimizer([rg.nn.Parameter(rg.ones(2))], 5, lr=0.1),
     ["optimizer_class", "int"]),
    ("DistributedContext", rg.DTypeError, lambda: dist.DistributedContext(0), ["devices", "0"]),
    ("DistributedContext", rg.DTypeError, lambda: dist.DistributedContext("cpu:0"),
     ["devices", "'cpu:0'"]),
    ("init_process_group", rg.InvalidArgumentError,
     lambda: dist.init_process_group("gloo", world_size=0, rank=0), ["world_size", "0"]),
    ("init_process_group", rg.InvalidArgumentError,
     lambda: dist.init_process_group("gloo", world_size=2, rank=5), ["rank 5", "2 processes"]),
    ("init_process_group", rg.DTypeError,
     lambda: dist.init_process_group("gloo", world_size="2"), ["world_size", "'2'"]),
    ("all_reduce", rg.DistributedError, lambda: dist.all_reduce(rg.ones(2)),
     ["not been initialized"]),
    ("get_rank", rg.DistributedError, dist.get_rank, ["not been initialized"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "op, error, call, fragments", CASES, ids=[f"{i}-{case[0]}" for i, case in enumerate(CASES)]
)
def test_bad_arguments_raise_the_hierarchy_naming_the_op(op, error, call, fragments):
    pending = rg.tensor([1.0, 2.0]).require_grad()
    loss = (pending * pending).sum()
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    assert message.startswith(f"{op}:") or f" {op}:" in message or f"{op}." in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert not dist.is_initialized()  # a refused init started nothing
    assert pending.grad(loss.backward()).tolist() == [2.0, 4.0]


# -- containers ------------------------------------------------------------------------------------
def test_update_of_a_container_takes_another_container_as_torch_does():
    """A ``ModuleDict`` (``ParameterDict``) given to ``update`` was iterated as pairs: its
    keys' characters were read as (name, module)."""
    ours = rg.nn.ModuleDict({"x": rg.nn.ReLU()})
    ours.update(rg.nn.ModuleDict({"bb": rg.nn.Linear(2, 2), "c": rg.nn.Tanh()}))
    theirs = torch.nn.ModuleDict({"x": torch.nn.ReLU()})
    theirs.update(torch.nn.ModuleDict({"bb": torch.nn.Linear(2, 2), "c": torch.nn.Tanh()}))
    assert list(ours.keys()) == list(theirs.keys())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours_p = rg.nn.ParameterDict({"x": rg.ones(1)})
    ours_p.update(rg.nn.ParameterDict({"yy": rg.ones(2)}))
    theirs_p = torch.nn.ParameterDict({"x": torch.ones(1)})
    theirs_p.update(torch.nn.ParameterDict({"yy": torch.ones(2)}))
    assert list(ours_p.keys()) == list(theirs_p.keys())
    assert ours_p["yy"].shape == tuple(theirs_p["yy"].shape)


def test_a_container_update_or_extend_with_a_bad_item_adds_nothing():
    modules = rg.nn.ModuleDict({"a": rg.nn.ReLU()})
    with pytest.raises(rg.DTypeError, match="ModuleDict"):
        modules.update([("b", rg.nn.Tanh()), ("c", 5)])
    assert list(modules.keys()) == ["a"]
    params = rg.nn.ParameterDict({"a": rg.ones(1)})
    with pytest.raises(rg.DTypeError, match="'a'"):  # (a parameter's key: a tensor or None)
        params.update([("z", rg.ones(1)), ("a", "bad")])
    assert list(params.keys()) == ["a"]
    plist = rg.nn.ParameterList([rg.ones(1)])
    with pytest.raises(rg.DTypeError):  # (an int tensor cannot be a Parameter: torch's refusal)
        plist.extend([rg.ones(2), rg.tensor([1, 2])])
    assert len(plist) == 1
    plist.extend([rg.ones(2)])  # still usable
    assert [p.shape for p in plist] == [(1,), (2,)]


def test_a_missing_parameter_key_is_the_hierarchys_key_error():
    params = rg.nn.ParameterDict({"a": rg.ones(1)})
    for call in (lambda: params["x"], lambda: params.__delitem__("x"), lambda: params[[]]):
        with pytest.raises(KeyMismatchError, match="ParameterDict: no entry named") as raised:
            call()
        assert isinstance(raised.value, KeyError)  # what torch's dict raises, still caught
    with pytest.raises(KeyMismatchError, match="ModuleDict"):
        rg.nn.ModuleDict().pop("x")
    assert list(params.keys()) == ["a"]


@pytest.mark.parametrize("kind", ["Sequential", "ModuleList"])
def test_pop_of_sequential_and_module_list_matches_torch(kind):
    """torch's ``pop(index)``: missing before (an AttributeError)."""

    def build(lib):
        layers = [lib.nn.Linear(2, 3), lib.nn.ReLU(), lib.nn.Linear(3, 1), lib.nn.Tanh()]
        return getattr(lib.nn, kind)(*layers) if kind == "Sequential" else lib.nn.ModuleList(layers)

    ours, theirs = build(rg), build(torch)
    for index in (1, -1):
        assert type(ours.pop(index)).__name__ == type(theirs.pop(index)).__name__
    assert list(ours._modules) == list(theirs._modules)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    with pytest.raises(rg.IndexOutOfRangeError, match="out of range"):
        ours.pop(5)
    assert len(ours) == 2


# -- data ------------------------------------------------------------------------------------------
def test_the_data_calls_torch_refuses_are_refused_and_good_ones_still_batch():
    """Each refused call of ``CASES`` that torch refuses too (with a bare TypeError or
    ValueError) is an error of the same built-in class here; good samplers still draw."""
    torch_data = torch.utils.data
    pairs = [
        (lambda: torch_data.RandomSampler(True), lambda: D.RandomSampler(True)),
        (lambda: torch_data.ConcatDataset(1.5), lambda: D.ConcatDataset(1.5)),
        (lambda: list(torch_data.SequentialSampler(5)), lambda: D.SequentialSampler(5)),
        (lambda: torch_data.WeightedRandomSampler([[1.0, 2.0]], 2),
         lambda: D.WeightedRandomSampler([[1.0, 2.0]], 2)),
        (lambda: torch_data.BatchSampler(range(3), 2, "yes"),
         lambda: D.BatchSampler(range(3), 2, "yes")),
        (lambda: torch_data.DataLoader(range(3), timeout=-1),
         lambda: D.DataLoader(range(3), timeout=-1)),
        (lambda: torch_data.DataLoader(range(3), prefetch_factor=2),
         lambda: D.DataLoader(range(3), prefetch_factor=2)),
    ]  # fmt: skip
    for theirs, ours in pairs:
        with pytest.raises((TypeError, ValueError)) as torch_raised:
            theirs()
        with pytest.raises(rg.RetrogradError) as raised:
            ours()
        assert isinstance(raised.value, (TypeError, ValueError))
        del torch_raised
    loader = D.DataLoader(_dataset(), batch_size=4, sampler=D.SequentialSampler(range(6)))
    assert [b[0].tolist() for b in loader] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]
    weighted = D.WeightedRandomSampler([0.0, 1.0, 0.0], 5)
    assert list(weighted) == [1, 1, 1, 1, 1]
    assert D.ConcatDataset([_dataset(), _dataset()])[np.int64(7)][0].item() == 1.0
    batches = D.BatchSampler(D.SequentialSampler(range(5)), 2, drop_last=True)
    assert list(batches) == [[0, 1], [2, 3]]


# -- transforms ------------------------------------------------------------------------------------
def test_transforms_of_good_values_still_match_torch():
    x = np.array([[0.3, -1.2], [2.0, 0.5]])
    td = torch.distributions.transforms
    pairs = [
        (T.ComposeTransform([T.AffineTransform(1.0, 2.0), T.ExpTransform()]),
         td.ComposeTransform([td.AffineTransform(1.0, 2.0), td.ExpTransform()])),
        (T.IndependentTransform(T.TanhTransform(), 1),
         td.IndependentTransform(td.TanhTransform(), 1)),
        (T.PowerTransform(rg.tensor(2.0, dtype="float64")), td.PowerTransform(torch.tensor(2.0))),
        (T.StackTransform([T.ExpTransform(), T.SigmoidTransform()], dim=1),
         td.StackTransform([td.ExpTransform(), td.SigmoidTransform()], dim=1)),
        (T.CatTransform([T.ExpTransform(), T.SoftplusTransform()], dim=0, lengths=[1, 1]),
         td.CatTransform([td.ExpTransform(), td.SoftplusTransform()], dim=0, lengths=[1, 1])),
    ]  # fmt: skip
    for ours, theirs in pairs:
        value = np.abs(x) if isinstance(ours, T.PowerTransform) else x
        a, b = rg.tensor(value), torch.tensor(value)
        ya, yb = ours(a), theirs(b)
        np.testing.assert_allclose(ya.numpy(), yb.numpy(), rtol=1e-12)
        np.testing.assert_allclose(ours.inv(ya).numpy(), theirs.inv(yb).numpy(), rtol=1e-9)
        np.testing.assert_allclose(
            ours.log_abs_det_jacobian(a, ya).numpy(),
            theirs.log_abs_det_jacobian(b, yb).numpy(),
            rtol=1e-9,
        )
        assert ours.forward_shape((2, 2)) == tuple(theirs.forward_shape(torch.Size((2, 2))))


class _Doubling(T.Transform):
    """A user's transform: its own exceptions are not the library's to translate."""

    bijective = True

    def _call(self, x):
        if not hasattr(x, "shape"):
            raise KeyError("the user's own error")
        return x * 2


def test_a_users_transform_keeps_its_own_exceptions_inside_a_compose():
    composed = T.ComposeTransform([T.ExpTransform(), _Doubling()])
    assert composed(rg.tensor([0.0])).tolist() == [2.0]
    with pytest.raises(KeyError, match="the user's own error"):
        _Doubling()(None)


# -- schedules, the scaler, the averaged model -----------------------------------------------------
def test_a_lambda_that_returns_no_number_leaves_the_rates_as_they_were():
    optimizer = _sgd()
    answers = iter([1.0, 0.5, "oops", 0.25])
    schedule = rg.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: next(answers))
    schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    with pytest.raises(rg.DTypeError, match="lr_lambda\\(2\\) returned 'oops'"):
        schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    assert schedule.last_epoch == 1
    schedule.step()  # the next good answer steps on
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)


def test_a_grad_scaler_state_that_fails_half_way_changes_nothing():
    scaler = rg.amp.GradScaler("cpu", init_scale=8.0)
    before = scaler.state_dict()
    bad = {**before, "scale": 2.0, "growth_interval": "often"}
    with pytest.raises(rg.InvalidArgumentError, match=r"GradScaler\.load_state_dict"):
        scaler.load_state_dict(bad)
    assert scaler.state_dict() == before
    with pytest.raises(rg.InvalidArgumentError, match=r"GradScaler\.load_state_dict"):
        scaler.load_state_dict({"scale": 2.0})  # keys missing: KeyError from inside before
    assert scaler.state_dict() == before
    theirs = torch.amp.GradScaler("cpu", init_scale=8.0)
    theirs.scale(torch.ones(1))  # torch makes its scale at the first scale()
    scaler.update(3.0)
    theirs.update(3.0)
    assert scaler.get_scale() == theirs.get_scale()


def test_an_averaged_model_given_another_shape_changes_nothing():
    """The first tensors were written before the mismatch was found."""
    model = rg.nn.Sequential(rg.nn.Linear(2, 2), rg.nn.Linear(2, 3))
    averaged = rg.optim.swa_utils.AveragedModel(model)
    averaged.update_parameters(model)
    before = [p.numpy().copy() for p in averaged.parameters()]
    other = rg.nn.Sequential(rg.nn.Linear(2, 2), rg.nn.Linear(2, 4))
    with pytest.raises(rg.ShapeError, match=r"update_parameters.*\[3, 2\].*\[4, 2\]"):
        averaged.update_parameters(other)
    for saved, now in zip(before, averaged.parameters()):
        np.testing.assert_array_equal(saved, now.numpy())
    assert int(averaged.n_averaged.item()) == 1


# -- distributed setup -----------------------------------------------------------------------------
def test_a_refused_init_leaves_a_single_process_job_to_start_and_collectives_to_check_dst():
    """``world_size=0`` started a one-member job (every later init was "twice"); a rank
    outside the job would have waited for peers that never come. ``reduce`` took any dst."""
    with pytest.raises(rg.InvalidArgumentError):
        dist.init_process_group("gloo", world_size=0, rank=0)
    assert not dist.is_initialized()
    os.environ.pop("RANK", None)
    dist.init_process_group("gloo", world_size=1, rank=0)
    try:
        t = rg.tensor([1.0, 2.0])
        with pytest.raises(rg.IndexOutOfRangeError, match="reduce: dst 1 is not a rank"):
            dist.reduce(t, dst=1)
        dist.reduce(t, dst=0)
        assert t.tolist() == [1.0, 2.0]  # one member: the sum is itself
        assert dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


# -- a hang and a tensor no op could use -----------------------------------------------------------
@pytest.mark.parametrize("concentration", [-2.0, 0.0, float("nan"), float("inf")])
def test_von_mises_refuses_a_concentration_its_sampler_cannot_accept(concentration):
    """With ``validate_args=False`` the rejection sampler looped for ever."""
    d = rg.distributions.VonMises(
        rg.tensor([0.0, 1.0]), rg.tensor(concentration), validate_args=False
    )
    with pytest.raises(rg.InvalidArgumentError, match=r"VonMises\.sample: concentration"):
        d.sample()


@pytest.mark.parametrize("concentration", [1e16, 1e30, 1e300])
def test_von_mises_of_a_huge_concentration_draws_at_its_location(concentration):
    """Where the proposal rounds to a point no draw is ever accepted (torch's sampler hangs
    there from about 1e16 on): the normal limit, of standard deviation 1/sqrt(kappa), within
    1e-7 of ``loc``. Checked on a thread with a deadline, so that a regression fails here
    rather than hanging the suite."""
    loc = np.array([0.0, 1.0, -2.5])
    d = rg.distributions.VonMises(
        rg.tensor(loc, dtype="float64"), rg.tensor(concentration, dtype="float64")
    )
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("draws", d.sample((4,))))
    worker.daemon = True
    worker.start()
    worker.join(20)
    assert "draws" in result, "VonMises.sample did not return"
    draws = result["draws"].numpy()
    assert draws.shape == (4, 3)
    np.testing.assert_allclose(draws, np.broadcast_to(loc, (4, 3)), atol=1e-7)


def test_a_tensor_made_from_a_tensor_taken_for_a_backend_is_refused_as_torch_does():
    with pytest.raises(TypeError):
        torch.Tensor(float("nan"), torch.ones(2), torch.zeros(0))
    with pytest.raises(rg.DTypeError, match="Tensor"):
        rg.Tensor(float("nan"), rg.ones(2), rg.zeros(0))
    assert rg.Tensor(2, 3).shape == tuple(torch.Tensor(2, 3).shape)  # legacy forms still work
    assert rg.Tensor([1.0, 2.0]).tolist() == torch.Tensor([1.0, 2.0]).tolist()
    x = rg.ones(2)
    assert rg.Tensor(x._prim, x._backend).tolist() == [1.0, 1.0]  # the internal form


def test_a_future_keeps_working_after_a_refused_callback():
    """A non-callable was stored and failed inside ``set_result``, in another caller."""
    future = rg.futures.Future()
    with pytest.raises(rg.DTypeError, match="add_done_callback"):
        future.add_done_callback("not a function")
    seen = []
    future.add_done_callback(lambda f: seen.append(f.value()))
    future.set_result(3)
    assert seen == [3] and future.wait() == 3
