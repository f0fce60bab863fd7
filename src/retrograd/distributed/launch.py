"""Start ranks on this machine: with MPICH's ``mpiexec`` (the ``distributed`` extra) for the
``mpi`` engine, with ``torchrun`` for the ``torch`` engine.

::

    python -m retrograd.distributed.launch -n 2 train.py --epochs 3
    python -m retrograd.distributed.launch -n 2 --engine torch train.py --epochs 3

run ``train.py`` as 2 ranks, each calling ``DistributedContext.from_launcher(config, engine=...)``.
The command built for Hydra (MPICH's ``mpiexec``)::

    mpiexec -launcher fork -iface lo -disable-auto-cleanup -n 2 python train.py ...

- ``-launcher fork``: ranks are started as local processes, never through ssh;
- ``-iface lo``: Hydra's own control traffic uses the loopback interface (nothing else is
  needed on a machine whose only usable network is loopback; MPICH moves the ranks' data through
  shared memory);
- ``-disable-auto-cleanup``: when one rank dies, Hydra leaves the others running, so that they
  report it (``DistributedError`` within the timeout, naming the rank) and exit on their own.
  Without it Hydra kills every rank at once: the run still ends, but nobody says why.

For more than one machine, pass Hydra's ``-hosts``/``-f`` and the interface to use
(``-iface eth0``) with ``--mpiexec-arg``; ``DistributedContext`` itself does not change.

The command built for ``torchrun`` (run as ``python -m torch.distributed.run``, so the torch
of this Python is the one used)::

    python -m torch.distributed.run --standalone --nproc_per_node 2 train.py ...

- ``--standalone``: a rendezvous on this machine, on a free port (jobs side by side do not
  collide); torchrun's agent hosts the key-value store the ranks meet through.
- torchrun stops every rank (SIGTERM) as soon as one fails; the torch engine turns that
  signal into ``DistributedError`` on a rank that is waiting on its peers, so it still says
  why. For several machines run torchrun on each with ``--nnodes``/``--rdzv-endpoint``
  instead (``--torchrun-arg`` passes options, but ``--standalone`` is for one machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import InvalidArgumentError

__all__ = ["LAUNCHERS", "find_mpiexec", "mpiexec_command", "run", "torchrun_command"]

HYDRA_OPTIONS = ("-launcher", "fork", "-iface", "lo", "-disable-auto-cleanup")
#: the engine each launcher starts ranks for
LAUNCHERS = {"mpi": "mpiexec", "torch": "torchrun"}


def find_mpiexec() -> str | None:
    """The ``mpiexec`` next to this Python (the ``mpich`` wheel's), else the first on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpiexec")


def mpiexec_command(
    ranks: int,
    argv: Sequence[str],
    *,
    python: str | None = None,
    rank_env: Sequence[Mapping[str, str]] | None = None,
    mpiexec: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command that runs ``python argv...`` as ``ranks`` ranks.

    ``rank_env`` gives environment variables per rank (one mapping per rank), e.g. a different
    ``PYTHONHASHSEED`` on each.
    """
    if ranks < 1:
        raise InvalidArgumentError(f"mpiexec_command: ranks must be positive, got {ranks}")
    mpiexec = mpiexec or find_mpiexec()
    if mpiexec is None:
        raise FileNotFoundError(
            'mpiexec not found: pip install "retrograd[distributed]" installs MPICH\'s'
        )
    program = [python or sys.executable, *argv]
    command = [mpiexec, *HYDRA_OPTIONS, *extra]
    if rank_env is None:
        return [*command, "-n", str(ranks), *program]
    if len(rank_env) != ranks:
        raise InvalidArgumentError(
            f"mpiexec_command: {len(rank_env)} rank_env entries for {ranks} ranks"
        )
    for rank, env in enumerate(rank_env):
        if rank:
            command.append(":")
        command += ["-n", "1"]
        for name, value in env.items():
            command += ["-env", name, str(value)]
        command += program
    return command


def torchrun_command(
    ranks: int,
    argv: Sequence[str],
    *,
    python: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``torchrun`` command that runs ``python argv...`` as ``ranks`` ranks on this
    machine (``extra``: more torchrun options, before the script)."""
    if ranks < 1:
        raise InvalidArgumentError(f"torchrun_command: ranks must be positive, got {ranks}")
    python = python or sys.executable
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(ranks),
        *extra,
        *argv,
    ]


def run(
    ranks: int,
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    rank_env: Sequence[Mapping[str, str]] | None = None,
    capture: bool = True,
    engine: str = "mpi",
) -> subprocess.CompletedProcess:
    """Run ``argv`` (a script and its arguments) as ``ranks`` ranks, with ``mpiexec``
    (``engine="mpi"``) or ``torchrun`` (``engine="torch"``), and wait at most ``timeout``
    seconds; past it the whole job (its process group) is killed and
    ``subprocess.TimeoutExpired`` raised. ``rank_env`` (per-rank environments) is for
    ``mpiexec`` only: torchrun gives every rank the same one."""
    if engine == "mpi":
        command = mpiexec_command(ranks, argv, rank_env=rank_env)
    elif engine == "torch":
        if rank_env is not None:
            raise InvalidArgumentError("run: torchrun gives every rank the same environment")
        command = torchrun_command(ranks, argv)
    else:
        raise InvalidArgumentError(f"run: engine must be one of {tuple(LAUNCHERS)}, got {engine!r}")
    process = subprocess.Popen(
        command,
        env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        text=True,
        start_new_session=True,  # its own process group, so a timeout takes every rank
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise subprocess.TimeoutExpired(command, timeout, stdout, stderr) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m retrograd.distributed.launch",
        description="Run a script as N ranks on this machine (mpiexec or torchrun).",
    )
    parser.add_argument("-n", "--ranks", type=int, required=True)
    parser.add_argument(
        "--engine",
        choices=tuple(LAUNCHERS),
        default="mpi",
        help="mpi: start the ranks with mpiexec; torch: with torchrun",
    )
    parser.add_argument("--mpiexec-arg", action="append", default=[], help="passed to mpiexec")
    parser.add_argument("--torchrun-arg", action="append", default=[], help="passed to torchrun")
    parser.add_argument("script")
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    options = parser.parse_args(args)
    argv = [options.script, *options.arguments]
    if options.engine == "torch":
        command = torchrun_command(options.ranks, argv, extra=options.torchrun_arg)
    else:
        command = mpiexec_command(options.ranks, argv, extra=options.mpiexec_arg)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
