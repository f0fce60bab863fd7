"""Real ports, round 72 (the harness: ``tests/real_ports.py``): differentiable sorting and
ranking, a program written here in the style of ermongroup/neuralsort (the NeuralSort
relaxation of the sorting permutation, deterministic and with Gumbel perturbations, trained to
sort items by a hidden key), of the SoftSort reimplementations (a softmax over distances to the
sorted scores), of the soft-rank Spearman losses written with torchsort-like helpers
(pairwise sigmoid ranks) and of google-research/fast-soft-sort's PyTorch wrapper (a soft rank
by projection onto the permutahedron, an isotonic regression in NumPy inside a custom
``torch.autograd.Function``) and of Felix-Petersen/diffsort (an odd-even sorting network of
relaxed swaps); six configurations (``neuralsort``, ``neuralsort_gumbel``, ``softsort``,
``spearman``, ``fast_soft_rank``, ``diffsort``), each run under torch and, ported, under
retrograd from the same weights and draws, every record compared.

It reaches:

- the data: items ``torch.randn(batch, n, dim)`` keyed by ``x[..., 0] + 0.5 *
  torch.sin(...) - 0.25 * x[..., 2] ** 2``, the true order by ``torch.argsort(descending=True)``
  and the true ranks by a second ``argsort`` (``argsort`` of ``argsort``);
- the scorer: ``nn.Linear``/``nn.GELU`` in ``nn.Sequential``, ``.squeeze(-1)``, an output
  ``nn.Linear(..., bias=False)`` (every loss here is blind to a shift of the scores);
- NeuralSort: ``torch.abs(s - s.permute(0, 2, 1))``, ``torch.matmul`` with a column of ones
  and its ``transpose(0, 1)``, the scaling ``n + 1 - 2 * (torch.arange(n) + 1)`` of an int
  ``arange`` cast by ``.type(torch.float32)``, ``(C - B).permute(0, 2, 1)``, ``F.softmax(... /
  tau, dim=-1)``; Gumbel noise ``-torch.log(-torch.log(u + eps) + eps)`` from ``torch.rand``;
- SoftSort: ``s.sort(descending=True, dim=1)[0]``, ``(s.transpose(1, 2) - sorted).abs()
  .pow(p).neg() / tau`` and ``.softmax(-1)``;
- the losses: the row-wise cross-entropy ``-torch.sum(F.one_hot(perm, n).float() *
  torch.log(P_hat + eps), dim=-1)``, ``F.nll_loss`` of ``torch.log(...).flatten(0, 1)``
  against ``perm.flatten()``; soft ranks ``0.5 + torch.sigmoid(-(s_i - s_j) / tau).sum(-1)``
  whose Spearman correlation with the true ranks (centred by ``mean(-1, keepdim=True)``,
  scaled by ``F.normalize(dim=-1)``) is maximized; auxiliary losses on the soft-sorted items
  ``torch.einsum("bij,bjd->bid", P_hat, x)`` and on a soft top-k mask ``P_hat[:, :k].sum(1)``
  against ``gather`` of the keys in the true order;
- the sorting network: ``torch.eye(n).expand(batch, n, n)``, per layer the pairs' values by an
  integer-tensor column index, ``clone()`` and index assignment ``x[:, idx_a] = ...`` and
  ``X[:, :, idx_a] = ...`` of blended columns (autograd through both), ``alpha.unsqueeze(1)``
  broadcasts; the loss ``F.binary_cross_entropy`` of the ``clamp``-ed relaxed permutation
  against ``F.one_hot(perm.flip(-1), n).transpose(1, 2)``, and the hard order from
  ``X.transpose(1, 2).flip(1)``;
- the custom ``SoftRank(torch.autograd.Function)``: ``values.detach().cpu().numpy()`` in
  ``forward``, a pool-adjacent-violators isotonic fit per row, the permutations and block
  sizes kept on ``ctx`` as plain attributes, ``torch.from_numpy(...).to(values.dtype)``; a
  ``backward`` under ``@once_differentiable`` (imported ``from torch.autograd.function``)
  averaging the incoming gradient within each block, returning ``None`` for the strength;
- evaluation by an ``@torch.no_grad()`` function: the hard permutation
  ``P_hat.argmax(dim=-1)``, the fraction of items placed right and of sequences sorted whole
  (``.all(dim=-1)``), Kendall's tau from ``torch.sign`` of pairwise differences over
  ``torch.triu_indices``, rows of ``P_hat`` summing to one (``torch.allclose``);
- training: ``Adam``, a warm-up ``LambdaLR``, the temperature annealed per epoch by
  ``max(...)``, ``clip_grad_norm_``, a checkpoint through ``torch.save``/``torch.load`` of the
  ``state_dict`` with the temperature, restored by ``load_state_dict(strict=True)``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
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

SORTING_SOURCE = """import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def make_sequences(batch, n, dim=4):
    x = torch.randn(batch, n, dim)
    key = x[..., 0] + 0.5 * torch.sin(2.0 * x[..., 1]) - 0.25 * x[..., 2] ** 2
    perm = torch.argsort(key, dim=-1, descending=True)
    ranks = torch.argsort(perm, dim=-1)
    return x, key, perm, ranks


class Scorer(nn.Module):
    def __init__(self, dim, hidden=24):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                 nn.GELU(), nn.Linear(hidden, 1, bias=False))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def sample_gumbel(shape, eps=1e-20):
    u = torch.rand(shape)
    return -torch.log(-torch.log(u + eps) + eps)


def neural_sort(s, tau):
    # s: (batch, n, 1); row i of the result relaxes "which item is the i-th largest"
    n = s.size()[1]
    one = torch.ones((n, 1), dtype=s.dtype)
    A_s = torch.abs(s - s.permute(0, 2, 1))
    B = torch.matmul(A_s, torch.matmul(one, torch.transpose(one, 0, 1)))
    scaling = (n + 1 - 2 * (torch.arange(n) + 1)).type(torch.float32)
    C = torch.matmul(s, scaling.unsqueeze(0))
    P_max = (C - B).permute(0, 2, 1)
    return F.softmax(P_max / tau, dim=-1)


def soft_sort(s, tau, p=1):
    s = s.unsqueeze(-1)
    s_sorted = s.sort(descending=True, dim=1)[0]
    pairwise_distances = (s.transpose(1, 2) - s_sorted).abs().pow(p).neg() / tau
    return pairwise_distances.softmax(-1)


def odd_even_network(n):
    return [[(i, i + 1) for i in range(layer % 2, n - 1, 2)] for layer in range(n)]


def diff_sort(x, steepness, network):
    # an odd-even sorting network of relaxed swaps (ascending); X[b, i, j]: the weight of
    # input i at sorted position j
    n = x.shape[1]
    X = torch.eye(n, dtype=x.dtype).expand(x.shape[0], n, n)
    for pairs in network:
        idx_a = torch.tensor([pair[0] for pair in pairs])
        idx_b = torch.tensor([pair[1] for pair in pairs])
        a, b = x[:, idx_a], x[:, idx_b]
        alpha = torch.sigmoid((b - a) * steepness)
        x = x.clone()
        x[:, idx_a] = alpha * a + (1 - alpha) * b
        x[:, idx_b] = (1 - alpha) * a + alpha * b
        X_a, X_b = X[:, :, idx_a], X[:, :, idx_b]
        alpha = alpha.unsqueeze(1)
        X = X.clone()
        X[:, :, idx_a] = alpha * X_a + (1 - alpha) * X_b
        X[:, :, idx_b] = (1 - alpha) * X_a + alpha * X_b
    return x, X


def soft_rank(s, tau):
    diffs = s.unsqueeze(-1) - s.unsqueeze(-2)
    return 0.5 + torch.sigmoid(-diffs / tau).sum(-1)


def isotonic_l2(y):
    # pool adjacent violators: the non-increasing fit closest to y, and its blocks' sizes
    sums, counts = [], []
    for value in y:
        sums.append(float(value))
        counts.append(1)
        while len(sums) > 1 and sums[-2] / counts[-2] < sums[-1] / counts[-1]:
            total, count = sums.pop(), counts.pop()
            sums[-1] += total
            counts[-1] += count
    solution = np.concatenate([np.full(c, t / c) for t, c in zip(sums, counts)])
    return solution, counts


class SoftRank(torch.autograd.Function):
    # ranks in ascending order (1 for the smallest), the projection of values / strength onto
    # the permutahedron of (n, ..., 1) through an isotonic regression in NumPy
    @staticmethod
    def forward(ctx, values, regularization_strength):
        z = values.detach().cpu().numpy().astype(np.float64) / regularization_strength
        n = z.shape[1]
        w = np.arange(n, 0, -1, dtype=np.float64)
        out = np.empty_like(z)
        perms, blocks = [], []
        for row in range(z.shape[0]):
            perm = np.argsort(-z[row], kind="stable")
            s = z[row][perm]
            dual, sizes = isotonic_l2(s - w)
            out[row, perm] = s - dual
            perms.append(perm)
            blocks.append(sizes)
        ctx.perms, ctx.blocks = perms, blocks
        ctx.regularization_strength = regularization_strength
        return torch.from_numpy(out).to(values.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        g = grad_output.detach().cpu().numpy().astype(np.float64)
        grad = np.empty_like(g)
        for row, (perm, sizes) in enumerate(zip(ctx.perms, ctx.blocks)):
            g_sorted = g[row][perm]
            start, pooled = 0, np.empty_like(g_sorted)
            for size in sizes:
                pooled[start:start + size] = g_sorted[start:start + size].mean()
                start += size
            grad[row, perm] = g_sorted - pooled
        grad = torch.from_numpy(grad / ctx.regularization_strength)
        return grad.to(grad_output.dtype), None


def spearman_loss(scores, ranks, tau):
    if METHOD == "fast_soft_rank":
        pred = SoftRank.apply(scores, tau / 10)
        target = (scores.shape[1] - ranks).float()
    else:
        pred = soft_rank(scores, tau)
        target = ranks.float() + 1.0
    pred = F.normalize(pred - pred.mean(-1, keepdim=True), dim=-1)
    target = F.normalize(target - target.mean(-1, keepdim=True), dim=-1)
    return 1.0 - (pred * target).sum(-1).mean()


def permutation_matrix(scores, tau):
    if METHOD == "diffsort":
        _, X = diff_sort(scores, 5.0 / tau, odd_even_network(scores.shape[1]))
        return X.transpose(1, 2).flip(1)
    if METHOD == "softsort":
        return soft_sort(scores, tau)
    if METHOD == "neuralsort_gumbel" and torch.is_grad_enabled():
        scores = scores + 0.5 * sample_gumbel(scores.shape)
    return neural_sort(scores.unsqueeze(-1), tau)


def objective(scores, x, key, perm, ranks, tau, eps=1e-20):
    n = scores.shape[1]
    if METHOD in ("spearman", "fast_soft_rank"):
        return spearman_loss(scores, ranks, tau)
    if METHOD == "diffsort":
        _, X = diff_sort(scores, 5.0 / tau, odd_even_network(n))
        P_true = F.one_hot(perm.flip(-1), n).transpose(1, 2).float()
        return F.binary_cross_entropy(X.clamp(1e-6, 1 - 1e-6), P_true)
    P_hat = permutation_matrix(scores, tau)
    if METHOD == "softsort":
        loss = F.nll_loss(torch.log(P_hat + eps).flatten(0, 1), perm.flatten())
    else:
        P_true = F.one_hot(perm, n).float()
        loss = -torch.sum(P_true * torch.log(P_hat + eps), dim=-1).mean()
    sorted_items = torch.einsum("bij,bjd->bid", P_hat, x)
    first = (sorted_items[:, 0, 0] - x[..., 0].gather(1, perm[:, :1]).squeeze(1)).pow(2)
    top_mask = P_hat[:, :2].sum(1)
    top_sum = ((top_mask * key).sum(1) - key.gather(1, perm[:, :2]).sum(1)).pow(2)
    return loss + 0.1 * first.mean() + 0.05 * top_sum.mean()


@torch.no_grad()
def evaluate(model, x, key, perm, tau):
    scores = model(x)
    n = scores.shape[1]
    if METHOD in ("spearman", "fast_soft_rank"):
        P_hat = neural_sort(scores.unsqueeze(-1), tau)
    else:
        P_hat = permutation_matrix(scores, tau)
    assert torch.allclose(P_hat.sum(-1), torch.ones(P_hat.shape[:2]), atol=1e-5)
    hard = P_hat.argmax(dim=-1)
    placed = (hard == perm).float().mean().item()
    whole = (hard == perm).all(dim=-1).float().mean().item()
    i, j = torch.triu_indices(n, n, offset=1)
    agree = torch.sign(scores[:, i] - scores[:, j]) * torch.sign(key[:, i] - key[:, j])
    kendall = agree.mean().item()
    top_mask = P_hat[:, :2].sum(1)
    return placed, whole, kendall, top_mask


n_items = 5
train = [make_sequences(8, n_items) for _ in range(3)]
x_val, key_val, perm_val, ranks_val = make_sequences(16, n_items)
model = Scorer(x_val.shape[-1])
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
warmup = 3
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
tau0 = 1.0

for epoch in range(4):
    tau = max(0.25, tau0 * 0.7 ** epoch)
    model.train()
    for x, key, perm, ranks in train:
        loss = objective(model(x), x, key, perm, ranks, tau)
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
        scheduler.step()
        record.append([loss.item(), float(norm), scheduler.get_last_lr()[0]])
    model.eval()
    placed, whole, kendall, top_mask = evaluate(model, x_val, key_val, perm_val, tau)
    record.append([placed, whole, kendall, tau])
    record.append(top_mask.numpy().copy())
    record.append(params_of(model))
    print("epoch {} tau {:.3f} placed {:.3f} kendall {:.3f}".format(epoch, tau, placed, kendall))

buffer = io.BytesIO()
torch.save({"state_dict": model.state_dict(), "tau": tau}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = Scorer(x_val.shape[-1])
restored.load_state_dict(checkpoint["state_dict"], strict=True)
restored.eval()
with torch.no_grad():
    scores = restored(x_val)
    record.append(scores.numpy().copy())
    record.append(neural_sort(scores[:3].unsqueeze(-1), checkpoint["tau"]).numpy().copy())
    record.append(soft_sort(scores[:3], checkpoint["tau"]).numpy().copy())
    record.append(soft_rank(scores[:3], checkpoint["tau"]).numpy().copy())
    record.append(SoftRank.apply(scores[:3], 0.1).numpy().copy())
    record.append(diff_sort(scores[:3], 20.0, odd_even_network(n_items))[0].numpy().copy())
    record.append(torch.argsort(scores, dim=-1, descending=True)[:4].tolist())
"""

SORTING_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 2.0)\n"
        "        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    "method",
    ["neuralsort", "neuralsort_gumbel", "softsort", "spearman", "fast_soft_rank", "diffsort"],
)
def test_differentiable_sorting_as_torch(capsys, method):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SORTING_SOURCE,
        SORTING_STEPS,
        capsys,
        7203,
        initialize=initializer(),
        params_of=params_of,
        METHOD=method,
    )
    assert len(theirs) == 4 * (3 + 3) + 7
    assert their_log == our_log and their_log.count("\n") == 4
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
