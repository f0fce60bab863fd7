"""Round 22 of the reliability work, on the product around the engine (the ``retrograd``
command, ``rg.save``/``rg.load``, ``state_dict`` files, MNIST files): the regressions of each
defect the sweep (``test_reliability_sweep_22.py``) and its probes found, under a heading per
defect; each fails on the code before the fix.

The command runs by its ``main()`` in this process (:func:`cli_here.run_main`); a GPT run
trains on the suite's inner backend (``--backend``), so both passes of the suite train. What a
file holds afterwards is compared with its bytes before, or with what torch does with the same
file."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch
from cli_here import run_main
from retrograd import nn
from retrograd.files import FileSet

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
    """Every entry of ``folder`` (hidden ones too: a leftover temporary file would show)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


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


def with_central_field(archive: bytes, offset: int, value: int) -> bytes:
    """``archive`` with a 2-byte field of its first central-directory record set to ``value``
    (a flipped bit in a zip header, which no CRC covers): at 8 the flags (1: encrypted), at 10
    the compression method (99: one zipfile does not know)."""
    data = bytearray(archive)
    record = data.index(b"PK\x01\x02")
    data[record + offset : record + offset + 2] = value.to_bytes(2, "little")
    return bytes(data)


DAMAGED_HEADERS = {"encrypted": (8, 1), "unknown compression": (10, 99)}


# == a flipped bit in a zip header ===============================================================
@pytest.mark.parametrize("damage", DAMAGED_HEADERS)
def test_load_state_dict_of_a_file_with_a_damaged_zip_header_is_an_invalid_argument(
    damage, tmp_path
):
    # zipfile's bare RuntimeError ("File 'weight.npy' is encrypted, password required") and
    # NotImplementedError ("That compression method is not supported") came through; rg.load
    # already refused such a file as damaged, and torch refuses its own damaged files.
    rg.seed(0)
    model = nn.Linear(3, 2)
    buffer = io.BytesIO()
    np.savez(buffer, **model.state_dict())
    path = tmp_path / "model.npz"
    path.write_bytes(with_central_field(buffer.getvalue(), *DAMAGED_HEADERS[damage]))
    torch_file = io.BytesIO()
    torch.save(torch.nn.Linear(3, 2).state_dict(), torch_file)
    with pytest.raises(RuntimeError):
        torch.load(io.BytesIO(with_central_field(torch_file.getvalue(), *DAMAGED_HEADERS[damage])))
    before = [p.numpy().copy() for p in model.parameters()]
    with pytest.raises(rg.InvalidArgumentError, match=r"model\.npz is not a readable \.npz"):
        model.load_state_dict(path)
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))


def test_load_state_dict_of_a_damaged_file_object_names_it(tmp_path):
    # The error's own message took os.fspath of the file object: a bare TypeError ("expected
    # str, bytes or os.PathLike object, not BytesIO") in place of the damage.
    buffer = io.BytesIO()
    np.savez(buffer, **nn.Linear(3, 2).state_dict())
    truncated = io.BytesIO(buffer.getvalue()[:100])
    with pytest.raises(rg.InvalidArgumentError, match=r"the file object is not a readable \.npz"):
        nn.Linear(3, 2).load_state_dict(truncated)


def test_load_state_dict_of_a_torch_file_reads_it_as_torch_does(tmp_path):
    # A torch.save file is a zip too: its entries came out as raw bytes and the line was a
    # KeyMismatchError listing 't/data.pkl', 't/byteorder'... as "unexpected" keys (or, with
    # matching names, a DTypeError quoting the entry's bytes). Since torch's files are read
    # (retrograd/torch_files.py), the state dict loads with torch's values.
    path = tmp_path / "linear.pt"
    theirs = torch.nn.Linear(3, 2)
    torch.save(theirs.state_dict(), path)
    ours = nn.Linear(3, 2)
    ours.load_state_dict(path)
    np.testing.assert_array_equal(ours.weight.detach().numpy(), theirs.weight.detach().numpy())
    np.testing.assert_array_equal(rg.load(path)["bias"].numpy(), theirs.bias.detach().numpy())


@pytest.mark.parametrize("damage", DAMAGED_HEADERS)
@pytest.mark.parametrize("command", ["sample", "resume"])
def test_a_checkpoint_with_a_damaged_zip_header_is_said_damaged(gpt_run, tmp_path, damage, command):
    # The command said "unexpected NotImplementedError: That compression method is not
    # supported — ... please report it" (or RuntimeError: "... is encrypted, password
    # required"), as for a bug of its own, where the file is damaged.
    run, options = gpt_run
    out = copy_of(run, tmp_path)
    checkpoint = out / "checkpoint.npz"
    checkpoint.write_bytes(with_central_field(checkpoint.read_bytes(), *DAMAGED_HEADERS[damage]))
    before = files_of(out)
    if command == "sample":
        completed = run_main("sample", "--out", str(out), "--tokens", "3")
    else:
        completed = run_main("train", *options, "--out", str(out), "--resume")
    line = one_line(completed, "train" if command == "resume" else "sample", 1)
    assert f"{checkpoint} is damaged" in line and "not a readable .npz archive" in line, line
    assert files_of(out) == before


# == a set of files replaced whole ===============================================================
def test_a_file_set_whose_second_rename_fails_puts_the_first_back(tmp_path):
    # FileSet promises "when one of them cannot be written, none is replaced", but a rename
    # that failed (ENOSPC where the folder needs a block, EDQUOT) after the first one left the
    # first file new and the second old: a metrics.json of one run beside another's model.
    (tmp_path / "a.txt").write_text("old a")
    (tmp_path / "b.txt").write_text("old b")
    real_replace = os.replace
    calls = []

    def replace_failing_the_second(source, target):
        calls.append(target)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_replace(source, target)

    with (
        mock.patch("os.replace", replace_failing_the_second),
        pytest.raises(OSError, match="No space left") as raised,
        FileSet(tmp_path) as files,
    ):
        for name in ("a.txt", "b.txt", "c.txt"):
            with files.open(name, "w") as file:
                file.write(f"new {name[0]}")
    assert raised.value.filename == str(tmp_path / "b.txt")
    assert files_of(tmp_path) == {"a.txt": b"old a", "b.txt": b"old b"}


def test_a_run_whose_files_cannot_all_be_renamed_keeps_the_previous_ones(gpt_run, tmp_path):
    # The line said "free disk space (the previous files are intact)" while metrics.json was
    # already the resumed run's and model.npz the old one's.
    run, options = gpt_run
    out = copy_of(run, tmp_path)
    before = files_of(out)
    real_replace = os.replace

    def replace_failing_at_the_model(source, target):
        if Path(target).name == "model.npz":
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        return real_replace(source, target)

    with mock.patch("os.replace", replace_failing_at_the_model):
        completed = run_main("train", *options, "--steps", "4", "--out", str(out), "--resume")
    line = one_line(completed, "train", 1)
    assert "model.npz: Disk quota exceeded" in line and "previous files are intact" in line
    after = files_of(out)
    assert after.keys() == before.keys()  # no temporary, no kept link left behind
    # the checkpoint of step 4 was saved before the outputs, by a commit of its own
    assert {name for name in before if after[name] != before[name]} == {"checkpoint.npz"}


# == --resume ====================================================================================
def test_resume_with_steps_behind_the_saved_step_is_refused(gpt_run, tmp_path):
    # It trained nothing and rewrote metrics.json with config steps 1 beside a summary, a
    # model and a checkpoint of step 2, exit status 0.
    run, options = gpt_run
    out = copy_of(run, tmp_path)
    before = files_of(out)
    completed = run_main("train", *options, "--steps", "1", "--out", str(out), "--resume")
    line = one_line(completed, "train", 2)
    assert "--steps 1 is behind the saved run, which is at step 2" in line
    assert files_of(out) == before


def test_resume_from_another_folder_finds_the_text_by_its_place_now(tmp_path, monkeypatch):
    # A run trained with --text code.txt (a path relative to its folder) could not be resumed
    # from anywhere else: without --text, "no text file at code.txt"; with --text naming the
    # same file (/abs/code.txt, even ./code.txt), "--text ... differs from the saved run's
    # code.txt" — a dead end short of going back to that folder.
    from retrograd.app.checkpoints import read_checkpoint

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "code.txt").write_text(TEXT)
    monkeypatch.chdir(project)
    first = run_main("train", *GPT, "--text", "code.txt", "--steps", "2", "--out", "run")
    assert first.returncode == 0, first.stderr
    out = str(project / "run")
    monkeypatch.chdir(elsewhere)
    line = one_line(run_main("train", *GPT, "--out", out, "--resume"), "train", 1)
    assert "the saved run's text code.txt is not there" in line and "pass --text" in line
    text = str(project / "code.txt")
    resumed = run_main("train", *GPT, "--text", text, "--steps", "4", "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert read_checkpoint(project / "run" / "checkpoint.npz").meta["step"] == 4
    monkeypatch.chdir(project)
    again = run_main(
        "train", *GPT, "--text", "./code.txt", "--steps", "6", "--out", "run", "--resume"
    )
    assert again.returncode == 0, again.stderr


def test_an_interrupted_gpt_run_names_the_checkpoint_to_resume(gpt_run, tmp_path):
    # The line was "retrograd train: interrupted": no "what to do", though the checkpoint of
    # the last evaluation is kept and --resume continues it.
    from retrograd.app.gpt import GPTTask

    run, options = gpt_run
    out = copy_of(run, tmp_path)
    before = files_of(out)

    def interrupted(*_):
        raise KeyboardInterrupt

    with mock.patch.object(GPTTask, "before_step", interrupted):
        completed = run_main("train", *options, "--steps", "4", "--out", str(out), "--resume")
    line = one_line(completed, "train", 130)
    assert f"{out / 'checkpoint.npz'} (step 2) is kept" in line and "--resume" in line, line
    assert files_of(out) == before


# == --out =======================================================================================
def test_an_out_folder_made_for_a_run_that_cannot_write_in_it_is_removed(tmp_path):
    # The run made --out, found it could not write there (a read-only mount, a quota) and
    # stopped with its one line, leaving the empty folder behind; a run that stops later (or
    # is interrupted) before writing removes the folder it made.
    text = tmp_path / "code.txt"
    text.write_text(TEXT)
    out = tmp_path / "run"

    def read_only(*_, **__):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    with mock.patch("tempfile.mkstemp", read_only):
        completed = run_main("train", *GPT, "--text", str(text), "--out", str(out))
    assert "cannot write in --out" in one_line(completed, "train", 1)
    assert not out.exists()


# == sample ======================================================================================
def test_sample_prints_each_character_as_it_comes_and_keeps_them_when_interrupted(gpt_run):
    # sample printed nothing until every character was made, each step copying the whole
    # text so far: --tokens 100000 sat silent for minutes, and an interrupt lost it all.
    run, _ = gpt_run
    whole = run_main("sample", "--out", str(run), "--tokens", "5", "--seed", "3")
    assert whole.returncode == 0, whole.stderr
    real_multinomial = rg.multinomial
    drawn = []

    def interrupted_at_the_sixth(*args, **kwargs):
        drawn.append(1)
        if len(drawn) == 6:
            raise KeyboardInterrupt
        return real_multinomial(*args, **kwargs)

    with mock.patch.object(rg, "multinomial", interrupted_at_the_sixth):
        completed = run_main("sample", "--out", str(run), "--tokens", "1000000", "--seed", "3")
    one_line(completed, "sample", 130)
    assert completed.stdout == whole.stdout  # the five characters before the interrupt


# == a zip directory that hides entries ==========================================================
def with_entries_hidden(archive: bytes) -> bytes:
    """``archive`` with its first central-directory record's comment length damaged to run to
    the end of the directory: zipfile then lists that entry alone, without an error."""
    data = bytearray(archive)
    record, end = data.index(b"PK\x01\x02"), data.index(b"PK\x05\x06")
    name, extra = (int.from_bytes(data[record + at : record + at + 2], "little") for at in (28, 30))
    comment = end - (record + 46 + name + extra)
    data[record + 32 : record + 34] = comment.to_bytes(2, "little")
    return bytes(data)


@pytest.mark.parametrize("strict", [True, False])
def test_load_state_dict_of_a_file_whose_directory_hides_entries_is_refused(strict, tmp_path):
    # strict=True blamed the file's contents ("missing parameters ['bias']"); strict=False
    # loaded the weight alone and said the bias was missing from the state, as if the file
    # were whole. rg.load already refused such a file as damaged.
    rg.seed(0)
    buffer = io.BytesIO()
    np.savez(buffer, **nn.Linear(3, 2).state_dict())
    path = tmp_path / "model.npz"
    path.write_bytes(with_entries_hidden(buffer.getvalue()))
    with np.load(path) as archive:
        assert archive.files == ["weight"]  # what NumPy (and zipfile) see: no error
    model = nn.Linear(3, 2)
    before = [p.numpy().copy() for p in model.parameters()]
    with pytest.raises(rg.InvalidArgumentError, match="lists 1 entries, its end record counts 2"):
        model.load_state_dict(path, strict=strict)
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))


def test_a_checkpoint_whose_directory_hides_entries_is_said_damaged(gpt_run, tmp_path):
    # The line blamed the first entry the damage hid ("missing parameters [...]", or "no
    # 'meta' entry (not a retrograd GPT checkpoint)") rather than the damaged directory.
    run, options = gpt_run
    out = copy_of(run, tmp_path)
    checkpoint = out / "checkpoint.npz"
    checkpoint.write_bytes(with_entries_hidden(checkpoint.read_bytes()))
    for command in (
        ["sample", "--out", str(out), "--tokens", "3"],
        ["train", *options, "--out", str(out), "--resume"],
    ):
        line = one_line(run_main(*command), command[0], 1)
        assert f"{checkpoint} is damaged" in line and "zip directory is damaged" in line, line


# == sizes no machine holds ======================================================================
#: a batch whose inputs need more than any 48-bit address space (128 TiB): refused on every
#: machine, whatever its overcommit
HUGE_BATCH = str(10**14)


@pytest.mark.parametrize("command", ["graph", "train"])
def test_a_batch_no_machine_holds_is_out_of_memory_not_a_bug_to_report(command, tmp_path):
    # NumPy's MemoryError ("Unable to allocate 233. TiB ...") was "unexpected MemoryError ...
    # — rerun with --debug for the traceback, and please report it", as for a bug; and graph
    # left the --out folder it had made behind, empty.
    out = tmp_path / "out"
    if command == "graph":
        arguments = ["graph", "--batch-size", HUGE_BATCH, "--out", str(out)]
    else:
        text = tmp_path / "code.txt"
        text.write_text(TEXT)
        arguments = ["train", *GPT, "--text", str(text), "--batch-size", HUGE_BATCH]
        arguments += ["--out", str(out)]
    line = one_line(run_main(*arguments), command, 1)
    assert "out of memory" in line and "lower --batch-size" in line and "report" not in line
    assert not out.exists()


# == warmup ======================================================================================
@pytest.mark.parametrize(
    ("code", "error", "phrase"),
    [
        (
            1,
            "Traceback (most recent call last):\n  File ...\nValueError: boom\n",
            "ValueError: boom",
        ),
        (-9, "", "killed by SIGKILL"),
    ],
    ids=["error", "killed"],
)
def test_a_failed_warm_up_is_one_line_without_the_workers_traceback(code, error, phrase):
    # The warm-up's process's whole traceback was squashed into the line ("unexpected
    # RuntimeError: the conv warm-up failed: Traceback (most recent call last): File ... —
    # please report it"); a process the system killed (out of memory) said "failed:" and
    # nothing more.
    import subprocess

    def ended(arguments, **_):
        return subprocess.CompletedProcess(arguments, code, "", error)

    with mock.patch("retrograd.app.warmup.subprocess.run", ended):
        completed = run_main("warmup", "--jobs", "1")
    line = one_line(completed, "warmup", 1)
    assert phrase in line and "Traceback" not in line and "run_workload('conv')" in line, line


# == MNIST files =================================================================================
def idx_file(magic: int, shape: tuple[int, ...], values: bytes) -> bytes:
    import struct

    return struct.pack(f">I{len(shape)}I", magic, *shape) + values


@pytest.mark.parametrize("damage", ["label out of range", "no pixels"])
def test_mnist_files_holding_what_mnist_cannot_are_named_before_training(damage, tmp_path):
    # A label of 200 reached the loss ("cross_entropy: target 200 is out of range for 10
    # classes"), 0x0 images the model ("Linear: input has 784 features but weight expects
    # 0"): neither line named the file at fault.
    train_images = idx_file(2051, (4, 28, 28), bytes(4 * 784))
    train_labels = idx_file(2049, (4,), bytes([1, 2, 200, 3]))
    if damage == "no pixels":
        train_images = idx_file(2051, (4, 0, 0), b"")
        train_labels = idx_file(2049, (4,), bytes([1, 2, 3, 4]))
    files = {
        "train-images-idx3-ubyte": train_images,
        "train-labels-idx1-ubyte": train_labels,
        "t10k-images-idx3-ubyte": idx_file(2051, (2, 28, 28), bytes(2 * 784)),
        "t10k-labels-idx1-ubyte": idx_file(2049, (2,), bytes([0, 9])),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    arguments = ["--model", "mlp", "--dataset", "mnist", "--data-dir", str(tmp_path)]
    completed = run_main("train", *arguments, "--out", str(tmp_path / "run"))
    line = one_line(completed, "train", 1)
    if damage == "no pixels":
        assert f"{tmp_path / 'train-images-idx3-ubyte'}: holds images of shape [4, 0, 0]" in line
    else:
        assert f"{tmp_path / 'train-labels-idx1-ubyte'}: holds the label 200" in line
    assert not (tmp_path / "run").exists()
