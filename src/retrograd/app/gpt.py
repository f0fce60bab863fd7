"""``retrograd train --model gpt`` and ``retrograd sample``: a character-level GPT.

:class:`GPTTask` is what the GPT brings to the shared loop (:mod:`.loop`): a
:class:`~retrograd.app.text.TextCorpus` (the standard library's own source by default) in
random windows, :class:`~retrograd.app.models.GPT`, AdamW (weight decay on the 2-d weights
only, as parameter groups), a linear warm-up then cosine learning rate set before each step,
global-norm clipping, an evaluation every ``eval_interval`` steps, and a checkpoint after each.
The run writes to ``--out``:

- ``metrics.json``: configuration, corpus, per-step losses, the periodic evaluations (train
  and validation loss) and the summary, with the *unigram baseline* (entropy of the training
  text's character frequencies) the losses are to be read against;
- ``curves.png``: the loss curves and the baseline;
- ``checkpoint.npz``: model and optimizer state, the step, the batch sampler's state and the
  history, written at every evaluation and at the end; ``--resume`` continues from it to the
  same result an uninterrupted run reaches (batches, learning rate and dropout masks are
  functions of the seed and the step);
- ``model.npz`` (the parameters, as the CNN run writes) and ``sample.txt``.

Data parallelism is the loop's: ``--workers N`` runs N replicas on threads, each on its
contiguous share of the batch's windows, so N workers take the same steps as one (to float
rounding). ``--checkpointing`` picks the strategy each replica's autodiff backend uses.

BLAS runs one thread per worker: this model's matrices are small, and with more threads than
free cores (2 cores, other processes running) a step was 4x slower (0.45 s against 1.8 s).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any

import numpy as np

import retrograd as rg

from .. import nn, optim
from ..errors import RetrogradError
from ..memory import StepMemory
from ..nn import functional as F  # noqa: N812  (PyTorch's idiom)
from ._usage import CommandError, UsageError, require
from .checkpoints import CHECKPOINT, Checkpoint, read_checkpoint, write_checkpoint
from .loop import (
    BACKENDS,
    History,
    OptimizerFactory,
    Period,
    Replica,
    Run,
    StepTally,
    Task,
    blas_limit,
    finite_positive,
    fit,
    inner_backend,
    optimizer_factory,
    shard_rows,
    valid_strategy,
)
from .models import GPT, GPTConfig
from .outputs import Report, draw_figure, plot_losses
from .runfolder import RunFolder
from .text import TextCorpus, known_encoding, load_corpus

__all__ = ["GPTTask", "GPTTrainConfig", "load_run", "sample", "sample_stream", "train_gpt"]

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
    #: replace the run in ``out`` (a fresh run into a folder holding one stops otherwise)
    overwrite: bool = False
    progress: bool | None = None
    timeout: float = 60.0
    sample_tokens: int = 200
    #: the inner backend: ``"numpy"`` or ``"torch"`` (``rg.TorchBackend(device)``)
    backend: str = "numpy"
    #: the torch backend's device (``"cpu"``, ``"cuda"``, ``"cuda:1"``); numpy takes none
    device: str | None = None
    #: the encoding of ``text`` (a file that does not decode with it is refused)
    encoding: str = "utf-8"
    #: stop after this step as an interruption would (the checkpoint is written); for trying
    #: ``--resume`` and for its test
    stop_at: int | None = None

    def validate(self) -> None:
        if self.steps is None:
            self.steps = DEFAULT_STEPS
        require(
            [
                (self.steps >= 1, "steps must be at least 1"),
                (self.batch_size >= self.workers, "batch size must be at least the worker count"),
                (self.block_size >= 1 and self.n_layer >= 1, "block size and layers must be >= 1"),
                (self.n_embd % self.n_head == 0, "n_embd must be a multiple of n_head"),
                (0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)"),
                (
                    finite_positive(self.lr) and finite_positive(self.clip_norm),
                    "lr and clip norm must be positive and finite",
                ),
                (
                    valid_strategy(self.checkpointing),
                    "checkpointing must be none, balanced or budget:SIZE (budget:64MB)",
                ),
                (
                    self.workers >= 1 and self.eval_interval >= 1,
                    "workers/eval interval must be >= 1",
                ),
                (finite_positive(self.timeout), "timeout must be positive and finite"),
                (not self.resume or self.out is not None, "--resume needs --out"),
                (self.backend in BACKENDS, f"backend must be one of {BACKENDS}"),
                (self.device is None or self.backend == "torch", "--device needs --backend torch"),
                (known_encoding(self.encoding), f"--encoding {self.encoding}: no such encoding"),
            ]
        )
        if self.backend == "torch":
            inner_backend(self.backend, self.device)  # a device this machine has

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 20)

    @property
    def last_step(self) -> int:
        """The step this run stops after: ``steps``, or ``stop_at`` when earlier."""
        return self.steps if self.stop_at is None else min(self.steps, self.stop_at)

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


_FIELDS = {f.name for f in fields(GPTTrainConfig)}


def train_gpt(
    config: GPTTrainConfig,
    echo: Callable[..., None] = print,
    given: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Any]:
    """Train as ``config`` says; return the metrics (also written to ``config.out``).

    On ``resume`` the saved run's settings hold, except those that may change
    (:data:`RESUME_MAY_CHANGE`); a setting named in ``given`` (the options a user typed) that
    differs from the saved run's is refused rather than ignored.
    """
    require([(not (config.resume and config.overwrite), "--resume and --overwrite contradict")])
    if not config.resume:
        config.validate()  # a resumed run validates the checkpoint's settings
    return fit(GPTTask(config, given), echo)


def make_optimizer(
    model: GPT, config: GPTTrainConfig, build: OptimizerFactory | None = None
) -> Any:
    """AdamW as nanoGPT configures it: weight decay on the 2-d weights (matmuls, embeddings),
    none on biases and layer-norm gains (torch's parameter groups), betas (0.9, 0.99) for a small
    model; made by ``build`` (:func:`~.loop.optimizer_factory`: sharded under ``--zero``)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    build = build or optimizer_factory(zero=False)
    return build(groups, optim.AdamW, lr=config.lr, betas=(0.9, 0.99))


def set_lr(optimizer: Any, lr: float) -> None:
    """Set the learning rate as a torch schedule does: in every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr


class GPTTask(Task):
    """The character GPT, trained for ``config.steps`` optimizer steps."""

    records_key = "evals"
    resumable = True
    saves_optimizer = True

    def __init__(self, config: GPTTrainConfig, given: frozenset[str] | set[str] = frozenset()):
        super().__init__(config)
        self.given = frozenset(given)
        self.corpus: TextCorpus | None = None
        self.baseline = math.nan
        self.saved: Checkpoint | None = None  # the checkpoint a resumed run continues
        self.rng = np.random.default_rng(config.seed)

    @property
    def checkpoint(self) -> Path | None:
        return Path(self.config.out) / CHECKPOINT if self.config.out is not None else None

    def prepare(self) -> None:
        if self.config.resume:
            if not self.checkpoint.is_file():
                raise CommandError(
                    f"--resume: no checkpoint at {self.checkpoint} — resume the folder of a GPT "
                    "run (its --out), or train afresh without --resume"
                )
            self.saved = read_checkpoint(self.checkpoint)
            self.config = _resumed_config(self.config, self.saved, self.given)
            text = self.config.text
            if text is not None and not Path(text).is_file():
                raise CommandError(
                    f"--resume: the saved run's text {text} is not there (moved, or named "
                    "relative to another folder) — pass --text with its place"
                )
            saved_step = self.saved.meta["step"]
            if self.config.steps < saved_step:
                # else the run would train nothing and rewrite metrics.json saying it stopped
                # at --steps, beside a model and a checkpoint of the later step
                raise UsageError(
                    f"train: --steps {self.config.steps} is behind the saved run, which is at "
                    f"step {saved_step}: --resume continues it to a later step — pass --steps "
                    f"above {saved_step}, or drop --steps"
                )
            self.rng = np.random.default_rng(self.config.seed)
        config = self.config
        self.corpus = load_corpus(config.text, encoding=config.encoding)
        # the unigram baseline once: it is a pass over the whole training text
        self.baseline = self.corpus.unigram_entropy
        if len(self.corpus.train) <= config.block_size:
            raise UsageError(
                f"train: the training text ({len(self.corpus.train)} characters) must be longer "
                f"than the block size {config.block_size} — pass a smaller --block-size or a "
                "longer --text"
            )

    def inner_backend(self) -> rg.Backend:
        return inner_backend(self.config.backend, self.config.device)

    def blas_threads(self) -> int | None:
        return 1  # see the module docstring

    def build_model(self) -> nn.Module:
        return GPT(self.config.model_config(self.corpus.vocab_size))

    def make_optimizer(self, model: nn.Module, build: OptimizerFactory) -> tuple[Any, Any]:
        return make_optimizer(model, self.config, build), None  # lr: set each step

    def start(self, replicas: list[Replica]) -> Run:
        saved, self.saved = self.saved, None
        if saved is None:
            return Run()
        meta = saved.meta
        if meta["vocab"] != self.corpus.vocab:
            raise CommandError(
                f"--resume: the text {self.corpus.name} has another vocabulary than the run "
                f"saved in {saved.path} — resume with the text it was trained on"
            )
        for replica in replicas:
            saved.load_model(replica.model)  # keeps the distributed marks
            saved.load_optimizer(replica.optimizer)
        try:
            self.rng.bit_generator.state = meta["rng"]
            history = History.from_dict(meta["history"], self.records_key)
        except (KeyError, TypeError, ValueError) as error:
            raise saved.damaged(f"its sampler state or history is unreadable ({error})") from None
        return Run(history, step=meta["step"], start=meta["step"])

    def run_bar(self, run: Run) -> tuple[str, int] | None:
        return "gpt", self.config.steps - run.step

    def periods(self, run: Run) -> Iterator[Period]:
        config, step = self.config, run.step
        while step < config.last_step:
            end = min((step // config.eval_interval + 1) * config.eval_interval, config.last_step)
            batches = (
                get_batch(self.corpus.train, self.rng, config.batch_size, config.block_size)
                for _ in range(end - step)
            )
            yield Period("gpt", end - step, batches)
            step = end

    def before_step(self, replica: Replica, step: int) -> None:
        set_lr(replica.optimizer, self.config.lr_at(step))
        # Dropout masks depend on the seed, the step and the worker only, so a resumed run
        # draws the masks an uninterrupted one would.
        replica.backend.seed(self.config.seed * 1_000_003 + step * 101 + replica.rank)

    def loss(self, replica: Replica, inputs: np.ndarray, targets: np.ndarray) -> tuple[Any, dict]:
        idx = rg.tensor(inputs, backend=replica.backend, device=replica.device)
        target = rg.tensor(targets, backend=replica.backend, device=replica.device)
        logits, _ = replica.model(idx)
        summed = F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), reduction="sum")
        return summed, {}

    def postfix(self, tally: StepTally, index: int) -> dict[str, str]:
        return {"loss": f"{tally['loss'][index]:.3f}", "baseline": f"{self.baseline:.3f}"}

    def end_period(
        self, replicas: list[Replica], run: Run, tally: StepTally, started: float
    ) -> tuple[str, dict[str, str]]:
        losses = estimate_loss(replicas[0].model, self.corpus, self.config)
        record = {
            "step": run.step,
            "train_loss": losses["train"],
            "val_loss": losses["val"],
            "lr": self.config.lr_at(run.step - 1),
            "seconds": time.perf_counter() - started,
        }
        run.history.records.append(record)
        line = (
            f"step {run.step}/{self.config.steps}: train loss {losses['train']:.4f} | val loss "
            f"{losses['val']:.4f} | unigram {self.baseline:.4f} | lr "
            f"{record['lr']:.2e} | {record['seconds']:.1f} s"
        )
        return line, {}

    def save_state(self, replicas: list[Replica], run: Run, folder: RunFolder | None) -> None:
        if folder is None:
            return
        meta = {
            "step": run.step,
            "config": asdict(self.config),
            "corpus": self.corpus.name,
            "vocab": self.corpus.vocab,
            "rng": self.rng.bit_generator.state,
            "history": run.history.as_dict(self.records_key),
        }
        with folder.files() as staged, staged.open(CHECKPOINT) as file:
            write_checkpoint(file, replicas[0].model, replicas[0].optimizer, meta)

    def probe_batch(self, world: int) -> tuple[np.ndarray, np.ndarray]:
        rows = shard_rows(self.config.batch_size, world)
        return get_batch(self.corpus.train, np.random.default_rng(0), rows, self.config.block_size)

    def banner(self, model: nn.Module, world: int, run: Run) -> str:
        config, corpus = self.config, self.corpus
        resumed = f", resumed at step {run.start}" if run.start else ""
        return (
            f"retrograd train: gpt ({model.num_parameters():,} parameters: {config.n_layer} "
            f"layers, {config.n_head} heads, n_embd {config.n_embd}, block {config.block_size}) "
            f"on {corpus.name}, vocabulary {corpus.vocab_size}; {config.steps} steps of "
            f"{config.batch_size}x{config.block_size} characters, adamw lr {config.lr:g} "
            f"(warm-up {config.warmup}, cosine), clip {config.clip_norm:g}, checkpointing "
            f"{config.checkpointing}, {config.workers} worker(s), seed {config.seed}{resumed}"
            + (f", torch backend on {config.device or 'cpu'}" if config.backend == "torch" else "")
            + "\n"
            "unigram baseline (entropy of the character frequencies): "
            f"{self.baseline:.4f} nats/char"
        )

    def report(
        self, run: Run, model: nn.Module, world: int, memory: StepMemory, started: float
    ) -> Report:
        config, corpus, history = self.config, self.corpus, run.history
        baseline = self.baseline
        final = history.records[-1]
        tokens = config.batch_size * config.block_size * (run.step - run.start)
        summary = {
            "step": run.step,
            "train_loss": final["train_loss"],
            "val_loss": final["val_loss"],
            "unigram_baseline": baseline,
            "first_loss": history.step_losses[0] if history.step_losses else math.nan,
            "train_seconds": history.train_seconds,
            "total_seconds": time.perf_counter() - started,
            "tokens_per_second": tokens / max(1e-9, history.train_seconds),
            "peak_activation_bytes": memory.peak_activation_bytes,
            "recomputed_bytes": history.recomputed_bytes,
            "parameters": model.num_parameters(),
        }
        metrics = {
            "config": asdict(config),
            "corpus": {
                "name": corpus.name,
                "vocab_size": corpus.vocab_size,
                "train_chars": len(corpus.train),
                "val_chars": len(corpus.val),
            },
            "evals": history.records,
            "step_losses": history.step_losses,
            "summary": summary,
        }
        text = ""
        if config.sample_tokens and run.step >= config.steps:
            rg.seed(config.seed)
            plain = model.replicate(backend=rg.NumpyBackend(), device=rg.Device("cpu", 0)).eval()
            # from a new line, or (a text without one) from a character the model knows
            prompt = "\n" if "\n" in corpus.vocab else ""
            text = generate_text(plain, corpus, prompt, config.sample_tokens, 0.8, 10)
            metrics["sample"] = text
        gain = baseline - summary["val_loss"]
        lines = [
            f"  train loss             {summary['train_loss']:.4f} nats/char "
            f"(step {summary['step']})",
            f"  validation loss        {summary['val_loss']:.4f} nats/char",
            f"  unigram baseline       {baseline:.4f} nats/char "
            f"(validation {'beats' if gain > 0 else 'does not beat'} it by {gain:.4f})",
        ]
        tail = []
        if text:
            tail.append("  sample (temperature 0.8, top-k 10):")
            tail += ["    | " + line for line in text.splitlines()[:12]]
        return Report(
            metrics,
            lines=lines,
            throughput=f"{summary['tokens_per_second']:,.0f} characters/s",
            memory_note=f"one step of one worker, {memory.meter}",
            recompute_note=f"checkpointing {config.checkpointing}",
            tail=tail,
            texts={"sample.txt": text} if text else {},
            kept=[CHECKPOINT],
        )

    def plot(self, metrics: dict[str, Any], file: IO[bytes]) -> Any:
        return plot_gpt_curves(metrics, file)


#: settings a resumed run may change: how long it runs and how (not what it trains)
RESUME_MAY_CHANGE = (
    "steps", "stop_at", "progress", "resume", "out", "overwrite", "workers", "zero",
    "checkpointing", "timeout", "backend", "device",
)  # fmt: skip


def _resumed_config(
    config: GPTTrainConfig, saved: Checkpoint, given: frozenset[str]
) -> GPTTrainConfig:
    """The checkpoint's configuration, with what may change on resume taken from ``config``;
    a ``given`` setting that would change what the saved run trains is refused."""
    stored = saved.meta["config"]
    values = {k: v for k, v in stored.items() if k in _FIELDS}
    for name in sorted(given - set(RESUME_MAY_CHANGE)):
        if name == "text" and _same_text(config.text, values.get("text")):
            values["text"] = config.text  # where the text is now (checked: the vocabulary)
        elif name in values and getattr(config, name) != values[name]:
            option = "--" + name.replace("_", "-")
            raise UsageError(
                f"train: {option} {getattr(config, name)} differs from the saved run's "
                f"{values[name]}: --resume continues the run as it was saved — drop {option}, "
                "or train afresh with --overwrite"
            )
    for name in RESUME_MAY_CHANGE:
        if name != "steps" or config.steps is not None:
            values[name] = getattr(config, name)
    try:
        resumed = GPTTrainConfig(**values)
        resumed.validate()
    except TypeError as error:  # settings of the wrong kinds (a text where a count belongs)
        raise saved.damaged(f"its settings are not a GPT run's ({error})") from None
    return resumed


def _same_text(given: str | None, saved: Any) -> bool:
    """Whether ``--text given`` names the saved run's text: the same file by another name
    (``./code.txt``, an absolute path, a path from another folder), or any file where the
    saved one is no longer found (moved, or named relative to another folder), whose
    vocabulary :meth:`GPTTask.start` then checks against the saved run's."""
    if given is None or not isinstance(saved, str):
        return given == saved
    if not Path(saved).is_file():
        return True
    try:
        return os.path.samefile(given, saved)
    except OSError:  # the given one is not there: said when the text is read
        return False


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


def load_run(out: str | os.PathLike) -> tuple[GPT, TextCorpus, dict[str, Any]]:
    """The model (on the plain NumPy backend: no graph), its vocabulary as a corpus and the
    checkpoint's metadata, from the folder a GPT run wrote."""
    saved = read_checkpoint(Path(out) / CHECKPOINT)
    meta = saved.meta
    try:
        config = GPTTrainConfig(**{k: v for k, v in meta["config"].items() if k in _FIELDS})
        with rg.use_backend(rg.NumpyBackend()):
            model = GPT(config.model_config(len(meta["vocab"])))
    except (TypeError, ValueError, RetrogradError) as error:
        raise saved.damaged(f"its settings are not a GPT's ({error})") from None
    saved.load_model(model)
    corpus = TextCorpus(meta["corpus"], meta["vocab"], np.zeros(0, np.int64), np.zeros(0, np.int64))
    return model.eval(), corpus, meta


# -- sampling -------------------------------------------------------------------------------------
def generate_text(
    model: GPT, corpus: TextCorpus, prompt: str, tokens: int, temperature: float, top_k: int | None
) -> str:
    """``prompt`` continued by ``tokens`` sampled characters (:func:`stream_text`)."""
    return "".join(stream_text(model, corpus, prompt, tokens, temperature, top_k))


def stream_text(
    model: GPT, corpus: TextCorpus, prompt: str, tokens: int, temperature: float, top_k: int | None
) -> Iterator[str]:
    """``prompt``, then ``tokens`` characters, each as soon as it is sampled: the characters
    :meth:`GPT.generate` samples from the same seed. Only the last ``block_size`` tokens are
    kept as the context (all the model sees), so each character takes the same time and
    memory however many are asked for; ``generate`` appends every token to one growing
    tensor, copied whole at each step."""
    ids = (
        corpus.encode(prompt)
        if prompt
        else [corpus.vocab.find("\n") if "\n" in corpus.vocab else 0]
    )
    if prompt:
        yield prompt
    block = model.config.block_size
    weight = model.wte.weight
    context = ids[-block:]
    for _ in range(tokens):
        idx = rg.tensor(
            np.array([context], dtype=np.int64), backend=weight.backend, device=weight.device
        )
        out = model.generate(idx, 1, temperature=temperature, top_k=top_k)
        token = int(out.numpy()[0, -1])
        context = [*context[1 - block :], token] if block > 1 else [token]
        yield corpus.vocab[token]


def sample(
    out: str,
    prompt: str = "",
    tokens: int = 300,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
) -> str:
    """Text generated by the GPT saved in ``out``."""
    return "".join(sample_stream(out, prompt, tokens, temperature, top_k, seed))


def sample_stream(
    out: str,
    prompt: str = "",
    tokens: int = 300,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
) -> Iterator[str]:
    """:func:`sample`'s text as it is generated (``retrograd sample`` prints each character
    when it comes: an interrupted run keeps what it printed). The arguments and the run are
    checked, and the model loaded, before this returns."""
    if not finite_positive(temperature):
        raise UsageError(f"sample: temperature must be positive and finite, got {temperature}")
    if top_k is not None and top_k < 1:
        raise UsageError(f"sample: top-k must be at least 1, got {top_k}")
    model, corpus, _ = load_run(out)
    corpus.encode(prompt)  # unknown characters refused now, not at the first character

    def characters() -> Iterator[str]:
        rg.seed(seed)
        with rg.use_backend(rg.NumpyBackend()), blas_limit(1):
            yield from stream_text(model, corpus, prompt, tokens, temperature, top_k)

    return characters()


def plot_gpt_curves(metrics: dict[str, Any], path: str | os.PathLike | IO[bytes]) -> Any:
    """Loss per step, the evaluations (train, validation) and the unigram baseline, as a PNG
    (a path, replaced whole, or an open file)."""

    def draw(figure: Any, axes: Any) -> None:
        steps, evals = metrics["step_losses"], metrics["evals"]
        numbers = [e["step"] for e in evals]
        plot_losses(
            axes,
            (np.arange(1, len(steps) + 1), steps),
            (numbers, [e["train_loss"] for e in evals], [e["val_loss"] for e in evals]),
            ("train (step)", "train", "validation"),
        )
        baseline = metrics["summary"]["unigram_baseline"]
        axes.axhline(baseline, ls="--", color="gray", label="unigram baseline")
        axes.set(
            xlabel="step", ylabel="cross-entropy (nats/char)", title="retrograd: character GPT"
        )
        axes.legend()

    return draw_figure(path, draw, figsize=(7, 4))
