"""Step capture on the CPU: whole training steps, eager retrograd beside ``rg.capture`` replays
beside PyTorch eager, on the NumPy backend and one BLAS thread.

Three steps, each forward + backward + SGD update (``optim.SGD``, ``torch.optim.SGD``):

- chain: the 300-op elementwise chain of bench_overhead.py (``y = sin(y * w) + x``, 100 times,
  then a sum) on (8, 8) float32, ``x`` and ``w`` the trained parameters; µs per op (301 ops);
- mlp: 784-1024-1024-10, ReLU, cross-entropy, batch 256;
- cnn: bench_cnn.py's net (conv 1->32, conv 32->64, max-pool, linear), batch 64.

The three implementations start from the same weights and take turns (interleaved
repetitions, medians); the first steps' losses must agree before any timing is reported, and
the captured model's parameters must equal the eager model's bit for bit after the run.

    python benchmarks/bench_capture.py [--repeats 20] [--only chain,mlp,cnn]
"""

from __future__ import annotations

import argparse

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


def retrograd_steps(make_model, x: np.ndarray | None, y: np.ndarray | None):
    """(eager step, captured step, the two models): two copies of one model trained alike."""
    rg.seed(0)
    eager_model = make_model()
    captured_model = make_model()
    initial = eager_model.state_dict()
    captured_model.load_state_dict(initial)
    inputs = () if x is None else (rg.tensor(x), rg.tensor(y))

    def step_for(model):
        opt = optim.SGD(model, lr=LR)

        def train_step(*batch):
            loss = model() if not batch else F.cross_entropy(model(batch[0]), batch[1])
            opt.step(loss.backward())
            return loss

        return train_step, opt

    eager_step, _ = step_for(eager_model)
    captured_fn, captured_opt = step_for(captured_model)
    captured = rg.capture(captured_fn, *inputs, state=[captured_opt])
    eager_step(*inputs)  # the step capture took, so both models stay in step
    return (
        lambda: eager_step(*inputs),
        lambda: captured(*inputs),
        (eager_model, captured_model, initial),
        captured.num_calls,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed runs of each (default 20)")
    parser.add_argument("--only", default="chain,mlp,cnn", help="comma-separated workloads")
    args = parser.parse_args()
    torch = torch_single_thread()
    rng = np.random.default_rng(0)
    print(machine())
    tables = {}
    for workload in args.only.split(","):
        if workload == "chain":
            x0 = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
            w0 = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
            eager, captured, models, calls = retrograd_steps(
                lambda x0=x0, w0=w0: Chain(x0, w0), None, None
            )
            torch_step = torch_chain(torch, x0, w0) if torch else None
            unit, scale, title = "µs/op", 1e6 / Chain.ops, f"{Chain.ops}-op chain, (8, 8)"
        else:
            batch, make = (256, mlp_model) if workload == "mlp" else (64, cnn_model)
            shape = (784,) if workload == "mlp" else (1, 28, 28)
            x = rng.standard_normal((batch, *shape)).astype(np.float32)
            y = rng.integers(0, 10, batch).astype(np.int64)
            eager, captured, models, calls = retrograd_steps(make, x, y)
            torch_step = None
            if torch is not None:
                torch_step = torch_classifier_step(
                    torch, torch_twin(torch, models[0], models[2]), x, y
                )
            unit, scale = "ms/step", 1e3
            title = "MLP 784-1024-1024-10, batch 256" if workload == "mlp" else "CNN, batch 64"
        candidates = {"retrograd eager": eager, "retrograd captured": captured}
        if torch_step is not None:
            torch_step()  # torch's first step: the models now stand where retrograd's do
            candidates["torch eager"] = torch_step
        first = {
            name: float(np.asarray(run().detach() if name == "torch eager" else run()))
            for name, run in candidates.items()
        }
        values = list(first.values())
        assert np.allclose(values, values[0], rtol=1e-3, atol=1e-4), first
        times = interleaved(candidates, repeats=args.repeats)
        for (name, p), (_, q) in zip(models[0].named_parameters(), models[1].named_parameters()):
            assert np.array_equal(p.numpy(), q.numpy()), f"captured {name} differs from eager"
        reference = median(times["retrograd eager"])
        rows = [
            [name, f"{median(t) * scale:.2f}", f"{median(t) / reference:.2f}"]
            for name, t in times.items()
        ]
        title = f"{title}: training step (forward, backward, SGD), {calls} recorded calls"
        header = ["implementation", f"{unit} (median of {args.repeats})", "time / eager"]
        print(f"\n{title}")
        print(table(rows, header))
        tables[title] = {"header": header, "rows": rows}
    common.write_results("capture", tables, command=common.command_line())


if __name__ == "__main__":
    main()
