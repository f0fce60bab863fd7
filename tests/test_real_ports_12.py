"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of yunjey/pytorch-tutorial's image captioning (a CNN encoder feeding an LSTM decoder),
with a small CNN for the ResNet, run under torch and, ported, under retrograd.

Its surface: ``list(cnn.children())[:-1]`` into a new ``nn.Sequential``, features under
``torch.no_grad()``, ``BatchNorm1d(momentum=0.01)``, a collate function sorting by caption
length and filling ``torch.zeros(...).long()`` row by row, ``pack_padded_sequence(captions,
lengths, batch_first=True)[0]`` as the targets, an LSTM over a ``PackedSequence`` whose
``[0]`` feeds the classifier, Adam over the decoder and the encoder's last layers only,
``zero_grad`` on both modules, a log line by ``"{:.4f}".format`` with ``np.exp(loss.item())``,
and greedy sampling with ``outputs.max(1)`` and ``torch.stack(ids, 1)`` in eval mode.

It runs unchanged but for the gradient lines; ``random_split`` by fractions is checked beside
it (its sizes and disjointness; the permutation is the library's own generator's).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

CAPTIONS_SOURCE = """
from torch.nn.utils import rnn as rnn_utils

class ImageFeatures(nn.Module):
    def __init__(self, size):
        super().__init__()
        backbone = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
            nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(6, 6),
        )
        self.frozen = nn.Sequential(*list(backbone.children())[:-1])  # its classifier dropped
        self.project = nn.Linear(6, size)
        self.norm = nn.BatchNorm1d(size, momentum=0.01)

    def forward(self, images):
        with torch.no_grad():  # the backbone is not trained
            pooled = self.frozen(images)
        return self.norm(self.project(pooled.reshape(pooled.size(0), -1)))

class CaptionLSTM(nn.Module):
    def __init__(self, size, hidden, vocab, layers, longest=20):
        super().__init__()
        self.words = nn.Embedding(vocab, size)
        self.lstm = nn.LSTM(size, hidden, layers, batch_first=True)
        self.scores = nn.Linear(hidden, vocab)
        self.longest = longest

    def forward(self, image_vec, captions, lengths):
        # the image is the first "word" of every caption
        steps = torch.cat((image_vec.unsqueeze(1), self.words(captions)), 1)
        packed_out, _ = self.lstm(rnn_utils.pack_padded_sequence(steps, lengths, batch_first=True))
        return self.scores(packed_out[0])

    def greedy(self, image_vec, state=None):
        picked, step_in = [], image_vec.unsqueeze(1)
        for _ in range(self.longest):
            out, state = self.lstm(step_in, state)
            _, best = self.scores(out.squeeze(1)).max(1)
            picked.append(best)
            step_in = self.words(best).unsqueeze(1)
        return torch.stack(picked, 1)

def batch_of(pairs):
    pairs.sort(key=lambda pair: len(pair[1]), reverse=True)  # packing wants the longest first
    images, captions = zip(*pairs)
    lengths = [len(c) for c in captions]
    padded = torch.zeros(len(captions), max(lengths)).long()
    for row, c in enumerate(captions):
        padded[row, :lengths[row]] = c[:lengths[row]]
    return torch.stack(images, 0), padded, lengths

def main(pairs, state=None):
    encoder, decoder = ImageFeatures(5), CaptionLSTM(5, 8, 10, 2, longest=4)
    if state is not None:
        encoder.load_state_dict(state[0])
        decoder.load_state_dict(state[1])
    start = tuple(
        {k: v.numpy().copy() for k, v in m.state_dict().items()} for m in (encoder, decoder)
    )
    loss_fn = nn.CrossEntropyLoss()
    trained = list(decoder.parameters())
    trained += list(encoder.project.parameters()) + list(encoder.norm.parameters())
    opt = torch.optim.Adam(trained, lr=1e-3)
    batches = [batch_of(list(pairs[i:i + 3])) for i in range(0, len(pairs), 3)]
    log = []
    for epoch in range(2):
        for i, (images, captions, lengths) in enumerate(batches):
            targets = rnn_utils.pack_padded_sequence(captions, lengths, batch_first=True)[0]
            loss = loss_fn(decoder(encoder(images), captions, lengths), targets)
            decoder.zero_grad()
            encoder.zero_grad()
            loss.backward()
            opt.step()
            line = "epoch {} batch {}/{}: loss {:.4f}, perplexity {:.4f}"
            log.append(line.format(epoch, i, len(batches), loss.item(), np.exp(loss.item())))
            log.append(loss.item())
    encoder.eval()
    log.append(decoder.greedy(encoder(batches[0][0])).tolist())
    named = list(encoder.named_parameters()) + list(decoder.named_parameters())
    log.append({n: p.detach().numpy().copy() for n, p in named})
    return start, log
"""

CAPTIONS_STEP = [
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
    )
]


def test_cnn_lstm_image_captioning_matches_torch():
    rng = np.random.default_rng(0)
    raw = [
        (rng.standard_normal((3, 5, 5)), rng.integers(1, 10, rng.integers(2, 5))) for _ in range(6)
    ]
    theirs, ours = both(CAPTIONS_SOURCE, CAPTIONS_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        samples = [(lib.tensor(a, dtype=lib.float32), lib.tensor(c)) for a, c in raw]
        initial, out = names["main"](samples, initial)
        records.append(out)
    logs = [[r for r in out if isinstance(r, str)] for out in records]
    assert logs[1] == logs[0]  # the training log's lines, to four decimals
    numbers = [[r for r in out if not isinstance(r, str)] for out in records]
    # the projection's bias shifts each feature before a batch norm in training mode, which
    # takes the shift out again: its true gradient is zero and Adam's steps follow the rounding
    assert_records_agree(numbers[1], numbers[0], rtol=1e-5, atol=1e-6, skip={"project.bias"})


def test_random_split_by_fractions_as_torch_sizes_them():
    for lengths in ([0.7, 0.2, 0.1], [0.5, 0.5], [0.34, 0.33, 0.33]):
        got, expected = [], []
        for lib, sizes in ((rg, got), (torch, expected)):
            dataset = lib.utils.data.TensorDataset(lib.arange(10), lib.arange(10) * 2)
            parts = lib.utils.data.random_split(
                dataset, lengths, generator=lib.Generator().manual_seed(42)
            )
            sizes.append([len(p) for p in parts])
            indices = sorted(int(x) for p in parts for x, _ in p)
            assert indices == list(range(10))
        assert got == expected
