"""torch's ``torch.distributed.elastic.multiprocessing.errors``: ``@record`` on a worker's
entry point writes the exception that ends it to the file ``torchrun`` names in
``TORCHELASTIC_ERROR_FILE`` (torch's JSON layout: message, traceback, timestamp), so the
launcher reports the worker's own traceback as the root cause; then it re-raises::

    from retrograd.distributed.elastic.multiprocessing.errors import record

    @record
    def main(): ...

:class:`ChildFailedError` (a launcher's report of failed workers, from their error files) and
:class:`ErrorHandler` are torch's, with torch's message format. The file is written whole or
not at all (:func:`retrograd.files.atomic_write`).
"""

from __future__ import annotations

import faulthandler
import functools
import json
import logging
import os
import signal
import socket
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from string import Template
from typing import Any

from ....errors import InvalidArgumentError
from ....files import atomic_write

__all__ = ["ChildFailedError", "ErrorHandler", "ProcessFailure", "get_error_handler", "record"]

logger = logging.getLogger(__name__)

_NOT_AVAILABLE = "<N/A>"
_EMPTY_ERROR_DATA = {"message": "<NONE>"}


class ErrorHandler:
    """Writes an exception, with its traceback and time, as JSON to the file
    ``TORCHELASTIC_ERROR_FILE`` names (nothing when it is unset), as torch's."""

    def _get_error_file_path(self) -> str | None:
        return os.environ.get("TORCHELASTIC_ERROR_FILE", None)

    def initialize(self) -> None:
        """Tracebacks of every thread on a fatal signal (``faulthandler``), as torch's."""
        try:
            faulthandler.enable(all_threads=True)
        except Exception as error:
            warnings.warn(
                f"Unable to enable fault handler. {type(error).__name__}: {error}", stacklevel=2
            )

    def _write_error_file(self, file_path: str, error_msg: str) -> None:
        try:
            with atomic_write(file_path) as file:
                file.write(error_msg.encode("utf-8"))
        except Exception as error:
            warnings.warn(
                f"Unable to write error to file. {type(error).__name__}: {error}", stacklevel=2
            )

    def record_exception(self, e: BaseException) -> None:
        file = self._get_error_file_path()
        if file:
            data = {
                "message": {
                    "message": f"{type(e).__name__}: {e}",
                    "extraInfo": {
                        "py_callstack": traceback.format_exc(),
                        "timestamp": str(int(time.time())),
                    },
                }
            }
            self._write_error_file(file, json.dumps(data))

    def override_error_code_in_rootcause_data(
        self, rootcause_error_file: str, rootcause_error: dict[str, Any], error_code: int = 0
    ) -> None:
        if "message" not in rootcause_error:
            logger.warning(
                "child error file (%s) does not have field `message`. \ncannot override error "
                "code: %s",
                rootcause_error_file,
                error_code,
            )
        elif isinstance(rootcause_error["message"], str):
            logger.warning(
                "child error file (%s) has a new message format. \nskipping error code override",
                rootcause_error_file,
            )
        else:
            rootcause_error["message"]["errorCode"] = error_code

    def dump_error_file(self, rootcause_error_file: str, error_code: int = 0) -> None:
        """A child's error file copied to this process's (its exit code set)."""
        with open(rootcause_error_file, encoding="utf-8") as file:
            rootcause_error = json.load(file)
        if error_code:
            self.override_error_code_in_rootcause_data(
                rootcause_error_file, rootcause_error, error_code
            )
        mine = self._get_error_file_path()
        if mine:
            self._write_error_file(mine, json.dumps(rootcause_error))
        else:
            logger.error(
                "no error file defined for parent, to copy child error file (%s)",
                rootcause_error_file,
            )


def get_error_handler() -> ErrorHandler:
    return ErrorHandler()


@dataclass
class ProcessFailure:
    """A failed worker: its rank, pid, exit code and error file (read for the message and
    time when it exists), as torch's."""

    local_rank: int
    pid: int
    exitcode: int
    error_file: str
    error_file_data: Any = field(init=False)
    message: Any = field(init=False)
    timestamp: int = field(init=False)

    def __post_init__(self) -> None:
        self.error_file_data = dict(_EMPTY_ERROR_DATA)
        if os.path.isfile(self.error_file):
            with open(self.error_file, encoding="utf-8") as file:
                self.error_file_data = json.load(file)
            message = self.error_file_data["message"]
            if isinstance(message, str):
                self.timestamp = int(self.error_file_data.get("timestamp", 0))
            else:
                self.timestamp = int(message["extraInfo"]["timestamp"])
            self.message = message
        else:
            self.error_file = _NOT_AVAILABLE
            self.message = ""
            self.timestamp = int(time.time())
        if not self.message:
            if self.exitcode < 0:
                self.message = (
                    f"Signal {-self.exitcode} ({self.signal_name()}) received by PID {self.pid}"
                )
            else:
                self.error_file_data["errorTraits"] = {
                    "category": "system_terminated_error",
                    "retryability": "False",
                }
                self.message = (
                    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
                )

    def signal_name(self) -> str:
        if self.exitcode < 0:
            try:
                return signal.Signals(-self.exitcode).name
            except ValueError:
                return _NOT_AVAILABLE
        return _NOT_AVAILABLE

    def timestamp_isoformat(self) -> str:
        return datetime.fromtimestamp(self.timestamp).isoformat(sep="_")


_FAILURE_FORMAT_TEMPLATE = """[${idx}]:
  time      : ${time}
  host      : ${hostname}
  rank      : ${rank} (local_rank: ${local_rank})
  exitcode  : ${exitcode} (pid: ${pid}) ${signal_name}
  error_file: ${error_file}
  traceback : ${message}"""

_MSG_FORMAT_TEMPLATE = """
${boarder}
${title}
${section}
Failures:
${other_failures}
${section}
Root Cause (first observed failure):
${root_failure}
${boarder}"""


class ChildFailedError(Exception):
    """torch's report of failed workers (``{global rank: ProcessFailure}``); raised from a
    ``@record`` function, the first failure's error file becomes this process's."""

    def __init__(self, name: str, failures: dict[int, ProcessFailure]) -> None:
        if not failures:
            raise InvalidArgumentError("ChildFailedError: expected at least one failure")
        self.name = name
        self.failures = failures
        super().__init__(self.format_msg())

    def get_first_failure(self) -> tuple[int, ProcessFailure]:
        rank = min(self.failures, key=lambda r: self.failures[r].timestamp)
        return rank, self.failures[rank]

    def format_msg(self, boarder_delim: str = "=", section_delim: str = "-") -> str:
        title = f"{self.name} FAILED"
        root_rank, _ = self.get_first_failure()
        root, others = "", []
        width = len(title)
        for idx, (rank, failure) in enumerate(self.failures.items()):
            text, text_width = self._format_failure(idx, rank, failure)
            width = max(width, text_width)
            if rank == root_rank:
                root = text
            else:
                others.append(text)
        width = min(width, 60)
        return Template(_MSG_FORMAT_TEMPLATE).substitute(
            boarder=boarder_delim * width,
            title=title,
            section=section_delim * width,
            root_failure=root,
            other_failures="\n".join(others or ["  <NO_OTHER_FAILURES>"]),
        )

    def _format_failure(self, idx: int, rank: int, failure: ProcessFailure) -> tuple[str, int]:
        message = failure.message
        if isinstance(message, dict):
            message = (
                message.get("extraInfo", {})
                .get("py_callstack", message.get("message", "<N/A>"))
                .replace("\n", "\n  ")
            )
        name = failure.signal_name()
        text = Template(_FAILURE_FORMAT_TEMPLATE).substitute(
            idx=idx,
            time=failure.timestamp_isoformat(),
            hostname=socket.getfqdn(),
            rank=rank,
            local_rank=failure.local_rank,
            exitcode=failure.exitcode,
            pid=failure.pid,
            signal_name=f" ({name})" if name != _NOT_AVAILABLE else "",
            error_file=failure.error_file,
            message=message,
        )
        return text, max(len(line) for line in text.split("\n"))


def record(fn: Callable[..., Any] | None = None, error_handler: ErrorHandler | None = None) -> Any:
    """torch's ``@record``: runs ``fn``; an exception is written to the error file (a
    ``ChildFailedError``'s first failure's file copied) and re-raised; ``SystemExit(0)``
    returns ``None``. ``@record`` and ``record(fn, error_handler)`` both work."""
    handler = error_handler or get_error_handler()

    def wrap(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            handler.initialize()
            try:
                return function(*args, **kwargs)
            except SystemExit as exit_:
                if exit_.code == 0:
                    return None
                raise
            except ChildFailedError as error:
                rank, failure = error.get_first_failure()
                if failure.error_file != _NOT_AVAILABLE:
                    handler.dump_error_file(failure.error_file, failure.exitcode)
                else:
                    logger.info(
                        "local_rank %s FAILED with no error file. Decorate your entrypoint fn "
                        "with @record for traceback info.",
                        rank,
                    )
                raise
            except Exception as error:
                handler.record_exception(error)
                raise

        return wrapper

    return wrap if fn is None else wrap(fn)
