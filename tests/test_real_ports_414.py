"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of jidasheng/bi-lstm-crf (a character tagger: a bidirectional LSTM under a batched CRF,
trained from a corpus folder and reloaded to tag new text), run under torch and, ported, under
retrograd from the same weights and draws.

Its surface: a corpus of ``vocab.json``/``tags.json``/``dataset.txt`` cached by ``np.savez`` and
read back by ``np.load``, ``map(torch.tensor, (xs, ys))`` and split by ``np.cumsum``; a CRF with
``nn.Parameter(torch.randn(...), requires_grad=True)`` whose forbidden rows are written through
``.data[...] = -1e4``, the forward algorithm by a hand-written log-sum-exp (``x.max(-1)[0]``)
over ``[B, 1, C] + [1, C, C] + [B, C, 1]`` scores mixed by masks, the gold score by
``gather(dim=2, ...)``, ``torch.full((B, 1), k, dtype=torch.long)``, ``torch.cat`` and
``trans[path[:, 1:], path[:, :-1]]``, the last tag by ``gather(dim=1, index=mask.sum(1).long()
.unsqueeze(1))``, and Viterbi storing its back pointers through a tuple target
(``cand, back[:, t, :] = cand.max(dim=-1)``), ``cand += ...`` and following them in NumPy; the
encoder: ``x.gt(0)`` masks, ``sort(descending=True)``, ``pack_padded_sequence(...,
lengths=lengths.cpu(), batch_first=True)`` into a bidirectional ``nn.LSTM``,
``pad_packed_sequence`` and the order undone by ``order.sort()``; training: ``argparse`` over
``sys.argv``, ``TensorDataset``/``DataLoader``, ``torch.device``/``.to(device)``,
``model.zero_grad()``, ``Adam(weight_decay=...)``, ``"{:5.2f}".format(loss)`` of a 0-d tensor,
an evaluation averaging a tuple of 0-d losses both by ``np.multiply`` and by
``torch.multiply(torch.tensor(losses), ...)``, the best model kept by ``torch.save``; tagging:
the arguments reloaded into an ``argparse.Namespace``, ``torch.load`` into a fresh model,
``torch.from_numpy`` of a NumPy batch decoded under ``torch.no_grad()`` and spans read off the
tags.

The corpus is a synthetic one in that format (words of a small vocabulary, tags ``B``/``I`` and
``B-LOC``/``I-LOC`` for place names). The port changes the import lines naming ``torch`` and the
gradient lines; ``torch.randn`` draws one stream in both runs and ``initialize`` gives the port
torch's initial weights.
"""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
)

BI_LSTM_CRF_SOURCE = """
import argparse
import json
import os

import numpy as np
import torch
from torch import nn, optim
from torch.nn.utils import rnn as rnn_utils
from torch.utils.data import DataLoader, TensorDataset

NEG = -1e4  # a score no path takes


def logsumexp_last(x):
    top = x.max(-1)[0]
    return top + (x - top.unsqueeze(-1)).exp().sum(-1).log()


class CRFHead(nn.Module):
    def __init__(self, width, n_tags):
        super().__init__()
        self.size = n_tags + 2
        self.begin, self.end = n_tags, n_tags + 1
        self.emit = nn.Linear(width, self.size)
        # trans[i, j]: the score of moving from tag j to tag i
        self.trans = nn.Parameter(torch.randn(self.size, self.size), requires_grad=True)
        self.trans.data[self.begin, :] = NEG
        self.trans.data[:, self.end] = NEG

    def nll(self, h, tags, mask):
        scores = self.emit(h)
        mask = mask[:, : scores.size(1)].float()
        tags = tags[:, : scores.size(1)].long()
        return (self.log_partition(scores, mask) - self.path_score(scores, tags, mask)).mean()

    def log_partition(self, scores, mask):
        B, L, C = scores.shape
        alpha = torch.full((B, C), NEG)
        alpha[:, self.begin] = 0.0
        for t in range(L):
            step = alpha.unsqueeze(1) + self.trans.unsqueeze(0) + scores[:, t].unsqueeze(2)
            keep = mask[:, t].unsqueeze(1)
            alpha = logsumexp_last(step) * keep + alpha * (1 - keep)
        return logsumexp_last(alpha + self.trans[self.end])

    def path_score(self, scores, tags, mask):
        emitted = scores.gather(dim=2, index=tags.unsqueeze(-1)).squeeze(-1)
        first = torch.full((scores.shape[0], 1), self.begin, dtype=torch.long)
        path = torch.cat([first, tags], dim=1)
        moved = self.trans[path[:, 1:], path[:, :-1]]
        last = path.gather(dim=1, index=mask.sum(1).long().unsqueeze(1)).squeeze(1)
        return ((emitted + moved) * mask).sum(1) + self.trans[self.end, last]

    def forward(self, h, mask):  # Viterbi
        scores = self.emit(h)
        B, L, C = scores.shape
        mask = mask[:, :L].float()
        back = torch.zeros(B, L, C, dtype=torch.long)
        best = torch.full((B, C), NEG)
        best[:, self.begin] = 0
        for t in range(L):
            keep = mask[:, t].unsqueeze(1)
            cand = best.unsqueeze(1) + self.trans
            cand, back[:, t, :] = cand.max(dim=-1)
            cand += scores[:, t]
            best = cand * keep + best * (1 - keep)
        best += self.trans[self.end]
        final, tag = best.max(dim=-1)
        back = back.cpu().numpy()
        paths = []
        for b in range(B):
            k = tag[b].item()
            path = [k]
            for pointers in back[b, : int(mask[b].sum().item())][::-1]:
                k = pointers[k]
                path.append(k)
            paths.append(path[::-1][1:])  # the first is <begin>
        return final, paths


class Tagger(nn.Module):
    def __init__(self, n_chars, n_tags, dim, hidden):
        super().__init__()
        self.embed = nn.Embedding(n_chars, dim)
        self.lstm = nn.LSTM(dim, hidden // 2, bidirectional=True, batch_first=True)
        self.crf = CRFHead(hidden, n_tags)

    def features(self, x):
        mask = x.gt(0)
        lengths, order = mask.sum(1).sort(descending=True)
        vectors = self.embed(x.long())[order, :]
        packed = rnn_utils.pack_padded_sequence(vectors, lengths=lengths.cpu(), batch_first=True)
        out, _ = rnn_utils.pad_packed_sequence(self.lstm(packed)[0], batch_first=True)
        _, undo = order.sort()
        return out[undo, :], mask

    def loss(self, x, y):
        h, mask = self.features(x)
        return self.crf.nll(h, y, mask)

    def forward(self, x):
        return self.crf(*self.features(x))


def read_corpus(folder, max_len):
    with open(os.path.join(folder, "vocab.json")) as f:
        chars = json.load(f)
    with open(os.path.join(folder, "tags.json")) as f:
        tags = json.load(f)
    char_id = {c: i + 1 for i, c in enumerate(chars)}  # 0 pads, len(chars) + 1 is unknown
    cache = os.path.join(folder, f"encoded_{max_len}.npz")
    if not os.path.exists(cache):
        xs, ys = [], []
        with open(os.path.join(folder, "dataset.txt"), encoding="utf8") as f:
            for line in f:
                text, labels = line.rstrip("\\n").split("\\t")
                labels = json.loads(labels)[:max_len]
                ids = [char_id.get(c, len(chars) + 1) for c in text[:max_len]]
                xs.append(ids + [0] * (max_len - len(ids)))
                ys.append([tags.index(t) for t in labels] + [0] * (max_len - len(labels)))
        np.savez(cache, xs=np.asarray(xs), ys=np.asarray(ys))
    arrays = np.load(cache)
    xs, ys = map(torch.tensor, (arrays["xs"], arrays["ys"]))
    return chars, char_id, tags, xs, ys


def mean_loss(model, loader, device):
    model.eval()
    with torch.no_grad():
        pairs = [(model.loss(xb.to(device), yb.to(device)), len(xb)) for xb, yb in loader]
    losses, sizes = zip(*pairs)
    by_numpy = np.sum(np.multiply(losses, sizes)) / np.sum(sizes)
    by_torch = torch.multiply(torch.tensor(losses), torch.tensor(sizes)).sum() / sum(sizes)
    assert abs(by_numpy.item() - by_torch.item()) < 1e-4
    return by_torch.item()


def main():
    parser = argparse.ArgumentParser(description="train a BiLSTM-CRF character tagger")
    parser.add_argument("corpus")
    parser.add_argument("--out", default="tagger")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max_len", type=int, default=50)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "args.json"), "w") as f:
        json.dump(vars(args), f)

    chars, _, tags, xs, ys = read_corpus(args.corpus, args.max_len)
    n = len(xs)
    bounds = np.cumsum([0, n // 2, n // 4, n - n // 2 - n // 4])
    parts = zip(bounds[:-1], bounds[1:])
    train_set, val_set, test_set = (TensorDataset(xs[a:b], ys[a:b]) for a, b in parts)
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model = Tagger(len(chars) + 2, len(tags), args.dim, args.hidden).to(device)
    initialize(model)
    opt = optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-4)
    best = float("inf")
    for epoch in range(args.epochs):
        model.train()
        for xb, yb in DataLoader(train_set, batch_size=args.batch):
            model.zero_grad()
            xb, yb = xb.to(device), yb.to(device)
            loss = model.loss(xb, yb)
            loss.backward()
            opt.step()
            print("epoch {:2d} loss {:5.2f}".format(epoch, loss))
            record.append(loss.item())
        val = mean_loss(model, DataLoader(val_set, batch_size=2 * args.batch), device)
        record.append(val)
        if val < best:
            best = val
            torch.save(model.state_dict(), os.path.join(args.out, "best.pth"))
    record.append(mean_loss(model, DataLoader(test_set, batch_size=2 * args.batch), device))


def spans(text, labels):
    pieces = []
    for ch, label in zip(text, labels):
        if label.startswith("B") or not pieces:
            pieces.append([ch, label[2:]])
        else:
            pieces[-1][0] += ch
    return [(word, kind) if kind else word for word, kind in pieces]


class Tagging:
    def __init__(self, out_dir):
        with open(os.path.join(out_dir, "args.json")) as f:
            self.args = argparse.Namespace(**json.load(f))
        chars, self.char_id, self.tags, _, _ = read_corpus(self.args.corpus, self.args.max_len)
        self.unknown = len(chars) + 1
        self.model = Tagger(len(chars) + 2, len(self.tags), self.args.dim, self.args.hidden)
        self.model.load_state_dict(torch.load(os.path.join(out_dir, "best.pth")))
        self.model.eval()

    def __call__(self, texts):
        ids = np.asarray([[self.char_id.get(c, self.unknown) for c in t] for t in texts])
        with torch.no_grad():
            _, paths = self.model(torch.from_numpy(ids).to(torch.device("cpu")))
        labels = [[self.tags[k] for k in path] for path in paths]
        return labels, [spans(t, ls) for t, ls in zip(texts, labels)]


if __name__ == "__main__":
    main()
"""

BI_LSTM_CRF_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
]

WORDS = ["we", "go", "to", "see", "the", "sea", "and", "rome", "paris", "oslo"]
PLACES = {"rome", "paris", "oslo"}


def write_corpus(directory, rng: np.random.Generator, count: int) -> None:
    """``vocab.json`` (the characters), ``tags.json`` and ``dataset.txt`` (lines of a sentence
    and its JSON tags split by a tab)."""
    directory.mkdir()
    (directory / "vocab.json").write_text(json.dumps(sorted(set("".join(WORDS)))))
    (directory / "tags.json").write_text(json.dumps(["B", "I", "B-LOC", "I-LOC"]))
    lines = []
    for _ in range(count):
        words = [str(w) for w in rng.choice(WORDS, int(rng.integers(2, 5)))]
        tags = []
        for w in words:
            suffix = "-LOC" if w in PLACES else ""
            tags += ["B" + suffix] + ["I" + suffix] * (len(w) - 1)
        lines.append("".join(words) + "\t" + json.dumps(tags))
    (directory / "dataset.txt").write_text("\n".join(lines) + "\n")


def test_bi_lstm_crf_tagger_trains_evaluates_and_tags_as_torch(capsys, tmp_path, monkeypatch):
    initialize, records = initializer(), []
    torch.manual_seed(414)  # torch's run draws the initial weights
    np.random.seed(414)
    for lib in (torch, rg):
        run_dir = tmp_path / lib.__name__
        run_dir.mkdir()
        write_corpus(run_dir / "corpus", np.random.default_rng(414), 12)
        out_dir = str(run_dir / "out")
        argv = ["train", str(run_dir / "corpus"), "--out", out_dir, "--epochs", "2"]
        argv += ["--batch", "3", "--lr", "0.01", "--max_len", "20", "--dim", "8", "--hidden", "12"]
        monkeypatch.setattr(sys, "argv", argv)
        record = []
        ported = ported_imports(port(BI_LSTM_CRF_SOURCE, BI_LSTM_CRF_STEPS))
        random.seed(414)
        with SharedDraws(lib, 414):
            names = run_source(
                BI_LSTM_CRF_SOURCE if lib is torch else ported,
                lib,
                record=record,
                initialize=initialize,
                __name__="__main__",
            )
            tagger = names["Tagging"](out_dir)
            record.append({k: v.detach().numpy() for k, v in tagger.model.state_dict().items()})
            for texts in (["wegotorome", "theseaoslo"], ["paris"]):  # (a batch: one length)
                labels, pieces = tagger(texts)
                record += [
                    labels,
                    [[list(p) if isinstance(p, tuple) else p for p in ps] for ps in pieces],
                ]
        records.append(record)
        assert "epoch  1 loss" in capsys.readouterr().out
    theirs, ours = records
    # 2 epochs of 2 steps and a validation, the test loss, the reloaded weights, 2 taggings
    assert len(theirs) == 2 * 3 + 1 + 1 + 4 and theirs[5] < theirs[2]  # validation falls
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
