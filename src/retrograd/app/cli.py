"""The ``retrograd`` command: ``train``, ``sample``, ``graph`` and ``bench``.

    retrograd train                                  # a CNN on the 8x8 digits, ~98% in seconds
    retrograd train --model gpt                      # a character GPT on Python's own source
    retrograd sample --out retrograd-gpt             # text from the trained GPT
    retrograd train --workers 2                      # data parallel, 2 threads
    mpiexec -n 2 retrograd train --engine mpi        # data parallel, 2 processes
    retrograd train --workers 2 --engine torch       # the same over torch.distributed: runs
                                                     #   torchrun --nproc_per_node 2 -m retrograd
    retrograd graph --checkpointing balanced         # graph.dot (+ graph.svg with Graphviz)
    retrograd graph --checkpointing budget:64KB      # evicted values drawn apart
    retrograd bench                                  # the benchmark tables (source checkout)

Also ``python -m retrograd``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ._usage import UsageError

__all__ = ["build_parser", "main"]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _strategy(text: str) -> str:
    """A ``--checkpointing`` value: none, balanced or budget:SIZE (budget:64MB)."""
    from .trainer import make_strategy

    try:
        make_strategy(text)
    except (ValueError, TypeError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


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
    parser = argparse.ArgumentParser(
        prog="retrograd",
        description="retrograd: reverse-mode autodiff as a backend decorator (after Burn).",
    )
    parser.add_argument("--version", action="version", version=f"retrograd {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = commands.add_parser(
        "train",
        help="train a model on digits or MNIST",
        formatter_class=_DefaultsHelp,
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
        default=defaults.dataset,
        help="digits: scikit-learn's 8x8 digits (bundled); mnist: IDX files in --data-dir",
    )
    train.add_argument("--data-dir", help="folder with the four MNIST IDX files")
    train.add_argument(
        "--epochs", type=_positive_int, default=defaults.epochs, help="passes over the training set"
    )
    train.add_argument(
        "--batch-size",
        type=_positive_int,
        default=defaults.batch_size,
        help="samples per step, split among the workers",
    )
    train.add_argument(
        "--lr",
        type=_positive_float,
        help=f"learning rate (default: {DEFAULT_LR['adam']} for adam, {DEFAULT_LR['sgd']} for sgd)",
    )
    train.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=defaults.optimizer,
        help="adam, or sgd with Nesterov momentum 0.9",
    )
    train.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default=defaults.schedule,
        help="learning rate over the epochs: cosine down to 0, step (x0.3 "
        "every third of the epochs) or none",
    )
    train.add_argument("--clip-norm", type=_positive_float, help="clip gradients to this norm")
    train.add_argument(
        "--checkpointing",
        type=_strategy,
        default=defaults.checkpointing,
        help="none: keep every intermediate; balanced: recompute memory-bound outputs in "
        "backward; budget:SIZE (budget:64MB): keep what backward reads under SIZE bytes",
    )
    train.add_argument(
        "--workers",
        type=_positive_int,
        default=defaults.workers,
        help="data-parallel replicas in this process (one thread each); with --engine torch, "
        "that many torchrun ranks",
    )
    train.add_argument(
        "--zero",
        action="store_true",
        help="with data parallel: shard the optimizer state across the workers (ZeRO stage 1, "
        "dist.ZeroRedundancyOptimizer); the summary shows the state's bytes per worker",
    )
    train.add_argument(
        "--engine",
        choices=ENGINES,
        default=defaults.engine,
        help="local: threads of this process; mpi: one process per rank, started by mpiexec; "
        "torch: one process per rank, started by torchrun (or by --workers N)",
    )
    train.add_argument(
        "--backend",
        choices=("numpy", "torch"),
        default=defaults.backend,
        help="inner backend: numpy (default) or torch (needs the torch extra)",
    )
    train.add_argument(
        "--device", help="the torch backend's device: cpu (default), cuda, cuda:1 ..."
    )
    train.add_argument(
        "--seed", type=int, default=defaults.seed, help="initial parameters and batch order"
    )
    train.add_argument("--out", default=defaults.out, help="output folder")
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
        default=defaults.timeout,
        help="seconds a data-parallel worker waits for its peers",
    )

    _add_gpt_options(train)

    sample = commands.add_parser(
        "sample",
        help="print text from a GPT trained with train --model gpt",
        formatter_class=_DefaultsHelp,
        description="Load the checkpoint a GPT run wrote to --out and print generated text.",
    )
    sample.add_argument("--out", default="retrograd-gpt", help="the training run's folder")
    sample.add_argument("--prompt", help="text to continue (default: a new line)")
    sample.add_argument("--tokens", type=_positive_int, default=300, help="characters to generate")
    sample.add_argument(
        "--temperature", type=_positive_float, default=0.8, help="below 1: likelier characters"
    )
    sample.add_argument("--top-k", type=_positive_int, help="sample among the k likeliest only")
    sample.add_argument("--seed", type=int, default=0, help="the sampler's seed")

    graph = commands.add_parser(
        "graph",
        help="draw the autodiff graph of one training step",
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
    graph.add_argument("--seed", type=int, default=0)
    graph.add_argument("--out", default="retrograd-graph", help="output folder")

    bench = commands.add_parser(
        "bench",
        help="run the benchmark scripts of the source checkout",
        description="Run benchmarks/bench_*.py (retrograd beside NumPy floors, PyTorch and JAX "
        "when installed) and print their tables.",
    )
    bench.add_argument("names", nargs="*", help="only these (e.g. overhead mlp)")
    bench.add_argument("--list", action="store_true", help="list the scripts and exit")
    bench.add_argument("--dir", help="the benchmarks folder (default: the source checkout's)")
    bench.add_argument("--out", help="also write the tables to this markdown file")
    bench.add_argument("--timeout", type=_positive_float, help="seconds per script")
    return parser


def _add_gpt_options(train: argparse.ArgumentParser) -> None:
    """The options of ``train --model gpt`` (defaults: :class:`~.gpt.GPTTrainConfig`); of the
    CNN's options it uses --batch-size, --lr, --clip-norm, --checkpointing, --workers, --seed,
    --out, --progress and --timeout."""
    from .gpt import GPTTrainConfig

    gpt = GPTTrainConfig()
    group = train.add_argument_group(
        "gpt",
        "with --model gpt: AdamW, warm-up + cosine learning rate, clipping (default "
        f"{gpt.clip_norm}); --batch-size counts windows (default 16), --lr defaults to "
        f"{gpt.lr}, --out to {gpt.out}",
    )
    group.add_argument(
        "--text", help="a UTF-8 text file to learn (default: the Python standard library source)"
    )
    group.add_argument(
        "--steps",
        type=_positive_int,
        help=f"optimizer steps in all (default: {gpt.steps}, or with --resume the saved run's)",
    )
    group.add_argument(
        "--block-size", type=_positive_int, default=gpt.block_size, help="context, characters"
    )
    group.add_argument("--n-layer", type=_positive_int, default=gpt.n_layer, help="blocks")
    group.add_argument("--n-head", type=_positive_int, default=gpt.n_head, help="attention heads")
    group.add_argument("--n-embd", type=_positive_int, default=gpt.n_embd, help="model width")
    group.add_argument("--dropout", type=float, default=gpt.dropout, help="dropout probability")
    group.add_argument(
        "--eval-interval",
        type=_positive_int,
        default=gpt.eval_interval,
        help="steps between evaluations (and checkpoints)",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in --out (from its last evaluation) with its settings",
    )
    group.add_argument("--stop-at", type=_positive_int, help=argparse.SUPPRESS)


def _train_gpt(options: argparse.Namespace) -> int:
    from .gpt import GPTTrainConfig, train_gpt
    from .trainer import TrainConfig

    defaults = TrainConfig()  # the CNN's --out default means "not given" here
    if options.engine != "local":
        raise UsageError(
            "train: --model gpt runs data parallel on threads (--workers N); --engine mpi and "
            "--engine torch are for the CNN and MLP"
        )

    config = GPTTrainConfig(
        text=options.text,
        steps=options.steps
        if options.steps is not None or options.resume
        else GPTTrainConfig.steps,
        batch_size=options.batch_size,
        block_size=options.block_size,
        n_layer=options.n_layer,
        n_head=options.n_head,
        n_embd=options.n_embd,
        dropout=options.dropout,
        checkpointing=options.checkpointing,
        workers=options.workers,
        zero=options.zero,
        seed=options.seed,
        out=options.out if options.out != defaults.out else GPTTrainConfig.out,
        resume=options.resume,
        progress=options.progress,
        timeout=options.timeout,
        eval_interval=options.eval_interval,
        stop_at=options.stop_at,
    )
    if options.lr is not None:
        config.lr = options.lr
    if options.clip_norm is not None:
        config.clip_norm = options.clip_norm
    train_gpt(config)
    return 0


def _sample(options: argparse.Namespace) -> int:
    from .gpt import sample

    print(
        sample(
            options.out,
            prompt=options.prompt or "",
            tokens=options.tokens,
            temperature=options.temperature,
            top_k=options.top_k,
            seed=options.seed,
        )
    )
    return 0


def _train(options: argparse.Namespace) -> int:
    from .trainer import TrainConfig, train

    if options.model == "gpt":
        return _train_gpt(options)
    relaunched = _relaunch_under_torchrun(options)
    if relaunched is not None:
        return relaunched
    config = TrainConfig(
        model=options.model,
        dataset=options.dataset,
        data_dir=options.data_dir,
        epochs=options.epochs,
        batch_size=options.batch_size,
        lr=options.lr,
        optimizer=options.optimizer,
        schedule=options.schedule,
        clip_norm=options.clip_norm,
        checkpointing=options.checkpointing,
        workers=options.workers,
        zero=options.zero,
        engine=options.engine,
        seed=options.seed,
        out=options.out,
        max_train_samples=options.max_train_samples,
        max_test_samples=options.max_test_samples,
        progress=options.progress,
        timeout=options.timeout,
        backend=options.backend,
        device=options.device,
    )
    train(config)
    return 0


def _relaunch_under_torchrun(options: argparse.Namespace) -> int | None:
    """``retrograd train --workers N --engine torch`` outside torchrun: the same command run as
    N torchrun ranks of one worker each (``None``: nothing to relaunch). Under mpiexec and
    torchrun every rank is one worker; only torchrun can be started from here portably."""
    if options.engine != "torch" or options.workers < 2 or os.environ.get("RANK"):
        return None
    from ..distributed.launch import torchrun_command

    argv, rest = list(options.argv), []
    while argv:
        token = argv.pop(0)
        if token == "--workers":
            argv.pop(0)
        elif not token.startswith("--workers="):
            rest.append(token)
    return subprocess.call(torchrun_command(options.workers, ["-m", "retrograd", *rest]))


def _graph(options: argparse.Namespace) -> int:
    from .graphview import render_svg, trace_step

    image_shape = (1, 8, 8) if options.dataset == "digits" else (1, 28, 28)
    step = trace_step(
        options.model, image_shape, options.batch_size, options.checkpointing, options.seed
    )
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    dot_path = out / "graph.dot"
    dot_path.write_text(step.to_dot())
    print(step.description)
    print(step.summary())
    print(f"wrote {dot_path}")
    svg_path = out / "graph.svg"
    if render_svg(dot_path, svg_path):
        print(f"wrote {svg_path}")
    else:
        print("Graphviz's dot is not installed: no SVG (render with: dot -Tsvg graph.dot)")
    return 0


def _bench(options: argparse.Namespace) -> int:
    from .bench import as_markdown, find_benchmarks, list_scripts, run_benchmarks

    directory = find_benchmarks(options.dir)
    if options.list:
        for script in list_scripts(directory):
            print(script.name)
        return 0
    results = run_benchmarks(directory, options.names, timeout=options.timeout)
    if options.out:
        Path(options.out).write_text(as_markdown(results))
        print(f"wrote {options.out}")
    failed = [r.script for r in results if r.returncode != 0]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


COMMANDS = {"train": _train, "sample": _sample, "graph": _graph, "bench": _bench}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``retrograd`` console script; returns the exit status.

    Errors a user can fix (missing data files or packages, bad settings) print one line
    ``retrograd COMMAND: error: ...`` and exit with status 1; bad arguments are argparse's
    (status 2).
    """
    parser = build_parser()
    options = parser.parse_args(argv)
    options.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return COMMANDS[options.command](options)
    except (FileNotFoundError, ImportError, UsageError) as error:
        print(f"retrograd {options.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"retrograd {options.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
