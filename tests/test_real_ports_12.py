# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- image captioning as yunjey/pytorch-tutorial writes it (``tutorials/03-advanced/
  image_captioning``: ``model.py``, ``data_loader.py``'s ``collate_fn``, ``train.py``,
  ``sample.py``), a small CNN for the ResNet: ``list(resnet.children())[:-1]`` into a new
  ``nn.Sequential``, features under ``torch.no_grad()``, ``BatchNorm1d(momentum=0.01)``, the
  ``collate_fn`` sorting by caption length and filling ``torch.zeros(...).long()`` row by row,
  ``pack_padded_sequence(captions, lengths, batch_first=True)[0]`` as the targets, an LSTM
  over a ``PackedSequence`` whose ``hiddens[0]`` feeds the classifier, Adam over the decoder
  and the encoder's last layers only, ``zero_grad`` on both modules, the log line's
  ``'{:.4f}'.format`` and ``np.exp(loss.item())``, and greedy ``sample`` with
  ``outputs.max(1)`` and ``torch.stack(sampled_ids, 1)`` in eval mode.

It ran unchanged but for the gradient lines; ``random_split`` by fractions is checked beside
it (its sizes and disjointness; the permutation is the library's own generator's).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

CAPTIONS_SOURCE = '''
from torch.nn.utils.rnn import pack_padded_sequence

class EncoderCNN(nn.Module):
    def __init__(self, embed_size):
        """Load the pretrained ResNet-152 and replace top fc layer."""
        super(EncoderCNN, self).__init__()
        resnet = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(8, 8))
        modules = list(resnet.children())[:-1]      # delete the last fc layer.
        self.resnet = nn.Sequential(*modules)
        self.linear = nn.Linear(8, embed_size)
        self.bn = nn.BatchNorm1d(embed_size, momentum=0.01)
    def forward(self, images):
        """Extract feature vectors from input images."""
        with torch.no_grad():
            features = self.resnet(images)
        features = features.reshape(features.size(0), -1)
        features = self.bn(self.linear(features))
        return features

class DecoderRNN(nn.Module):
    def __init__(self, embed_size, hidden_size, vocab_size, num_layers, max_seq_length=20):
        """Set the hyper-parameters and build the layers."""
        super(DecoderRNN, self).__init__()
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.lstm = nn.LSTM(embed_size, hidden_size, num_layers, batch_first=True)
        self.linear = nn.Linear(hidden_size, vocab_size)
        self.max_seg_length = max_seq_length
    def forward(self, features, captions, lengths):
        """Decode image feature vectors and generates captions."""
        embeddings = self.embed(captions)
        embeddings = torch.cat((features.unsqueeze(1), embeddings), 1)
        packed = pack_padded_sequence(embeddings, lengths, batch_first=True)
        hiddens, _ = self.lstm(packed)
        outputs = self.linear(hiddens[0])
        return outputs
    def sample(self, features, states=None):
        """Generate captions for given image features using greedy search."""
        sampled_ids = []
        inputs = features.unsqueeze(1)
        for i in range(self.max_seg_length):
            hiddens, states = self.lstm(inputs, states)          # hiddens: (batch_size, 1, hidden_size)
            outputs = self.linear(hiddens.squeeze(1))            # outputs:  (batch_size, vocab_size)
            _, predicted = outputs.max(1)                        # predicted: (batch_size)
            sampled_ids.append(predicted)
            inputs = self.embed(predicted)                       # inputs: (batch_size, embed_size)
            inputs = inputs.unsqueeze(1)                         # inputs: (batch_size, 1, embed_size)
        sampled_ids = torch.stack(sampled_ids, 1)                # sampled_ids: (batch_size, max_seq_length)
        return sampled_ids

def collate_fn(data):
    data.sort(key=lambda x: len(x[1]), reverse=True)
    images, captions = zip(*data)
    images = torch.stack(images, 0)
    lengths = [len(cap) for cap in captions]
    targets = torch.zeros(len(captions), max(lengths)).long()
    for i, cap in enumerate(captions):
        end = lengths[i]
        targets[i, :end] = cap[:end]
    return images, targets, lengths

def main(samples, state=None):
    encoder = EncoderCNN(6)
    decoder = DecoderRNN(6, 10, 12, 2, max_seq_length=5)
    if state is not None:
        encoder.load_state_dict(state[0]); decoder.load_state_dict(state[1])
    init = tuple({k: np.array(v.numpy() if hasattr(v, 'numpy') else v, copy=True) for k, v in m.state_dict().items()} for m in (encoder, decoder))
    criterion = nn.CrossEntropyLoss()
    params = list(decoder.parameters()) + list(encoder.linear.parameters()) + list(encoder.bn.parameters())
    optimizer = torch.optim.Adam(params, lr=1e-3)
    data_loader = [collate_fn(list(samples[i:i + 3])) for i in range(0, len(samples), 3)]
    total_step = len(data_loader)
    records = []
    for epoch in range(2):
        for i, (images, captions, lengths) in enumerate(data_loader):
            targets = pack_padded_sequence(captions, lengths, batch_first=True)[0]
            features = encoder(images)
            outputs = decoder(features, captions, lengths)
            loss = criterion(outputs, targets)
            decoder.zero_grad()
            encoder.zero_grad()
            loss.backward()
            optimizer.step()
            records.append('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}, Perplexity: {:5.4f}'.format(epoch, 2, i, total_step, loss.item(), np.exp(loss.item())))
            records.append(loss.item())
    encoder.eval()
    feature = encoder(data_loader[0][0])
    sampled_ids = decoder.sample(feature)
    records.append(sampled_ids.tolist())
    records.append({n: p.detach().numpy().copy() for n, p in list(encoder.named_parameters()) + list(decoder.named_parameters())})
    return init, records
'''

CAPTIONS_STEP = [
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
    )
]


def test_yunjey_image_captioning_matches_torch():
    rng = np.random.default_rng(0)
    raw = [
        (rng.standard_normal((3, 6, 6)), rng.integers(1, 12, rng.integers(2, 6))) for _ in range(6)
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
    assert_records_agree(numbers[1], numbers[0], rtol=1e-5, atol=1e-6)


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
