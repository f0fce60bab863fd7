"""The update phase of a training step alone, retrograd beside PyTorch eager, in process CPU
time: ``clip_grad_norm_``, the word language model's manual SGD (``p.data.add_(grad,
alpha=-lr)``), and the ``SGD`` (momentum 0.9), ``Adam`` and ``AdamW`` steps, over the
parameters of ``bench_lm.py``'s two models (LSTM: 11 tensors, 4.65 million elements;
Transformer: 29 tensors, 4.49 million), float32, one thread.

Each round gives both libraries fresh gradients (``sum(p * w)`` per parameter, ``w`` fixed
random values: not timed) and times one call of the case; the libraries take turns, so that
load from other jobs hits both alike, and process CPU time is less disturbed by it than wall
time. torch runs its defaults (on CPU: the single-tensor optimizers, the foreach clipping).
Medians, min-max and the ratio of medians are printed.

Run: ``PYTHONPATH=src python benchmarks/bench_update.py [--model lstm|transformer|both]
[--rounds 15] [--backend numpy|torch]`` (``--backend``: retrograd's inner backend).
"""

from __future__ import annotations

import os
import sys

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import bench_lm  # noqa: E402
import common  # noqa: E402
import retrograd as rg  # noqa: E402

CASES = ("clip_grad_norm_", "manual SGD", "SGD momentum", "Adam", "AdamW")
LR, CLIP = 1e-3, 0.25


def optimizer(lib, case, params):
    if case == "SGD momentum":
        return lib.optim.SGD(params, lr=LR, momentum=0.9)
    if case == "Adam":
        return lib.optim.Adam(params, lr=LR)
    return lib.optim.AdamW(params, lr=LR, weight_decay=0.01)


class Ours:
    def __init__(self, model, weights):
        self.params = list(model.parameters())
        self.weights = [rg.tensor(w) for w in weights]

    def gradients(self):
        loss = None
        for p, w in zip(self.params, self.weights):
            term = (p * w).sum()
            loss = term if loss is None else loss + term
        return loss.backward()

    def update(self, case, opt, grads):
        if case == "clip_grad_norm_":
            rg.nn.utils.clip_grad_norm_(grads, self.params, CLIP, as_tensor=True)
        elif case == "manual SGD":
            for p in self.params:
                p.data.add_(p.grad(grads), alpha=-LR)
        else:
            opt.step(grads)


class Theirs:
    def __init__(self, torch, model, weights):
        self.torch = torch
        self.params = list(model.parameters())
        self.weights = [torch.from_numpy(w) for w in weights]

    def gradients(self):
        for p in self.params:
            p.grad = None
        loss = sum((p * w).sum() for p, w in zip(self.params, self.weights))
        loss.backward()

    def update(self, case, opt, _grads):
        if case == "clip_grad_norm_":
            self.torch.nn.utils.clip_grad_norm_(self.params, CLIP)
        elif case == "manual SGD":
            with self.torch.no_grad():
                for p in self.params:
                    p.data.add_(p.grad, alpha=-LR)
        else:
            opt.step()


def run(kind, rounds, vocab, torch):
    torch.manual_seed(0)
    rg.seed(0)
    rnn_model, transformer_model = bench_lm.models(torch, torch.nn, torch.nn.functional)
    theirs = (rnn_model if kind == "lstm" else transformer_model)(vocab)
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    rnn_model, transformer_model = bench_lm.models(rg, rg.nn, rg.nn.functional)
    ours = (rnn_model if kind == "lstm" else transformer_model)(vocab)
    ours.load_state_dict(state)
    rng = np.random.default_rng(2)
    weights = [rng.standard_normal(tuple(p.shape)).astype(np.float32) for p in theirs.parameters()]
    sides = {"retrograd": Ours(ours, weights), "torch": Theirs(torch, theirs, weights)}
    libs = {"retrograd": rg, "torch": torch}
    times = {case: {name: [] for name in sides} for case in CASES}
    for case in CASES:
        opts = {
            name: None if case in CASES[:2] else optimizer(libs[name], case, side.params)
            for name, side in sides.items()
        }
        for round_index in range(rounds + 2):  # two warm-up rounds
            for name, side in sides.items():
                grads = side.gradients()
                start = time.process_time()
                side.update(case, opts[name], grads)
                spent = time.process_time() - start
                del grads
                if round_index >= 2:
                    times[case][name].append(spent)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("lstm", "transformer", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--backend", choices=("numpy", "torch"), default="numpy")
    args = parser.parse_args()
    torch = common.torch_single_thread()
    if args.backend == "torch":
        rg.set_default_backend(rg.Autodiff(rg.TorchBackend("cpu")))
    header = ["case", "retrograd ms (min-max)", "torch ms (min-max)", "ratio"]
    print(common.machine())
    for kind in ("lstm", "transformer") if args.model == "both" else (args.model,):
        times = run(kind, args.rounds, args.vocab, torch)
        rows = []
        for case in CASES:
            ours, theirs = times[case]["retrograd"], times[case]["torch"]
            ratio = common.median(ours) / common.median(theirs)
            rows.append([case, _spread(ours), _spread(theirs), f"{ratio:.2f}x"])
        title = (
            f"{kind}: the update phase, process CPU time, {args.rounds} interleaved rounds; "
            f"retrograd on {args.backend}"
        )
        print(f"\n{title}\n" + common.table(rows, header))


def _spread(seconds):
    return f"{common.median(seconds) * 1e3:.2f} ({min(seconds) * 1e3:.2f}-{max(seconds) * 1e3:.2f})"


if __name__ == "__main__":
    main()
