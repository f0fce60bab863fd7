"""The one training loop of ``retrograd train``, whatever the model.

A :class:`Task` says what is trained: its data (periods of batches: an epoch, or the steps
between two evaluations), its model, its summed loss and optimizer, what it evaluates at the
end of a period and what it reports. :func:`fit` does everything else, once for every task:

- the replicas: one model copy per device, each with its autodiff backend (the inner backend
  and checkpointing strategy the task's settings name) and its optimizer;
- data parallelism: ``workers=N`` replicas on threads of this process (devices ``cpu:0`` ...
  ``cpu:N-1``, gradients summed during backward by a local
  :class:`~retrograd.distributed.DistributedContext`), or one replica per ``mpiexec`` or
  ``torchrun`` rank (engine ``mpi`` or ``torch``);
- the run's folder, checked and held before any work (:mod:`.runfolder`), the activation
  memory probe, progress bars, per-step tallies, the output files and the summary's shared
  lines (:mod:`.outputs`); a loss that stops being a number stops the run before it writes.

Each batch ``(inputs, targets)`` is split into as many contiguous shards as there are
replicas, and each replica's loss is its shard's summed loss divided by the *whole* batch's
number of targets. The gradients' sum over replicas (``ReduceOperation.SUM``) is therefore the
gradient of the batch's mean loss, exactly what one worker computes, also when the batch does
not divide evenly. Every replica then takes the same optimizer step from the same summed
gradients, so the replicas stay identical.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

import retrograd as rg

from .. import nn, optim
from ..distributed.zero import optimizer_state_bytes
from ..memory import StepMemory, measure_step_memory
from ._usage import CommandError, UsageError
from .outputs import Report, progress_bar, summary_text, write_outputs
from .runfolder import RunFolder

__all__ = [
    "BACKENDS",
    "STRATEGIES",
    "History",
    "Period",
    "Replica",
    "Run",
    "StepResult",
    "StepTally",
    "Task",
    "blas_limit",
    "finite_positive",
    "fit",
    "inner_backend",
    "main_process",
    "make_strategy",
    "shard_rows",
    "valid_strategy",
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


def valid_strategy(name: str) -> bool:
    try:
        make_strategy(name)
    except (ValueError, TypeError):
        return False
    return True


#: ``--backend`` names: the inner backend every replica runs on
BACKENDS = ("numpy", "torch")
#: the torch devices a run can train on
DEVICE_TYPES = ("cpu", "cuda")


def finite_positive(value: float | None) -> bool:
    """Whether ``value`` is a number above 0 and below infinity (``nan``, ``inf``: no)."""
    return value is not None and math.isfinite(value) and value > 0


def inner_backend(backend: str, device: str | None) -> rg.Backend:
    """The inner backend a ``--backend`` / ``--device`` pair names: NumPy, or torch on
    ``device`` (default ``cpu``). A device that cannot exist is a :class:`UsageError`; one
    this machine lacks (no GPU, no torch) a :class:`CommandError`."""
    if backend != "torch":
        return rg.NumpyBackend()
    try:
        import torch
    except ImportError:
        raise CommandError('--backend torch needs torch — pip install "retrograd[torch]"') from None
    try:
        kind = torch.device(device or "cpu").type
    except (RuntimeError, ValueError):
        kind = None
    if kind not in DEVICE_TYPES:
        raise UsageError(
            f"train: --device {device}: retrograd trains on cpu or cuda devices — pass "
            "--device cpu, cuda or cuda:N"
        )
    try:
        return rg.TorchBackend(device or "cpu")
    except (RuntimeError, ValueError) as error:  # no such device here (no CUDA build, no GPU)
        raise CommandError(
            f"device {device!r}: {error} — train on --device cpu, or on a machine with that device"
        ) from None


def main_process(engine: str) -> bool:
    """Whether this process writes the run's files: always under the local engine, rank 0
    under a launcher (read from the environment mpiexec or torchrun gives every rank)."""
    if engine == "local":
        return True
    names = ("RANK",) if engine == "torch" else ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
    rank = next((os.environ[name] for name in names if os.environ.get(name)), "0")
    return rank.strip() == "0"


def blas_limit(threads: int | None) -> contextlib.AbstractContextManager:
    """A context limiting BLAS to ``threads`` threads (``None``, or no threadpoolctl installed:
    BLAS keeps its default)."""
    if threads is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads)


# -- what a task supplies -----------------------------------------------------------------------
@dataclass
class History:
    """What training has produced so far: the periodic records, every step's loss, the time
    spent in steps and the bytes recomputed in backward."""

    records: list[dict[str, Any]] = field(default_factory=list)
    step_losses: list[float] = field(default_factory=list)
    train_seconds: float = 0.0
    recomputed_bytes: int = 0

    def as_dict(self, records_key: str) -> dict[str, Any]:
        return {
            records_key: self.records,
            "step_losses": self.step_losses,
            "train_seconds": self.train_seconds,
            "recomputed_bytes": self.recomputed_bytes,
        }

    @classmethod
    def from_dict(cls, saved: dict[str, Any], records_key: str) -> History:
        return cls(
            saved[records_key],
            saved["step_losses"],
            saved["train_seconds"],
            saved["recomputed_bytes"],
        )


@dataclass
class Run:
    """A run in progress: its history and the number of optimizer steps taken (``start``: the
    step it began at, non-zero when it resumes a saved run)."""

    history: History = field(default_factory=History)
    step: int = 0
    start: int = 0


@dataclass
class Period:
    """Steps between two evaluations: their batches ``(inputs, targets)`` and a title (the
    progress bar's, when the task shows a bar per period)."""

    title: str
    steps: int
    batches: Iterator[tuple[np.ndarray, np.ndarray]]


class Task:
    """What one kind of model brings to :func:`fit`; subclasses override what they need.

    ``config`` is the run's settings; the loop reads ``seed``, ``workers``, ``checkpointing``,
    ``clip_norm`` (``None``: no clipping), ``timeout``, ``progress``, ``out`` and
    ``overwrite`` (and ``resume``, when it has one) from it.

    :func:`fit` calls :meth:`prepare`, :meth:`build_model`, :meth:`make_optimizer` (once per
    replica), :meth:`start`, :meth:`banner` and :meth:`probe_batch`; then for each of
    :meth:`periods`, for each step :meth:`before_step` and :meth:`loss` on every replica and
    :meth:`postfix`, then :meth:`end_period` and :meth:`save_state`; last :meth:`report` and
    :meth:`plot`.
    """

    #: the key under which metrics.json (and a saved run) keep the periodic records
    records_key = "records"
    #: counts a task's :meth:`loss` returns beside the loss, summed over shards and steps
    counts: tuple[str, ...] = ()
    #: ``local`` (threads of this process), ``mpi`` or ``torch`` (a launcher's ranks)
    engine = "local"
    #: whether a run into a folder holding a saved run of this kind may offer ``--resume``
    resumable = False
    #: whether :meth:`save_state` writes the optimizer's state (gathered first when sharded)
    saves_optimizer = False

    def __init__(self, config: Any):
        self.config = config

    def prepare(self) -> None:
        """Read the data (and, for a resumed run, the saved settings) before anything else."""

    def run_bar(self, run: Run) -> tuple[str, int] | None:
        """The title and length of one progress bar over the whole run; ``None``: a bar per
        period."""
        return None

    def blas_threads(self) -> int | None:
        """BLAS threads for the whole run (``None``: BLAS's default)."""
        return None

    def inner_backend(self) -> rg.Backend:
        return rg.NumpyBackend()

    def build_model(self) -> nn.Module:
        """The model, with fresh parameters (called once, seeded, on an autodiff backend)."""
        raise NotImplementedError

    def make_optimizer(self, model: nn.Module, build: OptimizerFactory) -> tuple[Any, Any]:
        """An optimizer of ``model``'s parameters, made by ``build(params, kind, **settings)``
        (:func:`optimizer_factory`), and a schedule stepped after every period (or ``None``)."""
        raise NotImplementedError

    def start(self, replicas: list[Replica]) -> Run:
        """A fresh run, or the saved one restored into ``replicas``."""
        return Run()

    def periods(self, run: Run) -> Iterator[Period]:
        """The periods left from ``run.step`` on; batches are drawn as the loop asks for them,
        so what a period's end saves (a sampler's state) is the state after its last step."""
        raise NotImplementedError

    def before_step(self, replica: Replica, step: int) -> None:
        """Settings of optimizer step number ``step`` (a learning rate, dropout's seed)."""

    def loss(self, replica: Replica, inputs: np.ndarray, targets: np.ndarray) -> tuple[Any, dict]:
        """The shard's *summed* loss on ``replica`` (under its backend) and its :attr:`counts`."""
        raise NotImplementedError

    def postfix(self, tally: StepTally, index: int) -> dict[str, str]:
        """The progress bar's figures after step ``index`` of a period."""
        return {}

    def end_period(
        self, replicas: list[Replica], run: Run, tally: StepTally, started: float
    ) -> tuple[str, dict[str, str]]:
        """Evaluate after a period (its steps' tally reduced over every process) and record
        it in ``run.history``; the line to print, and a period bar's closing figures."""
        raise NotImplementedError

    def save_state(self, replicas: list[Replica], run: Run, folder: RunFolder | None) -> None:
        """Save what resuming needs in ``folder``, after each period (nothing by default)."""

    def probe_batch(self, world: int) -> tuple[np.ndarray, np.ndarray]:
        """One worker's share of a batch, for measuring one step's activation memory."""
        raise NotImplementedError

    def banner(self, model: nn.Module, world: int, run: Run) -> str:
        """The run's first line(s): model, data and settings."""
        raise NotImplementedError

    def report(
        self, run: Run, model: nn.Module, world: int, memory: StepMemory, started: float
    ) -> Report:
        """Metrics, summary lines and further files of the finished run."""
        raise NotImplementedError

    def plot(self, metrics: dict[str, Any], file: IO[bytes]) -> Any:
        """Draw the run's curves into ``file`` (a PNG); ``ImportError`` without matplotlib."""
        raise NotImplementedError


#: ``build(params, kind, **settings)``: an optimizer of class ``kind`` over ``params``
OptimizerFactory = Callable[..., Any]


def optimizer_factory(zero: bool) -> OptimizerFactory:
    """How a task builds its optimizer: ``kind(params, **settings)``, or with ``zero`` the same
    optimizer with its state sharded across the running context's workers
    (``dist.ZeroRedundancyOptimizer``, ZeRO stage 1)."""
    if not zero:
        return lambda params, kind, **settings: kind(params, **settings)
    from ..distributed import ZeroRedundancyOptimizer

    return lambda params, kind, **settings: ZeroRedundancyOptimizer(params, kind, **settings)


# -- replicas and groups of them -----------------------------------------------------------------
@dataclass
class StepResult:
    """One replica's share of one step."""

    loss: float
    recomputed_bytes: int
    samples: int
    counts: dict[str, float]


class Replica:
    """One device's copy of the model, with its autodiff backend and optimizer."""

    def __init__(
        self, task: Task, template: nn.Module, device: rg.Device, rank: int, distributed: bool
    ):
        config = task.config
        self.task, self.device, self.rank = task, device, rank
        self.backend = rg.Autodiff(task.inner_backend(), make_strategy(config.checkpointing))
        self.model = template.replicate(backend=self.backend, device=device)
        if distributed:
            self.model.set_distributed()
        build = optimizer_factory(distributed and config.zero)
        self.optimizer, self.schedule = task.make_optimizer(self.model, build)
        self.clip_norm = config.clip_norm
        #: under a memory budget, the most activation bytes a step that followed its plan held
        #: (``Gradients.peak_bytes``); ``None`` until one did
        self.planned_peak_bytes: int | None = None

    def loss(self, inputs: np.ndarray, targets: np.ndarray, total: int) -> tuple[Any, dict]:
        """This shard's summed loss divided by ``total``, the whole batch's target count."""
        with rg.use_backend(self.backend):
            if len(targets) == 0:  # more replicas than samples: contribute zero gradients
                parameters = list(self.model.parameters())
                zero = sum((p.sum() for p in parameters[1:]), parameters[0].sum()) * 0.0
                return zero, dict.fromkeys(self.task.counts, 0)
            summed, counts = self.task.loss(self, inputs, targets)
            return summed * (1.0 / total), counts

    def step(self, inputs: np.ndarray, targets: np.ndarray, total: int, step: int) -> StepResult:
        """Forward, backward (gradients summed with the other replicas), optimizer step."""
        self.task.before_step(self, step)
        loss, counts = self.loss(inputs, targets, total)
        strategy = self.backend.checkpointing
        planned = getattr(strategy, "planned_steps", None)
        grads = loss.backward()
        if planned is not None and strategy.planned_steps > planned:
            self.planned_peak_bytes = max(self.planned_peak_bytes or 0, grads.peak_bytes)
        if self.clip_norm is not None:
            optim.clip_grad_norm(grads, self.model, self.clip_norm, as_tensor=True)
        self.optimizer.step(grads)
        return StepResult(float(loss.item()), grads.recomputed_bytes, len(targets), counts)

    def end_period(self) -> None:
        if self.schedule is not None:
            self.schedule.step()


class _LocalGroup:
    """The replicas of this process: one, or ``workers`` on threads with a local context."""

    def __init__(self, task: Task, template: nn.Module):
        from ..distributed import DistributedConfig, DistributedContext, ReduceOperation

        self.world = task.config.workers
        self.shards = list(range(self.world))
        self.is_main = True
        devices = [rg.Device("cpu", i) for i in range(self.world)]
        distributed = self.world > 1
        self.context = self.pool = None
        if distributed:  # before the replicas: a sharded optimizer finds its context
            settings = DistributedConfig(ReduceOperation.SUM, timeout=task.config.timeout)
            self.context = DistributedContext(devices, settings).start()
            self.pool = ThreadPoolExecutor(self.world, thread_name_prefix="retrograd-worker")
        self.replicas = [
            Replica(task, template, device, rank, distributed)
            for rank, device in enumerate(devices)
        ]

    def run(self, shards: list, total: int, step: int) -> list[StepResult]:
        if self.pool is None:
            return [self.replicas[0].step(*shards[0], total, step)]
        futures = [
            self.pool.submit(replica.step, *shard, total, step)
            for replica, shard in zip(self.replicas, shards)
        ]
        return [future.result() for future in futures]

    def reduce(self, array: np.ndarray) -> np.ndarray:
        return array

    def consolidate(self) -> None:
        """Gather a sharded optimizer state on the first replica (a collective: every
        replica's thread takes part); nothing to do for a plain optimizer."""
        if self.pool is None or not hasattr(self.replicas[0].optimizer, "consolidate_state_dict"):
            return
        futures = [self.pool.submit(r.optimizer.consolidate_state_dict, 0) for r in self.replicas]
        for future in futures:
            future.result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        if self.context is not None:
            self.context.close()


class _LauncherGroup:
    """This rank's replica in a job started by ``mpiexec`` (engine mpi) or ``torchrun``
    (engine torch)."""

    def __init__(self, task: Task, template: nn.Module):
        from ..distributed import DistributedConfig, DistributedContext, ReduceOperation

        settings = DistributedConfig(ReduceOperation.SUM, timeout=task.config.timeout)
        self.context = DistributedContext.from_launcher(settings, engine=task.engine).start()
        self.world = self.context.world_size
        self.rank = self.context.rank
        self.shards = [self.rank]
        self.is_main = self.rank == 0
        self.replicas = [Replica(task, template, self.context.device, self.rank, self.world > 1)]

    def consolidate(self) -> None:
        """Gather a sharded optimizer state on rank 0 (every rank takes part)."""
        optimizer = self.replicas[0].optimizer
        if self.world > 1 and hasattr(optimizer, "consolidate_state_dict"):
            optimizer.consolidate_state_dict(0)

    def run(self, shards: list, total: int, step: int) -> list[StepResult]:
        return [self.replicas[0].step(*shards[0], total, step)]

    def reduce(self, array: np.ndarray) -> np.ndarray:
        from ..distributed import ReduceOperation, all_reduce

        summed = all_reduce(
            rg.tensor(array, backend=self.replicas[0].backend, device=self.context.device),
            ReduceOperation.SUM,
            self.context.devices,
        )
        return summed.resolve().numpy()

    def close(self) -> None:
        self.context.close()


# -- the loop ------------------------------------------------------------------------------------
class StepTally:
    """Per-step sums over the shards this process computed in one period (reduced across
    processes at its end), and the running figures a progress bar shows."""

    def __init__(self, steps: int, counts: tuple[str, ...]):
        self.names = ("loss", "samples", "recomputed", *counts)
        self.sums = np.zeros((len(self.names), steps))
        self.seen_loss = self.seen_samples = 0.0  # this process's running totals
        self.seen_counts = dict.fromkeys(counts, 0.0)

    def __getitem__(self, name: str) -> np.ndarray:
        """Every step's sum of ``name`` (``loss``, ``samples``, ``recomputed`` or a count)."""
        return self.sums[self.names.index(name)]

    def add(self, index: int, results: list[StepResult], total: int) -> None:
        for result in results:
            values = (result.loss, result.samples, result.recomputed_bytes, *result.counts.values())
            self.sums[:, index] += values
            self.seen_loss += result.loss * total
            self.seen_samples += result.samples
            for name, value in result.counts.items():
                self.seen_counts[name] += value


def fit(task: Task, echo: Callable[..., None] = print) -> dict[str, Any]:
    """Train ``task``; return its metrics (also written to ``task.config.out``).

    Output (files, lines) comes from the main process only (rank 0 under ``mpiexec``)."""
    with blas_limit(task.blas_threads()):
        return _fit(task, echo)


def _fit(task: Task, echo: Callable[..., None]) -> dict[str, Any]:
    started = time.perf_counter()
    config = task.config
    folder = None
    if config.out is not None:  # checked (and held) before any work
        folder = RunFolder(
            config.out,
            overwrite=config.overwrite,
            resume=getattr(config, "resume", False),
            main=main_process(task.engine),
            resumable=task.resumable,
        )
    try:
        return _fit_in(task, folder, echo, started)
    finally:
        if folder is not None:
            folder.close()


def _fit_in(
    task: Task, folder: RunFolder | None, echo: Callable[..., None], started: float
) -> dict[str, Any]:
    task.prepare()
    # The same seed gives the same initial parameters under every strategy, worker count,
    # engine and backend: they are drawn once, on NumPy, and copied to every replica.
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend())):
        rg.seed(task.config.seed)
        template = task.build_model()
    group = (_LocalGroup if task.engine == "local" else _LauncherGroup)(task, template)
    say = echo if group.is_main else (lambda *args, **kwargs: None)
    try:
        run = task.start(group.replicas)
        say(task.banner(template, group.world, run))
        memory = _probe_memory(task, template, group.world)
        _run_periods(task, group, run, say, folder if group.is_main else None)
        state_bytes = optimizer_state_bytes(group.replicas[0].optimizer)
    finally:
        group.close()
    model = group.replicas[0].model
    report = task.report(run, model, group.world, memory, started)
    report.metrics["summary"].update(plan_report(group.replicas[0]))
    report.metrics["summary"]["optimizer_state_bytes"] = state_bytes
    report.metrics["summary"]["optimizer_state_sharded"] = bool(
        group.world > 1 and task.config.zero
    )
    if group.is_main:
        written = write_outputs(folder, report, model, task.plot, say)
        say(summary_text(report, task.config.checkpointing, group.world, written))
    return report.metrics


def plan_report(replica: Replica) -> dict[str, float]:
    """Under a memory budget: the budget, the peak its plan predicted (the engine's count,
    which ``Gradients.peak_bytes`` reports), the most a step that followed it held and the
    share of a step's FLOPs the plan recomputes (counted, not timed; absent for a replay),
    for this process's first replica; empty under another strategy or before any plan."""
    strategy = replica.backend.checkpointing
    predicted = getattr(strategy, "predicted_peak", None)
    if predicted is None or replica.planned_peak_bytes is None:
        return {}
    report = {
        "budget_bytes": strategy.max_bytes,
        "plan_predicted_peak_bytes": predicted,
        "plan_measured_peak_bytes": replica.planned_peak_bytes,
    }
    fraction = strategy.recompute_fraction
    if fraction is not None:
        report["plan_recompute_fraction"] = round(fraction, 4)
    return report


def _probe_memory(task: Task, template: nn.Module, world: int) -> StepMemory:
    """Activation memory of one training step of one worker, on a throw-away replica, before
    training starts (tracing slows the step). The step is measured the second time it runs:
    the first one in a process also allocates what stays for the whole run (compiled
    kernels, modules imported on first use, caches), 40 MiB where the CNN's step holds 1.6."""
    replica = Replica(task, template, rg.Device("cpu", 0), 0, distributed=False)
    inputs, targets = task.probe_batch(world)

    def loss() -> Any:
        return replica.loss(inputs, targets, max(1, targets.size))[0]

    loss().backward()
    return measure_step_memory(loss, replica.model.parameters())


def _run_periods(
    task: Task, group: Any, run: Run, say: Callable[..., None], folder: RunFolder | None
) -> None:
    enabled = task.config.progress if group.is_main else False
    whole_bar = task.run_bar(run)
    whole = progress_bar(whole_bar[1], whole_bar[0], enabled) if whole_bar else None
    try:
        for period in task.periods(run):
            bar = whole if whole is not None else progress_bar(period.steps, period.title, enabled)
            tally = StepTally(period.steps, task.counts)
            started = time.perf_counter()
            for index, (inputs, targets) in enumerate(period.batches):
                shards = _shards(inputs, targets, group.world)
                tick = time.perf_counter()
                results = group.run([shards[s] for s in group.shards], targets.size, run.step)
                run.history.train_seconds += time.perf_counter() - tick
                tally.add(index, results, targets.size)
                run.step += 1
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(**task.postfix(tally, index))
            tally.sums = np.array(group.reduce(tally.sums))
            _check_finite_losses(tally["loss"], run.step - period.steps)
            run.history.step_losses.extend(float(v) for v in tally["loss"])
            run.history.recomputed_bytes += int(tally["recomputed"].sum())
            line, closing = task.end_period(group.replicas, run, tally, started)
            for replica in group.replicas:
                replica.end_period()
            if whole is not None:
                whole.write(line)
            else:
                if bar is not None:
                    bar.set_postfix(**closing)
                    bar.close()
                say(line)
            if task.saves_optimizer:
                group.consolidate()
            task.save_state(group.replicas, run, folder)
    finally:
        if whole is not None:
            whole.close()


def _check_finite_losses(losses: np.ndarray, first_step: int) -> None:
    """Stop a run whose loss is no longer a number (the same on every process: the losses are
    reduced), before it writes parameters that are not numbers either."""
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        raise CommandError(
            f"the loss became {losses[bad[0]]} at step {first_step + bad[0] + 1} — lower --lr "
            "(or clip the gradients with --clip-norm); nothing from that step on was saved"
        )


def _shards(inputs: np.ndarray, targets: np.ndarray, world: int) -> list[tuple]:
    """The batch's ``world`` contiguous shards (views), the first ones a row longer when the
    rows do not divide evenly."""
    return list(zip(np.array_split(inputs, world), np.array_split(targets, world)))


def shard_rows(batch: int, world: int) -> int:
    """The rows of the largest shard when ``batch`` rows are split among ``world`` replicas."""
    return max(1, math.ceil(batch / world))
