"""The ``retrograd`` command: ``train``, ``sample``, ``graph`` and ``bench``.

    retrograd train                                  # a CNN on the 8x8 digits, ~98% in seconds
    retrograd train --model gpt                      # a character GPT on Python's own source
    retrograd sample --out retrograd-gpt             # text from the trained GPT
    retrograd train --workers 2                      # data parallel, 2 threads
    mpiexec -n 2 retrograd train --engine mpi        # data parallel, 2 processes
    retrograd train --workers 2 --engine torch       # the same over torch.distributed: runs
                                                     #   torchrun --nproc_per_node 2 -m retrograd
    retrograd graph --checkpointing balanced         # graph.dot (+ graph.svg with Graphviz)
    retrograd graph --checkpointing budget:64KB      # the plan's evictions, where recomputed
    retrograd bench                                  # the benchmark tables (source checkout)

Also ``python -m retrograd``. Every error is one line on stderr, ``retrograd COMMAND: what —
what to do``, with exit status 2 when the command line is wrong and 1 when a well-formed
command fails (:mod:`._usage`); ``--debug`` (or ``RETROGRAD_DEBUG=1``) prints the traceback
before it. Ctrl-C exits with 130, SIGTERM (``kill``, a job scheduler's stop) with 143, each
after the files being written are removed and the line says what is kept.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import errno
import math
import os
import signal
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..errors import RetrogradError
from ._usage import CommandError, UsageError

__all__ = ["build_parser", "main"]

#: ``train`` options of the CNN and MLP alone, and of the GPT alone (``dest`` names)
IMAGE_OPTIONS = (
    "dataset", "data_dir", "epochs", "optimizer", "schedule", "max_train_samples",
    "max_test_samples",
)  # fmt: skip
GPT_OPTIONS = (
    "text", "encoding", "steps", "block_size", "n_layer", "n_head", "n_embd", "dropout",
    "eval_interval", "resume", "stop_at",
)  # fmt: skip
DEBUG = "on an error, print the traceback too (also: RETROGRAD_DEBUG=1)"
#: ``train`` options of every model
SHARED_OPTIONS = (
    "batch_size", "lr", "clip_norm", "checkpointing", "workers", "zero", "engine", "backend",
    "device", "seed", "out", "overwrite", "progress", "timeout",
)  # fmt: skip


def _number(kind: type, text: str, what: str) -> Any:
    """``text`` as a ``kind``, or argparse's one-line error saying what was expected (its
    own names the type function: "invalid _positive_int value")."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _number(int, text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _seed(text: str) -> int:
    """A ``--seed``: NumPy's generators, which every command seeds, take no negative seed."""
    value = _number(int, text, "a non-negative integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text}")
    return value


def _path(text: str) -> str:
    """A file or folder argument: an empty one (``--out "$UNSET"``) is refused, where it
    would mean the current folder and the command would write its files there."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must name a file or folder, got {text!r}")
    return text


def _strategy(text: str) -> str:
    """A ``--checkpointing`` value: none, balanced or budget:SIZE (budget:64MB)."""
    from .loop import make_strategy

    try:
        make_strategy(text)
    except (ValueError, TypeError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _positive_float(text: str) -> float:
    value = _number(float, text, "a positive finite number")
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def _probability(text: str) -> float:
    value = _number(float, text, "a number in [0, 1)")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _encoding(text: str) -> str:
    try:
        codecs.lookup(text)
    except LookupError:
        raise argparse.ArgumentTypeError(f"no such encoding: {text}") from None
    return text


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (no usage block before them)."""

    #: the command line being parsed (the top parser's): an unknown option given without a
    #: command is named, where argparse would report only the missing command
    argv: Sequence[str] = ()

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required: COMMAND"):
            unknown = [
                a for a in self.argv if a.startswith("-") and a not in self._option_string_actions
            ]
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}"
        _print_error(self.prog, f"{message} — see {self.prog} --help")
        sys.exit(2)


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, an unknown option refused by the command it was given
    to (``retrograd train: unrecognized arguments: --bogus — see retrograd train --help``),
    where argparse's top parser would name itself and its own help."""
    if isinstance(parser, _Parser):
        parser.argv = list(sys.argv[1:] if argv is None else argv)
    options, unknown = parser.parse_known_args(argv)
    if unknown:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[options.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return options


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` except for options whose default is "not given"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    from .models import MODELS
    from .trainer import DEFAULT_LR, ENGINES, OPTIMIZERS, SCHEDULES, TrainConfig

    defaults = TrainConfig()
    parser = _Parser(
        prog="retrograd",
        description="retrograd: reverse-mode autodiff as a backend decorator (after Burn).",
    )
    parser.add_argument("--version", action="version", version=f"retrograd {__version__}")
    debug = argparse.ArgumentParser(add_help=False)  # --debug after the command name too
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG)
    parser.add_argument("--debug", action="store_true", help=DEBUG)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = commands.add_parser(
        "train",
        help="train a model on digits or MNIST",
        formatter_class=_DefaultsHelp,
        parents=[debug],
        description="Train a CNN or an MLP; writes metrics.json, curves.png and model.npz to "
        "--out.",
    )
    train.add_argument(
        "--model",
        choices=(*MODELS, "gpt"),
        default=defaults.model,
        help="cnn: two convolutions and a linear layer; mlp: one hidden layer; gpt: a "
        "character-level GPT on text (options below)",
    )
    train.add_argument(
        "--dataset",
        choices=("digits", "mnist"),
        help="digits: scikit-learn's 8x8 digits (bundled); mnist: IDX files in --data-dir "
        f"(default: {defaults.dataset})",
    )
    train.add_argument("--data-dir", type=_path, help="folder with the four MNIST IDX files")
    train.add_argument(
        "--epochs",
        type=_positive_int,
        help=f"passes over the training set (default: {defaults.epochs})",
    )
    train.add_argument(
        "--batch-size",
        type=_positive_int,
        help=f"samples per step, split among the workers (default: {defaults.batch_size})",
    )
    train.add_argument(
        "--lr",
        type=_positive_float,
        help=f"learning rate (default: {DEFAULT_LR['adam']} for adam, {DEFAULT_LR['sgd']} for sgd)",
    )
    train.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        help=f"adam, or sgd with Nesterov momentum 0.9 (default: {defaults.optimizer})",
    )
    train.add_argument(
        "--schedule",
        choices=SCHEDULES,
        help="learning rate over the epochs: cosine down to 0, step (x0.3 every third of the "
        f"epochs) or none (default: {defaults.schedule})",
    )
    train.add_argument("--clip-norm", type=_positive_float, help="clip gradients to this norm")
    train.add_argument(
        "--checkpointing",
        type=_strategy,
        help="none: keep every intermediate; balanced: recompute memory-bound outputs in "
        "backward; budget:SIZE (budget:64MB): keep what backward reads under SIZE bytes "
        f"(default: {defaults.checkpointing})",
    )
    train.add_argument(
        "--workers",
        type=_positive_int,
        help="data-parallel replicas in this process (one thread each); with --engine torch, "
        f"that many torchrun ranks (default: {defaults.workers})",
    )
    train.add_argument(
        "--zero",
        action="store_true",
        default=None,
        help="with data parallel: shard the optimizer state across the workers (ZeRO stage 1, "
        "dist.ZeroRedundancyOptimizer); the summary shows the state's bytes per worker",
    )
    train.add_argument(
        "--engine",
        choices=ENGINES,
        help="local: threads of this process; mpi: one process per rank, started by mpiexec; "
        "torch: one process per rank, started by torchrun (or by --workers N) "
        f"(default: {defaults.engine})",
    )
    train.add_argument(
        "--backend",
        choices=("numpy", "torch"),
        help="inner backend: numpy (default) or torch (needs the torch extra)",
    )
    train.add_argument(
        "--device", help="the torch backend's device: cpu (default), cuda, cuda:1 ..."
    )
    train.add_argument(
        "--seed", type=_seed, help=f"initial parameters and batch order (default: {defaults.seed})"
    )
    train.add_argument("--out", type=_path, help=f"output folder (default: {defaults.out})")
    train.add_argument(
        "--overwrite",
        action="store_true",
        default=None,
        help="replace the run --out holds (without it, a folder holding a run is refused)",
    )
    train.add_argument(
        "--max-train-samples",
        type=_positive_int,
        help="use only the first N training samples (quick runs)",
    )
    train.add_argument(
        "--max-test-samples", type=_positive_int, help="use only the first N test samples"
    )
    train.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars (default: when stderr is a terminal)",
    )
    train.add_argument(
        "--timeout",
        type=_positive_float,
        help=f"seconds a data-parallel worker waits for its peers (default: {defaults.timeout})",
    )
    _add_gpt_options(train)

    sample = commands.add_parser(
        "sample",
        help="print text from a GPT trained with train --model gpt",
        formatter_class=_DefaultsHelp,
        parents=[debug],
        description="Load the checkpoint a GPT run wrote to --out and print generated text.",
    )
    sample.add_argument(
        "--out", type=_path, default="retrograd-gpt", help="the training run's folder"
    )
    sample.add_argument("--prompt", help="text to continue (default: a new line)")
    sample.add_argument("--tokens", type=_positive_int, default=300, help="characters to generate")
    sample.add_argument(
        "--temperature", type=_positive_float, default=0.8, help="below 1: likelier characters"
    )
    sample.add_argument("--top-k", type=_positive_int, help="sample among the k likeliest only")
    sample.add_argument("--seed", type=_seed, default=0, help="the sampler's seed")

    graph = commands.add_parser(
        "graph",
        help="draw the autodiff graph of one training step",
        parents=[debug],
        description="Write graph.dot (and graph.svg when Graphviz's dot is installed): one "
        "training step's graph, ops labelled with their shapes, coloured compute- "
        "vs memory-bound, marked saved or recomputed under the strategy.",
    )
    graph.add_argument("--model", choices=MODELS, default="cnn")
    graph.add_argument(
        "--dataset",
        choices=("digits", "mnist"),
        default="digits",
        help="sets the image size (8x8 or 28x28); no data is read",
    )
    graph.add_argument("--batch-size", type=_positive_int, default=4)
    graph.add_argument("--checkpointing", type=_strategy, default="balanced")
    graph.add_argument("--seed", type=_seed, default=0)
    graph.add_argument("--out", type=_path, default="retrograd-graph", help="output folder")

    bench = commands.add_parser(
        "bench",
        help="run the benchmark scripts of the source checkout",
        parents=[debug],
        description="Run benchmarks/bench_*.py (retrograd beside NumPy floors, PyTorch and JAX "
        "when installed) and print their tables.",
    )
    bench.add_argument("names", nargs="*", help="only these (e.g. overhead mlp)")
    bench.add_argument("--list", action="store_true", help="list the scripts and exit")
    bench.add_argument(
        "--dir", type=_path, help="the benchmarks folder (default: the source checkout's)"
    )
    bench.add_argument("--out", type=_path, help="also write the tables to this markdown file")
    bench.add_argument("--timeout", type=_positive_float, help="seconds per script")

    warm = commands.add_parser(
        "warmup",
        help="compile the NumPy backend's kernels ahead of time (an install or CI step)",
        formatter_class=_DefaultsHelp,
        parents=[debug],
        description="Compile the NumPy backend's Numba kernels into Numba's on-disk cache, by "
        "one training step of a small convolutional net and of a small GPT, each in a process "
        "of its own, so that later processes load them instead of compiling them.",
    )
    warm.add_argument(
        "--jobs", type=_positive_int, default=2, help="processes at a time (one per core)"
    )
    return parser


def _add_gpt_options(train: argparse.ArgumentParser) -> None:
    """The options of ``train --model gpt`` (defaults: :class:`~.gpt.GPTTrainConfig`); of the
    others it takes the shared ones (:data:`SHARED_OPTIONS`) and refuses the CNN's."""
    from .gpt import GPTTrainConfig

    gpt = GPTTrainConfig()
    group = train.add_argument_group(
        "gpt",
        "with --model gpt: AdamW, warm-up + cosine learning rate, clipping (default "
        f"{gpt.clip_norm}); --batch-size counts windows (default {gpt.batch_size}), --lr "
        f"defaults to {gpt.lr}, --out to {gpt.out}",
    )
    group.add_argument(
        "--text",
        type=_path,
        help="a text file to learn (default: the Python standard library source)",
    )
    group.add_argument(
        "--encoding",
        type=_encoding,
        help=f"the encoding of --text (default: {gpt.encoding}; latin-1, cp1252, utf-16 ...)",
    )
    group.add_argument(
        "--steps",
        type=_positive_int,
        help=f"optimizer steps in all (default: {gpt.steps}, or with --resume the saved run's)",
    )
    group.add_argument(
        "--block-size",
        type=_positive_int,
        help=f"context, characters (default: {gpt.block_size})",
    )
    group.add_argument("--n-layer", type=_positive_int, help=f"blocks (default: {gpt.n_layer})")
    group.add_argument(
        "--n-head", type=_positive_int, help=f"attention heads (default: {gpt.n_head})"
    )
    group.add_argument("--n-embd", type=_positive_int, help=f"model width (default: {gpt.n_embd})")
    group.add_argument(
        "--dropout", type=_probability, help=f"dropout probability (default: {gpt.dropout})"
    )
    group.add_argument(
        "--eval-interval",
        type=_positive_int,
        help=f"steps between evaluations (and checkpoints) (default: {gpt.eval_interval})",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        default=None,
        help="continue the run saved in --out (from its last evaluation) with its settings",
    )
    group.add_argument("--stop-at", type=_positive_int, help=argparse.SUPPRESS)


def _given(options: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The options among ``names`` the command line sets (every default is ``None``)."""
    return [name for name in names if getattr(options, name) is not None]


def _flags(names: Sequence[str]) -> str:
    return ", ".join("--" + name.replace("_", "-") for name in names)


def _train(options: argparse.Namespace) -> int:
    # NumPy's overflow warnings would precede the one line that says the loss became nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _train_model(options)


def _train_model(options: argparse.Namespace) -> int:
    from .trainer import TrainConfig, train

    gpt = options.model == "gpt"
    foreign = _given(options, IMAGE_OPTIONS if gpt else GPT_OPTIONS)
    if foreign:
        owner = "the CNN and MLP" if gpt else "--model gpt"
        raise UsageError(
            f"train: {_flags(foreign)} {'is an option' if len(foreign) == 1 else 'are options'} "
            f"of {owner}, not of --model {options.model} — drop "
            f"{'it' if len(foreign) == 1 else 'them'}"
        )
    if gpt:
        return _train_gpt(options)
    relaunched = _relaunch_under_torchrun(options)
    if relaunched is not None:
        return relaunched
    settings = {name: getattr(options, name) for name in _given(options, SHARED_OPTIONS)}
    settings |= {name: getattr(options, name) for name in _given(options, IMAGE_OPTIONS)}
    train(TrainConfig(model=options.model, **settings))
    return 0


def _train_gpt(options: argparse.Namespace) -> int:
    from .gpt import GPTTrainConfig, train_gpt

    if options.engine not in (None, "local"):
        raise UsageError(
            "train: --model gpt runs data parallel on threads (--workers N); --engine mpi and "
            "--engine torch are for the CNN and MLP"
        )
    given = _given(options, (*GPT_OPTIONS, *SHARED_OPTIONS))
    settings = {name: getattr(options, name) for name in given if name != "engine"}
    config = GPTTrainConfig(**settings)
    if options.steps is None and options.resume:
        config.steps = None  # the saved run's
    train_gpt(config, given=frozenset(settings))
    return 0


def _sample(options: argparse.Namespace) -> int:
    from .gpt import sample_stream

    characters = sample_stream(
        options.out,
        prompt=options.prompt or "",
        tokens=options.tokens,
        temperature=options.temperature,
        top_k=options.top_k,
        seed=options.seed,
    )
    try:
        for text in characters:  # as they come: a long text shows while it is made
            sys.stdout.write(text)
            sys.stdout.flush()
    finally:
        print()
    return 0


def _relaunch_under_torchrun(options: argparse.Namespace) -> int | None:
    """``retrograd train --workers N --engine torch`` outside torchrun: the same command run as
    N torchrun ranks of one worker each (``None``: nothing to relaunch). Under mpiexec and
    torchrun every rank is one worker; only torchrun can be started from here portably."""
    if options.engine != "torch" or (options.workers or 1) < 2 or os.environ.get("RANK"):
        return None
    from ..distributed.launch import torchrun_command

    argv, rest = list(options.argv), []
    while argv:
        token = argv.pop(0)
        if token == "--workers":
            argv.pop(0)
        elif not token.startswith("--workers="):
            rest.append(token)
    torchrun = subprocess.Popen(torchrun_command(options.workers, ["-m", "retrograd", *rest]))
    try:
        return torchrun.wait()
    except BaseException:
        # stopped (SIGTERM, Ctrl-C): torchrun is told to stop, and stops its ranks; the
        # SIGKILL that subprocess.call sends would leave the ranks running, orphaned
        torchrun.send_signal(signal.SIGTERM)
        try:
            torchrun.wait(timeout=_TORCHRUN_GRACE_S)
        except subprocess.TimeoutExpired:
            torchrun.kill()
            torchrun.wait()
        raise


#: how long a stopped command waits for torchrun to stop its ranks before killing it
_TORCHRUN_GRACE_S = 30


def _graph(options: argparse.Namespace) -> int:
    from ..files import FileSet
    from .graphview import render_svg, trace_step
    from .runfolder import output_folder

    image_shape = (1, 8, 8) if options.dataset == "digits" else (1, 28, 28)
    out, made = output_folder(options.out)
    try:
        step = trace_step(
            options.model, image_shape, options.batch_size, options.checkpointing, options.seed
        )
    except BaseException:
        if made:  # as a training run that stops before writing leaves no folder
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    with FileSet(out) as files:  # graph.dot and graph.svg replaced together, whole
        staged_dot, staged_svg = files.path("graph.dot"), files.path("graph.svg")
        staged_dot.write_text(step.to_dot(), encoding="utf-8")
        try:
            drawn = render_svg(staged_dot, staged_svg)
        except RuntimeError as error:
            raise CommandError(f"Graphviz's {error} — check the Graphviz installation") from None
        if not drawn:
            files.forget(staged_svg)
    print(step.description)
    print(step.summary())
    print(f"wrote {out / 'graph.dot'}")
    if drawn:
        print(f"wrote {out / 'graph.svg'}")
    else:
        print("Graphviz's dot is not installed: no SVG (render with: dot -Tsvg graph.dot)")
    return 0


def _bench(options: argparse.Namespace) -> int:
    from ..files import atomic_write
    from .bench import as_markdown, find_benchmarks, list_scripts, run_benchmarks
    from .runfolder import output_file

    directory = find_benchmarks(options.dir)
    if options.list:
        for script in list_scripts(directory):
            print(script.name)
        return 0
    if options.out:
        output_file(options.out)
    results = run_benchmarks(directory, options.names, timeout=options.timeout)
    if options.out:
        with atomic_write(options.out, "w") as file:
            file.write(as_markdown(results))
        print(f"wrote {options.out}")
    failed = [r.script for r in results if r.returncode != 0]
    if failed:
        _print_error("retrograd bench", f"failed: {', '.join(failed)} — their output is above")
        return 1
    return 0


def _warmup(options: argparse.Namespace) -> int:
    from .warmup import warmup

    seconds = warmup(jobs=options.jobs)
    print(f"kernels warm in {seconds:.1f} s")
    return 0


COMMANDS = {
    "train": _train,
    "sample": _sample,
    "graph": _graph,
    "bench": _bench,
    "warmup": _warmup,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``retrograd`` console script; returns the exit status.

    Every error prints one line, ``retrograd COMMAND: what — what to do``: status 2 for a
    wrong command line (argparse's errors and :class:`~._usage.UsageError`), 1 for a command
    that fails (a missing, damaged or unwritable file, a full disk, a folder in use), 130 when
    interrupted (Ctrl-C), 143 when terminated (SIGTERM). ``--debug`` or ``RETROGRAD_DEBUG=1``
    prints the traceback first.
    """
    try:  # (building the parser imports the trainers: seconds in which Ctrl-C lands)
        parser = build_parser()
    except KeyboardInterrupt:
        _print_error("retrograd", "interrupted while starting — nothing was run or written")
        return 130
    options = _parse(parser, argv)
    options.argv = list(sys.argv[1:] if argv is None else argv)
    debug = options.debug or os.environ.get("RETROGRAD_DEBUG", "") not in ("", "0")
    try:
        with _terminate_as_interrupt():
            return COMMANDS[options.command](options)
    except KeyboardInterrupt as interrupt:
        terminated = isinstance(interrupt, Terminated)
        _print_error(f"retrograd {options.command}", _interrupted(options, terminated))
        return 128 + signal.SIGTERM if terminated else 130
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as error:  # every error a user can meet: one line, never a traceback
        if debug:
            traceback.print_exc()
        code, text = describe(error, options.command)
        _print_error(f"retrograd {options.command}", text)
        return code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C's interrupt is: the files being written
    are removed on the way out (a killed process leaves their temporary files behind) and
    the command says what it keeps, instead of vanishing without a word."""


def _raise_terminated(signum: int, frame: Any) -> NoReturn:
    # a second SIGTERM (a scheduler that will not wait) stops the process at once
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated


@contextlib.contextmanager
def _terminate_as_interrupt() -> Any:
    """SIGTERM raises :class:`Terminated` during the block, where its handler is the
    default (which kills the process on the spot) and this is the main thread (the only
    one that can take a handler); anyone else's handler is left as it is."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _interrupted(options: argparse.Namespace, terminated: bool = False) -> str:
    """The line of an interrupted (or terminated) command: what of it is kept and how to go
    on. A GPT run keeps the checkpoint of its last evaluation, which ``--resume`` continues."""
    stopped = "terminated (SIGTERM)" if terminated else "interrupted"
    if options.command == "train" and options.model == "gpt":
        from .checkpoints import CHECKPOINT, saved_step
        from .gpt import GPTTrainConfig

        checkpoint = Path(options.out or GPTTrainConfig().out) / CHECKPOINT
        step = saved_step(checkpoint)
        if step is not None:
            return (
                f"{stopped} — {checkpoint} (step {step}) is kept: continue with retrograd "
                f"train --model gpt --out {checkpoint.parent} --resume"
            )
    return f"{stopped} — run the command again"


#: what to lower when a command runs out of memory
OUT_OF_MEMORY_HINTS = {
    "train": "lower --batch-size, or the model's size (--block-size, --n-embd, --n-layer)",
    "graph": "lower --batch-size",
}


def describe(error: Exception, command: str) -> tuple[int, str]:
    """The exit status and the line ``what — what to do`` for ``error`` in ``command``."""
    text = " ".join(str(error).split())
    if text.startswith(f"{command}: "):
        text = text[len(command) + 2 :]
    if isinstance(error, UsageError):
        return 2, _with_hint(text, f"see retrograd {command} --help")
    if isinstance(error, CommandError | FileNotFoundError):
        return 1, _with_hint(text, "check the path")
    if isinstance(error, ImportError):
        return 1, _with_hint(text, 'pip install "retrograd[all]"')
    if isinstance(error, OSError):
        return 1, _os_error(error)
    if isinstance(error, MemoryError):  # NumPy's too: a size typed too large, not a bug
        hint = OUT_OF_MEMORY_HINTS.get(command, "ask for less, or free memory")
        return 1, f"out of memory: {text} — {hint}" if text else f"out of memory — {hint}"
    if isinstance(error, RetrogradError):
        return 1, _with_hint(text, "rerun with --debug for the details")
    return 1, (
        f"unexpected {type(error).__name__}: {text} — rerun with --debug for the traceback, "
        "and please report it"
    )


def _os_error(error: OSError) -> str:
    """A failed read or write: the file, the system's reason, what to do."""
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", -1)):
        hint = "free disk space (the previous files are intact) and run again"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "choose a folder you can write in"
    else:
        hint = "check the path"
    return f"{error.filename}: {reason} — {hint}" if error.filename else f"{reason} — {hint}"


def _with_hint(text: str, hint: str) -> str:
    return text if " — " in text else f"{text} — {hint}"


def _print_error(prog: str, text: str) -> None:
    print(f"{prog}: {' '.join(text.split())}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
