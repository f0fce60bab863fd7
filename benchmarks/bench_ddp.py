"""Data-parallel MLP training throughput with 1 and 2 MPI ranks, and how much of the
all-reduce time hides behind backward, with and without bucketing.

Run as a script; it starts the ranks itself (``mpiexec -n 1`` and ``-n 2``, one BLAS thread
per rank)::

    python benchmarks/bench_ddp.py                 # 1 and 2 ranks: benchmarks/results/ddp.json
    python benchmarks/bench_ddp.py --steps 10 --trials 1   # quicker
    python benchmarks/bench_ddp.py --overhead --bucket-bytes 0  # a 1-rank context's cost
    python benchmarks/bench_ddp.py --models wide --batch 2048 --phases  # + each rank's pace
    python benchmarks/bench_ddp.py --scaling --ranks 2,8 --batches 128,1024  # issue 16's table
    python benchmarks/bench_ddp.py --ab --ranks 2,8 --batches 128 --steps 8 --trials 8
        # naive and ddp alternating in the same ranks: paired ratios, CPU per step

Each mode writes its results file (``ddp``, ``ddp-scaling``, ``ddp-predict``,
``ddp-overhead``.json in ``benchmarks/results``), except ``--ab``, whose paired blocks are
printed for a comparison by hand.

``--scaling`` runs four cases for every rank count and batch, interleaved round by round, on
the MLP 784-1024-1024-10: ``one`` (1 process, no context), ``ideal`` (N processes, no
communication: what the cores give), ``naive`` (N ranks, no context; after backward one
blocking ``Allreduce`` of every gradient packed in one buffer) and ``ddp`` (N ranks,
retrograd's context). Per case: samples/s (median, min-max of the ratio to the same round's
``one``), the communication exposed after the last rank's backward, and each rank's CPU time
per step beyond ``ideal``'s (what the sync machinery costs the cores, server thread included).

Each rank trains the same MLP on its own batch (``--batch`` samples per rank and step, so 2
ranks process twice the samples of 1 per step) with MEAN gradient sync and plain SGD.
Throughput is samples per second over the timed steps (the slowest rank's time). The
baseline is one process training without any distributed context. Every round runs each case
once; the table gives medians over rounds, and the range of each case's ratio to the baseline
of its own round.

Hidden fraction = 1 - (time backward spent waiting for its all-reduces at its end) / (time
during which at least one of its all-reduces was in flight), summed over the timed steps and
ranks. A rank ahead of its peer also waits for the peer's compute, which that counts as not
hidden; so a second measure takes, per step, the communication still exposed once the *last*
rank's backward has ended (until the last rank has its gradients; the ranks share one clock):
hidden behind the last backward = 1 - exposed / (mean time in flight per rank).
"""

from __future__ import annotations

import os

# One BLAS thread per rank, set before NumPy is imported (here and in every rank).
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import command_line, write_results  # noqa: E402

MODELS = {
    # a few wide layers: large gradients, communication in a few big all-reduces
    "wide": [256, 1024, 1024, 1024, 10],
    # many narrow layers: many small gradients, where per-collective cost matters
    "deep": [128] + [128] * 16 + [10],
    # issue 16's MLP (MNIST-sized input)
    "mnist": [784, 1024, 1024, 10],
}
MIB = 1 << 20


# -- one rank ----------------------------------------------------------------------------------
def init_params(sizes: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    params = {}
    for k in range(len(sizes) - 1):
        fan_in, fan_out = sizes[k], sizes[k + 1]
        params[f"layer{k:02d}.weight"] = (
            rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
        ).astype(np.float32)
        params[f"layer{k:02d}.bias"] = np.zeros(fan_out, np.float32)
    return params


def train_step(rg, params, x, y, device, distributed: bool, lr: float = 0.01) -> tuple:
    """One SGD step; returns ``(start, forward done, backward done)`` on ``perf_counter``."""
    started = time.perf_counter()
    tensors = {}
    for name, value in params.items():
        t = rg.tensor(value, device=device)
        tensors[name] = t.set_distributed(name) if distributed else t.require_grad()
    layers = len(params) // 2
    h = rg.tensor(x, device=device)
    for k in range(layers):
        h = h @ tensors[f"layer{k:02d}.weight"] + tensors[f"layer{k:02d}.bias"]
        if k < layers - 1:
            h = h.relu()
    loss = (h - rg.tensor(y, device=device)).square().mean()
    forward_done = time.perf_counter()
    grads = loss.backward()
    backward_done = time.perf_counter()
    for name, t in tensors.items():
        params[name] = params[name] - lr * t.grad(grads).numpy()
    return started, forward_done, backward_done


def sync_config(options):
    """The context's settings: MEAN sync, the bucket sizes the options give."""
    from retrograd import distributed as dist

    overlap = {"auto": None, "on": True, "off": False}[getattr(options, "overlap", "auto")]
    return dist.DistributedConfig(
        dist.ReduceOperation.MEAN,
        timeout=120.0,
        bucket_bytes=options.bucket_bytes,
        last_bucket_bytes=options.last_bucket_bytes,
        overlap=overlap,
    )


def make_batch(options, sizes: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((options.batch, sizes[0])).astype(np.float32)
    y = rng.standard_normal((options.batch, sizes[-1])).astype(np.float32)
    return x, y


def worker(options) -> None:
    import retrograd as rg

    sizes = MODELS[options.model]
    params = init_params(sizes)
    if options.no_context:
        # mpiexec's rank, though nothing is shared: each process reports as itself
        rank, world, device, ctx = int(os.environ.get("PMI_RANK", 0)), 1, rg.Device("cpu", 0), None
    else:
        from retrograd import distributed as dist

        ctx = dist.DistributedContext.from_launcher(sync_config(options)).start()
        rank, world, device = ctx.rank, ctx.world_size, ctx.device
    x, y = make_batch(options, sizes, 100 + rank)

    def barrier():
        if ctx is not None:
            dist.all_reduce(
                rg.tensor([0.0], device=device), dist.ReduceOperation.SUM, ctx.devices
            ).resolve()

    for _ in range(options.warmup):
        train_step(rg, params, x, y, device, ctx is not None)
    barrier()
    if ctx is not None:
        ctx.stats.reset()
    started = time.perf_counter()
    steps = [train_step(rg, params, x, y, device, ctx is not None) for _ in range(options.steps)]
    elapsed = time.perf_counter() - started
    stats = ctx.stats.as_dict() if ctx is not None else {}
    barrier()
    # Each step's wait for its all-reduces, from the timeline: (backward ended, synced).
    waits = [synced - ended for ended, synced in stats.get("timeline", ())] or [0.0] * len(steps)
    forward = [done - begun for begun, done, _ in steps]
    backward = [finished - done - wait for (_, done, finished), wait in zip(steps, waits)]
    phases = {
        "forward_ms": 1000 * statistics.median(forward),
        "backward_ms": 1000 * statistics.median(backward),
    }
    print(
        "RESULT "
        + json.dumps({"rank": rank, "world": world, "seconds": elapsed, **phases, **stats}),
        flush=True,
    )
    if ctx is not None:
        ctx.close()


def context_overhead(options) -> list[str]:
    """What a context of one rank adds to a step (a world of one reduces nothing): in one
    process, 4-step batches with and without distributed parameters, alternating. Returns
    the row of the results table."""
    import retrograd as rg
    from retrograd import distributed as dist

    sizes = MODELS[options.model]
    params = init_params(sizes)
    x, y = make_batch(options, sizes, 0)
    times: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    with dist.DistributedContext.from_launcher(sync_config(options), engine="mpi") as ctx:
        for _ in range(options.warmup):
            train_step(rg, params, x, y, ctx.device, True)
        for _ in range(options.trials * 3):
            for distributed in (True, False):
                started, used = time.perf_counter(), time.process_time()
                for _ in range(4):
                    train_step(rg, params, x, y, ctx.device, distributed)
                times[distributed].append((time.perf_counter() - started) / 4)
                cpu[distributed].append((time.process_time() - used) / 4)
    with_context, without = (1000 * statistics.median(times[flag]) for flag in (True, False))
    # CPU time (every thread of the process) is robust to other jobs on the machine
    cpu_with, cpu_without = (1000 * statistics.median(cpu[flag]) for flag in (True, False))
    print(
        f"{options.model}, bucket_bytes {options.bucket_bytes}: {with_context:.2f} ms per step "
        f"with a context of one rank, {without:.2f} ms without: {with_context - without:.2f} ms "
        f"of overhead; CPU {cpu_with:.2f} / {cpu_without:.2f} ms: "
        f"{cpu_with - cpu_without:.2f} ms"
    )
    return [
        options.model,
        str(options.bucket_bytes),
        f"{with_context:.2f}",
        f"{without:.2f}",
        f"{with_context - without:.2f}",
        f"{cpu_with - cpu_without:.2f}",
    ]


# -- scaling: one / ideal / naive / ddp ---------------------------------------------------------
SCALING_CASES = ("one", "ideal", "naive", "ddp")


def thread_cpu_seconds(native_id: int | None) -> float:
    """CPU seconds a thread of this process has used so far (Linux ``/proc``; 0 elsewhere)."""
    if native_id is None:
        return 0.0
    try:
        stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (name)": state is field 3
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def scaling_step(rg, params, x, y, device, case, comm, buffer, lr=0.01) -> tuple[float, float]:
    """One SGD step of a scaling case; ``(backward ended, gradients synced)``."""
    tensors = {}
    for name, value in params.items():
        t = rg.tensor(value, device=device)
        tensors[name] = t.set_distributed(name) if case == "ddp" else t.require_grad()
    layers = len(params) // 2
    h = rg.tensor(x, device=device)
    for k in range(layers):
        h = h @ tensors[f"layer{k:02d}.weight"] + tensors[f"layer{k:02d}.bias"]
        if k < layers - 1:
            h = h.relu()
    loss = (h - rg.tensor(y, device=device)).square().mean()
    grads = loss.backward()
    ended = time.perf_counter()
    arrays = {name: t.grad(grads).numpy() for name, t in tensors.items()}
    if comm is not None:  # naive: one blocking all-reduce of everything, after backward
        from mpi4py import MPI

        offset = 0
        for a in arrays.values():
            buffer[offset : offset + a.size] = a.reshape(-1)
            offset += a.size
        comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        buffer /= comm.Get_size()
        offset = 0
        for name, a in arrays.items():
            arrays[name] = buffer[offset : offset + a.size].reshape(a.shape)
            offset += a.size
    synced = time.perf_counter()
    for name, grad in arrays.items():
        params[name] = params[name] - lr * grad
    return ended, synced


def scaling_worker(options) -> None:
    import retrograd as rg

    case, sizes = options.case, MODELS[options.model]
    params = init_params(sizes)
    rank = int(os.environ.get("PMI_RANK", 0))
    device, ctx, comm, buffer, server_thread = rg.Device("cpu", 0), None, None, None, None
    if case == "ddp":
        from retrograd import distributed as dist

        ctx = dist.DistributedContext.from_launcher(sync_config(options)).start()
        rank, device = ctx.rank, ctx.device
        server_thread = ctx.server.native_id
    elif case == "naive":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()
        buffer = np.empty(sum(v.size for v in params.values()), np.float32)
    x, y = make_batch(options, sizes, 100 + rank)

    def barrier():
        if ctx is not None:
            dist.all_reduce(
                rg.tensor([0.0], device=device), dist.ReduceOperation.SUM, ctx.devices
            ).resolve()
        elif comm is not None:
            comm.Barrier()

    for _ in range(options.warmup):
        scaling_step(rg, params, x, y, device, case, comm, buffer)
    barrier()
    if ctx is not None:
        ctx.stats.reset()
    server_cpu = thread_cpu_seconds(server_thread)
    in_place = getattr(ctx.transport, "reduced_in_place", 0) if ctx is not None else 0
    profile = None
    if options.profile and rank == 0:  # where rank 0's time goes (its main thread)
        import cProfile

        profile = cProfile.Profile(time.process_time)
        profile.enable()
    cpu, started = time.process_time(), time.perf_counter()
    timeline = [
        scaling_step(rg, params, x, y, device, case, comm, buffer) for _ in range(options.steps)
    ]
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if profile is not None:
        profile.disable()
        profile.dump_stats(options.profile)
    server_cpu = thread_cpu_seconds(server_thread) - server_cpu
    if ctx is not None:
        in_place = getattr(ctx.transport, "reduced_in_place", 0) - in_place
        # the hook's own clock: backward's end, then the reduced gradients
        timeline = [tuple(pair) for pair in ctx.stats.as_dict()["timeline"]]
    barrier()
    report = {
        "rank": rank,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "server_cpu_seconds": server_cpu,
        "timeline": timeline,
        "overlapping": bool(ctx is not None and ctx.server.overlapping),
        "in_place_per_step": in_place / options.steps,
        "shared_memory": bool(ctx is not None and ctx.transport.shared is not None),
    }
    # a file per rank: Hydra forwards the ranks' output in chunks that may interleave
    (Path(options.out) / f"rank{rank}.json").write_text(json.dumps(report))
    if ctx is not None:
        ctx.close()


# -- naive and ddp side by side, in one process ------------------------------------------------
def ab_worker(options) -> None:
    """Each rank alternates blocks of ``naive`` and ``ddp`` steps (which first alternates from
    block to block), so load from other jobs hits both alike; rank 0 prints each block's
    ddp / naive throughput, paired, and CPU time per rank and step."""
    from mpi4py import MPI

    import retrograd as rg
    from retrograd import distributed as dist

    sizes = MODELS["mnist"]
    params = init_params(sizes)
    ctx = dist.DistributedContext.from_launcher(sync_config(options)).start()
    comm = MPI.COMM_WORLD.Dup()
    rank = comm.Get_rank()
    buffer = np.empty(sum(v.size for v in params.values()), np.float32)
    x, y = make_batch(options, sizes, 100 + rank)

    def run(case: str, steps: int) -> None:
        for _ in range(steps):
            scaling_step(
                rg, params, x, y, ctx.device, case, comm if case == "naive" else None, buffer
            )

    for case in ("naive", "ddp"):
        run(case, options.warmup)
    blocks: dict[str, list[tuple[float, float]]] = {"naive": [], "ddp": []}
    for k in range(options.trials):
        for case in ("naive", "ddp") if k % 2 == 0 else ("ddp", "naive"):
            comm.Barrier()
            used, started = time.process_time(), time.perf_counter()
            run(case, options.steps)
            comm.Barrier()
            wall = (time.perf_counter() - started) / options.steps
            cpu = statistics.mean(comm.allgather(time.process_time() - used)) / options.steps
            blocks[case].append((wall, cpu))
    ctx.close()
    if rank != 0:
        return
    paired = [n[0] / d[0] for n, d in zip(blocks["naive"], blocks["ddp"])]
    cpu = [d[1] - n[1] for n, d in zip(blocks["naive"], blocks["ddp"])]
    naive_cpu, ddp_cpu = (1e3 * statistics.median(c for _, c in blocks[k]) for k in blocks)
    print(
        f"{comm.Get_size()} ranks, {options.batch} per rank, overlap {options.overlap}: "
        f"ddp / naive {statistics.median(paired):.3f} (blocks: "
        + " ".join(f"{r:.2f}" for r in paired)
        + f"); CPU per rank and step: naive {naive_cpu:.1f} ms, ddp {ddp_cpu:.1f} ms "
        f"(paired difference {1e3 * statistics.median(cpu):+.2f} ms)",
        flush=True,
    )


def side_by_side(options) -> None:
    """``--ab``: :func:`ab_worker` for every rank count and batch."""
    here = Path(__file__).resolve()
    env = dict(os.environ)
    source = here.parents[1] / "src"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    sys.path.insert(0, str(source))
    from retrograd.distributed.launch import mpiexec_command

    for ranks in (int(n) for n in options.ranks.split(",")):
        for batch in (int(b) for b in options.batches.split(",")):
            argv = [str(here), "--ab-worker", "--batch", str(batch), "--steps", str(options.steps)]
            argv += ["--trials", str(options.trials), "--warmup", str(options.warmup)]
            argv += ["--overlap", options.overlap, "--bucket-bytes", str(options.bucket_bytes)]
            argv += ["--last-bucket-bytes", str(options.last_bucket_bytes)]
            completed = subprocess.run(
                mpiexec_command(ranks, argv), capture_output=True, text=True, env=env, timeout=1800
            )
            if completed.returncode != 0:
                raise RuntimeError(f"--ab failed:\n{completed.stdout}\n{completed.stderr}")
            print(completed.stdout.strip(), flush=True)


# -- the driver ------------------------------------------------------------------------------
#: (label, ranks, bucket_bytes); bucket_bytes None: ranks train alone, without any context
CASES = [
    ("1 process, no context (baseline)", 1, None),
    ("2 processes, no context, side by side (the machine's ceiling)", 2, None),
    ("1 rank, no bucketing", 1, 0),
    ("1 rank, 25 MiB buckets", 1, 25 * MIB),
    ("2 ranks, no bucketing", 2, 0),
    ("2 ranks, 25 MiB buckets", 2, 25 * MIB),
]
_RESULT = re.compile(r"RESULT (\{[^}]*\})")


def run_case(options, ranks: int, bucket_bytes: int | None) -> dict:
    """One configuration, once: every rank's RESULT, combined."""
    here = Path(__file__).resolve()
    argv = [
        str(here),
        "--worker",
        "--model",
        options.model,
        "--steps",
        str(options.steps),
        "--warmup",
        str(options.warmup),
        "--batch",
        str(options.batch),
        "--last-bucket-bytes",
        str(options.last_bucket_bytes),
    ]
    env = dict(os.environ)
    source = here.parents[1] / "src"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    sys.path.insert(0, str(source))
    from retrograd.distributed.launch import mpiexec_command

    if bucket_bytes is None:  # independent processes: no MPI inside, mpiexec only starts them
        command = mpiexec_command(ranks, [*argv, "--no-context"])
    else:
        command = mpiexec_command(ranks, [*argv, "--bucket-bytes", str(bucket_bytes)])
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    results = [json.loads(found) for found in _RESULT.findall(completed.stdout)]
    if completed.returncode != 0 or len(results) != ranks:
        raise RuntimeError(f"{command} failed:\n{completed.stdout}\n{completed.stderr}")
    seconds = max(r["seconds"] for r in results)
    summary = {"samples_per_s": ranks * options.batch * options.steps / seconds}
    for r in results:  # each rank's own compute, per step: the pace the ranks keep
        summary[f"forward_ms_rank{r['rank']}"] = r["forward_ms"]
        summary[f"backward_ms_rank{r['rank']}"] = r["backward_ms"]
    if bucket_bytes is not None:
        comm = sum(r["comm_seconds"] for r in results)
        wait = sum(r["wait_seconds"] for r in results)
        # One clock for the whole machine: step k's communication is exposed from the moment
        # the last rank's backward ended until the last rank has its gradients.
        exposed = sum(
            max(0.0, max(synced for _, synced in ranks) - max(ended for ended, _ in ranks))
            for ranks in zip(*(r["timeline"] for r in results))
        )
        summary.update(
            comm_ms=1000 * comm / len(results) / options.steps,
            wait_ms=1000 * wait / len(results) / options.steps,
            hidden=max(0.0, 1.0 - wait / comm) if comm > 0 else 1.0,
            exposed_ms=1000 * exposed / options.steps,
            hidden_last=max(0.0, 1.0 - exposed * len(results) / comm) if comm > 0 else 1.0,
            collectives=results[0]["buckets"] / options.steps,
        )
    return summary


def run_scaling_case(options, case: str, ranks: int, batch: int) -> dict:
    """One scaling case, once: throughput, exposed communication, CPU per rank and step."""
    here = Path(__file__).resolve()
    argv = [str(here), "--scaling-worker", "--case", case, "--model", options.model]
    argv += ["--steps", str(options.steps), "--warmup", str(options.warmup)]
    argv += ["--batch", str(batch), "--bucket-bytes", str(options.bucket_bytes)]
    argv += ["--last-bucket-bytes", str(options.last_bucket_bytes)]
    argv += ["--overlap", options.overlap]
    out = tempfile.mkdtemp(prefix="bench_ddp_")
    argv += ["--out", out]
    env = dict(os.environ)
    source = here.parents[1] / "src"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    sys.path.insert(0, str(source))
    from retrograd.distributed.launch import mpiexec_command

    command = mpiexec_command(ranks, argv)
    completed = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env)
    results = [json.loads(path.read_text()) for path in Path(out).glob("rank*.json")]
    shutil.rmtree(out, ignore_errors=True)
    if completed.returncode != 0 or len(results) != ranks:
        raise RuntimeError(f"{command} failed:\n{completed.stdout}\n{completed.stderr}")
    steps = options.steps
    # One clock for the whole machine: step k's communication is exposed from the moment the
    # last rank's backward ended until the last rank has its gradients.
    exposed = sum(
        max(0.0, max(synced for _, synced in step) - max(ended for ended, _ in step))
        for step in zip(*(r["timeline"] for r in results))
    )
    return {
        "samples_per_s": ranks * batch * steps / max(r["seconds"] for r in results),
        "exposed_ms": 1000 * exposed / steps,
        "cpu_ms": 1000 * statistics.mean(r["cpu_seconds"] for r in results) / steps,
        "server_cpu_ms": 1000 * statistics.mean(r["server_cpu_seconds"] for r in results) / steps,
        "overlapping": int(results[0]["overlapping"]),  # the engine's choice
        # gradients reduced in place (donated) per rank and step
        "in_place": statistics.mean(r["in_place_per_step"] for r in results),
        "shared_memory": int(results[0]["shared_memory"]),  # the engine's choice
    }


def model_row(options, ideal: dict, one: float, ranks: int, batch: int) -> list[str]:
    """The cost model's naive and ddp, from this run's ``ideal`` step: a table row's cells."""
    from retrograd.distributed.cost import predict_step

    _, alpha, beta = SHARED_MEMORY
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    compute = ranks * batch / ideal["samples_per_s"]  # a step of N ranks side by side
    common = dict(alpha=alpha, beta=beta, cores=cores, last_bytes=MLP_LAST_BYTES)
    naive = predict_step(ranks, compute, MLP_GRAD_BYTES, **common)
    ddp = predict_step(
        ranks,
        compute,
        MLP_GRAD_BYTES,
        window_seconds=compute * MLP_WINDOW_SHARE,
        collectives=2 if ranks <= cores else 1,  # the engine's own choice (overlap=None)
        overhead_seconds=OVERHEAD_SECONDS + PER_PEER_SECONDS * (ranks - 1),
        **common,
    )
    rates = [ranks * batch / p.step_seconds / one for p in (naive, ddp)]
    exposed = f"{1e3 * naive.exposed_seconds:.1f} / {1e3 * ddp.exposed_seconds:.1f}"
    rates_text = f"{rates[0]:.2f} / {rates[1]:.2f}"
    return [str(batch), str(ranks), "model: naive / ddp", "", rates_text, "", exposed, "", "", ""]


def scaling(options) -> None:
    """Issue 16's table: one / ideal / naive / ddp for every rank count and batch."""
    rank_counts = [int(n) for n in options.ranks.split(",")]
    batches = [int(b) for b in options.batches.split(",")]
    options.model = "mnist"
    print(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
        f"MLP {MODELS['mnist']}, {options.steps} timed steps after {options.warmup}, "
        f"{options.trials} rounds (cases interleaved), bucket_bytes {options.bucket_bytes}\n"
    )
    runs: dict[tuple, list[dict]] = {}
    for _ in range(options.trials):  # round-robin, so drift in the machine hits every case
        for batch in batches:
            runs.setdefault(("one", 1, batch), []).append(
                run_scaling_case(options, "one", 1, batch)
            )
            for ranks in rank_counts:
                for case in SCALING_CASES[1:]:
                    runs.setdefault((case, ranks, batch), []).append(
                        run_scaling_case(options, case, ranks, batch)
                    )
    header = ["batch per rank", "ranks", "case", "samples/s", "vs one", "same round, min-max"]
    header += ["exposed ms/step", "CPU ms/step per rank", "over ideal", "server thread CPU ms/step"]
    rows: list[list[str]] = []
    print("| " + " | ".join(header) + " |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for batch in batches:
        ones = runs[("one", 1, batch)]
        one = statistics.median(r["samples_per_s"] for r in ones)
        for ranks in rank_counts:
            ideal_cpu = statistics.median(r["cpu_ms"] for r in runs[("ideal", ranks, batch)])
            medians = {}
            for case in SCALING_CASES[1:]:
                case_runs = runs[(case, ranks, batch)]
                median = {k: statistics.median(r[k] for r in case_runs) for k in case_runs[0]}
                medians[case] = median
                ratios = [r["samples_per_s"] / o["samples_per_s"] for r, o in zip(case_runs, ones)]
                label = case
                if case == "ddp":  # the engine's choices: overlap, transport
                    overlapped = sum(r["overlapping"] for r in case_runs)
                    shared = sum(r["shared_memory"] for r in case_runs)
                    label += f" (overlap {overlapped}/{len(case_runs)}, "
                    label += (
                        f"shared memory {shared}/{len(case_runs)})"
                        if shared
                        else f"in place {median['in_place']:.1f}/step)"
                    )
                emit(
                    rows,
                    [
                        str(batch),
                        str(ranks),
                        label,
                        f"{median['samples_per_s']:.0f}",
                        f"{median['samples_per_s'] / one:.2f}",
                        f"{min(ratios):.2f}-{max(ratios):.2f}",
                        f"{median['exposed_ms']:.1f}",
                        f"{median['cpu_ms']:.1f}",
                        f"{median['cpu_ms'] - ideal_cpu:+.1f}",
                        f"{median['server_cpu_ms']:.1f}",
                    ],
                )
            emit(rows, model_row(options, medians["ideal"], one, ranks, batch))
            paired = [
                d["samples_per_s"] / n["samples_per_s"]
                for d, n in zip(runs[("ddp", ranks, batch)], runs[("naive", ranks, batch)])
            ]
            ratio = medians["ddp"]["samples_per_s"] / medians["naive"]["samples_per_s"]
            paired_range = f"{min(paired):.2f}-{max(paired):.2f}"
            cells = [str(batch), str(ranks), "ddp / naive", f"{ratio:.2f}", "", paired_range]
            emit(rows, cells + [""] * 4)
    print()
    title = (
        f"MLP {MODELS['mnist']}, MEAN sync, {options.steps} timed steps, {options.trials} rounds"
    )
    write_results("ddp-scaling", {title: {"header": header, "rows": rows}}, command=command_line())


def emit(rows: list[list[str]], cells: list[str]) -> None:
    """Add a row to ``rows`` (a table of the results file) and print it as markdown."""
    rows.append(cells)
    print("| " + " | ".join(cells) + " |", flush=True)


# -- the cost model's predictions ---------------------------------------------------------------
#: (name, alpha s, beta s/byte). This machine: fitted to 2-rank Iallreduce timings polled back
#: to back (docs/distributed.md, "Cost model"); the networks: typical published figures
#: (assumed, not measured here): MPI over TCP on 10 GbE, 100 and 400 Gb/s InfiniBand.
SHARED_MEMORY = ("shared memory (this machine, fitted)", 1.6e-6, 0.5e-9)
TCP_10G = ("10 GbE, TCP (assumed)", 50e-6, 0.8e-9)
IB_100G = ("100 Gb/s InfiniBand (assumed)", 3e-6, 0.08e-9)
IB_400G = ("400 Gb/s InfiniBand (assumed)", 3e-6, 0.02e-9)
#: the MLP's 2 buckets (25 MiB, first capped at 1 MiB): layers 2-1 (4.2 MB), then layer 0
#: (3.2 MB), final only at the end of backward; layer 0's backward (~28% of backward's flops)
#: is the window the first bucket can hide behind
MLP_GRAD_BYTES, MLP_LAST_BYTES, MLP_WINDOW_SHARE = 7.44e6, 3.2e6, 2 / 3 * 0.28
#: (name, gradient bytes, compute s/step of one rank, overlap window s, last bucket bytes,
#: collectives, networks). MLP 784-1024-1024-10 at 128 and 1024 per rank: compute measured
#: here (the ``one`` case); window = layer 0's share of backward (~2/3 of the step). GPT,
#: 6 layers, n_embd 384 (10.7M parameters, 42.9 MB), 32 x 256 tokens per rank:
#: 6 x parameters x tokens = 5.3e11 flop per step, on a CPU core at 50 Gflop/s or a GPU at
#: 150 Tflop/s (assumed); 25 MiB buckets (3 collectives), all but the last 1 MiB final before
#: the last 5% of backward.
WORKLOADS = [
    (
        "MLP, 128/rank, CPU core",
        MLP_GRAD_BYTES,
        0.0149,
        MLP_WINDOW_SHARE,
        MLP_LAST_BYTES,
        2,
        (SHARED_MEMORY, TCP_10G, IB_100G),
    ),
    (
        "MLP, 1024/rank, CPU core",
        MLP_GRAD_BYTES,
        0.105,
        MLP_WINDOW_SHARE,
        MLP_LAST_BYTES,
        2,
        (SHARED_MEMORY, TCP_10G, IB_100G),
    ),
    ("GPT 6x384, 8k tokens/rank, CPU core", 42.9e6, 10.6, 2 / 3 * 0.95, 1.05e6, 3, (TCP_10G,)),
    ("GPT 6x384, 8k tokens/rank, GPU", 42.9e6, 3.5e-3, 2 / 3 * 0.95, 1.05e6, 3, (IB_100G, IB_400G)),
]
PREDICTED_RANKS = (2, 8, 16, 32, 64, 128, 256)
#: the sync machinery's own time per step (hooks, registration, bookkeeping): measured with a
#: 1-rank context (``--overhead``), plus a registration message to and from every peer (the
#: mpi engine now exchanges only when the graph changes and sends each peer one heartbeat a
#: step: an upper bound, kept so the predictions stay comparable)
OVERHEAD_SECONDS, PER_PEER_SECONDS = 0.5e-3, 5e-6


def predictions() -> None:
    """The cost model's step time and efficiency at 2-256 ranks (one rank per core/GPU)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from retrograd.distributed.cost import predict_step

    header = ["workload", "network", "sync", *(str(n) for n in PREDICTED_RANKS)]
    rows: list[list[str]] = []
    print("| " + " | ".join(header) + " |")
    print("|---|---|---|" + "---|" * len(PREDICTED_RANKS))
    for name, grad_bytes, compute, window_share, last, collectives, networks in WORKLOADS:
        window = compute * window_share
        for network, alpha, beta in networks:
            for label, overlap in (("overlap", True), ("one after", False)):
                cells = []
                for ranks in PREDICTED_RANKS:
                    prediction = predict_step(
                        ranks,
                        compute,
                        grad_bytes,
                        alpha=alpha,
                        beta=beta,
                        window_seconds=window if overlap else 0.0,
                        last_bytes=last,
                        collectives=collectives if overlap else 1,
                        overhead_seconds=OVERHEAD_SECONDS + PER_PEER_SECONDS * (ranks - 1),
                    )
                    cells.append(f"{100 * prediction.efficiency:.0f}%")
                emit(rows, [name, network, label, *cells])
    print()
    title = "Efficiency (compute / step) by number of ranks, one rank per core or GPU"
    networks = [SHARED_MEMORY, TCP_10G, IB_100G, IB_400G]
    inputs = [[name, f"{alpha * 1e6:g}", f"{beta * 1e9:g}"] for name, alpha, beta in networks]
    tables = {
        title: {"header": header, "rows": rows},
        "The model's networks: latency α per message, β per byte": {
            "header": ["network", "α µs", "β ns/byte"],
            "rows": inputs,
        },
    }
    write_results("ddp-predict", tables, command=command_line())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scaling-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--case", choices=SCALING_CASES, help=argparse.SUPPRESS)
    parser.add_argument("--ab-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--ab",
        action="store_true",
        help="naive and ddp side by side in each rank, alternating blocks of --steps steps, "
        "--trials blocks each (for --ranks and --batches)",
    )
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument(
        "--overlap",
        choices=("auto", "on", "off"),
        default="auto",
        help="DistributedConfig.overlap: None (the engine decides), True, False",
    )
    parser.add_argument(
        "--profile",
        help="with --scaling-worker: cProfile (CPU time) of rank 0's timed steps, into this file",
    )
    parser.add_argument(
        "--scaling", action="store_true", help="issue 16's four cases (one/ideal/naive/ddp)"
    )
    parser.add_argument("--ranks", default="2,8", help="with --scaling: rank counts")
    parser.add_argument(
        "--predict", action="store_true", help="the cost model's efficiency at 2-256 ranks"
    )
    parser.add_argument("--batches", default="128,1024", help="with --scaling: batches per rank")
    parser.add_argument("--no-context", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--bucket-bytes", type=int, default=25 * MIB, help="with --overhead: the bucket size"
    )
    parser.add_argument(
        "--last-bucket-bytes",
        type=int,
        default=MIB,
        help="DistributedConfig.last_bucket_bytes (0: off)",
    )
    parser.add_argument(
        "--overhead", action="store_true", help="time only what a 1-rank context adds to a step"
    )
    parser.add_argument("--model", choices=sorted(MODELS), default="wide")
    parser.add_argument("--models", default="wide,deep", help="models the driver runs")
    parser.add_argument("--batch", type=int, default=128, help="samples per rank and step")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--trials", type=int, default=5, help="rounds over every case")
    parser.add_argument(
        "--phases", action="store_true", help="also print each rank's forward and backward per step"
    )
    options = parser.parse_args()
    if options.worker:
        worker(options)
        return
    if options.scaling_worker:
        scaling_worker(options)
        return
    if options.ab_worker:
        ab_worker(options)
        return
    if options.ab:
        side_by_side(options)
        return
    if options.scaling:
        scaling(options)
        return
    if options.predict:
        predictions()
        return
    if options.overhead:
        rows = []
        for model in options.models.split(","):
            options.model = model
            rows.append(context_overhead(options))
        header = ["model", "bucket_bytes", "with a context ms/step", "without ms/step"]
        header += ["overhead ms/step", "overhead, CPU ms/step"]
        title = "What a context of one rank adds to a training step (in one process)"
        table = {"header": header, "rows": rows}
        write_results("ddp-overhead", {title: table}, command=command_line())
        return
    print(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
        f"batch {options.batch} per rank, {options.steps} timed steps after "
        f"{options.warmup}, median of {options.trials} rounds (cases interleaved)\n"
    )
    tables = {}
    for model in options.models.split(","):
        options.model = model
        trials: dict[str, list[dict]] = {label: [] for label, _, _ in CASES}
        for _ in range(options.trials):  # round-robin, so drift in the machine hits every case
            for label, ranks, bucket_bytes in CASES:
                trials[label].append(run_case(options, ranks, bucket_bytes))
        median = {
            label: {key: statistics.median(t[key] for t in runs) for key in runs[0]}
            for label, runs in trials.items()
        }
        base = median[CASES[0][0]]["samples_per_s"]
        base_runs = trials[CASES[0][0]]
        title = f"model {model}: MLP {MODELS[model]}, {2 * (len(MODELS[model]) - 1)} parameters"
        header = ["case", "samples/s", "vs baseline", "vs the same round's baseline, min-max"]
        header += ["all-reduce in flight ms/step", "waited at end ms/step", "hidden"]
        header += ["exposed after the last backward ms/step", "hidden behind the last backward"]
        header += ["all-reduces/step"]
        rows: list[list[str]] = []
        print(title)
        print("| " + " | ".join(header) + " |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for label, _, bucket_bytes in CASES:
            case = median[label]
            # round by round: how far the machine's drift between rounds moves the ratio
            ratios = [
                run["samples_per_s"] / baseline["samples_per_s"]
                for run, baseline in zip(trials[label], base_runs)
            ]
            row = [label, f"{case['samples_per_s']:.0f}", f"{case['samples_per_s'] / base:.2f}x"]
            row += [f"{min(ratios):.2f}-{max(ratios):.2f}x"]
            if bucket_bytes is None:
                row += [""] * 6
            else:
                row += [
                    f"{case['comm_ms']:.1f}",
                    f"{case['wait_ms']:.1f}",
                    f"{100 * case['hidden']:.0f}%",
                    f"{case['exposed_ms']:.1f}",
                    f"{100 * case['hidden_last']:.0f}%",
                    f"{case['collectives']:.0f}",
                ]
            emit(rows, row)
        print()
        tables[title] = {"header": header, "rows": rows}
        if options.phases:
            print("| case | rank | forward ms/step | backward ms/step, less the wait |")
            print("|---|---|---|---|")
            for label, ranks, _ in CASES:
                case = median[label]
                for rank in range(ranks):
                    print(
                        f"| {label} | {rank} | {case[f'forward_ms_rank{rank}']:.1f} "
                        f"| {case[f'backward_ms_rank{rank}']:.1f} |"
                    )
            print()
    write_results("ddp", tables, command=command_line())


if __name__ == "__main__":
    main()
