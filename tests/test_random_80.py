"""Random programs against PyTorch, round 80: data parallel training against one process.

Each seeded program builds a small model the same way on torch and on retrograd (an
``Embedding`` or ``Linear`` input layer, a ``Conv1d`` branch, ``LayerNorm`` or ``BatchNorm1d``,
a float buffer used in forward, a frozen ``Linear``, a side branch some steps (or some ranks)
leave unused, an output layer whose weight may be tied to the embedding's), wraps it in
``DistributedDataParallel`` on 2 to 4 thread ranks (``init_process_group`` over a
``DistributedContext``; every rank starts from a perturbed copy, so the construction broadcast
from rank 0 is checked), and trains a few steps: per-rank shards of random sizes (unequal where
BatchNorm allows), gradient accumulation with ``no_sync`` or by adding synced ``Gradients``,
``find_unused_parameters``, ``bucket_cap_mb``, ``broadcast_buffers`` or
``forward_sync_buffers``, ``SyncBatchNorm``, ``clip_grad_norm_`` (norm types 1, 2, inf), SGD
with momentum / Adam / AdamW over the parameters or decay / no-decay groups, or
``ZeroRedundancyOptimizer`` over one of them (consolidated on a random rank), and a mid-run save
and load of the model's and the optimizer's state dicts into fresh replicas (copied, or rank
0's ``rg.save`` bytes loaded on every rank with ``map_location``).

The reference is ONE torch process in float64: each step it runs every rank's shards through
one model (each rank's buffers swapped in, with DDP's broadcast of rank 0's buffers before a
forward that follows a synced one; the concatenated shards under ``SyncBatchNorm``),
backpropagates the sum of the ranks' losses divided by the world size (DDP's mean of
gradients), clips and steps. Not drawn: biases a normalization cancels and BatchNorm shards of
equal rows, whose exact gradient is zero or ill-conditioned, so that rounding noise decides
Adam's step. Compared on every rank: the losses, the gradients ``backward`` returns (and which
parameters have none), the clipping norm, the parameters and buffers after every step, and the
optimizer state (ZeRO's after ``consolidate_state_dict``); and after some steps, each rank's
output on a validation batch under ``no_grad`` (in eval mode, or in train mode, where
BatchNorm's statistics move and the next forward broadcasts no buffers, as torch's DDP).

A second family runs torch's c10d collectives (``all_reduce`` with SUM/AVG/MAX/MIN/PRODUCT,
``reduce``, ``broadcast`` from a random root, ``all_gather``, ``all_gather_into_tensor``,
``barrier``) and retrograd's ``reduce_scatter`` on random shapes and dtypes, against torch's
reductions of the ranks' stacked values; and their errors: shapes or dtypes that differ across
ranks, and a rank that raises before its backward, must give every rank an error of the
hierarchy (``DistributedError``, a ``RuntimeError`` as torch's c10d errors are, or
``ShapeError``/``DTypeError``) within the context's timeout, never a hang: every rank thread
is joined with a deadline.
"""

from __future__ import annotations

import copy
import io
import threading
import time

import numpy as np
import pytest

import retrograd as rg
import retrograd.distributed as dist
from retrograd.distributed.optim import ZeroRedundancyOptimizer
from retrograd.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 (as scripts write it)

torch = pytest.importorskip("torch")

JOIN_SECONDS = 30.0


def run_ranks(n: int, script, timeout: float = 20.0) -> list:
    """``script(rank)`` on ``n`` thread ranks inside ``init_process_group``; each rank's
    result or the exception it raised, in rank order. A rank still running after the
    deadline fails the test (a hang). ``timeout``, the collectives' wait for the other ranks,
    is long for the programs that must succeed: at 5 s a rank thread starved on a loaded
    2-core CI machine (two pytest workers and other jobs) timed out its peers' gradient sync
    (7 December)."""
    devices = [rg.Device("cpu", i) for i in range(n)]
    config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=timeout)
    results: list = [None] * n
    with dist.DistributedContext(devices, config) as ctx:

        def run(rank: int) -> None:
            try:
                dist.init_process_group("gloo", rank=rank, world_size=n, store=ctx)
                try:
                    results[rank] = script(rank)
                finally:
                    dist.destroy_process_group()
            except BaseException as error:  # handed back to the test
                results[rank] = error

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + JOIN_SECONDS
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            assert not thread.is_alive(), "a rank thread hung"
    return results


def _raise_any(results):
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _np(value):
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.detach().numpy()
    if isinstance(value, rg.Tensor):
        return value.detach().numpy()
    return np.asarray(value)


def close(ours, theirs, what, rtol=1e-9, atol=1e-11):
    ours, theirs = _np(ours), _np(theirs)
    assert (ours is None) == (theirs is None), f"{what}: ours {ours}, torch's {theirs}"
    if ours is None:
        return
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} vs torch's {theirs.shape}"
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, err_msg=what)


# -- the model, written once for both libraries -----------------------------------------------


def make_model(lib, spec):
    nn = lib.nn
    F = lib.nn.functional  # noqa: N806 (torch's spelling)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            d = spec["d"]
            if spec["embed"]:
                self.inp = nn.Embedding(spec["vocab"], d)
            else:
                self.inp = nn.Linear(spec["features"], d, bias=spec["inp_bias"])
            if spec["conv"]:
                self.conv = nn.Conv1d(1, 2, 3, padding=1, bias=spec["conv_bias"])
            if spec["norm"] == "layer":
                self.norm = nn.LayerNorm(d)
            elif spec["norm"] == "batch":
                self.norm = nn.BatchNorm1d(d, momentum=spec["bn_momentum"])
            self.frozen = nn.Linear(d, d)
            self.frozen.weight.requires_grad_(False)
            self.side = nn.Linear(d, d, bias=False)
            out = spec["vocab"] if spec["embed"] else spec["classes"]
            self.head = nn.Linear(d, out, bias=spec["head_bias"])
            if spec["tie"]:
                self.head.weight = self.inp.weight
            self.register_buffer("scale", lib.ones(d, dtype=lib.float64))

        def forward(self, x, use_side):
            return self.tail(self.trunk(x), use_side)

        def trunk(self, x):
            h = self.inp(x)
            if spec["conv"]:
                h = h + self.conv(h.unsqueeze(1)).mean(1)
            if spec["norm"] != "none":
                h = self.norm(h)
            return h

        def tail(self, h, use_side):
            h = lib.tanh(self.frozen(h) * self.scale)
            if use_side:
                h = h + F.relu(self.side(h))
            return self.head(h)

    return Net().double()


def draw_spec(rng):
    spec = {
        "n": int(rng.integers(2, 5)),
        "d": int(rng.integers(3, 6)),
        "embed": bool(rng.random() < 0.4),
        "vocab": int(rng.integers(4, 8)),
        "features": int(rng.integers(2, 5)),
        "classes": int(rng.integers(2, 5)),
        "conv": bool(rng.random() < 0.4),
        "conv_bias": bool(rng.random() < 0.5),
        "norm": str(rng.choice(["none", "layer", "batch"])),
        "bn_momentum": float(rng.choice([0.1, 0.5])),
        "head_bias": bool(rng.random() < 0.7),
        "loss": str(rng.choice(["ce", "mse"])),
        "optimizer": str(rng.choice(["SGD", "Adam", "AdamW"])),
        "zero": bool(rng.random() < 0.3),
        "broadcast_buffers": bool(rng.random() < 0.7),
        # torch 2.13's new name: False still syncs buffers at construction, as True does
        "forward_sync_buffers": bool(rng.random() < 0.3),
        "bucket_cap_mb": [None, 1, 25][int(rng.integers(3))],
        "clip": float(rng.choice([0.0, 0.3, 5.0])),
        "steps": int(rng.integers(2, 4)),
    }
    spec["tie"] = spec["embed"] and bool(rng.random() < 0.6)
    spec["groups"] = bool(rng.random() < 0.4)  # decay / no-decay parameter groups
    spec["save_via"] = str(rng.choice(["dict", "file"]))  # rank 0's rg.save, shared as bytes
    spec["sgd"] = int(rng.integers(2))  # nesterov, or dampened momentum
    # a bias a normalization cancels has a gradient of exactly zero, which float rounding
    # leaves at 1e-17 here or there: Adam's m / (sqrt(v) + eps) turns that into a full step
    # of either sign, so none is drawn (the conv's adds its mean to every feature; under
    # BatchNorm each of the input layer's is a per-feature constant)
    spec["conv_bias"] = spec["conv_bias"] and spec["norm"] == "none"
    spec["inp_bias"] = spec["norm"] != "batch"
    # the side branch: used by every rank, by none, or by some, per step
    spec["side"] = [
        [bool(u) for u in rng.random(spec["n"]) < p]
        for p in rng.choice([0.0, 0.5, 1.0], size=spec["steps"])
    ]
    spec["find_unused"] = not all(all(s) for s in spec["side"]) or bool(rng.random() < 0.3)
    spec["accumulate"] = [int(rng.integers(1, 3)) for _ in range(spec["steps"])]
    spec["save_at"] = int(rng.integers(-1, spec["steps"] - 1))  # after this step; -1: never
    low = 2 if spec["norm"] == "batch" else 1  # (torch's BatchNorm needs 2 rows in training)
    spec["shards"] = [
        [[int(rng.integers(low, 4)) for _ in range(spec["n"])] for _ in range(k)]
        for k in spec["accumulate"]
    ]
    # the micro-batches under no_sync draw their own use of the side branch (a parameter used
    # there only still has its accumulated gradient averaged, as in torch's DDP)
    spec["side_micro"] = [
        [[bool(u) for u in rng.random(spec["n"]) < 0.5] for _ in range(k - 1)]
        for k in spec["accumulate"]
    ]
    if any(not all(flags) for step in spec["side_micro"] for flags in step):
        spec["find_unused"] = True
    # SyncBatchNorm (converted on retrograd's side): the statistics of every rank's shard
    # together, so the reference normalizes the concatenated batch; its running statistics
    # are then every rank's alike, so buffers are synced (as scripts with it do)
    spec["sync_bn"] = spec["norm"] == "batch" and bool(rng.random() < 0.4)
    # accumulation without no_sync: each micro-batch's backward synced, their Gradients added
    # (torch's .grad accumulating the averaged gradients)
    spec["add_grads"] = bool(rng.random() < 0.25)
    spec["norm_type"] = [2.0, 1.0, float("inf")][int(rng.integers(3))]
    spec["consolidate_to"] = int(rng.integers(spec["n"]))  # ZeRO's full state on this rank
    spec["evaluate"] = [bool(e) for e in rng.random(spec["steps"]) < 0.4]
    # (in train mode BatchNorm updates its statistics: the next forward, which follows one
    # without gradients, does not broadcast rank 0's, as torch's DDP)
    spec["evaluate_in_train_mode"] = bool(rng.random() < 0.5)
    if spec["sync_bn"]:
        spec["broadcast_buffers"] = True
    return spec


def side_of(spec, step, micro):
    """Each rank's use of the side branch in a step's micro-batch."""
    if micro < len(spec["side_micro"][step]):
        return spec["side_micro"][step][micro]
    return spec["side"][step]


def draw_batch(rng, spec, rows):
    if spec["embed"]:
        x = rng.integers(0, spec["vocab"], size=rows)
        if spec["norm"] == "batch" and (x == x[0]).all():
            # BatchNorm over equal rows has zero variance: its gradient is rounding noise
            # times 1 / sqrt(eps), which no tolerance can compare
            x[0] = (x[0] + 1) % spec["vocab"]
    else:
        x = rng.standard_normal((rows, spec["features"]))
    out = spec["vocab"] if spec["embed"] else spec["classes"]
    if spec["loss"] == "ce":
        y = rng.integers(0, out, size=rows)
    else:
        y = rng.standard_normal((rows, out))
    return x, y


def _loss(lib, spec, out, y):
    F = lib.nn.functional  # noqa: N806
    if spec["loss"] == "ce":
        return F.cross_entropy(out, lib.tensor(y))
    return F.mse_loss(out, lib.tensor(y))


def _params(spec, model):
    """``model.parameters()``, or the decay / no-decay groups of training scripts."""
    if not spec.get("groups"):
        return model.parameters()
    named = list(model.named_parameters())
    decay = [p for _, p in named if p.dim() >= 2]
    rest = [p for _, p in named if p.dim() < 2]
    return [{"params": decay}, {"params": rest, "weight_decay": 0.0, "lr": 0.03}]


def _optimizer_args(spec):
    name = spec["optimizer"]
    if name == "SGD" and spec.get("sgd"):
        return {"lr": 0.1, "momentum": 0.5, "dampening": 0.1, "weight_decay": 0.01}
    if name == "SGD":
        return {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}
    if name == "Adam":
        return {"lr": 0.05, "weight_decay": 0.01}
    return {"lr": 0.05, "weight_decay": 0.1, "betas": (0.8, 0.95)}


def initial_state(rng, spec):
    model = make_model(torch, spec)
    state = {}
    for key, value in model.state_dict().items():
        if value.dtype == torch.float64:
            state[key] = rng.standard_normal(tuple(value.shape)) * 0.5
        else:
            state[key] = value.numpy().copy()
    if "norm.running_var" in state:
        state["norm.running_var"] = np.abs(state["norm.running_var"]) + 0.5
    state["scale"] = 1.0 + 0.1 * rng.standard_normal(spec["d"])
    if spec["tie"]:  # one parameter under both names
        state["inp.weight"] = state["head.weight"]
    return state


def evaluation_of(seed, spec):
    """Each rank's validation batch after each step."""
    rng = np.random.default_rng(seed + 2000)
    return [[draw_batch(rng, spec, 2)[0] for _ in range(spec["n"])] for _ in range(spec["steps"])]


def data_of(seed, spec):
    rng = np.random.default_rng(seed + 1000)
    return [
        [[draw_batch(rng, spec, rows) for rows in micro] for micro in step]
        for step in spec["shards"]
    ]


def perturbed(state, by):
    """A replica's own starting values (DDP's construction broadcast replaces them)."""
    return {k: v + 0.25 * by if v.dtype == np.float64 else v + by for k, v in state.items()}


def _buffers(lib_model):
    return {k: _np(v).copy() for k, v in lib_model.named_buffers()}


# -- retrograd: the DDP script every rank runs -------------------------------------------------


def ddp_script(spec, state, data, evaluation):
    optimizer_class = {"SGD": rg.optim.SGD, "Adam": rg.optim.Adam, "AdamW": rg.optim.AdamW}

    def build(rank, perturb):
        module = make_model(rg, spec)
        module.load_state_dict(perturbed(state, perturb))
        if spec["sync_bn"]:
            module = rg.nn.SyncBatchNorm.convert_sync_batchnorm(module)
        sync = "forward_sync_buffers" if spec["forward_sync_buffers"] else "broadcast_buffers"
        model = DDP(
            module,
            **{sync: spec["broadcast_buffers"]},
            find_unused_parameters=spec["find_unused"],
            bucket_cap_mb=spec["bucket_cap_mb"],
        )
        cls = optimizer_class[spec["optimizer"]]
        if spec["zero"]:
            optimizer = ZeroRedundancyOptimizer(
                _params(spec, model), optimizer_class=cls, **_optimizer_args(spec)
            )
        else:
            optimizer = cls(_params(spec, model), **_optimizer_args(spec))
        return model, optimizer

    def full_state(optimizer, rank):
        if not spec["zero"]:
            return optimizer.state_dict()
        to = spec["consolidate_to"]
        optimizer.consolidate_state_dict(to=to)
        shared = [optimizer.state_dict() if rank == to else None]
        dist.broadcast_object_list(shared, src=to)
        return shared[0]

    def step_backward(model, x, y, use_side, scale, losses):
        loss = _loss(rg, spec, model(rg.tensor(x), use_side), y)
        losses.append(loss.item())
        return (loss * scale).backward()

    def script(rank):
        model, optimizer = build(rank, rank)
        record = {"start": {k: _np(v).copy() for k, v in model.module.state_dict().items()}}
        steps = []
        for s in range(spec["steps"]):
            micro = data[s]
            losses = []
            grads = None
            for k, shards in enumerate(micro):
                x, y = shards[rank]
                use_side = side_of(spec, s, k)[rank]
                last = k == len(micro) - 1
                scale = 1.0 / len(micro)

                if spec["add_grads"]:  # every micro-batch synced, the Gradients added
                    mine = step_backward(model, x, y, use_side, scale, losses)
                    grads = mine if grads is None else grads + mine
                elif last:
                    grads = step_backward(model, x, y, use_side, scale, losses)
                else:
                    with model.no_sync():
                        step_backward(model, x, y, use_side, scale, losses)
            named = dict(model.module.named_parameters())
            found = {n: _np(p.grad(grads)) for n, p in named.items()}
            found = {n: None if g is None else g.copy() for n, g in found.items()}
            norm = None
            if spec["clip"]:
                norm = rg.nn.utils.clip_grad_norm_(
                    grads, model.parameters(), spec["clip"], norm_type=spec["norm_type"]
                )
                norm = float(norm)
            clipped = {n: _np(p.grad(grads)) for n, p in named.items()}
            optimizer.step(grads)
            after = {k: _np(v).copy() for k, v in model.module.state_dict().items()}
            steps.append(
                {"losses": losses, "grads": found, "norm": norm, "clipped": clipped,
                 "state": after}
            )  # fmt: skip
            if spec["evaluate"][s]:  # a validation batch: DDP's forward without gradients
                with rg.no_grad():
                    model.train(spec["evaluate_in_train_mode"])
                    out = model(rg.tensor(evaluation[s][rank]), False)
                    model.train()
                steps[-1]["eval"] = _np(out).copy()
            if s == spec["save_at"]:
                saved_model = copy.deepcopy(
                    {k: _np(v).copy() for k, v in model.state_dict().items()}
                )
                saved_optimizer = full_state(optimizer, rank)
                if spec["save_via"] == "file":  # rank 0 saves, every rank loads its bytes
                    buffer = io.BytesIO()
                    if rank == 0:
                        rg.save({"model": model.state_dict(), "opt": saved_optimizer}, buffer)
                    shared = [buffer.getvalue()]
                    dist.broadcast_object_list(shared, src=0)
                    where = {"cpu:0": f"cpu:{rank}"}
                    loaded = rg.load(io.BytesIO(shared[0]), map_location=where)
                    saved_model, saved_optimizer = loaded["model"], loaded["opt"]
                model, optimizer = build(rank, rank + 1)
                model.load_state_dict(saved_model)
                optimizer.load_state_dict(saved_optimizer)
        record["steps"] = steps
        record["optimizer"] = full_state(optimizer, rank)
        return record

    return script


# -- torch: one process, every rank's shards --------------------------------------------------


def sync_bn_backward(spec, model, shards, sides, losses, micro):
    """One micro-batch of every rank under SyncBatchNorm: the trunk (to the norm) on the
    shards concatenated, the rest on each rank's rows."""
    n = spec["n"]
    h = model.trunk(torch.tensor(np.concatenate([x for x, _ in shards])))
    total, start = 0.0, 0
    for r, (x, y) in enumerate(shards):
        loss = _loss(torch, spec, model.tail(h[start : start + len(x)], sides[r]), y)
        losses[r].append(loss.item())
        total = total + loss / micro / n
        start += len(x)
    total.backward()


def reference(spec, state, data, evaluation):
    n = spec["n"]
    model = make_model(torch, spec)
    model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    optimizer_class = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}
    optimizer = optimizer_class[spec["optimizer"]](_params(spec, model), **_optimizer_args(spec))
    buffers = [_buffers(model) for _ in range(n)]  # each rank's own
    if not (spec["broadcast_buffers"] or spec["forward_sync_buffers"]):  # not synced at first
        buffers = [{k: perturbed(state, r)[k] for k in buffers[r]} for r in range(n)]
    sync_next = True
    steps = []
    for s in range(spec["steps"]):
        optimizer.zero_grad()
        losses = [[] for _ in range(n)]
        micro = data[s]
        for k, shards in enumerate(micro):
            last = k == len(micro) - 1
            if sync_next and spec["broadcast_buffers"]:
                buffers = [dict(buffers[0]) for _ in range(n)]
            if spec["sync_bn"]:
                sync_bn_backward(spec, model, shards, side_of(spec, s, k), losses, len(micro))
                buffers = [_buffers(model) for _ in range(n)]
                sync_next = last or spec["add_grads"]
                continue
            for r in range(n):
                with torch.no_grad():
                    for name, value in model.named_buffers():
                        value.copy_(torch.tensor(buffers[r][name]))
                x, y = shards[r]
                loss = _loss(torch, spec, model(torch.tensor(x), side_of(spec, s, k)[r]), y)
                losses[r].append(loss.item())
                (loss / len(micro) / n).backward()  # (before the next rank's buffers)
                buffers[r] = _buffers(model)
            sync_next = last or spec["add_grads"]
        grads = {name: _np(p.grad) for name, p in model.named_parameters()}
        grads = {name: None if g is None else g.copy() for name, g in grads.items()}
        norm = None
        if spec["clip"]:
            norm = torch.nn.utils.clip_grad_norm_(
                model.parameters(), spec["clip"], norm_type=spec["norm_type"]
            )
            norm = float(norm)
        clipped = {name: _np(p.grad) for name, p in model.named_parameters()}
        optimizer.step()
        params = {k: _np(v).copy() for k, v in model.state_dict().items()}
        after = []
        for r in range(n):
            after.append({**params, **buffers[r]})
        steps.append(
            {"losses": losses, "grads": grads, "norm": norm, "clipped": clipped, "state": after}
        )
        if spec["evaluate"][s]:
            if sync_next and spec["broadcast_buffers"]:
                buffers = [dict(buffers[0]) for _ in range(n)]
            outputs = []
            if spec["sync_bn"] and spec["evaluate_in_train_mode"]:  # (statistics of all)
                with torch.no_grad():
                    h = model.trunk(torch.tensor(np.concatenate(evaluation[s])))
                    for rows in np.split(np.arange(len(h)), n):
                        outputs.append(_np(model.tail(h[rows], False)).copy())
                buffers = [_buffers(model) for _ in range(n)]
            for r in range(0 if outputs else n):
                with torch.no_grad():
                    for name, value in model.named_buffers():
                        value.copy_(torch.tensor(buffers[r][name]))
                    model.train(spec["evaluate_in_train_mode"])
                    outputs.append(_np(model(torch.tensor(evaluation[s][r]), False)).copy())
                    model.train()
                buffers[r] = _buffers(model)  # (BatchNorm's statistics, in train mode)
            steps[-1]["eval"] = outputs
            sync_next = False  # (a forward without gradients: the next one syncs no buffers)
        if s == spec["save_at"]:
            sync_next = True  # (a new DDP)
            saved_model = copy.deepcopy(model.state_dict())
            saved_optimizer = copy.deepcopy(optimizer.state_dict())
            model = make_model(torch, spec)
            model.load_state_dict(saved_model)
            optimizer = optimizer_class[spec["optimizer"]](
                _params(spec, model), **_optimizer_args(spec)
            )
            optimizer.load_state_dict(saved_optimizer)
            if spec["save_via"] == "file":  # every rank loaded rank 0's buffers
                buffers = [dict(buffers[0]) for _ in range(n)]
    return steps, optimizer.state_dict()


#: (rtol, atol) of values after optimizer steps
STEPPED = (1e-9, 1e-11)


def buffers_at_start(spec, state, rank):
    """The buffers a rank starts with: rank 0's where DDP syncs them at construction."""
    if spec["broadcast_buffers"] or spec["forward_sync_buffers"]:
        return {}
    keys = [k for k in state if k == "scale" or k.startswith("norm.running")]
    keys += [k for k in state if k.endswith("num_batches_tracked")]
    return {k: perturbed(state, rank)[k] for k in keys}


def check_training(seed, **override):
    rng = np.random.default_rng(seed)
    spec = draw_spec(rng)
    spec.update(override)
    state = initial_state(rng, spec)
    data, evaluation = data_of(seed, spec), evaluation_of(seed, spec)
    results = _raise_any(run_ranks(spec["n"], ddp_script(spec, state, data, evaluation)))
    steps, optimizer_state = reference(spec, state, data, evaluation)
    for rank, record in enumerate(results):
        first = buffers_at_start(spec, state, rank)
        for key, value in state.items():  # rank 0's values, broadcast at construction
            close(record["start"][key], first.get(key, value), f"rank {rank} start {key}", 0, 0)
        for s, (ours, theirs) in enumerate(zip(record["steps"], steps)):
            where = f"rank {rank} step {s}"
            close(ours["losses"], theirs["losses"][rank], f"{where} losses")
            for name, grad in theirs["grads"].items():
                close(ours["grads"][name], grad, f"{where} grad {name}")
                close(ours["clipped"][name], theirs["clipped"][name], f"{where} clipped {name}")
            if spec["clip"]:
                close(ours["norm"], theirs["norm"], f"{where} norm")
            if spec["evaluate"][s]:
                close(ours["eval"], theirs["eval"][rank], f"{where} evaluation", *STEPPED)
            expected = theirs["state"][rank]
            assert sorted(ours["state"]) == sorted(expected), where
            for key, value in expected.items():
                close(ours["state"][key], value, f"{where} {key}", *STEPPED)
        mine = record["optimizer"]
        assert sorted(mine["state"]) == sorted(optimizer_state["state"]), f"rank {rank}"
        for index, entry in optimizer_state["state"].items():
            assert sorted(mine["state"][index]) == sorted(entry), f"rank {rank} state {index}"
            for name, value in entry.items():
                what = f"rank {rank} state {index} {name}"
                close(mine["state"][index][name], value, what, *STEPPED)
        ours_groups = mine["param_groups"]
        theirs_groups = optimizer_state["param_groups"]
        assert [g["params"] for g in ours_groups] == [g["params"] for g in theirs_groups]
    return spec


#: (56: a forward without gradients in train mode, after which rank 0's buffers are not
#: broadcast before the next forward, where the ranks' BatchNorm statistics differ)
TRAINING_SEEDS = [*range(12), 56]


@pytest.mark.parametrize("seed", TRAINING_SEEDS)
def test_data_parallel_training_is_one_process_on_every_shard(seed):
    check_training(seed)


# -- the collectives themselves ---------------------------------------------------------------

KINDS = ["all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
         "reduce_scatter", "barrier"]  # fmt: skip
TORCH_REDUCTIONS = {
    "SUM": lambda s, n: s.sum(0),
    "AVG": lambda s, n: s.sum(0) / n,
    "MAX": lambda s, n: s.amax(0),
    "MIN": lambda s, n: s.amin(0),
    "PRODUCT": lambda s, n: s.prod(0),
}


def draw_collective(rng, n):
    kind = str(rng.choice(KINDS))
    dtype = str(rng.choice(["float64", "float32", "int64", "bool"]))
    op = str(rng.choice(list(TORCH_REDUCTIONS)))
    if kind == "reduce" and dtype in ("bool", "int64") and op == "AVG":
        op = "SUM"  # (torch's error was measured for all_reduce only)
    dims = int(rng.integers(1 if kind in ("all_gather_into_tensor", "reduce_scatter") else 0, 3))
    shape = [int(k) for k in rng.integers(1, 4, size=dims)]
    dim = 0
    if kind == "reduce_scatter":
        dtype = "float64" if dtype == "bool" else dtype  # (retrograd's form reduces numbers)
        op = str(rng.choice(["SUM", "AVG"])) if dtype != "int64" else "SUM"
        dim = int(rng.integers(-dims, dims))
        shape[dim] *= n
    if dtype == "bool":
        values = [rng.random(shape) < 0.5 for _ in range(n)]
    elif dtype == "int64":
        values = [rng.integers(-3, 4, size=shape) for _ in range(n)]
    else:
        values = [rng.standard_normal(shape).astype(dtype) for _ in range(n)]
    stacked = bool(rng.random() < 0.5)  # all_gather_into_tensor's stacked output form
    return {"kind": kind, "dtype": dtype, "op": op, "shape": shape, "dim": dim,
            "values": values, "root": int(rng.integers(n)), "stacked": stacked}  # fmt: skip


def run_collective(c, rank, n):
    try:
        return _run_collective(c, rank, n)
    except rg.RetrogradError as error:
        return error


def _run_collective(c, rank, n):
    value = rg.tensor(c["values"][rank], dtype=c["dtype"])
    kind = c["kind"]
    op = getattr(dist.ReduceOp, c["op"])
    if kind == "all_reduce":
        assert dist.all_reduce(value, op=op) is None
        return value
    if kind == "reduce":
        dist.reduce(value, dst=c["root"], op=op)
        return value
    if kind == "broadcast":
        dist.broadcast(value, src=c["root"])
        return value
    if kind == "all_gather":
        outputs = [rg.zeros(c["shape"], dtype=c["dtype"]) for _ in range(n)]
        dist.all_gather(outputs, value)
        return outputs
    if kind == "all_gather_into_tensor":
        shape = [n, *c["shape"]] if c["stacked"] else [n * c["shape"][0], *c["shape"][1:]]
        output = rg.zeros(shape, dtype=c["dtype"])
        dist.all_gather_into_tensor(output, value)
        return output
    if kind == "reduce_scatter":
        devices = dist.process_group.default_context().devices
        return dist.reduce_scatter(value, op, devices, dim=c["dim"]).resolve()
    assert dist.barrier() is None
    return value


def expected_collective(c, rank, n):
    mine = torch.tensor(c["values"][rank])
    stacked = torch.stack([torch.tensor(v) for v in c["values"]])
    kind = c["kind"]
    reduction = None
    if kind in ("all_reduce", "reduce", "reduce_scatter"):
        if c["dtype"] in ("bool", "int64") and c["op"] == "AVG":
            # torch's gloo: "result type Float can't be cast to the desired output type Long"
            return RuntimeError
        if c["dtype"] == "bool":  # gloo's SUM of bools is their OR (measured, torch 2.13)
            reduction = {"SUM": stacked.any, "MAX": stacked.amax, "MIN": stacked.amin,
                         "PRODUCT": stacked.all}[c["op"]](0)  # fmt: skip
        else:
            reduction = TORCH_REDUCTIONS[c["op"]](stacked, n)
    if kind == "all_reduce":
        return reduction
    if kind == "reduce":
        return reduction if rank == c["root"] else mine
    if kind == "broadcast":
        return stacked[c["root"]]
    if kind == "all_gather":
        return list(stacked)
    if kind == "all_gather_into_tensor":
        return stacked if c["stacked"] else torch.cat(list(stacked))
    if kind == "reduce_scatter":
        return reduction.chunk(n, c["dim"])[rank]
    return mine


def check_collectives(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    program = [draw_collective(rng, n) for _ in range(5)]

    def script(rank):
        return [run_collective(c, rank, n) for c in program]

    results = _raise_any(run_ranks(n, script))
    for rank, outputs in enumerate(results):
        for c, ours in zip(program, outputs):
            theirs = expected_collective(c, rank, n)
            what = f"rank {rank} {c['kind']} {c['op']} {c['dtype']} {c['shape']}: {ours!r}"
            if theirs is RuntimeError:  # every rank raises, an error of the hierarchy
                assert isinstance(ours, rg.RetrogradError), what
                assert isinstance(ours, RuntimeError), what
                continue
            assert not isinstance(ours, BaseException), what
            pairs = zip(ours, theirs) if isinstance(theirs, list) else [(ours, theirs)]
            for mine, expected in pairs:
                assert str(mine.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1], what
                rtol = 1e-6 if c["dtype"] == "float32" else 1e-12
                close(mine, expected, what, rtol, 0)
    return program


@pytest.mark.parametrize("seed", range(6))
def test_collectives_give_torchs_reductions(seed):
    check_collectives(seed)


# -- errors: every rank raises, none hangs ------------------------------------------------------

TIMEOUT = 0.5


def check_errors(seed):
    """One rank differs from the others: a collective's shape or dtype, or it raises before its
    backward. Every rank must raise within the timeout (the thread join's deadline is the
    test's), the odd rank's own error where it raised one."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    odd = int(rng.integers(n))
    fault = str(rng.choice(["shape", "dtype", "raise"]))
    kind = str(rng.choice(["all_reduce", "broadcast", "all_gather", "reduce_scatter"]))
    shape = [n * int(rng.integers(1, 3)), int(rng.integers(1, 3))]

    class RaisedError(ValueError):
        pass

    def script(rank):
        if fault == "raise":
            rg.manual_seed(0)
            model = DDP(rg.nn.Linear(2, 1).double())
            out = model(rg.ones((2, 2), dtype="float64"))
            if rank == odd:
                raise RaisedError(f"rank {rank}'s data is bad")
            return out.sum().backward()
        mine = list(shape)
        dtype = "float64"
        if rank == odd and fault == "shape":
            mine[-1] += 1
        if rank == odd and fault == "dtype":
            dtype = "float32"
        value = rg.ones(mine, dtype=dtype)
        devices = dist.process_group.default_context().devices
        if kind == "all_reduce":
            return dist.all_reduce(value, dist.ReduceOperation.SUM, devices).resolve()
        if kind == "broadcast":
            return dist.broadcast(value, 0, devices).resolve()
        if kind == "all_gather":
            return dist.all_gather(value, devices, 0).resolve()
        return dist.reduce_scatter(value, dist.ReduceOperation.SUM, devices, 0).resolve()

    start = time.monotonic()
    results = run_ranks(n, script, timeout=TIMEOUT)
    elapsed = time.monotonic() - start
    for rank, result in enumerate(results):
        where = f"{fault} on rank {odd} of {n}, {kind}: rank {rank} gave {result!r}"
        if fault == "raise" and rank == odd:
            assert isinstance(result, RaisedError), where
            continue
        # torch's c10d raises RuntimeError; API.md section 11 allows ShapeError for a shape
        assert isinstance(result, rg.RetrogradError), where
        assert isinstance(result, dist.DistributedError | rg.ShapeError | rg.DTypeError), where
        assert isinstance(result, RuntimeError | ValueError | TypeError), where
        assert str(result), where
    assert elapsed < TIMEOUT + 10.0, f"{elapsed:.1f} s"  # (the join deadline is 30 s)
    return fault, kind


@pytest.mark.parametrize("seed", range(5))
def test_a_rank_that_differs_or_raises_fails_every_rank(seed):
    check_errors(seed)
