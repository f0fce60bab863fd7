"""Round 23 of the reliability work, on state dicts, ``rg.save``/``rg.load``, optimizers and
the ``retrograd`` command's flags: the regressions of each defect the sweep
(``test_reliability_sweep_23.py``) and its probes found, under a heading per defect; each
fails on the code before the fix. What torch does with the same objects is the reference.

The command runs by its ``main()`` in this process (:func:`cli_here.run_main`)."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch
from cli_here import run_main
from retrograd import nn, optim


def saved_and_loaded(obj, **load_options):
    buffer = io.BytesIO()
    rg.save(obj, buffer)
    buffer.seek(0)
    return rg.load(buffer, **load_options)


def torch_saved_and_loaded(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer)


class Tied(nn.Module):
    """An embedding whose weight the output layer shares (GPT's ``wte``/``lm_head``)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(4, 3)
        self.head = nn.Linear(3, 4, bias=False)
        self.head.weight = self.emb.weight


# == a complex number in a checkpoint ============================================================
def test_a_saved_complex_number_loads_under_the_default_weights_only():
    # A complex was pickled, and the default (weights_only) load refused the file naming
    # builtins.complex; torch's weights_only load allows it.
    values = [1 + 2j, complex(float("nan"), float("-inf")), -0.5j]
    expected = torch_saved_and_loaded({"c": values})["c"]
    loaded = saved_and_loaded({"c": values})["c"]
    assert [type(v) for v in loaded] == [complex] * 3
    assert repr(loaded) == repr(expected)


# == a saved Parameter ===========================================================================
@pytest.mark.parametrize("requires_grad", [True, False])
def test_a_saved_parameter_loads_as_a_parameter(requires_grad):
    # It loaded as a plain tensor (torch's loads as a Parameter, keeping requires_grad); one
    # saved under two names is one object, as in torch.
    torch_param = torch.nn.Parameter(torch.ones(2), requires_grad=requires_grad)
    expected = torch_saved_and_loaded({"a": torch_param, "b": torch_param})
    param = nn.Parameter(rg.ones(2), requires_grad=requires_grad)
    loaded = saved_and_loaded({"a": param, "b": param})
    assert type(expected["a"]) is torch.nn.Parameter and type(loaded["a"]) is nn.Parameter
    assert loaded["a"].requires_grad == expected["a"].requires_grad == requires_grad
    assert (loaded["a"] is loaded["b"]) == (expected["a"] is expected["b"]) is True
    assert loaded["a"].tolist() == [1.0, 1.0]
    # nothing in the file needs an allowed class beyond torch's defaults
    buffer = io.BytesIO()
    rg.save(param, buffer)
    buffer.seek(0)
    assert rg.serialization.get_unsafe_globals_in_checkpoint(buffer) == []


# == a PyTorch bfloat16 tensor ===================================================================
def test_rg_save_of_a_torch_bfloat16_tensor_is_no_bare_type_error():
    # NumPy has no bfloat16: a bare TypeError ("Got unsupported ScalarType BFloat16").
    values = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    buffer = io.BytesIO()
    rg.save({"w": values}, buffer)
    buffer.seek(0)
    if on_torch():
        loaded = rg.load(buffer)["w"]
        assert str(loaded.dtype) == "bfloat16"
        assert loaded.tolist() == values.float().tolist()
    else:  # as a file of rg's own bfloat16 tensors: the NumPy backend has no bfloat16
        with pytest.raises(rg.DTypeError, match="bfloat16"):
            rg.load(buffer)


def test_load_state_dict_takes_a_torch_bfloat16_state_dict():
    # A DTypeError, "'weight' is float32, the state has a value of type Tensor"; torch's
    # load_state_dict casts it into the float32 parameters.
    torch.manual_seed(0)
    source = torch.nn.Linear(3, 2).bfloat16()
    reference = torch.nn.Linear(3, 2)
    reference.load_state_dict(source.state_dict())
    model = nn.Linear(3, 2)
    model.load_state_dict(source.state_dict())
    assert str(model.weight.dtype) == "float32"
    np.testing.assert_array_equal(model.weight.numpy(), reference.weight.detach().numpy())
    np.testing.assert_array_equal(model.bias.numpy(), reference.bias.detach().numpy())


# == a set of parameters in a group ==============================================================
@pytest.mark.parametrize("where", ["constructor", "add_param_group"])
def test_a_group_of_parameters_given_as_a_set_is_refused_as_torch_refuses_it(where):
    # A set was taken: its order changes between runs, and load_state_dict matches the saved
    # state to parameters by position, so a resumed run could load each moment into another
    # parameter. torch raises a TypeError.
    t_first, t_second = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    first, second = nn.Parameter(rg.ones(2)), nn.Parameter(rg.ones(3))
    with pytest.raises(TypeError, match="ordered collections"):
        if where == "constructor":
            torch.optim.SGD([{"params": {t_first, t_second}}], lr=0.1)
        else:
            torch.optim.SGD([t_first], lr=0.1).add_param_group({"params": {t_second}})
    if where == "constructor":
        with pytest.raises(rg.DTypeError, match=r"SGD: a group's params .* not a set"):
            optim.SGD([{"params": {first, second}}], lr=0.1)
    else:
        optimizer = optim.SGD([first], lr=0.1)
        with pytest.raises(rg.DTypeError, match=r"SGD: a group's params .* not a set"):
            optimizer.add_param_group({"params": {second}})
        assert len(optimizer.param_groups) == 1  # unchanged, still usable
        optimizer.add_param_group({"params": [second]})
        assert len(optimizer.param_groups) == 2


# == an LBFGS closure whose loss is not a number =================================================
def test_lbfgs_names_itself_when_the_closures_loss_is_not_one_number():
    # The error came from inside, "item: expected a one-element tensor, got shape [1, 2]",
    # naming neither LBFGS nor the closure (torch: "a Tensor with 2 elements cannot be
    # converted to Scalar").
    rg.seed(0)
    model = nn.Linear(2, 2)
    optimizer = optim.LBFGS(model.parameters(), lr=0.1)
    before = model.weight.numpy().copy()

    def closure():
        return model(rg.ones(1, 2))  # forgot the reduction

    with pytest.raises(rg.ShapeError, match=r"LBFGS\.step: the closure's loss .*\[1, 2\]"):
        optimizer.step(closure)
    np.testing.assert_array_equal(model.weight.numpy(), before)
    optimizer.step(lambda: model(rg.ones(1, 2)).sum())  # usable after the error


# == an unknown option of a command ==============================================================
@pytest.mark.parametrize("command", ["train", "graph", "sample"])
def test_an_unknown_option_is_refused_by_the_command_it_was_given_to(command):
    # The line was "retrograd: unrecognized arguments: --bogus — see retrograd --help", the
    # top parser's, not the form "retrograd COMMAND: ..." of every other refusal of a
    # command's option, and its hint the top help, which lists no option of the command.
    completed = run_main(command, "--bogus", "1")
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"retrograd {command}: unrecognized arguments: --bogus 1 — see retrograd {command} --help"
    )


def test_an_unknown_option_without_a_command_is_named():
    # argparse reported only the missing command ("the following arguments are required:
    # COMMAND"), never the option the user mistyped.
    completed = run_main("--bogus")
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        "retrograd: unrecognized arguments: --bogus — see retrograd --help"
    )
    completed = run_main()  # nothing given: the command is what is missing
    assert "the following arguments are required: COMMAND" in completed.stderr


# == load_state_dict of a file rg.save wrote =====================================================
@pytest.mark.parametrize("given", ["path", "file object"])
def test_load_state_dict_reads_a_state_dict_rg_save_wrote(given, tmp_path):
    # The file's own arrays were taken for the state dict: "missing parameters ['weight',
    # 'bias'], unexpected ['a0', 'a1', '__retrograd_structure__']".
    rg.seed(0)
    source = nn.Linear(3, 2)
    path = tmp_path / "model.pt"
    rg.save(source.state_dict(), path)
    model = nn.Linear(3, 2)
    weight = model.weight
    with open(path, "rb") as handle:
        result = model.load_state_dict(path if given == "path" else handle)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert model.weight is weight
    np.testing.assert_array_equal(model.weight.numpy(), source.weight.numpy())
    np.testing.assert_array_equal(model.bias.numpy(), source.bias.numpy())


def test_load_state_dict_of_an_rg_save_file_of_no_dict_says_so(tmp_path):
    path = tmp_path / "list.pt"
    rg.save([rg.ones(2)], path)
    with pytest.raises(rg.InvalidArgumentError, match=r"list\.pt holds a list rg\.save wrote"):
        nn.Linear(3, 2).load_state_dict(path)


# == a tied weight in a saved state dict =========================================================
def test_a_tied_weight_of_a_saved_state_dict_is_stored_once_and_loads_as_one():
    # state_dict() lists a tied weight under each name, a copy each, so rg.save stored it
    # twice (a GPT's checkpoint carried its embedding twice) and it loaded as two tensors;
    # torch's two keys share one storage.
    torch.manual_seed(0)
    torch_model = torch.nn.Module()
    torch_model.emb = torch.nn.Embedding(4, 3)
    torch_model.head = torch.nn.Linear(3, 4, bias=False)
    torch_model.head.weight = torch_model.emb.weight
    expected = torch_saved_and_loaded(torch_model.state_dict())
    assert expected["emb.weight"].data_ptr() == expected["head.weight"].data_ptr()

    rg.seed(0)
    model = Tied()
    buffer = io.BytesIO()
    rg.save(model.state_dict(), buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:  # torch's format
        stored = [name for name in archive.namelist() if name.startswith("archive/data/")]
    assert len(stored) == 1
    buffer.seek(0)
    loaded = rg.load(buffer)
    assert loaded["emb.weight"] is loaded["head.weight"]
    np.testing.assert_array_equal(loaded["emb.weight"].numpy(), model.emb.weight.numpy())


# == a batch default_collate cannot make =========================================================
@pytest.mark.parametrize(
    "samples",
    [[None, None], [1j, 2j], [np.array(["a"]), np.array(["b"])]],
    ids=["None", "complex", "strings array"],
)
def test_a_batch_default_collate_cannot_make_is_a_type_error_as_torchs(samples):
    # It was an InvalidArgumentError, a ValueError: torch's is a TypeError, and a loop
    # written for torch (except TypeError: fall back to a collate of its own) missed it.
    with pytest.raises(TypeError, match="batch must contain tensors"):
        torch.utils.data.default_collate(samples)
    with pytest.raises(rg.DTypeError, match="default_collate: batch must contain tensors"):
        rg.utils.data.default_collate(samples)


# == a scalar saved with shape [1] ===============================================================
def test_a_one_element_value_loads_into_a_scalar_parameter_as_torchs_does():
    # A ShapeError ("'scale' has shape [], the state has [1]"): torch loads a [1] value into a
    # 0-d parameter or buffer (its checkpoints from before 0-d tensors hold scalars so), and
    # only that way round.
    def build(lib):
        module = lib.nn.Module()
        module.scale = lib.nn.Parameter(lib.tensor(1.0))
        module.register_buffer("count", lib.tensor(0.0))
        module.register_buffer("one", lib.ones(1))
        return module

    reference = build(torch)
    reference.load_state_dict(
        {"scale": torch.tensor([5.0]), "count": torch.tensor([2.0]), "one": torch.ones(1)}
    )
    with pytest.raises(RuntimeError, match="size mismatch for one"):
        build(torch).load_state_dict(
            {"scale": torch.tensor(1.0), "count": torch.tensor(1.0), "one": torch.tensor(3.0)}
        )
    module = build(rg)
    scale = module.scale
    module.load_state_dict(
        {"scale": rg.tensor([5.0]), "count": rg.tensor([2.0]), "one": rg.ones(1)}
    )
    assert module.scale is scale and module.scale.shape == () and module.scale.requires_grad
    assert (module.scale.item(), module.count.item()) == (
        reference.scale.item(),
        reference.count.item(),
    )
    with pytest.raises(rg.ShapeError, match=r"'one' has shape \[1\], the state has \[\]"):
        build(rg).load_state_dict(
            {"scale": rg.tensor(1.0), "count": rg.tensor(1.0), "one": rg.tensor(3.0)}
        )


# == DataLoader's multiprocessing_context ========================================================
@pytest.mark.parametrize(
    "options, error",
    [
        ({"num_workers": 1, "multiprocessing_context": "fork-server"}, ValueError),
        ({"num_workers": 0, "multiprocessing_context": "spawn"}, ValueError),
        ({"num_workers": 1, "multiprocessing_context": 3}, TypeError),
    ],
    ids=["unknown start method", "without workers", "not a context"],
)
def test_dataloader_checks_its_multiprocessing_context_as_torchs_does(options, error):
    # Anything was taken and ignored: a misspelt start method went unnoticed until the
    # script ran under torch.
    with pytest.raises(error, match="multiprocessing_context"):
        torch.utils.data.DataLoader([1, 2], **options)
    with pytest.raises(error, match="DataLoader: multiprocessing_context") as raised:
        rg.utils.data.DataLoader([1, 2], **options)
    assert isinstance(raised.value, rg.RetrogradError)


# == NumPy numbers as hyper-parameters ===========================================================
X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def same_linear() -> tuple[nn.Linear, torch.nn.Linear]:
    torch.manual_seed(0)
    reference = torch.nn.Linear(3, 2)
    model = nn.Linear(3, 2)
    model.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    return model, reference


def assert_steps_as_torchs(model, optimizer, reference, reference_optimizer) -> None:
    for _ in range(3):
        optimizer.step((model(rg.tensor(X)) ** 2).sum().backward())
        reference_optimizer.zero_grad()
        (reference(torch.tensor(X)) ** 2).sum().backward()
        reference_optimizer.step()
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(mine.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name, options",
    [
        ("SGD", {"lr": np.float32(0.05), "momentum": np.float32(0.9)}),
        ("SGD", {"lr": np.array(0.05)}),
        ("SGD", {"lr": "int tensor"}),
        ("AdamW", {"lr": np.float32(0.05), "weight_decay": np.float64(0.1)}),
        ("RMSprop", {"lr": np.float32(0.01)}),
    ],
    ids=["np.float32", "0-d array", "int tensor", "AdamW", "RMSprop"],
)
def test_numpy_numbers_as_hyper_parameters_step_as_torchs(name, options):
    # "SGD: lr must be a number, got np.float32(0.05)" (a DTypeError) for a rate computed
    # with NumPy, a 0-d array or an int tensor; torch takes them, and a step already took a
    # NumPy number set into a group afterwards.
    ours = {k: rg.tensor(1) if isinstance(v, str) else v for k, v in options.items()}
    theirs = {k: torch.tensor(1) if isinstance(v, str) else v for k, v in options.items()}
    model, reference = same_linear()
    assert_steps_as_torchs(
        model,
        getattr(optim, name)(model.parameters(), **ours),
        reference,
        getattr(torch.optim, name)(reference.parameters(), **theirs),
    )


def test_a_group_with_a_numpy_rate_steps_as_torchs():
    model, reference = same_linear()
    optimizer = optim.SGD(
        [{"params": [model.weight], "lr": np.float32(0.2)}, {"params": [model.bias]}], lr=0.05
    )
    reference_optimizer = torch.optim.SGD(
        [{"params": [reference.weight], "lr": np.float32(0.2)}, {"params": [reference.bias]}],
        lr=0.05,
    )
    assert_steps_as_torchs(model, optimizer, reference, reference_optimizer)


# == an optimizer of named parameters ============================================================
def test_an_optimizer_takes_named_parameters_as_torchs_does():
    # torch (2.6) takes model.named_parameters() and keeps the names in each group's
    # "param_names" (and so in its state dict); here "parameters must be tensors, got tuple".
    model, reference = same_linear()
    optimizer = optim.Adam(model.named_parameters(), lr=0.05)
    reference_optimizer = torch.optim.Adam(reference.named_parameters(), lr=0.05)
    assert optimizer.param_groups[0]["param_names"] == ["weight", "bias"]
    assert_steps_as_torchs(model, optimizer, reference, reference_optimizer)
    saved, expected = optimizer.state_dict(), reference_optimizer.state_dict()
    assert [g["param_names"] for g in saved["param_groups"]] == [
        g["param_names"] for g in expected["param_groups"]
    ]
    assert [g["params"] for g in saved["param_groups"]] == [
        g["params"] for g in expected["param_groups"]
    ]
    resumed = optim.Adam(model.parameters(), lr=0.05)  # names load with the groups, as torch's
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["param_names"] == ["weight", "bias"]
    extra = torch.nn.Linear(1, 1)
    reference_optimizer.add_param_group({"params": extra.named_parameters()})
    optimizer.add_param_group({"params": nn.Linear(1, 1).named_parameters()})
    assert optimizer.param_groups[1]["param_names"] == ["weight", "bias"]


@pytest.mark.parametrize("case", ["mixed", "unnamed group into named", "named group into unnamed"])
def test_names_on_some_parameters_only_are_refused_as_torch_refuses_them(case):
    def attempt(lib):
        model = lib.nn.Linear(2, 2)
        if case == "mixed":
            lib.optim.SGD([("weight", model.weight), model.bias], lr=0.1)
        elif case == "unnamed group into named":
            lib.optim.SGD([("weight", model.weight)], lr=0.1).add_param_group(
                {"params": [model.bias]}
            )
        else:
            lib.optim.SGD([model.weight], lr=0.1).add_param_group(
                {"params": [("bias", model.bias)]}
            )

    with pytest.raises(ValueError, match="with/without names"):
        attempt(torch)
    with pytest.raises(rg.InvalidArgumentError, match="with/without names"):
        attempt(rg)
