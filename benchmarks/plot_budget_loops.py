"""The memory-time plot of ``bench_budget_loops.py``: per workload, the activation peak and
the step time of BudgetCheckpointing at 0.5x and 0.25x of NoCheckpointing's peak, both as
ratios to NoCheckpointing's, read from the results file; the issue's targets drawn as boxes
(peak within the budget + 10% of NoCheckpointing's, time at most 1.08x at 0.5x and 1.25x at
0.25x).

    python benchmarks/plot_budget_loops.py [RESULTS_JSON] [--out PNG]

By default it reads ``benchmarks/results/budget_loops.json`` and writes ``budget_loops.png``
beside it (which ``benchmarks/report.py`` shows with the results).
"""

from __future__ import annotations

import argparse
import json
import pathlib

#: budget (fraction of NoCheckpointing's peak) -> the time target at it
TARGETS = {0.5: 1.08, 0.25: 1.25}
#: how far above the budget the peak may go, as a fraction of NoCheckpointing's peak
PEAK_SLACK = 0.1


def points(record: dict) -> dict[str, list[tuple[float, float, float]]]:
    """Per workload, ``(budget, time ratio, peak ratio)`` of each row of the loops table."""
    header = record["tables"]["loops"]["header"]
    column = {name: i for i, name in enumerate(header)}
    found: dict[str, list[tuple[float, float, float]]] = {}
    for row in record["tables"]["loops"]["rows"]:
        budget = float(row[column["budget"]].rstrip("x"))
        found.setdefault(row[column["workload"]], []).append(
            (budget, float(row[column["time / NoCkpt"]]), float(row[column["peak / NoCkpt"]]))
        )
    return found


def plot(results: str | pathlib.Path, out: str | pathlib.Path | None = None) -> str:
    """Draw the plot of the results file ``results`` to ``out`` (default: beside it, .png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    results = pathlib.Path(results)
    record = json.loads(results.read_text())
    out = pathlib.Path(out) if out else results.with_suffix(".png")
    found = points(record)
    left = min([0.9] + [time - 0.05 for rows in found.values() for _, time, _ in rows])
    figure, axis = plt.subplots(figsize=(10, 5))
    colors = {0.5: "tab:blue", 0.25: "tab:orange"}
    for budget, limit in TARGETS.items():
        axis.add_patch(
            Rectangle(
                (left, 0.0),
                limit - left,
                budget + PEAK_SLACK,
                color=colors[budget],
                alpha=0.08,
                label=f"target at {budget}x: time <= {limit}x, peak <= {budget + PEAK_SLACK:.2f}",
            )
        )
    markers = "osD^vP*X"
    for marker, (workload, rows) in zip(markers, found.items()):
        xs = [1.0] + [time for _, time, _ in rows]
        ys = [1.0] + [peak for _, _, peak in rows]
        axis.plot(xs, ys, "-", color="0.7", linewidth=0.8, zorder=1)
        for budget, time, peak in rows:
            axis.scatter(time, peak, marker=marker, color=colors.get(budget, "k"), zorder=2)
        axis.scatter([], [], marker=marker, color="0.3", label=workload)
    axis.scatter(1.0, 1.0, marker="s", color="k", label="NoCheckpointing", zorder=2)
    axis.set_xlabel("step time / NoCheckpointing's (median of steps 4-8)")
    axis.set_ylabel("activation peak / NoCheckpointing's")
    axis.set_title(
        f"BudgetCheckpointing at 0.5x (blue) and 0.25x (orange)\n{record['date']}, "
        f"{record['command']}",
        fontsize=9,
    )
    axis.set_xlim(left=left)
    axis.set_ylim(0, 1.1)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = pathlib.Path(__file__).resolve().parent / "results" / "budget_loops.json"
    parser.add_argument("results", nargs="?", default=str(default))
    parser.add_argument("--out", help="the PNG to write (default: beside the results file)")
    args = parser.parse_args()
    print(plot(args.results, args.out))


if __name__ == "__main__":
    main()
