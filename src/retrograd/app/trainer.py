"""The training loop behind ``retrograd train``: data, replicas, data parallelism, metrics.

One loop serves every way of running:

- one worker: one model replica, trained in the calling thread;
- ``workers=N`` (in process): N replicas on devices ``cpu:0`` ... ``cpu:N-1``, one thread each,
  their gradients summed during backward by a local :class:`DistributedContext`;
- ``engine="mpi"``: one replica per ``mpiexec`` rank, the same sum through MPI;
  ``engine="torch"``: one per ``torchrun`` rank, through torch.distributed (gloo).

Each batch is split into as many contiguous shards as there are replicas, and each replica's
loss is its shard's summed cross-entropy divided by the size of the *whole* batch. The
gradients' sum over replicas (``ReduceOperation.SUM``) is therefore the gradient of the
batch's mean loss, exactly the quantity one worker computes, also when the batch does not
divide evenly (the last batch of an epoch). Every replica then takes the same optimizer step
from the same summed gradients, so the replicas stay identical.

>>> config = TrainConfig(epochs=1, max_train_samples=64, max_test_samples=32, out=None)
>>> metrics = train(config, echo=lambda *args: None)
>>> len(metrics["step_losses"]), 0.0 <= metrics["summary"]["test_accuracy"] <= 1.0
(4, True)
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import retrograd as rg

from .. import nn, optim
from ..distributed import ENGINES
from ..distributed.zero import optimizer_state_bytes
from ..memory import measure_step_memory
from ..nn import functional as F  # noqa: N812  (PyTorch's idiom)
from ._usage import UsageError
from .data import Dataset, load_dataset
from .models import MODELS, build_model

__all__ = [
    "DEFAULT_LR",
    "STRATEGIES",
    "TrainConfig",
    "evaluate",
    "make_strategy",
    "plot_curves",
    "train",
]

#: ``--checkpointing`` names and the strategies they select
STRATEGIES: dict[str, Callable[[], rg.CheckpointStrategy]] = {
    "none": rg.NoCheckpointing,
    "balanced": rg.BalancedCheckpointing,
}


def make_strategy(name: str) -> rg.CheckpointStrategy:
    """The strategy a ``--checkpointing`` value names: ``none``, ``balanced``, or
    ``budget:SIZE`` (``budget:64MB``, ``budget:2GiB``) for :class:`rg.BudgetCheckpointing`."""
    kind, _, size = name.partition(":")
    if kind == "budget" and size:
        return rg.BudgetCheckpointing(size)
    if size or kind not in STRATEGIES:
        raise ValueError(
            f"checkpointing must be one of {tuple(STRATEGIES)} or budget:SIZE "
            f"(budget:64MB), got {name!r}"
        )
    return STRATEGIES[kind]()


def _valid_strategy(name: str) -> bool:
    try:
        make_strategy(name)
    except (ValueError, TypeError):
        return False
    return True


#: the learning rate each optimizer gets when ``--lr`` is not given
DEFAULT_LR = {"adam": 2e-3, "sgd": 0.05}
OPTIMIZERS = ("adam", "sgd")
#: ``--backend`` names: the inner backend every replica runs on
BACKENDS = ("numpy", "torch")
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
        checks = [
            (self.model in MODELS, f"model must be one of {MODELS}"),
            (self.optimizer in OPTIMIZERS, f"optimizer must be one of {OPTIMIZERS}"),
            (self.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}"),
            (
                _valid_strategy(self.checkpointing),
                f"checkpointing must be one of {tuple(STRATEGIES)} or budget:SIZE",
            ),
            (self.engine in ENGINES, f"engine must be one of {ENGINES}"),
            (self.epochs >= 1, "epochs must be at least 1"),
            (self.batch_size >= 1, "batch size must be at least 1"),
            (self.workers >= 1, "workers must be at least 1"),
            (self.lr is None or self.lr > 0, "lr must be positive"),
            (self.clip_norm is None or self.clip_norm > 0, "clip norm must be positive"),
            (self.backend in BACKENDS, f"backend must be one of {BACKENDS}"),
            (
                self.device is None or self.backend == "torch",
                "--device needs --backend torch",
            ),
            (
                not (self.engine != "local" and self.workers > 1),
                "--workers is for the local engine; under mpiexec or torchrun every rank is one "
                "worker",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(f"train: {message}")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.optimizer]


@dataclass
class _EpochTally:
    """Per-step sums over the shards this process computed (reduced across processes)."""

    steps: int
    loss: np.ndarray = field(init=False)  # the batch's mean loss, summed over shards
    correct: np.ndarray = field(init=False)
    samples: np.ndarray = field(init=False)
    recomputed: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.loss = np.zeros(self.steps)
        self.correct = np.zeros(self.steps)
        self.samples = np.zeros(self.steps)
        self.recomputed = np.zeros(self.steps)

    def packed(self) -> np.ndarray:
        return np.stack([self.loss, self.correct, self.samples, self.recomputed])

    def unpack(self, array: np.ndarray) -> None:
        self.loss, self.correct, self.samples, self.recomputed = (row.copy() for row in array)


def inner_backend(config: TrainConfig) -> rg.Backend:
    """The inner backend ``config`` asks for: NumPy, or torch on ``config.device``."""
    if config.backend == "torch":
        try:
            return rg.TorchBackend(config.device or "cpu")
        except ImportError:
            raise UsageError(
                'train: --backend torch needs torch (pip install "retrograd[torch]")'
            ) from None
        except (RuntimeError, ValueError) as error:  # no such device (no CUDA build, no GPU)
            raise UsageError(f"train: device {config.device!r}: {error}") from None
    return rg.NumpyBackend()


class Replica:
    """One device's model copy, with its backend, optimizer and schedule."""

    def __init__(
        self, template: nn.Module, config: TrainConfig, device: rg.Device, distributed: bool
    ):
        self.backend = rg.Autodiff(inner_backend(config), make_strategy(config.checkpointing))
        self.device = device
        self.model = template.replicate(backend=self.backend, device=device)
        if distributed:
            self.model.set_distributed()
        lr = config.learning_rate
        if config.optimizer == "adam":
            kind, settings = optim.Adam, {"lr": lr}
        else:
            kind, settings = optim.SGD, {"lr": lr, "momentum": 0.9, "nesterov": True}
        if config.zero and distributed:  # (the context that hosts ``device`` runs by now)
            from ..distributed import ZeroRedundancyOptimizer

            self.optimizer = ZeroRedundancyOptimizer(self.model, kind, **settings)
        else:
            self.optimizer = kind(self.model, **settings)
        if config.schedule == "cosine":
            self.schedule = optim.CosineAnnealingLR(self.optimizer, T_max=config.epochs)
        elif config.schedule == "step":
            self.schedule = optim.StepLR(
                self.optimizer, step_size=max(1, config.epochs // 3), gamma=0.3
            )
        else:
            self.schedule = None
        self.clip_norm = config.clip_norm

    def loss(self, images: np.ndarray, labels: np.ndarray, batch_size: int) -> tuple[Any, int]:
        """This shard's summed cross-entropy over ``batch_size``, and how many it got right."""
        with rg.use_backend(self.backend):
            if len(images) == 0:  # more replicas than samples: contribute zero gradients
                parameters = self.model.parameters()
                return sum((p.sum() for p in parameters[1:]), parameters[0].sum()) * 0.0, 0
            x = rg.tensor(images, backend=self.backend, device=self.device)
            y = rg.tensor(labels, backend=self.backend, device=self.device)
            logits = self.model(x)
            correct = int((logits.argmax(1).numpy().ravel() == labels).sum())
            return F.cross_entropy(logits, y, reduction="sum") * (1.0 / batch_size), correct

    def step(self, images: np.ndarray, labels: np.ndarray, batch_size: int):
        """Forward, backward (gradients summed with the other replicas), optimizer step."""
        loss, correct = self.loss(images, labels, batch_size)
        grads = loss.backward()
        if self.clip_norm is not None:
            optim.clip_grad_norm(grads, self.model, self.clip_norm, as_tensor=True)
        self.optimizer.step(grads)
        return float(loss.item()), correct, len(images), grads.recomputed_bytes

    def end_epoch(self) -> None:
        if self.schedule is not None:
            self.schedule.step()


class _LocalGroup:
    """The replicas of this process: one, or ``workers`` on threads with a local context."""

    def __init__(self, template: nn.Module, config: TrainConfig):
        from ..distributed import DistributedConfig, DistributedContext, ReduceOperation

        self.world = config.workers
        self.shards = list(range(self.world))
        self.is_main = True
        self.rank = 0
        devices = [rg.Device("cpu", i) for i in range(self.world)]
        distributed = self.world > 1
        self.context = None
        self.pool = None
        if distributed:
            settings = DistributedConfig(ReduceOperation.SUM, timeout=config.timeout)
            self.context = DistributedContext(devices, settings).start()
            self.pool = ThreadPoolExecutor(self.world, thread_name_prefix="retrograd-worker")
        self.replicas = [Replica(template, config, d, distributed) for d in devices]

    def run(self, shards: list[tuple[np.ndarray, np.ndarray]], batch_size: int) -> list:
        if self.pool is None:
            return [self.replicas[0].step(*shards[0], batch_size)]
        futures = [
            self.pool.submit(replica.step, *shard, batch_size)
            for replica, shard in zip(self.replicas, shards)
        ]
        return [future.result() for future in futures]

    def reduce(self, array: np.ndarray) -> np.ndarray:
        return array

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        if self.context is not None:
            self.context.close()


class _MpiGroup:
    """This rank's replica in a job started by ``mpiexec`` (or ``torchrun``: engine torch)."""

    def __init__(self, template: nn.Module, config: TrainConfig):
        from ..distributed import DistributedConfig, DistributedContext, ReduceOperation

        settings = DistributedConfig(ReduceOperation.SUM, timeout=config.timeout)
        self.context = DistributedContext.from_launcher(settings, engine=config.engine).start()
        self.world = self.context.world_size
        self.rank = self.context.rank
        self.shards = [self.rank]
        self.is_main = self.rank == 0
        self.replicas = [Replica(template, config, self.context.device, self.world > 1)]

    def run(self, shards: list[tuple[np.ndarray, np.ndarray]], batch_size: int) -> list:
        return [self.replicas[0].step(*shards[0], batch_size)]

    def reduce(self, array: np.ndarray) -> np.ndarray:
        from ..distributed import ReduceOperation, all_reduce

        device = self.context.device
        summed = all_reduce(
            rg.tensor(array, backend=self.replicas[0].backend, device=device),
            ReduceOperation.SUM,
            self.context.devices,
        )
        return summed.resolve().numpy()

    def close(self) -> None:
        self.context.close()


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


def _progress(total: int, description: str, enabled: bool | None):
    """A tqdm bar when tqdm is installed and enabled (``None``: when stderr is a terminal)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=description, unit="batch", leave=True, dynamic_ncols=True)


def optimizer_state_line(state_bytes: int, zero: bool, world: int) -> str:
    """The summary's line on the optimizer state one worker holds."""
    how = f"ZeRO: sharded over {world} workers" if zero and world > 1 else "a full copy each"
    return f"  optimizer state        {_format_bytes(state_bytes)} per worker ({how})"


def _format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


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


def train(config: TrainConfig, echo: Callable[..., None] = print) -> dict[str, Any]:
    """Train as ``config`` says; return the metrics (also written to ``config.out``).

    Output (files, summary) comes from the main process only (rank 0 under ``mpiexec``).
    """
    config.validate()
    threads = blas_threads_per_rank() if config.engine == "mpi" else None
    if threads is not None:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # then BLAS keeps its default
            pass
        else:
            with threadpool_limits(limits=threads):
                return _train(config, echo)
    return _train(config, echo)


def _train(config: TrainConfig, echo: Callable[..., None]) -> dict[str, Any]:
    started = time.perf_counter()
    dataset = load_dataset(config.dataset, config.data_dir)
    dataset = dataset.limited(config.max_train_samples, config.max_test_samples)
    if len(dataset.train_labels) == 0:
        raise UsageError("train: no training samples")

    # The same seed gives the same initial parameters and batch order under every strategy,
    # worker count and engine.
    template_backend = rg.Autodiff(rg.NumpyBackend())
    with rg.use_backend(template_backend):
        rg.seed(config.seed)
        template = build_model(config.model, dataset.image_shape, dataset.classes)
    order_rng = np.random.default_rng(config.seed)

    group = (_LocalGroup if config.engine == "local" else _MpiGroup)(template, config)
    say = echo if group.is_main else (lambda *args, **kwargs: None)
    try:
        say(_banner(config, dataset, template, group.world))
        memory = _probe_memory(template, config, dataset, group.world)
        history, step_losses, train_seconds, recomputed = _run_epochs(
            config, dataset, group, order_rng, say
        )
        state_bytes = optimizer_state_bytes(group.replicas[0].optimizer)
    finally:
        group.close()

    final = history[-1]
    samples = len(dataset.train_labels) * config.epochs
    summary = {
        "test_accuracy": final["test_accuracy"],
        "test_loss": final["test_loss"],
        "train_seconds": train_seconds,
        "total_seconds": time.perf_counter() - started,
        "samples_per_second": samples / train_seconds if train_seconds > 0 else math.inf,
        "peak_activation_bytes": memory.peak_activation_bytes,
        "kept_after_forward_bytes": memory.after_forward_bytes,
        "recomputed_bytes": recomputed,
        "optimizer_state_bytes": state_bytes,
        "parameters": template.num_parameters(),
    }
    metrics = {
        "config": asdict(config) | {"lr": config.learning_rate, "world_size": group.world},
        "dataset": {
            "name": dataset.name,
            "train_samples": len(dataset.train_labels),
            "test_samples": len(dataset.test_labels),
            "image_shape": list(dataset.image_shape),
        },
        "epochs": history,
        "step_losses": step_losses,
        "summary": summary,
    }
    if group.is_main:
        written = _write_outputs(config, metrics, group.replicas[0].model, say)
        say(_summary_text(summary, config, group.world, written))
    return metrics


def _banner(config: TrainConfig, dataset: Dataset, model: nn.Module, world: int) -> str:
    workers = f"{world} worker{'s' if world > 1 else ''}" + (
        f" ({config.engine})" if config.engine != "local" else ""
    )
    return (
        f"retrograd train: {config.model} ({model.num_parameters():,} parameters) on "
        f"{dataset.name} ({len(dataset.train_labels)} train / {len(dataset.test_labels)} test), "
        f"{config.epochs} epochs, batch {config.batch_size}, {config.optimizer} "
        f"lr {config.learning_rate:g} ({config.schedule}), checkpointing {config.checkpointing}, "
        f"{workers}, seed {config.seed}"
        + (f", torch backend on {config.device or 'cpu'}" if config.backend == "torch" else "")
    )


def _probe_memory(template: nn.Module, config: TrainConfig, dataset: Dataset, world: int):
    """Activation memory of one training step of one worker (its shard of the first batch),
    on a throw-away replica, before training starts (tracing slows the step)."""
    shard = max(1, math.ceil(min(config.batch_size, len(dataset.train_labels)) / world))
    replica = Replica(template, config, rg.Device("cpu", 0), distributed=False)
    images, labels = dataset.train_images[:shard], dataset.train_labels[:shard]
    return measure_step_memory(
        lambda: replica.loss(images, labels, config.batch_size)[0], replica.model.parameters()
    )


def _run_epochs(config, dataset, group, order_rng, say):
    images, labels = dataset.train_images, dataset.train_labels
    count, batch = len(labels), config.batch_size
    steps = math.ceil(count / batch)
    history: list[dict[str, Any]] = []
    step_losses: list[float] = []
    train_seconds, recomputed_total = 0.0, 0
    for epoch in range(1, config.epochs + 1):
        order = order_rng.permutation(count)
        tally = _EpochTally(steps)
        bar = _progress(
            steps, f"epoch {epoch}/{config.epochs}", config.progress if group.is_main else False
        )
        local_loss = local_correct = local_samples = 0.0
        lr = group.replicas[0].optimizer.lr
        epoch_start = time.perf_counter()
        for step in range(steps):
            indices = order[step * batch : (step + 1) * batch]
            parts = np.array_split(indices, group.world)
            shards = [(images[parts[s]], labels[parts[s]]) for s in group.shards]
            for loss, correct, samples, recomputed in group.run(shards, len(indices)):
                tally.loss[step] += loss
                tally.correct[step] += correct
                tally.samples[step] += samples
                tally.recomputed[step] += recomputed
                local_loss += loss * len(indices)
                local_correct += correct
                local_samples += samples
            if bar is not None:
                bar.update(1)
                bar.set_postfix(
                    loss=f"{local_loss / max(1, local_samples):.4f}",
                    acc=f"{local_correct / max(1, local_samples):.3f}",
                )
        train_seconds += time.perf_counter() - epoch_start
        for replica in group.replicas:
            replica.end_epoch()
        tally.unpack(group.reduce(tally.packed()))
        test_loss, test_accuracy = evaluate(
            group.replicas[0].model, dataset.test_images, dataset.test_labels
        )
        sizes = np.array([len(order[s * batch : (s + 1) * batch]) for s in range(steps)])
        record = {
            "epoch": epoch,
            "lr": lr,
            "train_loss": float((tally.loss * sizes).sum() / count),
            "train_accuracy": float(tally.correct.sum() / count),
            "test_loss": test_loss,
            "test_accuracy": test_accuracy,
            "seconds": time.perf_counter() - epoch_start,
            "recomputed_bytes": int(tally.recomputed.sum()),
        }
        history.append(record)
        step_losses.extend(float(v) for v in tally.loss)
        recomputed_total += record["recomputed_bytes"]
        line = (
            f"epoch {epoch}/{config.epochs}: train loss {record['train_loss']:.4f} "
            f"acc {record['train_accuracy']:.2%} | test loss {test_loss:.4f} "
            f"acc {test_accuracy:.2%} | {record['seconds']:.1f} s"
        )
        if bar is not None:
            bar.set_postfix(loss=f"{record['train_loss']:.4f}", test_acc=f"{test_accuracy:.3f}")
            bar.close()
        say(line)
    return history, step_losses, train_seconds, recomputed_total


def _write_outputs(config: TrainConfig, metrics: dict, model: nn.Module, say) -> list[str]:
    if config.out is None:
        return []
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.json"
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    written = [str(metrics_path)]
    model.save(out / "model.npz")
    written.append(str(out / "model.npz"))
    try:
        written.append(str(plot_curves(metrics, out / "curves.png")))
    except ImportError:
        say('note: matplotlib is not installed, no curves.png (pip install "retrograd[examples]")')
    return written


def plot_curves(metrics: dict[str, Any], path: str | os.PathLike) -> Path:
    """Draw the loss (per step and per epoch) and accuracy (per epoch) curves to a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    epochs = metrics["epochs"]
    steps = metrics["step_losses"]
    per_epoch = len(steps) / len(epochs)
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(10, 4))
    loss_axes.plot(
        np.arange(1, len(steps) + 1) / per_epoch,
        steps,
        color="#9ecae1",
        lw=0.8,
        label="train (per step)",
    )
    numbers = [e["epoch"] for e in epochs]
    loss_axes.plot(
        numbers,
        [e["train_loss"] for e in epochs],
        "o-",
        color="#3182bd",
        label="train (epoch mean)",
    )
    loss_axes.plot(numbers, [e["test_loss"] for e in epochs], "s-", color="#e6550d", label="test")
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
        f"checkpointing {config['checkpointing']}, "
        f"{config['world_size']} worker(s)"
    )
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _summary_text(
    summary: dict[str, Any], config: TrainConfig, world: int, written: list[str]
) -> str:
    shard = math.ceil(config.batch_size / world)
    lines = [
        "summary",
        f"  test accuracy          {summary['test_accuracy']:.2%}",
        f"  training time          {summary['train_seconds']:.1f} s "
        f"({summary['samples_per_second']:,.0f} samples/s, {world} worker(s))",
        f"  peak activation memory {_format_bytes(summary['peak_activation_bytes'])} "
        f"(one step of one worker, {shard} samples, tracemalloc)",
        f"  recomputed in backward {_format_bytes(summary['recomputed_bytes'])} "
        f"(checkpointing {config.checkpointing}, all epochs and workers)",
        optimizer_state_line(summary["optimizer_state_bytes"], config.zero, world),
        f"  total time             {summary['total_seconds']:.1f} s",
    ]
    if written:
        lines.append("  wrote " + ", ".join(written))
    return "\n".join(lines)
