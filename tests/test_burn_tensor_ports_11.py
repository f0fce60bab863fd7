"""burn-optim's tests (``crates/burn-optim/src``, tracel-ai/burn at
2c06be351006851d42fdb6df16b976f4a82d9747): the optimizers (adam.rs, adamw.rs, rmsprop.rs,
adagrad.rs, sgd.rs, lbfgs.rs), gradient clipping (grad_clipping/base.rs), gradient accumulation
(optim/grad_accum.rs), the learning-rate schedulers (lr_scheduler/{cosine, exponential,
linear, step, noam}.rs), burn-core's data loader tests
(``crates/burn-core/src/data/dataloader/{batch,multithread}.rs``) and burn-dataset's
transforms (``crates/burn-dataset/src/transform/{composed,partial,selection,sampler}.rs``),
through ``rg.optim``'s and
``rg.utils.data``'s torch forms (API.md sections 8 and 10), under
every checkpointing strategy on the chosen inner backend. burn_optim_cases.json holds the
optimizer cases' layers, inputs and expected parameters as Burn's test source writes them.

Burn's names map to torch's: a Burn ``Linear``'s weight is ``[in, out]`` (``x @ W``), so torch's
``nn.Linear`` takes its transpose; ``optimizer.step(lr, module, grads)`` of ``linear.forward(x)
.backward()`` is ``lin(x).backward()`` (seeded with ones) then ``opt.step(grads)`` with ``lr``
in the constructor; ``WeightDecayConfig::new(p)`` is ``weight_decay=p``; ``AdaGrad``'s
``lr_decay`` is torch's; ``GradientClipping::Value(v)``/``Norm(n)`` are
``clip_grad_value_``/``clip_grad_norm_``; ``GradientsAccumulator`` is ``Gradients`` addition;
a scheduler's ``step()`` returning the lr is torch's ``get_last_lr()`` then ``step()``; the
``LinearLrScheduler(initial, final, n)`` is ``LinearLR(start_factor=initial / base,
end_factor=final / base, total_iters=n)`` on an optimizer with ``lr=base``, the larger of the
two (torch's factors lie in ``(0, 1]``); the ``Noam`` scheduler is a
``LambdaLR`` of its documented formula; ``check_save_load`` is the scheduler's and optimizer's
``state_dict``/``load_state_dict`` round trip.

Deliberate differences (torch's semantics, API.md section 10): ``SGD`` with Nesterov momentum
and a nonzero dampening is an error (Burn accepts it); the schedulers do not reject initial
learning rates outside ``(0, 1]`` or a gamma outside ``(0, 1]`` (Burn's config errors);
``SequentialLrScheduler`` of schedulers with different initial rates has no torch form
(``SequentialLR`` shares one optimizer's rate) and Burn's ``i32::MAX`` step limit,
``ModuleLrScheduler`` groups by module path, Muon, Adan, LoRA and the record-format tests are
Burn-only; the cautious AdamW variant has no torch form; Burn's LBFGS ``step`` returns the loss
at the new parameters, torch's the closure's first loss, so the final loss is re-evaluated;
Burn's ``cubic_interpolate``/``strong_wolfe`` unit tests are of private helpers; torch's Muon
orthogonalizes in bfloat16 and retrograd has no ``Muon``.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from retrograd.utils.data import ConcatDataset, DataLoader, Dataset, RandomSampler, Subset
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import approx

CASES = json.loads((Path(__file__).parent / "burn_optim_cases.json").read_text())
LEARNING_RATE = 0.01


def burn_linear(case):
    """torch's ``nn.Linear`` holding Burn's ``[in, out]`` weight (transposed) and bias."""
    layer = rg.nn.Linear(6, 6)
    layer.load_state_dict(
        {
            "weight": np.asarray(case["weight"], dtype=np.float32).T,
            "bias": np.asarray(case["bias"], dtype=np.float32),
        }
    )
    return layer


def burn_step(layer, optimizer, x):
    grads = layer(rg.tensor(x).require_grad()).backward()
    optimizer.step(grads)


def assert_layer(layer, case, tol):
    np.testing.assert_allclose(layer.weight.numpy().T, case["weight_expected"], rtol=0, atol=tol)
    np.testing.assert_allclose(layer.bias.numpy(), case["bias_expected"], rtol=0, atol=tol)


def run_two_steps(name, make):
    case = CASES[name]
    layer = burn_linear(case)
    optimizer = make(layer.parameters())
    burn_step(layer, optimizer, case["x_1"])
    burn_step(layer, optimizer, case["x_2"])
    return layer, case


def run_fifty_steps(name, make):
    case = CASES[name]
    layer = burn_linear(case)
    optimizer = make(layer.parameters())
    for i in range(1, 51):
        burn_step(layer, optimizer, np.ones((2, 6), dtype=np.float32) * np.float32(i * 0.1))
    return layer, case


# ---- optim/adam.rs, optim/adamw.rs -----------------------------------------------------------


def test_adam_optimizer_with_numbers():
    layer, case = run_two_steps(
        "adam_numbers",
        lambda p: rg.optim.Adam(
            p, lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.5
        ),
    )
    assert_layer(layer, case, 1e-2)  # Burn's tolerance: absolute 1e-2
    assert not np.isnan(layer.weight.numpy()).any()


def test_adam_optimizer_with_amsgrad_50_steps():
    layer, case = run_fifty_steps(
        "adam_amsgrad_50",
        lambda p: rg.optim.Adam(
            p, lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.5, amsgrad=True
        ),
    )
    assert_layer(layer, case, 1e-5)


def test_adamw_optimizer_with_numbers():
    layer, case = run_two_steps(
        "adamw_numbers",
        lambda p: rg.optim.AdamW(
            p, lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.5
        ),
    )
    assert_layer(layer, case, 1e-2)


def test_adamw_optimizer_with_amsgrad_50_steps():
    layer, case = run_fifty_steps(
        "adamw_amsgrad_50",
        lambda p: rg.optim.AdamW(
            p, lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.5, amsgrad=True
        ),
    )
    assert_layer(layer, case, 1e-5)


def test_adam_optimizer_no_nan():
    case = CASES["adam_numbers"]
    for make in (rg.optim.Adam, rg.optim.AdamW):
        layer = burn_linear(case)
        optimizer = make(layer.parameters(), lr=LEARNING_RATE, eps=1e-8, weight_decay=0.5)
        burn_step(layer, optimizer, case["x_2"])
        burn_step(layer, optimizer, case["x_2"])
        assert not np.isnan(layer.weight.numpy()[0, 0])


def test_adam_state_survives_round_trip():
    """adam.rs test_adam_state_survives_burnpack_round_trip: the moments, amsgrad's max and
    the step count come back, so one more step gives the same parameters either way."""
    layer = burn_linear(CASES["adam_numbers"])
    optimizer = rg.optim.Adam(layer.parameters(), lr=LEARNING_RATE, amsgrad=True)
    for i in range(1, 4):
        burn_step(layer, optimizer, np.ones((2, 6), dtype=np.float32) * np.float32(i * 0.1))
    saved = optimizer.state_dict()
    twin = burn_linear(CASES["adam_numbers"])
    twin.load_state_dict(layer.state_dict())
    reloaded = rg.optim.Adam(twin.parameters(), lr=LEARNING_RATE, amsgrad=True)
    reloaded.load_state_dict(saved)
    x = np.ones((2, 6), dtype=np.float32) * np.float32(0.4)
    burn_step(layer, optimizer, x)
    burn_step(twin, reloaded, x)
    np.testing.assert_allclose(twin.weight.numpy(), layer.weight.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(twin.bias.numpy(), layer.bias.numpy(), rtol=0, atol=1e-6)
    assert saved["state"]


# ---- optim/rmsprop.rs, optim/adagrad.rs ------------------------------------------------------


def rmsprop(params):
    return rg.optim.RMSprop(
        params,
        lr=LEARNING_RATE,
        alpha=0.99,
        eps=1e-8,
        weight_decay=0.05,
        momentum=0.9,
        centered=False,
    )


def test_rmsprop_optimizer_with_numbers_basic():
    layer, case = run_two_steps("rmsprop_basic", rmsprop)
    assert_layer(layer, case, 1e-6)


def test_rmsprop_optimizer_with_numbers():
    layer, case = run_two_steps("rmsprop_numbers", rmsprop)
    assert_layer(layer, case, 1e-6)


def test_adagrad_optimizer_with_numbers():
    layer, case = run_two_steps(
        "adagrad_numbers", lambda p: rg.optim.Adagrad(p, lr=LEARNING_RATE, eps=1e-8, lr_decay=0.5)
    )
    assert_layer(layer, case, 1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: rg.optim.Adam(p, lr=LEARNING_RATE),
        lambda p: rg.optim.AdamW(p, lr=LEARNING_RATE),
        rmsprop,
        lambda p: rg.optim.Adagrad(p, lr=LEARNING_RATE),
        lambda p: rg.optim.SGD(p, lr=0.02, weight_decay=0.05, momentum=0.9, nesterov=True),
    ],
)
def test_optimizer_state_save_load(make):
    """The ``*_save_load_state`` tests: no state before a step (torch's Adagrad: every
    parameter's at step 0, made by its constructor), some after, and the same amount of it
    after a round trip through a fresh optimizer."""
    rg.seed(0)
    layer = rg.nn.Linear(6, 6)
    optimizer = make(layer.parameters())
    made_at_construction = isinstance(optimizer, rg.optim.Adagrad)
    before = optimizer.state_dict()["state"]
    if made_at_construction:
        assert [int(state["step"]) for state in before.values()] == [0, 0]
    else:
        assert not before
    burn_step(layer, optimizer, rg.random((2, 6)).numpy())
    saved = optimizer.state_dict()
    assert saved["state"]
    fresh = make(layer.parameters())
    if made_at_construction:
        assert [int(state["step"]) for state in saved["state"].values()] == [1, 1]
    else:
        assert len(fresh.state_dict()["state"]) != len(saved["state"])
    fresh.load_state_dict(saved)
    restored = fresh.state_dict()
    assert len(restored["state"]) == len(saved["state"])
    for key, state in saved["state"].items():
        for name, value in state.items():
            np.testing.assert_array_equal(
                np.asarray(restored["state"][key][name]), np.asarray(value)
            )


# ---- optim/sgd.rs ----------------------------------------------------------------------------


def test_sgd_nesterov_with_dampening_is_an_error():
    # Burn's sgd_with_all: momentum 0.9, dampening 0.1, nesterov; torch rejects that combination
    layer = rg.nn.Linear(20, 20)
    with pytest.raises(ValueError, match="Nesterov"):
        rg.optim.SGD(
            layer.parameters(),
            lr=0.02,
            momentum=0.9,
            dampening=0.1,
            nesterov=True,
            weight_decay=0.05,
        )


def test_sgd_with_momentum_and_weight_decay_steps():
    """sgd.rs's with_updated_params_should_have_state with torch's allowed form (dampening 0),
    the update checked against torch's documented rule on a fixed gradient."""
    w0 = np.asarray(CASES["adam_numbers"]["weight"], dtype=np.float64)
    p = rg.nn.Parameter(rg.tensor(w0.astype(np.float32)))
    g = np.asarray(CASES["adam_numbers"]["x_1"] * 3, dtype=np.float64)  # [6, 6]
    optimizer = rg.optim.SGD([p], lr=0.02, momentum=0.9, weight_decay=0.05, nesterov=True)
    w, buf = w0.copy(), None
    for _ in range(3):
        grads = (p * rg.tensor(g.astype(np.float32))).sum().backward()
        optimizer.step(grads)
        d = g + 0.05 * w
        buf = d if buf is None else 0.9 * buf + d
        w = w - 0.02 * (d + 0.9 * buf)
    np.testing.assert_allclose(p.numpy(), w, rtol=0, atol=1e-5)


# ---- grad_clipping/base.rs -------------------------------------------------------------------

CLIP_GRADIENT = [
    [0.6294, 0.0940, 0.8176, 0.8824, 0.5228, 0.4310],
    [0.7152, 0.9559, 0.7893, 0.5684, 0.5939, 0.8883],
]


def gradients_of(values):
    """A parameter and the Gradients whose entry for it is ``values``."""
    p = rg.nn.Parameter(rg.zeros(np.shape(values)))
    return p, (p * rg.tensor(values)).sum().backward()


def test_clip_by_value():
    p, grads = gradients_of(CLIP_GRADIENT)
    rg.nn.utils.clip_grad_value_(grads, [p], 0.5)
    clipped = p.grad(grads).numpy()
    assert np.all(clipped <= 0.5)
    np.testing.assert_allclose(clipped, np.minimum(CLIP_GRADIENT, 0.5), rtol=1e-6)


def test_clip_by_norm():
    p, grads = gradients_of(CLIP_GRADIENT)
    norm = rg.nn.utils.clip_grad_norm_(grads, [p], 2.2)
    clipped = p.grad(grads).numpy()
    assert np.all(clipped <= 0.88)
    np.testing.assert_allclose(float(norm), np.linalg.norm(CLIP_GRADIENT), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(clipped), 2.2, rtol=1e-5)


def test_clip_by_norm_no_clipping():
    small = [[0.3, 0.4, 0.5, 0.2], [0.1, 0.6, 0.3, 0.4]]
    p, grads = gradients_of(small)
    rg.optim.clip_grad_norm(grads, [p], 2.2)
    np.testing.assert_array_equal(p.grad(grads).numpy(), np.float32(small))


# ---- optim/grad_accum.rs ---------------------------------------------------------------------


def test_accumulate_gradients():
    rg.seed(0)
    layer = rg.nn.Linear(20, 20)
    x1, x2 = rg.random((2, 20)), rg.random((2, 20))
    one = layer(x1).backward()
    assert layer.weight.grad(one) is not None and layer.bias.grad(one) is not None
    two = layer(x2).backward()
    total = one + two
    assert all(p.grad(total) is not None for p in layer.parameters())  # both parameters
    # d(sum(x W^T + b))/dW = column sums of x, per output row
    expected = np.tile((x1.numpy() + x2.numpy()).sum(0), (20, 1))
    approx(layer.weight.grad(total), expected, tol=1e-5)
    approx(layer.bias.grad(total), np.full(20, 4.0))


# ---- lr_scheduler/*.rs: check_lr_sequence (Burn's tolerance 1e-10) and check_save_load ---------


def optimizer_with(lr):
    return rg.optim.SGD([rg.nn.Parameter(rg.zeros(1))], lr=lr)


def lr_sequence(scheduler, n):
    lrs = []
    for _ in range(n):
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    return lrs


def assert_lr_sequence(scheduler, expected):
    np.testing.assert_allclose(lr_sequence(scheduler, len(expected)), expected, rtol=0, atol=1e-10)


def cosine(initial, n, min_lr=0.0):
    return rg.optim.lr_scheduler.CosineAnnealingLR(optimizer_with(initial), T_max=n, eta_min=min_lr)


def exponential(initial, gamma):
    return rg.optim.lr_scheduler.ExponentialLR(optimizer_with(initial), gamma=gamma)


def linear(initial, final, n):
    # torch's factors lie in (0, 1]: the optimizer's rate is the larger end
    base = max(initial, final)
    return rg.optim.lr_scheduler.LinearLR(
        optimizer_with(base), start_factor=initial / base, end_factor=final / base, total_iters=n
    )


def step(initial, step_size, gamma=0.1):
    return rg.optim.lr_scheduler.StepLR(optimizer_with(initial), step_size=step_size, gamma=gamma)


def test_cosine_annealing_lr_change():
    initial, min_lr = 0.5, 0.1
    expected = [initial, (initial + min_lr) * 0.5, min_lr, (initial + min_lr) * 0.5, initial]
    assert_lr_sequence(cosine(initial, 2, min_lr), expected)


def test_exponential_lr_change():
    assert_lr_sequence(exponential(0.8, 0.1), [0.8, 0.08, 0.008, 0.0008, 0.00008])


def test_linear_lr():
    assert_lr_sequence(linear(0.9, 0.5, 4), [0.9, 0.8, 0.7, 0.6, 0.5, 0.5])
    assert_lr_sequence(linear(0.01, 0.04, 3), [0.01, 0.02, 0.03, 0.04, 0.04])
    assert_lr_sequence(linear(0.3, 0.3, 2), [0.3, 0.3, 0.3, 0.3])


def test_step_lr():
    assert_lr_sequence(step(0.5, 3, 0.1), [0.5, 0.5, 0.5, 0.05, 0.05, 0.05, 0.005, 0.005, 0.005])
    assert_lr_sequence(step(0.1, 2, 2.0), [0.1, 0.1, 0.2, 0.2, 0.4, 0.4])
    assert_lr_sequence(step(3.1, 1, 1.0), [3.1, 3.1, 3.1])
    assert step(0.1, 2).gamma == 0.1  # test_config_default_gamma
    # step_size 0: Burn's config error; torch divides by zero, retrograd says what is wrong
    with pytest.raises(ValueError, match="step_size"):
        step(0.1, 0).step()


def test_noam_increases_then_decreases():
    warmup, model_size, initial = 100, 512, 10.0

    def noam(epoch):
        s = epoch + 1  # Burn's step() counts from 1
        return model_size**-0.5 * min(s**-0.5, s * warmup**-1.5)

    scheduler = rg.optim.lr_scheduler.LambdaLR(optimizer_with(initial), noam)
    lrs = lr_sequence(scheduler, 2 * warmup)
    assert all(b > a for a, b in itertools.pairwise(lrs[:warmup]))
    assert all(b < a for a, b in itertools.pairwise(lrs[warmup - 1 :]))
    np.testing.assert_allclose(lrs[0], initial * model_size**-0.5 * warmup**-1.5, rtol=1e-12)


@pytest.mark.parametrize(
    ("make", "save_at"),
    [
        (lambda: cosine(1.0, 9), 9 // 3 * 2),
        (lambda: exponential(0.083, 0.3), 7),
        (lambda: linear(1.0, 0.01, 6), 6 // 3 * 2),
        (lambda: step(0.007, 10, 0.03), 3 * 10 // 2),
    ],
)
def test_scheduler_save_and_load(make, save_at):
    """check_save_load: a scheduler restored from the state saved after ``save_at`` steps
    continues exactly as the one that ran on."""
    truth = make()
    lr_sequence(truth, save_at)
    state = truth.state_dict()
    restored = make()
    restored.load_state_dict(state)
    restored.optimizer.param_groups[0]["lr"] = truth.optimizer.param_groups[0]["lr"]
    assert lr_sequence(restored, 2 * save_at) == lr_sequence(truth, 2 * save_at)


def test_cosine_annealing_lr_closed_form():
    """The annealing between restarts, eta_min + (eta_max - eta_min) (1 + cos(pi t / T)) / 2."""
    lrs = lr_sequence(cosine(1.0, 9), 10)
    expected = [0.5 * (1 + math.cos(math.pi * t / 9)) for t in range(10)]
    np.testing.assert_allclose(lrs, expected, rtol=0, atol=1e-10)


# ---- optim/lbfgs.rs: Burn's LBFGS against PyTorch's numbers (its step returns the loss at the
# new parameters; torch's, and retrograd's, the loss of the closure's first evaluation) ---------

LBFGS_X = [[1.0], [2.0], [3.0]]
LBFGS_Y = [[3.0], [5.0], [7.0]]


def lbfgs_problem(line_search_fn):
    layer = rg.nn.Linear(1, 1)
    layer.load_state_dict({"weight": np.float32([[0.5]]), "bias": np.float32([0.1])})
    optimizer = rg.optim.LBFGS(layer.parameters(), lr=0.001, line_search_fn=line_search_fn)

    def closure():
        loss = F.mse_loss(layer(rg.tensor(LBFGS_X)), rg.tensor(LBFGS_Y), reduction="sum")
        return loss, loss.backward()

    return layer, optimizer, closure


@pytest.mark.parametrize(
    ("line_search_fn", "final_loss", "weight", "bias"),
    [
        ("strong_wolfe", 0.0234732367, 2.0570652485, 0.8106800914),
        (None, 48.2181930542, 0.5302446192, 0.1142520783),
    ],
)
def test_lbfgs_comparison(line_search_fn, final_loss, weight, bias):
    layer, optimizer, closure = lbfgs_problem(line_search_fn)
    initial = optimizer.step(closure)
    np.testing.assert_allclose(float(initial), 50.1300048828, rtol=0, atol=1e-5)
    np.testing.assert_allclose(closure()[0].item(), final_loss, rtol=0, atol=1e-5)
    np.testing.assert_allclose(layer.weight.item(), weight, rtol=0, atol=1e-5)
    np.testing.assert_allclose(layer.bias.item(), bias, rtol=0, atol=1e-5)


def test_lbfgs_state_round_trip():
    """lbfgs.rs test_lbfgs_burnpack_round_trip: the history comes back, so a further step on
    a reloaded optimizer agrees with one on the original."""
    layer, optimizer, closure = lbfgs_problem("strong_wolfe")
    optimizer.step(closure)
    saved = optimizer.state_dict()
    twin, reloaded, twin_closure = lbfgs_problem("strong_wolfe")
    twin.load_state_dict(layer.state_dict())
    reloaded.load_state_dict(saved)
    optimizer.step(closure)
    reloaded.step(twin_closure)
    np.testing.assert_allclose(twin_closure()[0].item(), closure()[0].item(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(twin.weight.numpy(), layer.weight.numpy(), rtol=0, atol=1e-6)


# ---- burn-core's data/dataloader/{batch,multithread}.rs: Burn's BatchDataLoader with
# FixBatchStrategy(n) is torch's DataLoader(batch_size=n) (its TestBatcher is collate_fn=list),
# the MultiThreadDataLoader is num_workers=k, a dataloader slice is a Subset --------------------

ITEMS = [f"item {i}" for i in range(27)]


def loader(items, batch_size=5, **kw):
    return DataLoader(items, batch_size=batch_size, collate_fn=list, **kw)


def flatten(batches):
    return [item for batch in batches for item in batch]


@pytest.mark.parametrize("workers", [0, 4])
def test_dataloader_covers_the_dataset(workers):
    assert set(flatten(loader(ITEMS, num_workers=workers))) == set(ITEMS)
    assert [len(b) for b in loader(ITEMS, num_workers=workers)] == [5, 5, 5, 5, 5, 2]
    assert [len(b) for b in loader(ITEMS[:25], num_workers=workers)] == [5] * 5
    assert list(loader([], num_workers=workers)) == []
    assert flatten(loader(ITEMS, num_workers=workers)) == ITEMS  # in order, as Burn's


def test_dataloader_slice():
    assert set(flatten(loader(Subset(ITEMS, range(5, 15))))) == set(ITEMS[5:15])


def test_multi_thread_dataloader_epochs_and_early_drop():
    data = loader(ITEMS, num_workers=4)
    iterator = iter(data)
    next(iterator)
    del iterator  # an epoch dropped early leaves the loader usable
    for _ in range(3):
        assert set(flatten(data)) == set(ITEMS)


def test_multi_thread_dataloader_shuffle():
    items = [0] * 100 + [1] * 100
    assert all(len(set(b)) == 1 for b in loader(items, batch_size=10, num_workers=2))
    generator = rg.Generator().manual_seed(42)
    shuffled = loader(items, batch_size=10, num_workers=2, shuffle=True, generator=generator)
    batches = list(shuffled)
    assert sorted(flatten(batches)) == items
    assert all(len(set(b)) == 2 for b in batches)


class FlakyDataset(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, index):
        if index == 20:
            raise RuntimeError("flaky item 20")
        return index


def test_multi_thread_dataloader_propagates_worker_error_instead_of_hanging():
    with pytest.raises(RuntimeError, match="flaky item 20"):
        for _ in DataLoader(FlakyDataset(), batch_size=1, num_workers=4, collate_fn=list):
            pass


# ---- burn-dataset's transform/{composed,partial,selection,sampler}.rs: ComposedDataset is
# ConcatDataset, PartialDataset and SelectionDataset are Subset, SamplerDataset is RandomSampler
# (with replacement: num_samples draws; without: whole permutations, so each item comes back the
# same number of times) -------------------------------------------------------------------------


def test_composed_dataset():
    first, second = ITEMS[:10], [f"other {i}" for i in range(5)]
    composed = ConcatDataset([first, second])
    assert len(composed) == 15
    assert [composed[i] for i in range(15)] == first + second


def test_partial_and_selection_datasets():
    for start, end in ((0, 10), (10, 20)):
        partial = Subset(ITEMS, range(start, end))
        assert len(partial) == 10
        assert {partial[i] for i in range(10)} == set(ITEMS[start:end])
    partial = Subset(ITEMS, range(10, 20))
    assert [partial[i] for i in (5, 0, 3, 0)] == [ITEMS[15], ITEMS[10], ITEMS[13], ITEMS[10]]
    with pytest.raises(IndexError):  # Burn: "Index out of bounds for PartialDataset: 20 >= 20"
        partial[10]
    selection = Subset(ITEMS, [15, 1, 12, 12])
    assert [selection[i] for i in range(4)] == [ITEMS[15], ITEMS[1], ITEMS[12], ITEMS[12]]
    with pytest.raises(IndexError):  # Burn: "Index out of bounds for wrapped dataset size"
        Subset(ITEMS, [15, 1, 12, 300])[3]


def test_sampler_dataset():
    rg.seed(0)
    drawn = list(RandomSampler(range(10), replacement=True, num_samples=30))
    assert len(drawn) == 30 and all(0 <= i < 10 for i in drawn)
    drawn = list(RandomSampler(range(10), replacement=False, num_samples=30))
    assert sorted(drawn) == sorted(list(range(10)) * 3)
    assert sorted(drawn[:10]) == list(range(10))  # one permutation per bucket, as Burn's
    items = [ITEMS[i] for i in RandomSampler(range(27))]
    assert sorted(items) == sorted(ITEMS)
