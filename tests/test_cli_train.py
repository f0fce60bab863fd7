"""``retrograd train`` end to end, at small sizes: outputs, equal curves, MNIST, MPI, errors."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import retrograd
from retrograd.app.cli import main
from retrograd.app.trainer import TrainConfig, train
from test_data import write_mnist

pytestmark = pytest.mark.numpy_only(
    "the command line picks its inner backend by --backend (tested here with torch too); the "
    "suite's RETROGRAD_INNER does not reach it, so a torch-suite run would repeat this one"
)

# The commands run in their own processes: this one only asks whether scikit-learn is there
# (importing it costs a second of CPU in every pytest worker, at collection).
if importlib.util.find_spec("sklearn") is None:
    pytest.skip('the digits data set needs scikit-learn (".[dev]")', allow_module_level=True)

SMALL = ["--epochs", "1", "--max-train-samples", "150", "--max-test-samples", "60", "--no-progress"]
SOURCE = str(Path(retrograd.__file__).resolve().parents[1])
#: Relative agreement of per-step losses between 1 and N data-parallel workers (see
#: test_workers_give_the_same_losses).
WORKERS_RTOL = 1e-5


def quiet(**settings) -> dict:
    settings = {
        "epochs": 1,
        "max_train_samples": 150,
        "max_test_samples": 60,
        "out": None,
        "progress": False,
    } | settings
    return train(TrainConfig(**settings), echo=lambda *args: None)


@pytest.fixture(scope="module")
def default_run() -> dict:
    """``quiet()``'s metrics, for the tests that compare against the default run and only read
    it (the same seed gives the same run: test_same_seed_same_curve_different_seed_...)."""
    return quiet()


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SOURCE, env.get("PYTHONPATH")]))
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def test_one_epoch_writes_metrics_png_and_model(tmp_path, capsys):
    assert main(["train", *SMALL, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "epoch 1/1" in printed and "summary" in printed
    for phrase in ("test accuracy", "samples/s", "peak activation memory", "recomputed"):
        assert phrase in printed

    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["config"]["model"] == "cnn" and metrics["config"]["epochs"] == 1
    assert metrics["dataset"] == {
        "name": "digits",
        "train_samples": 150,
        "test_samples": 60,
        "image_shape": [1, 8, 8],
    }
    assert len(metrics["step_losses"]) == math.ceil(150 / TrainConfig().batch_size)
    assert all(math.isfinite(v) and v > 0 for v in metrics["step_losses"])
    (epoch,) = metrics["epochs"]
    assert set(epoch) >= {"train_loss", "train_accuracy", "test_loss", "test_accuracy", "lr"}
    summary = metrics["summary"]
    assert 0.0 <= summary["test_accuracy"] <= 1.0
    assert summary["samples_per_second"] > 0 and summary["peak_activation_bytes"] > 0
    assert summary["recomputed_bytes"] == 0  # checkpointing none recomputes nothing

    png = (tmp_path / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    matplotlib_image = pytest.importorskip("matplotlib.image")
    pixels = matplotlib_image.imread(tmp_path / "curves.png")
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0  # not a blank image

    with np.load(tmp_path / "model.npz") as archive:
        assert "0.weight" in archive.files


def test_balanced_checkpointing_gives_identical_losses_and_parameters(tmp_path):
    plain = quiet(out=str(tmp_path / "none"))
    balanced = quiet(checkpointing="balanced", out=str(tmp_path / "balanced"))
    assert balanced["step_losses"] == plain["step_losses"]  # bit for bit
    assert balanced["epochs"][0]["test_loss"] == plain["epochs"][0]["test_loss"]
    assert balanced["summary"]["recomputed_bytes"] > 0 == plain["summary"]["recomputed_bytes"]
    with (
        np.load(tmp_path / "none" / "model.npz") as a,
        np.load(tmp_path / "balanced" / "model.npz") as b,
    ):
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_budget_reports_its_plans_predicted_and_measured_peak(default_run, tmp_path, capsys):
    plain = default_run
    budget = plain["summary"]["peak_activation_bytes"] // 3
    out = str(tmp_path / "run")
    assert main(["train", *SMALL, "--checkpointing", f"budget:{budget}", "--out", out]) == 0
    printed = capsys.readouterr().out
    assert "budget plan            predicted peak" in printed and "measured" in printed
    summary = json.loads((Path(out) / "metrics.json").read_text())["summary"]  # the same run's
    assert summary["budget_bytes"] == budget
    assert 0 < summary["plan_measured_peak_bytes"] <= 1.1 * summary["plan_predicted_peak_bytes"]
    assert "plan_predicted_peak_bytes" not in plain["summary"]


@pytest.mark.parametrize(("workers", "batch_size", "samples"), [(2, 32, 150), (3, 5, 22)])
def test_workers_give_the_same_losses(workers, batch_size, samples):
    """N in-process replicas reproduce the single-worker curve.

    Not bit for bit: one worker's matmuls and convolutions sum the batch in one pass, N
    workers sum their shards and then the shards' gradients, so float32 rounding differs
    (about 1e-7 relative per step, growing slowly as training goes). The losses must agree to
    ``WORKERS_RTOL``. (3, 5, 22): shards of unequal size, and a last batch of 2 samples that
    leaves the third worker an empty shard.
    """
    single = quiet(batch_size=batch_size, max_train_samples=samples)
    parallel = quiet(batch_size=batch_size, max_train_samples=samples, workers=workers)
    assert parallel["config"]["world_size"] == workers
    np.testing.assert_allclose(parallel["step_losses"], single["step_losses"], rtol=WORKERS_RTOL)
    assert parallel["epochs"][0]["train_accuracy"] == single["epochs"][0]["train_accuracy"]
    assert parallel["epochs"][0]["test_loss"] == pytest.approx(
        single["epochs"][0]["test_loss"], rel=WORKERS_RTOL
    )
    # with data parallelism too, the strategy changes nothing
    balanced = quiet(
        batch_size=batch_size, max_train_samples=samples, workers=workers, checkpointing="balanced"
    )
    assert balanced["step_losses"] == parallel["step_losses"]


def test_same_seed_same_curve_different_seed_different_curve():
    assert quiet(seed=3)["step_losses"] == quiet(seed=3)["step_losses"]
    assert quiet(seed=3)["step_losses"] != quiet(seed=4)["step_losses"]


def test_mlp_sgd_step_schedule_and_clipping_run():
    metrics = quiet(model="mlp", optimizer="sgd", schedule="step", clip_norm=1.0, epochs=2)
    assert len(metrics["epochs"]) == 2
    assert metrics["config"]["lr"] == 0.05
    assert metrics["epochs"][1]["train_loss"] < metrics["epochs"][0]["train_loss"]


def test_progress_bar_when_asked(tmp_path, capsys):
    pytest.importorskip("tqdm")
    assert main(["train", *SMALL[:-1], "--progress", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "epoch 1/1" in captured.err and "batch" in captured.err  # tqdm writes to stderr


def test_mnist_from_idx_files(tmp_path, capsys):
    (tmp_path / "mnist").mkdir()
    write_mnist(tmp_path / "mnist", train=40, test=12)
    out = tmp_path / "out"
    code = main(
        [
            "train",
            "--dataset",
            "mnist",
            "--data-dir",
            str(tmp_path / "mnist"),
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["dataset"]["image_shape"] == [1, 28, 28]
    assert metrics["dataset"]["train_samples"] == 40 and len(metrics["step_losses"]) == 3


def test_missing_mnist_files_is_a_clear_error(tmp_path, capsys):
    write_mnist(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").unlink()
    out = ["--out", str(tmp_path / "run"), "--no-progress"]
    code = main(["train", "--dataset", "mnist", "--data-dir", str(tmp_path), *out])
    error = capsys.readouterr().err
    assert code == 1
    assert error.startswith("retrograd train: MNIST files missing")
    assert "train-images-idx3-ubyte" in error and "Traceback" not in error
    assert main(["train", "--dataset", "mnist", *out]) == 2  # a usage error
    assert "--data-dir" in capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments",
    [
        ["--model", "resnet"],
        ["--epochs", "0"],
        ["--batch-size", "-3"],
        ["--lr", "abc"],
        ["--checkpointing", "full"],
        ["--engine", "nccl"],
        ["--workers", "0"],
    ],
)
def test_bad_arguments_are_argparse_errors(arguments, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *arguments])
    assert exit_info.value.code == 2
    assert "retrograd train: argument" in capsys.readouterr().err


def test_conflicting_settings_are_one_line_errors(capsys):
    assert main(["train", "--engine", "mpi", "--workers", "2"]) == 2
    assert "--workers is for the local engine" in capsys.readouterr().err


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``python -m retrograd train`` (the CNN, at the small sizes), in a fresh process whose
    stderr is not a terminal, and its folder: one launch for the two tests below."""
    out = tmp_path_factory.mktemp("fresh")
    completed = subprocess.run(
        [sys.executable, "-m", "retrograd", "train", *SMALL[:-1], "--out", str(out)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    return completed, out


def test_python_m_retrograd_train(fresh_run):
    completed, out = fresh_run
    assert completed.returncode == 0, completed.stderr
    # stderr is not a terminal here: no progress bars, but every epoch and the summary print
    assert "epoch 1/1" in completed.stdout and "summary" in completed.stdout
    assert "batch" not in completed.stderr
    assert (out / "metrics.json").is_file() and (out / "curves.png").is_file()


def test_mpi_engine_under_mpiexec(default_run, tmp_path):
    pytest.importorskip("mpi4py", reason='mpi4py is not installed (pip install -e ".[all]")')
    from retrograd.distributed import launch

    if launch.find_mpiexec() is None:
        pytest.skip("mpiexec not found (the mpich wheel of the distributed extra provides it)")
    command = launch.mpiexec_command(
        2,
        [
            "-m",
            "retrograd",
            "train",
            "--engine",
            "mpi",
            *SMALL[:-1],
            "--timeout",
            "30",
            "--out",
            str(tmp_path),
        ],
    )
    completed = subprocess.run(
        command, capture_output=True, text=True, env=child_env(), timeout=180
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.count("summary") == 1  # rank 0 alone reports
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["config"]["world_size"] == 2 and metrics["config"]["engine"] == "mpi"
    single = default_run
    np.testing.assert_allclose(metrics["step_losses"], single["step_losses"], rtol=WORKERS_RTOL)


def test_torch_backend_trains_like_numpy(default_run, tmp_path, capsys):
    """``--backend torch``: the same run on rg.TorchBackend("cpu"), the same losses to float32
    rounding (the seeded generator gives both backends the same initial weights)."""
    pytest.importorskip("torch")
    assert main(["train", *SMALL, "--backend", "torch", "--out", str(tmp_path)]) == 0
    assert "torch backend on cpu" in capsys.readouterr().out
    on_torch = json.loads((tmp_path / "metrics.json").read_text())
    on_numpy = default_run
    np.testing.assert_allclose(
        on_torch["step_losses"], on_numpy["step_losses"], rtol=1e-4, atol=1e-5
    )


def test_device_without_the_torch_backend_is_a_one_line_error(capsys):
    assert main(["train", "--device", "cuda"]) == 2
    assert "--device needs --backend torch" in capsys.readouterr().err


def test_an_unavailable_device_is_a_one_line_error(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: cuda is available")
    assert main(["train", "--backend", "torch", "--device", "cuda"]) == 1
    assert "is not available" in capsys.readouterr().err


def test_zero_shards_the_optimizer_state_and_trains_as_data_parallel(tmp_path, capsys):
    """``--zero``: the same losses as plain data parallel (the same update, computed by each
    parameter's owner), and each worker holds at most half the Adam state plus its largest
    parameter's (whole parameters are owned: the CNN's second convolution alone is most of it)."""
    plain = quiet(batch_size=32, workers=2)
    zero = quiet(batch_size=32, workers=2, zero=True)
    np.testing.assert_allclose(zero["step_losses"], plain["step_losses"], rtol=WORKERS_RTOL)
    full, share = (
        plain["summary"]["optimizer_state_bytes"],
        zero["summary"]["optimizer_state_bytes"],
    )
    # two float32 moments, and a 0-d float32 step per parameter tensor (the CNN's six), as torch's
    assert full == 2 * 4 * plain["summary"]["parameters"] + 4 * 6
    largest = 2 * 4 * 73728  # the 128 x 64 x 3 x 3 convolution's two float32 moments
    assert share < full and share <= full / 2 + largest
    assert main(["train", *SMALL, "--workers", "2", "--zero", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "optimizer state" in printed and "ZeRO: sharded over 2 workers" in printed


def test_the_reported_activation_memory_is_a_step_s_not_the_process_s_first_allocations(
    fresh_run,
):
    """In a fresh process the first step also allocates what stays for the whole run
    (compiled kernels, modules imported on first use): 30-40 MiB counted as the CNN's
    activations, whose step on 16 images of 8x8 holds about 1.6 MiB."""
    completed, out = fresh_run
    assert completed.returncode == 0, completed.stderr
    summary = json.loads((out / "metrics.json").read_text())["summary"]
    assert summary["peak_activation_bytes"] > 0 and metrics_model(out) == "cnn"
    assert summary["peak_activation_bytes"] < 4 * 2**20, summary["peak_activation_bytes"]


def metrics_model(out: Path) -> str:
    return json.loads((out / "metrics.json").read_text())["config"]["model"]
