"""torch's ``torch.utils.benchmark``: :class:`Timer` runs a statement in blocks and returns a
:class:`Measurement` (median, mean, IQR, torch's ``repr``); :class:`Compare` prints many of
them as torch's table (rows by ``sub_label``/statement, columns by ``description``)::

    import retrograd.utils.benchmark as benchmark
    t = benchmark.Timer("x @ x", globals={"x": x}, label="mm", description="n=64")
    m = t.blocked_autorange(min_run_time=0.2)
    print(m.median, m.iqr)
    benchmark.Compare([m, ...]).print()

The statement runs with ``torch`` bound to ``retrograd`` (torch's Timer binds its own), so a
ported ``stmt="torch.mm(a, b)"`` runs as it did. The block size, stopping rules, statistics
and the formats of ``repr`` and ``Compare`` are torch's; only Python statements are timed
(torch's C++ and Callgrind timers refused). :class:`Fuzzer` and ``op_fuzzers`` draw inputs as
torch's do (``fuzzer.py``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import itertools
import math
import operator
import sys
import textwrap
import timeit as _timeit
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ... import cuda
from ...errors import InvalidArgumentError
from .fuzzer import FuzzedParameter, FuzzedTensor, Fuzzer, ParameterAlias

__all__ = [
    "Compare",
    "FuzzedParameter",
    "FuzzedTensor",
    "Fuzzer",
    "Language",
    "Measurement",
    "ParameterAlias",
    "TaskSpec",
    "Timer",
    "select_unit",
    "trim_sigfig",
]

_MAX_SIGNIFICANT_FIGURES = 4
_MIN_CONFIDENCE_INTERVAL = 25e-9  # 25 ns
_IQR_WARN_THRESHOLD = 0.1
_IQR_GROSS_WARN_THRESHOLD = 0.25


class Language(enum.Enum):
    PYTHON = 0
    CPP = 1


@dataclasses.dataclass(init=True, repr=False, eq=True, frozen=True)
class TaskSpec:
    """What a Timer measures (all but its globals), as torch's."""

    stmt: str
    setup: str
    global_setup: str = ""
    label: str | None = None
    sub_label: str | None = None
    description: str | None = None
    env: str | None = None
    num_threads: int = 1

    @property
    def title(self) -> str:
        if self.label is not None:
            return self.label + (f": {self.sub_label}" if self.sub_label else "")
        if "\n" not in self.stmt:
            return self.stmt + (f": {self.sub_label}" if self.sub_label else "")
        sub = f" ({self.sub_label})" if self.sub_label else ""
        return f"stmt:{sub}\n{textwrap.indent(self.stmt, '  ')}"

    def setup_str(self) -> str:
        if self.setup == "pass" or not self.setup:
            return ""
        if "\n" in self.setup:
            return f"setup:\n{textwrap.indent(self.setup, '  ')}"
        return f"setup: {self.setup}"

    def summarize(self) -> str:
        sections = [self.title, self.description or "", self.setup_str()]
        return "\n".join(f"{s}\n" if "\n" in s else s for s in sections if s)


_TASKSPEC_FIELDS = tuple(field.name for field in dataclasses.fields(TaskSpec))


def _quantile(sorted_times: tuple[float, ...], q: float) -> float:
    return float(np.quantile(np.asarray(sorted_times, dtype=np.float64), q))


@dataclasses.dataclass(init=True, repr=False)
class Measurement:
    """The times of one Timer run: ``raw_times`` are seconds per block of ``number_per_run``
    runs; ``times`` per run; ``median``, ``mean``, ``iqr`` over ``times`` (torch's linear
    quantiles)."""

    number_per_run: int
    raw_times: list[float]
    task_spec: TaskSpec
    metadata: dict[Any, Any] | None = None

    def __post_init__(self) -> None:
        self._sorted_times: tuple[float, ...] = ()
        self._warnings: tuple[str, ...] = ()
        self._median = self._mean = self._p25 = self._p75 = -1.0

    def __getattr__(self, name: str) -> Any:
        if name in _TASKSPEC_FIELDS:
            return getattr(self.task_spec, name)
        return super().__getattribute__(name)

    @property
    def times(self) -> list[float]:
        return [t / self.number_per_run for t in self.raw_times]

    @property
    def median(self) -> float:
        self._lazy_init()
        return self._median

    @property
    def mean(self) -> float:
        self._lazy_init()
        return self._mean

    @property
    def iqr(self) -> float:
        self._lazy_init()
        return self._p75 - self._p25

    @property
    def significant_figures(self) -> int:
        """torch's estimate of the median's significant figures, from the interquartile
        points' spread (z = 1.645), between 1 and 4."""
        self._lazy_init()
        n_total = len(self._sorted_times)
        middle = self._sorted_times[n_total // 4 : math.ceil(3 * n_total / 4)]
        std = float(np.std(np.asarray(middle, dtype=np.float32)))
        interval = max(1.645 * std / math.sqrt(len(middle)), _MIN_CONFIDENCE_INTERVAL)
        figures = math.floor(math.log10(self._median / interval))
        return min(max(figures, 1), _MAX_SIGNIFICANT_FIGURES)

    @property
    def has_warnings(self) -> bool:
        self._lazy_init()
        return bool(self._warnings)

    def _lazy_init(self) -> None:
        if self.raw_times and not self._sorted_times:
            self._sorted_times = tuple(sorted(self.times))
            self._median = _quantile(self._sorted_times, 0.5)
            self._mean = float(np.mean(np.asarray(self._sorted_times, dtype=np.float64)))
            self._p25 = _quantile(self._sorted_times, 0.25)
            self._p75 = _quantile(self._sorted_times, 0.75)

            def add_warning(message: str) -> None:
                relative = self.iqr / self.median * 100
                self._warnings += (
                    f"  WARNING: Interquartile range is {relative:.1f}% "
                    f"of the median measurement.\n           {message}",
                )

            if not self.meets_confidence(_IQR_GROSS_WARN_THRESHOLD):
                add_warning("This suggests significant environmental influence.")
            elif not self.meets_confidence(_IQR_WARN_THRESHOLD):
                add_warning("This could indicate system fluctuation.")

    def meets_confidence(self, threshold: float = _IQR_WARN_THRESHOLD) -> bool:
        return self.iqr / self.median < threshold

    @property
    def title(self) -> str:
        return self.task_spec.title

    @property
    def env(self) -> str:
        return "Unspecified env" if self.task_spec.env is None else self.task_spec.env

    @property
    def as_row_name(self) -> str:
        return self.sub_label or self.stmt or "[Unknown]"

    def __repr__(self) -> str:
        self._lazy_init()
        skip = "MEASUREMENT_REPR_SKIP_LINE"
        n = len(self._sorted_times)
        unit, scale = select_unit(self._median)
        iqr_filter = "" if n >= 4 else skip
        threads = self.num_threads
        text = f"""
{object.__repr__(self)}
{self.task_spec.summarize()}
  {"Median: " if n > 1 else ""}{self._median / scale:.2f} {unit}
  {iqr_filter}IQR:    {self.iqr / scale:.2f} {unit} ({self._p25 / scale:.2f} to {self._p75 / scale:.2f})
  {n} measurement{"s" if n > 1 else ""}, {self.number_per_run} runs {"per measurement," if n > 1 else ","} {threads} thread{"s" if threads > 1 else ""}
{chr(10).join(self._warnings)}""".strip()  # noqa: E501 (torch's layout, line for line)
        return "\n".join(line for line in text.splitlines() if skip not in line)

    @staticmethod
    def merge(measurements: Iterable[Measurement]) -> list[Measurement]:
        """Replicates of one task merged into one measurement of single runs."""
        grouped: dict[TaskSpec, list[Measurement]] = collections.defaultdict(list)
        for m in measurements:
            grouped[m.task_spec].append(m)
        return [
            Measurement(1, [t for m in group for t in m.times], spec)
            for spec, group in grouped.items()
        ]


def select_unit(t: float) -> tuple[str, float]:
    """The unit (``ns``, ``us``, ``ms``, ``s``) that gives ``t`` seconds O(1) digits."""
    exponent = math.log10(t) if t > 0 else -math.inf
    unit = {-3: "ns", -2: "us", -1: "ms"}.get(
        int(exponent // 3) if math.isfinite(exponent) else 0, "s"
    )
    return unit, {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}[unit]


def unit_to_english(unit: str) -> str:
    return {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second"}[unit]


def trim_sigfig(x: float, n: int) -> float:
    """``x`` to ``n`` significant figures (3.14159, 2 -> 3.1)."""
    if n != int(n):
        raise InvalidArgumentError(f"trim_sigfig: the figures must be an integer, got {n}")
    magnitude = math.ceil(math.log10(abs(x)))
    scale = 10 ** (magnitude - n)
    return float(round(x / scale) * scale)


def ordered_unique(elements: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(elements))


@contextlib.contextmanager
def set_torch_threads(n: int) -> Iterator[None]:
    """``n`` threads for the timed block, then exactly the process's threads before it: torch's
    own count (not the BLAS pool's, which may differ) and the BLAS pools' limits as they were
    (a held limit would outlive the block: the suite's workers then ran torch on two threads
    each, oversubscribing the cores)."""
    torch = sys.modules.get("torch")
    prior_torch = torch.get_num_threads() if torch is not None else None
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # an optional dependency
        threadpool_limits = None
    limits = threadpool_limits(limits=n) if threadpool_limits is not None else None
    if torch is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if limits is not None:
            limits.restore_original_limits()
        if torch is not None:
            torch.set_num_threads(prior_torch)


def _synchronized_timer() -> float:
    if cuda.is_available():
        cuda.synchronize()
    return _timeit.default_timer()


def _clean(code: str) -> str:
    code = textwrap.dedent(code)
    return (code[1:] if code and code[0] == "\n" else code).rstrip()


class Timer:
    """torch's benchmark Timer over Python's ``timeit.Timer``: ``stmt`` run after ``setup``
    with ``globals`` (and ``torch`` bound to retrograd), at ``num_threads`` threads."""

    def __init__(
        self,
        stmt: str = "pass",
        setup: str = "pass",
        global_setup: str = "",
        timer: Callable[[], float] = _synchronized_timer,
        globals: dict[str, Any] | None = None,  # noqa: A002 (torch's name)
        label: str | None = None,
        sub_label: str | None = None,
        description: str | None = None,
        env: str | None = None,
        num_threads: int = 1,
        language: Language | str = Language.PYTHON,
    ) -> None:
        if not isinstance(stmt, str):
            raise InvalidArgumentError("Timer: Currently only a `str` stmt is supported.")
        if language not in (Language.PYTHON, "py", "python"):
            raise InvalidArgumentError(
                f"Timer: language {language!r} is not supported: retrograd times Python "
                "statements only (torch's C++ timer compiles against libtorch)"
            )
        if global_setup:
            raise InvalidArgumentError(
                f"Timer: global_setup is C++ only, got `{global_setup}`. Most likely this "
                "code can simply be moved to `setup`."
            )
        self._globals = dict(globals or {})
        # ported statements say ``torch.``: it is retrograd here (read at call time: the
        # package imports this module)
        self._globals.setdefault("torch", sys.modules[__name__.partition(".")[0]])
        stmt, setup = _clean(stmt), _clean(setup)
        self._timer = _timeit.Timer(stmt=stmt, setup=setup, timer=timer, globals=self._globals)
        self._task_spec = TaskSpec(
            stmt=stmt,
            setup=setup,
            global_setup=global_setup,
            label=label,
            sub_label=sub_label,
            description=description,
            env=env,
            num_threads=num_threads,
        )

    def _timeit(self, number: int) -> float:
        return max(self._timer.timeit(number), 1e-9)

    def timeit(self, number: int = 1000000) -> Measurement:
        """``stmt`` run ``number`` times (after a warm-up of a hundredth of that)."""
        with set_torch_threads(self._task_spec.num_threads):
            self._timeit(number=max(int(number // 100), 2))
            return Measurement(number, [self._timeit(number=number)], self._task_spec)

    def repeat(self, repeat: int = -1, number: int = -1) -> None:
        raise InvalidArgumentError("Timer.repeat: See `Timer.blocked_autorange.`")

    def autorange(self, callback: Any = None) -> None:
        raise InvalidArgumentError("Timer.autorange: See `Timer.blocked_autorange.`")

    def _measurement_loop(
        self,
        number: int,
        stop: Callable[[list[float]], bool],
        min_run_time: float,
        max_run_time: float | None = None,
        callback: Callable[[int, float], Any] | None = None,
    ) -> list[float]:
        total, can_stop, times = 0.0, False, []
        with set_torch_threads(self._task_spec.num_threads):
            while total < min_run_time or not can_stop:
                spent = self._timeit(number)
                times.append(spent)
                total += spent
                if callback:
                    callback(number, spent)
                can_stop = stop(times)
                if max_run_time and total > max_run_time:
                    break
        return times

    def _estimate_block_size(self, min_run_time: float) -> int:
        """The smallest power of ten of runs whose block the timer's overhead does not
        bias (under 1e-4 of it, and at least a thousandth of ``min_run_time``)."""
        with set_torch_threads(self._task_spec.num_threads):
            overhead = float(np.median([self._timeit(0) for _ in range(5)]))
            number = 1
            while True:
                taken = self._timeit(number)
                if overhead / taken <= 1e-4 and taken >= min_run_time / 1000:
                    break
                if taken > min_run_time or number * 10 > 2147483647:
                    break
                number *= 10
        return number

    def blocked_autorange(
        self, callback: Callable[[int, float], Any] | None = None, min_run_time: float = 0.2
    ) -> Measurement:
        """Blocks of ``stmt`` timed until ``min_run_time`` seconds are spent."""
        number = self._estimate_block_size(min_run_time)
        times = self._measurement_loop(number, lambda _: True, min_run_time, callback=callback)
        return Measurement(number, times, self._task_spec)

    def adaptive_autorange(
        self,
        threshold: float = 0.1,
        *,
        min_run_time: float = 0.01,
        max_run_time: float = 10.0,
        callback: Callable[[int, float], Any] | None = None,
    ) -> Measurement:
        """Blocks timed until IQR / median falls under ``threshold`` (at least 4 blocks and
        ``min_run_time``), or ``max_run_time`` is spent."""
        number = self._estimate_block_size(min_run_time=0.05)

        def confident(times: list[float]) -> bool:
            if len(times) <= 3:
                return False
            return Measurement(number, times, self._task_spec).meets_confidence(threshold)

        times = self._measurement_loop(number, confident, min_run_time, max_run_time, callback)
        return Measurement(number, times, self._task_spec)

    def collect_callgrind(self, *args: Any, **kwargs: Any) -> None:
        raise InvalidArgumentError(
            "Timer.collect_callgrind: instruction counts need torch's valgrind bindings; "
            "use blocked_autorange for wall times"
        )


# -- Compare -------------------------------------------------------------------------------------
BEST = "\033[92m"
GOOD = "\033[34m"
BAD = "\033[2m\033[91m"
VERY_BAD = "\033[31m"
BOLD = "\033[1m"
TERMINATE = "\033[0m"


class Colorize(enum.Enum):
    NONE = "none"
    COLUMNWISE = "columnwise"
    ROWWISE = "rowwise"


class _Column:
    def __init__(self, grouped, time_scale, trim, highlight_warnings) -> None:
        self._grouped = grouped
        flat = [*itertools.chain.from_iterable(grouped)]
        self._trim = trim
        self._highlight = highlight_warnings and any(r.has_warnings for r in flat if r)
        leading = [math.ceil(math.log10(r.median / time_scale)) if r else None for r in flat]
        unit_digits = max(d for d in leading if d is not None)
        decimals = (
            min(
                max(m.significant_figures - digits, 0)
                for digits, m in zip(leading, flat, strict=True)
                if m is not None and digits is not None
            )
            if trim
            else 1
        )
        length = unit_digits + decimals + (1 if decimals else 0)
        self._template = f"{{:>{length}.{decimals}f}}{{:>{7 if self._highlight else 0}}}"

    def results_for(self, group: int) -> Any:
        return self._grouped[group]

    def num_to_str(self, value: float | None, figures: int, spread: float | None) -> str:
        if value is None:
            return " " * len(self.num_to_str(1, figures, None))
        if self._trim:
            value = trim_sigfig(value, figures)
        note = f" (! {spread * 100:.0f}%)" if self._highlight and spread is not None else ""
        return self._template.format(value, note)


class _Row:
    def __init__(
        self, results, group, render_env, env_len, time_scale, colorize, num_threads
    ) -> None:
        self._results = results
        self._group = group
        self._render_env = render_env
        self._env_len = env_len
        self._time_scale = time_scale
        self._colorize = colorize
        self._num_threads = num_threads
        self._columns: tuple[_Column, ...] = ()

    def as_column_strings(self) -> list[str]:
        concrete = [r for r in self._results if r is not None]
        env = (f"({concrete[0].env})" if self._render_env else "").ljust(self._env_len + 4)
        out = ["  " + env + concrete[0].as_row_name]
        for m, column in zip(self._results, self._columns, strict=False):
            if m is None:
                out.append(column.num_to_str(None, 1, None))
            else:
                spread = m.iqr / m.median if m.has_warnings else None
                out.append(
                    column.num_to_str(m.median / self._time_scale, m.significant_figures, spread)
                )
        return out

    @staticmethod
    def color_segment(segment: str, value: float, best: float) -> str:
        if value <= best * 1.01 or value <= best + 100e-9:
            return BEST + BOLD + segment + TERMINATE * 2
        if value <= best * 1.1:
            return GOOD + BOLD + segment + TERMINATE * 2
        if value >= best * 5:
            return VERY_BAD + BOLD + segment + TERMINATE * 2
        if value >= best * 2:
            return BAD + segment + TERMINATE * 2
        return segment

    def row_separator(self, width: int) -> list[str]:
        if self._num_threads is None:
            return []
        return [f"{self._num_threads} threads: ".ljust(width, "-")]

    def finalize(self, strings: list[str], widths: list[int]) -> list[str]:
        best: list[Any] = [-1 for _ in strings]
        if self._colorize == Colorize.ROWWISE:
            row_min = min(r.median for r in self._results if r is not None)
            best = [row_min for _ in strings]
        elif self._colorize == Colorize.COLUMNWISE:
            best = [
                min((r.median for r in c.results_for(self._group) if r is not None), default=None)
                for c in self._columns
            ]
        out = [strings[0].ljust(widths[0])]
        for text, width, result, best_value in zip(
            strings[1:], widths[1:], self._results, best, strict=False
        ):
            text = text.center(width)
            if self._colorize != Colorize.NONE and result is not None and best_value is not None:
                text = self.color_segment(text, result.median, best_value)
            out.append(text)
        return out


def _row_key(m: Measurement) -> tuple[int, str, str]:
    return m.num_threads, m.env, m.as_row_name


def _render_table(results: list[Measurement], colorize, trim, highlight) -> str:
    label = results[0].label
    unit, scale = select_unit(min(r.median for r in results))
    row_keys = ordered_unique(_row_key(r) for r in results)
    row_keys.sort(key=operator.itemgetter(slice(2)))  # statements keep their order
    column_keys = ordered_unique(r.description for r in results)
    ordered: list[list[Measurement | None]] = [[None] * len(column_keys) for _ in row_keys]
    row_at = {key: i for i, key in enumerate(row_keys)}
    column_at = {key: i for i, key in enumerate(column_keys)}
    for r in results:
        ordered[row_at[_row_key(r)]][column_at[r.description]] = r
    envs = {r.env for r in results}
    render_env = len(envs) > 1
    env_len = max(len(e) for e in envs) if render_env else 0
    rows: list[_Row] = []
    groups: list[list[list[Measurement | None]]] = []
    prior_threads, prior_env, group = -1, "", -1
    for (threads, env, _), row in zip(row_keys, ordered, strict=True):
        transition = threads != prior_threads
        if transition:
            prior_threads, prior_env, group = threads, "", group + 1
            groups.append([])
        rows.append(
            _Row(
                row,
                group,
                render_env and env != prior_env,
                env_len,
                scale,
                colorize,
                threads if transition else None,
            )
        )
        groups[-1].append(row)
        prior_env = env
    columns = tuple(
        _Column([tuple(row[i] for row in g) for g in groups], scale, trim, highlight)
        for i in range(len(column_keys))
    )
    for row in rows:
        row._columns = columns
    strings = [["", *[("" if k is None else k) for k in column_keys]]]
    strings.extend(r.as_column_strings() for r in rows)
    width = max(len(s) for s in strings)
    for s in strings:
        s.extend([""] * (width - len(s)))
    widths = [max(len(cell) for cell in column) for column in zip(*strings, strict=True)]
    lines = ["  |  ".join(c.center(w) for c, w in zip(strings[0], widths, strict=True))]
    overall = len(lines[0])
    for s, row in zip(strings[1:], rows, strict=True):
        lines.extend(row.row_separator(overall))
        lines.append("  |  ".join(row.finalize(s, widths)))
    warned = highlight and any(r.has_warnings for r in results)
    note = (
        "(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n"
        if warned
        else ""
    )
    title = (" " + (label or "") + " ").center(overall - 2, "-")
    body = "\n".join(lines)
    return f"[{title}]\n{body}\n\nTimes are in {unit_to_english(unit)}s ({unit}).\n{note}"


class Compare:
    """torch's table of many measurements: one table per ``label``, rows by thread count,
    env and ``sub_label`` (else the statement), columns by ``description``."""

    def __init__(self, results: list[Measurement]) -> None:
        self._results: list[Measurement] = []
        self.extend_results(results)
        self._trim_significant_figures = False
        self._colorize = Colorize.NONE
        self._highlight_warnings = False

    def __str__(self) -> str:
        return "\n".join(self._render())

    def extend_results(self, results: Iterable[Measurement]) -> None:
        results = list(results)
        for r in results:
            if not isinstance(r, Measurement):
                raise InvalidArgumentError(
                    f"Compare: Expected an instance of `Measurement`, got {type(r)} instead."
                )
        self._results.extend(results)

    def trim_significant_figures(self) -> None:
        self._trim_significant_figures = True

    def colorize(self, rowwise: bool = False) -> None:
        self._colorize = Colorize.ROWWISE if rowwise else Colorize.COLUMNWISE

    def highlight_warnings(self) -> None:
        self._highlight_warnings = True

    def print(self) -> None:
        print(str(self))

    def _render(self) -> list[str]:
        by_label: dict[Any, list[Measurement]] = collections.defaultdict(list)
        for r in Measurement.merge(self._results):
            by_label[r.label].append(r)
        return [
            _render_table(
                group, self._colorize, self._trim_significant_figures, self._highlight_warnings
            )
            for group in by_label.values()
        ]
