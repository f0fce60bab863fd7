# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 86 (the harness: ``tests/real_ports.py``): TabNet, a program written here in
the style of dreamquark-ai/pytorch-tabnet (``tab_network.py``, ``sparsemax.py`` and the training
step of ``abstract_model.py``), trained on synthetic tabular data with continuous and categorical
columns, then asked for class probabilities and its attention masks and feature importances; run
under torch and, ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- ``from torch.nn import Linear, BatchNorm1d, ReLU``; ``torch.nn.init.xavier_normal_(weight,
  gain=np.sqrt(...))`` with a NumPy float gain;
- ghost batch norm: ``x.chunk(int(np.ceil(x.shape[0] / virtual_batch_size)), 0)`` each through
  one ``BatchNorm1d(momentum=0.02)``, ``torch.cat`` back;
- GLU layers ``torch.mul(x[:, :d], torch.sigmoid(x[:, d:]))`` whose ``Linear`` is shared between
  blocks through a ``ModuleList`` held by several modules (``if fc:`` on a module, ``if
  shared_layers`` on a ``ModuleList``), residuals scaled by ``torch.sqrt(torch.FloatTensor([0.5])
  .to(x.device))``, ``nn.Identity``;
- sparsemax and 1.5-entmax as ``autograd.Function``s (``ctx.dim``, ``input -= max_val`` in
  ``forward``, ``torch.sort(descending=True)``, ``cumsum``, ``gather``, ``tau /= size.to(dtype)``,
  ``grad_input[output == 0] = 0``, ``torch.where``, ``dX -= q * gppr``) in ``nn.Module``s that set
  ``self.dim`` before ``super().__init__()``;
- the attentive transformer's prior ``torch.mul(gamma - M, prior)`` from ``torch.ones((bs, d))
  .to(x.device)``, the group matrix ``torch.matmul(M, group_matrix)``, the sparsity loss ``M_loss
  = 0; M_loss += torch.mean(torch.sum(torch.mul(M, torch.log(M + eps)), dim=1))``, ``M_loss /=
  n_steps``, ``ReLU()(out[:, :n_d])``, ``torch.sum(torch.stack(steps, dim=0), dim=0)``;
- the embedding generator: a bool ``torch.ones(dim, dtype=torch.bool)`` with ``idx[cat_idxs] =
  0``, iterated (``if is_continuous`` on a 0-d bool), ``x[:, i].float().view(-1, 1)``,
  ``nn.Embedding(...)(x[:, i].long())``;
- training: a ``TensorDataset``/``DataLoader``, ``param.grad = None`` for every parameter,
  ``loss - lambda_sparse * M_loss``, ``clip_grad_norm_``, ``Adam``, ``StepLR`` stepped per epoch;
- inference under ``torch.no_grad()``: ``torch.nn.Softmax(dim=1)(output).cpu().detach().numpy()``,
  ``forward_masks`` with ``M_explain += torch.mul(M, torch.sum(d, axis=1).unsqueeze(dim=1))``,
  feature importances normalised in NumPy.

The lines changed for the port: the ``import`` lines and the gradient lines (``param.grad =
None`` dropped, ``grads = loss.backward()``, ``clip_grad_norm_(grads, ...)``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

TABNET_SOURCE = """import numpy as np
import torch
from torch.autograd import Function
from torch.nn import BatchNorm1d, Linear, ReLU
from torch.utils.data import DataLoader, TensorDataset


# -- sparsemax.py ------------------------------------------------------------------------------
def _make_ix_like(input, dim=0):
    d = input.size(dim)
    rho = torch.arange(1, d + 1, device=input.device, dtype=input.dtype)
    view = [1] * input.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


class SparsemaxFunction(Function):
    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input -= max_val  # same numerical stability trick as for softmax
        tau, supp_size = SparsemaxFunction._threshold_and_support(input, dim=dim)
        output = torch.clamp(input - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0
        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze()
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None

    @staticmethod
    def _threshold_and_support(input, dim=-1):
        input_srt, _ = torch.sort(input, descending=True, dim=dim)
        input_cumsum = input_srt.cumsum(dim) - 1
        rhos = _make_ix_like(input, dim)
        support = rhos * input_srt > input_cumsum
        support_size = support.sum(dim=dim).unsqueeze(dim)
        tau = input_cumsum.gather(dim, support_size - 1)
        tau /= support_size.to(input.dtype)
        return tau, support_size


sparsemax = SparsemaxFunction.apply


class Sparsemax(torch.nn.Module):
    def __init__(self, dim=-1):
        self.dim = dim
        super(Sparsemax, self).__init__()

    def forward(self, input):
        return sparsemax(input, self.dim)


class Entmax15Function(Function):
    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input = input - max_val  # same numerical stability trick as for softmax
        input = input / 2  # divide by 2 to solve actual Entmax
        tau_star, _ = Entmax15Function._threshold_and_support(input, dim)
        output = torch.clamp(input - tau_star, min=0) ** 2
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (Y,) = ctx.saved_tensors
        gppr = Y.sqrt()  # = 1 / g'' (Y)
        dX = grad_output * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None

    @staticmethod
    def _threshold_and_support(input, dim=-1):
        Xsrt, _ = torch.sort(input, descending=True, dim=dim)
        rho = _make_ix_like(input, dim)
        mean = Xsrt.cumsum(dim) / rho
        mean_sq = (Xsrt ** 2).cumsum(dim) / rho
        ss = rho * (mean_sq - mean ** 2)
        delta = (1 - ss) / rho
        delta_nz = torch.clamp(delta, 0)
        tau = mean - torch.sqrt(delta_nz)
        support_size = (tau <= Xsrt).sum(dim).unsqueeze(dim)
        tau_star = tau.gather(dim, support_size - 1)
        return tau_star, support_size


entmax15 = Entmax15Function.apply


class Entmax15(torch.nn.Module):
    def __init__(self, dim=-1):
        self.dim = dim
        super(Entmax15, self).__init__()

    def forward(self, input):
        return entmax15(input, self.dim)


# -- tab_network.py ----------------------------------------------------------------------------
def initialize_non_glu(module, input_dim, output_dim):
    gain_value = np.sqrt((input_dim + output_dim) / np.sqrt(4 * input_dim))
    torch.nn.init.xavier_normal_(module.weight, gain=gain_value)


def initialize_glu(module, input_dim, output_dim):
    gain_value = np.sqrt((input_dim + output_dim) / np.sqrt(input_dim))
    torch.nn.init.xavier_normal_(module.weight, gain=gain_value)


class GBN(torch.nn.Module):
    \"\"\"Ghost Batch Normalization https://arxiv.org/abs/1705.08741\"\"\"

    def __init__(self, input_dim, virtual_batch_size=128, momentum=0.01):
        super(GBN, self).__init__()
        self.input_dim = input_dim
        self.virtual_batch_size = virtual_batch_size
        self.bn = BatchNorm1d(self.input_dim, momentum=momentum)

    def forward(self, x):
        chunks = x.chunk(int(np.ceil(x.shape[0] / self.virtual_batch_size)), 0)
        res = [self.bn(x_) for x_ in chunks]
        return torch.cat(res, dim=0)


class GLU_Layer(torch.nn.Module):
    def __init__(self, input_dim, output_dim, fc=None, virtual_batch_size=128, momentum=0.02):
        super(GLU_Layer, self).__init__()
        self.output_dim = output_dim
        if fc:
            self.fc = fc
        else:
            self.fc = Linear(input_dim, 2 * output_dim, bias=False)
        initialize_glu(self.fc, input_dim, 2 * output_dim)
        self.bn = GBN(2 * output_dim, virtual_batch_size=virtual_batch_size, momentum=momentum)

    def forward(self, x):
        x = self.fc(x)
        x = self.bn(x)
        out = torch.mul(x[:, : self.output_dim], torch.sigmoid(x[:, self.output_dim :]))
        return out


class GLU_Block(torch.nn.Module):
    def __init__(self, input_dim, output_dim, n_glu=2, first=False, shared_layers=None,
                 virtual_batch_size=128, momentum=0.02):
        super(GLU_Block, self).__init__()
        self.first = first
        self.shared_layers = shared_layers
        self.n_glu = n_glu
        self.glu_layers = torch.nn.ModuleList()
        params = {"virtual_batch_size": virtual_batch_size, "momentum": momentum}
        fc = shared_layers[0] if shared_layers else None
        self.glu_layers.append(GLU_Layer(input_dim, output_dim, fc=fc, **params))
        for glu_id in range(1, self.n_glu):
            fc = shared_layers[glu_id] if shared_layers else None
            self.glu_layers.append(GLU_Layer(output_dim, output_dim, fc=fc, **params))

    def forward(self, x):
        scale = torch.sqrt(torch.FloatTensor([0.5]).to(x.device))
        if self.first:  # the first layer of the block has no scale multiplication
            x = self.glu_layers[0](x)
            layers_left = range(1, self.n_glu)
        else:
            layers_left = range(self.n_glu)
        for glu_id in layers_left:
            x = torch.add(x, self.glu_layers[glu_id](x))
            x = x * scale
        return x


class FeatTransformer(torch.nn.Module):
    def __init__(self, input_dim, output_dim, shared_layers, n_glu_independent,
                 virtual_batch_size=128, momentum=0.02):
        super(FeatTransformer, self).__init__()
        params = {"n_glu": n_glu_independent, "virtual_batch_size": virtual_batch_size,
                  "momentum": momentum}
        if shared_layers is None:
            self.shared = torch.nn.Identity()
            is_first = True
        else:
            self.shared = GLU_Block(input_dim, output_dim, first=True, shared_layers=shared_layers,
                                    n_glu=len(shared_layers), virtual_batch_size=virtual_batch_size,
                                    momentum=momentum)
            is_first = False
        if n_glu_independent == 0:
            self.specifics = torch.nn.Identity()
        else:
            spec_input_dim = input_dim if is_first else output_dim
            self.specifics = GLU_Block(spec_input_dim, output_dim, first=is_first, **params)

    def forward(self, x):
        x = self.shared(x)
        x = self.specifics(x)
        return x


class AttentiveTransformer(torch.nn.Module):
    def __init__(self, input_dim, group_dim, virtual_batch_size=128, momentum=0.02,
                 mask_type="sparsemax"):
        super(AttentiveTransformer, self).__init__()
        self.fc = Linear(input_dim, group_dim, bias=False)
        initialize_non_glu(self.fc, input_dim, group_dim)
        self.bn = GBN(group_dim, virtual_batch_size=virtual_batch_size, momentum=momentum)
        if mask_type == "sparsemax":
            self.selector = Sparsemax(dim=-1)
        elif mask_type == "entmax":
            self.selector = Entmax15(dim=-1)
        else:
            raise NotImplementedError("Please choose either sparsemax or entmax as masktype")

    def forward(self, priors, processed_feat):
        x = self.fc(processed_feat)
        x = self.bn(x)
        x = torch.mul(x, priors)
        x = self.selector(x)
        return x


class TabNetEncoder(torch.nn.Module):
    def __init__(self, input_dim, output_dim, n_d=8, n_a=8, n_steps=3, gamma=1.3, n_independent=2,
                 n_shared=2, epsilon=1e-15, virtual_batch_size=128, momentum=0.02,
                 mask_type="sparsemax", group_attention_matrix=None):
        super(TabNetEncoder, self).__init__()
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.n_d = n_d
        self.n_a = n_a
        self.n_steps = n_steps
        self.gamma = gamma
        self.epsilon = epsilon
        self.n_independent = n_independent
        self.n_shared = n_shared
        self.virtual_batch_size = virtual_batch_size
        self.mask_type = mask_type
        self.initial_bn = BatchNorm1d(self.input_dim, momentum=0.01)
        self.group_attention_matrix = group_attention_matrix
        self.attention_dim = self.group_attention_matrix.shape[0]

        if self.n_shared > 0:
            shared_feat_transform = torch.nn.ModuleList()
            for i in range(self.n_shared):
                if i == 0:
                    shared_feat_transform.append(Linear(self.input_dim, 2 * (n_d + n_a), bias=False))
                else:
                    shared_feat_transform.append(Linear(n_d + n_a, 2 * (n_d + n_a), bias=False))
        else:
            shared_feat_transform = None

        self.initial_splitter = FeatTransformer(
            self.input_dim, n_d + n_a, shared_feat_transform, n_glu_independent=self.n_independent,
            virtual_batch_size=self.virtual_batch_size, momentum=momentum)

        self.feat_transformers = torch.nn.ModuleList()
        self.att_transformers = torch.nn.ModuleList()
        for step in range(n_steps):
            transformer = FeatTransformer(
                self.input_dim, n_d + n_a, shared_feat_transform,
                n_glu_independent=self.n_independent, virtual_batch_size=self.virtual_batch_size,
                momentum=momentum)
            attention = AttentiveTransformer(
                n_a, self.attention_dim, virtual_batch_size=self.virtual_batch_size,
                momentum=momentum, mask_type=self.mask_type)
            self.feat_transformers.append(transformer)
            self.att_transformers.append(attention)

    def forward(self, x, prior=None):
        x = self.initial_bn(x)
        bs = x.shape[0]  # batch size
        if prior is None:
            prior = torch.ones((bs, self.attention_dim)).to(x.device)
        M_loss = 0
        att = self.initial_splitter(x)[:, self.n_d :]
        steps_output = []
        for step in range(self.n_steps):
            M = self.att_transformers[step](prior, att)
            M_loss += torch.mean(torch.sum(torch.mul(M, torch.log(M + self.epsilon)), dim=1))
            # update prior
            prior = torch.mul(self.gamma - M, prior)
            # output
            M_feature_level = torch.matmul(M, self.group_attention_matrix)
            masked_x = torch.mul(M_feature_level, x)
            out = self.feat_transformers[step](masked_x)
            d = ReLU()(out[:, : self.n_d])
            steps_output.append(d)
            # update attention
            att = out[:, self.n_d :]
        M_loss /= self.n_steps
        return steps_output, M_loss

    def forward_masks(self, x):
        x = self.initial_bn(x)
        bs = x.shape[0]  # batch size
        prior = torch.ones((bs, self.attention_dim)).to(x.device)
        M_explain = torch.zeros(x.shape).to(x.device)
        att = self.initial_splitter(x)[:, self.n_d :]
        masks = {}
        for step in range(self.n_steps):
            M = self.att_transformers[step](prior, att)
            M_feature_level = torch.matmul(M, self.group_attention_matrix)
            masks[step] = M_feature_level
            # update prior
            prior = torch.mul(self.gamma - M, prior)
            # output
            masked_x = torch.mul(M_feature_level, x)
            out = self.feat_transformers[step](masked_x)
            d = ReLU()(out[:, : self.n_d])
            # explain
            step_importance = torch.sum(d, axis=1)
            M_explain += torch.mul(M_feature_level, step_importance.unsqueeze(dim=1))
            # update attention
            att = out[:, self.n_d :]
        return M_explain, masks


class EmbeddingGenerator(torch.nn.Module):
    def __init__(self, input_dim, cat_dims, cat_idxs, cat_emb_dims):
        super(EmbeddingGenerator, self).__init__()
        self.post_embed_dim = int(input_dim + np.sum(cat_emb_dims) - len(cat_emb_dims))
        self.embeddings = torch.nn.ModuleList()
        for cat_dim, emb_dim in zip(cat_dims, cat_emb_dims):
            self.embeddings.append(torch.nn.Embedding(cat_dim, emb_dim))
        # record continuous indices
        self.continuous_idx = torch.ones(input_dim, dtype=torch.bool)
        self.continuous_idx[cat_idxs] = 0

    def forward(self, x):
        cols = []
        cat_feat_counter = 0
        for feat_init_idx, is_continuous in enumerate(self.continuous_idx):
            # Enumerate through continuous idx boolean mask to apply embeddings
            if is_continuous:
                cols.append(x[:, feat_init_idx].float().view(-1, 1))
            else:
                cols.append(self.embeddings[cat_feat_counter](x[:, feat_init_idx].long()))
                cat_feat_counter += 1
        # concat
        post_embeddings = torch.cat(cols, dim=1)
        return post_embeddings


class TabNet(torch.nn.Module):
    def __init__(self, input_dim, output_dim, n_d, n_a, n_steps, gamma, cat_idxs, cat_dims,
                 cat_emb_dim, n_independent, n_shared, virtual_batch_size, momentum, mask_type,
                 group_attention_matrix):
        super(TabNet, self).__init__()
        self.embedder = EmbeddingGenerator(input_dim, cat_dims, cat_idxs, cat_emb_dim)
        self.post_embed_dim = self.embedder.post_embed_dim
        self.encoder = TabNetEncoder(
            input_dim=self.post_embed_dim, output_dim=output_dim, n_d=n_d, n_a=n_a,
            n_steps=n_steps, gamma=gamma, n_independent=n_independent, n_shared=n_shared,
            virtual_batch_size=virtual_batch_size, momentum=momentum, mask_type=mask_type,
            group_attention_matrix=group_attention_matrix)
        self.final_mapping = Linear(n_d, output_dim, bias=False)
        initialize_non_glu(self.final_mapping, n_d, output_dim)

    def forward(self, x):
        x = self.embedder(x)
        steps_output, M_loss = self.encoder(x)
        res = torch.sum(torch.stack(steps_output, dim=0), dim=0)
        return self.final_mapping(res), M_loss

    def forward_masks(self, x):
        x = self.embedder(x)
        return self.encoder.forward_masks(x)


# -- the synthetic table: four continuous columns and two categorical ones ----------------------
N, N_CLASSES = 48, 3
continuous = torch.randn(N, 4)
categories = torch.randint(0, 5, (N, 2))
X = torch.cat([continuous[:, :2], categories[:, :1].float(), continuous[:, 2:],
               categories[:, 1:].float()], dim=1)
cat_idxs, cat_dims, cat_emb_dim = [2, 5], [5, 5], [2, 3]
y = ((continuous[:, 0] + 0.5 * continuous[:, 3] > 0).long()
     + (categories[:, 0] >= 3).long())

# features grouped as pytorch-tabnet's create_group_matrix groups an embedded column's dims
post_embed_dim = 6 + 2 + 3 - 2
groups = [[0], [1], [2, 3], [4], [5], [6, 7, 8]]
group_matrix = torch.zeros((len(groups), post_embed_dim))
for group_index, group in enumerate(groups):
    for elem_idx in group:
        group_matrix[group_index, elem_idx] = 1 / len(group)

network = TabNet(6, N_CLASSES, n_d=4, n_a=4, n_steps=2, gamma=1.3, cat_idxs=cat_idxs,
                 cat_dims=cat_dims, cat_emb_dim=cat_emb_dim, n_independent=2, n_shared=2,
                 virtual_batch_size=4, momentum=0.02, mask_type=MASK_TYPE,
                 group_attention_matrix=group_matrix)
initialize(network)

optimizer = torch.optim.Adam(network.parameters(), lr=2e-2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
loss_fn = torch.nn.functional.cross_entropy
lambda_sparse, clip_value = 1e-3, 1.0
train_loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=False, drop_last=False)

for epoch in range(2):
    network.train()
    for X_batch, y_batch in train_loader:
        X_batch = X_batch.float()
        for param in network.parameters():
            param.grad = None
        output, M_loss = network(X_batch)
        loss = loss_fn(output, y_batch)
        loss = loss - lambda_sparse * M_loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(network.parameters(), clip_value)
        optimizer.step()
        record.append([loss.item(), M_loss.item(), norm.item()])
    scheduler.step()
    record.append(scheduler.get_last_lr())
    record.append(params_of(network))
    print(f"epoch {epoch} loss {loss.item():.4f}")

# -- predict_proba and explain ------------------------------------------------------------------
network.eval()
with torch.no_grad():
    output, _ = network(X.float())
    predictions = torch.nn.Softmax(dim=1)(output).cpu().detach().numpy()
    record.append(predictions)
    M_explain, masks = network.forward_masks(X.float())
    record.append(M_explain.cpu().detach().numpy())
    record.append({str(k): v.cpu().detach().numpy() for k, v in masks.items()})
sum_explain = M_explain.cpu().detach().numpy().sum(axis=0)
feature_importances = sum_explain / np.sum(sum_explain)
record.append(feature_importances)
record.append(network.encoder.initial_bn.running_var.numpy().copy())
"""

TABNET_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("        for param in network.parameters():\n            param.grad = None\n", ""),
    (
        "        loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(network.parameters(), clip_value)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(grads, network.parameters(), clip_value)\n"
        "        optimizer.step(grads)\n",
    ),
]


@pytest.fixture
def default_dtype_restored():
    """torch's and retrograd's default dtypes as they were before the test."""
    saved = torch.get_default_dtype(), rg.get_default_dtype()
    yield
    torch.set_default_dtype(saved[0])
    rg.set_default_dtype(saved[1])


@pytest.mark.usefixtures("default_dtype_restored")
@pytest.mark.parametrize(
    "precision, mask_type",
    [("float64", "sparsemax"), ("float64", "entmax"), ("float32", "sparsemax")],
)
def test_tabnet_with_ghost_batch_norm_and_sparse_attention_as_torch(capsys, precision, mask_type):
    source = TABNET_SOURCE
    if precision == "float64":  # the program as written but for its ``.float()`` casts
        source = source.replace(".float()", ".double()")
        torch.set_default_dtype(torch.float64)
        rg.set_default_dtype(rg.float64)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        source,
        TABNET_STEPS,
        capsys,
        8601,
        initialize=initializer(),
        params_of=params_of,
        MASK_TYPE=mask_type,
    )
    assert their_log.count("\n") == our_log.count("\n") == 2
    if precision == "float64":
        assert their_log == our_log
        assert_records_agree(ours, theirs, rtol=1e-9, atol=1e-10)
    else:
        # Ghost batch norm over chunks of 4 rows amplifies float32 rounding (the gradient norms
        # of the second epoch part by 2e-3 while float64 runs agree to 1e-11): the first
        # epoch's steps and parameters are compared, the rest only in float64.
        assert_records_agree(ours[:5], theirs[:5], rtol=2e-4, atol=2e-5)
