"""Defects found by round 14 of the reliability sweep (``tests/test_reliability_sweep_14.py``):
what a user's real mistakes and real failures leave behind.

Each was a silent wrong result (a ``DataLoader`` epoch that ended at the first batch whose
reading raised; a ``BatchNorm`` batch refused yet counted in ``num_batches_tracked``, which
shifted every later cumulative average; an optimizer state missing a buffer, restarted from
zeros beside the saved ones; a ``binary_cross_entropy`` target outside [0, 1] given a loss), a
module broken by a name (``register_parameter("training", ...)`` removed the flag every layer
reads), or a failure found too late or named wrong (``rg.save`` to a folder named a temporary
file; ``retrograd bench --out FOLDER`` ran every benchmark before finding it could not write; a
backward hook's gradient of the wrong shape was reported as an internal Function's; torch's
tensor learning rate refused as negative; a plateau schedule's error named ``item``; NumPy's
advice to load an unknown file with ``allow_pickle`` passed on). Each now gives torch's
result or an error of API.md section 7 naming the op and the value at fault, and leaves every
object usable. Expected values come from torch.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from retrograd.errors import KeyMismatchError
from retrograd.utils import data as D  # noqa: N812  (torch's idiom)


# -- a DataLoader goes on after a batch that raised ------------------------------------------
class _Items:
    """Items ``[i]`` of 0..7; reading item ``bad`` raises (a corrupt sample)."""

    def __init__(self, bad: int, lib):
        self.bad, self.lib = bad, lib

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        if index == self.bad:
            raise ValueError(f"corrupt sample {index}")
        return self.lib.tensor([float(index)])


def _skipping_loop(loader) -> list:
    """A training loop that skips a batch it cannot read, as users write it."""
    batches, iterator = [], iter(loader)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return batches
        except ValueError:
            batches.append("skipped")
            continue
        batches.append(batch.tolist())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_batch_that_raises_no_longer_ends_the_epoch(num_workers):
    """The iterator was a generator: after the error every ``next()`` raised StopIteration,
    so the loop above silently trained on one batch of four."""
    ours = _skipping_loop(D.DataLoader(_Items(1, rg), batch_size=2, num_workers=num_workers))
    theirs = _skipping_loop(
        torch.utils.data.DataLoader(_Items(1, torch), batch_size=2, num_workers=0)
    )
    assert ours == theirs == ["skipped", [[2.0], [3.0]], [[4.0], [5.0]], [[6.0], [7.0]]]


def test_a_collate_fn_that_raises_once_no_longer_ends_the_epoch():
    calls = []

    def collate(samples):
        calls.append(len(calls))
        if len(calls) == 2:
            raise ValueError("collate failed")
        return D.default_collate(samples)

    class Stream(D.IterableDataset):
        def __iter__(self):
            return (rg.tensor([float(i)]) for i in range(6))

    for dataset in (_Items(-1, rg), Stream()):
        calls.clear()
        got = _skipping_loop(D.DataLoader(dataset, batch_size=2, collate_fn=collate))
        assert got[:3] == [[[0.0], [1.0]], "skipped", [[4.0], [5.0]]]
        assert len(got) == (4 if isinstance(dataset, _Items) else 3)


# -- a name that is an attribute of the module -----------------------------------------------
@pytest.mark.parametrize(
    "register",
    [
        lambda m, lib: m.register_parameter("training", lib.nn.Parameter(lib.ones(1))),
        lambda m, lib: m.register_parameter("forward", lib.nn.Parameter(lib.ones(1))),
        lambda m, lib: m.register_buffer("training", lib.ones(1)),
        lambda m, lib: m.register_buffer("in_features", lib.ones(1)),
        lambda m, lib: m.add_module("forward", lib.nn.ReLU()),
    ],
)
def test_registering_a_name_the_module_already_has_is_refused(register):
    """It was accepted: ``training`` was removed from the module (``dropout`` and batch norm
    read it), ``forward`` got a parameter that ``state_dict`` saved under a method's name."""
    with pytest.raises(KeyError, match="already exists"):
        register(torch.nn.Linear(3, 2), torch)
    layer = rg.nn.Linear(3, 2)
    before = layer(rg.ones((1, 3))).tolist()
    with pytest.raises(KeyMismatchError, match=r"^register_\w+: attribute '\w+' already exists"):
        register(layer, rg)
    assert layer.training is True and layer.in_features == 3
    assert sorted(layer.state_dict()) == ["bias", "weight"]
    assert layer(rg.ones((1, 3))).tolist() == before
    layer.register_buffer("scale", rg.ones(1))  # a fresh name still registers
    layer.register_parameter("weight", rg.nn.Parameter(rg.ones((2, 3))))  # and a re-register


# -- a batch norm batch that is refused is not counted ---------------------------------------
def test_a_refused_batch_norm_batch_leaves_the_cumulative_average_as_a_clean_run():
    """momentum=None averages the batches' statistics by ``num_batches_tracked``; the refused
    batch (one value per channel) was counted, so every later average was off (torch counts
    it too: its ``num_batches_tracked`` is incremented before the check; kept out here)."""
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    reference = torch.nn.BatchNorm1d(3, momentum=None)
    for scale in (1.0, 2.0):
        reference(torch.tensor(x * scale))
    layer = rg.nn.BatchNorm1d(3, momentum=None)
    with pytest.raises(rg.InvalidArgumentError, match="more than 1 value per channel"):
        layer(rg.ones((1, 3)))
    assert int(layer.num_batches_tracked.item()) == 0
    for scale in (1.0, 2.0):
        layer(rg.tensor(x * scale))
    assert int(layer.num_batches_tracked.item()) == 2
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(
            getattr(layer, name).numpy(), getattr(reference, name).numpy(), rtol=1e-5
        )


# -- binary_cross_entropy's target -----------------------------------------------------------
@pytest.mark.parametrize("target", [[2.0, 0.0], [1.0, -0.5], [float("nan"), 1.0]])
def test_binary_cross_entropy_refuses_a_target_outside_0_1_as_torch(target):
    probabilities = [0.5, 0.25]
    with pytest.raises(RuntimeError, match="target should be between 0 and 1"):
        torch.nn.functional.binary_cross_entropy(torch.tensor(probabilities), torch.tensor(target))
    x = rg.tensor(probabilities).require_grad()
    with pytest.raises(rg.InvalidArgumentError, match=r"^binary_cross_entropy: .*target"):
        F.binary_cross_entropy(x, rg.tensor(target))
    good = F.binary_cross_entropy(x, rg.tensor([1.0, 0.0]))  # x still usable
    expected = torch.nn.functional.binary_cross_entropy(
        torch.tensor(probabilities), torch.tensor([1.0, 0.0])
    )
    np.testing.assert_allclose(good.item(), expected.item(), rtol=1e-6)


# -- an optimizer state missing a buffer -----------------------------------------------------
@pytest.mark.parametrize(
    ("make", "dropped"),
    [
        (lambda p: rg.optim.Adam(p, lr=0.1), "exp_avg"),
        (lambda p: rg.optim.Adam(p, lr=0.1, amsgrad=True), "max_exp_avg_sq"),
        # (not SGD's momentum buffer: its state is that buffer alone, and without it, that
        # of a parameter not stepped yet, which loads as torch's does)
        (lambda p: rg.optim.RMSprop(p, lr=0.1), "square_avg"),
        (lambda p: rg.optim.NAdam(p, lr=0.1), "mu_product"),
    ],
)
def test_a_state_missing_a_buffer_is_refused_and_the_optimizer_kept(make, dropped):
    """It loaded, and the next step started that buffer from zeros beside the others (torch
    loads it and fails at the step with a bare KeyError)."""
    p = rg.nn.Parameter(rg.tensor([1.0, -2.0, 3.0]))
    saved = make([p])
    saved.step((p * p).sum().backward())
    state = saved.state_dict()
    del state["state"][0][dropped]
    target = make([p])
    target.load_state_dict(saved.state_dict())  # the whole state loads
    kept = copy.deepcopy(target.state_dict())
    with pytest.raises(
        KeyMismatchError, match=rf"load_state_dict: .*parameter 0 lacks \['{dropped}'\]"
    ):
        target.load_state_dict(state)
    after = target.state_dict()
    assert sorted(after["state"][0]) == sorted(kept["state"][0])
    for key, value in kept["state"][0].items():
        np.testing.assert_array_equal(after["state"][0][key], value)


# -- files -----------------------------------------------------------------------------------
def test_saving_to_a_folder_names_the_folder_and_leaves_no_temporary(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as caught:
        rg.save({"w": rg.ones(2)}, folder)
    assert caught.value.filename == str(folder)  # was the temporary file's name
    assert sorted(os.listdir(tmp_path)) == ["runs"] and os.listdir(folder) == []


def test_a_folder_made_where_the_file_goes_while_writing_is_named(tmp_path):
    from retrograd.files import atomic_write

    target = tmp_path / "model.npz"
    with pytest.raises(IsADirectoryError) as caught, atomic_write(target) as file:
        file.write(b"data")
        target.mkdir()  # another process took the name meanwhile
    assert caught.value.filename == str(target)
    assert os.listdir(tmp_path) == ["model.npz"] and os.listdir(target) == []


def test_bench_out_a_folder_is_refused_before_any_script_runs(tmp_path, capsys):
    from retrograd.app.cli import main

    scripts = tmp_path / "benchmarks"
    scripts.mkdir()
    marker = tmp_path / "ran"
    (scripts / "bench_touch.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    assert main(["bench", "--dir", str(scripts), "--out", str(tmp_path)]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        f"retrograd bench: --out {tmp_path} is a folder, not a file — name a file in it"
    ]
    assert not marker.exists()


# -- a backward hook's or a Function's gradient of the wrong kind ----------------------------
@pytest.mark.parametrize(
    ("result", "error", "fragment"),
    [
        (
            lambda grad: (grad[:1],),
            rg.ShapeError,
            r"gradient of shape \[1, 8\] for one of shape \[5, 8\]",
        ),
        (lambda grad: 3, rg.DTypeError, "returned int; expected None or a tuple of 1"),
        (
            lambda grad: (grad, grad),
            rg.InvalidArgumentError,
            "invalid number of gradients, got 2, but expected 1",
        ),
    ],
)
@pytest.mark.parametrize("kind", ["register_full_backward_hook", "register_full_backward_pre_hook"])
def test_a_backward_hooks_bad_gradient_names_the_module_and_the_hook(result, error, fragment, kind):
    """The message named the identity Function the hook runs in ("function
    _InputGradientsBackward returned an invalid gradient at index 0 - expected shape [5, 8]")
    and not the shape given. torch refuses each too."""
    for lib in (torch, rg):
        model = lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.Linear(8, 3))
        hooked = model[1] if kind == "register_full_backward_hook" else model[0]

        def hook(module, *grads):
            return result(grads[0][0])

        handle = getattr(hooked, kind)(hook)
        x = np.ones((5, 4), np.float32)
        if lib is torch:
            with pytest.raises((RuntimeError, TypeError)):
                model(torch.tensor(x)).sum().backward()
            continue
        with pytest.raises(error, match=rf"^Linear: a {kind} hook .*{fragment}"):
            model(rg.tensor(x)).sum().backward()
        handle.remove()
        grads = model(rg.tensor(x)).sum().backward()  # the model goes on without it
        assert model[0].weight.grad(grads).shape == (8, 4)


def test_a_functions_gradient_of_the_wrong_shape_says_the_shape_it_got():
    class Double(rg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            return grad[:1]

    x = rg.ones((3, 2)).require_grad()
    with pytest.raises(rg.ShapeError, match=r"got shape \[1, 2\], expected shape \[3, 2\]"):
        Double.apply(x).sum().backward()


# -- an optimizer's learning rate given as a tensor ------------------------------------------
def test_a_learning_rate_tensor_steps_as_torchs_and_a_string_is_a_type_error():
    """torch takes ``lr=torch.tensor(0.1)``; it was refused with "lr must be non-negative,
    got tensor(0.1)", and a string was told the same (torch: a TypeError)."""
    reference = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    theirs = torch.optim.Adam([reference], lr=torch.tensor(0.1))
    (reference * reference).sum().backward()
    theirs.step()
    p = rg.nn.Parameter(rg.tensor([1.0, -2.0]))
    ours = rg.optim.Adam([p], lr=rg.tensor(0.1))
    ours.step((p * p).sum().backward())
    np.testing.assert_allclose(p.numpy(), reference.detach().numpy(), rtol=1e-6)
    with pytest.raises(TypeError):
        torch.optim.Adam([reference], lr="fast")
    with pytest.raises(rg.DTypeError, match=r"^Adam: lr must be a number, got 'fast'"):
        rg.optim.Adam([p], lr="fast")


def test_a_plateau_schedule_given_several_metrics_names_itself_and_counts_nothing():
    """``item``'s error ("item: expected a one-element tensor") named the tensor method."""
    with pytest.raises(ValueError, match="one element"):
        torch.optim.lr_scheduler.ReduceLROnPlateau(
            torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        ).step(torch.tensor([1.0, 2.0]))
    schedule = rg.optim.lr_scheduler.ReduceLROnPlateau(
        rg.optim.SGD([rg.nn.Parameter(rg.ones(1))], lr=0.1)
    )
    with pytest.raises(rg.ShapeError, match=r"^ReduceLROnPlateau\.step: .*shape \[2\]"):
        schedule.step(rg.tensor([1.0, 2.0]))
    assert schedule.last_epoch == 0 and schedule.num_bad_epochs == 0
    schedule.step(rg.tensor([1.0]))
    assert schedule.last_epoch == 1 and schedule.best == 1.0


@pytest.mark.parametrize("content", [b"hello, not arrays", b"\x80\x04K\x01."])
def test_loading_a_state_from_a_file_of_other_bytes_never_advises_allow_pickle(tmp_path, content):
    """NumPy's message ("... you can load it unsafely using the `allow_pickle=` keyword")
    was passed on: advice to run what an unknown file holds."""
    path = tmp_path / "weights.npz"
    path.write_bytes(content)
    layer = rg.nn.Linear(2, 1)
    before = layer.weight.numpy().copy()
    with pytest.raises(rg.InvalidArgumentError) as caught:
        layer.load_state_dict(str(path))
    message = str(caught.value)
    assert message.startswith(f"load_state_dict: {path} is not a readable .npz archive")
    assert "allow_pickle" not in message and "pickled objects" in message
    np.testing.assert_array_equal(layer.weight.numpy(), before)
