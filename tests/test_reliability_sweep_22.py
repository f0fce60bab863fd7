"""Round 22 of the reliability sweep: the product around the engine, as a careless user and a
full disk meet it. The ``retrograd`` command (``train --model gpt``, ``--resume``, ``sample``)
and the library's files (``rg.save``/``rg.load``, ``Module.save``/``load_state_dict``) must
never lose a saved model, and every bad file or flag must be one line
``retrograd COMMAND: what — what to do`` (exit 2 for a wrong command line, 1 for a failure,
130 interrupted), never a traceback.

Probed here: a full disk or quota (``ENOSPC``/``EDQUOT`` raised by the write, the ``fsync`` or
the rename of every save path), an interrupt during a save, read-only and missing folders,
checkpoints that are truncated, empty, bit-flipped, of another format (torch's ``.pt``, a
text, an ``.npy``), a folder or a symbolic-link loop in the checkpoint's place, texts that
cannot be learnt, absurd arguments, and two threads saving to one path at once. What torch
does with the same file is the reference where it has one. The defects found are fixed and
kept by ``test_reliability_regressions_22.py``.

The command runs by its ``main()`` in this process (:func:`cli_here.run_main`); a GPT run
trains on the suite's inner backend (``--backend``)."""

from __future__ import annotations

import errno
import io
import os
import threading
import zipfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch
from cli_here import run_main
from retrograd import nn

TEXT = "".join(f"def f{i}(x):\n    return x * {i % 7} + {i % 5}\n\n" for i in range(40))
GPT = [
    "--model", "gpt", "--n-layer", "1", "--n-head", "2", "--n-embd", "8", "--block-size", "8",
    "--batch-size", "2", "--eval-interval", "2", "--backend", "torch" if on_torch() else "numpy",
]  # fmt: skip


def one_line(completed, command: str, code: int) -> str:
    """The error line of a failed command, checked: the exit status, one line on stderr in the
    form ``retrograd COMMAND: what — what to do``, no traceback."""
    assert completed.returncode == code, completed.stdout + completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"retrograd {command}: ") and " — " in lines[0], lines[0]
    return lines[0]


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` (hidden ones too: a leftover temporary file would show)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def failing(error: int):
    """A stand-in for a write, sync or rename that fails as a full disk (or quota) makes it."""

    def fail(*_, **__):
        raise OSError(error, os.strerror(error))

    return fail


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """A finished 2-step GPT run's folder (copied by the tests that change it) and the options
    that trained it."""
    folder = tmp_path_factory.mktemp("gpt")
    text = folder / "code.txt"
    text.write_text(TEXT)
    options = [*GPT, "--text", str(text)]
    completed = run_main("train", *options, "--steps", "2", "--out", str(folder / "run"))
    assert completed.returncode == 0, completed.stderr
    return folder / "run", options


def copy_of(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / folder.name
    copy.mkdir()
    for name, data in files_of(folder).items():
        (copy / name).write_bytes(data)
    return copy


# == the library's saves: whole or not at all ===================================================
def _partial_savez(error: int):
    """``np.savez`` (``savez(file, **arrays)``), or rg.save's copy of the file it made into
    the file (``copy_to(prepared, file)``), that writes part of an archive, then fails as a
    full disk does."""

    def savez(*args, **kwargs):
        file = args[1] if len(args) == 2 else args[0]
        file.write(b"PK\x03\x04 partial")
        raise OSError(error, os.strerror(error))

    return savez


SAVES = {
    "rg.save": (
        "retrograd.serialization._Prepared.copy_to",
        lambda model, path: rg.save(model.state_dict(), path),
    ),
    "Module.save": ("retrograd.nn.modules.module.np.savez", lambda model, path: model.save(path)),
}


@pytest.mark.parametrize("save", SAVES)
@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("write", errno.ENOSPC),
        ("write", errno.EDQUOT),
        ("fsync", errno.ENOSPC),
        ("rename", errno.EDQUOT),
    ],
)
def test_a_save_on_a_full_disk_keeps_the_previous_file(save, where, error, tmp_path):
    # torch.save opens the path and writes into it: the previous file is gone at the first
    # byte, and a full disk leaves a truncated one
    savez, write = SAVES[save]
    path = tmp_path / "model.npz"
    rg.seed(0)
    write(nn.Linear(3, 2), path)
    before = path.read_bytes()
    failure = {
        "write": (savez, _partial_savez(error)),
        "fsync": ("os.fsync", failing(error)),
        "rename": ("os.replace", failing(error)),
    }[where]
    rg.seed(1)
    with mock.patch(*failure), pytest.raises(OSError) as raised:
        write(nn.Linear(3, 2), path)
    assert raised.value.errno == error
    assert raised.value.filename == str(path)  # the file it was to become, not a temporary
    assert files_of(tmp_path) == {"model.npz": before}


def test_an_interrupt_during_a_save_keeps_the_previous_file(tmp_path):
    path = tmp_path / "checkpoint.pt"
    rg.save({"step": 1, "w": rg.ones(3)}, path)
    before = path.read_bytes()

    def interrupted(*_, **__):
        raise KeyboardInterrupt

    with (
        mock.patch("retrograd.serialization._Prepared.copy_to", interrupted),
        pytest.raises(KeyboardInterrupt),
    ):
        rg.save({"step": 2, "w": rg.zeros(3)}, path)
    assert files_of(tmp_path) == {"checkpoint.pt": before}
    assert rg.load(path)["step"] == 1


def test_an_interrupt_between_the_renames_of_a_run_keeps_the_previous_files(gpt_run, tmp_path):
    run, options = gpt_run
    out = copy_of(run, tmp_path)
    before = files_of(out)
    real_replace = os.replace

    def replace_interrupted_at_the_model(source, target):
        if Path(target).name == "model.npz":
            raise KeyboardInterrupt
        return real_replace(source, target)

    with mock.patch("os.replace", replace_interrupted_at_the_model):
        completed = run_main("train", *options, "--steps", "4", "--out", str(out), "--resume")
    line = one_line(completed, "train", 130)
    assert "(step 4) is kept" in line  # the checkpoint was committed before the outputs
    after = files_of(out)
    assert {name for name in before if after[name] != before[name]} == {"checkpoint.npz"}
    assert after.keys() == before.keys()


def test_two_threads_saving_to_one_path_leave_one_whole_file(tmp_path):
    # torch.save opens the path and writes: two writers interleave in one file. Here each
    # writes a temporary file of its own, and the last rename wins whole.
    path = tmp_path / "shared.pt"
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def saver(value: float) -> None:
        barrier.wait()
        for step in range(15):
            try:
                rg.save({"w": rg.full((64,), value), "step": step}, path)
            except BaseException as error:  # reported by the assertion below
                errors.append(error)

    threads = [threading.Thread(target=saver, args=(float(v),)) for v in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    loaded = rg.load(path)
    values = set(loaded["w"].tolist())
    assert len(values) == 1 and values <= {1.0, 2.0} and loaded["step"] == 14
    assert [p.name for p in tmp_path.iterdir()] == ["shared.pt"]


@pytest.mark.parametrize(
    "kind", ["empty", "truncated", "bit flip", "text", "npy", "folder", "symlink loop"]
)
def test_a_file_that_is_no_save_is_a_named_error_for_load_and_load_state_dict(kind, tmp_path):
    rg.seed(0)
    model = nn.Linear(3, 2)
    buffer = io.BytesIO()
    rg.save(model.state_dict(), buffer)
    good = buffer.getvalue()
    path = tmp_path / "model.pt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif kind == "bit flip":  # inside the first storage's values: the zip's CRC catches it
        flipped = bytearray(good)
        start = zipfile.ZipFile(io.BytesIO(good)).getinfo("archive/data/0").header_offset
        name, extra = (
            int.from_bytes(good[start + at : start + at + 2], "little") for at in (26, 28)
        )
        flipped[start + 30 + name + extra + 2] ^= 0x10
        path.write_bytes(bytes(flipped))
    elif kind == "text":
        path.write_text("weights: 1 2 3\n")
    elif kind == "npy":
        np.save(tmp_path / "model.npy", np.ones(3))
        os.replace(tmp_path / "model.npy", path)
    elif kind == "folder":
        path.mkdir()
    else:
        os.symlink(tmp_path / "a", tmp_path / "b")
        os.symlink(tmp_path / "b", tmp_path / "a")
        os.symlink(tmp_path / "a", path)
    before = [p.numpy().copy() for p in model.parameters()]
    expected = (rg.InvalidArgumentError, OSError)  # OSError: as open() (and torch.load) say
    if kind != "npy":  # rg.load gives an .npy's array back, as np.load does
        with pytest.raises(expected):
            rg.load(path)
    with pytest.raises(expected):
        model.load_state_dict(path)
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))


# == the command: checkpoints ====================================================================
@pytest.mark.parametrize(
    "kind",
    [
        "empty",
        "truncated",
        "bit flip",
        "text",
        "torch",
        "npy",
        "folder",
        "symlink loop",
        "dangling",
    ],
)
def test_a_checkpoint_that_is_no_checkpoint_is_one_line_for_sample_and_resume(
    gpt_run, tmp_path, kind
):
    run, options = gpt_run
    out = tmp_path / "run"
    out.mkdir()
    good = (run / "checkpoint.npz").read_bytes()
    checkpoint = out / "checkpoint.npz"
    if kind == "empty":
        checkpoint.write_bytes(b"")
    elif kind == "truncated":
        checkpoint.write_bytes(good[: len(good) * 2 // 3])
    elif kind == "bit flip":
        flipped = bytearray(good)
        flipped[good.index(b"\x93NUMPY") + 140] ^= 0x01
        checkpoint.write_bytes(bytes(flipped))
    elif kind == "text":
        checkpoint.write_text("step 2\n")
    elif kind == "torch":
        torch.save({"model": torch.nn.Linear(2, 2).state_dict(), "step": 2}, checkpoint)
    elif kind == "npy":
        np.save(out / "x.npy", np.ones(3))
        os.replace(out / "x.npy", checkpoint)
    elif kind == "folder":
        checkpoint.mkdir()
    elif kind == "symlink loop":
        os.symlink(out / "a", out / "b")
        os.symlink(out / "b", out / "a")
        os.symlink(out / "a", checkpoint)
    else:
        os.symlink(out / "gone.npz", checkpoint)
    before = files_of(out)
    for command in (
        ["sample", "--out", str(out), "--tokens", "3"],
        ["train", *options, "--out", str(out), "--resume"],
    ):
        line = one_line(run_main(*command), command[0], 1)
        assert str(checkpoint) in line, line
    assert files_of(out) == before


def test_resume_with_a_checkpoint_of_another_model_is_refused(gpt_run, tmp_path):
    run, options = gpt_run
    out = copy_of(run, tmp_path)
    before = files_of(out)
    wider = [*options, "--n-embd", "16"]  # argparse keeps the last --n-embd
    line = one_line(run_main("train", *wider, "--out", str(out), "--resume"), "train", 2)
    assert "--n-embd 16 differs from the saved run's 8" in line
    line = one_line(run_main("train", "--model", "mlp", "--out", str(out), "--resume"), "train", 2)
    assert "--resume is an option of --model gpt" in line
    assert files_of(out) == before


@pytest.mark.parametrize(
    "where",
    [
        ("retrograd.app.checkpoints.np.savez", _partial_savez(errno.ENOSPC)),
        ("os.fsync", failing(errno.EDQUOT)),
    ],
    ids=["write", "fsync"],
)
def test_a_full_disk_at_a_resumed_runs_checkpoint_keeps_the_run(gpt_run, tmp_path, where):
    run, options = gpt_run
    out = copy_of(run, tmp_path)
    before = files_of(out)
    with mock.patch(*where):
        completed = run_main("train", *options, "--steps", "4", "--out", str(out), "--resume")
    line = one_line(completed, "train", 1)
    assert "checkpoint.npz" in line and "previous files are intact" in line, line
    assert files_of(out) == before


def test_an_interrupt_while_checkpointing_keeps_the_checkpoint_to_resume(gpt_run, tmp_path):
    run, options = gpt_run
    out = copy_of(run, tmp_path)
    before = files_of(out)

    def interrupted(*_, **__):
        raise KeyboardInterrupt

    with mock.patch("retrograd.app.checkpoints.np.savez", interrupted):
        completed = run_main("train", *options, "--steps", "4", "--out", str(out), "--resume")
    line = one_line(completed, "train", 130)
    assert "(step 2) is kept" in line and "--resume" in line
    assert files_of(out) == before


def test_a_read_only_or_missing_out_folder(gpt_run, tmp_path):
    _, options = gpt_run
    with mock.patch("tempfile.mkstemp", failing(errno.EROFS)):
        completed = run_main("train", *options, "--steps", "2", "--out", str(tmp_path / "ro"))
    line = one_line(completed, "train", 1)
    assert "Read-only file system" in line and "choose a folder you can write in" in line
    assert not (tmp_path / "ro").exists()  # the folder it made for the run is gone again
    (tmp_path / "file").write_text("x")
    line = one_line(
        run_main("train", *options, "--out", str(tmp_path / "file" / "run")), "train", 1
    )
    assert "cannot create --out" in line
    line = one_line(run_main("sample", "--out", str(tmp_path / "missing")), "sample", 1)
    assert "no GPT checkpoint" in line


# == the command: texts and arguments ===========================================================
@pytest.mark.parametrize(
    ("data", "code", "phrase"),
    [
        (b"", 1, "fewer than 2 characters"),
        (b"a", 1, "fewer than 2 characters"),
        (bytes(range(128, 256)) * 4, 1, "is not utf-8 text"),
        ("caf\u00e9 noir ".encode("latin-1") * 20, 1, "byte 0xe9 at offset 3"),
        ("def f(x): return x\n".encode("utf-16") * 20, 1, "pass --encoding"),
        (b"abcdefgh", 2, "must be longer than the block size 8"),
    ],
    ids=["empty", "one character", "binary", "latin-1", "utf-16", "shorter than a window"],
)
def test_a_text_that_cannot_be_learnt_is_one_line_before_any_file(tmp_path, data, code, phrase):
    text = tmp_path / "text.txt"
    text.write_bytes(data)
    out = tmp_path / "run"
    completed = run_main("train", *GPT, "--text", str(text), "--out", str(out))
    assert phrase in one_line(completed, "train", code)
    assert not out.exists()


@pytest.mark.parametrize(
    ("arguments", "code", "phrase"),
    [
        (["train", "--model", "gpt", "--steps", "0"], 2, "must be a positive integer"),
        (["train", "--model", "gpt", "--steps", "-5"], 2, "must be a positive integer"),
        (["train", "--model", "gpt", "--batch-size", "1", "--workers", "2"], 2, "worker count"),
        (["train", "--model", "gpt", "--n-embd", "10", "--n-head", "3"], 2, "multiple of n_head"),
        (["train", "--model", "transformer"], 2, "invalid choice: 'transformer'"),
        (["train", "--model", "gpt", "--device", "cuda"], 2, "--device needs --backend torch"),
        (["sample", "--tokens", "0"], 2, "must be a positive integer"),
        (["sample", "--tokens", "1e99"], 2, "must be a positive integer"),
        (["sample", "--temperature", "-1"], 2, "positive finite number"),
        (["train", "--steps", "3"], 2, "of --model gpt, not of --model cnn"),
    ],
)
def test_an_absurd_argument_is_one_line(tmp_path, arguments, code, phrase):
    completed = run_main(*arguments, "--out", str(tmp_path / "run"))
    assert phrase in one_line(completed, arguments[0], code)
    assert not (tmp_path / "run").exists()


def test_a_device_this_machine_lacks_is_one_line(gpt_run, tmp_path):
    _, options = gpt_run
    device = "cuda:7" if torch.cuda.device_count() < 8 else "cuda:99"
    settings = [*options, "--backend", "torch", "--device", device]
    completed = run_main("train", *settings, "--out", str(tmp_path / "run"))
    assert "is not available" in one_line(completed, "train", 1)
    assert not (tmp_path / "run").exists()


def test_sampling_with_a_top_k_beyond_the_vocabulary_or_an_unknown_prompt(gpt_run):
    run, _ = gpt_run
    completed = run_main("sample", "--out", str(run), "--tokens", "5", "--top-k", "100000")
    assert completed.returncode == 0, completed.stderr
    assert len(completed.stdout) == 6 and set(completed.stdout[:-1]) <= set(TEXT)
    line = one_line(run_main("sample", "--out", str(run), "--prompt", "\u00e9"), "sample", 1)
    assert "characters the model never saw" in line
