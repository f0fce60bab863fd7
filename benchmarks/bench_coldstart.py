"""First-use latency of the NumPy backend's Numba kernels: each workload's first training steps
in a fresh process, with Numba's on-disk cache cold (``NUMBA_CACHE_DIR`` a new empty folder)
and then warm (the same folder, filled by the cold run), and which kernels the time went to.

Each run is a child process (``--child WORKLOAD``) that wraps Numba's ``Dispatcher.compile``
to time every top-level compilation (a cache miss: type inference, LLVM; or a cache hit:
loading the machine code) in wall and CPU seconds, attributed to the kernel's module, then
times its first steps (wall and CPU). Workloads:

- *cnn*: bench_convnets.py's small CNN (batch 64 of 1x28x28, two 3x3 convolutions, SGD);
- *resnet18*: torchvision's ResNet-18 (``cnn_models.make_resnet18``), batch 16 of 3x64x64,
  SGD with momentum (3x3 convolutions take the Winograd kernels);
- *gpt*: a small GPT (``retrograd.app.gpt``'s model: 2 layers, 4 heads, 64 wide, block 32,
  batch 8) with AdamW: attention, layer norm, softmax, GELU.

Run: ``PYTHONPATH=src python benchmarks/bench_coldstart.py [--only cnn,resnet18,gpt]
[--steps 3] [--repeat 1] [--mode background|wait]`` (``wait``: every kernel compiled in the
process on first use, as before the background compiler; ``background``, the default: the
Winograd kernels' NumPy twins run while a background process compiles them, and the child
waits for it after its steps so that the warm run finds the cache full). Prints a table per
workload (cold and warm: the seconds of each step, and of the compilations or cache loads per
module); ``--json FILE`` writes the raw records.

``--ab SRC_A,SRC_B [--rounds 5] [--steps 10]``: steady-state step times of two source trees
(each as ``PYTHONPATH``; e.g. ``git archive main src | tar -x -C /tmp/main``), one process per
tree, workload and round, interleaved, after a first run that warms each tree's cache.
``--wrapper [--steps 20]``: in one process, warm steps with the Winograd kernels called through
their ``Twinned`` wrappers against steps with the bare dispatchers, alternating step by step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import common  # noqa: F401  (pins BLAS threads before NumPy loads)

HERE = Path(__file__).resolve().parent
WORKLOADS = ("cnn", "resnet18", "gpt")


def _record_compiles(records: list) -> None:
    """Wraps ``Dispatcher.compile``: each top-level call appends ``(module, name, hit, wall,
    cpu)`` to ``records`` (nested compilations, callees and inlined helpers, count in their
    caller's)."""
    from numba.core import dispatcher

    original = dispatcher.Dispatcher.compile
    depth = [0]

    def compile(self, sig):  # noqa: A001 - Numba's name
        if depth[0]:
            return original(self, sig)
        hits = sum(self._cache_hits.values())
        depth[0] += 1
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return original(self, sig)
        finally:
            depth[0] -= 1
            py = self.py_func
            records.append(
                (
                    py.__module__,
                    py.__qualname__,
                    sum(self._cache_hits.values()) > hits,
                    time.perf_counter() - wall,
                    time.process_time() - cpu,
                )
            )

    dispatcher.Dispatcher.compile = compile


def _cnn_step(name: str):
    import numpy as np

    import retrograd as rg
    from retrograd import nn as rnn
    from retrograd import optim as roptim
    from retrograd.nn import functional as RF  # noqa: N812

    sys.path.insert(0, str(HERE))
    from bench_convnets import MODELS

    builder, x_shape, y_shape, classes, sgd, _ = MODELS[name]
    rng = np.random.default_rng(0)
    backend = rg.Autodiff(rg.NumpyBackend())
    with rg.use_backend(backend):
        rg.seed(0)
        model = builder(rg, rnn, RF)
        optimizer = roptim.SGD(model.parameters(), **sgd)
        inputs = rg.tensor(rng.standard_normal(x_shape).astype(np.float32))
        targets = rg.tensor(rng.integers(0, classes, y_shape).astype(np.int64))

    def step():
        with rg.use_backend(backend):
            loss = RF.cross_entropy(model(inputs), targets)
            optimizer.step(loss.backward())
            return loss.item()

    return step


def _gpt_step():
    import numpy as np

    import retrograd as rg
    from retrograd import optim as roptim
    from retrograd.app.models import GPT, GPTConfig

    backend = rg.Autodiff(rg.NumpyBackend())
    rng = np.random.default_rng(0)
    with rg.use_backend(backend):
        rg.seed(0)
        config = GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=4, n_embd=64)
        model = GPT(config)
        optimizer = roptim.AdamW(model.parameters(), lr=1e-3)
        idx = rg.tensor(rng.integers(0, 65, (8, 32)).astype(np.int64))
        targets = rg.tensor(rng.integers(0, 65, (8, 32)).astype(np.int64))

    def step():
        with rg.use_backend(backend):
            _, loss = model(idx, targets)
            optimizer.step(loss.backward())
            return loss.item()

    return step


def _twin_calls() -> int:
    """Calls the Winograd twins answered so far in this process."""
    module = sys.modules.get("retrograd.backend.winograd_numpy")
    if module is None:
        return 0
    return sum(getattr(module, name).twin_calls for name in module.__all__)


def child(workload: str, steps: int) -> dict:
    """One fresh process's first ``steps`` steps of ``workload``: their wall and CPU seconds
    and twin calls, the compile records, the import time, and when the background compiler
    (if any) was done (seconds after the first step began) and its CPU seconds."""
    import resource

    records: list = []
    wall, cpu = time.perf_counter(), time.process_time()
    import numba  # noqa: F401

    _record_compiles(records)
    step = _gpt_step() if workload == "gpt" else _cnn_step(workload)
    setup = (time.perf_counter() - wall, time.process_time() - cpu)
    times = []
    began = time.perf_counter()
    for _ in range(steps):
        wall, cpu, twins = time.perf_counter(), time.process_time(), _twin_calls()
        step()
        times.append((time.perf_counter() - wall, time.process_time() - cpu, _twin_calls() - twins))
    try:
        from retrograd.backend.kernel_compile import compiler
    except ImportError:  # a tree from before the background compiler (--ab)
        background, sent = None, 0
    else:
        background = compiler()
        sent = len(background.sent)
    ready = None
    if sent:  # fill the cache for the warm run (not timed as a step)
        background.wait()
        ready = time.perf_counter() - began
        background.close()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "setup": setup,
        "steps": times,
        "compiles": records,
        "background_ready": ready,
        "background_cpu": children.ru_utime + children.ru_stime,
        "background_signatures": sent,
    }


def steady(workload: str, steps: int) -> dict:
    """Steps ``3 ..`` of ``workload`` on a warm cache (two untimed first): each one's wall
    and CPU seconds."""
    step = _gpt_step() if workload == "gpt" else _cnn_step(workload)
    step()
    step()
    times = []
    for _ in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        step()
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return {"steps": times}


def wrapper_ab(workload: str, steps: int) -> None:
    """In one process on a warm cache: steps with the Winograd kernels called through their
    ``Twinned`` wrappers against steps with the bare dispatchers in their place, alternating
    step by step (the only difference a warm step has from before the background compiler)."""
    import statistics

    from retrograd.backend import winograd_numpy

    wrapped = {name: getattr(winograd_numpy, name) for name in winograd_numpy.__all__}
    bare = {name: kernel.dispatcher for name, kernel in wrapped.items()}
    step = _gpt_step() if workload == "gpt" else _cnn_step(workload)
    step()
    step()
    samples: dict = defaultdict(list)
    for _ in range(steps):
        for label, kernels in (("Twinned", wrapped), ("bare dispatcher", bare)):
            for name, kernel in kernels.items():
                setattr(winograd_numpy, name, kernel)
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            samples[label].append((time.perf_counter() - wall, time.process_time() - cpu))
    for name, kernel in wrapped.items():
        setattr(winograd_numpy, name, kernel)
    for label, values in samples.items():
        wall = [w * 1e3 for w, _ in values]
        cpu = [c * 1e3 for _, c in values]
        print(
            f"{workload:9s} {label:15s}: {len(wall)} steps, median {statistics.median(wall):.1f} "
            f"ms wall, {statistics.median(cpu):.1f} ms cpu [{min(cpu):.1f}-{max(cpu):.1f}]"
        )


def ab(sources: list[str], workloads: list[str], rounds: int, steps: int) -> None:
    """Steady-state steps of each source tree (``PYTHONPATH``), one process per tree and
    workload per round, the trees interleaved; the median over all steps per tree."""
    import statistics

    samples: dict = defaultdict(list)
    for source in sources:  # warm each tree's cache first (not timed)
        for workload in workloads:
            env = {"PYTHONPATH": source, "RETROGRAD_KERNEL_COMPILE": "wait"}
            run(workload, 1, os.environ.get("NUMBA_CACHE_DIR", ""), env)
    for _ in range(rounds):
        for workload in workloads:
            for source in sources:
                env = {"PYTHONPATH": source}
                result = run(
                    workload, steps, os.environ.get("NUMBA_CACHE_DIR", ""), env, "--steady"
                )
                samples[workload, source].extend(result["steps"])
    for workload in workloads:
        for source in sources:
            wall = [w * 1e3 for w, _ in samples[workload, source]]
            cpu = [c * 1e3 for _, c in samples[workload, source]]
            print(
                f"{workload:9s} {source}: {len(wall)} steps, median {statistics.median(wall):.1f} "
                f"ms wall [{min(wall):.1f}-{max(wall):.1f}], {statistics.median(cpu):.1f} ms cpu "
                f"[{min(cpu):.1f}-{max(cpu):.1f}]"
            )


def run(
    workload: str, steps: int, cache: str, extra_env: dict | None = None, kind: str = "--child"
) -> dict:
    env = dict(os.environ, **(extra_env or {}))
    if cache:
        env["NUMBA_CACHE_DIR"] = cache
    out = subprocess.run(
        [sys.executable, __file__, kind, workload, "--steps", str(steps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def by_module(compiles: list) -> dict:
    totals: dict = defaultdict(lambda: [0, 0.0, 0.0])
    for module, _, _, wall, cpu in compiles:
        entry = totals[module.rsplit(".", 1)[-1]]
        entry[0] += 1
        entry[1] += wall
        entry[2] += cpu
    return dict(totals)


def report(workload: str, label: str, result: dict) -> None:
    steps = " ".join(
        f"{w:.2f}/{c:.2f}" + (f" ({n} twin)" if n else "") for w, c, n in result["steps"]
    )
    total = sum(r[3] for r in result["compiles"]), sum(r[4] for r in result["compiles"])
    print(
        f"{workload} {label}: setup {result['setup'][0]:.2f}/{result['setup'][1]:.2f} s, "
        f"steps (wall/cpu s) {steps}; numba {len(result['compiles'])} calls "
        f"{total[0]:.2f}/{total[1]:.2f} s"
    )
    if result["background_signatures"]:
        print(
            f"    background: {result['background_signatures']} signatures, ready "
            f"{result['background_ready']:.2f} s after the first step began, "
            f"{result['background_cpu']:.2f} s cpu"
        )
    for module, (count, wall, cpu) in sorted(by_module(result["compiles"]).items()):
        print(f"    {module:24s} {count:3d} signatures {wall:7.2f} s wall {cpu:7.2f} s cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=WORKLOADS)
    parser.add_argument("--steady", choices=WORKLOADS)
    parser.add_argument(
        "--ab",
        help="comma-separated source trees (PYTHONPATH each): steady-state steps, interleaved",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--wrapper", action="store_true", help="Twinned against bare kernels, in one process"
    )
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json")
    parser.add_argument(
        "--mode",
        choices=("background", "wait"),
        default="background",
        help="RETROGRAD_KERNEL_COMPILE for the runs (wait: compile in the process, as before)",
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    if args.steady:
        print(json.dumps(steady(args.steady, args.steps)))
        return
    if args.wrapper:
        for workload in args.only.split(","):
            wrapper_ab(workload, args.steps)
        return
    if args.ab:
        ab(args.ab.split(","), args.only.split(","), args.rounds, args.steps)
        return
    results = []
    for _ in range(args.repeat):
        for workload in args.only.split(","):
            with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
                env = {"RETROGRAD_KERNEL_COMPILE": args.mode}
                cold = run(workload, args.steps, cache, env)
                warm = run(workload, args.steps, cache, env)
            report(workload, "cold", cold)
            report(workload, "warm", warm)
            results.append({"workload": workload, "mode": args.mode, "cold": cold, "warm": warm})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
