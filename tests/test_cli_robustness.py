"""The ``retrograd`` command as a careless user meets it: nothing saved is ever lost (full disks,
kills, two runs into one folder, a fresh run into a folder holding another), and every bad file
or flag gets one line ``retrograd COMMAND: what — what to do`` (exit 2 for a wrong command line,
1 for a failure), never a traceback. Runs that train or write run outside this process, as a
user's would: the ones killed or run at once each in a fresh process (:func:`retrograd`), the
others one after another in one fresh process (:func:`in_turn`: ``main()`` as ``python -m
retrograd`` calls it, on that process's own stdout and stderr file descriptors, each import
paid once instead of a fresh interpreter's seconds per run); refusals that stop before any work
run the same ``main()`` in this one (:func:`cli_here.run_main`)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import retrograd as rg
from cli_here import run_main

pytestmark = pytest.mark.numpy_only(
    "the command line picks its inner backend by --backend (tested here with torch too); the "
    "suite's RETROGRAD_INNER does not reach it, so a torch-suite run would repeat this one"
)

# The commands run in their own processes: this one only asks whether scikit-learn is there
# (importing it costs a second of CPU in every pytest worker, at collection).
if importlib.util.find_spec("sklearn") is None:
    pytest.skip('the digits data set needs scikit-learn (".[dev]")', allow_module_level=True)

SOURCE = Path(rg.__file__).resolve().parents[1]
MLP = ["--model", "mlp", "--epochs", "1", "--max-train-samples", "40", "--max-test-samples", "20"]
GPT = [
    "--model", "gpt", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
    "--batch-size", "4", "--steps", "4", "--eval-interval", "2",
]  # fmt: skip
TEXT = "".join(f"def f{i}(x):\n    return x * {i % 7} + {i % 5}\n\n" for i in range(80))


def retrograd(*args: str, limit: int | None = None, env: dict | None = None, cwd=None):
    """``python -m retrograd ARGS`` (no progress bars); ``limit``: no file may grow beyond it,
    as on a full disk."""

    def file_size_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    environment = dict(os.environ) | (env or {})
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")])
    )
    environment.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "retrograd", *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        preexec_fn=file_size_limit if limit else None,
        timeout=300,
    )


def one_line(completed, command: str, code: int) -> str:
    """The error line of a failed command, checked: the exit status, one line on stderr in the
    form ``retrograd COMMAND: what — what to do``."""
    assert completed.returncode == code, completed.stdout + completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"retrograd {command}: ") and " — " in lines[0], lines[0]
    return lines[0]


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("text") / "code.txt"
    path.write_text(TEXT)
    return str(path)


#: ``python -c IN_TURN STEPS.json``: each step in turn, a command line run by ``main()`` with the
#: process's file descriptors 1 and 2 on pipes (all it prints, as a fresh process's would be
#: captured), under a file size limit if it has one, or a folder copied (a snapshot between
#: two commands); a JSON list of ``[exit status, stdout, stderr]`` (``None`` for a copy).
IN_TURN = r"""
import io, json, os, resource, shutil, sys, threading, traceback

def captured(function):
    sys.stdout.flush()
    sys.stderr.flush()
    saved, texts, threads = [], [b"", b""], []
    for index, fd in enumerate((1, 2)):
        read, write = os.pipe()
        saved.append(os.dup(fd))
        os.dup2(write, fd)
        os.close(write)

        def drain(read=read, index=index):
            with os.fdopen(read, "rb") as pipe:
                texts[index] = pipe.read()

        threads.append(threading.Thread(target=drain))
        threads[-1].start()
    try:
        code = function()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        for thread in threads:
            thread.join()
    return [code, *(text.decode() for text in texts)]

def command(argv, limit):
    from retrograd.app.cli import main

    hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard[1]))
    try:
        return main(argv)
    except SystemExit as stop:  # as a process exits: None is 0, a message 1
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
        return 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # as an uncaught exception ends a process
        traceback.print_exc()
        return 1
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, hard)

results = []
with open(sys.argv[1]) as steps:
    for step in json.load(steps):
        if "copy" in step:
            shutil.copytree(*step["copy"])
            results.append(None)
        else:
            results.append(captured(lambda: command(step["argv"], step.get("limit"))))
with open(sys.argv[2], "w") as report:
    json.dump(results, report)
"""


def in_turn(steps: list[dict], folder: Path) -> list:
    """``steps`` (``{"argv": [...], "limit": bytes}`` or ``{"copy": [from, to]}``) in turn in one
    fresh process (``IN_TURN``): a ``CompletedProcess`` per command."""
    plan, report = folder / "steps.json", folder / "results.json"
    plan.write_text(json.dumps(steps))
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")])
    )
    environment.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    completed = subprocess.run(
        [sys.executable, "-c", IN_TURN, str(plan), str(report)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return [
        None if result is None else subprocess.CompletedProcess(step["argv"], *result)
        for step, result in zip(steps, json.loads(report.read_text()))
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, text_file) -> dict:
    """The runs the tests below read, in one fresh process: ``{name: (folder, CompletedProcess)}``
    (each name its own folder; ``NAME@STEP``: a copy of the folder after that step)."""
    root = tmp_path_factory.mktemp("runs")
    latin = root / "latin.txt"
    latin.write_bytes(("café naïve " * 60).encode("latin-1"))
    words = root / "words.txt"
    words.write_text(("abc def ghi " * 60).strip())
    gpt = [*GPT, "--text", text_file]
    plan = [
        # the finished GPT run the tests copy, damage and compare with
        ("gpt", ["train", *gpt]),
        ("overwrite", {"copy": "gpt"}),
        ("overwrite", ["train", *MLP, "--overwrite"]),
        ("overwrite@mlp", {"copy": "overwrite"}),
        ("overwrite", ["train", *gpt, "--overwrite"]),
        ("full disk", ["train", *MLP]),
        ("full disk@before", {"copy": "full disk"}),
        ("full disk", ["train", *MLP, "--seed", "3", "--overwrite"], 20_000),
        ("full checkpoint", ["train", *gpt], 4_000),
        ("no newline", ["train", *GPT, "--text", str(words), "--stop-at", "2"]),
        ("no newline", ["train", "--model", "gpt", "--resume"]),
        ("latin-1", ["train", *GPT, "--text", str(latin), "--encoding", "latin-1"]),
        ("resumed", {"copy": "gpt"}),
        ("resumed", ["train", *gpt, "--steps", "6", "--resume"]),
        ("nan", ["train", *MLP, "--optimizer", "sgd", "--lr", "1e30"]),
    ]
    if importlib.util.find_spec("torch") is not None:  # last: the NumPy runs never meet torch
        plan.append(("torch", ["train", *gpt, "--backend", "torch"]))
    steps = []
    for name, what, *limit in plan:
        if isinstance(what, dict):
            steps.append({"copy": [str(root / what["copy"]), str(root / name)]})
        else:
            steps.append({"argv": [*what, "--out", str(root / name)], "limit": (limit or [0])[0]})
    results = in_turn(steps, root)
    found = {}
    for (name, *_), completed in zip(plan, results):
        found.setdefault(name, [root / name, []])[1].append(completed)
    return {
        name: (folder, [c for c in done if c is not None]) for name, (folder, done) in found.items()
    }


@pytest.fixture(scope="module")
def gpt_run(runs) -> Path:
    """A finished GPT run's folder (copied by the tests that change it)."""
    out, (completed,) = runs["gpt"]
    assert completed.returncode == 0, completed.stderr
    return out


def copy_of(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / folder.name
    copy.mkdir()
    for name, data in files_of(folder).items():
        (copy / name).write_bytes(data)
    return copy


# -- nothing saved is lost ------------------------------------------------------------------------
def test_a_fresh_run_into_a_folder_holding_a_run_stops_before_any_work(
    gpt_run, text_file, tmp_path
):
    out = copy_of(gpt_run, tmp_path)
    before = files_of(out)
    completed = run_main("train", *GPT, "--steps", "2", "--text", text_file, "--out", str(out))
    line = one_line(completed, "train", 1)
    assert "holds another run" in line and "--overwrite" in line and "--resume" in line
    assert completed.stdout == ""  # stopped before the banner: nothing trained
    line = one_line(run_main("train", *MLP, "--out", str(out)), "train", 1)
    assert "--overwrite" in line and "--resume" not in line  # the CNN cannot resume a GPT
    assert files_of(out) == before


def test_overwrite_replaces_a_run_without_mixing_model_kinds(runs):
    """A copy of ``gpt_run``, overwritten by an MLP run (``overwrite@mlp``: the folder then),
    then by a GPT run again."""
    out, (mlp, gpt) = runs["overwrite"]
    assert mlp.returncode == 0, mlp.stderr
    between, _ = runs["overwrite@mlp"]
    assert sorted(files_of(between)) == ["curves.png", "metrics.json", "model.npz"]
    assert "no GPT checkpoint" in one_line(run_main("sample", "--out", str(between)), "sample", 1)
    assert gpt.returncode == 0, gpt.stderr
    assert "corpus" in json.loads((out / "metrics.json").read_text())  # the GPT's, not the MLP's
    with np.load(out / "model.npz") as model:
        assert "wte.weight" in model.files


def test_a_full_disk_while_rewriting_a_run_keeps_the_previous_files(runs):
    """A run, then another overwriting it when no file may grow beyond 20 kB (``full
    disk@before``: the folder between the two)."""
    out, (first, completed) = runs["full disk"]
    assert first.returncode == 0, first.stderr
    before = files_of(runs["full disk@before"][0])
    assert sorted(before) == ["curves.png", "metrics.json", "model.npz"]
    line = one_line(completed, "train", 1)
    assert "File too large" in line and "intact" in line
    assert files_of(out) == before  # not one file of the new run: they are replaced together


def test_a_full_disk_while_checkpointing_leaves_no_partial_file(runs):
    """A GPT run when no file may grow beyond 4 kB."""
    out, (completed,) = runs["full checkpoint"]
    line = one_line(completed, "train", 1)
    assert "checkpoint.npz: File too large" in line
    assert not out.exists() or files_of(out) == {}


def test_two_runs_into_one_folder_at_once_one_refused_the_files_one_runs(tmp_path):
    out = tmp_path / "both"
    common = [sys.executable, "-m", "retrograd", "train", *MLP, "--out", str(out)]
    environment = dict(os.environ, PYTHONPATH=str(SOURCE), OPENBLAS_NUM_THREADS="1")
    runs = [
        subprocess.Popen(
            [*common, "--seed", str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for seed in (1, 2)
    ]
    results = [(*run.communicate(timeout=300), run.returncode) for run in runs]
    results = [(code, out_text, err) for out_text, err, code in results]
    assert sorted(code for code, _, _ in results) == [0, 1], results
    (winner,) = [seed for seed, (code, _, _) in zip((1, 2), results) if code == 0]
    (refusal,) = [err.strip() for code, _, err in results if code == 1]
    assert "in use by another retrograd run" in refusal or "holds another run" in refusal
    assert len(refusal.splitlines()) == 1
    # The folder holds the winner's run, whole: its model gives the test loss its metrics say.
    from retrograd.app.data import load_digits
    from retrograd.app.models import build_model
    from retrograd.app.trainer import evaluate

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["config"]["seed"] == winner
    with rg.use_backend(rg.NumpyBackend()):
        model = build_model("mlp", (1, 8, 8))
        model.load_state_dict(out / "model.npz")
    digits = load_digits().limited(40, 20)
    test_loss, _ = evaluate(model, digits.test_images, digits.test_labels)
    assert test_loss == pytest.approx(metrics["summary"]["test_loss"], rel=1e-6)


def test_a_gpt_run_killed_at_random_moments_keeps_a_complete_checkpoint(text_file, tmp_path):
    from retrograd.app.checkpoints import read_checkpoint

    out = tmp_path / "run"
    arguments = [*GPT, "--steps", "60", "--eval-interval", "1", "--text", text_file]
    environment = dict(os.environ, PYTHONPATH=str(SOURCE), OPENBLAS_NUM_THREADS="1")
    generator = random.Random(0)
    steps = []
    for attempt in range(3):
        extra = ["--resume"] if attempt else []
        run = subprocess.Popen(
            [sys.executable, "-m", "retrograd", "train", *arguments, "--out", str(out), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=environment,
        )
        evaluations = 0
        while evaluations < 2:  # after the second evaluation, the first checkpoint is saved
            line = run.stdout.readline()
            assert line, "the run ended before its second evaluation"
            evaluations += line.startswith("step ")
        time.sleep(generator.uniform(0.0, 0.3))
        run.send_signal(signal.SIGKILL)
        run.wait()
        run.stdout.close()
        saved = read_checkpoint(out / "checkpoint.npz")  # complete: every entry reads
        steps.append(saved.meta["step"])
    assert steps == sorted(steps) and steps[-1] > 0
    completed = retrograd("train", "--model", "gpt", "--out", str(out), "--resume")
    assert completed.returncode == 0, completed.stderr
    assert json.loads((out / "metrics.json").read_text())["summary"]["step"] == 60


# -- texts ----------------------------------------------------------------------------------------
def test_a_text_without_a_newline_trains_resumes_and_finishes(runs):
    """``"abc def ghi " * 60``, stripped: a run stopped at step 2, then resumed."""
    out, (first, completed) = runs["no newline"]
    assert first.returncode == 0, first.stderr
    assert completed.returncode == 0, completed.stderr
    assert "resumed at step 2" in completed.stdout
    for name in ("model.npz", "metrics.json", "sample.txt", "checkpoint.npz"):
        assert (out / name).is_file(), name
    assert set((out / "sample.txt").read_text()) <= set("abcdefghi ")


def test_a_text_in_another_encoding_is_refused_or_read_as_told(runs, tmp_path):
    """Refused without ``--encoding``; ``latin-1``: the run of that text with it."""
    from retrograd.app.checkpoints import read_checkpoint

    text = tmp_path / "latin.txt"
    text.write_bytes(("café naïve " * 60).encode("latin-1"))
    out = tmp_path / "run"
    line = one_line(run_main("train", *GPT, "--text", str(text), "--out", str(out)), "train", 1)
    assert "latin.txt is not utf-8 text (byte 0xe9 at offset 3" in line and "--encoding" in line
    assert not out.exists() or files_of(out) == {}
    out, (completed,) = runs["latin-1"]
    assert completed.returncode == 0, completed.stderr
    assert "é" in read_checkpoint(out / "checkpoint.npz").meta["vocab"]
    line = one_line(run_main("train", *GPT, "--encoding", "klingon"), "train", 2)
    assert "no such encoding: klingon" in line


# -- flags ----------------------------------------------------------------------------------------
def test_the_gpt_trains_on_the_torch_backend_as_on_numpy(runs, gpt_run):
    """``gpt_run`` is this command with the default ``--backend``, numpy."""
    if "torch" not in runs:  # (not imported here: only the run uses it)
        pytest.skip("torch is not installed")
    out, (completed,) = runs["torch"]
    assert completed.returncode == 0, completed.stderr
    runs = {
        backend: json.loads((folder / "metrics.json").read_text())
        for backend, folder in (("numpy", gpt_run), ("torch", out))
    }
    assert "torch backend on cpu" in completed.stdout
    assert runs["numpy"]["config"]["backend"] == "numpy"
    assert runs["torch"]["config"]["backend"] == "torch"
    np.testing.assert_allclose(
        runs["torch"]["step_losses"], runs["numpy"]["step_losses"], rtol=1e-4
    )


def test_a_device_the_machine_lacks_is_a_failure_one_that_cannot_exist_a_usage_error(text_file):
    torch = pytest.importorskip("torch")
    completed = run_main("train", *GPT, "--backend", "torch", "--device", "meta")
    assert "--device meta" in one_line(completed, "train", 2)
    if not torch.cuda.is_available():
        completed = run_main("train", *GPT, "--backend", "torch", "--device", "cuda")
        assert "is not available" in one_line(completed, "train", 1)


@pytest.mark.parametrize(
    ("model", "flags"),
    [
        (GPT, ["--epochs", "3"]),
        (GPT, ["--optimizer", "sgd"]),
        (GPT, ["--dataset", "mnist"]),
        (MLP, ["--steps", "10"]),
        (MLP, ["--resume"]),
    ],
)
def test_flags_that_mean_nothing_to_the_model_are_refused(model, flags):
    line = one_line(run_main("train", *model, *flags), "train", 2)
    assert flags[0] in line and "drop" in line


@pytest.mark.parametrize(
    "arguments",
    [
        ["train", "--lr", "inf"],
        ["train", "--lr", "nan"],
        ["train", "--clip-norm", "inf"],
        ["train", "--timeout", "inf"],
        ["train", *GPT, "--dropout", "nan"],
        ["sample", "--temperature", "inf"],
        ["bench", "--timeout", "nan"],
    ],
)
def test_non_finite_values_are_refused(arguments):
    line = one_line(run_main(*arguments), arguments[0], 2)
    assert "argument --" in line


def test_resume_refuses_settings_that_differ_from_the_saved_runs(
    runs, gpt_run, text_file, tmp_path
):
    """``resumed``: a copy of ``gpt_run`` resumed with its settings and ``--steps 6``."""
    out = copy_of(gpt_run, tmp_path)
    before = files_of(out)
    resume = ["--text", text_file, "--out", str(out), "--resume"]
    completed = run_main("train", *GPT, "--n-embd", "32", *resume)
    line = one_line(completed, "train", 2)
    assert "--n-embd 32 differs from the saved run's 16" in line
    assert files_of(out) == before  # refused before any work: the run resumes as it was
    out, (same,) = runs["resumed"]
    assert same.returncode == 0, same.stderr  # the same settings again: resumed
    assert json.loads((out / "metrics.json").read_text())["summary"]["step"] == 6
    completed = run_main("train", *GPT, "--out", str(out), "--resume", "--overwrite")
    line = one_line(completed, "train", 2)
    assert "contradict" in line


# -- damaged and foreign files --------------------------------------------------------------------
def npz(arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


class _Payload:
    """Pickled, it would create a folder when loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def damaged_checkpoints(good: bytes, marker: Path) -> dict[str, tuple[bytes, str]]:
    """A checkpoint broken in each way a user meets, and a phrase of what the line says."""
    with np.load(io.BytesIO(good)) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(str(arrays["meta"]))
    without_vocab = {key: value for key, value in meta.items() if key != "vocab"}
    weight = next(name for name in arrays if name.startswith("model/"))
    moment = next(name for name in arrays if name.startswith("optim/"))
    return {
        "truncated": (good[: len(good) // 2], "not a readable .npz archive"),
        "empty": (b"", "it is empty"),
        "not a zip": (b"hello\n", "not an .npz archive"),
        "no meta": (npz({k: v for k, v in arrays.items() if k != "meta"}), "no 'meta' entry"),
        "meta not JSON": (npz(arrays | {"meta": np.array("{oops")}), "not JSON"),
        "meta lacks vocab": (
            npz(arrays | {"meta": np.array(json.dumps(without_vocab))}),
            "'vocab' is missing",
        ),
        "wrong shape": (npz(arrays | {weight: np.zeros((3, 3), np.float32)}), "has shape"),
        "missing entry": (
            npz({k: v for k, v in arrays.items() if k != weight}),
            "missing parameters",
        ),
        "pickled": (
            npz(arrays | {"meta": np.array([_Payload(marker)], dtype=object)}),
            "pickled Python objects",
        ),
        "optimizer moment": (npz(arrays | {moment: np.zeros(3, np.float32)}), "optimizer state"),
    }


@pytest.mark.parametrize(
    "kind",
    [
        "truncated", "empty", "not a zip", "no meta", "meta not JSON", "meta lacks vocab",
        "wrong shape", "missing entry", "pickled", "optimizer moment",
    ],
)  # fmt: skip
def test_a_damaged_checkpoint_is_one_line_naming_the_file(gpt_run, tmp_path, kind):
    marker = tmp_path / "the-file-ran-code"
    data, phrase = damaged_checkpoints((gpt_run / "checkpoint.npz").read_bytes(), marker)[kind]
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.npz").write_bytes(data)
    commands = [["train", "--model", "gpt", "--out", str(out), "--resume"]]
    if kind != "optimizer moment":  # sampling reads the model only
        commands.append(["sample", "--out", str(out), "--tokens", "5"])
    for command in commands:
        line = one_line(run_main(*command), command[0], 1)
        assert f"{out / 'checkpoint.npz'} is damaged" in line and phrase in line, line
    assert not marker.exists()  # never unpickled


def test_an_out_that_is_a_file_or_cannot_be_made_is_refused_before_any_work(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    completed = run_main("train", *MLP, "--out", str(afile))
    assert "is a file, not a folder" in one_line(completed, "train", 1)
    assert completed.stdout == "" and afile.read_text() == "mine"
    completed = run_main("train", *MLP, "--out", str(afile / "below"))
    assert "cannot create --out" in one_line(completed, "train", 1)
    completed = run_main("graph", "--out", str(afile))
    assert "is a file, not a folder" in one_line(completed, "graph", 1)


def test_a_loss_that_stops_being_a_number_stops_the_run_before_it_writes(runs):
    """The MLP with SGD at ``--lr 1e30``."""
    out, (completed,) = runs["nan"]
    assert "the loss became nan at step" in one_line(completed, "train", 1)
    assert not out.exists()  # made for the run, and nothing written in it


def test_debug_shows_the_traceback_before_the_line(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.delenv("RETROGRAD_DEBUG", raising=False)
    for arguments, debug in (
        (["--debug", "train", "--out", str(afile)], None),
        (["train", "--debug", "--out", str(afile)], None),
        (["train", "--out", str(afile)], "1"),
    ):
        with monkeypatch.context() as environment:
            if debug:
                environment.setenv("RETROGRAD_DEBUG", debug)
            completed = run_main(*arguments)
        assert completed.returncode == 1
        assert completed.stderr.startswith("Traceback"), completed.stderr
        assert completed.stderr.strip().splitlines()[-1].startswith("retrograd train: --out")
    assert "Traceback" not in run_main("train", "--out", str(afile)).stderr


def test_an_unexpected_error_is_still_one_line(monkeypatch, capsys):
    from retrograd.app import cli

    def broken(options):
        raise TypeError("something nobody foresaw")

    monkeypatch.setitem(cli.COMMANDS, "sample", broken)
    assert cli.main(["sample"]) == 1
    line = capsys.readouterr().err.strip()
    assert line == (
        "retrograd sample: unexpected TypeError: something nobody foresaw — rerun with --debug "
        "for the traceback, and please report it"
    )


def test_nothing_is_unpickled_but_what_rg_load_is_told_to():
    """No module of the package but ``serialization.py`` and its reader of torch's files
    (``torch_files.py``) imports pickle or lets NumPy or torch unpickle a file (the CLI's
    checkpoints never do); there, as in torch, a default (``weights_only=True``) load
    unpickles through the allow-list only."""
    for path in (SOURCE / "retrograd").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for forbidden in ("allow_pickle=True", "torch.load(", "import dill"):
            assert forbidden not in text, f"{path}: {forbidden}"
        if path.name == "process_group.py":
            # the object collectives (all_gather_object, broadcast_object_list, ...) unpickle
            # what the job's other ranks send, as torch's do (its docs: "only call this
            # function with data you trust"): in that one function, nothing from a file
            body = text[text.index("def _all_objects(") :].split("\ndef ")[0]
            assert text.count("pickle.loads(") == body.count("pickle.loads(") == 1, path
        elif path.name == "torch_files.py":
            # torch's own rebuild functions are stand-ins here; every other class the file
            # names goes through the caller's find_class (below: the allow-list by default)
            assert "pickle.loads(" not in text and "return self.find_other(module, name)" in text
        elif path.name == "torch_writer.py":
            # rg.save's writer of torch's pickle: it writes, never reads one
            assert "pickle.load" not in text and "Unpickler" not in text, path
        elif path.name == "datasets.py" and path.parent.name == "vision":
            # CIFAR's batches are pickles: read (batches and meta file, by _unpickled) through
            # an unpickler of arrays only
            assert "pickle.load(" not in text and "pickle.loads(" not in text, path
            assert text.count("_ArraysOnly(handle") == 1 and "def find_class(" in text, path
        elif path.name != "serialization.py":
            assert "import pickle" not in text, f"{path}: import pickle"
    text = (SOURCE / "retrograd" / "serialization.py").read_text(encoding="utf-8")
    assert "find_class = _allowed_global if weights_only else _importable_global" in text
    assert "pickle.loads(" not in text and text.count(".load()") == 2
    assert "if not self.weights_only:\n            return _TensorUnpickler(" in text
    assert "return _AllowedOnly(io.BytesIO(data), self).load()" in text


def test_the_readme_says_where_the_gpu_commands_ran_and_how_to_run_them_again():
    readme = (SOURCE.parent / "README.md").read_text(encoding="utf-8")
    section = " ".join(readme[readme.index("Train on a GPU") :].split("\n\n")[0:3])
    assert "H200" in section and "4 December 2026" in section
    assert "benchmarks/gpu_session.sh" in section
    assert (SOURCE.parent / "benchmarks" / "gpu_session.sh").is_file()
