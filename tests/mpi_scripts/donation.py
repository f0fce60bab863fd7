"""Run as N ranks (``donation.py SPARE OUT``): gradients of 1 MiB and more synced each way the
engine may reduce them, as if every machine had SPARE cores left over (the census is patched):
-1 packs every gradient into one collective through shared memory (``shm``), 0 reduces large
ones in place in one round after backward, 1 in place while backward runs (overlap). Each rank
compares its synced gradients with the MEAN of every rank's unsynced ones (each computed by its
own rank, gathered outside retrograd: ``mpi_oracle.every_ranks``), over several steps (the
first exchanges registrations, later ones reuse the plan, one is redone because rank 1
registers its parameters in another order), and writes ``OUT/rank{r}.json``: checks run,
failures, gradients reduced in place, registration exchanges,
whether shared memory carried them."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for distributed_cases
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for mpi_oracle

import numpy as np
from mpi_oracle import every_ranks

import retrograd as rg
from distributed_cases import Checks, write_report
from retrograd import distributed as dist
from retrograd.distributed.transport.mpi import MpiTransport

#: the first step exchanges registrations, the second reuses the plan, the third is swapped
#: and the fourth swaps back (each exchanges again): every case once
STEPS = 4
#: the step at which rank 1 sums its loss the other way round, so its gradients become final
#: in another order: its registration changed, and every rank's step is redone
SWAPPED_STEP = 2


def patch_census(spare: int) -> Callable[[], None]:
    """Patch the census; returns what undoes it (``tests/scripts_in_turn.py`` runs other
    scripts after this one in the same process)."""
    measured = MpiTransport._census

    def census(self):
        local_ranks, cores, others, _, token = measured(self)
        return local_ranks, cores, others, spare, token

    MpiTransport._census = census
    return lambda: setattr(MpiTransport, "_census", measured)


def parameters(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": rng.standard_normal((600, 512)).astype(np.float32) * 0.05,  # 1.2 MB
        "w2": rng.standard_normal((512, 8)).astype(np.float32) * 0.05,
        "a": rng.standard_normal((256, 1024)).astype(np.float32),  # 1 MiB
        "b": rng.standard_normal((256, 1024)).astype(np.float32),
    }


def step_gradients(device, values, x, c, distributed: bool, swapped: bool = False) -> dict:
    """One backward: ``w1`` used twice (its gradient accumulated), ``a`` and ``b`` through one
    add (their gradients are one array, which must not be reduced in place)."""
    tensors = {}
    for name, value in values.items():
        t = rg.tensor(value, device=device)
        tensors[name] = t.set_distributed(name) if distributed else t.require_grad()
    xt = rg.tensor(x, device=device)

    def dense_part():
        h = (xt @ tensors["w1"]).tanh()
        h = h + (xt * 0.5) @ tensors["w1"]
        return ((h @ tensors["w2"]).square()).mean()

    def paired_part():
        z = (tensors["a"] + tensors["b"]) * rg.tensor(c, device=device)
        return (z * z).sum() * 1e-3

    # backward runs what was recorded last first (torch's order, not the operands' order):
    # computed the other way round, the parameters' gradients are ready in another order
    if swapped:
        paired = paired_part()
        dense = dense_part()
    else:
        dense = dense_part()
        paired = paired_part()
    grads = (dense + paired).backward()
    return {name: t.grad(grads).numpy().copy() for name, t in tensors.items()}


def main() -> None:
    spare, out = int(sys.argv[1]), Path(sys.argv[2])
    restore_census = patch_census(spare)
    checks = Checks()
    report: dict = {}
    config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=60.0)
    try:
        with dist.DistributedContext.from_launcher(config) as ctx:
            n, rank = ctx.world_size, ctx.rank
            report["rank"] = rank
            report["overlapping"] = ctx.server.overlapping
            values = parameters(seed=7)
            for step in range(STEPS):
                batch = np.random.default_rng(100 * step + rank)
                x = batch.standard_normal((32, 600)).astype(np.float32)
                c = batch.standard_normal((256, 1024)).astype(np.float32)
                swapped = step == SWAPPED_STEP and rank == 1
                synced = step_gradients(ctx.device, values, x, c, True, swapped)
                # this rank's own unsynced gradients; every rank's, gathered outside retrograd
                own = step_gradients(ctx.device, values, x, c, False)
                for name in values:
                    unsynced = every_ranks(own[name])
                    assert len(unsynced) == n
                    expected = np.mean([np.float64(u) for u in unsynced], axis=0)
                    checks.true(f"step {step}: {name} finite", np.isfinite(expected).all())
                    checks.close(f"step {step}: {name}", synced[name], expected)
                values = {k: v - 1e-3 * synced[k] for k, v in values.items()}
            report["reduced_in_place"] = ctx.transport.reduced_in_place
            report["shared_memory"] = ctx.transport.shared is not None
            report["exchanges"] = ctx.stats.exchanges
    except Exception:
        checks.failures.append(traceback.format_exc())
    finally:
        restore_census()
    write_report(out, report, checks)


if __name__ == "__main__":
    main()
