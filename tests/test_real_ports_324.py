# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a field-aware factorization machine over weighted multi-value fields.

- yahoo's weighted field embeddings (``weighted_embedding_bag.py`` and ``weighted_ffm.py``,
  concatenated: the relative import dropped): ``WeightedEmbeddingBag``, an ``nn.EmbeddingBag``
  for mini-batches of padded rows with end-of-bag offsets (``nn.Parameter(torch.empty(...),
  requires_grad=not _freeze)`` with ``normal_``; ``F.embedding``, the weights by
  ``unsqueeze(2)``, ``f.pad(x, [0, 0, 1, 0, 0, 0]).cumsum(dim=1)``, ``f.pad(offsets, [1, 0,
  0, 0], value=-1) + 1`` on int64 and a ``batch_gather`` by three broadcast index tensors
  ``input[i, j, k]``); ``WeightedFFM`` (``torch.tril_indices(n, n, -1)`` unpacked into two
  buffers, ``uniform_``/``zeros_`` under ``torch.no_grad()``, the pairwise term by
  ``vectors[batches[:, None], fields_i, fields_j]`` and ``.sum(dim=[-1, -2])``, the linear
  term by ``biases.squeeze().sum(dim=1)``);
- trained on drawn rows (bags of one to three weighted features per field, the fields in a
  drawn order per row, padded) with ``BCEWithLogitsLoss`` and ``SGD`` with momentum (not an
  adaptive optimizer: the embeddings' unused field blocks get gradients of rounding size out
  of the cumulative-sum differences, which Adagrad or Adam would scale to full steps); then the last
  batch's bags against ``nn.functional.embedding_bag(..., mode="sum",
  per_sample_weights=...)`` with start offsets.

The lines changed: the ``import`` lines and the gradient lines. The weights are torch's
(``initialize``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

FFM_SOURCE = '''
# weighted_embedding_bag.py
# Copyright 2023, Yahoo.

import torch
import torch.nn as nn
import torch.nn.functional as f


class WeightedEmbeddingBag(nn.Module):
    r"""
    A class similar to ``nn.EmbeddingBag`` which supports mini-batches, assuming that the number of bags
    in all samples in a mini-batch is the same.

    :param num_embeddings: the number of emebdding vectors to hold
    :type num_embeddings int

    :param embedding_dim: the dimension of each embedding vector
    :type embedding_dim int

    :param emb_kwargs: parameter dict for the :class:`nn.Embedding` constructor.
    """
    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None, _freeze=False, **emb_kwargs):
        super().__init__()
        factory_kwargs = {'device': device, 'dtype': dtype}
        self.weight = nn.Parameter(torch.empty((num_embeddings, embedding_dim), **factory_kwargs),
                                    requires_grad=not _freeze)
        self.emb_kwargs = emb_kwargs
        torch.nn.init.normal_(self.weight)

    def forward(self, input, per_sample_weights, offsets):
        r"""
        Computed weighted sums of input embeddings in each bag, assuming each mini-batch comprises the same
        number of embeddings, weights, and bags. Variable number of embeddings and their corresponding weights
        per sample is possible with padding. However, the number of bags per sample has to be equal for all
        mini-batch samples. Returns a tensor of weighted-sums of embedding vectors in each sample.

        :param input: BxN matrix, where each row contains per-sample embedding indices.
        :type input: torch.Tensor

        :param per_sample_weights: BxN matrix, where each row contaisn per-sample embedding weights.
        :type per_sample_weights: torch.Tensor

        :param offsets: BxM offsets pointing to end-of-bag indices inside each sample. Note, that this differs from
                        torch.nn.EmbeddingBag, where offsets point to the start-of-bag indices.
        :type offsets: torch.Tensor

        :return: BxM tensor of weighted sums of embedding bags.
        :rtype: torch.Tensor
        """
        embeddings = torch.nn.functional.embedding(input, self.weight, **self.emb_kwargs)
        weighted_embeddings = embeddings * per_sample_weights.unsqueeze(2)
        padded_summed = f.pad(weighted_embeddings, [0, 0, 1, 0, 0, 0]).cumsum(dim=1)
        padded_offsets = f.pad(offsets, [1, 0, 0, 0], value=-1) + 1

        def batch_gather(input, off):
            emb_dim = input.shape[2]
            batch_size = off.shape[0]
            num_offsets = off.shape[1]
            i = torch.arange(batch_size, device=input.device).reshape(batch_size, 1, 1)
            j = off.reshape(batch_size, num_offsets, 1)
            k = torch.arange(emb_dim, device=input.device)

            return input[i, j, k]

        return batch_gather(padded_summed, padded_offsets[:, 1:]) - batch_gather(padded_summed, padded_offsets[:, :-1])


# weighted_ffm.py
# Copyright 2023, Yahoo.

import torch
import math


class WeightedFFM(torch.nn.Module):
    r"""
    A field-aware factorization machine (see Juan et al. 2016) allowing weighted multi-value fields, based on the
    :class:`WeightedEmbeddingBag` module.

    :param num_features: The number of features of the factorization machine
    :type num_features: int

    :param field_dim: The dimension of the embedding vector's field overlap block. The embedding
    vectors will be initialized to a uniformly-distributed vector in range [0, 1/sqrt(field_dim)].
    :type field_dim: int

    :param num_fields: The number of fields.
    :type num_fields: int

    :param emb_kwargs: additional args passed to the :class:`WeightedEmbeddingBag` objects.
    """
    def __init__(self, num_features: int, field_dim: int, num_fields: int, **emb_kwargs):
        super().__init__()
        self.field_dim = field_dim
        self.num_fields = num_fields
        i_indices, j_indices = torch.tril_indices(num_fields, num_fields, -1)
        self.register_buffer('i_indices', i_indices)
        self.register_buffer('j_indices', j_indices)
        self.vectors = WeightedEmbeddingBag(num_features, field_dim * num_fields,
                                            **emb_kwargs)
        self.biases = WeightedEmbeddingBag(num_features, 1,
                                           **emb_kwargs)
        self.bias = torch.nn.Parameter(torch.tensor(0.))

        vec_init_scale = 1. / math.sqrt(field_dim)
        with torch.no_grad():
            torch.nn.init.uniform_(self.vectors.weight, 0, vec_init_scale)
            torch.nn.init.zeros_(self.biases.weight)

    def _fast_ffm_pairwise(self, batch_size, vectors, fields):
        fields_i = fields[:, self.i_indices]
        fields_j = fields[:, self.j_indices]

        batches = torch.arange(batch_size, device=vectors.device)
        vectors_i = vectors[batches[:, None], fields_i, fields_j]
        vectors_j = vectors[batches[:, None], fields_j, fields_i]

        pairwise = (vectors_i * vectors_j).sum(dim=[-1, -2])
        return pairwise

    def forward(self,
                indices: torch.Tensor,
                weights: torch.Tensor,
                offsets: torch.Tensor,
                fields: torch.Tensor):
        r"""
        Returns FFM scores corresponding to a mini-batch of weighted sums of embedding bags. The scores
        are computed according to the full FFM score function, including the linear and bias terms. The indices,
        weights, and offsets parameters are as in the :class:`WeightedEmbeddingBag` class.

        :param indices: BxN matrix of embedding indices in the mini-batch
        :type indices: torch.Tensor

        :param weights: BxN matrix of corresponding embedding weights
        :type weights: torch.Tensor

        :param offsets: BxM matrix of bag end-point offsets
        :type offsets: torch.Tensor

        :param fields: BxM matrix of the field each bag corresponds to.
        :type fields: torch.Tensor
        """
        vectors = self.vectors(indices, weights, offsets)
        biases = self.biases(indices, weights, offsets)

        batch_size = vectors.shape[0]
        vectors = vectors.view(batch_size, self.num_fields, self.num_fields, self.field_dim)
        pairwise = self._fast_ffm_pairwise(batch_size, vectors, fields)
        linear = biases.squeeze().sum(dim=1)
        return pairwise + linear + self.bias

# training on drawn multi-value rows (click labels) with BCEWithLogitsLoss and SGD
model = WeightedFFM(num_features=30, field_dim=4, num_fields=3)
initialize(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
criterion = torch.nn.BCEWithLogitsLoss()
for indices, weights, offsets, fields, labels in batches:
    indices, weights = torch.tensor(indices), torch.tensor(weights)
    offsets, fields = torch.tensor(offsets), torch.tensor(fields)
    scores = model(indices, weights, offsets, fields)
    loss = criterion(scores, torch.tensor(labels))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))
    record.append(scores.detach().numpy())

# the bags of the last batch as torch's own nn.functional.embedding_bag sums them (flat
# indices, start offsets, per_sample_weights)
starts = torch.cat([torch.zeros_like(offsets[:, :1]), offsets[:, :-1] + 1], dim=1)
rows = torch.arange(indices.shape[0])[:, None] * indices.shape[1]
flat_starts = (starts + rows).reshape(-1)
kept = torch.arange(indices.shape[1])[None, :] <= offsets[:, -1:]
flat_starts = flat_starts - torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.long), (~kept).sum(dim=1)[:-1]]), dim=0).repeat_interleave(3)
with torch.no_grad():
    bags = f.embedding_bag(indices[kept], model.vectors.weight, flat_starts, mode="sum", per_sample_weights=weights[kept])
    record.append(bags.numpy())
    record.append(model.vectors(indices, weights, offsets).reshape(-1, 12).numpy())
'''

FFM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.nn.functional as f\n",
        "import retrograd.nn as nn\nimport retrograd.nn.functional as f\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def drawn_batches(seed: int, n_batches: int = 3, batch_size: int = 8, width: int = 9):
    """Rows of three weighted multi-value fields in a drawn order: indices and weights padded
    to ``width`` (index 0, weight 0), inclusive end-of-bag offsets, the field of each bag."""
    rng = np.random.default_rng(seed)
    preference = rng.standard_normal(30)
    batches = []
    for _ in range(n_batches):
        indices = np.zeros((batch_size, width), np.int64)
        weights = np.zeros((batch_size, width), np.float32)
        offsets = np.zeros((batch_size, 3), np.int64)
        fields = np.zeros((batch_size, 3), np.int64)
        labels = np.zeros(batch_size, np.float32)
        for row in range(batch_size):
            end = 0
            for m, field in enumerate(rng.permutation(3)):
                size = rng.integers(1, 4)
                indices[row, end : end + size] = 10 * field + rng.choice(10, size, replace=False)
                weights[row, end : end + size] = rng.uniform(0.2, 1.0, size)
                end += size
                offsets[row, m], fields[row, m] = end - 1, field
            labels[row] = float(preference[indices[row, :end]] @ weights[row, :end] > 0)
        batches.append((indices, weights, offsets, fields, labels))
    return batches


def test_weighted_ffm_trains_as_torch(capsys):
    (theirs, ours), logs = runs_with_draws(
        FFM_SOURCE, FFM_STEPS, capsys, 3240,
        batches=drawn_batches(324), initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1] == ""
    np.testing.assert_allclose(
        theirs[-1], theirs[-2], rtol=1e-5, atol=1e-6
    )  # torch agrees with itself
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
