"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_73.py`` (the
harness: ``tests/real_ports.py``):

- a program written here in the style of minGPT's image-GPT notebook (after openai/image-gpt):
  pixels plucked from uint8 HWC images by ``torch.from_numpy(np.array(img)).view(S*S, 3)[
  torch.randperm(...)[:5], :]``, k-means colour quantization (``((x[:, None, :] - c[None, :,
  :])**2).sum(-1).argmin(1)``, ``torch.stack([x[a == k].mean(0) ...])``, dead clusters re-seeded
  through ``torch.any(torch.isnan(c), dim=1)`` and ``c[dead] = ...``), a ``Dataset`` turning
  uint8 images into int64 cluster ids under a fixed pixel permutation (``x[self.perm].float()``),
  quantization by ``torch.cdist(x, clusters).argmin(1)``, the first token's histogram ``counts[t]
  += 1`` handed to ``np.random.choice(..., p=prob)``, a tiny GPT (masked self-attention with a
  ``tril`` mask buffer, ``masked_fill(... == 0, float('-inf'))``, blocks, ``apply`` of an init
  through ``.data.normal_``/``zero_``/``fill_``; decay/no-decay ``AdamW`` groups from
  ``named_modules``/``named_parameters``; ``clip_grad_norm_``; ``torch.set_grad_enabled``),
  top-k sampling (``out[out < v[:, [-1]]] = -float('Inf')``, ``torch.multinomial``), and the
  samples mapped back to uint8 pixels by ``C[pxi].view(...)`` under ``torch.argsort(perm)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

IGPT_SOURCE = """
import math
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Settings:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class MaskedSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.width % cfg.heads == 0
        self.heads = cfg.heads
        self.q, self.k, self.v = (nn.Linear(cfg.width, cfg.width) for _ in range(3))
        self.out = nn.Linear(cfg.width, cfg.width)
        self.attn_dropout, self.out_dropout = nn.Dropout(cfg.dropout), nn.Dropout(cfg.dropout)
        n = cfg.context
        # position i may look at positions up to i only
        self.register_buffer("mask", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, h):
        B, T, C = h.size()

        def heads(t):
            return t.view(B, T, self.heads, C // self.heads).transpose(1, 2)

        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        scores = scores.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        attention = self.attn_dropout(F.softmax(scores, dim=-1))
        mixed = (attention @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.out_dropout(self.out(mixed))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm_a, self.norm_b = nn.LayerNorm(cfg.width), nn.LayerNorm(cfg.width)
        self.attend = MaskedSelfAttention(cfg)
        self.ff = nn.Sequential(nn.Linear(cfg.width, 4 * cfg.width), nn.GELU(),
                                nn.Linear(4 * cfg.width, cfg.width), nn.Dropout(cfg.dropout))

    def forward(self, h):
        h = h + self.attend(self.norm_a(h))
        return h + self.ff(self.norm_b(h))


class PixelGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.context = cfg.context
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        self.positions = nn.Parameter(torch.zeros(1, cfg.context, cfg.width))
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.Sequential(*[Layer(cfg) for _ in range(cfg.depth)])
        self.norm = nn.LayerNorm(cfg.width)
        self.unembed = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.data.zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.data.fill_(1.0)
            m.bias.data.zero_()

    def optimizer(self, lr, weight_decay, betas):
        # decay the weights of Linear layers only; biases, norms, embeddings and positions not
        decayed, kept = set(), {"positions"}
        for module_name, module in self.named_modules():
            for name, _ in module.named_parameters():
                full = "%s.%s" % (module_name, name) if module_name else name
                if name.endswith("weight") and isinstance(module, nn.Linear):
                    decayed.add(full)
                elif name.endswith("bias") or isinstance(module, (nn.LayerNorm, nn.Embedding)):
                    kept.add(full)
        params = dict(self.named_parameters())
        assert not decayed & kept and params.keys() == decayed | kept
        groups = [{"params": [params[n] for n in sorted(decayed)], "weight_decay": weight_decay},
                  {"params": [params[n] for n in sorted(kept)], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas)

    def forward(self, ids, targets=None):
        t = ids.size(1)
        assert t <= self.context
        h = self.drop(self.embed(ids) + self.positions[:, :t, :])
        logits = self.unembed(self.norm(self.layers(h)))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def keep_top_k(logits, k):
    v, _ = torch.topk(logits, k)
    out = logits.clone()
    out[out < v[:, [-1]]] = -float("Inf")
    return out


@torch.no_grad()
def generate(model, ids, n_new, temperature=1.0, draw=False, top_k=None):
    model.eval()
    for _ in range(n_new):
        window = ids if ids.size(1) <= model.context else ids[:, -model.context:]
        logits = model(window)[0][:, -1, :] / temperature
        if top_k is not None:
            logits = keep_top_k(logits, top_k)
        probs = F.softmax(logits, dim=-1)  # over the kept tokens only
        if draw:
            nxt = torch.multinomial(probs, num_samples=1)
        else:
            _, nxt = torch.topk(probs, k=1, dim=-1)
        ids = torch.cat((ids, nxt), dim=1)
    return ids


def nearest(pixels, centres):
    return ((pixels[:, None, :] - centres[None, :, :]) ** 2).sum(-1).argmin(1)


def kmeans(pixels, k, rounds):
    n = pixels.size(0)
    centres = pixels[torch.randperm(n)[:k]]
    for r in range(rounds):
        owner = nearest(pixels, centres)
        centres = torch.stack([pixels[owner == j].mean(0) for j in range(k)])
        dead = torch.any(torch.isnan(centres), dim=1)  # clusters nobody chose: mean of nothing
        n_dead = dead.sum().item()
        print("round %d/%d: %d dead clusters reseeded" % (r + 1, rounds, n_dead))
        centres[dead] = pixels[torch.randperm(n)[:n_dead]]
    return centres


class QuantizedImages(Dataset):
    def __init__(self, images, centres, perm=None):
        self.images, self.centres = images, centres
        self.perm = torch.arange(S * S) if perm is None else perm
        self.vocab, self.context = centres.size(0), S * S - 1

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img, _ = self.images[i]
        flat = torch.from_numpy(np.array(img)).view(-1, 3)[self.perm].float()
        ids = nearest(flat, self.centres)
        return ids[:-1], ids[1:]


def main(train_data, test_data, k=6, epochs=2, batch_size=2, lr=3e-3, n_samples=2):
    def some_pixels(img):
        return torch.from_numpy(np.array(img)).view(S * S, 3)[torch.randperm(S * S)[:5], :]

    pixels = torch.cat([some_pixels(img) for img, _ in train_data], dim=0).float()
    print(pixels.size())
    with torch.no_grad():
        C = kmeans(pixels, k, rounds=4)
    record.append(C.numpy().copy())  # the palette

    for _ in range(n_samples):  # how much the palette loses: encode and decode an image
        img, _ = train_data[np.random.randint(0, len(train_data))]
        flat = torch.from_numpy(np.array(img)).float().view(S * S, 3)
        ids = nearest(flat, C)
        assert torch.equal(torch.cdist(flat.reshape(-1, 3), C).argmin(1), ids)
        record.append(ids.numpy().copy())
        record.append(C[ids].view(S, S, 3).numpy().astype(np.uint8).astype(np.int64))

    train_set, test_set = QuantizedImages(train_data, C), QuantizedImages(test_data, C)
    record.append(train_set[0][0].numpy().copy())
    cfg = Settings(vocab=train_set.vocab, context=train_set.context, width=8, heads=2, depth=2,
                   dropout=0.0)
    model = PixelGPT(cfg)
    initialize(model)
    optimizer = model.optimizer(lr, weight_decay=0.01, betas=(0.9, 0.95))
    for epoch in range(epochs):
        model.train(True)
        loader = DataLoader(train_set, shuffle=False, pin_memory=True, batch_size=batch_size,
                            num_workers=0)
        for it, (inputs, targets) in enumerate(loader):
            with torch.set_grad_enabled(True):  # as a trainer shared with evaluation writes it
                loss = model(inputs, targets)[1].mean()
            model.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            record.append(loss.item())
            print(f"epoch {epoch + 1} step {it}: loss {loss.item():.5f}")
        model.train(False)
        with torch.set_grad_enabled(False):  # evaluation
            held = [model(x, y)[1].item() for x, y in DataLoader(test_set, batch_size=batch_size)]
        record.append(float(np.mean(held)))
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})

    # the first token has no context: draw it from its smoothed histogram over the training set
    counts = torch.ones(k)
    order = torch.randperm(len(train_set))
    for i in range(len(train_set)):
        first = train_set[int(order[i])][0][0].item()
        counts[first] += 1
    prob = counts / counts.sum()
    record.append(prob.numpy().copy())  # sixteenths: sums to 1 exactly
    starts = np.random.choice(np.arange(C.size(0)), size=(n_samples, 1), replace=True, p=prob)
    drawn = generate(model, torch.from_numpy(starts), S * S - 1, draw=True, top_k=4)
    record.append(drawn.numpy().copy())
    unshuffle = torch.argsort(train_set.perm)
    for row in drawn:
        record.append(C[row[unshuffle]].view(S, S, 3).numpy().astype(np.uint8).astype(np.int64))
"""

IGPT_STEPS = [
    ("import numpy as np\nimport torch\n", "import numpy as np\nimport retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "            optimizer.step()\n",
        "            grads = loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n"
        "            optimizer.step(grads)\n",
    ),
]


class SharedRandperm:
    """``torch.randperm`` and ``torch.multinomial(probs, 1)`` of a library drawing from one
    seeded stream (``multinomial`` as the inverse of the rows' cumulative sums)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, **_):
            return lib.tensor(rng.permutation(n), dtype=lib.int64)

        def multinomial(probs, num_samples, replacement=False, generator=None):
            rows = np.asarray(probs.detach().numpy(), dtype=np.float64)
            cumulative = np.cumsum(rows / rows.sum(-1, keepdims=True), -1)
            draws = rng.uniform(size=(rows.shape[0], 1))
            picks = (cumulative < draws).sum(-1, keepdims=True)
            return lib.tensor(np.minimum(picks, rows.shape[-1] - 1), dtype=lib.int64)

        self.saved = lib.randperm, lib.multinomial
        lib.randperm, lib.multinomial = randperm, multinomial
        return self

    def __exit__(self, *exc):
        self.lib.randperm, self.lib.multinomial = self.saved
        return False


def test_image_gpt_quantizes_uint8_pixels_trains_and_samples_as_torch(capsys):
    rng = np.random.default_rng(7401)
    side = 3
    palette = rng.integers(0, 256, (4, 3))

    def image():  # painted from fewer colours than clusters: some clusters die (NaN means)
        return palette[rng.integers(0, 4, (side, side))].astype(np.uint8)

    # 6 clusters' counts of 1 plus 10 first tokens: probabilities in sixteenths, which float32
    # sums to 1 exactly, as np.random.choice requires
    train_data = [(image(), 0) for _ in range(10)]
    test_data = [(image(), 0) for _ in range(2)]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        np.random.seed(7402)
        text = (
            IGPT_SOURCE
            if lib is torch
            else port(IGPT_SOURCE, IGPT_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib, record=record, initialize=initialize, S=side)
        with SharedRandperm(lib, 7403):
            names["main"](train_data, test_data, batch_size=5)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].startswith("torch.Size([50, 3])\n")
    assert logs[1] == logs[0].replace("torch.", "retrograd.")
    assert "2 dead clusters reseeded" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_a_list_of_numpy_uint8_or_int32_scalars_keeps_their_dtype_as_torch():
    # ``torch.tensor([img[y, x, c] for ...])`` or a list of a dataset's np.uint8 labels
    cases = [
        [np.uint8(3), np.uint8(250)],
        [[np.int32(-1)], [np.int32(2)]],
        [np.uint8(3), True],
        [np.uint8(3), np.int32(4)],
        [np.array([1, 2], np.uint8), np.array([3, 4], np.uint8)],
        [np.uint8(3), 4],  # a Python int counts as int64
        [np.int32(3), 2**40],
        [rg.tensor(5, dtype=rg.uint8), np.uint8(6)],
    ]
    for data in cases:
        torch_data = [
            torch.tensor(5, dtype=torch.uint8) if isinstance(v, rg.Tensor) else v for v in data
        ]
        expected = torch.tensor(np.array(torch_data)).numpy()
        assert torch.tensor(torch_data).numpy().dtype == expected.dtype
        got = rg.tensor(data).numpy()
        assert got.dtype == expected.dtype, (data, got.dtype, expected.dtype)
        np.testing.assert_array_equal(got, expected)


def test_bucketize_and_searchsorted_give_int32_indices_with_out_int32_as_torch():
    # quantizers bucket values into int32 codes: ``torch.bucketize(x, edges, out_int32=True)``
    values = np.array([[0.1, 2.0, 7.0], [5.0, 1.0, -3.0]], dtype=np.float32)
    edges = np.array([1.0, 2.0, 5.0], dtype=np.float32)
    for right in (False, True):
        for out_int32 in (False, True):
            expected = [
                torch.bucketize(
                    torch.from_numpy(values),
                    torch.from_numpy(edges),
                    out_int32=out_int32,
                    right=right,
                ),
                torch.searchsorted(
                    torch.from_numpy(edges),
                    torch.from_numpy(values),
                    out_int32=out_int32,
                    right=right,
                ),
                torch.bucketize(torch.tensor(2.0), torch.from_numpy(edges), out_int32=out_int32),
            ]
            got = [
                rg.bucketize(rg.tensor(values), rg.tensor(edges), out_int32=out_int32, right=right),
                rg.searchsorted(
                    rg.tensor(edges), rg.tensor(values), out_int32=out_int32, right=right
                ),
                rg.bucketize(rg.tensor(2.0), rg.tensor(edges), out_int32=out_int32),
            ]
            for mine, theirs in zip(got, expected):
                assert mine.numpy().dtype == theirs.numpy().dtype
                np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_repeat_interleave_of_int32_counts_alone_gives_int32_indices_as_torch():
    counts = np.array([2, 0, 3], dtype=np.int32)
    expected = torch.repeat_interleave(torch.from_numpy(counts)).numpy()
    got = rg.repeat_interleave(rg.from_numpy(counts)).numpy()
    assert got.dtype == expected.dtype == np.int32
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(rg.errors.DTypeError, match="repeat_interleave"):  # torch refuses Byte
        rg.repeat_interleave(rg.tensor([1, 2], dtype=rg.uint8))
