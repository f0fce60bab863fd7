"""The word language model's training step (PyTorch examples, ``word_language_model``),
retrograd beside PyTorch eager, float32, one CPU thread.

Two models of the example at ``main.py``'s defaults: ``RNNModel("LSTM")`` (embedding 200, a
2-layer LSTM of 200, dropout 0.2, a decoder to the vocabulary, log-softmax) and the
``TransformerModel`` (embedding 200 scaled by sqrt(200) plus sine positions, dropout 0.2, two
post-norm encoder layers of 2 heads and feed-forward 200 with the layers' default dropout 0.1,
the causal mask, the encoder's final LayerNorm, decoder, log-softmax); ``bptt`` 35, batch 20,
a vocabulary of 10 000 words (Penn Treebank's size; random tokens: the step's work does not
depend on the text). The step is ``main.py``'s: ``NLLLoss``, backward, ``clip_grad_norm_(0.25)``
and SGD at lr 20 (PyTorch: ``p.data.add_(p.grad, alpha=-lr)``; retrograd: the same line on the
``Gradients`` value, ``p.data.add_(p.grad(grads), alpha=-lr)``), the hidden state carried over
and detached between steps. Both libraries start from the same weights.

Phases (forward, backward, update) are timed in rounds that alternate the two libraries, so
that load from other jobs on the machine hits both alike; medians, min-max, the ratio of
medians and the median of the per-round ratios are reported and written to
``benchmarks/results/lm.json``.

Run: ``PYTHONPATH=src python benchmarks/bench_lm.py [--model lstm|transformer|both]
[--rounds 10] [--vocab 10000]``
"""

from __future__ import annotations

import os
import sys

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import common  # noqa: E402
import retrograd as rg  # noqa: E402

EMSIZE, NHID, NLAYERS, NHEAD = 200, 200, 2, 2
BPTT, BATCH, DROPOUT, LR, CLIP = 35, 20, 0.2, 20.0, 0.25


def models(lib, nn, F):  # noqa: N803  (the libraries' own names)
    """The example's two models, written once for both libraries (today's common surface)."""

    class RNNModel(nn.Module):
        def __init__(self, ntoken):
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(DROPOUT)
            self.encoder = nn.Embedding(ntoken, EMSIZE)
            self.rnn = nn.LSTM(EMSIZE, NHID, NLAYERS, dropout=DROPOUT)
            self.decoder = nn.Linear(NHID, ntoken)

        def forward(self, input, hidden):  # noqa: A002
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            zeros = lib.zeros((NLAYERS, bsz, NHID))
            return (zeros, zeros)

    class TransformerModel(nn.Module):
        def __init__(self, ntoken):
            super().__init__()
            layer = nn.TransformerEncoderLayer(EMSIZE, NHEAD, NHID)  # dropout 0.1, as the example
            self.encoder = nn.TransformerEncoder(layer, NLAYERS, nn.LayerNorm(EMSIZE))
            self.drop = nn.Dropout(DROPOUT)
            position = np.arange(5000, dtype=np.float32)[:, None]
            div_term = np.exp(np.arange(0, EMSIZE, 2, dtype=np.float32) * (-math.log(1e4) / EMSIZE))
            pe = np.zeros((5000, 1, EMSIZE), np.float32)
            pe[:, 0, 0::2], pe[:, 0, 1::2] = (
                np.sin(position * div_term),
                np.cos(position * div_term),
            )
            self.register_buffer("pe", lib.tensor(pe))
            self.input_emb = nn.Embedding(ntoken, EMSIZE)
            self.decoder = nn.Linear(EMSIZE, ntoken)
            self.src_mask = nn.Transformer.generate_square_subsequent_mask(BPTT)

        def forward(self, src):
            src = self.input_emb(src) * math.sqrt(EMSIZE)
            src = self.drop(src + self.pe[: src.size(0), :])
            output = self.encoder(src, mask=self.src_mask)
            return F.log_softmax(self.decoder(output), dim=-1)

    return RNNModel, TransformerModel


class Runner:
    """One library's model, data and step phases."""

    def __init__(self, name, lib, model, data, targets, update):
        self.name, self.lib, self.model = name, lib, model
        self.data, self.targets, self.update = data, targets, update
        self.criterion = lib.nn.NLLLoss()
        self.recurrent = hasattr(model, "init_hidden")
        self.hidden = model.init_hidden(BATCH) if self.recurrent else None
        self.loss = None

    def forward(self):
        if self.recurrent:
            self.hidden = tuple(h.detach() for h in self.hidden)
            output, self.hidden = self.model(self.data, self.hidden)
        else:
            output = self.model(self.data).view(-1, self.model.decoder.out_features)
        self.loss = self.criterion(output, self.targets)

    def backward(self):
        self.grads = self.update.backward(self.loss)

    def optimize(self):
        self.update.step(self.grads)


class TorchUpdate:
    def __init__(self, torch, model):
        self.torch, self.model = torch, model

    def backward(self, loss):
        self.model.zero_grad()
        loss.backward()

    def step(self, _grads):
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        for p in self.model.parameters():
            p.data.add_(p.grad, alpha=-LR)


class RetrogradUpdate:
    def __init__(self, model):
        self.model = model

    def backward(self, loss):
        return loss.backward()

    def step(self, grads):
        rg.nn.utils.clip_grad_norm_(grads, self.model.parameters(), CLIP, as_tensor=True)
        for p in self.model.parameters():
            p.data.add_(p.grad(grads), alpha=-LR)


def run(kind, rounds, vocab, torch):
    torch.manual_seed(0)
    rg.seed(0)
    rnn_model, transformer_model = models(torch, torch.nn, torch.nn.functional)
    theirs = (rnn_model if kind == "lstm" else transformer_model)(vocab)
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    rnn_model, transformer_model = models(rg, rg.nn, rg.nn.functional)
    ours = (rnn_model if kind == "lstm" else transformer_model)(vocab)
    ours.load_state_dict(state)
    tokens = np.random.default_rng(1).integers(0, vocab, size=(BPTT + 1, BATCH))
    data, targets = tokens[:-1].copy(), tokens[1:].reshape(-1).copy()
    runners = [
        Runner("retrograd", rg, ours, rg.tensor(data), rg.tensor(targets), RetrogradUpdate(ours)),
        Runner(
            "torch",
            torch,
            theirs,
            torch.from_numpy(data),
            torch.from_numpy(targets),
            TorchUpdate(torch, theirs),
        ),
    ]
    phases = ("forward", "backward", "update")
    times = {r.name: {phase: [] for phase in (*phases, "step")} for r in runners}
    for round_index in range(rounds + 2):  # two warm-up rounds
        for runner in runners:
            spent = []
            for function in (runner.forward, runner.backward, runner.optimize):
                start = time.perf_counter()
                function()
                spent.append(time.perf_counter() - start)
            if round_index >= 2:
                for phase, seconds in zip(phases, spent):
                    times[runner.name][phase].append(seconds)
                times[runner.name]["step"].append(sum(spent))
    return times


def table_rows(times):
    rows = []
    for phase in ("forward", "backward", "update", "step"):
        ours, theirs = times["retrograd"][phase], times["torch"][phase]
        rows.append(
            [
                phase,
                f"{common.median(ours) * 1e3:.1f} ({min(ours) * 1e3:.1f}-{max(ours) * 1e3:.1f})",
                f"{common.median(theirs) * 1e3:.1f} "
                f"({min(theirs) * 1e3:.1f}-{max(theirs) * 1e3:.1f})",
                f"{common.median(ours) / common.median(theirs):.2f}x",
                f"{common.median([a / b for a, b in zip(ours, theirs)]):.2f}x",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("lstm", "transformer", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--vocab", type=int, default=10_000)
    args = parser.parse_args()
    torch = common.torch_single_thread()
    header = ["phase", "retrograd ms (min-max)", "torch ms (min-max)", "ratio", "per round"]
    tables = {}
    kinds = ("lstm", "transformer") if args.model == "both" else (args.model,)
    print(common.machine())
    for kind in kinds:
        rows = table_rows(run(kind, args.rounds, args.vocab, torch))
        title = (
            f"{kind}: bptt {BPTT}, batch {BATCH}, emsize/nhid {EMSIZE}, {NLAYERS} layers, "
            f"vocab {args.vocab}; {args.rounds} interleaved rounds"
        )
        print(f"\n{title}\n" + common.table(rows, header))
        tables[title] = {"header": header, "rows": rows, "unit": "ms"}
    command = "PYTHONPATH=src python benchmarks/bench_lm.py " + " ".join(sys.argv[1:])
    path = common.write_results("lm", tables, command=command.strip())
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
