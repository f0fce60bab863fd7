"""Independent graphs in different threads: exactly the sequential results, no shared state."""

from __future__ import annotations

import threading

import numpy as np

import retrograd as rg
from backends import inner_backend


def _train(seed: int, strategy, steps: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        w1 = rg.tensor(rng.normal(0, 0.5, (6, 12))).require_grad()
        w2 = rg.tensor(rng.normal(0, 0.5, (12, 3))).require_grad()
        x = rg.tensor(rng.normal(size=(16, 6)))
        labels = rng.integers(0, 3, 16)
        target = rg.tensor(np.eye(3)[labels])
        for _ in range(steps):
            logits = (x @ w1).tanh() @ w2
            loss = -(logits.log_softmax(1) * target).sum() / 16.0
            grads = loss.backward()
            w1 = (w1 - 0.2 * w1.grad(grads)).detach().require_grad()
            w2 = (w2 - 0.2 * w2.grad(grads)).detach().require_grad()
        return [w1.numpy(), w2.numpy()]


def test_eight_threads_match_sequential_training_exactly():
    strategies = [rg.NoCheckpointing(), rg.BalancedCheckpointing()] * 4
    sequential = [_train(seed, strategies[seed]) for seed in range(8)]
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            results[seed] = _train(seed, strategies[seed])
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    for seed in range(8):
        for ours, reference in zip(results[seed], sequential[seed]):
            assert np.array_equal(ours, reference)


def test_use_backend_is_per_thread():
    balanced = rg.Autodiff(inner_backend(), rg.BalancedCheckpointing())
    seen = {}

    def other_thread():
        seen["other"] = rg.zeros((1,)).backend

    with rg.use_backend(balanced):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        seen["here"] = rg.zeros((1,)).backend
    assert seen["here"] is balanced
    assert seen["other"] is rg.default_backend()


def test_graphs_from_two_threads_join_in_one_op():
    a_holder = {}

    def build():
        a = rg.tensor([1.0, 2.0]).require_grad()
        a_holder["leaf"] = a
        a_holder["out"] = a.exp()

    thread = threading.Thread(target=build)
    thread.start()
    thread.join()
    b = rg.tensor([3.0, 4.0]).require_grad()
    joined = (a_holder["out"] * b).sum()
    grads = joined.backward()
    np.testing.assert_allclose(
        a_holder["leaf"].grad(grads).numpy(), np.exp([1.0, 2.0]) * [3, 4], rtol=1e-6
    )
    np.testing.assert_allclose(b.grad(grads).numpy(), np.exp([1.0, 2.0]), rtol=1e-6)
