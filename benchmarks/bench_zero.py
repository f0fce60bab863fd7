"""ZeRO stage 1 (``dist.ZeroRedundancyOptimizer``) against data parallel with the plain
optimizer: optimizer-state bytes per rank at 1, 2, 4 and 8 MPI ranks, step time at 2 ranks
(paired blocks), and the cost model's ZeRO stages 1 and 2 against data parallel to 256 ranks.

Run as a script; it starts the ranks itself (``mpiexec``, one BLAS thread per rank)::

    python benchmarks/bench_zero.py                       # everything; writes results/zero.json
    python benchmarks/bench_zero.py --steps 4 --trials 3  # quicker

Two models, AdamW (two moments per parameter), MEAN gradient sync: the benchmark MLP
784-1024-1024-10 (batch 128 per rank, as ``bench_ddp.py --scaling``) and a small GPT (2
layers, 128 wide, 64 tokens of context, 8 windows per rank). Memory: every rank's
``optimizer_state_bytes`` after one step, against the single-rank state and the target
``1/n`` of it plus the largest parameter's state. Time: each rank alternates blocks of
``--steps`` steps with the plain optimizer and with ZeRO (which goes first alternates), so
load from other jobs hits both alike; a block's time is the slowest rank's (barriers around
it); the table gives the median of the paired ratios zero / plain and their range.
"""

from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve()
SOURCE = HERE.parents[1] / "src"
MODELS = ("mlp", "gpt")
MEMORY_RANKS = (1, 2, 4, 8)
PREDICTED_RANKS = (2, 8, 32, 64, 256)
#: (network, alpha s, beta s/byte) for the predictions: as bench_ddp's workloads
NETWORKS = (("25 Gb/s Ethernet", 20e-6, 1 / 3.0e9), ("NVLink-class", 5e-6, 1 / 150e9))
#: (workload, parameter bytes, forward + backward seconds, AdamW update seconds) per rank
WORKLOADS = (
    ("GPT-2 small (124M), fp32", 124e6 * 4, 0.30, 0.012),
    ("1.3B model, fp32", 1.3e9 * 4, 3.0, 0.12),
)


# -- one rank ---------------------------------------------------------------------------------
def build(rg, name: str, device, rank: int):
    """The model (float32, parameters marked for sync) and a loss of one fixed batch."""
    from retrograd import nn

    rng = np.random.default_rng(100 + rank)
    if name == "mlp":
        model = nn.Sequential(
            nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
        )
        x = rng.standard_normal((128, 784)).astype(np.float32)
        y = rng.standard_normal((128, 10)).astype(np.float32)

        def loss(m):
            out = m(rg.tensor(x, device=device))
            return (out - rg.tensor(y, device=device)).square().mean()

    else:
        from retrograd.app.models import GPT, GPTConfig

        config = GPTConfig(vocab_size=96, block_size=64, n_layer=2, n_head=4, n_embd=128)
        model = GPT(config)
        tokens = rng.integers(0, 96, (8, 65))

        def loss(m):
            logits, _ = m(rg.tensor(tokens[:, :-1], device=device))
            targets = rg.tensor(tokens[:, 1:], device=device)
            return rg.nn.functional.cross_entropy(logits.view(-1, 96), targets.view(-1))

    model.to(device)
    return model.set_distributed(), loss


def worker(options) -> None:
    from mpi4py import MPI

    import retrograd as rg
    from retrograd import distributed as dist

    config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=300.0)
    ctx = dist.DistributedContext.from_launcher(config).start()
    comm = MPI.COMM_WORLD.Dup()
    rank, world = ctx.rank, ctx.world_size
    rg.seed(0)  # the same initial parameters on every rank
    report: dict = {"rank": rank, "world": world}
    for name in options.models.split(","):
        runs = {}
        for kind in ("plain", "zero"):
            rg.seed(0)
            model, loss = build(rg, name, ctx.device, rank)
            if kind == "zero":
                opt = dist.ZeroRedundancyOptimizer(model, rg.optim.AdamW, lr=1e-4)
            else:
                opt = rg.optim.AdamW(model, lr=1e-4)
            runs[kind] = (model, loss, opt)

        def step(kind: str, runs: dict = runs) -> None:
            model, loss, opt = runs[kind]
            opt.step(loss(model).backward())

        for kind in runs:
            for _ in range(max(1, options.warmup)):
                step(kind)
        params = list(runs["plain"][0].parameters())
        report[name] = {
            "plain_state_bytes": dist.optimizer_state_bytes(runs["plain"][2]),
            "zero_state_bytes": dist.optimizer_state_bytes(runs["zero"][2]),
            "largest_param_state_bytes": 2 * 4 * max(p.numel() for p in params),
            "parameters": sum(p.numel() for p in params),
        }
        if options.time:
            ratios, seconds = [], {"plain": [], "zero": []}
            for trial in range(options.trials):
                order = ("plain", "zero") if trial % 2 == 0 else ("zero", "plain")
                block = {}
                for kind in order:
                    comm.Barrier()
                    started = time.perf_counter()
                    for _ in range(options.steps):
                        step(kind)
                    comm.Barrier()
                    block[kind] = (time.perf_counter() - started) / options.steps
                    seconds[kind].append(block[kind])
                ratios.append(block["zero"] / block["plain"])
            report[name]["ratios"] = ratios
            report[name]["plain_ms"] = 1e3 * statistics.median(seconds["plain"])
            report[name]["zero_ms"] = 1e3 * statistics.median(seconds["zero"])
    (Path(options.out) / f"rank{rank}.json").write_text(json.dumps(report))
    ctx.close()


# -- the driver -------------------------------------------------------------------------------
def launch(ranks: int, options, time_it: bool) -> list[dict]:
    sys.path.insert(0, str(SOURCE))
    from retrograd.distributed.launch import mpiexec_command

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as out:
        argv = [str(HERE), "--worker", "--models", options.models, "--out", out]
        argv += ["--steps", str(options.steps), "--trials", str(options.trials)]
        argv += ["--warmup", str(options.warmup)] + (["--time"] if time_it else [])
        completed = subprocess.run(
            mpiexec_command(ranks, argv), capture_output=True, text=True, env=env, timeout=3600
        )
        if completed.returncode != 0:
            raise RuntimeError(f"{ranks} ranks failed:\n{completed.stdout}\n{completed.stderr}")
        return [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(ranks)]


def memory_table(options) -> tuple[dict, dict]:
    """Optimizer-state bytes per rank at each rank count (the time run's 2 ranks reused)."""
    rows, timing = [], {}
    for ranks in MEMORY_RANKS:
        reports = launch(ranks, options, time_it=ranks == 2)
        if ranks == 2:
            timing = {name: reports[0][name] for name in options.models.split(",")}
        for name in options.models.split(","):
            single = reports[0][name]["plain_state_bytes"]
            largest = reports[0][name]["largest_param_state_bytes"]
            shares = [r[name]["zero_state_bytes"] for r in reports]
            target = single / ranks + largest
            rows.append(
                [
                    name,
                    ranks,
                    single,
                    max(shares),
                    round(max(shares) / single, 3),
                    int(target),
                    max(shares) <= target,
                ]
            )
            print(f"{name} {ranks} ranks: state per rank {max(shares)} of {single}", flush=True)
    header = [
        "model",
        "ranks",
        "state, plain (B/rank)",
        "state, ZeRO (max B/rank)",
        "ZeRO / plain",
        "target 1/n + largest (B)",
        "within target",
    ]
    return {"header": header, "rows": rows}, timing


def time_table(timing: dict) -> dict:
    rows = []
    for name, result in timing.items():
        ratios = result["ratios"]
        rows.append(
            [
                name,
                round(result["plain_ms"], 1),
                round(result["zero_ms"], 1),
                round(statistics.median(ratios), 3),
                f"{min(ratios):.3f}-{max(ratios):.3f}",
                len(ratios),
            ]
        )
    header = [
        "model (2 ranks)",
        "plain AdamW (ms/step)",
        "ZeRO AdamW (ms/step)",
        "ZeRO / plain (median of pairs)",
        "range",
        "pairs",
    ]
    return {"header": header, "rows": rows}


def prediction_table() -> dict:
    sys.path.insert(0, str(SOURCE))
    from retrograd.distributed.cost import predict_zero

    rows = []
    for workload, param_bytes, compute, update in WORKLOADS:
        for network, alpha, beta in NETWORKS:
            for stage, label in ((0, "data parallel"), (1, "ZeRO 1"), (2, "ZeRO 2")):
                cells = []
                for ranks in PREDICTED_RANKS:
                    p = predict_zero(
                        stage,
                        ranks,
                        compute,
                        param_bytes,
                        state_bytes=2 * param_bytes,
                        update_seconds=update,
                        alpha=alpha,
                        beta=beta,
                    )
                    cells.append(f"{1e3 * p.step_seconds:.0f} ms, {p.memory_bytes / 1e9:.2f} GB")
                rows.append([workload, network, label, *cells])
    header = ["workload", "network", "scheme", *(f"{n} ranks" for n in PREDICTED_RANKS)]
    return {
        "header": header,
        "rows": rows,
        "note": "step time (communication not overlapped) and parameters + gradients + AdamW "
        "state per rank, from retrograd.distributed.cost.predict_zero",
    }


def print_table(title: str, table: dict) -> None:
    print(f"\n{title}")
    print("| " + " | ".join(table["header"]) + " |")
    print("|" + "---|" * len(table["header"]))
    for row in table["rows"]:
        print("| " + " | ".join(str(c) for c in row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--time", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=8, help="steps per timed block")
    parser.add_argument("--trials", type=int, default=8, help="pairs of timed blocks")
    parser.add_argument("--warmup", type=int, default=2)
    options = parser.parse_args()
    if options.worker:
        worker(options)
        return
    sys.path.insert(0, str(HERE.parent))
    from common import write_results

    memory, timing = memory_table(options)
    tables = {
        "optimizer state per rank": memory,
        "step time at 2 ranks": time_table(timing),
        "predicted": prediction_table(),
    }
    for title, table in tables.items():
        print_table(title, table)
    command = "python benchmarks/bench_zero.py " + " ".join(sys.argv[1:])
    print("\nwrote", write_results("zero", tables, command=command.strip()))


if __name__ == "__main__":
    main()
