"""Loading state is a transaction: ``Module.load_state_dict`` and ``Optimizer.load_state_dict``
check and convert every entry before they change anything, and a wrong entry is an error that
names it (key, expected and found shape or dtype) and leaves the module or optimizer as it was.
Files are read without pickle."""

from __future__ import annotations

import os

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim


def small_model() -> nn.Module:
    rg.seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def snapshot(model: nn.Module) -> dict[str, np.ndarray]:
    return {name: value.copy() for name, value in model.state_dict().items()}


def assert_unchanged(model: nn.Module, before: dict[str, np.ndarray]) -> None:
    after = model.state_dict()
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)


def test_a_module_entry_that_is_not_a_number_changes_nothing():
    model = small_model()
    before = snapshot(model)
    state = {name: np.zeros_like(value) for name, value in before.items()}
    state["2.bias"] = np.array(["a", "b"])  # the last entry: the others would be written first
    with pytest.raises(rg.DTypeError, match=r"'2.bias' is float32, the state has <U1"):
        model.load_state_dict(state)
    assert_unchanged(model, before)


def test_a_module_entry_of_another_shape_or_a_missing_key_changes_nothing():
    model = small_model()
    before = snapshot(model)
    state = {name: np.ones_like(value) for name, value in before.items()}
    with pytest.raises(rg.ShapeError, match=r"'2.weight' has shape \[2, 4\], the state has \[4\]"):
        model.load_state_dict({**state, "2.weight": np.ones(4)})
    with pytest.raises(KeyError, match=r"missing parameters \['0.bias'\]"):
        model.load_state_dict({k: v for k, v in state.items() if k != "0.bias"})
    assert_unchanged(model, before)
    model.load_state_dict({**state, "0.weight": state["0.weight"].astype(np.float64)})  # cast
    assert all((value == 1).all() for value in model.state_dict().values())


def test_a_damaged_or_pickled_file_is_refused_naming_it(tmp_path):
    model = small_model()
    before = snapshot(model)
    path = tmp_path / "model.npz"
    model.save(path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(rg.InvalidArgumentError, match=r"model\.npz is not a readable \.npz"):
        model.load_state_dict(path)

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, **{"0.weight": np.array([Payload()], dtype=object)})
    with pytest.raises(rg.InvalidArgumentError, match=r"pickled\.npz"):
        model.load_state_dict(pickled)
    assert not marker.exists()  # the file's code never ran
    assert_unchanged(model, before)


def adam_with_state() -> tuple[nn.Module, optim.Adam, dict]:
    model = small_model()
    optimizer = optim.Adam(model, lr=0.01)
    grads = model(rg.ones((5, 3))).sum().backward()
    optimizer.step(grads)
    return model, optimizer, optimizer.state_dict()


def optimizer_snapshot(optimizer: optim.Optimizer) -> dict:
    saved = optimizer.state_dict()
    return {
        "groups": [dict(g) for g in saved["param_groups"]],
        "state": {n: {k: np.array(v) for k, v in s.items()} for n, s in saved["state"].items()},
    }


def assert_optimizer_unchanged(optimizer: optim.Optimizer, before: dict) -> None:
    after = optimizer_snapshot(optimizer)
    assert after["groups"] == before["groups"]
    assert after["state"].keys() == before["state"].keys()
    for number, state in before["state"].items():
        for key, value in state.items():
            np.testing.assert_array_equal(after["state"][number][key], value)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            lambda s: s["state"][1].update(exp_avg=np.zeros(7, np.float32)),
            rg.ShapeError,
            r"state 1/exp_avg has shape \[7\], its parameter \[4\]",
        ),
        (
            lambda s: s["state"].update({99: dict(s["state"][0])}),
            rg.InvalidArgumentError,
            "state for parameter 99, which no group lists",
        ),
        (
            lambda s: s["param_groups"][0].update(lr=float("nan")),
            rg.InvalidArgumentError,
            "lr must be finite, got nan",
        ),
        (
            lambda s: s["param_groups"][0].update(eps=float("inf")),
            rg.InvalidArgumentError,
            "eps must be finite",
        ),
        (
            lambda s: s["param_groups"][0].update(betas=(0.9, float("nan"))),
            rg.InvalidArgumentError,
            "betas must be finite",
        ),
        (
            lambda s: s["state"][2].update(exp_avg_sq=np.array(["x"] * 8).reshape(2, 4)),
            rg.DTypeError,
            "state 2/exp_avg_sq holds <U1 values",
        ),
        (
            lambda s: s["state"][0].update(step=float("nan")),
            rg.InvalidArgumentError,
            "the step of parameter 0 must be a count",
        ),
    ],
)
def test_an_optimizer_state_is_checked_at_load_and_changes_nothing_when_wrong(
    change, error, message
):
    _, optimizer, saved = adam_with_state()
    before = optimizer_snapshot(optimizer)
    saved = {
        "state": {n: dict(s) for n, s in saved["state"].items()},
        "param_groups": [dict(g) for g in saved["param_groups"]],
    }
    change(saved)
    with pytest.raises(error, match=message):
        optimizer.load_state_dict(saved)
    assert_optimizer_unchanged(optimizer, before)


def test_a_checked_optimizer_state_still_loads_and_steps_as_before():
    model, _, saved = adam_with_state()
    other = optim.Adam(model, lr=0.5)
    other.load_state_dict(saved)
    assert other.lr == 0.01
    grads = model(rg.ones((5, 3))).sum().backward()
    other.step(grads)  # the restored moments have the parameters' shapes: no error here
    assert all(state["step"] == 2 for state in other.state.values())
