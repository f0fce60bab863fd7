# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the three ``torch.func`` tutorials of pytorch/tutorials (``intermediate_source/``), smaller.

- ``per_sample_grads.py``: per-sample gradients by a loop of ``torch.autograd.grad(loss,
  list(model.parameters()))`` stacked through ``zip(*sample_grads)``, and by
  ``vmap(grad(compute_loss), in_dims=(None, None, 0, 0))`` over ``functional_call(model,
  (params, buffers), (batch,))`` with ``params = {k: v.detach() for k, v in
  model.named_parameters()}``: a dict of gradients comes back, stacked per name;
- ``ensembling.py``: ``stack_module_state(models)``, ``copy.deepcopy(models[0]).to('meta')``
  as the stateless base, ``vmap(fmodel)`` over different minibatches and ``vmap(fmodel,
  in_dims=(0, 0, None))`` over one, checked against the loop of models; beyond the tutorial, the
  stacked parameters (leaves that require grad) trained by Adam through the vmapped ensemble;
- ``jacobians_hessians.py``: the Jacobian by rows of ``autograd.grad`` with unit vectors,
  ``vmap(vjp_fn)(unit_vectors)``, ``jacrev(predict, argnums=2)`` and ``argnums=(0, 1)``,
  ``jacfwd``, ``hessian`` and ``jacfwd(jacfwd(...))``/``jacrev(jacrev(...))``, batch Jacobians
  and Hessians by ``vmap(jacrev(...), in_dims=(None, None, 0))`` and by summing the output and
  ``movedim(1, 0)``, and Hessian-vector products by ``jvp(grad(f), ...)`` and ``vjp(grad(f),
  ...)``.

Beside them, the sampling idioms of GPT-2 era generation code: the widely copied
``top_k_top_p_filtering`` (``logits[indices_to_remove] = filter_value`` of ``-inf``, the
boolean shift ``sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[...,
:-1].clone()``, ``scatter`` of a boolean source back to vocabulary order) in a generation loop
with a KV cache (``torch.cat((past_key, k), dim=-2)``, ``scaled_dot_product_attention(is_causal=
layer_past is None)``, positions from ``past_key_values[0][0].size(-2)``, a tied ``lm_head``,
``torch.multinomial``); the cached decoding is checked against the full recomputation. It ran
unchanged.

The defects found: ``vmap`` took tensors only, so a dict argument (``params``) or a dict result
(``grad`` of a dict) failed; it now maps and stacks pytrees (tuples, lists, dicts) leaf by leaf,
as torch's. And ``torch.func.stack_module_state`` was missing.
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
from torch.func import functional_call, vmap, grad

class SimpleCNN(nn.Module):
    def __init__(self):
        super(SimpleCNN, self).__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(72, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output

def loss_fn(predictions, targets):
    return F.nll_loss(predictions, targets)

def main(model):
    device = 'cpu'
    batch_size = 6
    data = torch.randn(batch_size, 1, 10, 10, device=device)
    targets = torch.randint(10, (6,), device=device)

    predictions = model(data)  # move the entire mini-batch through the model

    loss = loss_fn(predictions, targets)
    loss.backward()  # back propagate the 'average' gradient of this mini-batch

    def compute_grad(sample, target):
        sample = sample.unsqueeze(0)  # prepend batch dimension for processing
        target = target.unsqueeze(0)

        prediction = model(sample)
        loss = loss_fn(prediction, target)

        return torch.autograd.grad(loss, list(model.parameters()))


    def compute_sample_grads(data, targets):
        \"\"\" manually process each sample with per sample gradient \"\"\"
        sample_grads = [compute_grad(data[i], targets[i]) for i in range(batch_size)]
        sample_grads = zip(*sample_grads)
        sample_grads = [torch.stack(shards) for shards in sample_grads]
        return sample_grads

    per_sample_grads = compute_sample_grads(data, targets)

    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(params, buffers, sample, target):
        batch = sample.unsqueeze(0)
        targets = target.unsqueeze(0)

        predictions = functional_call(model, (params, buffers), (batch,))
        loss = loss_fn(predictions, targets)
        return loss

    ft_compute_grad = grad(compute_loss)
    ft_compute_sample_grad = vmap(ft_compute_grad, in_dims=(None, None, 0, 0))
    ft_per_sample_grads = ft_compute_sample_grad(params, buffers, data, targets)

    for per_sample_grad, ft_per_sample_grad in zip(per_sample_grads, ft_per_sample_grads.values()):
        assert torch.allclose(per_sample_grad, ft_per_sample_grad, atol=3e-3, rtol=1e-5)
    return [list(ft_per_sample_grads)] + [g.detach().numpy().copy() for g in ft_per_sample_grads.values()]
"""

ENSEMBLE_SOURCE = """
from torch.func import stack_module_state
from torch.func import functional_call
from torch import vmap

class SimpleMLP(nn.Module):
    def __init__(self):
        super(SimpleMLP, self).__init__()
        self.fc1 = nn.Linear(36, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 10)

    def forward(self, x):
        x = x.flatten(1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        x = F.relu(x)
        x = self.fc3(x)
        return x

def main(models):
    device = 'cpu'
    num_models = 4

    data = torch.randn(10, 8, 1, 6, 6, device=device)
    targets = torch.randint(10, (80,), device=device)

    minibatches = data[:num_models]
    predictions_diff_minibatch_loop = [model(minibatch) for model, minibatch in zip(models, minibatches)]

    minibatch = data[0]
    predictions2 = [model(minibatch) for model in models]

    params, buffers = stack_module_state(models)

    base_model = copy.deepcopy(models[0])
    base_model = base_model.to('meta')

    def fmodel(params, buffers, x):
        return functional_call(base_model, (params, buffers), (x,))

    records = [[p.size(0) for p in params.values()]] # show the leading 'num_models' dimension

    assert minibatches.shape == (num_models, 8, 1, 6, 6) # verify minibatch has leading dimension of size 'num_models'

    predictions1_vmap = vmap(fmodel)(params, buffers, minibatches)

    # verify the ``vmap`` predictions match the
    assert torch.allclose(predictions1_vmap, torch.stack(predictions_diff_minibatch_loop), atol=1e-3, rtol=1e-5)

    predictions2_vmap = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatch)

    assert torch.allclose(predictions2_vmap, torch.stack(predictions2), atol=1e-3, rtol=1e-5)
    records += [predictions1_vmap.detach().numpy().copy(), predictions2_vmap.detach().numpy().copy()]

    # beyond the tutorial: the ensemble trained as one
    optimizer = torch.optim.Adam(params.values(), lr=1e-2)
    for step in range(3):
        logits = vmap(fmodel)(params, buffers, minibatches)
        loss = F.cross_entropy(logits.reshape(-1, 10), targets[:num_models * 8])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        records.append(loss.item())
    records.append({k: v.detach().numpy().copy() for k, v in params.items()})
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
from torch.func import vmap, vjp
from torch.func import jacrev, jacfwd
from torch.func import hessian
from torch.func import jvp, grad

def predict(weight, bias, x):
    return F.linear(x, weight, bias).tanh()

def main():
    records = []
    D = 6
    weight = torch.randn(D, D)
    bias = torch.randn(D)
    x = torch.randn(D)  # feature vector

    def compute_jac(xp):
        jacobian_rows = [torch.autograd.grad(predict(weight, bias, xp), xp, vec)[0]
                         for vec in unit_vectors]
        return torch.stack(jacobian_rows)

    xp = x.clone().requires_grad_()
    unit_vectors = torch.eye(D)

    jacobian = compute_jac(xp)

    records.append(jacobian.numpy().copy())

    _, vjp_fn = vjp(partial(predict, weight, bias), x)

    ft_jacobian, = vmap(vjp_fn)(unit_vectors)

    # let's confirm both methods compute the same result
    assert torch.allclose(ft_jacobian, jacobian)

    ft_jacobian = jacrev(predict, argnums=2)(weight, bias, x)

    # Confirm by running the following:
    assert torch.allclose(ft_jacobian, jacobian)

    ft_jac_weight, ft_jac_bias = jacrev(predict, argnums=(0, 1))(weight, bias, x)
    records += [ft_jac_weight.numpy().copy(), ft_jac_bias.numpy().copy()]

    Din = 4
    Dout = 7
    weight = torch.randn(Dout, Din)
    bias = torch.randn(Dout)
    x = torch.randn(Din)

    using_fwd = jacfwd(predict, argnums=2)(weight, bias, x)
    using_bwd = jacrev(predict, argnums=2)(weight, bias, x)

    assert torch.allclose(using_fwd, using_bwd, atol=1e-6)
    records.append(using_fwd.numpy().copy())

    Din = 5
    Dout = 5
    weight = torch.randn(Dout, Din)
    bias = torch.randn(Dout)
    x = torch.randn(Din)

    hess_api = hessian(predict, argnums=2)(weight, bias, x)
    hess_fwdfwd = jacfwd(jacfwd(predict, argnums=2), argnums=2)(weight, bias, x)
    hess_revrev = jacrev(jacrev(predict, argnums=2), argnums=2)(weight, bias, x)
    assert torch.allclose(hess_api, hess_fwdfwd, atol=1e-6)
    assert torch.allclose(hess_api, hess_revrev, atol=1e-6)
    records.append(hess_api.numpy().copy())

    batch_size = 4
    Din = 3
    Dout = 5

    weight = torch.randn(Dout, Din)

    bias = torch.randn(Dout)
    x = torch.randn(batch_size, Din)

    compute_batch_jacobian = vmap(jacrev(predict, argnums=2), in_dims=(None, None, 0))
    batch_jacobian0 = compute_batch_jacobian(weight, bias, x)

    def predict_with_output_summed(weight, bias, x):
        return predict(weight, bias, x).sum(0)

    batch_jacobian1 = jacrev(predict_with_output_summed, argnums=2)(weight, bias, x).movedim(1, 0)
    assert torch.allclose(batch_jacobian0, batch_jacobian1)

    compute_batch_hessian = vmap(hessian(predict, argnums=2), in_dims=(None, None, 0))

    batch_hess = compute_batch_hessian(weight, bias, x)
    records += [batch_jacobian0.numpy().copy(), batch_hess.numpy().copy()]

    def hvp(f, primals, tangents):
      return jvp(grad(f), primals, tangents)[1]

    def f(x):
      return x.sin().sum()

    x = torch.randn(12)
    tangent = torch.randn(12)

    result = hvp(f, (x,), (tangent,))

    def hvp_revrev(f, primals, tangents):
      _, vjp_fn = vjp(grad(f), *primals)
      return vjp_fn(*tangents)

    result_hvp_revrev = hvp_revrev(f, (x,), (tangent,))
    assert torch.allclose(result, result_hvp_revrev[0])
    records.append(result.numpy().copy())
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


def test_per_sample_gradients_tutorial_matches_torch(monkeypatch):
    torch.manual_seed(0)
    state = {
        k: v.numpy().copy()
        for k, v in both(PER_SAMPLE_SOURCE, [])[0]["SimpleCNN"]().state_dict().items()
    }
    records = _both(
        monkeypatch,
        PER_SAMPLE_SOURCE,
        [],
        60,
        lambda names, lib: names["main"](_loaded(names, lib, "SimpleCNN", [state])[0]),
    )
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


def test_model_ensembling_tutorial_and_training_the_stacked_ensemble_match_torch(monkeypatch):
    torch.manual_seed(0)
    cls = both(ENSEMBLE_SOURCE, ENSEMBLE_STEP, copy=copy)[0]["SimpleMLP"]
    states = [{k: v.numpy().copy() for k, v in cls().state_dict().items()} for _ in range(4)]
    records = _both(
        monkeypatch,
        ENSEMBLE_SOURCE,
        ENSEMBLE_STEP,
        61,
        lambda names, lib: names["main"](_loaded(names, lib, "SimpleMLP", states)),
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-6)


def test_jacobians_and_hessians_tutorial_matches_torch(monkeypatch):
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


# -- sampling: top-k / nucleus filtering with a KV cache --------------------------------------------
SAMPLING_SOURCE = """
def top_k_top_p_filtering(logits, top_k=0, top_p=1.0, filter_value=-float("Inf"), min_tokens_to_keep=1):
    \"\"\" Filter a distribution of logits using top-k and/or nucleus (top-p) filtering
    \"\"\"
    if top_k > 0:
        top_k = min(max(top_k, min_tokens_to_keep), logits.size(-1))  # Safety check
        # Remove all tokens with a probability less than the last token of the top-k
        indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
        logits[indices_to_remove] = filter_value

    if top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)

        # Remove tokens with cumulative probability above the threshold (token with 0 are kept)
        sorted_indices_to_remove = cumulative_probs > top_p
        if min_tokens_to_keep > 1:
            # Keep at least min_tokens_to_keep (set to min_tokens_to_keep-1 because we add the first one below)
            sorted_indices_to_remove[..., :min_tokens_to_keep] = 0
        # Shift the indices to the right to keep also the first token above the threshold
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = 0

        # scatter sorted tensors to original indexing
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        logits[indices_to_remove] = filter_value
    return logits

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x, layer_past=None, use_cache=False):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if layer_past is not None:
            past_key, past_value = layer_past
            k = torch.cat((past_key, k), dim=-2)
            v = torch.cat((past_value, v), dim=-2)
        present = (k, v) if use_cache else None
        y = F.scaled_dot_product_attention(q, k, v, is_causal=layer_past is None)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y), present

class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate='tanh'), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, layer_past=None, use_cache=False):
        a, present = self.attn(self.ln_1(x), layer_past=layer_past, use_cache=use_cache)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, present

class GPT(nn.Module):
    def __init__(self, vocab_size=20, block_size=16, n_embd=8, n_head=2, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, past_key_values=None, use_cache=False):
        past_length = 0 if past_key_values is None else past_key_values[0][0].size(-2)
        pos = torch.arange(past_length, past_length + idx.size(1), dtype=torch.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, layer_past=None if past_key_values is None else past_key_values[i], use_cache=use_cache)
            presents.append(present)
        return self.lm_head(self.ln_f(x)), (tuple(presents) if use_cache else None)

@torch.no_grad()
def sample_sequence(model, context, length, temperature=1.0, top_k=0, top_p=0.0):
    generated = context
    past = None
    next_input = context
    steps = []
    for _ in range(length):
        logits, past = model(next_input, past_key_values=past, use_cache=True)
        next_token_logits = logits[:, -1, :] / (temperature if temperature > 0 else 1.)
        filtered_logits = top_k_top_p_filtering(next_token_logits, top_k=top_k, top_p=top_p if top_p > 0 else 1.0)
        if temperature == 0:  # greedy sampling:
            next_token = torch.argmax(filtered_logits, dim=-1).unsqueeze(-1)
        else:
            next_token = torch.multinomial(F.softmax(filtered_logits, dim=-1), num_samples=1)
        steps.append(torch.isinf(filtered_logits).sum(-1).tolist())
        generated = torch.cat((generated, next_token), dim=1)
        next_input = next_token
    # the cached decoding equals the full recomputation
    full, _ = model(generated[:, :-1])
    cached_last, _ = model(generated[:, :-1], use_cache=False)
    return generated.tolist(), steps, full[:, -1].numpy().copy(), cached_last[:, -1].numpy().copy(), logits[:, -1].numpy().copy()
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
        k: v.numpy().copy() for k, v in both(SAMPLING_SOURCE, [])[0]["GPT"]().state_dict().items()
    }
    records = []
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedMultinomial(64).patch(patch, lib)
            names = both(SAMPLING_SOURCE, [])[0 if lib is torch else 1]
            model = names["GPT"]()
            model.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
            model.eval()
            context = lib.tensor(np.array([[1, 5, 7], [2, 2, 9]]))
            generated, steps, full, cached, last = names["sample_sequence"](
                model, context, 6, temperature, top_k, top_p
            )
            records.append([generated, steps, full, cached, last])
    assert records[1][0] == records[0][0] and records[1][1] == records[0][1]
    for mine, reference in zip(records[1][2:], records[0][2:]):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(records[1][4], records[1][2], rtol=1e-5, atol=1e-6)  # cache == full
