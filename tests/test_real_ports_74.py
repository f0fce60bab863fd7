# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_73.py`` (the
harness: ``tests/real_ports.py``):

- Image GPT as minGPT's ``play_image.ipynb`` writes it (after openai/image-gpt): pixels plucked
  from uint8 HWC images by ``torch.from_numpy(np.array(x)).view(32*32, 3)[torch.randperm(...)[:5],
  :]``, k-means colour quantization (``((x[:, None, :] - c[None, :, :])**2).sum(-1).argmin(1)``,
  ``torch.stack([x[a==k].mean(0) ...])``, dead clusters re-seeded through ``torch.any(torch.isnan(c),
  dim=1)`` and ``c[nanix] = ...``), the ``ImageDataset`` turning uint8 images into int64 cluster
  ids under a fixed pixel permutation (``x[self.perm].float()``), openai's
  ``color_quantize_np`` as torch users write it (``torch.cdist(x, clusters).argmin(1)``), the
  first token's histogram ``counts[t] += 1`` handed to ``np.random.choice(..., p=prob)``, a tiny
  minGPT (``model.py``'s ``CausalSelfAttention`` with its ``tril`` mask buffer, ``Block``,
  ``GPT``; ``trainer.py``'s decay/no-decay ``AdamW`` groups and ``clip_grad_norm_``),
  ``mingpt.utils.sample`` with ``top_k_logits``, and the samples mapped back to uint8 pixels by
  ``C[pxi].view(...)`` under ``torch.argsort(perm)``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


IGPT_SOURCE = """
import math
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import Dataset, DataLoader


# -- mingpt/model.py -----------------------------------------------------------------------------
class GPTConfig:
    \"\"\" base GPT config, params common to all GPT versions \"\"\"
    embd_pdrop = 0.1
    resid_pdrop = 0.1
    attn_pdrop = 0.1

    def __init__(self, vocab_size, block_size, **kwargs):
        self.vocab_size = vocab_size
        self.block_size = block_size
        for k,v in kwargs.items():
            setattr(self, k, v)


class CausalSelfAttention(nn.Module):
    \"\"\"
    A vanilla multi-head masked self-attention layer with a projection at the end.
    It is possible to use torch.nn.MultiheadAttention here but I am including an
    explicit implementation here to show that there is nothing too scary here.
    \"\"\"

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        # regularization
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("mask", torch.tril(torch.ones(config.block_size, config.block_size))
                                     .view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head

    def forward(self, x, layer_past=None):
        B, T, C = x.size()

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)

        # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:,:,:T,:T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C) # re-assemble all head outputs side by side

        # output projection
        y = self.resid_drop(self.proj(y))
        return y


class Block(nn.Module):
    \"\"\" an unassuming Transformer block \"\"\"

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.resid_pdrop),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    \"\"\"  the full GPT language model, with a context size of block_size \"\"\"

    def __init__(self, config):
        super().__init__()

        # input embedding stem
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)
        # transformer
        self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer)])
        # decoder head
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

        self.block_size = config.block_size
        self.apply(self._init_weights)

    def get_block_size(self):
        return self.block_size

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def configure_optimizers(self, train_config):
        \"\"\"
        This long function is unfortunately doing something very simple and is being very defensive:
        We are separating out all parameters of the model into two buckets: those that will experience
        weight decay for regularization and those that won't (biases, and layernorm/embedding weights).
        We are then returning the PyTorch optimizer object.
        \"\"\"

        # separate out all parameters to those that will and won't experience regularizing weight decay
        decay = set()
        no_decay = set()
        whitelist_weight_modules = (torch.nn.Linear, )
        blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.Embedding)
        for mn, m in self.named_modules():
            for pn, p in m.named_parameters():
                fpn = '%s.%s' % (mn, pn) if mn else pn # full param name

                if pn.endswith('bias'):
                    # all biases will not be decayed
                    no_decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, whitelist_weight_modules):
                    # weights of whitelist modules will be weight decayed
                    decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, blacklist_weight_modules):
                    # weights of blacklist modules will NOT be weight decayed
                    no_decay.add(fpn)

        # special case the position embedding parameter in the root GPT module as not decayed
        no_decay.add('pos_emb')

        # validate that we considered every parameter
        param_dict = {pn: p for pn, p in self.named_parameters()}
        inter_params = decay & no_decay
        union_params = decay | no_decay
        assert len(inter_params) == 0, "parameters %s made it into both decay/no_decay sets!" % (str(inter_params), )
        assert len(param_dict.keys() - union_params) == 0, "parameters %s were not separated into either decay/no_decay set!" \\
                                                    % (str(param_dict.keys() - union_params), )

        # create the pytorch optimizer object
        optim_groups = [
            {"params": [param_dict[pn] for pn in sorted(list(decay))], "weight_decay": train_config.weight_decay},
            {"params": [param_dict[pn] for pn in sorted(list(no_decay))], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(optim_groups, lr=train_config.learning_rate, betas=train_config.betas)
        return optimizer

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, "Cannot forward, model block size is exhausted."

        # forward the GPT model
        token_embeddings = self.tok_emb(idx) # each index maps to a (learnable) vector
        position_embeddings = self.pos_emb[:, :t, :] # each position maps to a (learnable) vector
        x = self.drop(token_embeddings + position_embeddings)
        x = self.blocks(x)
        x = self.ln_f(x)
        logits = self.head(x)

        # if we are given some desired targets also calculate the loss
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

        return logits, loss


# -- mingpt/utils.py -----------------------------------------------------------------------------
def top_k_logits(logits, k):
    v, ix = torch.topk(logits, k)
    out = logits.clone()
    out[out < v[:, [-1]]] = -float('Inf')
    return out


@torch.no_grad()
def sample(model, x, steps, temperature=1.0, sample=False, top_k=None):
    \"\"\"
    take a conditioning sequence of indices in x (of shape (b,t)) and predict the next token in
    the sequence, feeding the predictions back into the model each time. Clearly the sampling
    has quadratic complexity unlike an RNN that is only linear, and has a finite context window
    of block_size, unlike an RNN that has an infinite context window.
    \"\"\"
    block_size = model.get_block_size()
    model.eval()
    for k in range(steps):
        x_cond = x if x.size(1) <= block_size else x[:, -block_size:] # crop context if needed
        logits, _ = model(x_cond)
        # pluck the logits at the final step and scale by temperature
        logits = logits[:, -1, :] / temperature
        # optionally crop probabilities to only the top k options
        if top_k is not None:
            logits = top_k_logits(logits, top_k)
        # apply softmax to convert to probabilities
        probs = F.softmax(logits, dim=-1)
        # sample from the distribution or take the most likely
        if sample:
            ix = torch.multinomial(probs, num_samples=1)
        else:
            _, ix = torch.topk(probs, k=1, dim=-1)
        # append to the sequence and continue
        x = torch.cat((x, ix), dim=1)

    return x


# -- play_image.ipynb ------------------------------------------------------------------------------
def kmeans(x, ncluster, niter=10):
    N, D = x.size()
    c = x[torch.randperm(N)[:ncluster]] # init clusters at random
    for i in range(niter):
        # assign all pixels to the closest codebook element
        a = ((x[:, None, :] - c[None, :, :])**2).sum(-1).argmin(1)
        # move each codebook element to be the mean of the pixels that assigned to it
        c = torch.stack([x[a==k].mean(0) for k in range(ncluster)])
        # re-assign any poorly positioned codebook elements
        nanix = torch.any(torch.isnan(c), dim=1)
        ndead = nanix.sum().item()
        print('done step %d/%d, re-initialized %d dead clusters' % (i+1, niter, ndead))
        c[nanix] = x[torch.randperm(N)[:ndead]] # re-init dead clusters
    return c


class ImageDataset(Dataset):
    \"\"\"
    wrap up the pytorch CIFAR-10 dataset into our own, which will convert images into sequences of integers
    \"\"\"

    def __init__(self, pt_dataset, clusters, perm=None):
        self.pt_dataset = pt_dataset
        self.clusters = clusters
        self.perm = torch.arange(S*S) if perm is None else perm

        self.vocab_size = clusters.size(0)
        self.block_size = S*S - 1

    def __len__(self):
        return len(self.pt_dataset)

    def __getitem__(self, idx):
        x, y = self.pt_dataset[idx]
        x = torch.from_numpy(np.array(x)).view(-1, 3) # flatten out all pixels
        x = x[self.perm].float() # reshuffle pixels with any fixed permutation and -> float
        a = ((x[:, None, :] - self.clusters[None, :, :])**2).sum(-1).argmin(1) # cluster assignments
        return a[:-1], a[1:] # always just predict the next one in the sequence


def color_quantize(x, clusters):
    # openai/image-gpt's color_quantize_np, in torch
    x = x.reshape(-1, 3)
    d = torch.cdist(x, clusters)
    return torch.argmin(d, dim=1)


def main(train_data, test_data, ncluster=6, max_epochs=2, batch_size=2, learning_rate=3e-3, n_samples=2):
    # get random 5 pixels per image and stack them all up as rgb values to get half a million random pixels
    pluck_rgb = lambda x: torch.from_numpy(np.array(x)).view(S*S, 3)[torch.randperm(S*S)[:5], :]
    px = torch.cat([pluck_rgb(x) for x, y in train_data], dim=0).float()
    print(px.size())

    with torch.no_grad():
        C = kmeans(px, ncluster, niter=4)
    record.append(C.numpy().copy())

    # encode the training examples with our codebook to visualize how much we've lost in the discretization
    n_samples = n_samples
    ncol = 2
    for i in range(n_samples):
        # encode and decode random data
        x, y = train_data[np.random.randint(0, len(train_data))]
        xpt = torch.from_numpy(np.array(x)).float().view(S*S, 3)
        ix = ((xpt[:, None, :] - C[None, :, :])**2).sum(-1).argmin(1) # cluster assignments for each pixel
        record.append(ix.numpy().copy())
        # openai/image-gpt quantizes by the same distances
        assert torch.equal(color_quantize(xpt, C), ix)
        decoded = C[ix].view(S, S, 3).numpy().astype(np.uint8)
        record.append(decoded.astype(np.int64))

    train_dataset = ImageDataset(train_data, C)
    test_dataset = ImageDataset(test_data, C)
    record.append(train_dataset[0][0].numpy().copy())

    mconf = GPTConfig(train_dataset.vocab_size, train_dataset.block_size,
                      embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0,
                      n_layer=2, n_head=2, n_embd=8)
    model = GPT(mconf)
    initialize(model)

    class TrainerConfig:
        weight_decay = 0.0
        betas = (0.9, 0.95)
        grad_norm_clip = 1.0
    tconf = TrainerConfig()
    tconf.learning_rate = learning_rate
    tconf.weight_decay = 0.01
    optimizer = model.configure_optimizers(tconf)

    # mingpt/trainer.py's run_epoch
    for epoch in range(max_epochs):
        model.train(True)
        loader = DataLoader(train_dataset, shuffle=False, pin_memory=True, batch_size=batch_size, num_workers=0)
        for it, (x, y) in enumerate(loader):
            with torch.set_grad_enabled(True):
                logits, loss = model(x, y)
                loss = loss.mean() # collapse all losses if they are scattered on multiple gpus
            model.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tconf.grad_norm_clip)
            optimizer.step()
            record.append(loss.item())
            print(f"epoch {epoch+1} iter {it}: train loss {loss.item():.5f}.")
        model.train(False)
        losses = []
        for it, (x, y) in enumerate(DataLoader(test_dataset, shuffle=False, batch_size=batch_size)):
            with torch.set_grad_enabled(False):
                logits, loss = model(x, y)
            losses.append(loss.item())
        record.append(float(np.mean(losses)))
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

    # to sample we also have to technically "train" a separate model for the first token in the sequence
    # we are going to do so below simply by calculating and normalizing the histogram of the first token
    counts = torch.ones(ncluster) # start counts as 1 not zero, this is called "smoothing"
    rp = torch.randperm(len(train_dataset))
    nest = len(train_dataset) # how many images to use for the estimation
    for i in range(nest):
        a, _ = train_dataset[int(rp[i])]
        t = a[0].item() # index of first token in the sequence
        counts[t] += 1
    prob = counts/counts.sum()
    record.append(prob.numpy().copy())

    start_pixel = np.random.choice(np.arange(C.size(0)), size=(n_samples, 1), replace=True, p=prob)
    start_pixel = torch.from_numpy(start_pixel)
    pixels = sample(model, start_pixel, S*S-1, temperature=1.0, sample=True, top_k=4)
    record.append(pixels.numpy().copy())

    # for visualization we have to invert the permutation used to produce the pixels
    iperm = torch.argsort(train_dataset.perm)
    for i in range(n_samples):
        pxi = pixels[i][iperm] # note: undo the encoding permutation
        record.append(C[pxi].view(S, S, 3).numpy().astype(np.uint8).astype(np.int64))
"""

IGPT_STEPS = [
    ("import numpy as np\nimport torch\n", "import numpy as np\nimport retrograd as torch\n"),
    (
        "import torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd.nn as nn\nfrom retrograd.nn import functional as F\n",
    ),
    (
        "            model.zero_grad()\n            loss.backward()\n            torch.nn.utils.clip_grad_norm_(model.parameters(), tconf.grad_norm_clip)\n            optimizer.step()\n",
        "            model.zero_grad()\n            grads = loss.backward()\n            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), tconf.grad_norm_clip)\n            optimizer.step(grads)\n",
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
    assert "re-initialized 2 dead clusters" in logs[0]
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
