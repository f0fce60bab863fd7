"""Step capture on the CPU: whole training steps, eager retrograd beside ``rg.capture`` replays
(default fusion, and ``fuse="fast"``) beside PyTorch eager, on the NumPy backend and one BLAS
thread.

Four steps:

- chain: the 300-op elementwise chain of bench_overhead.py (``y = sin(y * w) + x``, 100 times,
  then a sum) on (8, 8) float32, ``x`` and ``w`` the trained parameters, SGD; µs per op (301);
- mlp: 784-1024-1024-10, ReLU, cross-entropy, batch 256, SGD;
- cnn: bench_cnn.py's net (conv 1->32, conv 32->64, max-pool, linear), batch 64, SGD;
- gpt: nanoGPT's ``train.py`` step on bench_gpt.py's small GPT (4 layers, 4 heads, n_embd 128,
  block 128, batch 16): AdamW over ``configure_optimizers``' two parameter groups (decay on
  the 2-d weights), ``clip_grad_norm_`` at 1.0, the learning rate set in every group before
  each step (the warm-up of nanoGPT's schedule), for retrograd and torch alike.

The implementations start from the same weights and take turns (interleaved rounds: each
round times every implementation once, on a run of consecutive steps -- ``LOOP`` of them, the
training loop a user runs -- given per step); the table gives each one's median and range over
the rounds, and its ratio to torch eager as the median (and range) of the rounds' ratios, which
pairs measurements taken moments apart. For the chain, whose steps are short enough for the
caches to matter, a second table times single steps in turn (each step right after another
implementation's, with the caches that one left: the first replay after an eager step). The
first steps' losses must agree before any timing is reported; after the run the captured
model's parameters must equal the eager model's bit for bit (default fusion) or closely
(``fuse="fast"``). The first replay of a fused step compiles its kernels (Numba; cached on
disk by their source), so it is not timed.

    python benchmarks/bench_capture.py [--repeats 20] [--only chain,mlp,cnn,gpt]
    python benchmarks/bench_capture.py --parts   # where a replay of the chain spends its time
"""

from __future__ import annotations

import argparse
import re
import time

import common  # first: pins BLAS threads before NumPy loads

# isort: split
import numpy as np

import retrograd as rg
from common import interleaved, machine, median, table, torch_single_thread
from retrograd import nn, optim
from retrograd.nn import functional as F  # noqa: N812

LR = 0.01


class Chain(nn.Module):
    """The two leaves of bench_overhead.py's chain as a module's parameters."""

    links = 100
    ops = 3 * links + 1

    def __init__(self, x0: np.ndarray, w0: np.ndarray):
        super().__init__()
        self.register_parameter("x", rg.tensor(x0))
        self.register_parameter("w", rg.tensor(w0))

    def forward(self) -> rg.Tensor:
        y = self.x
        for _ in range(self.links):
            y = (y * self.w).sin() + self.x
        return y.sum()


def torch_chain(torch, x0, w0):
    x = torch.nn.Parameter(torch.tensor(x0))
    w = torch.nn.Parameter(torch.tensor(w0))
    opt = torch.optim.SGD([x, w], lr=LR)

    def step():
        y = x
        for _ in range(Chain.links):
            y = (y * w).sin() + x
        loss = y.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def mlp_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )


def cnn_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 12 * 12, 10),
    )


def torch_twin(torch, model: nn.Module, weights: dict):
    """The same layers in torch with ``weights`` (torch's layouts: the names carry over)."""
    layers = []
    for layer in model._modules.values():
        kind = type(layer).__name__
        if kind == "Linear":
            out_features, in_features = layer.weight.shape
            layers.append(torch.nn.Linear(in_features, out_features))
        elif kind == "Conv2d":
            out_channels, in_channels, k, _ = layer.weight.shape
            layers.append(torch.nn.Conv2d(in_channels, out_channels, k))
        elif kind == "ReLU":
            layers.append(torch.nn.ReLU())
        elif kind == "MaxPool2d":
            layers.append(torch.nn.MaxPool2d(2))
        elif kind == "Flatten":
            layers.append(torch.nn.Flatten())
    twin = torch.nn.Sequential(*layers)
    state = {name: torch.from_numpy(value.copy()) for name, value in weights.items()}
    twin.load_state_dict(state)
    return twin


def torch_classifier_step(torch, model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


MODES = {"retrograd captured": True, "retrograd captured, fast fusion": "fast"}
#: consecutive steps each round times, per workload (about 50 ms and more of eager steps)
LOOP = {"chain": 20, "mlp": 2, "cnn": 2, "gpt": 2}


def retrograd_steps(make_model, inputs, make_optimizer, loss_of, clip=None, schedule=None):
    """The eager step, the captured steps (one per fusion mode) and the models they train:
    copies of one model, trained alike (capture trains on the first batch, so the eager
    model takes that step too). ``clip(model, grads)`` runs inside the step, ``schedule``
    (a fresh one per optimizer) before each step, outside it, as a training loop sets the
    learning rate between captured steps."""
    rg.seed(0)
    models = {"retrograd eager": make_model()}
    initial = models["retrograd eager"].state_dict()
    for name in MODES:
        models[name] = make_model()
        models[name].load_state_dict(initial)
    inputs = tuple(rg.tensor(value) for value in inputs)

    def step_for(model):
        optimizer = make_optimizer(model)

        def train_step(*batch):
            loss = loss_of(model, *batch)
            grads = loss.backward()
            if clip is not None:
                clip(model, grads)
            optimizer.step(grads)
            return loss

        return train_step, optimizer

    def scheduled(step, optimizer):
        """``step`` preceded by the schedule's setting of the learning rate."""
        if schedule is None:
            return step, lambda: None
        plan = schedule()
        return (lambda: (plan(optimizer), step())[1]), (lambda: plan(optimizer))

    eager_step, eager_optimizer = step_for(models["retrograd eager"])
    steps = {"retrograd eager": scheduled(lambda: eager_step(*inputs), eager_optimizer)[0]}
    calls, fused = 0, {}
    for name, fuse in MODES.items():
        train_step, optimizer = step_for(models[name])
        holder: list = []
        steps[name], before_capture = scheduled(lambda h=holder: h[0](*inputs), optimizer)
        before_capture()  # the schedule's first learning rate, for the step capture takes
        captured = rg.capture(train_step, *inputs, state=[optimizer], fuse=fuse)
        holder.append(captured)
        calls, fused[name] = captured.num_calls, captured.num_fused
    for name, step in steps.items():
        if name == "retrograd eager":
            step()  # the step the captures took
        step()  # the first replay compiles the fused kernels (or loads them from the cache)
    return steps, models, calls, fused


# -- nanoGPT's train.py step -------------------------------------------------------------------
GPT_LR, GPT_WARMUP = 6e-4, 2000


def configure_optimizers(params, weight_decay, lr, betas, adamw):
    """nanoGPT's ``configure_optimizers``: decay the 2-d parameters, not the others."""
    params = list(params)
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return adamw(groups, lr=lr, betas=betas)


class _Warmup:
    """nanoGPT's ``get_lr`` during warm-up, set in every group before each step."""

    def __init__(self):
        self.iteration = 0

    def __call__(self, optimizer):
        lr = GPT_LR * (self.iteration + 1) / (GPT_WARMUP + 1)
        for group in optimizer.param_groups:
            group["lr"] = lr
        self.iteration += 1


def gpt_workload(torch):
    import bench_gpt

    n_layer, n_head, n_embd, block_size, batch = bench_gpt.SIZES["small"]
    twin = bench_gpt.torch_gpt(torch, n_layer, n_head, n_embd, block_size)
    bench_gpt.init_weights(torch, twin)
    weights = {
        name: value.detach().numpy().copy()
        for name, value in twin.state_dict().items()
        if name != "lm_head.weight"
    }
    rng = np.random.default_rng(0)
    data = rng.integers(0, bench_gpt.VOCAB, (batch, block_size + 1))
    x, y = data[:, :-1].copy(), data[:, 1:].copy()

    def make_model():
        model = bench_gpt.GPT(n_layer, n_head, n_embd, block_size)
        model.load_state_dict(weights)
        return model

    steps, models, calls, fused = retrograd_steps(
        make_model,
        (x, y),
        lambda model: configure_optimizers(
            model.parameters(), 0.1, GPT_LR, bench_gpt.BETAS, optim.AdamW
        ),
        lambda model, idx, targets: model(idx, targets),
        clip=lambda model, grads: nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0),
        schedule=_Warmup,
    )
    optimizer = configure_optimizers(
        twin.parameters(), 0.1, GPT_LR, bench_gpt.BETAS, torch.optim.AdamW
    )
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    schedule = _Warmup()

    def torch_step():
        schedule(optimizer)
        loss = twin(tx, ty)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(2):
        torch_step()  # torch's model now stands where retrograd's do
    title = f"nanoGPT train.py step, small GPT ({n_layer} layers, n_embd {n_embd}, batch {batch})"
    return steps, models, calls, fused, torch_step, title


def workload(name, torch, rng):
    """``(retrograd steps, models, calls, fused kernels, torch step, unit, scale, title)``."""
    if name == "gpt":
        steps, models, calls, fused, torch_step, title = gpt_workload(torch)
        return steps, models, calls, fused, torch_step, "ms/step", 1e3, title
    if name == "chain":
        x0 = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
        w0 = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
        steps, models, calls, fused = retrograd_steps(
            lambda: Chain(x0, w0), (), lambda m: optim.SGD(m, lr=LR), lambda m: m()
        )
        torch_step = torch_chain(torch, x0, w0)
        for _ in range(2):
            torch_step()
        title = f"{Chain.ops}-op chain, (8, 8)"
        return steps, models, calls, fused, torch_step, "µs/op", 1e6 / Chain.ops, title
    batch, make = (256, mlp_model) if name == "mlp" else (64, cnn_model)
    shape = (784,) if name == "mlp" else (1, 28, 28)
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    steps, models, calls, fused = retrograd_steps(
        make, (x, y), lambda m: optim.SGD(m, lr=LR), lambda m, a, b: F.cross_entropy(m(a), b)
    )
    first = models["retrograd eager"]
    twin = torch_twin(torch, first, first.state_dict())  # where retrograd's models stand
    torch_step = torch_classifier_step(torch, twin, x, y)
    title = "MLP 784-1024-1024-10, batch 256" if name == "mlp" else "CNN, batch 64"
    return steps, models, calls, fused, torch_step, "ms/step", 1e3, title


def check_models(models):
    """The captured models against the eager one: equal bit for bit with the default fusion,
    close with fast fusion."""
    eager = dict(models["retrograd eager"].named_parameters())
    for name, model in models.items():
        for key, parameter in model.named_parameters():
            got, expected = parameter.numpy(), eager[key].numpy()
            if MODES.get(name) == "fast":
                np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5, err_msg=key)
            else:
                assert np.array_equal(got, expected), f"{name}: {key} differs from eager"


def rows_for(times, unit_scale):
    """One row per implementation: median (min-max) time, and the rounds' ratios to torch."""
    reference = times.get("torch eager")
    rows = []
    for name, values in times.items():
        scaled = [v * unit_scale for v in values]
        cell = f"{median(scaled):.2f} ({min(scaled):.2f}-{max(scaled):.2f})"
        ratio = ""
        if reference is not None:
            ratios = [a / b for a, b in zip(values, reference)]
            ratio = f"{median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        rows.append([name, cell, ratio])
    return rows


def replay_parts(rounds: int) -> None:
    """Where a replay of the chain's captured step (default fusion) spends its time: the
    compiled segments' calls (the fused kernels together, the other calls by name), the
    optimizer step, and the rest of the replay (checks of the inputs and state, loading and
    writing back; with the timers' own cost), as medians over ``rounds`` replays; printed, no
    results file."""
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
    w0 = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
    steps, _, calls, fused = retrograd_steps(
        lambda: Chain(x0, w0), (), lambda m: optim.SGD(m, lr=LR), lambda m: m()
    )
    step = steps["retrograd captured"]
    captured = step.__defaults__[0][0]  # the CapturedStep behind the scheduled lambda
    spent: dict[str, float] = {}

    def timed(part, function):
        def run(*args):
            start = time.perf_counter()
            out = function(*args)
            spent[part] = spent.get(part, 0.0) + time.perf_counter() - start
            return out

        return run

    for item in captured._items:
        namespace = getattr(getattr(item, "function", None), "__globals__", {})
        for name, value in list(namespace.items()):
            if callable(value) and re.fullmatch(r"[a-z_]+_\d+", name):
                part = "fused kernels" if name.startswith("fused_") else name.rsplit("_", 1)[0]
                namespace[name] = timed(part, value)
    captured._run_optimizer = timed("optimizer step", captured._run_optimizer)
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        spent.clear()
        start = time.perf_counter()
        step()
        total = time.perf_counter() - start
        spent["rest of the replay"] = total - sum(spent.values())
        spent["whole replay"] = total
        for part, seconds in spent.items():
            samples.setdefault(part, []).append(seconds)
    kernels = fused["retrograd captured"]
    print(f"{Chain.ops}-op chain, (8, 8): {calls} recorded calls, {kernels} fused kernels")
    rows = [
        [part, f"{median(v) * 1e6:.1f}", f"{median(v) * 1e6 / Chain.ops:.2f}"]
        for part, v in samples.items()
    ]
    print(table(rows, ["part", "µs per replay, median", "µs per op"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="interleaved rounds (default 20)")
    parser.add_argument("--only", default="chain,mlp,cnn,gpt", help="comma-separated workloads")
    parser.add_argument(
        "--parts", action="store_true", help="only time the parts of the chain's replay"
    )
    args = parser.parse_args()
    if args.parts:
        replay_parts(max(args.repeats, 200))
        return
    torch = torch_single_thread()
    if torch is None:
        raise SystemExit("bench_capture compares against torch, which is not installed")
    rng = np.random.default_rng(0)
    print(machine())
    tables = {}
    for name in args.only.split(","):
        steps, models, calls, fused, torch_step, unit, scale, title = workload(name, torch, rng)
        candidates = {**steps, "torch eager": torch_step}
        first = {key: float(np.asarray(run().detach().numpy())) for key, run in candidates.items()}
        values = list(first.values())
        assert np.allclose(values, values[0], rtol=1e-3, atol=1e-4), first
        loop = LOOP[name]
        runs = {f"{loop} consecutive steps" if loop > 1 else "": loop}
        if name == "chain":
            runs["one step at a time, each after another implementation's"] = 1
        kernels = ", ".join(f"{key.split(', ')[-1]}: {n} kernels" for key, n in fused.items())
        for run, steps_per_round in runs.items():
            times = interleaved(candidates, repeats=args.repeats, loop=steps_per_round)
            caption = f"{title}: training step, {calls} recorded calls ({kernels})"
            caption += f"; {run}" if run else ""
            header = ["implementation", f"{unit}, median (range)", "time / torch eager, per round"]
            rows = rows_for(times, scale)
            print(f"\n{caption}")
            print(table(rows, header))
            timed = f"{steps_per_round} consecutive steps per round and implementation, "
            tables[caption] = {
                "header": header,
                "rows": rows,
                "note": f"{args.repeats} interleaved rounds, "
                + (timed if steps_per_round > 1 else "")
                + "time per step; ranges are min-max over the rounds.",
            }
        check_models(models)
    common.write_results("capture", tables, command=common.command_line())


if __name__ == "__main__":
    main()
