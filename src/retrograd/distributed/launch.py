"""Start ranks with ``mpiexec`` on this machine (the ``distributed`` extra's MPICH wheel).

::

    python -m retrograd.distributed.launch -n 2 train.py --epochs 3

runs ``train.py`` as 2 ranks, each calling ``DistributedContext.from_launcher(config)``. The
command it builds, for Hydra (MPICH's ``mpiexec``)::

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

__all__ = ["find_mpiexec", "mpiexec_command", "run"]

HYDRA_OPTIONS = ("-launcher", "fork", "-iface", "lo", "-disable-auto-cleanup")


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
        raise ValueError(f"mpiexec_command: ranks must be positive, got {ranks}")
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
        raise ValueError(f"mpiexec_command: {len(rank_env)} rank_env entries for {ranks} ranks")
    for rank, env in enumerate(rank_env):
        if rank:
            command.append(":")
        command += ["-n", "1"]
        for name, value in env.items():
            command += ["-env", name, str(value)]
        command += program
    return command


def run(
    ranks: int,
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    rank_env: Sequence[Mapping[str, str]] | None = None,
    capture: bool = True,
) -> subprocess.CompletedProcess:
    """Run ``argv`` (a script and its arguments) as ``ranks`` ranks and wait at most
    ``timeout`` seconds; past it the whole job (its process group) is killed and
    ``subprocess.TimeoutExpired`` raised."""
    command = mpiexec_command(ranks, argv, rank_env=rank_env)
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
        description="Run a script as N MPI ranks on this machine.",
    )
    parser.add_argument("-n", "--ranks", type=int, required=True)
    parser.add_argument("--mpiexec-arg", action="append", default=[], help="passed to mpiexec")
    parser.add_argument("script")
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    options = parser.parse_args(args)
    command = mpiexec_command(
        options.ranks, [options.script, *options.arguments], extra=options.mpiexec_arg
    )
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
