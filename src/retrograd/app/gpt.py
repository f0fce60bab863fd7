"""``retrograd train --model gpt`` and ``retrograd sample``: a character-level GPT.

Training reads a :class:`~retrograd.app.text.TextCorpus` (the standard library's own source by
default), trains :class:`~retrograd.app.models.GPT` with AdamW (weight decay on the 2-d
weights only, when the optimizer takes parameter groups), a linear warm-up then cosine
learning rate, and global-norm clipping, and writes to ``--out``:

- ``metrics.json``: configuration, corpus, per-step losses, the periodic evaluations (train
  and validation loss) and the summary, with the *unigram baseline* (entropy of the training
  text's character frequencies) the losses are to be read against;
- ``curves.png``: the loss curves and the baseline;
- ``checkpoint.npz``: model and optimizer state, the step, the batch sampler's state and the
  history, written at every evaluation and at the end; ``--resume`` continues from it to the
  same result an uninterrupted run reaches (batches, learning rate and dropout masks are
  functions of the seed and the step);
- ``model.npz`` (the parameters, as the CNN run writes) and ``sample.txt``.

Data parallelism is the CNN's (:mod:`.trainer`): ``--workers N`` runs N replicas on threads,
each on its contiguous share of the batch's windows, the loss of each its tokens' summed
cross-entropy over the whole batch's token count, the gradients summed during backward; so N
workers take the same steps as one (to float rounding). ``--checkpointing`` picks the strategy
each replica's autodiff backend uses.

BLAS runs one thread per worker: this model's matrices are small, and with more threads than
free cores (2 cores, other processes running) a step was 4x slower (0.45 s against 1.8 s).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

import retrograd as rg

from .. import optim
from ..distributed.zero import optimizer_state_bytes
from ..memory import measure_step_memory
from ..nn import functional as F  # noqa: N812  (PyTorch's idiom)
from ._usage import UsageError
from .models import GPT, GPTConfig
from .text import TextCorpus, load_corpus
from .trainer import (
    _format_bytes,
    _progress,
    _valid_strategy,
    make_strategy,
    optimizer_state_line,
)

__all__ = ["GPTTrainConfig", "load_run", "sample", "train_gpt"]

CHECKPOINT = "checkpoint.npz"
DEFAULT_STEPS = 500


@dataclass
class GPTTrainConfig:
    """Everything a GPT run depends on (the ``retrograd train --model gpt`` options)."""

    text: str | None = None  # None: the standard library's source
    steps: int | None = 500  # None: the default, or on --resume the checkpoint's
    batch_size: int = 16
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    lr: float = 3e-3
    min_lr: float | None = None  # default lr / 10
    warmup_steps: int | None = None  # default steps / 20
    weight_decay: float = 0.1
    clip_norm: float = 1.0
    eval_interval: int = 100
    eval_batches: int = 4
    checkpointing: str = "none"
    workers: int = 1
    #: shard the AdamW state across the workers (``dist.ZeroRedundancyOptimizer``)
    zero: bool = False
    seed: int = 0
    out: str | None = "retrograd-gpt"
    resume: bool = False
    progress: bool | None = None
    timeout: float = 60.0
    sample_tokens: int = 200
    #: stop after this step as an interruption would (the checkpoint is written); for trying
    #: ``--resume`` and for its test
    stop_at: int | None = None

    def validate(self) -> None:
        if self.steps is None:
            self.steps = DEFAULT_STEPS
        checks = [
            (self.steps >= 1, "steps must be at least 1"),
            (self.batch_size >= self.workers, "batch size must be at least the worker count"),
            (self.block_size >= 1 and self.n_layer >= 1, "block size and layers must be >= 1"),
            (self.n_embd % self.n_head == 0, "n_embd must be a multiple of n_head"),
            (0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)"),
            (self.lr > 0 and self.clip_norm > 0, "lr and clip norm must be positive"),
            (
                _valid_strategy(self.checkpointing),
                "checkpointing must be none, balanced or budget:SIZE (budget:64MB)",
            ),
            (self.workers >= 1 and self.eval_interval >= 1, "workers/eval interval must be >= 1"),
            (not self.resume or self.out is not None, "--resume needs --out"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(f"train: {message}")

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 20)

    def lr_at(self, step: int) -> float:
        """Linear warm-up to ``lr`` over the warm-up steps, then cosine down to ``min_lr``."""
        min_lr = self.min_lr if self.min_lr is not None else self.lr / 10
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        span = max(1, self.steps - self.warmup)
        progress = min(1.0, (step - self.warmup) / span)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (self.lr - min_lr)

    def model_config(self, vocab_size: int) -> GPTConfig:
        return GPTConfig(
            vocab_size=vocab_size,
            block_size=self.block_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
            dropout=self.dropout,
        )


# -- replicas -------------------------------------------------------------------------------------
def make_optimizer(model: GPT, config: GPTTrainConfig, zero: bool = False) -> Any:
    """AdamW as nanoGPT configures it: weight decay on the 2-d weights (matmuls, embeddings),
    none on biases and layer-norm gains (torch's parameter groups), betas (0.9, 0.99) for a small
    model; ``zero``: its state sharded across the running context's workers."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if zero:
        from ..distributed import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(groups, optim.AdamW, lr=config.lr, betas=(0.9, 0.99))
    return optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.99))


def set_lr(optimizer: Any, lr: float) -> None:
    """Set the learning rate as a torch schedule does: in every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr


class _Replica:
    """One device's GPT copy, with its autodiff backend and optimizer."""

    def __init__(
        self,
        template: GPT,
        config: GPTTrainConfig,
        device: rg.Device,
        rank: int,
        distributed: bool,
    ):
        self.backend = rg.Autodiff(rg.NumpyBackend(), make_strategy(config.checkpointing))
        self.device, self.rank, self.config = device, rank, config
        self.model = template.replicate(backend=self.backend, device=device)
        if distributed:
            self.model.set_distributed()
        self.optimizer = make_optimizer(self.model, config, zero=config.zero and distributed)

    def loss(self, x: np.ndarray, y: np.ndarray, tokens: int) -> Any:
        """This shard's summed cross-entropy divided by the whole batch's token count."""
        with rg.use_backend(self.backend):
            idx = rg.tensor(x, backend=self.backend, device=self.device)
            targets = rg.tensor(y, backend=self.backend, device=self.device)
            logits, _ = self.model(idx)
            summed = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), reduction="sum"
            )
            return summed * (1.0 / tokens)

    def step(self, x: np.ndarray, y: np.ndarray, tokens: int, step: int) -> tuple[float, int]:
        set_lr(self.optimizer, self.config.lr_at(step))
        # Dropout masks depend on the seed, the step and the worker only, so a resumed run
        # draws the masks an uninterrupted one would.
        self.backend.seed(self.config.seed * 1_000_003 + step * 101 + self.rank)
        loss = self.loss(x, y, tokens)
        grads = loss.backward()
        optim.clip_grad_norm(grads, self.model, self.config.clip_norm, as_tensor=True)
        self.optimizer.step(grads)
        return float(loss.item()), grads.recomputed_bytes


class _Group:
    """The replicas of this process: one, or ``workers`` on threads summing their gradients
    through a local :class:`~retrograd.distributed.DistributedContext` (as the CNN run)."""

    def __init__(self, template: GPT, config: GPTTrainConfig):
        from ..distributed import DistributedConfig, DistributedContext, ReduceOperation

        devices = [rg.Device("cpu", i) for i in range(config.workers)]
        distributed = config.workers > 1
        self.context = self.pool = None
        if distributed:
            settings = DistributedConfig(ReduceOperation.SUM, timeout=config.timeout)
            self.context = DistributedContext(devices, settings).start()
            self.pool = ThreadPoolExecutor(config.workers, thread_name_prefix="retrograd-gpt")
        self.replicas = [
            _Replica(template, config, d, i, distributed) for i, d in enumerate(devices)
        ]

    def step(self, x: np.ndarray, y: np.ndarray, step: int) -> tuple[float, int]:
        """One optimizer step on the batch ``x -> y``; the batch's mean loss."""
        tokens = x.size
        if self.pool is None:
            return self.replicas[0].step(x, y, tokens, step)
        parts = np.array_split(np.arange(len(x)), len(self.replicas))
        futures = [
            self.pool.submit(r.step, x[p], y[p], tokens, step) for r, p in zip(self.replicas, parts)
        ]
        results = [f.result() for f in futures]
        return sum(r[0] for r in results), sum(r[1] for r in results)

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


# -- batches and evaluation ----------------------------------------------------------------------
def get_batch(
    data: np.ndarray, rng: np.random.Generator, batch: int, block: int
) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` random windows of ``block`` tokens and the windows one token later."""
    block = min(block, len(data) - 1)
    starts = rng.integers(0, len(data) - block, size=batch)
    offsets = np.arange(block)
    x = data[starts[:, None] + offsets]
    return x, data[starts[:, None] + offsets + 1]


@rg.no_grad()
def estimate_loss(model: GPT, corpus: TextCorpus, config: GPTTrainConfig) -> dict[str, float]:
    """Mean loss on the same ``eval_batches`` batches of each split every time (dropout off,
    nothing recorded)."""
    model.eval()
    result = {}
    for split, data in (("train", corpus.train), ("val", corpus.val)):
        if len(data) < 2:
            result[split] = math.nan
            continue
        rng = np.random.default_rng(config.seed + 12_345)
        losses = []
        for _ in range(config.eval_batches):
            x, y = get_batch(data, rng, config.batch_size, config.block_size)
            backend, device = model.wte.weight.backend, model.wte.weight.device
            _, loss = model(
                rg.tensor(x, backend=backend, device=device),
                rg.tensor(y, backend=backend, device=device),
            )
            losses.append(float(loss.item()))
        result[split] = float(np.mean(losses))
    model.train()
    return result


# -- checkpoints ---------------------------------------------------------------------------------
def _optimizer_arrays(optimizer: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The optimizer's ``state_dict()`` (torch's layout: parameters numbered by position in the
    groups) as arrays (``optim/<number>/<key>``) and JSON (scalars and the groups)."""
    saved = optimizer.state_dict()
    arrays, scalars = {}, {}
    for number, state in saved["state"].items():
        for key, value in state.items():
            if isinstance(value, np.ndarray):
                arrays[f"optim/{number}/{key}"] = value
            else:
                scalars.setdefault(str(number), {})[key] = value
    return arrays, {"state": scalars, "param_groups": saved["param_groups"]}


def _restore_optimizer(optimizer: Any, replica: _Replica, archive: Any, scalars: dict) -> None:
    state: dict[int, dict[str, Any]] = {
        int(number): dict(values) for number, values in scalars["state"].items()
    }
    for key in archive.files:
        if key.startswith("optim/"):
            number, _, slot = key[len("optim/") :].rpartition("/")
            state.setdefault(int(number), {})[slot] = archive[key]
    groups = [
        {k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in group.items()}
        for group in scalars["param_groups"]
    ]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def save_checkpoint(path: Path, replica: _Replica, meta: dict[str, Any]) -> None:
    """Model and optimizer state plus ``meta`` (JSON), written atomically."""
    arrays = {f"model/{k}": np.asarray(v) for k, v in replica.model.state_dict().items()}
    optimizer_arrays, scalars = _optimizer_arrays(replica.optimizer)
    arrays.update(optimizer_arrays)
    meta = dict(meta, optimizer_scalars=scalars)
    arrays["meta"] = np.array(json.dumps(meta))
    temporary = path.with_name(path.name + ".tmp.npz")
    np.savez(temporary, **arrays)
    os.replace(temporary, path)


def load_run(out: str | os.PathLike) -> tuple[GPT, TextCorpus, dict[str, Any]]:
    """The model (on the plain NumPy backend: no graph), its vocabulary as a corpus and the
    checkpoint's metadata, from the folder a GPT run wrote."""
    path = Path(out) / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"no GPT checkpoint at {path} (run retrograd train --model gpt)")
    with np.load(path) as archive:
        meta = json.loads(str(archive["meta"]))
        model_state = {
            k[len("model/") :]: archive[k] for k in archive.files if k.startswith("model/")
        }
    config = GPTTrainConfig(**{k: v for k, v in meta["config"].items() if k in _FIELDS})
    corpus = TextCorpus(meta["corpus"], meta["vocab"], np.zeros(0, np.int64), np.zeros(0, np.int64))
    with rg.use_backend(rg.NumpyBackend()):
        model = GPT(config.model_config(len(meta["vocab"])))
    model.load_state_dict(model_state)
    return model.eval(), corpus, meta


_FIELDS = {f.name for f in fields(GPTTrainConfig)}


# -- training -------------------------------------------------------------------------------------
def _one_blas_thread() -> Any:
    """A context limiting BLAS to one thread (see the module docstring), or a no-op without
    threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # BLAS keeps its default
        return contextlib.nullcontext()
    return threadpool_limits(limits=1)


def train_gpt(config: GPTTrainConfig, echo: Callable[..., None] = print) -> dict[str, Any]:
    """Train as ``config`` says; return the metrics (also written to ``config.out``)."""
    if not config.resume:
        config.validate()  # a resumed run validates the checkpoint's settings
    with _one_blas_thread():
        return _train(config, echo)


def _train(config: GPTTrainConfig, echo: Callable[..., None]) -> dict[str, Any]:
    started = time.perf_counter()
    out = Path(config.out) if config.out is not None else None
    checkpoint = out / CHECKPOINT if out is not None else None
    resumed = None
    if config.resume:
        if checkpoint is None or not checkpoint.is_file():
            raise FileNotFoundError(f"--resume: no checkpoint at {checkpoint}")
        resumed = np.load(checkpoint)
        config = _resumed_config(config, json.loads(str(resumed["meta"])))
    corpus = load_corpus(config.text)
    if len(corpus.train) <= config.block_size:
        raise UsageError(
            f"train: the training text ({len(corpus.train)} characters) must be longer than "
            f"the block size {config.block_size}"
        )
    template_backend = rg.Autodiff(rg.NumpyBackend())
    with rg.use_backend(template_backend):
        rg.seed(config.seed)
        template = GPT(config.model_config(corpus.vocab_size))
    rng = np.random.default_rng(config.seed)
    history = {"evals": [], "step_losses": [], "train_seconds": 0.0, "recomputed_bytes": 0}
    start_step = 0
    group = _Group(template, config)
    try:
        if resumed is not None:
            meta = json.loads(str(resumed["meta"]))
            if meta["vocab"] != corpus.vocab:
                raise UsageError("--resume: the text's vocabulary differs from the checkpoint's")
            state = {
                k[len("model/") :]: resumed[k] for k in resumed.files if k.startswith("model/")
            }
            for replica in group.replicas:
                replica.model.load_state_dict(state)  # keeps the distributed marks
                _restore_optimizer(replica.optimizer, replica, resumed, meta["optimizer_scalars"])
            rng.bit_generator.state = meta["rng"]
            history = meta["history"]
            start_step = meta["step"]
            resumed.close()
        baseline = corpus.unigram_entropy
        echo(_banner(config, corpus, template, baseline, start_step))
        memory = _probe_memory(template, config, corpus)
        step = _run(config, corpus, group, rng, history, start_step, checkpoint, baseline, echo)
        state_bytes = optimizer_state_bytes(group.replicas[0].optimizer)
    finally:
        group.close()
    model = group.replicas[0].model
    final = history["evals"][-1]
    tokens = config.batch_size * config.block_size * (step - start_step)
    summary = {
        "step": step,
        "train_loss": final["train_loss"],
        "val_loss": final["val_loss"],
        "unigram_baseline": baseline,
        "first_loss": history["step_losses"][0] if history["step_losses"] else math.nan,
        "train_seconds": history["train_seconds"],
        "total_seconds": time.perf_counter() - started,
        "tokens_per_second": tokens / max(1e-9, history["train_seconds"]),
        "peak_activation_bytes": memory.peak_activation_bytes,
        "recomputed_bytes": history["recomputed_bytes"],
        "optimizer_state_bytes": state_bytes,
        "parameters": template.num_parameters(),
    }
    metrics = {
        "config": asdict(config),
        "corpus": {
            "name": corpus.name,
            "vocab_size": corpus.vocab_size,
            "train_chars": len(corpus.train),
            "val_chars": len(corpus.val),
        },
        "evals": history["evals"],
        "step_losses": history["step_losses"],
        "summary": summary,
    }
    text = ""
    if config.sample_tokens and step >= config.steps:
        rg.seed(config.seed)
        plain = model.replicate(backend=rg.NumpyBackend(), device=rg.Device("cpu", 0)).eval()
        text = generate_text(plain, corpus, "\n", config.sample_tokens, 0.8, 10)
        metrics["sample"] = text
    written = _write_outputs(out, metrics, model, text, echo)
    echo(_summary_text(summary, config, written, text))
    return metrics


def _resumed_config(config: GPTTrainConfig, meta: dict[str, Any]) -> GPTTrainConfig:
    """The checkpoint's configuration, with what may change on resume taken from ``config``
    (total steps, where to stop, progress, workers, sharding and checkpointing strategy)."""
    saved = {k: v for k, v in meta["config"].items() if k in _FIELDS}
    keep = (
        "steps",
        "stop_at",
        "progress",
        "resume",
        "out",
        "workers",
        "zero",
        "checkpointing",
        "timeout",
    )
    for name in keep:
        if name != "steps" or config.steps is not None:
            saved[name] = getattr(config, name)
    resumed = GPTTrainConfig(**saved)
    resumed.validate()
    return resumed


def _run(config, corpus, group, rng, history, start_step, checkpoint, baseline, echo) -> int:
    bar = _progress(config.steps - start_step, "gpt", config.progress)
    step = start_step
    last = config.steps if config.stop_at is None else min(config.steps, config.stop_at)
    window_start = time.perf_counter()
    try:
        while step < last:
            x, y = get_batch(corpus.train, rng, config.batch_size, config.block_size)
            tick = time.perf_counter()
            loss, recomputed = group.step(x, y, step)
            history["train_seconds"] += time.perf_counter() - tick
            history["step_losses"].append(loss)
            history["recomputed_bytes"] += recomputed
            step += 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", baseline=f"{baseline:.3f}")
            if step % config.eval_interval == 0 or step == last:
                losses = estimate_loss(group.replicas[0].model, corpus, config)
                record = {
                    "step": step,
                    "train_loss": losses["train"],
                    "val_loss": losses["val"],
                    "lr": config.lr_at(step - 1),
                    "seconds": time.perf_counter() - window_start,
                }
                history["evals"].append(record)
                line = (
                    f"step {step}/{config.steps}: train loss {losses['train']:.4f} | val loss "
                    f"{losses['val']:.4f} | unigram {baseline:.4f} | lr {record['lr']:.2e} | "
                    f"{record['seconds']:.1f} s"
                )
                if bar is not None:
                    bar.write(line)
                else:
                    echo(line)
                window_start = time.perf_counter()
                if checkpoint is not None:
                    _save(checkpoint, group, corpus, config, rng, history, step)
    finally:
        if bar is not None:
            bar.close()
    return step


def _save(checkpoint, group, corpus, config, rng, history, step) -> None:
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "step": step,
        "config": asdict(config),
        "corpus": corpus.name,
        "vocab": corpus.vocab,
        "rng": rng.bit_generator.state,
        "history": history,
    }
    group.consolidate()
    save_checkpoint(checkpoint, group.replicas[0], meta)


def _probe_memory(template: GPT, config: GPTTrainConfig, corpus: TextCorpus):
    """Activation memory of one step of one worker, on a throw-away replica."""
    replica = _Replica(template, config, rg.Device("cpu", 0), 0, distributed=False)
    rows = max(1, math.ceil(config.batch_size / config.workers))
    x, y = get_batch(corpus.train, np.random.default_rng(0), rows, config.block_size)
    return measure_step_memory(lambda: replica.loss(x, y, x.size), replica.model.parameters())


# -- sampling -------------------------------------------------------------------------------------
def generate_text(
    model: GPT, corpus: TextCorpus, prompt: str, tokens: int, temperature: float, top_k: int | None
) -> str:
    """``prompt`` continued by ``tokens`` sampled characters (:meth:`GPT.generate`)."""
    ids = (
        corpus.encode(prompt)
        if prompt
        else [corpus.vocab.find("\n") if "\n" in corpus.vocab else 0]
    )
    weight = model.wte.weight
    idx = rg.tensor(np.array([ids], dtype=np.int64), backend=weight.backend, device=weight.device)
    out = model.generate(idx, tokens, temperature=temperature, top_k=top_k)
    text = corpus.decode(out.numpy()[0])
    return text if prompt else text[1:]


def sample(
    out: str,
    prompt: str = "",
    tokens: int = 300,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
) -> str:
    """Text generated by the GPT saved in ``out`` (``retrograd sample``)."""
    if not temperature > 0:
        raise UsageError(f"sample: temperature must be positive, got {temperature}")
    if top_k is not None and top_k < 1:
        raise UsageError(f"sample: top-k must be at least 1, got {top_k}")
    model, corpus, _ = load_run(out)
    rg.seed(seed)
    with rg.use_backend(rg.NumpyBackend()), _one_blas_thread():
        return generate_text(model, corpus, prompt, tokens, temperature, top_k)


# -- output ---------------------------------------------------------------------------------------
def _banner(config, corpus, model, baseline, start_step) -> str:
    resumed = f", resumed at step {start_step}" if start_step else ""
    return (
        f"retrograd train: gpt ({model.num_parameters():,} parameters: {config.n_layer} layers, "
        f"{config.n_head} heads, n_embd {config.n_embd}, block {config.block_size}) on "
        f"{corpus.name}, vocabulary {corpus.vocab_size}; {config.steps} steps of "
        f"{config.batch_size}x{config.block_size} characters, adamw lr {config.lr:g} "
        f"(warm-up {config.warmup}, cosine), clip {config.clip_norm:g}, checkpointing "
        f"{config.checkpointing}, {config.workers} worker(s), seed {config.seed}{resumed}\n"
        f"unigram baseline (entropy of the character frequencies): {baseline:.4f} nats/char"
    )


def _write_outputs(out, metrics, model, text, say) -> list[str]:
    if out is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    written = []
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    written.append(str(out / "metrics.json"))
    model.save(out / "model.npz")
    written += [str(out / "model.npz"), str(out / CHECKPOINT)]
    if text:
        (out / "sample.txt").write_text(text)
        written.append(str(out / "sample.txt"))
    try:
        written.append(str(plot_gpt_curves(metrics, out / "curves.png")))
    except ImportError:
        say('note: matplotlib is not installed, no curves.png (pip install "retrograd[examples]")')
    return written


def plot_gpt_curves(metrics: dict[str, Any], path: str | os.PathLike) -> Path:
    """Loss per step, the evaluations (train, validation) and the unigram baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    steps = metrics["step_losses"]
    axes.plot(np.arange(1, len(steps) + 1), steps, color="#9ecae1", lw=0.8, label="train (step)")
    evals = metrics["evals"]
    axes.plot(
        [e["step"] for e in evals],
        [e["train_loss"] for e in evals],
        "o-",
        color="#3182bd",
        label="train",
    )
    axes.plot(
        [e["step"] for e in evals],
        [e["val_loss"] for e in evals],
        "s-",
        color="#e6550d",
        label="validation",
    )
    axes.axhline(
        metrics["summary"]["unigram_baseline"], ls="--", color="gray", label="unigram baseline"
    )
    axes.set(xlabel="step", ylabel="cross-entropy (nats/char)", title="retrograd: character GPT")
    axes.legend()
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _summary_text(summary, config, written, text) -> str:
    baseline = summary["unigram_baseline"]
    gain = baseline - summary["val_loss"]
    lines = [
        "summary",
        f"  train loss             {summary['train_loss']:.4f} nats/char (step {summary['step']})",
        f"  validation loss        {summary['val_loss']:.4f} nats/char",
        f"  unigram baseline       {baseline:.4f} nats/char "
        f"(validation {'beats' if gain > 0 else 'does not beat'} it by {gain:.4f})",
        f"  training time          {summary['train_seconds']:.1f} s "
        f"({summary['tokens_per_second']:,.0f} characters/s, {config.workers} worker(s))",
        f"  peak activation memory {_format_bytes(summary['peak_activation_bytes'])} "
        f"(one step of one worker, tracemalloc)",
        f"  recomputed in backward {_format_bytes(summary['recomputed_bytes'])} "
        f"(checkpointing {config.checkpointing})",
        optimizer_state_line(summary["optimizer_state_bytes"], config.zero, config.workers),
        f"  total time             {summary['total_seconds']:.1f} s",
    ]
    if text:
        lines.append("  sample (temperature 0.8, top-k 10):")
        lines += ["    | " + line for line in text.splitlines()[:12]]
    if written:
        lines.append("  wrote " + ", ".join(written))
    return "\n".join(lines)
