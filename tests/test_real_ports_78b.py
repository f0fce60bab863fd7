# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 78 (the harness: ``tests/real_ports.py``): differentially private training,
a program written here in the style of Opacus (a ``GradSampleModule`` whose hooks compute
per-sample gradients, a ``DPOptimizer`` that clips each sample's gradient and adds Gaussian
noise before the wrapped optimizer steps, Poisson sampling of batches, and an RDP accountant
turning the steps into an ``(epsilon, delta)`` guarantee), on a small convnet with
``GroupNorm`` and on a bag-of-embeddings text classifier, per-sample gradients taken once by
the hooks and once by ``torch.func``; three configurations, each run under torch and, ported,
under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: images ``torch.randn(n, 1, 6, 6)`` shifted by class, token sequences from
  ``torch.randint`` with class-dependent tokens written through a boolean mask; Poisson
  sampling by a ``Sampler`` subclass yielding ``(torch.rand(n, generator=...) < q)
  .nonzero(as_tuple=False).reshape(-1).tolist()`` as a ``DataLoader``'s ``batch_sampler``
  over a ``TensorDataset``, with a ``collate_fn`` that calls ``default_collate`` or makes
  empty ``torch.zeros((0, *shape), dtype=...)`` batches (batches of varying size, the empty
  batch skipped);
- the per-sample gradients by hooks: ``register_forward_hook`` keeping ``input[0].detach()``,
  ``register_full_backward_hook`` reading ``grad_output[0]``, the ``Linear`` rule
  ``torch.einsum("n...i,n...j->nij", backprops, activations)`` and ``"n...k->nk"``, the
  ``Conv2d`` rule through ``F.unfold(..., padding=, stride=)``, ``reshape`` and
  ``torch.einsum("noq,npq->nop", ...)`` then ``.view(n, *weight.shape)``, the ``GroupNorm``
  rule ``F.group_norm(activations, groups, eps=) * backprops`` summed by ``einsum("ni...->ni")``,
  the ``Embedding`` rule ``torch.zeros(n, *weight.shape).scatter_add_(1, index, backprops)``
  over an ``unsqueeze(-1).expand(...)`` index, the loss's mean undone by ``* n``, the
  gradients kept as an attribute ``p.grad_sample`` of each parameter and accumulated;
- the per-sample gradients by ``torch.func``: ``functional_call(model, (params, buffers),
  (x.unsqueeze(0),))`` of ``{k: v.detach() for k, v in model.named_parameters()}`` under
  ``vmap(grad(loss_fn), in_dims=(None, None, 0, 0))`` (a dict of stacked gradients back);
- the private step: per-parameter norms ``g.reshape(len(g), -1).norm(2, dim=-1)`` stacked by
  ``torch.stack(..., dim=1)`` and ``.norm(2, dim=1)``, clip factors ``(C / (norms + 1e-6))
  .clamp(max=1.0)``, ``torch.einsum("i,i...", factors, g)``, noise ``std *
  torch.randn(p.shape, generator=generator)`` from a seeded ``torch.Generator``, the sum
  scaled by the expected batch size and installed as ``p.grad``; a wrapper optimizer's
  ``param_groups`` shared with the SGD it wraps, ``StepLR``;
- the accountant in float64: ``torch.lgamma`` binomial coefficients, ``torch.arange(...,
  dtype=torch.float64)``, ``torch.logsumexp``, ``torch.where(torch.isnan(...))``,
  ``torch.argmin``, the best order by ``.item()``;
- evaluation under ``torch.no_grad()``: accuracy by ``argmax``/``eq``/``sum``, the cosine
  between the private and the non-private gradient (``F.cosine_similarity`` of
  ``torch.cat`` of flattened gradients); the ``state_dict`` saved by ``torch.save`` to a
  buffer, loaded into a fresh model by ``load_state_dict`` and evaluated again.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``; ``p.grad`` read from ``grads``; ``p.grad = ...`` as ``p.grad_replace(grads,
...)``; ``optimizer.step(grads)``).
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
from torch.utils.data import DataLoader, Sampler, TensorDataset, default_collate


# -- per-sample gradients by hooks (a GradSampleModule) ------------------------------------------
def compute_linear_grad_sample(layer, activations, backprops):
    gs = {layer.weight: torch.einsum("n...i,n...j->nij", backprops, activations)}
    if layer.bias is not None:
        gs[layer.bias] = torch.einsum("n...k->nk", backprops)
    return gs


def compute_conv_grad_sample(layer, activations, backprops):
    n = activations.shape[0]
    unfolded = F.unfold(activations, layer.kernel_size, padding=layer.padding,
                        stride=layer.stride, dilation=layer.dilation)
    backprops = backprops.reshape(n, -1, unfolded.shape[-1])
    grad_sample = torch.einsum("noq,npq->nop", backprops, unfolded)
    gs = {layer.weight: grad_sample.view(n, *layer.weight.shape)}
    if layer.bias is not None:
        gs[layer.bias] = torch.sum(backprops, dim=2)
    return gs


def compute_group_norm_grad_sample(layer, activations, backprops):
    normalized = F.group_norm(activations, layer.num_groups, eps=layer.eps)
    return {layer.weight: torch.einsum("ni...->ni", normalized * backprops),
            layer.bias: torch.einsum("ni...->ni", backprops)}


def compute_embedding_grad_sample(layer, activations, backprops):
    n = activations.shape[0]
    index = activations.unsqueeze(-1).expand(*activations.shape, layer.embedding_dim)
    index = index.reshape(n, -1, layer.embedding_dim)
    grad_sample = torch.zeros(n, *layer.weight.shape, dtype=backprops.dtype)
    grad_sample.scatter_add_(1, index, backprops.reshape(n, -1, layer.embedding_dim))
    return {layer.weight: grad_sample}


GRAD_SAMPLERS = {
    nn.Linear: compute_linear_grad_sample,
    nn.Conv2d: compute_conv_grad_sample,
    nn.GroupNorm: compute_group_norm_grad_sample,
    nn.Embedding: compute_embedding_grad_sample,
}


class GradSampleModule(nn.Module):
    def __init__(self, m, batch_first=True, loss_reduction="mean", grad_sample_mode="hooks"):
        super().__init__()
        self._module = m
        self.loss_reduction = loss_reduction
        self.hooks = []
        for module in m.modules():
            if grad_sample_mode == "hooks" and type(module) in GRAD_SAMPLERS:
                self.hooks.append(module.register_forward_hook(self.capture_activations_hook))
                self.hooks.append(module.register_full_backward_hook(self.capture_backprops_hook))

    def forward(self, *args, **kwargs):
        return self._module(*args, **kwargs)

    def capture_activations_hook(self, module, forward_input, forward_output):
        if not torch.is_grad_enabled() or not module.training:
            return
        module.activations = forward_input[0].detach()

    def capture_backprops_hook(self, module, grad_input, grad_output):
        backprops = grad_output[0].detach()
        activations = module.activations
        n = activations.shape[0]
        if self.loss_reduction == "mean":
            backprops = backprops * n
        for param, gs in GRAD_SAMPLERS[type(module)](module, activations, backprops).items():
            if getattr(param, "grad_sample", None) is None:
                param.grad_sample = gs
            else:
                param.grad_sample += gs
        del module.activations

    def remove_hooks(self):
        for handle in self.hooks:
            handle.remove()


# -- the private optimizer ------------------------------------------------------------------------
class DPOptimizer:
    def __init__(self, optimizer, noise_multiplier, max_grad_norm, expected_batch_size, generator):
        self.original_optimizer = optimizer
        self.noise_multiplier = noise_multiplier
        self.max_grad_norm = max_grad_norm
        self.expected_batch_size = expected_batch_size
        self.generator = generator
        self.param_groups = optimizer.param_groups

    @property
    def params(self):
        return [p for group in self.param_groups for p in group["params"] if p.requires_grad]

    def clip_and_accumulate(self):
        per_param_norms = [g.reshape(len(g), -1).norm(2, dim=-1)
                           for g in (p.grad_sample for p in self.params)]
        per_sample_norms = torch.stack(per_param_norms, dim=1).norm(2, dim=1)
        per_sample_clip_factor = (self.max_grad_norm / (per_sample_norms + 1e-6)).clamp(max=1.0)
        for p in self.params:
            p.summed_grad = torch.einsum("i,i...", per_sample_clip_factor, p.grad_sample)
        return per_sample_norms

    def add_noise(self):
        for p in self.params:
            std = self.noise_multiplier * self.max_grad_norm
            noise = std * torch.randn(p.shape, generator=self.generator)
            p.grad = (p.summed_grad + noise) / self.expected_batch_size

    def zero_grad(self):
        for p in self.params:
            p.grad_sample = None
            p.summed_grad = None
        self.original_optimizer.zero_grad()

    @torch.no_grad()
    def step(self):
        norms = self.clip_and_accumulate()
        self.add_noise()
        self.original_optimizer.step()
        return norms


# -- the RDP accountant --------------------------------------------------------------------------
def compute_rdp(q, noise_multiplier, steps, orders):
    rdp = []
    for alpha in orders:
        i = torch.arange(alpha + 1, dtype=torch.float64)
        log_binom = (torch.lgamma(torch.tensor(alpha + 1.0, dtype=torch.float64))
                     - torch.lgamma(i + 1) - torch.lgamma(alpha - i + 1))
        log_terms = (log_binom + i * math.log(q) + (alpha - i) * math.log(1 - q)
                     + (i * i - i) / (2 * noise_multiplier ** 2))
        rdp.append(torch.logsumexp(log_terms, dim=0) / (alpha - 1))
    return torch.stack(rdp) * steps


def get_privacy_spent(orders, rdp, delta):
    orders_vec = torch.tensor(orders, dtype=torch.float64)
    eps = (rdp - (math.log(delta) + torch.log(orders_vec)) / (orders_vec - 1)
           + torch.log((orders_vec - 1) / orders_vec))
    eps = torch.where(torch.isnan(eps), torch.full_like(eps, float("inf")), eps)
    idx_opt = torch.argmin(eps)
    return eps[idx_opt].item(), orders[idx_opt.item()]


# -- the models and the data ---------------------------------------------------------------------
class SmallConvNet(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.gn1 = nn.GroupNorm(2, 4)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2)
        self.fc = nn.Linear(4 * 2 * 2, num_classes)

    def forward(self, x):
        x = torch.tanh(self.gn1(self.conv1(x)))
        x = torch.tanh(self.conv2(x))
        return self.fc(x.flatten(1))


class BagOfEmbeddings(nn.Module):
    def __init__(self, vocab=12, dim=5, num_classes=3):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.hidden = nn.Linear(dim, 6)
        self.fc = nn.Linear(6, num_classes)

    def forward(self, tokens):
        h = self.embedding(tokens).mean(dim=1)
        return self.fc(torch.tanh(self.hidden(h)))


def make_data(n):
    y = torch.randint(0, 3, (n,))
    if MODEL == "cnn":
        x = torch.randn(n, 1, 6, 6)
        x[:, :, :3, :3] += (y == 0).float().view(-1, 1, 1, 1)
        x[:, :, 3:, 3:] -= (y == 1).float().view(-1, 1, 1, 1)
        return x, y
    x = torch.randint(0, 12, (n, 5))
    keep = torch.rand(n, 5) < 0.4
    x[keep] = (y.unsqueeze(1) * 3).expand(n, 5)[keep]
    return x, y


def make_model():
    return SmallConvNet() if MODEL == "cnn" else BagOfEmbeddings()


def flat_grads(params):
    return torch.cat([p.grad.reshape(-1) for p in params])


def per_sample_grads_by_func(model, x, y):
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(params, buffers, sample, target):
        out = functional_call(model, (params, buffers), (sample.unsqueeze(0),))
        return F.cross_entropy(out, target.unsqueeze(0))

    return vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, x, y)


class UniformWithReplacementSampler(Sampler):
    def __init__(self, *, num_samples, sample_rate, generator=None, steps=None):
        self.num_samples = num_samples
        self.sample_rate = sample_rate
        self.generator = generator
        self.steps = steps if steps is not None else int(1 / sample_rate)

    def __len__(self):
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            mask = torch.rand(self.num_samples, generator=self.generator) < self.sample_rate
            indices = mask.nonzero(as_tuple=False).reshape(-1).tolist()
            yield indices


def wrap_collate_with_empty(sample_empty_shapes, dtypes):
    def collate(batch):
        if len(batch) > 0:
            return default_collate(batch)
        return [torch.zeros(shape, dtype=dtype) for shape, dtype in zip(sample_empty_shapes, dtypes)]

    return collate


def dp_data_loader(dataset, sample_rate, steps):
    x, y = dataset[0]
    batch_sampler = UniformWithReplacementSampler(num_samples=len(dataset),
                                                  sample_rate=sample_rate, steps=steps)
    collate_fn = wrap_collate_with_empty([(0, *x.shape), (0,)], [x.dtype, y.dtype])
    return DataLoader(dataset, batch_sampler=batch_sampler, collate_fn=collate_fn)


x_train, y_train = make_data(40)
x_test, y_test = make_data(20)
n, sample_rate, noise_multiplier, max_grad_norm, delta = len(x_train), 0.25, 0.8, 1.0, 1e-3
expected_batch_size = int(n * sample_rate)
train_loader = dp_data_loader(TensorDataset(x_train, y_train), sample_rate, steps=3)

base = make_model()
initialize(base)
model = GradSampleModule(base, grad_sample_mode=SAMPLER)
criterion = nn.CrossEntropyLoss()
sgd = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.5)
generator = torch.Generator().manual_seed(1234)
optimizer = DPOptimizer(sgd, noise_multiplier, max_grad_norm, expected_batch_size, generator)
scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=3, gamma=0.5)
steps = 0

for epoch in range(2):
    model.train()
    for data, target in train_loader:
        if len(target) == 0:
            continue
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, target)
        loss.backward()
        non_private = flat_grads(optimizer.params).clone()
        if SAMPLER == "functorch":
            ft_grads = per_sample_grads_by_func(base, data, target)
            for name, p in base.named_parameters():
                p.grad_sample = ft_grads[name]
        norms = optimizer.step()
        scheduler.step()
        steps += 1
        private = flat_grads(optimizer.params)
        cosine = F.cosine_similarity(private, non_private, dim=0)
        record.append([loss.item(), len(target), cosine.item(), sgd.param_groups[0]["lr"]])
        record.append(norms.detach().numpy().copy())
        record.append(params_of(base))
    print(f"epoch {epoch} loss {loss.item():.3f} steps {steps}")

orders = [2, 3, 4, 6, 8, 12, 16, 32]
rdp = compute_rdp(sample_rate, noise_multiplier, steps, orders)
epsilon, best_alpha = get_privacy_spent(orders, rdp, delta)
record.append(rdp.numpy().copy())
record.append([epsilon, best_alpha])
print(f"(epsilon = {epsilon:.2f}, delta = {delta}) at alpha {best_alpha}")

model.remove_hooks()
model.eval()
with torch.no_grad():
    logits = base(x_test)
    correct = logits.argmax(dim=1).eq(y_test).sum().item()
    record.append([correct, F.cross_entropy(logits, y_test).item()])

buffer = io.BytesIO()
torch.save(base.state_dict(), buffer)
buffer.seek(0)
restored = make_model()
restored.load_state_dict(torch.load(buffer))
restored.eval()
with torch.no_grad():
    record.append(F.softmax(restored(x_test[:6]), dim=1).numpy().copy())
"""

DP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    def add_noise(self):\n",
        "    def add_noise(self, grads):\n",
    ),
    (
        "            p.grad = (p.summed_grad + noise) / self.expected_batch_size\n",
        "            p.grad_replace(grads, (p.summed_grad + noise) / self.expected_batch_size)\n",
    ),
    (
        "        self.original_optimizer.zero_grad()\n\n    @torch.no_grad()\n    def step(self):\n"
        "        norms = self.clip_and_accumulate()\n        self.add_noise()\n"
        "        self.original_optimizer.step()\n",
        "        self.original_optimizer.zero_grad()\n\n    @torch.no_grad()\n    def step(self, grads):\n"
        "        norms = self.clip_and_accumulate()\n        self.add_noise(grads)\n"
        "        self.original_optimizer.step(grads)\n",
    ),
    (
        "def flat_grads(params):\n    return torch.cat([p.grad.reshape(-1) for p in params])\n",
        "def flat_grads(params, grads):\n"
        "    return torch.cat([p.grad(grads).reshape(-1) for p in params])\n",
    ),
    (
        "        loss.backward()\n        non_private = flat_grads(optimizer.params).clone()\n",
        "        grads = loss.backward()\n"
        "        non_private = flat_grads(optimizer.params, grads).clone()\n",
    ),
    (
        "        norms = optimizer.step()\n",
        "        norms = optimizer.step(grads)\n",
    ),
    (
        "        private = flat_grads(optimizer.params)\n",
        "        private = flat_grads(optimizer.params, grads)\n",
    ),
]


@pytest.mark.parametrize(
    "model, sampler", [("cnn", "hooks"), ("cnn", "functorch"), ("text", "hooks")]
)
def test_dp_sgd_with_per_sample_clipping_and_rdp_accounting_as_torch(capsys, model, sampler):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        DP_SOURCE,
        DP_STEPS,
        capsys,
        7802,
        initialize=initializer(),
        params_of=params_of,
        MODEL=model,
        SAMPLER=sampler,
    )
    assert len(theirs) == 3 * 6 + 4
    assert their_log == our_log and their_log.count("\n") == 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
