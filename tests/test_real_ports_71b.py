"""Real ports, round 71 (the harness: ``tests/real_ports.py``): learning to rank, a program
written here in the style of allegro/allRank (a slate-scoring transformer over padded
slates, trained by five listwise and pairwise losses and measured by NDCG@k and MRR), run under
torch and, ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: slates padded to a fixed length with the label ``-1`` (``PADDED_Y_VALUE``), the
  padding found by ``y == PADDED_Y_VALUE``, the features of padded documents zeroed by
  ``x[mask] = 0.0`` (a boolean index of two dims over a 3-D tensor), relevance built from
  features by ``torch.bucketize`` of a score over boundaries, ``.clamp_(0, 4)`` in place;
- the model: a ``FCModel`` (``nn.Linear``, ``nn.LayerNorm``, ``nn.ReLU``, ``nn.Dropout`` off
  by ``p=0``), an ``nn.TransformerEncoderLayer(batch_first=True)`` in ``nn.TransformerEncoder``
  with ``src_key_padding_mask`` (a bool mask), an output layer ``scale *
  nn.Tanh()(w_1(x).squeeze(dim=2))``, the padded scores ``masked_fill(mask, float('-inf'))``;
- the losses: ListNet (``F.softmax`` of the true labels with padding ``-inf``, the
  ``torch.log`` of the predictions' softmax ``+ eps``, ``torch.mean(-torch.sum(...,
  dim=1))``); RankNet over document pairs (``torch.combinations`` of the slate's indices,
  ``index_select`` of both ends, pair validity by ``&=`` of comparisons, the
  ``F.binary_cross_entropy_with_logits`` of boolean-indexed pairs with a per-pair ``weight``);
  LambdaLoss with NDCG-Loss2++ weights (``sort(descending=True)``, ``torch.gather`` of the
  true labels in the predicted order, ``torch.isfinite`` pair masks, a bool mask's
  ``[:k, :k] = 1`` slice assignment, ``clamp_(min=0.0)`` in place, the ``torch.pow(2, y) - 1``
  gains over ``torch.log2(1 + positions)`` discounts, ``D[0, rho - 1]`` indexing by an integer
  matrix, ``torch.triu``/``tril`` with ``diagonal=``, ``torch.abs`` of differences of
  ``[:, :, None]`` broadcasts, ``torch.isnan`` fill, ``torch.log2`` of ``sigmoid(...).clamp(
  min=eps) ** weights``), once in float64 by ``.double()``; ListMLE (a permutation by
  ``torch.argsort(torch.rand(n))`` indexing columns, ``sort(stable=True)``, ``-inf`` and ``0.0``
  boolean-mask assignments, ``max(dim=1, keepdim=True)``, the reversed ``torch.cumsum`` of
  ``exp()`` between two ``flip(dims=[1])``); ApproxNDCG (a bool mask's diagonal zeroed in
  place through ``diagonal(dim1=-2, dim2=-1).zero_()``, ``scores_diffs[~mask] = 0.0``,
  approximate ranks by ``1 + sum(sigmoid(-alpha * diffs))``);
- the metrics under ``torch.no_grad()``: ``ndcg`` by ``sort``, ``gather``, the
  ``sum`` of ``[:, :k]`` slices, ``torch.where`` for an ideal DCG of zero (NaN-free), ``mrr``
  by ``argmax`` of ``(sorted_true > 0).float()`` and ``torch.any`` rows;
- training: ``AdamW`` with two parameter groups (no weight decay on norms and biases, chosen
  by ``named_parameters``), ``clip_grad_norm_``, ``CosineAnnealingLR``; the checkpoint through
  ``torch.save`` of ``{"model", "optimizer", "scheduler"}`` to a buffer, ``torch.load``,
  ``load_state_dict``, and an evaluation of the restored model.

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

LTR_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F

PADDED_Y_VALUE = -1
DEFAULT_EPS = 1e-10


def make_slates(n_slates, slate_length, n_features):
    x = torch.randn(n_slates, slate_length, n_features)
    lengths = torch.randint(3, slate_length + 1, (n_slates,))
    positions = torch.arange(slate_length).unsqueeze(0).expand(n_slates, -1)
    padded = positions >= lengths.unsqueeze(1)
    hidden = x[..., 0] * 1.5 - x[..., 1] + 0.5 * x[..., 2] * x[..., 3]
    y = torch.bucketize(hidden, torch.tensor([-1.0, 0.0, 1.0, 2.0])).float()
    y.clamp_(0, 4)
    y[padded] = PADDED_Y_VALUE
    x[padded] = 0.0
    return x, y


class FCModel(nn.Module):
    def __init__(self, n_features, sizes, dropout=0.0):
        super().__init__()
        layers, width = [], n_features
        for size in sizes:
            layers += [nn.Linear(width, size), nn.LayerNorm(size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        self.layers = nn.Sequential(*layers)
        self.output_size = width

    def forward(self, x):
        return self.layers(x)


class OutputLayer(nn.Module):
    def __init__(self, d_model, output_dim=1, scale=3.0):
        super().__init__()
        self.activation = nn.Tanh()
        self.w_1 = nn.Linear(d_model, output_dim)
        self.scale = scale

    def forward(self, x):
        return self.scale * self.activation(self.w_1(x).squeeze(dim=2))


class LTRModel(nn.Module):
    def __init__(self, n_features, d_model=16, n_heads=2):
        super().__init__()
        self.input_layer = FCModel(n_features, [d_model])
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=32, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.output_layer = OutputLayer(d_model)

    def forward(self, x, mask):
        h = self.encoder(self.input_layer(x), src_key_padding_mask=mask)
        return self.output_layer(h)

    def score(self, x, mask):
        return self.forward(x, mask).masked_fill(mask, float("-inf"))


def listNet(y_pred, y_true, eps=DEFAULT_EPS, padded_value_indicator=PADDED_Y_VALUE):
    y_pred = y_pred.clone()
    y_true = y_true.clone()
    mask = y_true == padded_value_indicator
    y_pred[mask] = float("-inf")
    y_true[mask] = float("-inf")
    preds_smax = F.softmax(y_pred, dim=1)
    true_smax = F.softmax(y_true, dim=1)
    preds_smax = preds_smax + eps
    preds_log = torch.log(preds_smax)
    return torch.mean(-torch.sum(true_smax * preds_log, dim=1))


def rankNet(y_pred, y_true, padded_value_indicator=PADDED_Y_VALUE, weight_by_diff=True):
    slate_length = y_true.shape[1]
    pairs = torch.combinations(torch.arange(slate_length), r=2)
    first, second = pairs[:, 0], pairs[:, 1]
    pred_diffs = y_pred.index_select(1, first) - y_pred.index_select(1, second)
    true_first, true_second = y_true.index_select(1, first), y_true.index_select(1, second)
    true_diffs = true_first - true_second
    valid = (true_first != padded_value_indicator) & (true_second != padded_value_indicator)
    valid &= true_diffs != 0
    targets = (true_diffs > 0).to(y_pred.dtype)
    weight = true_diffs.abs() if weight_by_diff else torch.ones_like(true_diffs)
    return F.binary_cross_entropy_with_logits(pred_diffs[valid], targets[valid],
                                              weight=weight[valid])


def lambdaLoss(y_pred, y_true, eps=DEFAULT_EPS, padded_value_indicator=PADDED_Y_VALUE, k=None,
               sigma=1.0, mu=10.0):
    device = y_pred.device
    y_pred = y_pred.clone()
    y_true = y_true.clone()
    padded_mask = y_true == padded_value_indicator
    y_pred[padded_mask] = float("-inf")
    y_true[padded_mask] = float("-inf")

    y_pred_sorted, indices_pred = y_pred.sort(descending=True, dim=-1)
    y_true_sorted, _ = y_true.sort(descending=True, dim=-1)
    true_sorted_by_preds = torch.gather(y_true, dim=1, index=indices_pred)
    true_diffs = true_sorted_by_preds[:, :, None] - true_sorted_by_preds[:, None, :]
    padded_pairs_mask = torch.isfinite(true_diffs)
    padded_pairs_mask = padded_pairs_mask & (true_diffs > 0)
    ndcg_at_k_mask = torch.zeros((y_pred.shape[1], y_pred.shape[1]), dtype=torch.bool,
                                 device=device)
    ndcg_at_k_mask[:k, :k] = 1

    true_sorted_by_preds.clamp_(min=0.0)
    y_true_sorted.clamp_(min=0.0)
    pos_idxs = torch.arange(1, y_pred.shape[1] + 1).to(device)
    D = torch.log2(1.0 + pos_idxs.float())[None, :]
    maxDCGs = torch.sum(((torch.pow(2, y_true_sorted) - 1) / D)[:, :k], dim=-1).clamp(min=eps)
    G = (torch.pow(2, true_sorted_by_preds) - 1) / maxDCGs[:, None]

    pos_idxs_long = pos_idxs.long()
    rho = torch.abs(pos_idxs_long[:, None] - pos_idxs_long[None, :])
    mu_disc = torch.abs(torch.pow(D[0, rho - 1], -1.0) - torch.pow(D[0, rho], -1.0))
    mu_disc = torch.triu(mu_disc, diagonal=1) + torch.tril(mu_disc, diagonal=-1)
    gain_gaps = torch.abs(G[:, :, None] - G[:, None, :])
    lambda_rank = torch.abs(torch.pow(D[:, :, None], -1.0) - torch.pow(D[:, None, :], -1.0))
    weights = mu * mu_disc[None, :, :] * gain_gaps + lambda_rank * gain_gaps

    scores_diffs = (y_pred_sorted[:, :, None] - y_pred_sorted[:, None, :]).clamp(min=-1e8, max=1e8)
    scores_diffs = scores_diffs.masked_fill(torch.isnan(scores_diffs), 0.0)
    weighted_probas = (torch.sigmoid(sigma * scores_diffs).clamp(min=eps) ** weights).clamp(min=eps)
    losses = torch.log2(weighted_probas)
    masked_losses = losses[padded_pairs_mask & ndcg_at_k_mask]
    return -torch.sum(masked_losses) / y_pred.shape[0]


def listMLE(y_pred, y_true, eps=DEFAULT_EPS, padded_value_indicator=PADDED_Y_VALUE):
    # shuffle for randomised tie resolution (a permutation by argsort of uniform draws)
    random_indices = torch.argsort(torch.rand(y_pred.shape[-1]))
    y_pred_shuffled = y_pred[:, random_indices]
    y_true_shuffled = y_true[:, random_indices]
    y_true_sorted, indices = y_true_shuffled.sort(descending=True, dim=-1, stable=True)
    mask = y_true_sorted == padded_value_indicator
    preds_sorted_by_true = torch.gather(y_pred_shuffled, dim=1, index=indices)
    preds_sorted_by_true[mask] = float("-inf")
    max_pred_values, _ = preds_sorted_by_true.max(dim=1, keepdim=True)
    preds_sorted_by_true_minus_max = preds_sorted_by_true - max_pred_values
    exps = preds_sorted_by_true_minus_max.exp()
    cumsums = torch.cumsum(exps.flip(dims=[1]), dim=1).flip(dims=[1])
    observation_loss = torch.log(cumsums + eps) - preds_sorted_by_true_minus_max
    observation_loss[mask] = 0.0
    return torch.mean(torch.sum(observation_loss, dim=1))


def approxNDCGLoss(y_pred, y_true, eps=DEFAULT_EPS, padded_value_indicator=PADDED_Y_VALUE,
                   alpha=1.0):
    y_pred = y_pred.clone()
    y_true = y_true.clone()
    padded_mask = y_true == padded_value_indicator
    y_pred[padded_mask] = float("-inf")
    y_true[padded_mask] = float("-inf")
    y_pred_sorted, indices_pred = y_pred.sort(descending=True, dim=-1)
    y_true_sorted, _ = y_true.sort(descending=True, dim=-1)
    true_sorted_by_preds = torch.gather(y_true, dim=1, index=indices_pred)
    true_diffs = true_sorted_by_preds[:, :, None] - true_sorted_by_preds[:, None, :]
    padded_pairs_mask = torch.isfinite(true_diffs)
    padded_pairs_mask.diagonal(dim1=-2, dim2=-1).zero_()
    true_sorted_by_preds.clamp_(min=0.0)
    y_true_sorted.clamp_(min=0.0)
    pos_idxs = torch.arange(1, y_pred.shape[1] + 1).to(y_pred.device)
    D = torch.log2(1.0 + pos_idxs.float())[None, :]
    maxDCGs = torch.sum((torch.pow(2, y_true_sorted) - 1) / D, dim=-1).clamp(min=eps)
    G = (torch.pow(2, true_sorted_by_preds) - 1) / maxDCGs[:, None]
    scores_diffs = y_pred_sorted[:, :, None] - y_pred_sorted[:, None, :]
    scores_diffs[~padded_pairs_mask] = 0.0
    approx_pos = 1.0 + torch.sum(padded_pairs_mask.float() * torch.sigmoid(-alpha * scores_diffs)
                                 .clamp(min=eps), dim=-1)
    approx_D = torch.log2(1.0 + approx_pos)
    approx_NDCG = torch.sum(G / approx_D, dim=-1)
    return -torch.mean(approx_NDCG)


def ndcg(y_pred, y_true, ats=(1, 3, 5), padding_indicator=PADDED_Y_VALUE):
    y_true = y_true.clone()
    y_pred = y_pred.clone()
    padding = y_true == padding_indicator
    y_pred[padding] = float("-inf")
    y_true[padding] = 0.0
    _, order = y_pred.sort(descending=True, dim=-1)
    true_by_pred = y_true.gather(1, order)
    ideal, _ = y_true.sort(descending=True, dim=-1)
    discounts = 1.0 / torch.log2(torch.arange(y_true.shape[1], dtype=torch.float) + 2.0)
    out = []
    for at in ats:
        dcg = ((2 ** true_by_pred - 1) * discounts)[:, :at].sum(dim=-1)
        idcg = ((2 ** ideal - 1) * discounts)[:, :at].sum(dim=-1)
        out.append(torch.where(idcg > 0, dcg / idcg.clamp(min=DEFAULT_EPS), torch.zeros_like(dcg)))
    return torch.stack(out, dim=1)


def mrr(y_pred, y_true, padding_indicator=PADDED_Y_VALUE):
    y_pred = y_pred.masked_fill(y_true == padding_indicator, float("-inf"))
    _, order = torch.sort(y_pred, dim=-1, descending=True)
    relevant = (y_true.gather(1, order) > 0).float()
    first = relevant.argmax(dim=-1)
    rr = 1.0 / (first.float() + 1.0)
    return torch.where(torch.any(relevant > 0, dim=-1), rr, torch.zeros_like(rr))


def parameter_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if name.endswith("bias") or "norm" in name or "input_layer.layers.1" in name:
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


losses = {"listNet": listNet, "rankNet": rankNet, "lambdaLoss": lambdaLoss, "listMLE": listMLE,
          "approxNDCGLoss": approxNDCGLoss}
loss_func = losses[LOSS_NAME]
n_features, slate_length = 5, 6
model = LTRModel(n_features)
initialize(model)
optimizer = torch.optim.AdamW(parameter_groups(model, 0.01), lr=0.01)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6, eta_min=1e-4)
train = [make_slates(4, slate_length, n_features) for _ in range(2)]
x_val, y_val = make_slates(6, slate_length, n_features)
kwargs = {"k": 4} if LOSS_NAME == "lambdaLoss" else {}

for epoch in range(6):
    model.train()
    x, y = train[epoch % 2]
    mask = y == PADDED_Y_VALUE
    out = model(x, mask)
    loss = loss_func(out, y, **kwargs)
    optimizer.zero_grad()
    loss.backward()
    total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    model.eval()
    with torch.no_grad():
        val_scores = model.score(x_val, y_val == PADDED_Y_VALUE)
        val_ndcg = ndcg(val_scores, y_val).mean(dim=0)
        val_mrr = mrr(val_scores, y_val).mean()
    record.append([loss.item(), float(total_norm), val_mrr.item()] + val_ndcg.tolist()
                  + [scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print("epoch {} {} {:.4f} ndcg@5 {:.4f}".format(epoch, LOSS_NAME, loss.item(),
                                                    val_ndcg[-1].item()))

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict()}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = LTRModel(n_features)
restored.load_state_dict(checkpoint["model"])
restored.eval()
record.append([checkpoint["scheduler"]["last_epoch"], len(checkpoint["optimizer"]["state"])]
              + [g["weight_decay"] for g in checkpoint["optimizer"]["param_groups"]])
with torch.no_grad():
    mask = y_val == PADDED_Y_VALUE
    scores = restored.score(x_val, mask)
    record.append(torch.where(mask, torch.zeros_like(scores), scores).numpy().copy())
    record.append(ndcg(scores, y_val, ats=(2, 4)).numpy().copy())
    record.append(mrr(scores, y_val).numpy().copy())
    record.append([listNet(restored(x_val, mask), y_val).item(),
                   rankNet(restored(x_val, mask), y_val).item(),
                   lambdaLoss(restored(x_val, mask).double(), y_val.double(), k=4).item()])
    _, ranking = scores.sort(descending=True, dim=-1)
    record.append(ranking[:, :3].tolist())
"""

LTR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n"
        "    total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    total_norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    "loss_name", ["listNet", "rankNet", "lambdaLoss", "listMLE", "approxNDCGLoss"]
)
def test_learning_to_rank_as_torch(capsys, loss_name):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        LTR_SOURCE,
        LTR_STEPS,
        capsys,
        7101,
        initialize=initializer(),
        params_of=params_of,
        LOSS_NAME=loss_name,
    )
    assert len(theirs) == 2 * 6 + 6
    assert their_log == our_log and their_log.count("\n") == 6
    # the key third of the fused qkv bias: its true gradient is zero (a key bias shifts every
    # score of a query alike, which the softmax cancels), so AdamW follows the rounding noise
    noise = {"0.encoder.layers.0.self_attn.in_proj_bias": slice(16, 32)}
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, noise=noise)
