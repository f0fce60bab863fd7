"""``retrograd train`` for the image classifiers: a CNN or an MLP on digits or MNIST.

:class:`ImageTask` is what these models bring to the shared loop (:mod:`.loop`): the data set
in epochs of shuffled batches, the model, the summed cross-entropy (and how many a shard got
right), Adam or SGD with a per-epoch schedule, an evaluation on the test set after each epoch,
and the report. The loop runs it on one worker, on ``workers=N`` threads, or as one rank of an
``mpiexec`` (``engine="mpi"``) or ``torchrun`` (``engine="torch"``) job.

>>> config = TrainConfig(epochs=1, max_train_samples=64, max_test_samples=32, out=None)
>>> metrics = train(config, echo=lambda *args: None)
>>> len(metrics["step_losses"]), 0.0 <= metrics["summary"]["test_accuracy"] <= 1.0
(4, True)
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import IO, Any

import numpy as np

import retrograd as rg

from .. import nn, optim
from ..distributed import ENGINES
from ..memory import StepMemory
from ..nn import functional as F  # noqa: N812  (PyTorch's idiom)
from ._usage import UsageError, require
from .data import Dataset, load_dataset
from .loop import (
    BACKENDS,
    STRATEGIES,
    OptimizerFactory,
    Period,
    Replica,
    Run,
    StepTally,
    Task,
    finite_positive,
    fit,
    inner_backend,
    make_strategy,
    shard_rows,
    valid_strategy,
)
from .models import MODELS, build_model
from .outputs import Report, draw_figure, plot_losses

__all__ = [
    "DEFAULT_LR",
    "STRATEGIES",
    "ImageTask",
    "TrainConfig",
    "evaluate",
    "make_strategy",
    "plot_curves",
    "train",
]

#: the learning rate each optimizer gets when ``--lr`` is not given
DEFAULT_LR = {"adam": 2e-3, "sgd": 0.05}
OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("cosine", "step", "none")
EVAL_BATCH = 512


@dataclass
class TrainConfig:
    """Everything a training run depends on (the ``retrograd train`` options)."""

    model: str = "cnn"
    dataset: str = "digits"
    data_dir: str | None = None
    epochs: int = 20
    batch_size: int = 16
    lr: float | None = None
    optimizer: str = "adam"
    schedule: str = "cosine"
    clip_norm: float | None = None
    checkpointing: str = "none"
    workers: int = 1
    #: shard the optimizer state across the workers (``dist.ZeroRedundancyOptimizer``)
    zero: bool = False
    engine: str = "local"
    seed: int = 0
    out: str | None = "retrograd-run"
    #: replace the run in ``out`` (a fresh run into a folder holding one stops otherwise)
    overwrite: bool = False
    max_train_samples: int | None = None
    max_test_samples: int | None = None
    #: show progress bars: ``None`` decides by whether stderr is a terminal
    progress: bool | None = None
    #: seconds a replica waits for its peers in data-parallel runs
    timeout: float = 60.0
    #: the inner backend: ``"numpy"`` or ``"torch"`` (``rg.TorchBackend(device)``)
    backend: str = "numpy"
    #: the torch backend's device (``"cpu"``, ``"cuda"``, ``"cuda:1"``); numpy takes none
    device: str | None = None

    def validate(self) -> None:
        require(
            [
                (self.model in MODELS, f"model must be one of {MODELS}"),
                (self.optimizer in OPTIMIZERS, f"optimizer must be one of {OPTIMIZERS}"),
                (self.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}"),
                (
                    valid_strategy(self.checkpointing),
                    f"checkpointing must be one of {tuple(STRATEGIES)} or budget:SIZE",
                ),
                (self.engine in ENGINES, f"engine must be one of {ENGINES}"),
                (self.epochs >= 1, "epochs must be at least 1"),
                (self.batch_size >= 1, "batch size must be at least 1"),
                (self.workers >= 1, "workers must be at least 1"),
                (self.lr is None or finite_positive(self.lr), "lr must be positive and finite"),
                (
                    self.clip_norm is None or finite_positive(self.clip_norm),
                    "clip norm must be positive and finite",
                ),
                (finite_positive(self.timeout), "timeout must be positive and finite"),
                (self.backend in BACKENDS, f"backend must be one of {BACKENDS}"),
                (
                    self.device is None or self.backend == "torch",
                    "--device needs --backend torch",
                ),
                (
                    not (self.engine != "local" and self.workers > 1),
                    "--workers is for the local engine; under mpiexec or torchrun every rank is "
                    "one worker",
                ),
                (
                    self.dataset != "mnist" or self.data_dir is not None,
                    "--dataset mnist needs --data-dir, the folder of the four MNIST IDX files",
                ),
            ]
        )
        if self.backend == "torch":
            inner_backend(self.backend, self.device)  # a device this machine has

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.optimizer]


def train(config: TrainConfig, echo: Callable[..., None] = print) -> dict[str, Any]:
    """Train as ``config`` says; return the metrics (also written to ``config.out``).

    Output (files, summary) comes from the main process only (rank 0 under ``mpiexec``).
    """
    config.validate()
    return fit(ImageTask(config), echo)


class ImageTask(Task):
    """A classifier of ``[N, 1, H, W]`` images trained for ``config.epochs`` epochs."""

    records_key = "epochs"
    counts = ("correct",)

    def __init__(self, config: TrainConfig):
        super().__init__(config)
        self.engine = config.engine
        self.dataset: Dataset | None = None
        # The batch order follows the seed alone: the same under every strategy, worker
        # count and engine.
        self.order_rng = np.random.default_rng(config.seed)

    def prepare(self) -> None:
        config = self.config
        dataset = load_dataset(config.dataset, config.data_dir)
        self.dataset = dataset.limited(config.max_train_samples, config.max_test_samples)
        if len(self.dataset.train_labels) == 0:
            raise UsageError("train: no training samples")

    def blas_threads(self) -> int | None:
        return blas_threads_per_rank() if self.engine == "mpi" else None

    def inner_backend(self) -> rg.Backend:
        return inner_backend(self.config.backend, self.config.device)

    def build_model(self) -> nn.Module:
        return build_model(self.config.model, self.dataset.image_shape, self.dataset.classes)

    def make_optimizer(self, model: nn.Module, build: OptimizerFactory) -> tuple[Any, Any]:
        config = self.config
        if config.optimizer == "adam":
            optimizer = build(model, optim.Adam, lr=config.learning_rate)
        else:
            optimizer = build(
                model, optim.SGD, lr=config.learning_rate, momentum=0.9, nesterov=True
            )
        if config.schedule == "cosine":
            return optimizer, optim.CosineAnnealingLR(optimizer, T_max=config.epochs)
        if config.schedule == "step":
            step_size = max(1, config.epochs // 3)
            return optimizer, optim.StepLR(optimizer, step_size=step_size, gamma=0.3)
        return optimizer, None

    def periods(self, run: Run) -> Iterator[Period]:
        images, labels = self.dataset.train_images, self.dataset.train_labels
        count, batch = len(labels), self.config.batch_size
        steps = math.ceil(count / batch)
        for epoch in range(1, self.config.epochs + 1):
            order = self.order_rng.permutation(count)
            batches = (
                (images[indices], labels[indices])
                for indices in (order[s * batch : (s + 1) * batch] for s in range(steps))
            )
            yield Period(f"epoch {epoch}/{self.config.epochs}", steps, batches)

    def loss(self, replica: Replica, inputs: np.ndarray, targets: np.ndarray) -> tuple[Any, dict]:
        x = rg.tensor(inputs, backend=replica.backend, device=replica.device)
        y = rg.tensor(targets, backend=replica.backend, device=replica.device)
        logits = replica.model(x)
        correct = int((logits.argmax(1).numpy().ravel() == targets).sum())
        return F.cross_entropy(logits, y, reduction="sum"), {"correct": correct}

    def postfix(self, tally: StepTally, index: int) -> dict[str, str]:
        seen = max(1, tally.seen_samples)
        return {
            "loss": f"{tally.seen_loss / seen:.4f}",
            "acc": f"{tally.seen_counts['correct'] / seen:.3f}",
        }

    def end_period(
        self, replicas: list[Replica], run: Run, tally: StepTally, started: float
    ) -> tuple[str, dict[str, str]]:
        count = len(self.dataset.train_labels)
        test_loss, test_accuracy = evaluate(
            replicas[0].model, self.dataset.test_images, self.dataset.test_labels
        )
        epoch = len(run.history.records) + 1
        record = {
            "epoch": epoch,
            "lr": replicas[0].optimizer.lr,
            "train_loss": float((tally["loss"] * tally["samples"]).sum() / count),
            "train_accuracy": float(tally["correct"].sum() / count),
            "test_loss": test_loss,
            "test_accuracy": test_accuracy,
            "seconds": time.perf_counter() - started,
            "recomputed_bytes": int(tally["recomputed"].sum()),
        }
        run.history.records.append(record)
        line = (
            f"epoch {epoch}/{self.config.epochs}: train loss {record['train_loss']:.4f} "
            f"acc {record['train_accuracy']:.2%} | test loss {test_loss:.4f} "
            f"acc {test_accuracy:.2%} | {record['seconds']:.1f} s"
        )
        return line, {"loss": f"{record['train_loss']:.4f}", "test_acc": f"{test_accuracy:.3f}"}

    def probe_batch(self, world: int) -> tuple[np.ndarray, np.ndarray]:
        rows = shard_rows(min(self.config.batch_size, len(self.dataset.train_labels)), world)
        return self.dataset.train_images[:rows], self.dataset.train_labels[:rows]

    def banner(self, model: nn.Module, world: int, run: Run) -> str:
        config, dataset = self.config, self.dataset
        workers = f"{world} worker{'s' if world > 1 else ''}" + (
            f" ({config.engine})" if config.engine != "local" else ""
        )
        return (
            f"retrograd train: {config.model} ({model.num_parameters():,} parameters) on "
            f"{dataset.name} ({len(dataset.train_labels)} train / "
            f"{len(dataset.test_labels)} test), {config.epochs} epochs, batch "
            f"{config.batch_size}, {config.optimizer} lr {config.learning_rate:g} "
            f"({config.schedule}), checkpointing {config.checkpointing}, {workers}, seed "
            f"{config.seed}"
            + (f", torch backend on {config.device or 'cpu'}" if config.backend == "torch" else "")
        )

    def report(
        self, run: Run, model: nn.Module, world: int, memory: StepMemory, started: float
    ) -> Report:
        config, dataset, history = self.config, self.dataset, run.history
        final = history.records[-1]
        samples = len(dataset.train_labels) * config.epochs
        seconds = history.train_seconds
        summary = {
            "test_accuracy": final["test_accuracy"],
            "test_loss": final["test_loss"],
            "train_seconds": seconds,
            "total_seconds": time.perf_counter() - started,
            "samples_per_second": samples / seconds if seconds > 0 else math.inf,
            "peak_activation_bytes": memory.peak_activation_bytes,
            "kept_after_forward_bytes": memory.after_forward_bytes,
            "recomputed_bytes": history.recomputed_bytes,
            "parameters": model.num_parameters(),
        }
        metrics = {
            "config": asdict(config) | {"lr": config.learning_rate, "world_size": world},
            "dataset": {
                "name": dataset.name,
                "train_samples": len(dataset.train_labels),
                "test_samples": len(dataset.test_labels),
                "image_shape": list(dataset.image_shape),
            },
            "epochs": history.records,
            "step_losses": history.step_losses,
            "summary": summary,
        }
        return Report(
            metrics,
            lines=[f"  test accuracy          {summary['test_accuracy']:.2%}"],
            throughput=f"{summary['samples_per_second']:,.0f} samples/s",
            memory_note="one step of one worker, "
            f"{shard_rows(config.batch_size, world)} samples, {memory.meter}",
            recompute_note=f"checkpointing {config.checkpointing}, all epochs and workers",
        )

    def plot(self, metrics: dict[str, Any], file: IO[bytes]) -> Any:
        return plot_curves(metrics, file)


def evaluate(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` on a data set, without recording a graph
    (the model is evaluated as a replica on the plain NumPy backend, in eval mode)."""
    plain = rg.NumpyBackend()
    replica = model.replicate(backend=plain, device=rg.Device("cpu", 0)).eval()
    total, correct = 0.0, 0
    for start in range(0, len(images), EVAL_BATCH):
        x = rg.tensor(images[start : start + EVAL_BATCH], backend=plain)
        y = labels[start : start + EVAL_BATCH]
        logits = replica(x)
        total += float(F.cross_entropy(logits, rg.tensor(y, backend=plain), reduction="sum").item())
        correct += int((logits.argmax(1).numpy().ravel() == y).sum())
    count = max(1, len(images))
    return total / count, correct / count


def blas_threads_per_rank() -> int | None:
    """BLAS threads for one of the ranks ``mpiexec`` started on this machine: the cores shared
    out among them (Hydra tells how many ranks share the machine in ``MPI_LOCALNRANKS``).
    ``None`` when the user set ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` themselves.

    Left to its default, every rank's BLAS starts a thread per core: on 2 cores, 2 ranks of
    2 threads each ran the default training 5 to 50 times slower per epoch than with 1 each.
    """
    if os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS"):
        return None
    local_ranks = int(os.environ.get("MPI_LOCALNRANKS") or os.environ.get("PMI_SIZE") or 1)
    return max(1, (os.cpu_count() or 1) // max(1, local_ranks))


def plot_curves(metrics: dict[str, Any], path: str | os.PathLike | IO[bytes]) -> Any:
    """Draw the loss (per step and per epoch) and accuracy (per epoch) curves to a PNG (a
    path, replaced whole, or an open file)."""

    def draw(figure: Any, axes: Any) -> None:
        loss_axes, accuracy_axes = axes
        epochs, steps = metrics["epochs"], metrics["step_losses"]
        numbers = [e["epoch"] for e in epochs]
        per_epoch = len(steps) / len(epochs)
        plot_losses(
            loss_axes,
            (np.arange(1, len(steps) + 1) / per_epoch, steps),
            (numbers, [e["train_loss"] for e in epochs], [e["test_loss"] for e in epochs]),
            ("train (per step)", "train (epoch mean)", "test"),
        )
        loss_axes.set(xlabel="epoch", ylabel="cross-entropy", title="loss", yscale="log")
        loss_axes.legend()
        accuracy_axes.plot(
            numbers, [e["train_accuracy"] for e in epochs], "o-", color="#3182bd", label="train"
        )
        accuracy_axes.plot(
            numbers, [e["test_accuracy"] for e in epochs], "s-", color="#e6550d", label="test"
        )
        accuracy_axes.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
        accuracy_axes.legend()
        config = metrics["config"]
        figure.suptitle(
            f"retrograd: {config['model']} on {metrics['dataset']['name']}, "
            f"checkpointing {config['checkpointing']}, {config['world_size']} worker(s)"
        )

    return draw_figure(path, draw, nrows=1, ncols=2, figsize=(10, 4))
