"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of the three ``torch.func`` tutorials of pytorch/tutorials (per-sample gradients, model
ensembling, Jacobians and Hessians) and of GPT-2 era sampling code.

- per-sample gradients: a loop of ``torch.autograd.grad(loss, list(model.parameters()))``
  regrouped by ``zip(*...)`` and ``torch.stack``, against ``vmap(grad(loss_fn), in_dims=(None,
  None, 0, 0))`` over ``functional_call(model, (params, buffers), (x,))`` with ``params =
  {k: v.detach() for k, v in model.named_parameters()}``: a dict of gradients comes back,
  stacked per name;
- ensembling: ``stack_module_state(models)``, ``copy.deepcopy(models[0]).to("meta")`` as the
  stateless base, ``vmap(fmodel)`` over different minibatches and ``vmap(fmodel, in_dims=(0,
  0, None))`` over one, checked against the loop of models; then the stacked parameters
  (leaves that require grad) trained by Adam through the vmapped ensemble;
- Jacobians and Hessians: rows of ``autograd.grad`` with unit vectors, ``vmap(vjp_fn)(basis)``,
  ``jacrev(f, argnums=2)`` and ``argnums=(0, 1)``, ``jacfwd``, ``hessian`` and
  ``jacfwd(jacfwd(...))``/``jacrev(jacrev(...))``, batch Jacobians and Hessians by
  ``vmap(jacrev(...), in_dims=(None, None, 0))`` and by summing the output and ``movedim(1,
  0)``, Hessian-vector products by ``jvp(grad(f), ...)`` and ``vjp(grad(f), ...)``;
- sampling: top-k and nucleus filtering (``logits[mask] = -inf``, the boolean shift
  ``drop[..., 1:] = drop[..., :-1].clone()``, ``scatter`` of a boolean source back to
  vocabulary order) in a ``@torch.no_grad()`` generation loop with a KV cache
  (``torch.cat((past_k, k), dim=-2)``, ``scaled_dot_product_attention(is_causal=cache is
  None)``, positions from ``caches[0][0].size(-2)``, a tied output layer,
  ``torch.multinomial``, greedy ``argmax``); the cached decoding is checked against the full
  recomputation. It runs unchanged.

The regressions guarded: ``vmap`` took tensors only, so a dict argument (``params``) or a dict
result (``grad`` of a dict) failed; it maps and stacks pytrees (tuples, lists, dicts) leaf by
leaf, as torch's. And ``torch.func.stack_module_state`` was missing.
"""

from __future__ import annotations

import copy
from functools import partial

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both
from test_real_ports_13 import SharedDraws

PER_SAMPLE_SOURCE = """
from torch.func import functional_call, grad, vmap


class DigitNet(nn.Module):
    def __init__(self):
        super(DigitNet, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Conv2d(3, 6, 3), nn.ReLU()
        )
        self.fc = nn.Linear(6 * 3 * 3, 12)
        self.out = nn.Linear(12, 10)

    def forward(self, x):
        x = F.max_pool2d(self.features(x), 2)
        x = F.relu(self.fc(torch.flatten(x, 1)))
        return F.log_softmax(self.out(x), dim=1)


def main(model):
    images = torch.randn(5, 1, 10, 10)
    labels = torch.randint(10, (5,))

    # the batch gradient first, as a training step would (it must not disturb what follows)
    F.nll_loss(model(images), labels).backward()

    # one sample at a time: autograd.grad of each, regrouped per parameter
    leaves = list(model.parameters())

    def one_grad(image, label):
        return torch.autograd.grad(F.nll_loss(model(image[None]), label[None]), leaves)

    per_sample_lists = [one_grad(images[i], labels[i]) for i in range(5)]
    looped = [torch.stack(per_param) for per_param in zip(*per_sample_lists)]

    # all samples at once: grad of a stateless call, mapped over the batch
    weights = {name: p.detach() for name, p in model.named_parameters()}
    buffers = {name: b.detach() for name, b in model.named_buffers()}

    def sample_loss(weights, buffers, image, label):
        log_probs = functional_call(model, (weights, buffers), (image.unsqueeze(0),))
        return F.nll_loss(log_probs, label.unsqueeze(0))

    per_sample_grad = vmap(grad(sample_loss), in_dims=(None, None, 0, 0))
    per_sample = per_sample_grad(weights, buffers, images, labels)
    for expected, (name, got) in zip(looped, per_sample.items()):
        assert got.shape == (5,) + weights[name].shape
        assert torch.allclose(expected, got, atol=3e-3, rtol=1e-5)
    return [list(per_sample)] + [g.detach().numpy().copy() for g in per_sample.values()]
"""

ENSEMBLE_SOURCE = """
from torch import vmap
from torch.func import functional_call, stack_module_state


class Member(nn.Module):
    def __init__(self):
        super(Member, self).__init__()
        self.layers = nn.Sequential(
            nn.Flatten(1), nn.Linear(25, 12), nn.ReLU(), nn.Linear(12, 6)
        )

    def forward(self, x):
        return self.layers(x)


def main(models):
    k = len(models)
    images = torch.randn(k, 6, 1, 5, 5)  # a different minibatch for each member
    labels = torch.randint(6, (k * 6,))
    shared = images[0]  # and one minibatch seen by all

    weights, buffers = stack_module_state(models)
    skeleton = copy.deepcopy(models[0]).to("meta")  # shapes only: the weights come in each call

    def call(weights, buffers, x):
        return functional_call(skeleton, (weights, buffers), (x,))

    records = [[w.size(0) for w in weights.values()]]
    each = vmap(call)(weights, buffers, images)
    same = vmap(call, in_dims=(0, 0, None))(weights, buffers, shared)
    looped_each = torch.stack([m(x) for m, x in zip(models, images)])
    looped_same = torch.stack([m(shared) for m in models])
    assert torch.allclose(each, looped_each, atol=1e-3, rtol=1e-5)
    assert torch.allclose(same, looped_same, atol=1e-3, rtol=1e-5)
    records += [each.detach().numpy().copy(), same.detach().numpy().copy()]

    # the stacked weights are leaves: the whole ensemble trains as one
    optimizer = torch.optim.Adam(weights.values(), lr=1e-2)
    for _ in range(3):
        loss = F.cross_entropy(vmap(call)(weights, buffers, images).reshape(-1, 6), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        records.append(loss.item())
    records.append({name: w.detach().numpy().copy() for name, w in weights.items()})
    return records
"""

ENSEMBLE_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
    ("from torch import vmap", "from retrograd import vmap"),
]

JACOBIANS_SOURCE = """
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vjp, vmap


def unit(w, b, x):
    return torch.tanh(F.linear(x, w, b))


def draw(n_out, n_in, *batch):
    return torch.randn(n_out, n_in), torch.randn(n_out), torch.randn(*batch, n_in)


def main():
    records = []
    w, b, x = draw(5, 5)

    # the Jacobian row by row: one vector-Jacobian product per basis vector
    basis = torch.eye(5)
    x_leaf = x.clone().requires_grad_()
    rows = [torch.autograd.grad(unit(w, b, x_leaf), x_leaf, e)[0] for e in basis]
    by_rows = torch.stack(rows)
    _, pullback = vjp(partial(unit, w, b), x)
    (by_vmap,) = vmap(pullback)(basis)
    by_jacrev = jacrev(unit, argnums=2)(w, b, x)
    assert torch.allclose(by_vmap, by_rows) and torch.allclose(by_jacrev, by_rows)
    d_w, d_b = jacrev(unit, argnums=(0, 1))(w, b, x)
    records += [by_rows.numpy().copy(), d_w.numpy().copy(), d_b.numpy().copy()]

    w, b, x = draw(6, 3)  # tall: forward and reverse agree
    forward = jacfwd(unit, argnums=2)(w, b, x)
    assert torch.allclose(forward, jacrev(unit, argnums=2)(w, b, x), atol=1e-6)
    records.append(forward.numpy().copy())

    w, b, x = draw(4, 4)
    h = hessian(unit, argnums=2)(w, b, x)
    assert torch.allclose(h, jacfwd(jacfwd(unit, argnums=2), argnums=2)(w, b, x), atol=1e-6)
    assert torch.allclose(h, jacrev(jacrev(unit, argnums=2), argnums=2)(w, b, x), atol=1e-6)
    records.append(h.numpy().copy())

    w, b, xs = draw(4, 3, 5)  # a batch of 5 inputs
    per_input = vmap(jacrev(unit, argnums=2), in_dims=(None, None, 0))(w, b, xs)
    summed = jacrev(lambda w, b, xs: unit(w, b, xs).sum(0), argnums=2)(w, b, xs).movedim(1, 0)
    assert torch.allclose(per_input, summed)
    per_input_h = vmap(hessian(unit, argnums=2), in_dims=(None, None, 0))(w, b, xs)
    records += [per_input.numpy().copy(), per_input_h.numpy().copy()]

    # Hessian-vector products, forward-over-reverse and reverse-over-reverse
    def energy(v):
        return (v.cos() * v).sum()

    v, t = torch.randn(9), torch.randn(9)
    fwd_rev = jvp(grad(energy), (v,), (t,))[1]
    _, pull = vjp(grad(energy), v)
    assert torch.allclose(fwd_rev, pull(t)[0], atol=1e-6)
    records.append(fwd_rev.numpy().copy())
    return records
"""


def _both(monkeypatch, source, step, seed, go):
    records = []
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedDraws(seed).patch(patch, lib)
            names = both(source, step, copy=copy, partial=partial)[0 if lib is torch else 1]
            records.append(go(names, lib))
    return records


def _loaded(names, lib, cls, states):
    models = []
    for state in states:
        model = names[cls]()
        model.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
        models.append(model)
    return models


def test_per_sample_gradients_by_loop_and_by_vmap_match_torch(monkeypatch):
    torch.manual_seed(0)
    state = {
        k: v.numpy().copy()
        for k, v in both(PER_SAMPLE_SOURCE, [])[0]["DigitNet"]().state_dict().items()
    }
    records = _both(
        monkeypatch,
        PER_SAMPLE_SOURCE,
        [],
        60,
        lambda names, lib: names["main"](_loaded(names, lib, "DigitNet", [state])[0]),
    )
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


def test_vmapped_ensemble_and_training_its_stacked_state_match_torch(monkeypatch):
    torch.manual_seed(0)
    cls = both(ENSEMBLE_SOURCE, ENSEMBLE_STEP, copy=copy)[0]["Member"]
    states = [{k: v.numpy().copy() for k, v in cls().state_dict().items()} for _ in range(4)]
    records = _both(
        monkeypatch,
        ENSEMBLE_SOURCE,
        ENSEMBLE_STEP,
        61,
        lambda names, lib: names["main"](_loaded(names, lib, "Member", states)),
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-6)


def test_jacobians_and_hessians_by_torch_func_match_torch(monkeypatch):
    records = _both(monkeypatch, JACOBIANS_SOURCE, [], 62, lambda names, lib: names["main"]())
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("out", ["dict", "tuple", "list"])
def test_vmap_maps_and_stacks_pytrees_as_torch_s(out):
    rng = np.random.default_rng(63)
    w, xs = rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    results = []
    for lib in (torch, rg):

        def fn(params, x, scale):
            y = params["w"] @ x * scale + params["b"][0]
            z = (params["w"] ** 2).sum(1) + x.sum()
            return {"y": y, "z": z} if out == "dict" else ((y, z) if out == "tuple" else [y, z])

        params = {"w": lib.tensor(w), "b": [lib.tensor(np.arange(3.0))]}
        mapped = lib.vmap(fn, in_dims=(None, 0, None))(params, lib.tensor(xs), 2.0)
        values = list(mapped.values()) if out == "dict" else list(mapped)
        assert type(mapped) is {"dict": dict, "tuple": tuple, "list": list}[out]
        stacked = {"w": lib.tensor(np.stack([w] * 4)), "b": [lib.tensor(np.ones((4, 3)))]}
        again = lib.vmap(fn, in_dims=(0, 0, None))(stacked, lib.tensor(xs), 1.0)
        again = list(again.values()) if out == "dict" else list(again)
        results.append([v.numpy() for v in values + again])
    for mine, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-12)


def test_stack_module_state_as_torch_s():
    layers = [torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3)]
    mine = [rg.nn.Linear(2, 3), rg.nn.BatchNorm1d(3)]
    for ours, theirs in zip(mine, layers):
        ours.load_state_dict({k: rg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    for lib, models in (
        (torch, [layers[0], copy.deepcopy(layers[0])]),
        (rg, [mine[0], copy.deepcopy(mine[0])]),
    ):
        params, buffers = lib.func.stack_module_state(models)
        assert list(params) == ["weight", "bias"] and buffers == {}
        assert tuple(params["weight"].shape) == (2, 3, 2) and params["weight"].requires_grad
        assert params["weight"].is_leaf
    params, buffers = rg.func.stack_module_state([mine[1], copy.deepcopy(mine[1])])
    assert list(buffers) == ["running_mean", "running_var", "num_batches_tracked"]
    with pytest.raises(ValueError, match="same class"):
        rg.func.stack_module_state([mine[0], mine[1]])
    with pytest.raises(ValueError, match="at least one"):
        rg.func.stack_module_state([])


# -- sampling: top-k / nucleus filtering with a KV cache ---------------------------------------
SAMPLING_SOURCE = """
def filter_logits(scores, keep_top=0, nucleus=1.0, floor=-float("inf"), at_least=1):
    # top-k: anything below the k-th best score is out
    if keep_top > 0:
        keep_top = min(max(keep_top, at_least), scores.size(-1))
        kth_best = torch.topk(scores, keep_top)[0][..., -1, None]
        scores[scores < kth_best] = floor
    # nucleus: the smallest set of best tokens whose probability reaches `nucleus`
    if nucleus < 1.0:
        ranked, order = torch.sort(scores, descending=True)
        mass = torch.cumsum(F.softmax(ranked, dim=-1), dim=-1)
        drop = mass > nucleus
        if at_least > 1:
            drop[..., :at_least] = 0
        drop[..., 1:] = drop[..., :-1].clone()  # the token that crosses the line stays
        drop[..., 0] = 0
        scores[drop.scatter(1, order, drop)] = floor
    return scores


class CachedAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.heads, self.width = heads, width

    def forward(self, x, cache=None, keep=False):
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(self.width, dim=2))
        if cache is not None:
            k = torch.cat((cache[0], k), dim=-2)
            v = torch.cat((cache[1], v), dim=-2)
        # a new token sees the whole cache; only a fresh prompt needs the causal mask
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C)), ((k, v) if keep else None)


class Layer(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm_a, self.norm_b = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = CachedAttention(width, heads)
        self.ffn = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * width, width))

    def forward(self, x, cache=None, keep=False):
        mixed, kept = self.attn(self.norm_a(x), cache, keep)
        x = x + mixed
        return x + self.ffn(self.norm_b(x)), kept


class TinyGPT(nn.Module):
    def __init__(self, vocab=20, context=16, width=8, heads=2, depth=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.layers = nn.ModuleList([Layer(width, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.unembed = nn.Linear(width, vocab, bias=False)
        self.unembed.weight = self.tok.weight  # tied

    def forward(self, idx, caches=None, keep=False):
        seen = 0 if caches is None else caches[0][0].size(-2)
        where = torch.arange(seen, seen + idx.size(1), dtype=torch.long).unsqueeze(0)
        x = self.tok(idx) + self.pos(where)
        kept = []
        for i, layer in enumerate(self.layers):
            x, c = layer(x, None if caches is None else caches[i], keep)
            kept.append(c)
        return self.unembed(self.norm(x)), (tuple(kept) if keep else None)


@torch.no_grad()
def generate(model, prompt, n_new, temperature=1.0, keep_top=0, nucleus=0.0):
    tokens, caches, feed, masked = prompt, None, prompt, []
    for _ in range(n_new):
        logits, caches = model(feed, caches, keep=True)
        scores = logits[:, -1, :] / (temperature if temperature > 0 else 1.0)
        scores = filter_logits(scores, keep_top, nucleus if nucleus > 0 else 1.0)
        if temperature == 0:
            feed = torch.argmax(scores, dim=-1).unsqueeze(-1)
        else:
            feed = torch.multinomial(F.softmax(scores, dim=-1), num_samples=1)
        masked.append(torch.isinf(scores).sum(-1).tolist())
        tokens = torch.cat((tokens, feed), dim=1)
    # the last cached step against recomputing everything from scratch
    full, _ = model(tokens[:, :-1])
    return tokens.tolist(), masked, full[:, -1].numpy().copy(), logits[:, -1].numpy().copy()
"""


class SharedMultinomial:
    """``torch.multinomial`` of a library drawing by inverse CDF from one seeded stream."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)

        def multinomial(probs, num_samples, replacement=False, generator=None):
            p = probs.numpy().astype(np.float64)
            u = rng.random(p.shape[:-1] + (1,)) * p.sum(-1, keepdims=True)
            index = (np.cumsum(p, -1) < u).sum(-1, keepdims=True).clip(0, p.shape[-1] - 1)
            return lib.tensor(index, dtype=lib.int64)

        monkeypatch.setattr(lib, "multinomial", multinomial)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(0.8, 5, 0.0), (1.0, 0, 0.7), (1.2, 6, 0.9), (0, 0, 0.0)]
)
def test_top_k_top_p_sampling_with_a_kv_cache_matches_torch(monkeypatch, temperature, top_k, top_p):
    torch.manual_seed(0)
    state = {
        k: v.numpy().copy()
        for k, v in both(SAMPLING_SOURCE, [])[0]["TinyGPT"]().state_dict().items()
    }
    records = []
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedMultinomial(64).patch(patch, lib)
            names = both(SAMPLING_SOURCE, [])[0 if lib is torch else 1]
            model = names["TinyGPT"]()
            model.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
            model.eval()
            context = lib.tensor(np.array([[1, 5, 7], [2, 2, 9]]))
            generated, masked, full, last = names["generate"](
                model, context, 6, temperature, top_k, top_p
            )
            records.append([generated, masked, full, last])
    assert records[1][0] == records[0][0] and records[1][1] == records[0][1]
    for mine, reference in zip(records[1][2:], records[0][2:]):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(records[1][3], records[1][2], rtol=1e-5, atol=1e-6)  # cache == full
