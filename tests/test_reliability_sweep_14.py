"""Round 14 of the reliability sweep (API.md section 7): what a user's real mistakes and real
failures leave behind, where the earlier rounds (``tests/test_reliability_sweep.py``,
``tests/test_reliability_sweep_13.py``: bad arguments drawn over the public surface) did not go.

* State after an error: a forward hook, a backward hook, a ``KeyboardInterrupt`` raised by a
  hook, an optimizer step given what ``backward()`` did not return, a load of a wrong state, a
  save into a folder or onto a full disk (``RLIMIT_FSIZE``, in a subprocess), a ``DataLoader``
  batch that raises: the model, the optimizer's state and the graph stay usable, and the
  training that goes on ends where a clean run ends, bit for bit. A deep copy or a pickle taken
  mid-training goes on as the original does.
* The ``retrograd`` command (called in-process) given wrong flags and wrong files (another
  model's checkpoint, a truncated one, one missing its optimizer's buffers, an empty, binary or
  folder ``--text``): one line on stderr, a non-zero status, and the run already saved intact.
* Numerical edge input through the layers and losses (infinities, NaN, huge logits, empty
  batches, zero-size dimensions, int input to float ops, a batch of one in BatchNorm's
  training mode) against torch: the same values and gradients, or both refuse (ours from the
  hierarchy).
* Module and optimizer misuse against torch: ``load_state_dict`` with wrong shapes, missing
  or unexpected keys (``strict=False``), a non-leaf or a set of parameters, bad names.

The sweep found the defects of ``tests/test_reliability_regressions_14.py``.
"""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from backends import inner_backend
from cli_here import run_main
from retrograd.utils import data as D  # noqa: N812  (torch's idiom)

# -- state after an error --------------------------------------------------------------------
_X = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
_Y = np.array([0, 1, 2, 0, 1, 2])


def _model() -> tuple[rg.nn.Module, rg.optim.Optimizer]:
    """No batch norm: a forward that ran before a failure updates its running statistics, as
    torch's does (a refused batch does not: ``tests/test_reliability_regressions_14.py``)."""
    rg.manual_seed(0)
    model = rg.nn.Sequential(rg.nn.Linear(4, 8), rg.nn.ReLU(), rg.nn.Linear(8, 3))
    return model, rg.optim.Adam(model.parameters(), lr=0.01)


def _step(model, optimizer) -> float:
    loss = F.cross_entropy(model(rg.tensor(_X)), rg.tensor(_Y))
    optimizer.step(loss.backward())
    return loss.item()


def _state(model, optimizer) -> dict[str, np.ndarray]:
    arrays = {f"model/{k}": np.asarray(v) for k, v in model.state_dict().items()}
    for number, entry in optimizer.state_dict()["state"].items():
        arrays |= {f"optim/{number}/{k}": np.asarray(v) for k, v in entry.items()}
    return arrays


def _assert_same_state(ours: dict, clean: dict) -> None:
    assert sorted(ours) == sorted(clean)
    for key in clean:
        np.testing.assert_array_equal(ours[key], clean[key], err_msg=key)


@pytest.fixture(scope="module")
def clean_run() -> dict[str, np.ndarray]:
    """The model and optimizer after four clean steps."""
    model, optimizer = _model()
    for _ in range(4):
        _step(model, optimizer)
    return _state(model, optimizer)


def _forward_hook_raises(model, optimizer):
    handle = model[1].register_forward_hook(lambda module, args, out: 1 / 0)
    try:
        with pytest.raises(ZeroDivisionError):
            _step(model, optimizer)
    finally:
        handle.remove()


def _backward_hook_raises(error):
    def failure(model, optimizer):
        def hook(module, grad_input, grad_output):
            raise error

        handle = model[0].register_full_backward_hook(hook)
        loss = F.cross_entropy(model(rg.tensor(_X)), rg.tensor(_Y))
        try:
            with pytest.raises(type(error)):
                loss.backward()
        finally:
            handle.remove()

    return failure


def _bad_hook_gradient(model, optimizer):
    handle = model[2].register_full_backward_hook(lambda m, gi, go: (gi[0][:1],))
    try:
        with pytest.raises(rg.ShapeError):
            F.cross_entropy(model(rg.tensor(_X)), rg.tensor(_Y)).backward()
    finally:
        handle.remove()


def _step_without_gradients(model, optimizer):
    for grads, error in ((None, rg.AutodiffError), (3, rg.DTypeError), ({}, rg.DTypeError)):
        with pytest.raises(error, match=r"^Adam\.step: "):
            optimizer.step(grads)


def _step_with_another_models_gradients(model, optimizer):
    other = rg.nn.Linear(4, 8)
    optimizer.step(other(rg.tensor(_X)).sum().backward())  # none of its parameters: nothing


def _load_wrong_states(model, optimizer):
    state = model.state_dict()
    state["0.weight"] = rg.ones((3, 3))
    for strict in (True, False):
        with pytest.raises(rg.ShapeError, match=r"load_state_dict: '0\.weight'"):
            model.load_state_dict(state, strict=strict)
    saved = optimizer.state_dict()
    saved["state"][0]["exp_avg"] = np.ones(2, np.float32)
    with pytest.raises(rg.ShapeError, match=r"Adam\.load_state_dict: state 0/exp_avg"):
        optimizer.load_state_dict(saved)
    saved = optimizer.state_dict()
    del saved["state"][1]["exp_avg_sq"]
    with pytest.raises(rg.errors.KeyMismatchError, match=r"parameter 1 lacks"):
        optimizer.load_state_dict(saved)


def _save_into_a_folder(model, optimizer):
    for value in (model.state_dict(), optimizer.state_dict()):
        with pytest.raises(IsADirectoryError):
            rg.save(value, Path(__file__).parent)


def _loader_batch_raises(model, optimizer):
    class Broken(D.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, index):
            raise OSError("the disk went away")

    with pytest.raises(OSError, match="went away"):
        for batch in D.DataLoader(Broken(), batch_size=2):
            model(batch)


def _graph_then_error(model, optimizer):
    """A graph built, then an error between it and its backward: it still gives its
    gradients, once."""
    loss = F.cross_entropy(model(rg.tensor(_X)), rg.tensor(_Y))
    with pytest.raises(rg.ShapeError):
        model(rg.ones((2, 5)))
    optimizer.step(loss.backward())
    with pytest.raises(rg.AutodiffError, match="consumed"):
        loss.backward()


FAILURES = {
    "forward hook": _forward_hook_raises,
    "backward hook": _backward_hook_raises(RuntimeError("hook failed")),
    "KeyboardInterrupt in a hook": _backward_hook_raises(KeyboardInterrupt()),
    "hook gradient of a wrong shape": _bad_hook_gradient,
    "step without gradients": _step_without_gradients,
    "step with another model's": _step_with_another_models_gradients,
    "load of wrong states": _load_wrong_states,
    "save into a folder": _save_into_a_folder,
    "DataLoader batch": _loader_batch_raises,
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_training_after_a_failure_ends_as_a_clean_run(failure, clean_run):
    model, optimizer = _model()
    _step(model, optimizer)
    FAILURES[failure](model, optimizer)
    model.train()
    for _ in range(3):
        _step(model, optimizer)
    _assert_same_state(_state(model, optimizer), clean_run)


def test_a_graph_survives_an_error_built_after_it(clean_run):
    model, optimizer = _model()
    _graph_then_error(model, optimizer)
    for _ in range(3):
        _step(model, optimizer)
    _assert_same_state(_state(model, optimizer), clean_run)


@pytest.mark.parametrize("strategy", ["none", "balanced", "budget"])
def test_a_backward_that_failed_with_retain_graph_gives_the_clean_gradients_again(strategy):
    """A hook and then a Function's backward fail once under ``retain_graph=True``: the same
    graph's next backward gives the gradients of a clean one, bit for bit, under each
    checkpointing strategy (the recomputed and the freed values included)."""
    strategies = {
        "none": rg.NoCheckpointing(),
        "balanced": rg.BalancedCheckpointing(),
        "budget": rg.BudgetCheckpointing(1024),
    }
    backend = rg.Autodiff(inner_backend(), checkpointing=strategies[strategy])
    failures = []

    class Flaky(rg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            if len(failures) == 1:
                failures.append("function")
                raise ValueError("once")
            return grad * 2

    def hook(module, grad_input, grad_output):
        if not failures:
            failures.append("hook")
            raise RuntimeError("once")

    def graph(hooked):
        rg.manual_seed(0)
        layers = [rg.nn.Linear(4, 8, backend=backend), rg.nn.Linear(8, 3, backend=backend)]
        handle = layers[1].register_full_backward_hook(hook) if hooked else None
        hidden = F.gelu(layers[0](rg.tensor(_X, backend=backend)))
        return layers, Flaky.apply(layers[1](hidden)).tanh().sum(), handle

    clean_layers, clean_loss, _ = graph(hooked=False)
    clean = clean_loss.backward()
    layers, loss, handle = graph(hooked=True)
    with pytest.raises(RuntimeError, match="once"):
        loss.backward(retain_graph=True)
    handle.remove()
    with pytest.raises(ValueError, match="once"):
        loss.backward(retain_graph=True)
    grads = loss.backward()
    assert failures == ["hook", "function"]
    for ours, reference in zip(layers, clean_layers):
        for name in ("weight", "bias"):
            np.testing.assert_array_equal(
                getattr(ours, name).grad(grads).numpy(),
                getattr(reference, name).grad(clean).numpy(),
            )


@pytest.mark.parametrize("how", ["deepcopy", "pickle", "state_dict"])
def test_a_copy_taken_mid_training_goes_on_as_the_original(how, clean_run):
    model, optimizer = _model()
    _step(model, optimizer)
    _step(model, optimizer)
    if how == "deepcopy":
        twin, twin_optimizer = copy.deepcopy((model, optimizer))
    elif how == "pickle":
        twin, twin_optimizer = pickle.loads(pickle.dumps((model, optimizer)))
    else:
        twin, twin_optimizer = _model()
        twin.load_state_dict(model.state_dict())
        twin_optimizer.load_state_dict(optimizer.state_dict())
    for _ in range(2):
        _step(twin, twin_optimizer)
    _assert_same_state(_state(twin, twin_optimizer), clean_run)
    for _ in range(2):  # the original is untouched by the copy's steps
        _step(model, optimizer)
    _assert_same_state(_state(model, optimizer), clean_run)


def test_a_save_on_a_full_disk_keeps_the_previous_file_and_the_training(tmp_path):
    """One subprocess: files may not grow beyond 4 KB (``RLIMIT_FSIZE``, as on a full disk)."""
    script = textwrap.dedent(
        f"""
        import errno, os, resource, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import numpy as np
        import retrograd as rg
        from test_reliability_sweep_14 import _model, _state, _step
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        folder = {str(tmp_path)!r}
        path = os.path.join(folder, "state.pt")
        model, optimizer = _model()
        _step(model, optimizer)
        rg.save({{"model": model.state_dict()}}, path)
        before = open(path, "rb").read()
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        for target in (path, os.path.join(folder, "new.pt")):
            try:
                rg.save({{"model": model.state_dict(), "optim": optimizer.state_dict()}}, target)
            except OSError as error:
                assert error.errno == errno.EFBIG and error.filename == target, error
            else:
                raise AssertionError("the save did not fail")
        assert open(path, "rb").read() == before and os.listdir(folder) == ["state.pt"]
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        _step(model, optimizer)
        rg.save({{"model": model.state_dict()}}, path)
        twin, twin_optimizer = _model()
        _step(twin, twin_optimizer); _step(twin, twin_optimizer)
        for key, value in _state(twin, twin_optimizer).items():
            np.testing.assert_array_equal(_state(model, optimizer)[key], value)
        print("ok")
        """
    )
    environment = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=120
    )
    assert completed.returncode == 0 and completed.stdout.strip() == "ok", completed.stderr


# -- the retrograd command -------------------------------------------------------------------
GPT = [
    "--model", "gpt", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
    "--batch-size", "4", "--steps", "2", "--eval-interval", "2",
]  # fmt: skip
TEXT = "".join(f"def f{i}(x):\n    return x * {i % 7} + {i % 5}\n\n" for i in range(40))


def _cli(*args: str) -> tuple[int, str]:
    """``retrograd ARGS`` in this process: the status and what it wrote to stderr."""
    completed = run_main(*args)
    return completed.returncode, completed.stderr


def _files(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory) -> tuple[Path, Path]:
    """A finished GPT run's folder and its text."""
    base = tmp_path_factory.mktemp("cli14")
    text = base / "code.txt"
    text.write_text(TEXT)
    code, err = _cli("train", *GPT, "--text", str(text), "--out", str(base / "gpt"))
    assert code == 0, err
    return base / "gpt", text


def _damage(name: str):
    """Edits of a copy of the run's checkpoint.npz (its arrays, as a dict)."""

    def edit(folder: Path) -> None:
        path = folder / "checkpoint.npz"
        if name == "truncated":
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])
            return
        if name == "empty":
            path.write_bytes(b"")
            return
        arrays = dict(np.load(path, allow_pickle=False))
        if name == "another model's":  # a CNN's model.npz where the checkpoint was
            cnn = rg.nn.Sequential(rg.nn.Conv2d(1, 4, 3), rg.nn.Flatten(), rg.nn.Linear(144, 10))
            arrays = {k: np.asarray(v) for k, v in cnn.state_dict().items()}
        elif name == "a buffer missing":  # a half-written optimizer state
            del arrays["optim/0/exp_avg"]
        elif name == "a wrong shape":
            arrays["model/wpe.weight"] = arrays["model/wpe.weight"][:, :3]
        elif name == "meta not JSON":
            arrays["meta"] = np.array("{step: 2")
        np.savez(path, **arrays)

    return edit


@pytest.mark.parametrize(
    "damage",
    ["truncated", "empty", "another model's", "a buffer missing", "a wrong shape", "meta not JSON"],
)
@pytest.mark.parametrize("command", ["sample", "resume"])
def test_a_damaged_checkpoint_is_one_line_and_the_run_is_kept(gpt_run, tmp_path, damage, command):
    source, _ = gpt_run
    folder = tmp_path / "run"
    folder.mkdir()
    for name in os.listdir(source):
        (folder / name).write_bytes((source / name).read_bytes())
    _damage(damage)(folder)
    before = _files(folder)
    if command == "sample":
        code, err = _cli("sample", "--out", str(folder), "--tokens", "5")
    else:
        code, err = _cli("train", *GPT[:-4], "--steps", "4", "--out", str(folder), "--resume")
    if command == "sample" and damage == "a buffer missing":  # sample reads the model alone
        assert code == 0 and err == "" and _files(folder) == before
        return
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith(f"retrograd {'train' if command == 'resume' else command}: ")
    assert "checkpoint.npz" in lines[0] and "Traceback" not in err
    assert _files(folder) == before  # nothing saved is lost or changed


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (b"", "fewer than 2 characters"),
        (bytes(range(128, 256)) * 8, "is not utf-8 text"),
        (None, "no text file"),  # a folder
        (b"ab", "longer than the block size"),
    ],
)
def test_a_text_that_cannot_be_learned_is_one_line_before_any_file(tmp_path, text, fragment):
    path = tmp_path / "text.txt"
    if text is None:
        path.mkdir()
    else:
        path.write_bytes(text)
    out = tmp_path / "out"
    code, err = _cli("train", *GPT, "--text", str(path), "--out", str(out))
    assert code in (1, 2) and len(err.strip().splitlines()) == 1 and fragment in err, err
    assert not out.exists() or os.listdir(out) == []


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--steps", "0"],
        ["train", "--lr", "nan"],
        ["train", "--model", "gpt", "--dropout", "1"],
        ["train", "--model", "gpt", "--encoding", "no-such-codec"],
        ["train", "--checkpointing", "budget:lots"],
        ["train", "--model", "resnet"],
        ["train", "--epochs", "2", "--model", "gpt"],
        ["sample", "--temperature", "-1"],
        ["sample", "--top-k", "0"],
        ["graph", "--batch-size", "x"],
        ["bench", "--timeout", "inf"],
        ["frobnicate"],
    ],
)
def test_a_wrong_command_line_is_one_line_and_status_2(args):
    code, err = _cli(*args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("retrograd") and "Traceback" not in err


def test_a_run_into_another_runs_folder_is_refused_and_the_files_kept(gpt_run, tmp_path):
    folder, text = gpt_run
    before = _files(folder)
    model = ["--model", "mlp", "--epochs", "1", "--out", str(folder)]
    for args in (model, [*GPT, "--text", str(text), "--out", str(folder)]):
        code, err = _cli("train", *args)
        assert code == 1 and "holds another run" in err and "--overwrite" in err, err
    code, err = _cli("graph", "--out", str(folder / "model.npz"))
    assert code == 1 and "is a file, not a folder" in err
    code, err = _cli("sample", "--out", str(folder), "--prompt", "\u2603")
    assert code == 1 and "characters the model never saw" in err
    assert _files(folder) == before


# -- numerical edge input against torch ------------------------------------------------------
_BIG = np.array(
    [[1e30, -1e30, 3.0], [np.inf, 1.0, 2.0], [np.nan, 0, 1], [-np.inf, -np.inf, -np.inf]],
    np.float32,
)
_EMPTY = np.zeros((0, 3), np.float32)
_NO_CLASSES = np.zeros((0,), np.int64)


def _fn(lib, name):
    return getattr(torch.nn.functional if lib is torch else F, name)


EDGE_CASES = {
    "softmax of inf, nan, huge": (lambda lib, t: _fn(lib, "softmax")(t[0], dim=1), [_BIG]),
    "log_softmax of inf, nan, huge": (lambda lib, t: _fn(lib, "log_softmax")(t[0], dim=1), [_BIG]),
    "logsumexp of inf, nan, huge": (lambda lib, t: lib.logsumexp(t[0], dim=1), [_BIG]),
    "logsumexp of -inf only": (
        lambda lib, t: lib.logsumexp(t[0], dim=0),
        [np.full((3, 2), -np.inf, np.float32)],
    ),
    "cross_entropy of huge logits": (
        lambda lib, t: _fn(lib, "cross_entropy")(t[0], t[1]),
        [
            np.array([[1e30, -1e30, 3.0], [1e4, 1, 2], [5, 0, 1], [0, 0, 88]], np.float32),
            np.array([0, 1, 2, 0]),
        ],
    ),
    "cross_entropy of inf logits": (
        lambda lib, t: _fn(lib, "cross_entropy")(t[0], t[1], reduction="none"),
        [_BIG, np.array([0, 1, 2, 0])],
    ),
    "cross_entropy of an empty batch": (
        lambda lib, t: _fn(lib, "cross_entropy")(t[0], t[1]),
        [_EMPTY, _NO_CLASSES],
    ),
    "cross_entropy summed over an empty batch": (
        lambda lib, t: _fn(lib, "cross_entropy")(t[0], t[1], reduction="sum"),
        [_EMPTY, _NO_CLASSES],
    ),
    "cross_entropy of an empty sequence": (
        lambda lib, t: _fn(lib, "cross_entropy")(t[0], t[1]),
        [np.zeros((2, 3, 0), np.float32), np.zeros((2, 0), np.int64)],
    ),
    "cross_entropy of a target out of range": (
        lambda lib, t: _fn(lib, "cross_entropy")(t[0], t[1]),
        [np.array([[0.0, 0, 1]], np.float32), np.array([3])],
    ),
    "cross_entropy with smoothing and -inf": (
        lambda lib, t: _fn(lib, "cross_entropy")(t[0], t[1], label_smoothing=0.1),
        [np.array([[-np.inf, 0, 1]], np.float32), np.array([1])],
    ),
    "cross_entropy ignoring every target": (
        lambda lib, t: _fn(lib, "cross_entropy")(t[0], t[1], ignore_index=1),
        [np.array([[0.0, 0, 1]], np.float32), np.array([1])],
    ),
    "nll_loss of an empty batch": (
        lambda lib, t: _fn(lib, "nll_loss")(t[0], t[1]),
        [_EMPTY, _NO_CLASSES],
    ),
    "mse_loss of an empty batch": (lambda lib, t: _fn(lib, "mse_loss")(t[0], t[0] * 2), [_EMPTY]),
    "binary_cross_entropy_with_logits of inf": (
        lambda lib, t: _fn(lib, "binary_cross_entropy_with_logits")(t[0], t[1]),
        [np.array([np.inf, -np.inf, 1e30, -1e30], np.float32), np.array([1, 0, 0, 1], np.float32)],
    ),
    "binary_cross_entropy of input out of range": (
        lambda lib, t: _fn(lib, "binary_cross_entropy")(t[0], t[1]),
        [np.array([1.5, -0.1], np.float32), np.array([1, 0], np.float32)],
    ),
    "softmax over a zero-size dim": (
        lambda lib, t: _fn(lib, "softmax")(t[0], dim=1),
        [np.zeros((3, 0), np.float32)],
    ),
    "logsumexp over a zero-size dim": (
        lambda lib, t: lib.logsumexp(t[0], dim=1),
        [np.zeros((3, 0), np.float32)],
    ),
    "softmax of a -inf row": (
        lambda lib, t: _fn(lib, "softmax")(t[0], dim=1),
        [np.array([[-np.inf, -np.inf], [0, -np.inf]], np.float32)],
    ),
    "logsigmoid and softplus of inf": (
        lambda lib, t: _fn(lib, "logsigmoid")(t[0]) + _fn(lib, "softplus")(t[0]),
        [np.array([np.inf, -np.inf, -1e30, 1e30, np.nan], np.float32)],
    ),
    "attention with every key masked": (
        lambda lib, t: _fn(lib, "scaled_dot_product_attention")(t[0], t[0], t[0], attn_mask=t[1]),
        [np.ones((1, 2, 3), np.float32), np.zeros((2, 2), bool)],
    ),
    "normalize of zeros": (
        lambda lib, t: _fn(lib, "normalize")(t[0]),
        [np.zeros((3, 2), np.float32)],
    ),
    "softmax of ints": (lambda lib, t: _fn(lib, "softmax")(t[0], dim=0), [np.array([1, 2, 3])]),
    "log_softmax of ints": (
        lambda lib, t: _fn(lib, "log_softmax")(t[0], dim=0),
        [np.array([1, 2])],
    ),
    "gelu of ints": (lambda lib, t: _fn(lib, "gelu")(t[0]), [np.array([1, 2, 3])]),
    "mean of ints": (lambda lib, t: t[0].mean(), [np.array([1, 2, 3])]),
    "embedding of floats": (
        lambda lib, t: _fn(lib, "embedding")(t[0], t[1]),
        [np.array([1.0], np.float32), np.ones((4, 2), np.float32)],
    ),
    "embedding of an index out of range": (
        lambda lib, t: _fn(lib, "embedding")(t[0], t[1]),
        [np.array([4]), np.ones((4, 2), np.float32)],
    ),
    "batch_norm of one value per channel": (
        lambda lib, t: _fn(lib, "batch_norm")(t[0], None, None, training=True),
        [np.ones((1, 3), np.float32)],
    ),
    "layer_norm of the wrong width": (
        lambda lib, t: _fn(lib, "layer_norm")(t[0], (3,)),
        [np.ones((2, 4), np.float32)],
    ),
    "conv2d of an input smaller than the kernel": (
        lambda lib, t: _fn(lib, "conv2d")(t[0], t[1]),
        [np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 3, 3), np.float32)],
    ),
    "conv2d of an empty batch": (
        lambda lib, t: _fn(lib, "conv2d")(t[0], t[1]),
        [np.ones((0, 1, 4, 4), np.float32), np.ones((2, 1, 3, 3), np.float32)],
    ),
    "max_pool2d of an input smaller than the kernel": (
        lambda lib, t: _fn(lib, "max_pool2d")(t[0], 3),
        [np.ones((1, 1, 2, 2), np.float32)],
    ),
}


def _outcome(lib, call, arrays):
    tensors = [lib.tensor(a) for a in arrays]
    if tensors[0].dtype in ((torch.float32,) if lib is torch else (rg.float32,)):
        tensors[0] = tensors[0].requires_grad_() if lib is torch else tensors[0].require_grad()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = call(lib, tensors)
            values = np.asarray(out.detach().numpy() if lib is torch else out.numpy())
            grad = None
            if out.numel() and tensors[0].requires_grad:
                if lib is torch:
                    grad = torch.autograd.grad(out.sum(), tensors[0])[0].numpy()
                else:
                    grad = tensors[0].grad(out.sum().backward()).numpy()
    except Exception as error:  # compared below: ours must be the hierarchy's
        return error
    return values, grad


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_numerical_edge_input_agrees_with_torch(case):
    call, arrays = EDGE_CASES[case]
    ours, theirs = _outcome(rg, call, arrays), _outcome(torch, call, arrays)
    if isinstance(theirs, Exception):
        assert isinstance(ours, rg.RetrogradError), f"torch: {theirs!r}; ours: {ours!r}"
        return
    assert not isinstance(ours, Exception), f"torch gives a result; ours: {ours!r}"
    for mine, reference in zip(ours, theirs):
        if reference is None:
            continue
        assert mine.shape == reference.shape
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6, equal_nan=True)


# -- module and optimizer misuse against torch -----------------------------------------------
def _both(build):
    """A torch layer and ours with the same values."""
    theirs = build(torch)
    ours = build(rg)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize(
    "edit",
    [
        lambda s: s.pop("bias"),
        lambda s: s.__setitem__("extra", np.ones(2, np.float32)),
        lambda s: (s.pop("weight"), s.__setitem__("0.weight", np.ones(2, np.float32))),
    ],
)
def test_load_state_dict_not_strict_reports_the_keys_as_torch(edit):
    ours, theirs = _both(lambda lib: lib.nn.Linear(3, 2))
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    edit(state)
    with pytest.raises(RuntimeError):
        theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    with pytest.raises(rg.errors.KeyMismatchError, match=r"^load_state_dict: "):
        ours.load_state_dict(state)
    expected = theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    result = ours.load_state_dict(state, strict=False)
    assert sorted(result.missing_keys) == sorted(expected.missing_keys)
    assert sorted(result.unexpected_keys) == sorted(expected.unexpected_keys)
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(ours(rg.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy())


def test_a_state_of_the_wrong_shape_is_refused_strict_or_not_and_changes_nothing():
    ours, theirs = _both(lambda lib: lib.nn.Linear(3, 2))
    before = ours.weight.numpy().copy()
    state = {"weight": np.ones((3, 3), np.float32), "bias": np.ones(2, np.float32)}
    for strict in (True, False):
        with pytest.raises(RuntimeError, match="size mismatch"):
            theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=strict)
        with pytest.raises(rg.ShapeError, match=r"'weight' has shape \[2, 3\], the state has"):
            ours.load_state_dict(state, strict=strict)
    np.testing.assert_array_equal(ours.weight.numpy(), before)


@pytest.mark.parametrize(
    ("params", "error"),
    [
        (lambda lib, p: [p * 2], ValueError),  # a non-leaf
        (lambda lib, p: [], ValueError),
        (lambda lib, p: p, TypeError),  # a tensor, not an iterable of them
        (lambda lib, p: [{"params": [p]}, {"params": [p]}], ValueError),  # one in two groups
    ],
)
def test_optimizer_parameter_misuse_is_refused_as_torch(params, error):
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.ones(3))
        expected = rg.RetrogradError if lib is rg else error
        with pytest.raises(expected):
            lib.optim.SGD(params(lib, p), lr=0.1)


@pytest.mark.parametrize("name", ["a.b", "", 3])
def test_a_bad_parameter_name_is_refused_as_torch(name):
    with pytest.raises((KeyError, TypeError)):
        torch.nn.Linear(1, 1).register_parameter(name, None)
    layer = rg.nn.Linear(1, 1)
    # torch's KeyError for a bad str, its TypeError for a name that is no str
    expected = rg.InvalidArgumentError if isinstance(name, str) else rg.DTypeError
    with pytest.raises(expected, match="register_parameter: invalid name"):
        layer.register_parameter(name, None)
    assert sorted(layer.state_dict()) == ["bias", "weight"]


def test_a_loaded_state_without_unused_buffers_steps_as_torch():
    """What a step does not keep is not asked for: SGD without momentum keeps no buffer
    (torch saves its ``momentum_buffer`` as None), and the state loads."""
    reference = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    theirs = torch.optim.SGD([reference], lr=0.1)
    groups = theirs.state_dict()["param_groups"]
    theirs.load_state_dict({"state": {0: {"momentum_buffer": None}}, "param_groups": groups})
    (reference * reference).sum().backward()
    theirs.step()
    p = rg.nn.Parameter(rg.tensor([1.0, -2.0]))
    ours = rg.optim.SGD([p], lr=0.1)
    ours.load_state_dict({"state": {0: {"momentum_buffer": None}}, "param_groups": groups})
    ours.step((p * p).sum().backward())
    np.testing.assert_allclose(p.numpy(), reference.detach().numpy())
