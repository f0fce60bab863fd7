"""Real ports, round 77 (the harness: ``tests/real_ports.py``): differentially private
training (DP-SGD), a program written here in the style of pytorch/opacus (a ``GradSampleModule``
whose hooks compute per-sample gradients, a ``DPOptimizer`` that clips them and adds Gaussian
noise, Poisson sampling, an RDP accountant), run under torch and, ported, under retrograd from
the same weights and draws, every record compared; once with the hooks' per-sample gradients,
once with ``torch.func``'s (Opacus's functorch mode), checked against the hooks'.

It reaches:

- the model: ``nn.Embedding``, ``nn.Linear``, ``nn.LayerNorm``, ``torch.tanh``, a mean over the
  sequence, ``nn.CrossEntropyLoss``; the data by ``torch.randint`` with labels from ``%``;
- the per-sample gradients: ``named_modules()`` dispatched on ``type(layer)`` to samplers,
  ``register_forward_hook`` capturing ``[t.detach() for t in forward_input]`` (gated by
  ``torch.is_grad_enabled()``, a list kept as a module attribute by ``hasattr``),
  ``register_full_backward_hook`` reading ``forward_output[0].detach()`` scaled by the batch
  size; Linear's ``torch.einsum("n...i,n...j->nij", backprops, activations)`` and
  ``einsum("n...k->nk")``, LayerNorm's ``F.layer_norm(..., layer.normalized_shape,
  eps=layer.eps) * backprops`` summed over all but the batch and last dims (``dim=`` a list),
  Embedding's ``unsqueeze(-1).expand(*shape, dim).reshape(...)`` index into
  ``torch.zeros(batch, *weight.shape).scatter_add_(1, index, ...)``; attributes set on
  parameters (``p.grad_sample``, ``p.summed_grad``), ``+=`` on them; the hook handles
  ``remove()``d; and ``vmap(grad(compute_loss), in_dims=(None, None, 0, 0))`` over
  ``functional_call(template, (params, buffers), (sample.unsqueeze(0),))`` returning a dict;
- the optimizer: per-parameter norms ``reshape(len(g), -1).norm(2, dim=-1)`` stacked by
  ``torch.stack(dim=1).norm(2, dim=1)``, clip factors ``(C / (norms + 1e-6)).clamp(max=1.0)``,
  ``torch.einsum("i,i...", factors, grad_sample)``, noise ``torch.randn(shape) * std``,
  ``p.grad = (...).view_as(p) / expected_batch_size``, the wrapped ``SGD(momentum=0.9)`` under
  ``StepLR`` through a ``param_groups`` property;
- Poisson sampling (``torch.rand(n) < q``, ``mask.nonzero().reshape(-1)``, batches of varying
  size by integer-tensor indexing) in a generator;
- the accountant: RDP of the sampled Gaussian for integer orders in float64 by
  ``torch.lgamma`` binomials and ``torch.logsumexp``, ``torch.argmin`` of the conversion to
  (epsilon, delta);
- the checkpoint: ``torch.save`` of the wrapped module's ``_module.state_dict()``, the
  optimizer's and epsilon to a buffer, ``torch.load``, ``load_state_dict``; evaluation under
  ``torch.no_grad()``: logits, ``argmax`` accuracy, a float64 ``F.softmax``.

The lines changed for the port: the ``import`` lines, the gradient lines (``grads =
loss.backward()``, ``p.grad = ...`` as ``p.grad_replace(grads, ...)``, ``step(grads)`` through
the wrapper), and in functorch mode ``v.detach().requires_grad_(False)`` for the parameters
given to ``functional_call``: retrograd's ``detach()`` keeps a leaf requiring grad (Burn's rule,
API.md section 3), so without it the per-sample gradients record a graph to the parameters,
which ``grad_replace`` refuses to install.
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

DP_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap


class TextClassifier(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden, n_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.proj = nn.Linear(embed_dim, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, tokens):
        h = torch.tanh(self.norm(self.proj(self.embedding(tokens))))
        return self.head(h.mean(dim=1))


def sum_over_all_but_batch_and_last_n(tensor, n_dims):
    if tensor.dim() == n_dims + 1:
        return tensor
    dims = list(range(1, tensor.dim() - n_dims))
    return tensor.sum(dim=dims)


def compute_linear_grad_sample(layer, activations, backprops):
    ret = {layer.weight: torch.einsum("n...i,n...j->nij", backprops, activations)}
    if layer.bias is not None:
        ret[layer.bias] = torch.einsum("n...k->nk", backprops)
    return ret


def compute_layer_norm_grad_sample(layer, activations, backprops):
    normalized = F.layer_norm(activations, layer.normalized_shape, eps=layer.eps)
    return {
        layer.weight: sum_over_all_but_batch_and_last_n(normalized * backprops,
                                                        layer.weight.dim()),
        layer.bias: sum_over_all_but_batch_and_last_n(backprops, layer.bias.dim()),
    }


def compute_embedding_grad_sample(layer, activations, backprops):
    batch_size = activations.shape[0]
    index = (activations.unsqueeze(-1).expand(*activations.shape, layer.embedding_dim)
             .reshape(batch_size, -1, layer.embedding_dim))
    grad_sample = torch.zeros(batch_size, *layer.weight.shape, dtype=backprops.dtype)
    grad_sample.scatter_add_(1, index, backprops.reshape(batch_size, -1, layer.embedding_dim))
    return {layer.weight: grad_sample}


GRAD_SAMPLERS = {
    nn.Linear: compute_linear_grad_sample,
    nn.LayerNorm: compute_layer_norm_grad_sample,
    nn.Embedding: compute_embedding_grad_sample,
}


class GradSampleModule(nn.Module):
    def __init__(self, module, loss_reduction="mean"):
        super().__init__()
        self._module = module
        self.loss_reduction = loss_reduction
        self.hooks_enabled = True
        self.autograd_grad_sample_hooks = []
        for name, layer in module.named_modules():
            if type(layer) in GRAD_SAMPLERS:
                self.autograd_grad_sample_hooks.append(
                    layer.register_forward_hook(self.capture_activations_hook))
                self.autograd_grad_sample_hooks.append(
                    layer.register_full_backward_hook(self.capture_backprops_hook))
        for p in module.parameters():
            p.grad_sample = None

    def forward(self, *args, **kwargs):
        return self._module(*args, **kwargs)

    def capture_activations_hook(self, module, forward_input, _forward_output):
        if not self.hooks_enabled or not torch.is_grad_enabled():
            return
        if not hasattr(module, "activations"):
            module.activations = []
        module.activations.append([t.detach() for t in forward_input])

    def capture_backprops_hook(self, module, _forward_input, forward_output):
        if not self.hooks_enabled:
            return
        backprops = forward_output[0].detach()
        activations = module.activations.pop()
        batch_size = activations[0].shape[0]
        if self.loss_reduction == "mean":
            backprops = backprops * batch_size
        grad_samples = GRAD_SAMPLERS[type(module)](module, activations[0], backprops)
        for param, gs in grad_samples.items():
            if param.grad_sample is None:
                param.grad_sample = gs
            else:
                param.grad_sample += gs

    def remove_hooks(self):
        while self.autograd_grad_sample_hooks:
            self.autograd_grad_sample_hooks.pop().remove()


class DPOptimizer:
    def __init__(self, optimizer, noise_multiplier, max_grad_norm, expected_batch_size):
        self.original_optimizer = optimizer
        self.noise_multiplier = noise_multiplier
        self.max_grad_norm = max_grad_norm
        self.expected_batch_size = expected_batch_size
        self.params = [p for group in optimizer.param_groups for p in group["params"]
                       if p.requires_grad]
        for p in self.params:
            p.summed_grad = None

    @property
    def param_groups(self):
        return self.original_optimizer.param_groups

    def clip_and_accumulate(self):
        per_param_norms = [p.grad_sample.reshape(len(p.grad_sample), -1).norm(2, dim=-1)
                           for p in self.params]
        per_sample_norms = torch.stack(per_param_norms, dim=1).norm(2, dim=1)
        per_sample_clip_factor = (self.max_grad_norm / (per_sample_norms + 1e-6)).clamp(max=1.0)
        for p in self.params:
            grad = torch.einsum("i,i...", per_sample_clip_factor, p.grad_sample)
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
        return per_sample_norms

    def add_noise(self):
        for p in self.params:
            noise = torch.randn(p.summed_grad.shape) * (self.noise_multiplier * self.max_grad_norm)
            p.grad = (p.summed_grad + noise).view_as(p) / self.expected_batch_size

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad_sample = None
            p.summed_grad = None
        self.original_optimizer.zero_grad(set_to_none)

    def step(self):
        per_sample_norms = self.clip_and_accumulate()
        self.add_noise()
        self.original_optimizer.step()
        return per_sample_norms


def poisson_batches(n, sample_rate, steps):
    for _ in range(steps):
        mask = torch.rand(n) < sample_rate
        yield mask.nonzero().reshape(-1)


def rdp_sampled_gaussian(q, sigma, orders):
    # log A_alpha for integer orders: a log-sum-exp over the binomial expansion
    out = []
    for alpha in orders:
        i = torch.arange(alpha + 1, dtype=torch.float64)
        log_binom = (torch.lgamma(torch.tensor(alpha + 1.0, dtype=torch.float64))
                     - torch.lgamma(i + 1) - torch.lgamma(alpha - i + 1))
        log_terms = (log_binom + i * math.log(q) + (alpha - i) * math.log(1 - q)
                     + (i * i - i) / (2 * sigma ** 2))
        out.append(torch.logsumexp(log_terms, dim=0) / (alpha - 1))
    return torch.stack(out)


def get_privacy_spent(orders, rdp, delta):
    orders_t = torch.tensor(orders, dtype=torch.float64)
    eps = rdp - math.log(delta) / (orders_t - 1)
    best = torch.argmin(eps)
    return eps[best].item(), orders[int(best)]


vocab_size, seq_len, n_train, n_classes = 16, 5, 48, 3
tokens = torch.randint(0, vocab_size, (n_train, seq_len))
labels = (tokens[:, 0] + tokens[:, -1]) % n_classes
test_tokens = torch.randint(0, vocab_size, (20, seq_len))
test_labels = (test_tokens[:, 0] + test_tokens[:, -1]) % n_classes

net = TextClassifier(vocab_size, 6, 8, n_classes)
initialize(net)
model = GradSampleModule(net)
criterion = nn.CrossEntropyLoss()
sample_rate, noise_multiplier, max_grad_norm = 0.25, 0.8, 1.0
base = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
optimizer = DPOptimizer(base, noise_multiplier, max_grad_norm, int(sample_rate * n_train))
scheduler = torch.optim.lr_scheduler.StepLR(base, step_size=3, gamma=0.5)


template = TextClassifier(vocab_size, 6, 8, n_classes)  # no hooks: vmap refuses backward hooks


def compute_loss(params, buffers, sample, target):
    out = functional_call(template, (params, buffers), (sample.unsqueeze(0),))
    return criterion(out, target.unsqueeze(0))


steps = 0
for step, batch_idx in enumerate(poisson_batches(n_train, sample_rate, 6)):
    x, y = tokens[batch_idx], labels[batch_idx]
    model.train()
    optimizer.zero_grad()
    out = model(x)
    loss = criterion(out, y)
    loss.backward()
    if MODE == "vmap":
        params = {k: v.detach() for k, v in net.named_parameters()}
        buffers = {k: v.detach() for k, v in net.named_buffers()}
        ft_grads = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, x, y)
        hook_samples = {n: p.grad_sample for n, p in net.named_parameters()}
        for name, p in net.named_parameters():
            p.grad_sample = ft_grads[name]
        if step == 0:
            record.append({n: (ft_grads[n] - hook_samples[n]).abs().amax().numpy().copy()
                           for n in ft_grads})
    if step == 0:
        record.append({n: p.grad_sample.numpy().copy() for n, p in net.named_parameters()})
    norms = optimizer.step()
    scheduler.step()
    steps += 1
    record.append([loss.item(), len(batch_idx), scheduler.get_last_lr()[0]] + norms.tolist())
    record.append(params_of(net))
    print(f"step {step} batch {len(batch_idx)} loss {loss.item():.4f}")

orders = [2, 3, 4, 6, 8, 16, 32]
rdp = rdp_sampled_gaussian(sample_rate, noise_multiplier, orders) * steps
epsilon, best_alpha = get_privacy_spent(orders, rdp, delta=1e-5)
record.append(rdp.numpy().copy())
record.append([epsilon, best_alpha])

model.remove_hooks()
stream = io.BytesIO()
torch.save({"model": model._module.state_dict(), "optimizer": base.state_dict(),
            "epsilon": epsilon}, stream)
stream.seek(0)
checkpoint = torch.load(stream)
restored = TextClassifier(vocab_size, 6, 8, n_classes)
restored.load_state_dict(checkpoint["model"])
restored.eval()
with torch.no_grad():
    logits = restored(test_tokens)
    predictions = logits.argmax(dim=1)
    accuracy = (predictions == test_labels).float().mean()
    record.append(logits.numpy().copy())
    record.append([accuracy.item(), len(checkpoint["optimizer"]["state"]),
                   checkpoint["epsilon"]])
    record.append(F.softmax(logits.double(), dim=-1).numpy().copy())
"""

DP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "            p.grad = (p.summed_grad + noise).view_as(p) / self.expected_batch_size\n",
        "            p.grad_replace(grads, (p.summed_grad + noise).view_as(p)"
        " / self.expected_batch_size)\n",
    ),
    ("    def add_noise(self):\n", "    def add_noise(self, grads):\n"),
    (
        "    def step(self):\n"
        "        per_sample_norms = self.clip_and_accumulate()\n"
        "        self.add_noise()\n"
        "        self.original_optimizer.step()\n",
        "    def step(self, grads):\n"
        "        per_sample_norms = self.clip_and_accumulate()\n"
        "        self.add_noise(grads)\n"
        "        self.original_optimizer.step(grads)\n",
    ),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    (
        "        params = {k: v.detach() for k, v in net.named_parameters()}\n",
        "        params = {k: v.detach().requires_grad_(False)\n"
        "                  for k, v in net.named_parameters()}\n",
    ),
    ("    norms = optimizer.step()\n", "    norms = optimizer.step(grads)\n"),
]


@pytest.mark.parametrize("mode", ["hooks", "vmap"])
def test_dp_sgd_as_torch(capsys, mode):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        DP_SOURCE,
        DP_STEPS,
        capsys,
        7702,
        initialize=initializer(),
        params_of=params_of,
        MODE=mode,
    )
    first = 1 if mode == "vmap" else 0
    assert len(theirs) == first + 1 + 2 * 6 + 2 + 3
    assert their_log == our_log and their_log.count("\n") == 6
    if mode == "vmap":  # the hooks' per-sample gradients are torch.func's
        assert all(float(d) < 1e-5 for d in theirs[0].values())
    sizes = [theirs[first + 1 + 2 * s][1] for s in range(6)]
    assert len(set(sizes)) > 1  # Poisson sampling: batches of varying size
    clipped = [n for s in range(6) for n in theirs[first + 1 + 2 * s][3:]]
    assert max(clipped) > 1.0  # some per-sample gradients are clipped (max_grad_norm 1.0)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
