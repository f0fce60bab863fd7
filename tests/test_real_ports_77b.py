"""Real ports, round 77 (the harness: ``tests/real_ports.py``): sparse autoencoders for
interpretability, a program written here in the style of openai/sparse_autoencoder,
EleutherAI/sae and SAELens (a dictionary of features learned from a model's hidden
activations), run under torch and, ported, under retrograd from the same weights and draws,
every record compared; once as a ReLU SAE with an L1 penalty weighted by decoder norms, once as
a TopK SAE with the AuxK loss of dead latents, once as a JumpReLU SAE (Gemma Scope's) with an L0
penalty trained through straight-through pseudo-derivatives.

It reaches:

- the activations: a frozen toy model (``requires_grad_(False)`` on its parameters, ``eval()``)
  fed sparse features ``torch.where(torch.rand(...) < p, torch.rand(...), torch.zeros(()))``,
  its hidden layer harvested by ``register_forward_hook`` with a lambda storing
  ``output.detach()`` in a dict, the hook's handle ``remove()``d, batches ``torch.cat``;
- the model: ``nn.Parameter`` of ``nn.init.kaiming_uniform_(torch.empty(...))``, the decoder tied
  at init by ``W_enc.data.T.clone().contiguous()``, a ``long`` buffer counting tokens since each
  latent fired; ``@torch.no_grad()`` methods: the decoder rows renormalised by
  ``W_dec.data /= W_dec.data.norm(dim=-1, keepdim=True)``, the gradient parallel to the decoder
  directions removed through ``torch.einsum("fd,fd->f", ...)`` and an in-place ``-=`` on
  ``W_dec.grad``; the encoder ``(x - b_dec) @ W_enc + b_enc``; TopK by the named tuple of
  ``torch.topk(pre, k, dim=-1, sorted=False)`` (``.indices``, ``.values``) and
  ``torch.zeros_like(pre).scatter_(-1, indices, F.relu(values))``;
- JumpReLU: two ``torch.autograd.Function`` subclasses, one in the ``setup_context`` style (a
  ``forward`` without ``ctx``, ``del output``) and one with ``forward(ctx, ...)``, both
  ``ctx.save_for_backward``/``ctx.saved_tensors`` and a float attribute on ``ctx``, backwards
  returning ``None`` for the bandwidth and a threshold gradient ``torch.sum(..., dim=0)`` of a
  rectangle kernel ``((x > -0.5) & (x < 0.5)).to(x)``; thresholds ``exp()`` of a
  ``torch.full((d,), math.log(...))`` parameter;
- the losses: the summed squared error, the fraction of variance unexplained, the L1 of
  ``acts * W_dec.norm(dim=1)``; AuxK over dead latents by ``torch.where(dead[None], pre,
  -torch.inf)``, ``Tensor.topk`` unpacked, out-of-place ``scatter``, ``e.detach()``,
  ``pre.new_tensor(0.0)`` when none are dead; the buffer updated under ``torch.no_grad()`` by
  ``+= x.shape[0]`` and a boolean-mask assignment of ``(acts > 0).any(dim=0)``;
- initialisation of ``b_dec`` at the geometric median (Weiszfeld iterations,
  ``torch.linalg.vector_norm``, ``torch.clamp(min=)``, a ``torch.norm`` convergence test, a
  ``.data =`` assignment); resampling of dead latents (``nonzero(as_tuple=True)``,
  ``argsort(descending=True)`` of per-input losses, ``W_enc[:, ~dead].norm(dim=0).mean()``,
  row and column assignments through ``.data[idx]`` and ``.data[:, idx]``, Adam's
  ``optimizer.state[p]["exp_avg"]``/``["exp_avg_sq"]`` zeroed by index tuples);
- training: ``Adam`` with ``betas`` and ``eps``, a warm-up ``LambdaLR``, ``clip_grad_norm_``;
  the checkpoint through ``torch.save`` of ``{"sae", "optimizer", "k"}`` to a buffer,
  ``torch.load``, ``load_state_dict`` (the buffer too); evaluation under ``torch.no_grad()``:
  the held-out FVU, firing frequencies, the decoder's cosine matrix by ``F.normalize`` with
  ``fill_diagonal_(0.0)`` and ``abs().amax(dim=1)``, codes in float64 by ``.double()``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``W_dec.grad(grads)`` written in place, ``clip_grad_norm_(grads, ...)``,
``optimizer.step(grads)``).
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

SAE_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F


class ToyModel(nn.Module):
    # the model whose activations the dictionary explains: features superposed in a narrow
    # hidden layer (a toy-models-of-superposition MLP)

    def __init__(self, n_features, d_hidden):
        super().__init__()
        self.embed = nn.Linear(n_features, d_hidden, bias=False)
        self.act = nn.GELU()
        self.unembed = nn.Linear(d_hidden, n_features)

    def forward(self, x):
        return self.unembed(self.act(self.embed(x)))


def sparse_features(batch, n_features, p_active=0.2):
    active = torch.rand(batch, n_features) < p_active
    magnitude = torch.rand(batch, n_features)
    return torch.where(active, magnitude, torch.zeros(()))


def rectangle(x):
    return ((x > -0.5) & (x < 0.5)).to(x)


class Step(torch.autograd.Function):
    # the Heaviside step with a straight-through pseudo-derivative for the threshold (JumpReLU)
    @staticmethod
    def forward(x, threshold, bandwidth):
        return (x > threshold).to(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, threshold, bandwidth = inputs
        del output
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth

    @staticmethod
    def backward(ctx, grad_output):
        x, threshold = ctx.saved_tensors
        bandwidth = ctx.bandwidth
        x_grad = 0.0 * grad_output
        threshold_grad = torch.sum(
            -(1.0 / bandwidth) * rectangle((x - threshold) / bandwidth) * grad_output, dim=0)
        return x_grad, threshold_grad, None


class JumpReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, threshold, bandwidth):
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return x * (x > threshold).to(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, threshold = ctx.saved_tensors
        bandwidth = ctx.bandwidth
        x_grad = (x > threshold) * grad_output
        threshold_grad = torch.sum(
            -(threshold / bandwidth) * rectangle((x - threshold) / bandwidth) * grad_output,
            dim=0)
        return x_grad, threshold_grad, None


class SparseAutoencoder(nn.Module):
    def __init__(self, d_in, d_sae, k=None, l1_coefficient=1e-2, dead_tokens_threshold=48,
                 auxk=8, auxk_coefficient=1 / 32):
        super().__init__()
        self.d_in, self.d_sae, self.k = d_in, d_sae, k
        self.l1_coefficient = l1_coefficient
        self.dead_tokens_threshold = dead_tokens_threshold
        self.auxk, self.auxk_coefficient = auxk, auxk_coefficient
        self.W_enc = nn.Parameter(torch.nn.init.kaiming_uniform_(torch.empty(d_in, d_sae)))
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.W_dec = nn.Parameter(self.W_enc.data.T.clone().contiguous())
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        self.register_buffer("num_tokens_since_fired", torch.zeros(d_sae, dtype=torch.long))
        if k == "jumprelu":
            self.log_threshold = nn.Parameter(torch.full((d_sae,), math.log(0.05)))
            self.bandwidth = 0.05
        self.set_decoder_norm_to_unit_norm()

    @torch.no_grad()
    def set_decoder_norm_to_unit_norm(self):
        self.W_dec.data /= self.W_dec.data.norm(dim=-1, keepdim=True)

    @torch.no_grad()
    def remove_gradient_parallel_to_decoder_directions(self):
        parallel = torch.einsum("fd,fd->f", self.W_dec.grad, self.W_dec.data)
        self.W_dec.grad -= torch.einsum("f,fd->fd", parallel, self.W_dec.data)

    def pre_acts(self, x):
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def encode(self, x):
        pre = self.pre_acts(x)
        if self.k is None:
            return F.relu(pre), pre
        if self.k == "jumprelu":
            return JumpReLUFunction.apply(pre, self.log_threshold.exp(), self.bandwidth), pre
        top = torch.topk(pre, self.k, dim=-1, sorted=False)
        acts = torch.zeros_like(pre).scatter_(-1, top.indices, F.relu(top.values))
        return acts, pre

    def decode(self, acts):
        return acts @ self.W_dec + self.b_dec

    def forward(self, x):
        acts, pre = self.encode(x)
        x_hat = self.decode(acts)
        e = x_hat - x
        mse = e.pow(2).sum(dim=-1).mean()
        total_variance = (x - x.mean(0)).pow(2).sum()
        fvu = e.pow(2).sum() / total_variance
        if self.k is None:
            sparsity = (acts * self.W_dec.norm(dim=1)).sum(dim=-1).mean()
            loss = mse + self.l1_coefficient * sparsity
        elif self.k == "jumprelu":
            threshold = torch.exp(self.log_threshold)
            sparsity = Step.apply(pre, threshold, self.bandwidth).sum(dim=-1).mean()
            loss = mse + self.l1_coefficient * sparsity
        else:
            sparsity = self.auxk_loss(pre, e)
            loss = mse + self.auxk_coefficient * sparsity
        fired = (acts > 0).any(dim=0)
        with torch.no_grad():
            self.num_tokens_since_fired += x.shape[0]
            self.num_tokens_since_fired[fired] = 0
        return loss, mse, sparsity, fvu, acts

    def dead_mask(self):
        return self.num_tokens_since_fired > self.dead_tokens_threshold

    def auxk_loss(self, pre, e):
        dead = self.dead_mask()
        num_dead = int(dead.sum())
        if num_dead == 0:
            return pre.new_tensor(0.0)
        k_aux = min(self.auxk, num_dead)
        auxk_pre = torch.where(dead[None], pre, -torch.inf)
        auxk_values, auxk_indices = auxk_pre.topk(k_aux, sorted=False)
        buf = torch.zeros_like(pre)
        auxk_acts = buf.scatter(-1, auxk_indices, F.relu(auxk_values))
        e_hat = auxk_acts @ self.W_dec
        return (e_hat + e.detach()).pow(2).sum(-1).mean() / e.detach().pow(2).sum(-1).mean()


@torch.no_grad()
def geometric_median(points, max_iter=20, tol=1e-6):
    median = points.mean(dim=0)
    weights = torch.ones(len(points), dtype=points.dtype)
    for _ in range(max_iter):
        previous = median.clone()
        distances = torch.linalg.vector_norm(points - median[None], dim=1)
        weights = 1.0 / torch.clamp(distances, min=1e-8)
        median = (weights.unsqueeze(1) * points).sum(dim=0) / weights.sum()
        if torch.norm(median - previous) < tol:
            break
    return median


@torch.no_grad()
def resample_dead_latents(sae, optimizer, activations, dead):
    # Anthropic's resampling: dead latents pointed at the worst-reconstructed inputs
    idx = dead.nonzero(as_tuple=True)[0]
    if idx.numel() == 0:
        return 0
    acts, _ = sae.encode(activations)
    losses = (sae.decode(acts) - activations).pow(2).sum(dim=-1)
    worst = losses.argsort(descending=True)[: idx.numel()]
    directions = activations[worst] - sae.b_dec
    directions = directions / directions.norm(dim=-1, keepdim=True)
    alive_norm = sae.W_enc[:, ~dead].norm(dim=0).mean()
    sae.W_dec.data[idx] = directions
    sae.W_enc.data[:, idx] = directions.T * alive_norm * 0.2
    sae.b_enc.data[idx] = 0.0
    for p, sl in ((sae.W_dec, (idx,)), (sae.W_enc, (slice(None), idx)), (sae.b_enc, (idx,))):
        state = optimizer.state[p]
        state["exp_avg"][sl] = 0.0
        state["exp_avg_sq"][sl] = 0.0
    sae.num_tokens_since_fired[idx] = 0
    return idx.numel()


torch.manual_seed(0)
n_features, d_hidden, d_sae = 12, 6, 32
model = ToyModel(n_features, d_hidden)
initialize(model)
model.eval()
for p in model.parameters():
    p.requires_grad_(False)

cache = {}
handle = model.embed.register_forward_hook(
    lambda module, inputs, output: cache.__setitem__("hidden", output.detach()))

def harvest(batch):
    with torch.no_grad():
        model(sparse_features(batch, n_features))
    return cache["hidden"]

buffer = torch.cat([harvest(32) for _ in range(3)], dim=0)
held_out = harvest(24)
handle.remove()
record.append(buffer.numpy().copy())

sae = SparseAutoencoder(d_hidden, d_sae, k=K, l1_coefficient=0.05, dead_tokens_threshold=20)
initialize(sae)
sae.b_dec.data = geometric_median(buffer).to(sae.b_dec.dtype)
record.append(sae.b_dec.detach().numpy().copy())
optimizer = torch.optim.Adam(sae.parameters(), lr=4e-3, betas=(0.9, 0.999), eps=6.25e-10)
warmup = 3
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))

batch_size = 16
for step in range(8):
    x = buffer[(step * batch_size) % len(buffer):][:batch_size]
    loss, mse, sparsity, fvu, acts = sae(x)
    optimizer.zero_grad()
    loss.backward()
    sae.remove_gradient_parallel_to_decoder_directions()
    torch.nn.utils.clip_grad_norm_(sae.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    sae.set_decoder_norm_to_unit_norm()
    l0 = (acts > 0).float().sum(dim=-1).mean()
    dead = sae.dead_mask()
    record.append([loss.item(), mse.item(), float(sparsity), fvu.item(), l0.item(),
                   int(dead.sum()), scheduler.get_last_lr()[0]])
    record.append(params_of(sae))
    if step == 4:
        record.append([int(dead.sum()), resample_dead_latents(sae, optimizer, buffer, dead)])
        record.append(params_of(sae))
    print(f"step {step} loss {loss.item():.4f} l0 {l0.item():.2f} dead {int(dead.sum())}")

record.append(sae.num_tokens_since_fired.tolist())
stream = io.BytesIO()
torch.save({"sae": sae.state_dict(), "optimizer": optimizer.state_dict(), "k": sae.k}, stream)
stream.seek(0)
checkpoint = torch.load(stream)
restored = SparseAutoencoder(d_hidden, d_sae, k=checkpoint["k"])
restored.load_state_dict(checkpoint["sae"])
restored.eval()
with torch.no_grad():
    acts, _ = restored.encode(held_out)
    x_hat = restored.decode(acts)
    fvu = (x_hat - held_out).pow(2).sum() / (held_out - held_out.mean(0)).pow(2).sum()
    frequency = (acts > 0).float().mean(dim=0)
    cosine = F.normalize(restored.W_dec, dim=-1) @ F.normalize(restored.W_dec, dim=-1).T
    cosine.fill_diagonal_(0.0)
    max_cos = cosine.abs().amax(dim=1)
    acts64, _ = restored.double().encode(held_out.double())
    record.append([fvu.item(), len(checkpoint["optimizer"]["state"])])
    record.append(x_hat.numpy().copy())
    record.append(frequency.numpy().copy())
    record.append(max_cos.numpy().copy())
    record.append(acts64.numpy().copy())
    record.append([str(acts64.dtype).split(".")[-1], (acts > 0).sum(dim=-1).tolist()])
    record.append(restored.num_tokens_since_fired.tolist())
"""

SAE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    def remove_gradient_parallel_to_decoder_directions(self):\n"
        '        parallel = torch.einsum("fd,fd->f", self.W_dec.grad, self.W_dec.data)\n'
        "        self.W_dec.grad -= ",
        "    def remove_gradient_parallel_to_decoder_directions(self, grads):\n"
        "        grad = self.W_dec.grad(grads)\n"
        '        parallel = torch.einsum("fd,fd->f", grad, self.W_dec.data)\n'
        "        grad -= ",
    ),
    (
        "    loss.backward()\n"
        "    sae.remove_gradient_parallel_to_decoder_directions()\n"
        "    torch.nn.utils.clip_grad_norm_(sae.parameters(), 1.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    sae.remove_gradient_parallel_to_decoder_directions(grads)\n"
        "    torch.nn.utils.clip_grad_norm_(grads, sae.parameters(), 1.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("k", [None, 2, "jumprelu"], ids=["relu_l1", "topk_auxk", "jumprelu_l0"])
def test_sparse_autoencoder_as_torch(capsys, k):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SAE_SOURCE,
        SAE_STEPS,
        capsys,
        7701,
        initialize=initializer(),
        params_of=params_of,
        K=k,
    )
    assert len(theirs) == 2 + 2 * 8 + 2 + 1 + 7
    assert their_log == our_log and their_log.count("\n") == 8
    if k == "jumprelu":  # the L0 penalty, through Step's pseudo-derivative, prunes latents
        assert theirs[18][4] < theirs[2][4] - 1.0
    if isinstance(k, int):
        dead, resampled = theirs[2 + 2 * 5]
        assert dead == resampled > 0  # the TopK run resamples its dead latents at step 4
        assert all(row == k for row in theirs[-2][1])  # k latents fire on every input
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
