"""Regression tests of the defects the real ports 52-53 found (realports10), each against
torch or against the distribution's own moments and quantiles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg


def _np(t):
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


# -- torch's top-level forms of functional operations -----------------------------------------
def test_top_level_functional_forms_agree_with_torch():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    x = rng.standard_normal((2, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    cases = [
        ("pdist", (a,), {}),
        ("pdist", (a, 1.0), {}),
        ("cosine_similarity", (a, b), {"dim": 1}),
        ("pairwise_distance", (a, b), {}),
        ("conv2d", (x, w), {"padding": 1}),
        ("layer_norm", (a, (4,)), {}),
        ("group_norm", (x, 3), {}),
        ("max_pool2d", (x, 2), {}),
        ("pixel_shuffle", (rng.standard_normal((1, 4, 2, 2)), 2), {}),
        ("selu", (a,), {}),
    ]
    for name, args, kwargs in cases:
        ours = getattr(rg, name)(
            *[rg.tensor(v) if isinstance(v, np.ndarray) else v for v in args], **kwargs
        )
        theirs = getattr(torch, name)(
            *[torch.tensor(v) if isinstance(v, np.ndarray) else v for v in args], **kwargs
        )
        np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-6, atol=1e-6, err_msg=name)


def test_top_level_dropout_and_embedding_take_torchs_argument_order():
    x = rg.ones(3, 4)
    np.testing.assert_array_equal(_np(rg.dropout(x, 0.5, False)), np.ones((3, 4)))
    np.testing.assert_array_equal(_np(rg.dropout(x, 0.5, train=False)), np.ones((3, 4)))
    assert float(rg.dropout(x, 1.0, True).sum()) == 0.0
    np.testing.assert_array_equal(_np(rg.alpha_dropout(x, 0.5, False)), np.ones((3, 4)))
    weight = np.arange(12.0).reshape(4, 3)
    index = [[3, 0], [1, 1]]
    ours = rg.embedding(rg.tensor(weight), rg.tensor(index))
    theirs = torch.embedding(torch.tensor(weight), torch.tensor(index))
    np.testing.assert_array_equal(_np(ours), _np(theirs))


def test_trapz_is_trapezoid():
    y = np.array([[1.0, 3.0, 2.0, 5.0], [0.5, -1.0, 2.0, 0.0]])
    xs = np.array([0.0, 0.5, 2.0, 2.5])
    np.testing.assert_allclose(
        _np(rg.trapz(rg.tensor(y), rg.tensor(xs))),
        _np(torch.trapz(torch.tensor(y), torch.tensor(xs))),
    )
    np.testing.assert_allclose(
        _np(rg.trapz(rg.tensor(y), dx=0.25, dim=0)),
        _np(torch.trapz(torch.tensor(y), dx=0.25, dim=0)),
    )


# -- Tensor.log_normal_ / cauchy_ / geometric_ --------------------------------------------------
def test_log_normal_draws_have_the_distributions_quantiles():
    rg.manual_seed(0)
    t = rg.empty(40000, dtype=rg.float64).log_normal_(0.5, 0.75)
    logs = np.log(_np(t))
    assert abs(np.median(logs) - 0.5) < 0.02
    assert abs(logs.std() - 0.75) < 0.02
    assert (_np(t) > 0).all()


def test_cauchy_draws_have_the_distributions_quartiles():
    rg.manual_seed(1)
    t = _np(rg.empty(40000, dtype=rg.float64).cauchy_(2.0, 0.5))
    q1, median, q3 = np.quantile(t, [0.25, 0.5, 0.75])
    assert abs(median - 2.0) < 0.03
    assert abs(q1 - 1.5) < 0.03 and abs(q3 - 2.5) < 0.03


def test_geometric_draws_count_trials_from_one():
    rg.manual_seed(2)
    t = _np(rg.empty(40000).geometric_(0.25))
    assert t.min() >= 1.0 and (t == np.round(t)).all()
    assert abs(t.mean() - 4.0) < 0.08  # mean 1/p
    assert abs((t == 1).mean() - 0.25) < 0.01  # P(first trial) = p
    counts = rg.empty(5, dtype=rg.int64).geometric_(0.5)
    assert counts.dtype == rg.int64 and int(counts.min()) >= 1


def test_random_fills_take_a_generator_and_refuse_bad_parameters():
    g1, g2 = rg.Generator().manual_seed(7), rg.Generator().manual_seed(7)
    for name, args in (("log_normal_", ()), ("cauchy_", ()), ("geometric_", (0.3,))):
        a = getattr(rg.empty(6), name)(*args, generator=g1)
        b = getattr(rg.empty(6), name)(*args, generator=g2)
        np.testing.assert_array_equal(_np(a), _np(b))
    with pytest.raises(rg.InvalidArgumentError, match="log_normal_"):
        rg.empty(3).log_normal_(0.0, 0.0)
    with pytest.raises(rg.InvalidArgumentError, match="cauchy_"):
        rg.empty(3).cauchy_(0.0, -1.0)
    for p in (0.0, 1.0, math.nan):
        with pytest.raises(rg.InvalidArgumentError, match="geometric_"):
            rg.empty(3).geometric_(p)


# -- nn.Module: a plain attribute before Module.__init__ -----------------------------------------
def test_a_plain_attribute_may_be_set_before_module_init_as_in_torch():
    def make(lib):
        class ConvLayer(lib.nn.Sequential):  # rosinality's stylegan2 ConvLayer, in short
            def __init__(self):
                self.padding = 1
                super().__init__(lib.nn.Conv2d(1, 1, 3, padding=self.padding))

        return ConvLayer()

    ours, theirs = make(rg), make(torch)
    assert ours.padding == theirs.padding == 1
    assert len(ours) == len(theirs) == 1
    assert [k for k, _ in ours.named_parameters()] == [k for k, _ in theirs.named_parameters()]

    class Early(rg.nn.Module):
        def __init__(self, value):
            self.value = value
            super().__init__()

    for value in (rg.nn.Parameter(rg.zeros(1)), rg.nn.Linear(1, 1)):
        with pytest.raises(AttributeError, match=r"before Module\.__init__"):
            Early(value)


# -- a schedule of one's own: _LRScheduler subclasses with get_lr -------------------------------
def _warmup_then_decay(lib):
    from importlib import import_module

    base = import_module(f"{lib.__name__}.optim.lr_scheduler")._LRScheduler

    class Policy(base):  # DLRM's LRPolicyScheduler, in short: reads _step_count in get_lr
        def __init__(self, optimizer, warmup):
            self.warmup = warmup
            super().__init__(optimizer)

        def get_lr(self):
            if self._step_count < self.warmup:
                return [b * self._step_count / self.warmup for b in self.base_lrs]
            return [b * 0.5 ** (self.last_epoch - self.warmup) for b in self.base_lrs]

    return Policy


def test_a_get_lr_subclass_of_lrscheduler_steps_as_torchs():
    rates = {}
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.zeros(2))
        q = lib.nn.Parameter(lib.zeros(1))
        opt = lib.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.3}], lr=1.0)
        schedule = _warmup_then_decay(lib)(opt, warmup=3)
        seen = [schedule.get_last_lr()]
        for _ in range(6):
            schedule.step()
            seen.append(schedule.get_last_lr() + [g["lr"] for g in opt.param_groups])
        rates[lib] = seen
    np.testing.assert_allclose(np.array(rates[rg][1:]), np.array(rates[torch][1:]), rtol=1e-12)
    np.testing.assert_allclose(rates[rg][0], rates[torch][0], rtol=1e-12)
    assert issubclass(rg.optim.lr_scheduler._LRScheduler, rg.optim.lr_scheduler.LRScheduler)


def test_get_lr_giving_the_wrong_number_of_rates_is_refused_by_name():
    class Bad(rg.optim.lr_scheduler.LRScheduler):
        def get_lr(self):
            return [0.1, 0.2]

    opt = rg.optim.SGD([rg.nn.Parameter(rg.zeros(1))], lr=1.0)
    with pytest.raises(rg.ShapeError, match=r"Bad\.get_lr returned 2"):
        Bad(opt)


# -- p.grad = None: refused at the line, the method kept ---------------------------------------
def test_assigning_grad_is_refused_and_keeps_the_method():
    p = rg.nn.Parameter(rg.ones(3))
    with pytest.raises(rg.AutodiffError, match=r"grad_remove\(grads\)"):
        p.grad = None  # torch's set-to-none idiom (pytorch_tabnet's _train_batch)
    with pytest.raises(rg.AutodiffError, match="cannot be assigned"):
        p.grad = rg.zeros(3)
    grads = (p * p).sum().backward()
    # the method survived: clip_grad_norm_ reads it
    total = rg.nn.utils.clip_grad_norm_(grads, [p], 1.0)
    np.testing.assert_allclose(float(total), math.sqrt(12.0), rtol=1e-6)
    np.testing.assert_allclose(_np(p.grad(grads)), np.full(3, 2.0 / math.sqrt(12.0)), rtol=1e-5)
    assert rg.Tensor.grad.__doc__.startswith("This tensor's gradient")


# -- torch.linalg.tensorsolve / tensorinv -------------------------------------------------------
def _value_and_grad(lib, fn, *arrays):
    inputs = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = fn(lib, *inputs)
    weights = lib.tensor(np.linspace(-1.0, 1.0, int(np.prod(out.shape))).reshape(tuple(out.shape)))
    loss = (out * weights).sum()
    if lib is torch:
        loss.backward()
        return _np(out), [_np(t.grad) for t in inputs]
    grads = loss.backward()
    return _np(out), [_np(t.grad(grads)) for t in inputs]


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda lib, a, b: lib.linalg.tensorsolve(a, b), [(6, 2, 3), (6,)]),
        (lambda lib, a, b: lib.linalg.tensorsolve(a, b), [(2, 3, 6), (2, 3)]),
        (lambda lib, a, b: lib.linalg.tensorsolve(a, b, dims=(0,)), [(3, 2, 3, 2), (2, 3)]),
        (lambda lib, a: lib.linalg.tensorinv(a, ind=2), [(4, 6, 8, 3)]),
        (lambda lib, a: lib.linalg.tensorinv(a, ind=1), [(6, 2, 3)]),
    ],
)
def test_tensorsolve_and_tensorinv_agree_with_torch(fn, shapes):
    rng = np.random.default_rng(len(shapes[0]) + shapes[0][0])
    arrays = [rng.standard_normal(s) for s in shapes]
    ours, theirs = _value_and_grad(rg, fn, *arrays), _value_and_grad(torch, fn, *arrays)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-9, atol=1e-10)
    for mine, reference in zip(ours[1], theirs[1]):
        np.testing.assert_allclose(mine, reference, rtol=1e-8, atol=1e-10)


def test_tensorsolve_and_tensorinv_refuse_non_square_systems():
    with pytest.raises(rg.ShapeError, match=r"tensorinv.*not square"):
        rg.linalg.tensorinv(rg.zeros(2, 3, 4), ind=1)
    with pytest.raises(rg.InvalidArgumentError, match="tensorinv"):
        rg.linalg.tensorinv(rg.eye(2), ind=0)
    with pytest.raises(rg.ShapeError, match="tensorsolve"):
        rg.linalg.tensorsolve(rg.zeros(6, 2, 4), rg.zeros(6))


# -- optim.SparseAdam on dense gradients --------------------------------------------------------
def test_sparse_adam_steps_the_looked_up_rows_as_torchs_sparse_step():
    rng = np.random.default_rng(10)
    table = rng.standard_normal((7, 3)).astype(np.float32)
    lookups = [[0, 2, 2, 5], [1, 2], [6, 0, 3]]
    targets = [rng.standard_normal((len(i), 3)).astype(np.float32) for i in lookups]
    tables = {}
    for lib in (torch, rg):
        embedding = lib.nn.Embedding(7, 3, sparse=lib is torch)  # sparse gradients: torch's
        embedding.weight.data.copy_(lib.tensor(table))
        optimizer = lib.optim.SparseAdam(list(embedding.parameters()), lr=0.1, betas=(0.8, 0.9))
        seen = []
        for index, target in zip(lookups, targets):
            loss = ((embedding(lib.tensor(index)) - lib.tensor(target)) ** 2).sum()
            if lib is torch:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
            seen.append(_np(embedding.weight).copy())
        tables[lib] = seen
    for mine, reference in zip(tables[rg], tables[torch]):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
    # row 4 was never looked up: it has not moved
    np.testing.assert_array_equal(tables[rg][-1][4], table[4])
    with pytest.raises(rg.InvalidArgumentError, match="SparseAdam"):
        rg.optim.SparseAdam([rg.nn.Parameter(rg.zeros(2))], lr=0.0)
