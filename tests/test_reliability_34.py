"""Round 34 of the reliability work, on the product paths a user touches (``rg.load`` of torch
files, the ``retrograd`` command stopped by a signal): one heading per defect found, each test
failing on the code before its fix. Expected behaviour comes from torch (what ``torch.load``
does with the same file) or from the contract (a stopped command leaves its previous files
whole, no temporary file, one line on stderr and a meaningful exit status)."""

from __future__ import annotations

import errno
import io
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import retrograd as rg

SOURCE = str(Path(__file__).resolve().parents[1] / "src")

#: Tests whose outcome cannot depend on the suite's inner backend (tests/conftest.py).
REFUSED_BEFORE_ANY_TENSOR = pytest.mark.backend_independent(
    "rg.load refuses the file before it makes a tensor"
)
RUN_IN_ITS_OWN_PROCESS = pytest.mark.backend_independent(
    "the command runs in a process of its own, on its default (NumPy) backend whatever the "
    "suite's; the test reads files and exit statuses, no tensor"
)


def torch_file_with(tmp_path: Path, replace: dict[str, bytes | None]) -> Path:
    """A file ``torch.save`` wrote, with the records named (by their name after the folder)
    replaced, or left out where the value is ``None``."""
    original = io.BytesIO()
    torch.save({"w": torch.arange(6, dtype=torch.float32), "n": torch.tensor([1, 2])}, original)
    path = tmp_path / "edited.pt"
    with zipfile.ZipFile(original) as source, zipfile.ZipFile(path, "w") as target:
        for name in source.namelist():
            record = name.split("/", 1)[1]
            if record not in replace:
                target.writestr(name, source.read(name))
            elif replace[record] is not None:
                target.writestr(name, replace[record])
    return path


def torch_refuses(path: Path) -> bool:
    try:
        torch.load(path)
    except RuntimeError:
        return True
    return False


# == a torch file of a newer format version loaded as if it were this one =======================
@REFUSED_BEFORE_ANY_TENSOR
@pytest.mark.parametrize("version", [b"11\n", b"99\n"])
def test_a_torch_file_of_a_newer_format_version_is_refused_as_torch_refuses_it(tmp_path, version):
    # rg.load never read the zip's version record: a file of a newer torch (whose layout may
    # differ) loaded as if it were of this format, where torch 2.13 refuses it.
    path = torch_file_with(tmp_path, {"version": version})
    assert torch_refuses(path)
    with pytest.raises(rg.InvalidArgumentError) as caught:
        rg.load(path)
    message = str(caught.value)
    assert str(path) in message and "newer" in message and version.strip().decode() in message


@REFUSED_BEFORE_ANY_TENSOR
@pytest.mark.parametrize(
    "version", [b"0\n", b"abc\n", b"", None], ids=["zero", "not-a-number", "empty", "missing"]
)
def test_a_torch_file_whose_version_record_is_damaged_or_missing_is_refused(tmp_path, version):
    path = torch_file_with(tmp_path, {"version": version})
    assert torch_refuses(path)
    with pytest.raises(rg.InvalidArgumentError, match="version") as caught:
        rg.load(path)
    assert str(path) in str(caught.value) and "damaged" in str(caught.value)


@pytest.mark.parametrize("version", [b"1\n", b"3", b"10\n"])
def test_a_torch_file_of_a_version_torch_reads_still_loads(tmp_path, version):
    path = torch_file_with(tmp_path, {"version": version})
    expected = torch.load(path)
    loaded = rg.load(path)
    np.testing.assert_array_equal(loaded["w"].numpy(), expected["w"].numpy())
    np.testing.assert_array_equal(loaded["n"].numpy(), expected["n"].numpy())


@REFUSED_BEFORE_ANY_TENSOR
def test_the_version_record_under_data_is_the_one_read_first(tmp_path):
    # torch's reader takes ".data/version" where there is one, before "version"
    path = torch_file_with(tmp_path, {".data/version": b"12\n"})
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(f"{archive.namelist()[0].split('/')[0]}/.data/version", b"12\n")
    assert torch_refuses(path)
    with pytest.raises(rg.InvalidArgumentError, match="newer"):
        rg.load(path)


def test_a_file_rg_save_wrote_carries_a_version_torch_reads(tmp_path):
    path = tmp_path / "saved.pt"
    rg.save({"w": rg.arange(3)}, path)
    assert rg.load(path)["w"].tolist() == [0, 1, 2]
    assert torch.load(path)["w"].tolist() == [0, 1, 2]


# == a damaged byteorder record read as little-endian ============================================
@REFUSED_BEFORE_ANY_TENSOR
@pytest.mark.parametrize("word", [b"middle", b"", b"\x00\x01"])
def test_a_byteorder_record_of_neither_order_is_refused_as_torch_refuses_it(tmp_path, word):
    # Any word but b"big" was read as little-endian: a damaged record gave tensors without a
    # word about it; torch raises "Unknown endianness type".
    path = torch_file_with(tmp_path, {"byteorder": word})
    with pytest.raises(ValueError):
        torch.load(path)
    with pytest.raises(rg.InvalidArgumentError, match="byteorder") as caught:
        rg.load(path)
    assert str(path) in str(caught.value)


def test_a_big_endian_file_still_loads_as_torch_loads_it(tmp_path):
    values = np.arange(6, dtype=">f4")
    path = torch_file_with(tmp_path, {"byteorder": b"big", "data/0": values.tobytes()})
    expected = torch.load(path)["w"].numpy()
    np.testing.assert_array_equal(rg.load(path)["w"].numpy(), expected)
    np.testing.assert_array_equal(expected, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])


# == two saves into one stream: load gave the last object where the first was asked for ========
def test_saves_into_one_stream_load_back_in_order(tmp_path):
    # rg.load read the stream to its end and the zip reader found the directory of the LAST
    # archive: after two saves into one file, a load from its start gave the second object,
    # without a word. Each load now reads the archive at the position and leaves the stream
    # after it (torch's files too: they end in zip64 records).
    path = tmp_path / "stream.bin"
    with open(path, "wb") as stream:
        rg.save({"first": rg.arange(3)}, stream)
        torch.save({"second": torch.ones(2)}, stream)
        rg.save({"third": 3}, stream)
    with open(path, "rb") as stream:
        first = rg.load(stream)
        second = rg.load(stream)
        third = rg.load(stream)
        assert stream.read() == b""
    assert list(first) == ["first"] and first["first"].tolist() == [0, 1, 2]
    assert list(second) == ["second"] and second["second"].tolist() == [1.0, 1.0]
    assert third == {"third": 3}


def test_an_archive_with_bytes_around_it_still_loads_from_its_position():
    stream = io.BytesIO()
    stream.write(b"HEADER")
    torch.save({"x": torch.arange(2.0)}, stream)
    end = stream.tell()
    stream.write(b"TRAILER")
    stream.seek(6)
    expected = torch.load(stream)
    stream.seek(6)
    assert rg.load(stream)["x"].tolist() == expected["x"].tolist() == [0.0, 1.0]
    assert stream.tell() == end


# == a map_location that is no device: an error of "device:", not of load ========================
@REFUSED_BEFORE_ANY_TENSOR
@pytest.mark.parametrize(
    "map_location", [3, "gpu", "", b"cpu", {"cpu": 3}, {"cpu": "gpu"}, {"cpu": ["cpu"]}]
)
def test_a_map_location_of_no_torch_form_is_an_error_of_load_naming_it(map_location):
    # The device parser's message came out alone ("device: expected a device string, got
    # 3"), naming neither load nor map_location; a dict holding a list came out as a bare
    # "unhashable type". torch refuses each of these too (TypeError or RuntimeError).
    saved = io.BytesIO()
    torch.save({"a": torch.ones(2)}, saved)
    saved.seek(0)
    with pytest.raises((TypeError, RuntimeError)):
        torch.load(saved, map_location=map_location)
    saved.seek(0)
    with pytest.raises(rg.InvalidArgumentError) as caught:
        rg.load(saved, map_location=map_location)
    message = str(caught.value)
    assert message.startswith("load: map_location=") and repr(map_location) in message


@pytest.mark.parametrize("map_location", ["cpu", torch.device("cpu"), {"cuda:0": "cpu"}])
def test_the_map_locations_of_the_cpu_still_load(map_location):
    saved = io.BytesIO()
    torch.save({"a": torch.arange(3.0)}, saved)
    saved.seek(0)
    assert rg.load(saved, map_location=map_location)["a"].tolist() == [0.0, 1.0, 2.0]


# == a save to a device or a pipe replaced the node itself with a regular file ==================
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX's")
def test_save_to_a_named_pipe_writes_through_it_and_leaves_the_pipe(tmp_path):
    # rg.save wrote a temporary file beside the target and renamed it over it: given a FIFO
    # (or /dev/null, /dev/stdout, which torch.save writes as open does) it put a regular file
    # in place of the node, and the reader at the other end waited forever. (No test here
    # writes to /dev/null: on the code before the fix, run as root, it would replace it.)
    fifo = tmp_path / "stream"
    os.mkfifo(fifo)
    received: dict[str, bytes] = {}
    reader = threading.Thread(target=lambda: received.update(data=fifo.read_bytes()), daemon=True)
    reader.start()
    rg.save({"w": rg.arange(3)}, fifo)
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["stream"]  # no temporary file either
    assert rg.load(io.BytesIO(received["data"]))["w"].tolist() == [0, 1, 2]
    assert torch.load(io.BytesIO(received["data"]))["w"].tolist() == [0, 1, 2]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX's")
def test_a_failed_write_to_a_pipe_is_an_os_error_naming_it(tmp_path):
    # the reader goes away after the first bytes: the write fails (EPIPE), named by the pipe
    fifo = tmp_path / "stream"
    os.mkfifo(fifo)

    def read_a_little() -> None:
        with open(fifo, "rb") as pipe:
            pipe.read(1)

    reader = threading.Thread(target=read_a_little, daemon=True)
    reader.start()
    with pytest.raises(OSError) as caught:
        rg.save({"w": rg.zeros(1 << 20)}, fifo)  # 4 MB: more than a pipe buffers
    reader.join(timeout=60)
    assert caught.value.filename == str(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# == a distributed-checkpoint save that failed left an empty folder behind =======================
@pytest.mark.parametrize(
    "failure",
    [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), KeyboardInterrupt()],
    ids=["disk-full", "interrupt"],
)
def test_a_failed_dcp_save_into_new_folders_leaves_none_of_them(tmp_path, monkeypatch, failure):
    # dcp.save made checkpoint_id's folders, then failed writing (a full disk, Ctrl-C): the
    # empty folders stayed, and a later dcp.load took them for a checkpoint that lost its
    # files. A folder that was there before is left as it was.
    import retrograd.distributed.checkpoint as dcp

    model = rg.nn.Linear(3, 2)

    def failing_savez(*args, **kwargs):
        raise failure

    monkeypatch.setattr(np, "savez", failing_savez)
    with pytest.raises(type(failure)):
        dcp.save({"model": model.state_dict()}, checkpoint_id=tmp_path / "runs" / "step_10")
    assert list(tmp_path.iterdir()) == []

    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(type(failure)):
        dcp.save({"model": model.state_dict()}, checkpoint_id=kept)
    assert kept.is_dir() and list(kept.iterdir()) == []


def test_a_dcp_save_into_new_folders_still_makes_them(tmp_path):
    import retrograd.distributed.checkpoint as dcp

    model = rg.nn.Linear(3, 2)
    folder = tmp_path / "runs" / "step_10"
    dcp.save({"model": model.state_dict(), "step": 10}, checkpoint_id=folder)
    restored = rg.nn.Linear(3, 2)
    state = {"model": restored.state_dict(), "step": 0}
    dcp.load(state, checkpoint_id=folder)
    assert state["step"] == 10
    np.testing.assert_array_equal(state["model"]["weight"].numpy(), model.weight.numpy())


# == a read-only file replaced by a save, as a rename ignores the file's own permission ==========
def test_save_refuses_a_read_only_file_as_open_does_and_leaves_it(tmp_path, monkeypatch):
    # rg.save (and Module.save) renamed a new file over the target: a checkpoint made
    # read-only (chmod 444, to keep it) was replaced, where torch.save's open(path, "wb")
    # raises PermissionError. The check is os.access, as open's (for root every file is
    # writable: it is made to answer "no" here; the test below runs as a user).
    kept, weights = tmp_path / "best.pt", tmp_path / "model.npz"
    rg.save({"w": rg.ones(2)}, kept)
    rg.nn.Linear(2, 2).save(weights)
    before = {kept: kept.read_bytes(), weights: weights.read_bytes()}
    real_access = os.access

    def access(path, mode, **kwargs):
        if Path(path) in before and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    with pytest.raises(PermissionError) as caught:
        rg.save({"w": rg.zeros(2)}, kept)
    assert caught.value.filename == str(kept) and "read-only" in str(caught.value)
    with pytest.raises(PermissionError) as caught:
        rg.nn.Linear(2, 2).save(weights)
    assert caught.value.filename == str(weights)
    assert {path: path.read_bytes() for path in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "model.npz"]


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="an ordinary POSIX user's permissions (root writes any file: the test above)",
)
def test_save_refuses_a_read_only_file_for_a_user_as_torch_save_does(tmp_path):
    # the same without a mock, where the suite runs as an ordinary user
    kept = tmp_path / "best.pt"
    torch.save({"w": torch.ones(2)}, kept)
    kept.chmod(0o444)
    before = kept.read_bytes()
    with pytest.raises(PermissionError):
        torch.save({"w": torch.zeros(2)}, kept)
    with pytest.raises(PermissionError) as caught:
        rg.save({"w": rg.zeros(2)}, kept)
    assert caught.value.filename == str(kept)
    assert kept.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]


# == the command killed without a word by SIGTERM ================================================
GPT = [
    "--model", "gpt", "--n-layer", "1", "--n-head", "2", "--n-embd", "8", "--block-size", "8",
    "--batch-size", "2", "--eval-interval", "2", "--no-progress",
]  # fmt: skip
TEXT = "".join(f"def f{i}(x):\n    return x * {i % 7} + {i % 5}\n\n" for i in range(40))


def run_terminated(script: str, *args: str) -> subprocess.CompletedProcess:
    """``retrograd ARGS`` in a process of its own, after ``script`` (which arranges a SIGTERM
    to the process at some point of the run)."""
    program = textwrap.dedent(script) + textwrap.dedent(
        """
        import sys
        from retrograd.app.cli import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    environment = dict(os.environ, PYTHONPATH=SOURCE, RETROGRAD_DEBUG="0")
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


def one_line(completed: subprocess.CompletedProcess, command: str, code: int) -> str:
    assert completed.returncode == code, completed.stdout + completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr  # no traceback
    assert lines[0].startswith(f"retrograd {command}: ") and " — " in lines[0], lines[0]
    return lines[0]


@RUN_IN_ITS_OWN_PROCESS
def test_sigterm_while_a_gpt_checkpoint_is_written_keeps_the_previous_one_and_says_so(tmp_path):
    # SIGTERM (kill, a job scheduler's stop) ended the command on the spot: exit status -15,
    # nothing on stderr, and a checkpoint being written left its temporary file behind. Now it
    # stops as Ctrl-C does: the file being written is removed, the previous checkpoint is
    # whole, one line says which step is kept and how to resume, and the status is 143.
    from retrograd.app.checkpoints import read_checkpoint

    text = tmp_path / "code.txt"
    text.write_text(TEXT)
    out = tmp_path / "run"
    script = """
        import os, signal
        from retrograd.app import gpt
        written = []
        real = gpt.write_checkpoint

        def write_checkpoint(file, *args):
            written.append(1)
            if len(written) == 2:  # the second checkpoint, half written
                file.write(b"PK\\x03\\x04 half a checkpoint")
                os.kill(os.getpid(), signal.SIGTERM)
            real(file, *args)

        gpt.write_checkpoint = write_checkpoint
    """
    args = ["train", *GPT, "--text", str(text), "--steps", "6", "--out", str(out)]
    completed = run_terminated(script, *args)
    line = one_line(completed, "train", 128 + signal.SIGTERM)
    assert "terminated" in line and "(step 2) is kept" in line and "--resume" in line, line
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.npz"]  # no temporary file
    assert read_checkpoint(out / "checkpoint.npz").meta["step"] == 2

    resumed = run_terminated("", *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert read_checkpoint(out / "checkpoint.npz").meta["step"] == 6


@RUN_IN_ITS_OWN_PROCESS
def test_sigterm_during_training_of_the_mlp_is_one_line_and_status_143(tmp_path):
    # (the third optimizer step sends it: a run stopped before writing leaves no files)
    script = """
        import os, signal
        import retrograd.optim as optim
        steps = []
        real_step = optim.Adam.step

        def step(self, *args, **kwargs):
            steps.append(1)
            if len(steps) == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return real_step(self, *args, **kwargs)

        optim.Adam.step = step
    """
    out = tmp_path / "cnn"
    completed = run_terminated(
        script, "train", "--model", "mlp", "--epochs", "1", "--no-progress", "--out", str(out)
    )
    line = one_line(completed, "train", 128 + signal.SIGTERM)
    assert "terminated" in line, line
    assert not out.exists() or not any(out.iterdir())


@RUN_IN_ITS_OWN_PROCESS
def test_sigterm_while_torchrun_runs_the_ranks_stops_torchrun_not_kills_it(tmp_path):
    # `retrograd train --workers 2 --engine torch` runs torchrun and waits: stopped, it
    # died at once (SIGTERM) or SIGKILLed torchrun (subprocess.call on Ctrl-C), which then
    # could not stop its ranks, left running without a parent. torchrun is now sent SIGTERM,
    # which it forwards to the ranks, and waited for. (A stand-in plays torchrun here.)
    stopped, ready = tmp_path / "stopped", tmp_path / "ready"
    stand_in = textwrap.dedent(
        f"""
        import pathlib, signal, sys, time
        def stop(*_):
            pathlib.Path({str(stopped)!r}).write_text("SIGTERM")
            sys.exit(1)
        signal.signal(signal.SIGTERM, stop)
        pathlib.Path({str(ready)!r}).write_text("")
        time.sleep(60)
        """
    )
    script = f"""
        import os, signal, sys, threading, time
        from retrograd.distributed import launch
        launch.torchrun_command = lambda ranks, argv, **_: [sys.executable, "-c", {stand_in!r}]

        def stop_when_ready():
            while not os.path.exists({str(ready)!r}):
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=stop_when_ready, daemon=True).start()
    """
    environment_rank = os.environ.pop("RANK", None)
    try:
        completed = run_terminated(script, "train", "--workers", "2", "--engine", "torch")
    finally:
        if environment_rank is not None:
            os.environ["RANK"] = environment_rank
    line = one_line(completed, "train", 128 + signal.SIGTERM)
    assert "terminated" in line, line
    assert stopped.read_text() == "SIGTERM"
