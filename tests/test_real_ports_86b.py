# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 86 (the harness: ``tests/real_ports.py``): NODE, neural oblivious decision
ensembles, a program written here in the style of yandex-research/node (``lib/odst.py``,
``lib/arch.py``, ``lib/nn_utils.py`` and its notebooks' regression training), on a synthetic
tabular regression; run under torch and, ported, under retrograd from the same weights and
draws, every record compared.

It reaches:

- ``ModuleWithInit``: a flag kept as ``nn.Parameter(torch.tensor(0, dtype=torch.uint8),
  requires_grad=False)``, ``__call__`` overridden to run a data-aware ``initialize`` on the first
  batch and set ``flag.data[...] = 1``;
- the oblivious tree: parameters made by ``torch.full([...], float('nan'), dtype=torch.float32)``
  and ``torch.zeros([...])`` filled by ``nn.init.normal_``/``nn.init.uniform_`` (torch's weights
  then loaded), binary codes ``indices.view(1, -1) // offsets.view(-1, 1) % 2`` from ``2 **
  torch.arange(depth)`` held as a frozen ``nn.Parameter``; the selection ``sparsemax``/``entmax15``
  over ``dim=0`` (``autograd.Function``s taking ``dim``), ``torch.einsum('bi,ind->bnd')``,
  ``('btds,dcs->btdc')``, ``('bnd,ncd->bnc')``, ``torch.prod(dim=-2)``, ``sparsemoid``
  ``(0.5 * input + 0.5).clamp_(0, 1)``, ``flatten(1, 2)``;
- the data-aware init: ``np.random.beta`` percentiles, ``np.percentile`` over
  ``check_numpy(feature_values.flatten(1, 2).t())`` (``isinstance(x, torch.Tensor)``),
  ``param.data[...] = torch.as_tensor(list(map(...)), dtype=, device=).view(...)``,
  ``abs(tensor)``, ``torch.log(torch.as_tensor(float64 array) + eps)`` into float32 data;
- ``DenseBlock(nn.Sequential)`` iterating ``for layer in self``, ``layer_inp[..., -tail:]``
  under ``max_features``, ``torch.cat([x, h], dim=-1)``, ``outputs.view(*shape[:-1], n, d)``, a
  ``Lambda`` module ``x[..., 0].mean(dim=-1)``;
- training with ``F.mse_loss``, ``Adam`` (the frozen parameters without gradients), and
  evaluation under ``torch.no_grad()``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
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

NODE_SOURCE = """import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function


# -- lib/nn_utils.py ----------------------------------------------------------------------------
def check_numpy(x):
    \"\"\"Makes sure x is a numpy array\"\"\"
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    assert isinstance(x, np.ndarray)
    return x


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


class Entmax15Function(Function):
    @staticmethod
    def forward(ctx, input, dim=0):
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
        Y, = ctx.saved_tensors
        gppr = Y.sqrt()  # = 1 / g'' (Y)
        dX = grad_output * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None

    @staticmethod
    def _threshold_and_support(input, dim=0):
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


sparsemax = lambda input, dim=-1: SparsemaxFunction.apply(input, dim)
entmax15 = lambda input, dim=-1: Entmax15Function.apply(input, dim)
sparsemoid = lambda input: (0.5 * input + 0.5).clamp_(0, 1)


class Lambda(nn.Module):
    def __init__(self, func):
        super().__init__()
        self.func = func

    def forward(self, *args, **kwargs):
        return self.func(*args, **kwargs)


class ModuleWithInit(nn.Module):
    \"\"\" Base class for pytorch module with data-aware initializer on first batch \"\"\"
    def __init__(self):
        super().__init__()
        self._is_initialized_tensor = nn.Parameter(torch.tensor(0, dtype=torch.uint8), requires_grad=False)
        self._is_initialized_bool = None
        # Note: this module uses a separate flag self._is_initialized so as to achieve both
        # * persistence: is_initialized is saved alongside model in state_dict
        # * speed: model doesn't need to check device every time

    def initialize(self, *args, **kwargs):
        \"\"\" initialize module tensors using first batch of data \"\"\"
        raise NotImplementedError("Please implement ")

    def __call__(self, *args, **kwargs):
        if self._is_initialized_bool is None:
            self._is_initialized_bool = bool(self._is_initialized_tensor.item())
        if not self._is_initialized_bool:
            self.initialize(*args, **kwargs)
            self._is_initialized_tensor.data[...] = 1
            self._is_initialized_bool = True
        return super().__call__(*args, **kwargs)


# -- lib/odst.py --------------------------------------------------------------------------------
class ODST(ModuleWithInit):
    def __init__(self, in_features, num_trees, depth=6, tree_dim=1, flatten_output=True,
                 choice_function=sparsemax, bin_function=sparsemoid,
                 initialize_response_=nn.init.normal_, initialize_selection_logits_=nn.init.uniform_,
                 threshold_init_beta=1.0, threshold_init_cutoff=1.0,
                 ):
        super().__init__()
        self.depth, self.num_trees, self.tree_dim, self.flatten_output = depth, num_trees, tree_dim, flatten_output
        self.choice_function, self.bin_function = choice_function, bin_function
        self.threshold_init_beta, self.threshold_init_cutoff = threshold_init_beta, threshold_init_cutoff

        self.response = nn.Parameter(torch.zeros([num_trees, tree_dim, 2 ** depth]), requires_grad=True)
        initialize_response_(self.response)

        self.feature_selection_logits = nn.Parameter(
            torch.zeros([in_features, num_trees, depth]), requires_grad=True
        )
        initialize_selection_logits_(self.feature_selection_logits)

        self.feature_thresholds = nn.Parameter(
            torch.full([num_trees, depth], float('nan'), dtype=torch.float32), requires_grad=True
        )  # nan values will be initialized on first batch (data-aware init)

        self.log_temperatures = nn.Parameter(
            torch.full([num_trees, depth], float('nan'), dtype=torch.float32), requires_grad=True
        )

        # binary codes for mapping between 1-hot vectors and bin indices
        with torch.no_grad():
            indices = torch.arange(2 ** self.depth)
            offsets = 2 ** torch.arange(self.depth)
            bin_codes = (indices.view(1, -1) // offsets.view(-1, 1) % 2).to(torch.float32)
            bin_codes_1hot = torch.stack([bin_codes, 1.0 - bin_codes], dim=-1)
            self.bin_codes_1hot = nn.Parameter(bin_codes_1hot, requires_grad=False)
            # ^-- [depth, 2 ** depth, 2]

    def forward(self, input):
        assert len(input.shape) >= 2
        if len(input.shape) > 2:
            return self.forward(input.view(-1, input.shape[-1])).view(*input.shape[:-1], -1)
        # new input shape: [batch_size, in_features]

        feature_logits = self.feature_selection_logits
        feature_selectors = self.choice_function(feature_logits, dim=0)
        # ^--[in_features, num_trees, depth]

        feature_values = torch.einsum('bi,ind->bnd', input, feature_selectors)
        # ^--[batch_size, num_trees, depth]

        threshold_logits = (feature_values - self.feature_thresholds) * torch.exp(-self.log_temperatures)

        threshold_logits = torch.stack([-threshold_logits, threshold_logits], dim=-1)
        # ^--[batch_size, num_trees, depth, 2]

        bins = self.bin_function(threshold_logits)
        # ^--[batch_size, num_trees, depth, 2], approximately binary

        bin_matches = torch.einsum('btds,dcs->btdc', bins, self.bin_codes_1hot)
        # ^--[batch_size, num_trees, depth, 2 ** depth]

        response_weights = torch.prod(bin_matches, dim=-2)
        # ^-- [batch_size, num_trees, 2 ** depth]

        response = torch.einsum('bnd,ncd->bnc', response_weights, self.response)
        # ^-- [batch_size, num_trees, tree_dim]

        return response.flatten(1, 2) if self.flatten_output else response

    def initialize(self, input, eps=1e-6):
        # data-aware initializer
        assert len(input.shape) == 2
        with torch.no_grad():
            feature_selectors = self.choice_function(self.feature_selection_logits, dim=0)
            # ^--[in_features, num_trees, depth]

            feature_values = torch.einsum('bi,ind->bnd', input, feature_selectors)
            # ^--[batch_size, num_trees, depth]

            # initialize thresholds: sample random percentiles of data
            percentiles_q = 100 * np.random.beta(self.threshold_init_beta, self.threshold_init_beta,
                                                 size=[self.num_trees, self.depth])
            self.feature_thresholds.data[...] = torch.as_tensor(
                list(map(np.percentile, check_numpy(feature_values.flatten(1, 2).t()), percentiles_q.flatten())),
                dtype=feature_values.dtype, device=feature_values.device
            ).view(self.num_trees, self.depth)

            # init temperatures: make sure enough data points are in the linear region of sparse-sigmoid
            temperatures = np.percentile(check_numpy(abs(feature_values - self.feature_thresholds)),
                                         q=100 * min(1.0, self.threshold_init_cutoff), axis=0)

            # if threshold_init_cutoff > 1, scale everything down by it
            temperatures /= max(1.0, self.threshold_init_cutoff)
            self.log_temperatures.data[...] = torch.log(torch.as_tensor(temperatures) + eps)

    def __repr__(self):
        return "{}(in_features={}, num_trees={}, depth={}, tree_dim={}, flatten_output={})".format(
            self.__class__.__name__, self.feature_selection_logits.shape[0],
            self.num_trees, self.depth, self.tree_dim, self.flatten_output
        )


# -- lib/arch.py --------------------------------------------------------------------------------
class DenseBlock(nn.Sequential):
    def __init__(self, input_dim, layer_dim, num_layers, tree_dim=1, max_features=None,
                 input_dropout=0.0, flatten_output=True, Module=ODST, **kwargs):
        layers = []
        for i in range(num_layers):
            oddt = Module(input_dim, layer_dim, tree_dim=tree_dim, flatten_output=True, **kwargs)
            input_dim = min(input_dim + layer_dim * tree_dim, max_features or float('inf'))
            layers.append(oddt)

        super().__init__(*layers)
        self.num_layers, self.layer_dim, self.tree_dim = num_layers, layer_dim, tree_dim
        self.max_features, self.flatten_output = max_features, flatten_output
        self.input_dropout = input_dropout

    def forward(self, x):
        initial_features = x.shape[-1]
        for layer in self:
            layer_inp = x
            if self.max_features is not None:
                tail_features = min(self.max_features, layer_inp.shape[-1]) - initial_features
                if tail_features != 0:
                    layer_inp = torch.cat([layer_inp[..., :initial_features], layer_inp[..., -tail_features:]], dim=-1)
            if self.training and self.input_dropout:
                layer_inp = F.dropout(layer_inp, self.input_dropout)
            h = layer(layer_inp)
            x = torch.cat([x, h], dim=-1)

        outputs = x[..., initial_features:]
        if not self.flatten_output:
            outputs = outputs.view(*outputs.shape[:-1], self.num_layers * self.layer_dim, self.tree_dim)
        return outputs


# -- a synthetic regression, as the notebooks train on YearPrediction -------------------------------
N, NUM_FEATURES = 64, 5
X_train = torch.randn(N, NUM_FEATURES)
y_train = torch.sin(2 * X_train[:, 0]) + X_train[:, 1] * X_train[:, 2] - 0.5 * (X_train[:, 3] > 0).float()
y_mean, y_std = y_train.mean(), y_train.std()
y_train = (y_train - y_mean) / y_std

model = nn.Sequential(
    DenseBlock(NUM_FEATURES, 6, num_layers=2, tree_dim=3, depth=3, flatten_output=False,
               max_features=NUM_FEATURES + 12, choice_function=CHOICE, bin_function=sparsemoid),
    Lambda(lambda x: x[..., 0].mean(dim=-1)),  # average first channels of every tree
)

initialize(model)  # (torch's draws of the responses and the selection logits, in both runs)
with torch.no_grad():
    res = model(torch.as_tensor(X_train[:1000]))
    # trigger data-aware init
record.append(params_of(model))
record.append(res.numpy().copy())

optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(6):
    batch = slice(16 * (step % 4), 16 * (step % 4) + 16)
    x_batch, y_batch = X_train[batch], y_train[batch]
    model.train()
    loss = F.mse_loss(model(x_batch), y_batch).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))

model.eval()
with torch.no_grad():
    prediction = model(X_train)
    record.append(prediction.numpy().copy())
    record.append(F.mse_loss(prediction, y_train).item())
record.append(repr(model[0][1]))
record.append(int(model[0][0]._is_initialized_tensor.item()))
"""

NODE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("choice", ["sparsemax", "entmax15"])
def test_node_oblivious_trees_with_data_aware_init_as_torch(capsys, choice):
    (theirs, ours), _ = runs_with_draws(
        NODE_SOURCE.replace("choice_function=CHOICE", f"choice_function={choice}"),
        NODE_STEPS,
        capsys,
        8602,
        initialize=initializer(),
        params_of=params_of,
    )
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
