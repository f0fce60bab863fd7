"""The ``retrograd`` command run by its ``main()`` in the test's process, for command lines it
refuses before any work: no fresh interpreter's imports to pay (a process of its own is what
the tests of training and writing runs use)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import warnings


def run_main(*args: str) -> subprocess.CompletedProcess:
    """``retrograd ARGS``: its exit status and what it printed, as ``subprocess.run`` gives
    them (argparse's refusals exit through ``SystemExit``)."""
    from retrograd.app.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        try:
            code = main(list(args))
        except SystemExit as stop:  # as a process exits: None is 0, a message 1
            code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
    return subprocess.CompletedProcess(args, code, stdout.getvalue(), stderr.getvalue())
