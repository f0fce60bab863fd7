"""Checks of ``ZeroRedundancyOptimizer`` shared by the thread tests and the MPI scripts: each
function is one rank's part (``devices`` every participant in rank order, ``rank`` this one's
index), in a running context that MEAN-syncs gradients.

The oracle is the wrapped optimizer itself, in one process, on the full batch (every rank
rebuilds it from the same seeds): data parallel with ZeRO must train the same parameters, to
float64 rounding, with AdamW (two groups, a learning-rate schedule) and SGD with momentum,
gradient clipping active; each rank's state at most ``1/n`` of the whole plus one parameter's;
a consolidated state dict equal to the wrapped optimizer's own; resuming from it (on the same
number of ranks with ZeRO, or on one process with the plain optimizer) equal to training
without the interruption.
"""

from __future__ import annotations

import numpy as np

import retrograd as rg
from retrograd import distributed as dist
from retrograd import nn

ROWS = 4  # per rank
MAX_NORM = 0.05  # below the gradients' norm: clipping is active at every step


class TiedMLP(nn.Module):
    """An MLP whose middle layers share one weight (a tied parameter has one owner)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 12)
        self.mid = nn.Linear(12, 12)
        self.again = nn.Linear(12, 12)
        self.again.weight = self.mid.weight
        self.out = nn.Linear(12, 3)

    def forward(self, x):
        h = self.inp(x).tanh()
        h = self.again(self.mid(h).tanh()).tanh()
        return self.out(h)


def make_model(device):
    """The same weights on every rank and thread (from NumPy's seeded generator: threads
    share retrograd's)."""
    model = TiedMLP().double().to(device)
    rng = np.random.default_rng(5)
    model.load_state_dict(
        {k: 0.4 * rng.standard_normal(np.shape(v)) for k, v in model.state_dict().items()}
    )
    return model


def batch(n):
    rng = np.random.default_rng(9)
    xs = rng.standard_normal((n * ROWS, 6))
    ys = np.tanh(xs[:, :3]) + 0.1 * rng.standard_normal((n * ROWS, 3))
    return xs, ys


def groups(model):
    decay = [p for p in model.parameters() if p.ndim == 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


OPTIMIZERS = {
    "AdamW": (rg.optim.AdamW, {"lr": 0.01, "betas": (0.9, 0.95)}),
    "SGD": (rg.optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
}


def train(model, opt, xs, ys, device, steps, first=0):
    """``steps`` steps of MSE with clipping and a decaying learning rate (set as a schedule
    sets it, on every group); the clipped norms."""
    norms = []
    x, y = rg.tensor(xs, device=device), rg.tensor(ys, device=device)
    for step in range(first, first + steps):
        for g in opt.param_groups:
            g["lr"] = opt.defaults["lr"] * 0.8**step
        grads = ((model(x) - y) ** 2).mean().backward()
        norms.append(rg.nn.utils.clip_grad_norm_(grads, model.parameters(), MAX_NORM))
        opt.step(grads)
    return norms


def values(model):
    return {name: p.numpy().copy() for name, p in model.named_parameters()}


def close(checks, name, got, expected):
    checks.close(name, got, expected, rtol=1e-7, atol=1e-10)


def zero_training_checks(devices, rank, checks, name) -> dict:
    """Train 3 steps with ZeRO, consolidate, resume for 3 more on a fresh ZeRO; compare with
    the wrapped optimizer on the full batch at every stage. Returns the consolidated state
    (for a caller that resumes it elsewhere) and the state bytes."""
    n, device = len(devices), devices[rank]
    cls, defaults = OPTIMIZERS[name]
    xs, ys = batch(n)
    shard = slice(rank * ROWS, (rank + 1) * ROWS)

    reference = make_model(device)
    plain = cls(groups(reference), **defaults)
    ref_norms = train(reference, plain, xs, ys, device, 3)
    ref_state = plain.state_dict()

    model = make_model(device).set_distributed()
    opt = dist.ZeroRedundancyOptimizer(groups(model), cls, **defaults)
    norms = train(model, opt, xs[shard], ys[shard], device, 3)
    close(checks, f"{name}: the clipped norm is the global one", norms, ref_norms)
    for key, value in values(model).items():
        close(checks, f"{name}: {key} after 3 steps", value, values(reference)[key])

    total = sum(
        np.asarray(v).nbytes
        for entry in ref_state["state"].values()
        for v in entry.values()
        if isinstance(v, np.ndarray | rg.Tensor)  # (the state's tensors, as torch's)
    )
    largest = max(p.numel() * 8 for p in model.parameters()) * (2 if name == "AdamW" else 1)
    mine = dist.optimizer_state_bytes(opt)
    checks.true(f"{name}: state {mine} B <= {total} / {n} + {largest}", mine <= total / n + largest)
    share = opt.state_dict()
    owned = {i for i, owner in enumerate(opt.owners) if owner == rank}
    checks.true(f"{name}: the share holds the owned entries", set(share["state"]) == owned)

    full = None
    for to in range(n):  # every rank gets the full state (consolidated on each in turn)
        opt.consolidate_state_dict(to=to)
        if to == rank:
            full = opt.state_dict()
    checks.true(
        f"{name}: consolidated indices", sorted(full["state"]) == sorted(ref_state["state"])
    )
    checks.true(f"{name}: groups", _hyper(full) == _hyper(ref_state))
    for index, entry in ref_state["state"].items():
        for key, value in entry.items():
            close(checks, f"{name}: state {index} {key}", full["state"][index][key], value)

    # resume: a fresh ZeRO over the same parameters loads the full state and continues
    train(reference, plain, xs, ys, device, 3, first=3)
    resumed = dist.ZeroRedundancyOptimizer(groups(model), cls, **defaults)
    resumed.load_state_dict(full)
    train(model, resumed, xs[shard], ys[shard], device, 3, first=3)
    for key, value in values(model).items():
        close(checks, f"{name}: {key} resumed", value, values(reference)[key])
    return {"full": full, "state_bytes": mine, "total_bytes": total}


def _hyper(state_dict):
    return [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()}
        for g in state_dict["param_groups"]
    ]


def resume_in_one_process_check(full, name, checks, device, n) -> None:
    """The consolidated state, loaded into the plain wrapped optimizer of one process,
    continues as if never sharded (a run resumed on another number of ranks)."""
    cls, defaults = OPTIMIZERS[name]
    xs, ys = batch(n)
    reference = make_model(device)
    plain = cls(groups(reference), **defaults)
    train(reference, plain, xs, ys, device, 6)
    model = make_model(device)
    opt = cls(groups(model), **defaults)
    train(model, opt, xs, ys, device, 3)
    opt.load_state_dict(full)
    train(model, opt, xs, ys, device, 3, first=3)
    for key, value in values(model).items():
        close(checks, f"{name}: {key} resumed in one process", value, values(reference)[key])


def check_reports(reports) -> None:
    """What every multi-process ZeRO run asserts of its ranks' reports: no failure, the
    checks ran, and the shares of the state add up to the whole."""
    for rank, report in reports.items():
        assert report["failures"] == [], f"rank {rank}: {report['failures']}"
        assert report["checks"] > 60
    for name in OPTIMIZERS:
        shares = sum(report["state_bytes"][name] for report in reports.values())
        assert shares == reports[0]["total_bytes"][name]
