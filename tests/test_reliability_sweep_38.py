"""Reliability sweep 38: state-dict mismatches worded as torch's, optimizer states of the wrong
form refused at the load, and the command line interrupted while it starts.

Expected messages come from torch itself (run in each test) or from the contract (API.md 7).
"""

from __future__ import annotations

import collections
import copy
import io

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.app import cli


def _pair() -> tuple[rg.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    rg.seed(0)
    ours = rg.nn.Sequential(rg.nn.Linear(3, 4), rg.nn.BatchNorm1d(4), rg.nn.Linear(4, 2))
    theirs = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)
    )
    return ours, theirs


def _torch_lines(module: torch.nn.Module, state: dict, strict: bool = True) -> list[str]:
    """The lines of torch's load_state_dict error, without its header."""
    with pytest.raises(RuntimeError) as raised:
        module.load_state_dict(state, strict=strict)
    return [line.strip() for line in str(raised.value).split("\n\t")[1:]]


def test_a_missing_key_and_a_size_mismatch_are_both_said_in_torchs_words():
    # ours named the missing key only, in its own words ("missing parameters ['2.bias']");
    # torch's one error lists the missing key and the size mismatch, which ports match on
    ours, theirs = _pair()
    state = {k: v.clone() for k, v in theirs.state_dict().items() if k != "2.bias"}
    state["0.weight"] = torch.ones(5, 3)
    expected = _torch_lines(theirs, state)
    assert expected[0] == 'Missing key(s) in state_dict: "2.bias".'
    assert expected[1].startswith("size mismatch for 0.weight: copying a param with shape")
    before = {k: np.array(v) for k, v in ours.state_dict().items()}
    ours_state = {k: rg.tensor(v.numpy()) for k, v in state.items()}
    with pytest.raises(RuntimeError) as raised:
        ours.load_state_dict(ours_state)
    message = str(raised.value)
    assert isinstance(raised.value, rg.RetrogradError)
    assert "\n" not in message  # one line, as every error of the hierarchy
    assert "missing parameters ['2.bias']" in message  # (ours, kept)
    assert "Error(s) in loading state_dict for Sequential:" in message
    assert expected[0] in message
    assert "size mismatch for 0.weight: copying a param with shape" in message
    assert "[5, 3]" in message.split("size mismatch for 0.weight")[1]
    # nothing was loaded, and the model still runs
    assert all(np.array_equal(before[k], np.array(v)) for k, v in ours.state_dict().items())
    assert ours.eval()(rg.ones(2, 3)).shape == (2, 2)


@pytest.mark.parametrize("strict", [True, False])
def test_every_size_mismatch_is_listed_as_torch_lists_them(strict):
    ours, theirs = _pair()
    state = {k: v.clone() for k, v in theirs.state_dict().items()}
    state["0.bias"] = torch.ones(7)
    state["2.weight"] = torch.ones(2, 5)
    expected = _torch_lines(theirs, state, strict)
    assert [line.split(":")[0] for line in expected] == [
        "size mismatch for 0.bias",
        "size mismatch for 2.weight",
    ]
    with pytest.raises(rg.ShapeError) as raised:
        ours.load_state_dict({k: rg.tensor(v.numpy()) for k, v in state.items()}, strict=strict)
    assert isinstance(raised.value, RuntimeError)
    message = str(raised.value)
    assert "'0.bias' has shape [4], the state has [7]" in message  # (ours, kept)
    positions = [message.find(line.split(":")[0] + ":") for line in expected]
    assert -1 not in positions and positions == sorted(positions), message


def test_an_unexpected_key_is_said_in_torchs_words():
    ours, theirs = _pair()
    state = {**theirs.state_dict(), "head.weight": torch.ones(1)}
    expected = _torch_lines(theirs, state)
    assert expected == ['Unexpected key(s) in state_dict: "head.weight".']
    with pytest.raises(KeyError) as raised:
        ours.load_state_dict({k: rg.tensor(v.numpy()) for k, v in state.items()})
    assert expected[0] in str(raised.value)


@pytest.mark.parametrize(
    ("saved_sizes", "said"),
    [
        # torch's ValueError sentences (checked against torch below)
        (((3, 4),), "loaded state dict contains a parameter group that doesn't match"),
        (None, "loaded state dict has a different number of parameter groups"),
    ],
)
def test_an_optimizer_state_of_another_layout_says_torchs_sentence(saved_sizes, said):
    def stepped_state(lib):
        params = [lib.nn.Parameter(lib.ones(3, 4)), lib.nn.Parameter(lib.ones(4))]
        optimizer = lib.optim.Adam(params, lr=0.1)
        return optimizer.state_dict()

    def fresh(lib):
        if saved_sizes is None:  # two groups against the saved one
            a, b = lib.nn.Parameter(lib.ones(3, 4)), lib.nn.Parameter(lib.ones(4))
            return lib.optim.Adam([{"params": [a]}, {"params": [b]}], lr=0.1)
        return lib.optim.Adam([lib.nn.Parameter(lib.ones(*s)) for s in saved_sizes], lr=0.1)

    with pytest.raises(ValueError, match=said):
        fresh(torch).load_state_dict(stepped_state(torch))
    with pytest.raises(rg.InvalidArgumentError, match=said):
        fresh(rg).load_state_dict(stepped_state(rg))


def _torch_adam_two_steps(start: list[float]) -> np.ndarray:
    reference = torch.nn.Parameter(torch.tensor(start))
    optimizer = torch.optim.Adam([reference], lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        (reference * reference).sum().backward()
        optimizer.step()
    return reference.detach().numpy()


def _resumed_adam(start: list[float], edit=None) -> rg.Tensor:
    """One Adam step, its state saved (``edit`` changes it), loaded into a fresh optimizer
    over the stepped value, and a second step."""
    first = rg.nn.Parameter(rg.tensor(start))
    optimizer = rg.optim.Adam([first], lr=0.1)
    optimizer.step((first * first).sum().backward())
    state = copy.deepcopy(optimizer.state_dict())
    if edit is not None:
        edit(state)
    resumed = rg.nn.Parameter(rg.tensor(first.numpy()))
    fresh = rg.optim.Adam([resumed], lr=0.1)
    fresh.load_state_dict(state)
    fresh.step((resumed * resumed).sum().backward())
    return resumed


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (5.0, rg.ShapeError),
        (np.float32(5.0), rg.ShapeError),
        ("abc", rg.DTypeError),
    ],
    ids=["float", "numpy-scalar", "str"],
)
def test_a_single_value_saved_for_a_moment_is_refused_at_the_load(value, error):
    # a number or a str for Adam's exp_avg (a buffer of the parameter's shape) was taken as
    # a scalar of the state; the next step failed deep inside ("'numpy.float32' object has
    # no attribute '_prim'", "'str' object has no attribute 'dtype'")
    def edit(state: dict) -> None:
        state["state"][0]["exp_avg"] = value

    with pytest.raises(error, match=r"Adam\.load_state_dict: state 0/exp_avg must be a tensor"):
        _resumed_adam([1.0, -2.0, 3.0], edit)
    parameter = rg.nn.Parameter(rg.tensor([1.0, -2.0, 3.0]))
    optimizer = rg.optim.Adam([parameter], lr=0.1)
    state = copy.deepcopy(optimizer.state_dict())
    with pytest.raises(error):
        optimizer.load_state_dict(
            {**state, "state": {0: {"step": 1.0, "exp_avg": value, "exp_avg_sq": np.ones(3)}}}
        )
    assert optimizer.state_dict()["state"] == {}  # unchanged, and usable
    optimizer.step((parameter * parameter).sum().backward())
    # the state whole loads and steps as torch's Adam's two steps
    np.testing.assert_allclose(
        _resumed_adam([1.0, -2.0, 3.0]).numpy(),
        _torch_adam_two_steps([1.0, -2.0, 3.0]),
        rtol=1e-6,
    )


@pytest.mark.parametrize("name", ["Adam", "RMSprop", "Rprop", "ASGD"])
def test_a_zero_d_parameters_state_round_trips_and_loads_torchs(name):
    # a 0-d parameter (CLIP's logit_scale) has 0-d moments, which state_dict() saves as 0-d
    # arrays (torch's as 0-d tensors): the load took them for scalars, and the next step
    # failed with "'numpy.float32' object has no attribute '_prim'"
    reference = torch.nn.Parameter(torch.tensor(2.0))
    torch_optimizer = getattr(torch.optim, name)([reference], lr=0.1)
    torch_states = []
    for _ in range(3):
        torch_optimizer.zero_grad()
        (reference**3).backward()
        torch_optimizer.step()
        torch_states.append((reference.item(), copy.deepcopy(torch_optimizer.state_dict())))
    first = rg.nn.Parameter(rg.tensor(2.0))
    optimizer = getattr(rg.optim, name)([first], lr=0.1)
    optimizer.step((first**3).backward())
    for value, state in [(first.item(), optimizer.state_dict()), torch_states[0]]:
        resumed = rg.nn.Parameter(rg.tensor(value))
        loaded = getattr(rg.optim, name)([resumed], lr=0.1)
        loaded.load_state_dict(copy.deepcopy(state))
        for _ in range(2):
            loaded.step((resumed**3).backward())
        np.testing.assert_allclose(resumed.item(), reference.item(), rtol=1e-5)


def test_a_momentum_buffer_saved_as_none_still_starts_afresh():
    # None stays allowed for a buffer (a state saved before the buffer existed): the step
    # starts it from the gradient, as torch's SGD does (buf = grad, p -= lr * buf)
    ours = rg.nn.Parameter(rg.tensor([1.0, 2.0]))
    optimizer = rg.optim.SGD([ours], lr=0.1, momentum=0.9)
    group = dict(optimizer.state_dict()["param_groups"][0])
    optimizer.load_state_dict({"state": {0: {"momentum_buffer": None}}, "param_groups": [group]})
    optimizer.step((ours * 1.0).sum().backward())
    np.testing.assert_allclose(ours.numpy(), [0.9, 1.9], rtol=1e-6)


def test_ctrl_c_while_the_command_starts_is_one_line_and_status_130(monkeypatch, capsys):
    # building the parser imports the trainers (seconds): a Ctrl-C there printed
    # KeyboardInterrupt's traceback
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["train", "--help"]) == 130
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    assert error.startswith("retrograd: interrupted while starting")


def test_paths_no_file_can_have_are_refused_naming_the_op(tmp_path):
    # "embedded null byte" (a bare ValueError naming nothing, as torch.load's), and "Is a
    # directory: '.'" for an empty name to save (torch's: RuntimeError "invalid file name")
    with pytest.raises(ValueError, match="embedded null"):
        torch.load(str(tmp_path / "a\0b"))
    for op in (lambda f: rg.save({"w": rg.ones(2)}, f), rg.load):
        with pytest.raises(rg.InvalidArgumentError, match=r"^(save|load): the path .* NUL byte"):
            op(str(tmp_path / "a\0b"))
    with pytest.raises(rg.InvalidArgumentError, match="save: f is an empty path"):
        rg.save({"w": rg.ones(2)}, "")
    with pytest.raises(FileNotFoundError):  # load's, as torch's
        rg.load("")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_files_bytes_given_as_the_path_say_to_wrap_them():
    # rg.load(data) took the bytes for a file name: "No such file or directory: b'PK...'"
    buffer = io.BytesIO()
    rg.save({"w": rg.tensor([1.0, 2.0])}, buffer)
    with pytest.raises(rg.DTypeError, match=r"load: f is bytes holding a file's contents"):
        rg.load(buffer.getvalue())
    assert rg.load(io.BytesIO(buffer.getvalue()))["w"].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("value", [None, "abc"])
def test_a_value_without_numbers_is_torchs_runtime_error_in_its_words(value):
    # a DTypeError only (a TypeError): ports' `except RuntimeError:` fallbacks missed it
    ours, theirs = _pair()
    expected = _torch_lines(theirs, {**theirs.state_dict(), "0.bias": value})
    assert expected[0].startswith('While copying the parameter named "0.bias", expected')
    state = {**ours.state_dict(), "0.bias": value}
    with pytest.raises(RuntimeError) as raised:
        ours.load_state_dict(state)
    assert isinstance(raised.value, rg.DTypeError)
    assert str(raised.value).endswith(
        f"Error(s) in loading state_dict for Sequential: {expected[0]}"
    )


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_a_torch_file_naming_python_2_builtins_loads_under_weights_only_false(zip_format):
    # torch pickles with protocol 2, which writes int as __builtin__.long and range as
    # __builtin__.xrange: the load failed, "builtins.long, which cannot be imported"
    saved = {"counts": collections.defaultdict(int, {"a": 2}), "steps": range(3), "w": None}
    saved["w"] = torch.tensor([1.0, 2.0])
    buffer = io.BytesIO()
    torch.save(saved, buffer, _use_new_zipfile_serialization=zip_format)
    expected = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    loaded = rg.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    assert type(loaded["counts"]) is collections.defaultdict
    assert loaded["counts"].default_factory is expected["counts"].default_factory is int
    assert dict(loaded["counts"]) == dict(expected["counts"]) == {"a": 2}
    assert loaded["steps"] == expected["steps"] == range(3)
    assert loaded["w"].tolist() == expected["w"].tolist()
    with pytest.raises(rg.InvalidArgumentError, match=r"collections\.defaultdict is not allowed"):
        rg.load(io.BytesIO(buffer.getvalue()))  # weights_only=True refuses it, as torch's


def test_a_meta_tensor_in_a_state_dict_is_refused_naming_it():
    # torch's own NotImplementedError ("Cannot copy out of meta tensor") escaped, bare, from
    # Module.load_state_dict and Optimizer.load_state_dict
    model = rg.nn.Linear(2, 2)
    before = model.weight.tolist()
    state = {"weight": torch.empty(2, 2, device="meta"), "bias": torch.zeros(2)}
    with pytest.raises(rg.DTypeError, match=r"'weight' .* cannot be read \(Cannot copy out"):
        model.load_state_dict(state)
    assert model.weight.tolist() == before
    optimizer = rg.optim.Adam(model.parameters(), lr=0.1)
    group = dict(optimizer.state_dict()["param_groups"][0])
    saved = {"step": torch.tensor(1.0), "exp_avg": torch.empty(2, 2, device="meta")}
    saved["exp_avg_sq"] = torch.zeros(2, 2)
    with pytest.raises(rg.DTypeError, match=r"state 0/exp_avg is a tensor that cannot be read"):
        optimizer.load_state_dict({"state": {0: saved}, "param_groups": [group]})
    assert not optimizer.state
