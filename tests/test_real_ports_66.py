# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_65.py`` (the
harness: ``tests/real_ports.py``):

- Deep Embedded Clustering as vlukiyanov/pt-dec writes it (``ptdec/cluster.py``'s
  ``ClusterAssignment``, ``ptdec/dec.py``'s ``DEC``, ``ptdec/utils.py``'s
  ``target_distribution`` and ``cluster_accuracy``, ``ptdec/model.py``'s ``train`` and
  ``predict``), over a small encoder: the Student's t soft assignment ``(batch.unsqueeze(1) -
  self.cluster_centers) ** 2`` with ``numerator ** power``, the centres written through
  ``model.state_dict()["assignment.cluster_centers"].copy_(...)`` under ``torch.no_grad()``
  from a k-means fit of the detached features, ``nn.KLDivLoss(size_average=False)`` of
  ``output.log()``, ``optimizer.step(closure=None)``, ``default_collate`` given as a
  ``collate_fn``, batches of ``(features, label)`` lists, ``torch.cat(actual).long()``,
  ``torch.cat(features).max(1)[1]`` and the label change ``(predicted !=
  predicted_previous).float().sum().item()``.
- DeepAR as zhykoties/TimeSeries writes it (``model/net.py``'s ``Net``, ``loss_fn`` and
  ``test``, ``train.py``'s ``train``), small: the forget-gate biases set to one through
  ``self.lstm._all_weights`` and ``getattr(self.lstm, name)``'s ``bias.data[start:end].fill_
  (1.)``, ``torch.cat((x, onehot_embed), dim=2)``, ``hidden.permute(1, 2, 0).contiguous().view
  (...)``, ``nn.Softplus``, ``torch.distributions.normal.Normal`` over the non-zero labels
  (``mu[zero_index]``), missing values filled from the model's own ``mu`` by
  ``train_batch[t, zero_index, 0] = mu[zero_index]``, ``train_batch[t].unsqueeze_(0).clone()``,
  ``loss += ...`` onto ``torch.zeros(1)`` and the one-element loss's ``backward()``, then the
  rolling forecast of ``test`` writing ``x[predict_start + t + 1, :, 0] = mu_de``.
- the end-to-end memory network of nmhkahn/MemN2N-pytorch (``memn2n/model.py``'s
  ``position_encoding``, ``AttrProxy`` and ``MemN2N``; ``memn2n/trainer.py``'s epoch, gradient
  noise, clipping and learning-rate decay), small: embeddings registered by ``add_module
  ("C_{}".format(hop), C)`` and reached through ``AttrProxy.__getitem__``, ``Variable(torch.
  FloatTensor(...), requires_grad=False)``, ``story_size + (embed_A.size(-1),)`` as a view
  shape, ``expand_as``, ``nn.Softmax()`` without ``dim``, ``u[-1] @ self.C[k].weight.transpose
  (0, 1)``, ``nn.CrossEntropyLoss(size_average=False)``, the deprecated
  ``nn.utils.clip_grad_norm`` of ``filter(lambda p: p.grad is not None, ...)`` and
  ``p.grad.data.add_(noise)`` (ported on the gradients ``backward()`` returned).
- DeepFM as chenxijun1029/DeepFM_with_PyTorch writes it (``model/DeepFM.py``,
  ``data/dataset.py``'s ``CriteoDataset``, ``main.py``), small: ``nn.ModuleList`` of
  ``nn.Embedding`` tables, ``(torch.sum(emb(Xi[:, i, :]), 1).t() * Xv[:, i]).t()``, Python's
  ``sum`` of tensors, layers made by ``setattr``, ``nn.BatchNorm1d``, ``self.bias =
  torch.nn.Parameter(torch.randn(1))``, int32 arrays from ``torch.from_numpy`` cast by
  ``.to(device=..., dtype=...)``, a ``sampler.SubsetRandomSampler(range(n))``,
  ``F.binary_cross_entropy_with_logits``, ``'%d' % num_correct`` of a 0-d tensor.
- the hierarchical attention network of uvipen/Hierarchical-attention-networks-pytorch
  (``src/utils.py``'s ``matrix_mul``/``element_wise_mul``/``get_evaluation``,
  ``src/dataset.py``, ``src/word_att_model.py``, ``src/sent_att_model.py``,
  ``src/hierarchical_att_model.py``, ``train.py``), small: ``nn.Embedding(...).from_pretrained
  (dict)`` called on an instance with a float64 table (frozen, so ``filter(lambda p:
  p.requires_grad, ...)`` leaves it out), ``nn.Parameter(torch.Tensor(n, m))`` filled by
  ``.data.normal_``, ``isinstance(bias, torch.nn.parameter.Parameter)``, bidirectional
  ``nn.GRU`` layers whose hidden states are kept on the module between documents,
  ``F.softmax`` without ``dim``, iterating a permuted batch, ``.squeeze()`` of the stacked
  features, a ``DataLoader(shuffle=True, drop_last=True)`` over numpy documents, the loss
  formatted by ``"{:.4f}".format(loss)`` of a 0-d tensor, scikit-learn's ``accuracy_score``.
- the character-aware language model of FengZiYjun/CharLM (``model.py``'s ``Highway`` and
  ``charLM``, ``train.py``'s loop), small and without dropout: convolutions kept in a plain
  Python list (so neither registered nor trained), ``torch.transpose(x.view(n, 1, w, -1), 2,
  3)``, ``torch.max(feature_map, 3)[0].squeeze()``, ``nn.BatchNorm1d(..., affine=False)``,
  the LSTM's state detached as a list (``[state.detach() for state in hidden]``) and passed
  back as one, ``torch.exp(valid_loss.data)``, generators' ``__next__()``, a fresh
  ``optim.SGD`` each epoch at a halved rate, the deprecated ``clip_grad_norm(..., norm_type=2)``.
- Bayes by Backprop as nitarshan/bayes-by-backprop writes it (``Gaussian``,
  ``ScaleMixtureGaussian``, ``BayesianLinear``, ``BayesianNetwork.sample_elbo``, ``train``,
  ``test_ensemble``), small: ``torch.distributions.Normal(0, 1).sample(self.rho.size())``
  (one seeded stream in both runs), a scale mixture prior of ``Normal(0, sigma)`` with
  ``sigma`` a one-element ``torch.FloatTensor``, ``nn.Parameter(torch.Tensor(o, i).uniform_
  (-5, -4))``, samples written into ``torch.zeros`` by ``outputs[i] = self(...)`` and
  ``log_priors[i] = ...`` in the graph, ``F.nll_loss(..., size_average=False)``, the ensemble's
  ``corrects += preds.eq(...).sum(dim=1).squeeze().cpu().numpy()`` into a NumPy array.
- the recurrent attention model of kevinzakka/recurrent-visual-attention (``modules.py``'s
  ``Retina``, ``GlimpseNetwork``, ``CoreNetwork``, ``ActionNetwork``, ``LocationNetwork``,
  ``BaselineNetwork``; ``model.py``; ``trainer.py``'s ``reset`` and ``train_one_epoch``),
  small: glimpses cut by slices whose bounds are 0-d int64 tensors (``x[i, :, start[i, 1] :
  end[i, 1], ...]`` after ``F.pad``), ``F.avg_pool2d`` of the larger patches, the location
  drawn by ``torch.distributions.Normal(mu, std).rsample()`` (one seeded noise stream in both
  runs) and scored by ``Normal(mu, std).log_prob``, a hidden state made by ``torch.zeros(...,
  requires_grad=True)`` and a location by ``torch.FloatTensor(b, 2).uniform_(-1, 1)`` with
  ``l_t.requires_grad = True``, REINFORCE with a baseline over ``torch.stack(...).transpose(1,
  0)``, the hybrid loss of ``nll_loss``, ``mse_loss`` and the policy term.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    """Torch's initial weights (which both runs start from) and the programs' draws from
    fixed seeds."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


class SharedPermutations:
    """``torch.randperm`` of a library drawing from one seeded stream (the samplers' order)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, dtype=None, device=None, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=dtype or lib.int64)

        # torch's samplers call ``torch.randperm``; retrograd's, the name they imported
        self.modules = [lib] + ([lib.utils.data.sampler] if lib is rg else [])
        self.saved = [module.randperm for module in self.modules]
        for module in self.modules:
            module.randperm = randperm
        return self

    def __exit__(self, *exc):
        for module, saved in zip(self.modules, self.saved):
            module.randperm = saved
        return False


class TinyKMeans:
    """A deterministic stand-in for scikit-learn's ``KMeans`` (Lloyd's iterations from the
    first points): the same centres in both runs."""

    def __init__(self, n_clusters, n_init=20):
        self.n_clusters = n_clusters

    def fit_predict(self, features):
        centers = features[: self.n_clusters].astype(np.float64)
        for _ in range(10):
            labels = ((features[:, None, :] - centers[None]) ** 2).sum(-1).argmin(1)
            centers = np.stack(
                [
                    features[labels == k].mean(0) if (labels == k).any() else centers[k]
                    for k in range(self.n_clusters)
                ]
            )
        self.cluster_centers_ = centers
        return labels


DEC_SOURCE = """
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
from torch.nn import Parameter
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import default_collate


class ClusterAssignment(nn.Module):
    def __init__(
        self,
        cluster_number: int,
        embedding_dimension: int,
        alpha: float = 1.0,
        cluster_centers: Optional[torch.Tensor] = None,
    ) -> None:
        \"\"\"
        Module to handle the soft assignment, for a description see in 3.1.1. in Xie/Girshick/Farhadi,
        where the Student's t-distribution is used measure similarity between feature vector and each
        cluster centroid.

        :param cluster_number: number of clusters
        :param embedding_dimension: embedding dimension of feature vectors
        :param alpha: parameter representing the degrees of freedom in the t-distribution, default 1.0
        :param cluster_centers: clusters centers to initialise, if None then use Xavier uniform
        \"\"\"
        super(ClusterAssignment, self).__init__()
        self.embedding_dimension = embedding_dimension
        self.cluster_number = cluster_number
        self.alpha = alpha
        if cluster_centers is None:
            initial_cluster_centers = torch.zeros(
                self.cluster_number, self.embedding_dimension, dtype=torch.float
            )
            nn.init.xavier_uniform_(initial_cluster_centers)
        else:
            initial_cluster_centers = cluster_centers
        self.cluster_centers = Parameter(initial_cluster_centers)

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        \"\"\"
        Compute the soft assignment for a batch of feature vectors, returning a batch of assignments
        for each cluster.

        :param batch: FloatTensor of [batch size, embedding dimension]
        :return: FloatTensor [batch size, number of clusters]
        \"\"\"
        norm_squared = torch.sum((batch.unsqueeze(1) - self.cluster_centers) ** 2, 2)
        numerator = 1.0 / (1.0 + (norm_squared / self.alpha))
        power = float(self.alpha + 1) / 2
        numerator = numerator ** power
        return numerator / torch.sum(numerator, dim=1, keepdim=True)


class DEC(nn.Module):
    def __init__(
        self,
        cluster_number: int,
        hidden_dimension: int,
        encoder: torch.nn.Module,
        alpha: float = 1.0,
    ):
        super(DEC, self).__init__()
        self.encoder = encoder
        self.hidden_dimension = hidden_dimension
        self.cluster_number = cluster_number
        self.alpha = alpha
        self.assignment = ClusterAssignment(
            cluster_number, self.hidden_dimension, alpha
        )

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.assignment(self.encoder(batch))


def cluster_accuracy(y_true, y_predicted, cluster_number: Optional[int] = None):
    if cluster_number is None:
        cluster_number = (
            max(y_predicted.max(), y_true.max()) + 1
        )  # assume labels are 0-indexed
    count_matrix = np.zeros((cluster_number, cluster_number), dtype=np.int64)
    for i in range(y_predicted.size):
        count_matrix[y_predicted[i], y_true[i]] += 1

    row_ind, col_ind = linear_sum_assignment(count_matrix.max() - count_matrix)
    reassignment = dict(zip(row_ind, col_ind))
    accuracy = count_matrix[row_ind, col_ind].sum() / y_predicted.size
    return reassignment, accuracy


def target_distribution(batch: torch.Tensor) -> torch.Tensor:
    weight = (batch ** 2) / torch.sum(batch, 0)
    return (weight.t() / torch.sum(weight, 1)).t()


def train(
    dataset: torch.utils.data.Dataset,
    model: torch.nn.Module,
    epochs: int,
    batch_size: int,
    optimizer: torch.optim.Optimizer,
    stopping_delta: Optional[float] = None,
    collate_fn=default_collate,
    cuda: bool = True,
    sampler: Optional[torch.utils.data.sampler.Sampler] = None,
    silent: bool = False,
    update_freq: int = 10,
    evaluate_batch_size: int = 1024,
    update_callback=None,
    epoch_callback=None,
) -> None:
    static_dataloader = DataLoader(
        dataset,
        batch_size=batch_size,
        collate_fn=collate_fn,
        pin_memory=False,
        sampler=sampler,
        shuffle=False,
    )
    train_dataloader = DataLoader(
        dataset,
        batch_size=batch_size,
        collate_fn=collate_fn,
        sampler=sampler,
        shuffle=True,
    )
    data_iterator = static_dataloader
    kmeans = KMeans(n_clusters=model.cluster_number, n_init=20)
    model.train()
    features = []
    actual = []
    # form initial cluster centres
    for index, batch in enumerate(data_iterator):
        if (isinstance(batch, tuple) or isinstance(batch, list)) and len(batch) == 2:
            batch, value = batch  # if we have a prediction label, separate it to actual
            actual.append(value)
        if cuda:
            batch = batch.cuda(non_blocking=True)
        features.append(model.encoder(batch).detach().cpu())
    actual = torch.cat(actual).long()
    predicted = kmeans.fit_predict(torch.cat(features).numpy())
    predicted_previous = torch.tensor(np.copy(predicted), dtype=torch.long)
    _, accuracy = cluster_accuracy(predicted, actual.cpu().numpy())
    cluster_centers = torch.tensor(
        kmeans.cluster_centers_, dtype=torch.float, requires_grad=True
    )
    if cuda:
        cluster_centers = cluster_centers.cuda(non_blocking=True)
    with torch.no_grad():
        # initialise the cluster centers
        model.state_dict()["assignment.cluster_centers"].copy_(cluster_centers)
    loss_function = nn.KLDivLoss(size_average=False)
    delta_label = None
    for epoch in range(epochs):
        features = []
        data_iterator = train_dataloader
        model.train()
        for index, batch in enumerate(data_iterator):
            if (isinstance(batch, tuple) or isinstance(batch, list)) and len(
                batch
            ) == 2:
                batch, _ = batch  # if we have a prediction label, strip it away
            if cuda:
                batch = batch.cuda(non_blocking=True)
            output = model(batch)
            target = target_distribution(output).detach()
            loss = loss_function(output.log(), target) / output.shape[0]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step(closure=None)
            features.append(model.encoder(batch).detach().cpu())
            if update_freq is not None and index % update_freq == 0:
                loss_value = float(loss.item())
                record.append(loss_value)
                if update_callback is not None:
                    update_callback(accuracy, loss_value, delta_label)
        predicted, actual = predict(
            dataset,
            model,
            batch_size=evaluate_batch_size,
            collate_fn=collate_fn,
            silent=True,
            return_actual=True,
            cuda=cuda,
        )
        delta_label = (
            float((predicted != predicted_previous).float().sum().item())
            / predicted_previous.shape[0]
        )
        if stopping_delta is not None and delta_label < stopping_delta:
            print(
                'Early stopping as label delta "%1.5f" less than "%1.5f".'
                % (delta_label, stopping_delta)
            )
            break
        predicted_previous = predicted
        _, accuracy = cluster_accuracy(predicted.cpu().numpy(), actual.cpu().numpy())
        print("epoch", epoch, "acc %.4f" % (accuracy or 0.0), "dlb %.4f" % (delta_label or 0.0))


def predict(
    dataset: torch.utils.data.Dataset,
    model: torch.nn.Module,
    batch_size: int = 1024,
    collate_fn=default_collate,
    cuda: bool = True,
    silent: bool = False,
    return_actual: bool = False,
):
    dataloader = DataLoader(
        dataset, batch_size=batch_size, collate_fn=collate_fn, shuffle=False
    )
    data_iterator = dataloader
    features = []
    actual = []
    model.eval()
    for batch in data_iterator:
        if (isinstance(batch, tuple) or isinstance(batch, list)) and len(batch) == 2:
            batch, value = batch  # unpack if we have a prediction label
            if return_actual:
                actual.append(value)
        elif return_actual:
            raise ValueError(
                "Dataset has no actual value to unpack, but return_actual is set."
            )
        if cuda:
            batch = batch.cuda(non_blocking=True)
        features.append(
            model(batch).detach().cpu()
        )  # move to the CPU to prevent out of memory on the GPU
    if return_actual:
        return torch.cat(features).max(1)[1], torch.cat(actual).long()
    else:
        return torch.cat(features).max(1)[1]


def main(points, labels):
    dataset = [(torch.from_numpy(x), int(y)) for x, y in zip(points, labels)]
    encoder = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    model = DEC(cluster_number=3, hidden_dimension=3, encoder=encoder)
    initialize(model)
    dec_optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train(
        dataset=dataset,
        model=model,
        epochs=2,
        batch_size=4,
        optimizer=dec_optimizer,
        stopping_delta=None,
        cuda=False,
        update_freq=1,
    )
    predicted, actual = predict(dataset, model, 1024, silent=True, return_actual=True, cuda=False)
    record.append(predicted.numpy().tolist())
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

DEC_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import Parameter\nfrom torch.utils.data import DataLoader\nfrom torch.utils.data.dataloader import default_collate\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import Parameter\nfrom retrograd.utils.data import DataLoader\nfrom retrograd.utils.data.dataloader import default_collate\n",
    ),
    (
        "            loss.backward()\n            optimizer.step(closure=None)\n",
        "            grads = loss.backward()\n            optimizer.step(grads, closure=None)\n",
    ),
]


def test_deep_embedded_clustering_trains_as_torch(capsys):
    rng = np.random.default_rng(6601)
    means = np.array([[2, 0, 0, 1, 0, 0], [0, 2, 0, 0, 1, 0], [0, 0, 2, 0, 0, 1]])
    labels = np.repeat(np.arange(3), 4)
    points = (means[labels] + 0.3 * rng.standard_normal((12, 6))).astype(np.float32)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEC_SOURCE if lib is torch else port(DEC_SOURCE, DEC_STEPS)
        names = run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            KMeans=TinyKMeans,
            linear_sum_assignment=linear_sum_assignment,
        )
        with SharedPermutations(lib, 6601):
            names["main"](points, labels)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "epoch 0 acc" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


DEEPAR_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable
from torch.utils.data import DataLoader, Dataset, RandomSampler


class Net(nn.Module):
    def __init__(self, params):
        '''
        We define a recurrent network that predicts the future values of a time-dependent variable based on
        past inputs and covariates.
        '''
        super(Net, self).__init__()
        self.params = params
        self.embedding = nn.Embedding(params.num_class, params.embedding_dim)

        self.lstm = nn.LSTM(input_size=1+params.cov_dim+params.embedding_dim,
                            hidden_size=params.lstm_hidden_dim,
                            num_layers=params.lstm_layers,
                            bias=True,
                            batch_first=False,
                            dropout=params.lstm_dropout)
        '''self.lstm = nn.LSTM(input_size=1 + params.cov_dim,
                            hidden_size=params.lstm_hidden_dim,
                            num_layers=params.lstm_layers,
                            bias=True,
                            batch_first=False,
                            dropout=params.lstm_dropout)'''
        # initialize LSTM forget gate bias to be 1 as recommanded by http://proceedings.mlr.press/v37/jozefowicz15.pdf
        for names in self.lstm._all_weights:
            for name in filter(lambda n: "bias" in n, names):
                bias = getattr(self.lstm, name)
                n = bias.size(0)
                start, end = n // 4, n // 2
                bias.data[start:end].fill_(1.)

        self.relu = nn.ReLU()
        self.distribution_mu = nn.Linear(params.lstm_hidden_dim * params.lstm_layers, 1)
        self.distribution_presigma = nn.Linear(params.lstm_hidden_dim * params.lstm_layers, 1)
        self.distribution_sigma = nn.Softplus()

    def forward(self, x, idx, hidden, cell):
        '''
        Predict mu and sigma of the distribution for z_t.
        Args:
            x: ([1, batch_size, 1+cov_dim]): z_{t-1} + x_t, note that z_0 = 0
            idx ([1, batch_size]): one integer denoting the time series id
            hidden ([lstm_layers, batch_size, lstm_hidden_dim]): LSTM h from time step t-1
            cell ([lstm_layers, batch_size, lstm_hidden_dim]): LSTM c from time step t-1
        Returns:
            mu ([batch_size]): estimated mean of z_t
            sigma ([batch_size]): estimated standard deviation of z_t
            hidden ([lstm_layers, batch_size, lstm_hidden_dim]): LSTM h from time step t
            cell ([lstm_layers, batch_size, lstm_hidden_dim]): LSTM c from time step t
        '''
        onehot_embed = self.embedding(idx) #TODO: is it possible to do this only once per window instead of per step?
        lstm_input = torch.cat((x, onehot_embed), dim=2)
        output, (hidden, cell) = self.lstm(lstm_input, (hidden, cell))
        # use h from all three layers to calculate mu and sigma
        hidden_permute = hidden.permute(1, 2, 0).contiguous().view(hidden.shape[1], -1)
        pre_sigma = self.distribution_presigma(hidden_permute)
        mu = self.distribution_mu(hidden_permute)
        sigma = self.distribution_sigma(pre_sigma)  # softplus to make sure standard deviation is positive
        return torch.squeeze(mu), torch.squeeze(sigma), hidden, cell

    def init_hidden(self, input_size):
        return torch.zeros(self.params.lstm_layers, input_size, self.params.lstm_hidden_dim, device=self.params.device)

    def init_cell(self, input_size):
        return torch.zeros(self.params.lstm_layers, input_size, self.params.lstm_hidden_dim, device=self.params.device)

    def test(self, x, v_batch, id_batch, hidden, cell, sampling=False):
        batch_size = x.shape[1]
        decoder_hidden = hidden
        decoder_cell = cell
        sample_mu = torch.zeros(batch_size, self.params.predict_steps, device=self.params.device)
        sample_sigma = torch.zeros(batch_size, self.params.predict_steps, device=self.params.device)
        for t in range(self.params.predict_steps):
            mu_de, sigma_de, decoder_hidden, decoder_cell = self(x[self.params.predict_start + t].unsqueeze(0),
                                                                 id_batch, decoder_hidden, decoder_cell)
            sample_mu[:, t] = mu_de * v_batch[:, 0] + v_batch[:, 1]
            sample_sigma[:, t] = sigma_de * v_batch[:, 0]
            if t < (self.params.predict_steps - 1):
                x[self.params.predict_start + t + 1, :, 0] = mu_de
        return sample_mu, sample_sigma


def loss_fn(mu: Variable, sigma: Variable, labels: Variable):
    '''
    Compute using gaussian the log-likehood which needs to be maximized. Ignore time steps where labels are missing.
    Args:
        mu: (Variable) dimension [batch_size] - estimated mean at time step t
        sigma: (Variable) dimension [batch_size] - estimated standard deviation at time step t
        labels: (Variable) dimension [batch_size] z_t
    Returns:
        loss: (Variable) average log-likelihood loss across the batch
    '''
    zero_index = (labels != 0)
    distribution = torch.distributions.normal.Normal(mu[zero_index], sigma[zero_index])
    likelihood = distribution.log_prob(labels[zero_index])
    return -torch.mean(likelihood)


def train(model: nn.Module,
          optimizer: torch.optim,
          loss_fn,
          train_loader,
          test_loader,
          params,
          epoch: int) -> float:
    '''Train the model on one epoch by batches.
    Args:
        model: (torch.nn.Module) the neural network
        optimizer: (torch.optim) optimizer for parameters of model
        loss_fn: a function that takes outputs and labels per timestep, and then computes the loss for the batch
        train_loader: load train data and labels
        test_loader: load test data and labels
        params: (Params) hyperparameters
        epoch: (int) the current training epoch
    '''
    model.train()
    loss_epoch = np.zeros(len(train_loader))
    # Train_loader:
    # train_batch ([batch_size, train_window, 1+cov_dim]): z_{0:T-1} + x_{1:T}, note that z_0 = 0;
    # idx ([batch_size]): one integer denoting the time series id;
    # labels_batch ([batch_size, train_window]): z_{1:T}.
    for i, (train_batch, idx, labels_batch) in enumerate(train_loader):
        optimizer.zero_grad()
        batch_size = train_batch.shape[0]

        train_batch = train_batch.permute(1, 0, 2).to(torch.float32).to(params.device)  # not scaled
        labels_batch = labels_batch.permute(1, 0).to(torch.float32).to(params.device)  # not scaled
        idx = idx.unsqueeze(0).to(params.device)

        loss = torch.zeros(1, device=params.device)
        hidden = model.init_hidden(batch_size)
        cell = model.init_cell(batch_size)

        for t in range(params.train_window):
            # if z_t is missing, replace it by output mu from the last time step
            zero_index = (train_batch[t, :, 0] == 0)
            if t > 0 and torch.sum(zero_index) > 0:
                train_batch[t, zero_index, 0] = mu[zero_index]
            mu, sigma, hidden, cell = model(train_batch[t].unsqueeze_(0).clone(), idx, hidden, cell)
            loss += loss_fn(mu, sigma, labels_batch[t])

        loss.backward()
        optimizer.step()
        loss = loss.item() / params.train_window  # loss per timestep
        loss_epoch[i] = loss
        record.append(loss)
    return loss_epoch


def evaluate(model, test_loader, params):
    model.eval()
    with torch.no_grad():
        for i, (test_batch, id_batch, v, labels) in enumerate(test_loader):
            test_batch = test_batch.permute(1, 0, 2).to(torch.float32).to(params.device)
            id_batch = id_batch.unsqueeze(0).to(params.device)
            v_batch = v.to(torch.float32).to(params.device)
            labels = labels.to(torch.float32).to(params.device)
            batch_size = test_batch.shape[1]
            input_mu = torch.zeros(batch_size, params.test_predict_start, device=params.device) # scaled
            input_sigma = torch.zeros(batch_size, params.test_predict_start, device=params.device) # scaled
            hidden = model.init_hidden(batch_size)
            cell = model.init_cell(batch_size)

            for t in range(params.test_predict_start):
                # if z_t is missing, replace it by output mu from the last time step
                zero_index = (test_batch[t,:,0] == 0)
                if t > 0 and torch.sum(zero_index) > 0:
                    test_batch[t,zero_index,0] = mu[zero_index]

                mu, sigma, hidden, cell = model(test_batch[t].unsqueeze(0), id_batch, hidden, cell)
                input_mu[:,t] = v_batch[:, 0] * mu + v_batch[:, 1]
                input_sigma[:,t] = v_batch[:, 0] * sigma

            sample_mu, sample_sigma = model.test(test_batch, v_batch, id_batch, hidden, cell)
            record.append(input_mu.numpy().copy())
            record.append(sample_mu.numpy().copy())
            record.append(sample_sigma.numpy().copy())


class TrainDataset(Dataset):
    def __init__(self, data, label):
        self.data = data
        self.label = label
        self.train_len = self.data.shape[0]

    def __len__(self):
        return self.train_len

    def __getitem__(self, index):
        return (self.data[index,:,:-1],int(self.data[index,0,-1]), self.label[index])


class TestDataset(Dataset):
    def __init__(self, data, v, label):
        self.data = data
        self.v = v
        self.label = label
        self.test_len = self.data.shape[0]

    def __len__(self):
        return self.test_len

    def __getitem__(self, index):
        return (self.data[index,:,:-1],int(self.data[index,0,-1]),self.v[index],self.label[index])


def main(params, train_data, train_label, test_data, test_v, test_label):
    train_set = TrainDataset(train_data, train_label)
    test_set = TestDataset(test_data, test_v, test_label)
    sampler = RandomSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=params.batch_size, sampler=sampler, num_workers=0)
    test_loader = DataLoader(test_set, batch_size=params.predict_batch, sampler=RandomSampler(test_set), num_workers=0)
    model = Net(params)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=params.learning_rate)
    for epoch in range(params.num_epochs):
        loss_summary = train(model, optimizer, loss_fn, train_loader, test_loader, params, epoch)
        print('Epoch {} loss {:.5f}'.format(epoch, loss_summary.mean()))
    evaluate(model, test_loader, params)
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

DEEPAR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.autograd import Variable\nfrom torch.utils.data import DataLoader, Dataset, RandomSampler\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.autograd import Variable\nfrom retrograd.utils.data import DataLoader, Dataset, RandomSampler\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class _DeepARParams:
    num_class = 3
    embedding_dim = 2
    cov_dim = 2
    lstm_hidden_dim = 5
    lstm_layers = 2
    lstm_dropout = 0.0
    device = "cpu"
    train_window = 6
    predict_steps = 2
    predict_start = 4
    test_predict_start = 4
    learning_rate = 1e-2
    num_epochs = 2
    batch_size = 5
    predict_batch = 3


def test_deepar_trains_and_forecasts_as_torch(capsys):
    rng = np.random.default_rng(6602)
    series = np.abs(rng.standard_normal((5, 7))).astype(np.float32) + 0.5
    series[1, 3] = 0.0  # missing values, filled from the model's own mean
    series[3, 2] = 0.0
    covariates = rng.standard_normal((5, 6, 2)).astype(np.float32)
    ids = np.array([0, 1, 2, 0, 1], dtype=np.float32)
    # as the repository's preprocessing lays a window out: z_{t-1}, covariates, series id
    data = np.concatenate(
        [series[:, :-1, None], covariates, np.broadcast_to(ids[:, None, None], (5, 6, 1))], 2
    )
    label = series[:, 1:]
    v = np.array([[1.5, 0.2], [0.8, -0.1], [1.0, 0.0]], dtype=np.float32)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEEPAR_SOURCE if lib is torch else port(DEEPAR_SOURCE, DEEPAR_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedPermutations(lib, 6602):
            names["main"](_DeepARParams, data, label, data[:3], v, label[:3])
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


MEMN2N_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable


def position_encoding(sentence_size, embedding_dim):
    encoding = np.ones((embedding_dim, sentence_size), dtype=np.float32)
    ls = sentence_size + 1
    le = embedding_dim + 1
    for i in range(1, le):
        for j in range(1, ls):
            encoding[i-1, j-1] = (i - (embedding_dim+1)/2) * (j - (sentence_size+1)/2)
    encoding = 1 + 4 * encoding / embedding_dim / sentence_size
    # Make position encoding of time words identity to avoid modifying them
    encoding[:, -1] = 1.0
    return np.transpose(encoding)


class AttrProxy(object):
    \"\"\"
    Translates index lookups into attribute lookups.
    To implement some trick which able to use list of nn.Module in a nn.Module
    see https://discuss.pytorch.org/t/list-of-nn-module-in-a-nn-module/219/2
    \"\"\"
    def __init__(self, module, prefix):
        self.module = module
        self.prefix = prefix

    def __getitem__(self, i):
        return getattr(self.module, self.prefix + str(i))


class MemN2N(nn.Module):
    def __init__(self, settings):
        super(MemN2N, self).__init__()

        use_cuda = settings["use_cuda"]
        num_vocab = settings["num_vocab"]
        embedding_dim = settings["embedding_dim"]
        sentence_size = settings["sentence_size"]
        self.max_hops = settings["max_hops"]

        for hop in range(self.max_hops+1):
            C = nn.Embedding(num_vocab, embedding_dim, padding_idx=0)
            C.weight.data.normal_(0, 0.1)
            self.add_module("C_{}".format(hop), C)
        self.C = AttrProxy(self, "C_")

        self.softmax = nn.Softmax()
        self.encoding = Variable(torch.FloatTensor(
            position_encoding(sentence_size, embedding_dim)), requires_grad=False)

        if use_cuda:
            self.encoding = self.encoding.cuda()

    def forward(self, story, query):
        story_size = story.size()

        u = list()
        query_embed = self.C[0](query)
        # weired way to perform reduce_dot
        encoding = self.encoding.unsqueeze(0).expand_as(query_embed)
        u.append(torch.sum(query_embed*encoding, 1))

        for hop in range(self.max_hops):
            embed_A = self.C[hop](story.view(story.size(0), -1))
            embed_A = embed_A.view(story_size+(embed_A.size(-1),))

            encoding = self.encoding.unsqueeze(0).unsqueeze(1).expand_as(embed_A)
            m_A = torch.sum(embed_A*encoding, 2)

            u_temp = u[-1].unsqueeze(1).expand_as(m_A)
            prob   = self.softmax(torch.sum(m_A*u_temp, 2))

            embed_C = self.C[hop+1](story.view(story.size(0), -1))
            embed_C = embed_C.view(story_size+(embed_C.size(-1),))
            m_C     = torch.sum(embed_C*encoding, 2)

            prob = prob.unsqueeze(2).expand_as(m_C)
            o_k  = torch.sum(m_C*prob, 1)

            u_k = u[-1] + o_k
            u.append(u_k)

        a_hat = u[-1]@self.C[self.max_hops].weight.transpose(0, 1)
        return a_hat, self.softmax(a_hat)


class Trainer():
    def __init__(self, config, train_loader):
        self.train_loader = train_loader
        settings = {
            "use_cuda": config.cuda,
            "num_vocab": config.num_vocab,
            "embedding_dim": 6,
            "sentence_size": config.sentence_size,
            "max_hops": config.max_hops
        }
        self.mem_n2n = MemN2N(settings)
        initialize(self.mem_n2n)
        self.ce_fn = nn.CrossEntropyLoss(size_average=False)
        self.opt = torch.optim.SGD(self.mem_n2n.parameters(), lr=config.lr)
        self.config = config
        self.use_cuda = config.cuda

    def fit(self):
        config = self.config
        for epoch in range(config.max_epochs):
            loss = self._train_single_epoch(epoch)
            lr = self._decay_learning_rate(self.opt, epoch)
            print("Epoch: {}, Loss: {:.3f}, lr: {:.5f}".format(epoch+1, loss, lr))
            record.append(loss)

    def _train_single_epoch(self, epoch):
        config = self.config
        num_steps_per_epoch = len(self.train_loader)
        for step, (story, query, answer) in enumerate(self.train_loader):
            story = Variable(story)
            query = Variable(query)
            answer = Variable(answer)

            if config.cuda:
                story = story.cuda()
                query = query.cuda()
                answer = answer.cuda()

            self.opt.zero_grad()
            loss = self.ce_fn(self.mem_n2n(story, query)[0], answer)
            loss.backward()

            self._gradient_noise_and_clip(self.mem_n2n.parameters(),
                                          noise_stddev=1e-3, max_clip=config.max_clip)
            self.opt.step()

        return loss.item()

    def _gradient_noise_and_clip(self, parameters,
                                 noise_stddev=1e-3, max_clip=40.0):
        parameters = list(filter(lambda p: p.grad is not None, parameters))
        nn.utils.clip_grad_norm(parameters, max_clip)

        for p in parameters:
            noise = torch.randn(p.size()) * noise_stddev
            if self.use_cuda:
                noise = noise.cuda()
            p.grad.data.add_(noise)

    def _decay_learning_rate(self, opt, epoch):
        decay_interval = self.config.decay_interval
        decay_ratio    = self.config.decay_ratio

        decay_count = max(0, epoch // decay_interval)
        lr = self.config.lr * (decay_ratio ** decay_count)
        for param_group in opt.param_groups:
            param_group["lr"] = lr

        return lr
"""

MEMN2N_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.autograd import Variable\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.autograd import Variable\n",
    ),
    (
        "            loss.backward()\n\n            self._gradient_noise_and_clip(self.mem_n2n.parameters(),\n                                          noise_stddev=1e-3, max_clip=config.max_clip)\n            self.opt.step()\n",
        "            grads = loss.backward()\n\n            self._gradient_noise_and_clip(grads, self.mem_n2n.parameters(),\n                                          noise_stddev=1e-3, max_clip=config.max_clip)\n            self.opt.step(grads)\n",
    ),
    (
        "    def _gradient_noise_and_clip(self, parameters,\n",
        "    def _gradient_noise_and_clip(self, grads, parameters,\n",
    ),
    (
        "        parameters = list(filter(lambda p: p.grad is not None, parameters))\n        nn.utils.clip_grad_norm(parameters, max_clip)\n",
        "        parameters = list(filter(lambda p: p.grad(grads) is not None, parameters))\n        nn.utils.clip_grad_norm(grads, parameters, max_clip)\n",
    ),
    ("            p.grad.data.add_(noise)\n", "            p.grad(grads).data.add_(noise)\n"),
]


class _MemN2NConfig:
    cuda = False
    num_vocab = 10
    sentence_size = 4
    max_hops = 3
    lr = 0.05
    max_clip = 0.5
    max_epochs = 3
    decay_interval = 2
    decay_ratio = 0.5


def test_end_to_end_memory_network_trains_as_torch(capsys):
    rng = np.random.default_rng(6603)
    stories = rng.integers(0, 9, (2, 3, 5, 4))  # two batches of 3 stories of 5 sentences
    stories[:, :, :, -1] = np.arange(1, 6)  # the time word ends each sentence
    queries = rng.integers(1, 9, (2, 3, 4))
    answers = rng.integers(1, 10, (2, 3))
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = MEMN2N_SOURCE if lib is torch else port(MEMN2N_SOURCE, MEMN2N_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        loader = [
            (lib.tensor(s), lib.tensor(q), lib.tensor(a))
            for s, q, a in zip(stories, queries, answers)
        ]
        trainer = names["Trainer"](_MemN2NConfig, loader)
        with SharedDraws(lib, 6603):
            trainer.fit()
        record.append(
            {k: v.detach().numpy().copy() for k, v in trainer.mem_n2n.state_dict().items()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


DEEPFM_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader
from torch.utils.data import Dataset
from torch.utils.data import sampler

continous_features = 3


class CriteoDataset(Dataset):
    \"\"\"
    Custom dataset class for Criteo dataset in order to use efficient
    dataloader tool provided by PyTorch.
    \"\"\"

    def __init__(self, data, target, train=True):
        self.train = train
        self.train_data = data
        self.target = target

    def __getitem__(self, idx):
        dataI, targetI = self.train_data[idx, :], self.target[idx]
        # index of continous features are zero
        Xi_coutinous = np.zeros_like(dataI[:continous_features])
        Xi_categorial = dataI[continous_features:]
        Xi = torch.from_numpy(np.concatenate((Xi_coutinous, Xi_categorial)).astype(np.int32)).unsqueeze(-1)

        # value of categorial features are one (one hot features)
        Xv_categorial = np.ones_like(dataI[continous_features:])
        Xv_coutinous = dataI[:continous_features]
        Xv = torch.from_numpy(np.concatenate((Xv_coutinous, Xv_categorial)).astype(np.int32))
        return Xi, Xv, targetI

    def __len__(self):
        return len(self.train_data)


class DeepFM(nn.Module):
    \"\"\"
    A DeepFM network with RMSE loss for rates prediction problem.

    There are two parts in the architecture of this network: fm part for low
    order interactions of features and deep part for higher order. In this
    network, we use bachnorm and dropout technology for all hidden layers,
    and "Adam" method for optimazation.

    You may find more details in this paper:
    DeepFM: A Factorization-Machine based Neural Network for CTR Prediction,
    Huifeng Guo, Ruiming Tang, Yunming Yey, Zhenguo Li, Xiuqiang He.
    \"\"\"

    def __init__(self, feature_sizes, embedding_size=4,
                 hidden_dims=[32, 32], num_classes=1, dropout=[0.5, 0.5],
                 use_cuda=True, verbose=False):
        \"\"\"
        Initialize a new network

        Inputs:
        - feature_size: A list of integer giving the size of features for each field.
        - embedding_size: An integer giving size of feature embedding.
        - hidden_dims: A list of integer giving the size of each hidden layer.
        - num_classes: An integer giving the number of classes to predict. For example,
                    someone may rate 1,2,3,4 or 5 stars to a film.
        - batch_size: batch_size
        \"\"\"
        super().__init__()
        self.field_size = len(feature_sizes)
        self.feature_sizes = feature_sizes
        self.embedding_size = embedding_size
        self.hidden_dims = hidden_dims
        self.num_classes = num_classes
        self.dtype = torch.long
        self.bias = torch.nn.Parameter(torch.randn(1))
        \"\"\"
            check if use cuda
        \"\"\"
        if use_cuda and torch.cuda.is_available():
            self.device = torch.device('cuda')
        else:
            self.device = torch.device('cpu')
        \"\"\"
            init fm part
        \"\"\"

        self.fm_first_order_embeddings = nn.ModuleList(
            [nn.Embedding(feature_size, 1) for feature_size in self.feature_sizes])
        self.fm_second_order_embeddings = nn.ModuleList(
            [nn.Embedding(feature_size, self.embedding_size) for feature_size in self.feature_sizes])
        \"\"\"
            init deep part
        \"\"\"
        all_dims = [self.field_size * self.embedding_size] + \\
            self.hidden_dims + [self.num_classes]
        for i in range(1, len(hidden_dims) + 1):
            setattr(self, 'linear_'+str(i),
                    nn.Linear(all_dims[i-1], all_dims[i]))
            # nn.init.kaiming_normal_(self.fc1.weight)
            setattr(self, 'batchNorm_' + str(i),
                    nn.BatchNorm1d(all_dims[i]))
            setattr(self, 'dropout_'+str(i),
                    nn.Dropout(dropout[i-1]))

    def forward(self, Xi, Xv):
        \"\"\"
        Forward process of network.

        Inputs:
        - Xi: A tensor of input's index, shape of (N, field_size, 1)
        - Xv: A tensor of input's value, shape of (N, field_size, 1)
        \"\"\"
        \"\"\"
            fm part
        \"\"\"

        fm_first_order_emb_arr = [(torch.sum(emb(Xi[:, i, :]), 1).t() * Xv[:, i]).t() for i, emb in enumerate(self.fm_first_order_embeddings)]
        fm_first_order = torch.cat(fm_first_order_emb_arr, 1)
        fm_second_order_emb_arr = [(torch.sum(emb(Xi[:, i, :]), 1).t() * Xv[:, i]).t() for i, emb in enumerate(self.fm_second_order_embeddings)]
        fm_sum_second_order_emb = sum(fm_second_order_emb_arr)
        fm_sum_second_order_emb_square = fm_sum_second_order_emb * \\
            fm_sum_second_order_emb  # (x+y)^2
        fm_second_order_emb_square = [
            item*item for item in fm_second_order_emb_arr]
        fm_second_order_emb_square_sum = sum(
            fm_second_order_emb_square)  # x^2+y^2
        fm_second_order = (fm_sum_second_order_emb_square -
                           fm_second_order_emb_square_sum) * 0.5
        \"\"\"
            deep part
        \"\"\"
        deep_emb = torch.cat(fm_second_order_emb_arr, 1)
        deep_out = deep_emb
        for i in range(1, len(self.hidden_dims) + 1):
            deep_out = getattr(self, 'linear_' + str(i))(deep_out)
            deep_out = getattr(self, 'batchNorm_' + str(i))(deep_out)
            deep_out = getattr(self, 'dropout_' + str(i))(deep_out)
        \"\"\"
            sum
        \"\"\"
        total_sum = torch.sum(fm_first_order, 1) + \\
            torch.sum(fm_second_order, 1) + torch.sum(deep_out, 1) + self.bias
        return total_sum

    def fit(self, loader_train, loader_val, optimizer, epochs=100, verbose=False, print_every=100):
        \"\"\"
        Training a model and valid accuracy.

        Inputs:
        - loader_train: I
        - loader_val: .
        - optimizer: Abstraction of optimizer used in training process, e.g., "torch.optim.Adam()""torch.optim.SGD()".
        - epochs: Integer, number of epochs.
        - verbose: Bool, if print.
        - print_every: Integer, if verbose is True, print every the number of iterations.
        \"\"\"
        \"\"\"
            load input data
        \"\"\"
        model = self.train().to(device=self.device)
        criterion = F.binary_cross_entropy_with_logits

        for _ in range(epochs):
            for t, (xi, xv, y) in enumerate(loader_train):
                xi = xi.to(device=self.device, dtype=self.dtype)
                xv = xv.to(device=self.device, dtype=torch.float)
                y = y.to(device=self.device, dtype=torch.float)

                total = model(xi, xv)
                loss = criterion(total, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

                if verbose and t % print_every == 0:
                    print('Iteration %d, loss = %.4f' % (t, loss.item()))
                    self.check_accuracy(loader_val, model)
                    print()
                record.append(loss.item())

    def check_accuracy(self, loader, model):
        if loader.dataset.train:
            print('Checking accuracy on validation set')
        else:
            print('Checking accuracy on test set')
        num_correct = 0
        num_samples = 0
        model.eval()  # set model to evaluation mode
        with torch.no_grad():
            for xi, xv, y in loader:
                xi = xi.to(device=self.device, dtype=self.dtype)  # move to device, e.g. GPU
                xv = xv.to(device=self.device, dtype=torch.float)
                y = y.to(device=self.device, dtype=torch.bool)
                total = model(xi, xv)
                preds = (F.sigmoid(total) > 0.5)
                num_correct += (preds == y).sum()
                num_samples += preds.size(0)
            acc = float(num_correct) / num_samples
            print('Got %d / %d correct (%.2f%%)' % (num_correct, num_samples, 100 * acc))


def main(data, target):
    Num_train = 12
    train_data = CriteoDataset(data[:Num_train], target[:Num_train], train=True)
    loader_train = DataLoader(train_data, batch_size=4,
                              sampler=sampler.SubsetRandomSampler(range(Num_train)))
    val_data = CriteoDataset(data, target, train=True)
    loader_val = DataLoader(val_data, batch_size=4,
                            sampler=sampler.SubsetRandomSampler(range(Num_train, len(data))))

    feature_sizes = [1, 1, 1, 5, 4, 6]
    model = DeepFM(feature_sizes, embedding_size=3, hidden_dims=[8, 6], dropout=[0.0, 0.0], use_cuda=False)
    initialize(model)
    optimizer = optim.Adam(model.parameters(), lr=1e-4, weight_decay=0.0)
    model.fit(loader_train, loader_val, optimizer, epochs=2, verbose=False, print_every=2)
    model.check_accuracy(loader_val, model)
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

DEEPFM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\nfrom torch.utils.data import DataLoader\nfrom torch.utils.data import Dataset\nfrom torch.utils.data import sampler\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nfrom retrograd.utils.data import DataLoader\nfrom retrograd.utils.data import Dataset\nfrom retrograd.utils.data import sampler\n",
    ),
    (
        "                loss.backward()\n                optimizer.step()\n",
        "                grads = loss.backward()\n                optimizer.step(grads)\n",
    ),
]


def test_deepfm_trains_as_torch(capsys):
    rng = np.random.default_rng(6604)
    count = 20
    continuous = rng.integers(0, 4, (count, 3))
    categorical = np.stack([rng.integers(0, n, count) for n in (5, 4, 6)], axis=1)
    data = np.concatenate([continuous, categorical], axis=1)
    target = (categorical[:, 0] % 2).astype(np.float64)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEEPFM_SOURCE if lib is torch else port(DEEPFM_SOURCE, DEEPFM_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedPermutations(lib, 6604):
            names["main"](data, target)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "correct" in logs[0]
    # the biases before a batch norm (and the second norm's input bias) have a true gradient
    # of zero, so Adam's steps on them follow the rounding noise (lr-sized, either sign), and
    # the running means follow those biases
    noisy = (
        "linear_1.bias",
        "batchNorm_1.bias",
        "linear_2.bias",
        "batchNorm_1.running_mean",
        "batchNorm_2.running_mean",
    )
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=noisy)
    for name in noisy:
        np.testing.assert_allclose(records[1][-1][name], records[0][-1][name], atol=2e-3)


def test_optimizer_step_takes_torch_s_closure_keyword():
    """``optimizer.step(closure=None)`` (pt-dec's spelling) was a TypeError; a closure given by
    keyword is evaluated as one given by position."""
    weight = rg.nn.Parameter(rg.tensor([1.0, -2.0]))
    optimizer = rg.optim.SGD([weight], lr=0.5)
    grads = (weight * weight).sum().backward()
    assert optimizer.step(grads, closure=None) is None
    np.testing.assert_allclose(weight.detach().numpy(), [0.0, 0.0])

    def closure():
        loss = ((weight - 1.0) ** 2).sum()
        return loss, loss.backward()

    loss = optimizer.step(closure=closure)
    assert float(loss) == pytest.approx(2.0)
    np.testing.assert_allclose(weight.detach().numpy(), [1.0, 1.0])
    with pytest.raises(rg.InvalidArgumentError, match="both gradients and a closure"):
        optimizer.step(grads, closure=closure)


def test_in_place_view_ops_reshape_a_view_that_still_aliases_its_base_as_torch_s():
    """``train_batch[t].unsqueeze_(0)`` (DeepAR's loop) had no ``unsqueeze_``; the in-place
    view ops keep the tensor a view of what it viewed, as torch's do."""
    for lib in (torch, rg):
        base = lib.zeros(3, 4)
        row = base[1]
        earlier = row[1:3]
        assert row.unsqueeze_(0) is row
        assert tuple(row.shape) == (1, 4)
        row[0, 2] = 5.0  # through the reshaped view, to the base
        earlier[0] = 7.0  # through a view taken before, to both
        assert base.numpy().tolist() == [[0, 0, 0, 0], [0, 7, 5, 0], [0, 0, 0, 0]]
        assert row.numpy().tolist() == [[0, 7, 5, 0]]
        base[1, 0] = 2.0  # a write to the base, seen by the view
        assert row.numpy().tolist() == [[2, 7, 5, 0]]
        grid = lib.arange(6.0).reshape(2, 3)
        grid.t_()
        assert grid.numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
        grid.transpose_(0, 1).unsqueeze_(1).squeeze_()
        assert grid.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
        column = lib.ones(1, 3)
        assert tuple(column.squeeze_(dim=0).shape) == (3,)
        assert tuple(column.squeeze_().shape) == (3,)  # no dimension of size 1 left
        assert tuple(lib.ones(1, 3, 1).squeeze_((0, 2)).shape) == (3,)
    # a refused dimension leaves the view as it was, still aliasing its base
    base = rg.zeros(3, 4)
    row = base[2]
    with pytest.raises(rg.ShapeError, match="dimension 5 is out of range"):
        row.unsqueeze_(5)
    base[2, 0] = 1.0
    assert row.numpy().tolist() == [1, 0, 0, 0]
    # in the graph: the gradient reaches what the reshaped tensor was taken from
    weight = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    first = (weight * 2.0)[0]
    first.unsqueeze_(0)
    grads = (first * rg.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    np.testing.assert_allclose(weight.grad(grads).numpy(), [[2, 4, 6], [0, 0, 0]])
    with pytest.raises(rg.AutodiffError, match="unsqueeze_: a leaf tensor that requires grad"):
        weight.unsqueeze_(0)
    assert tuple(weight.shape) == (2, 3)
    with rg.no_grad():
        weight.unsqueeze_(0)
    assert tuple(weight.shape) == (1, 2, 3) and weight.requires_grad and weight.is_leaf


HAN_SOURCE = """
import csv

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from sklearn import metrics


def get_evaluation(y_true, y_prob, list_metrics):
    y_pred = np.argmax(y_prob, -1)
    output = {}
    if 'accuracy' in list_metrics:
        output['accuracy'] = metrics.accuracy_score(y_true, y_pred)
    if 'loss' in list_metrics:
        try:
            output['loss'] = metrics.log_loss(y_true, y_prob)
        except ValueError:
            output['loss'] = -1
    if 'confusion_matrix' in list_metrics:
        output['confusion_matrix'] = str(metrics.confusion_matrix(y_true, y_pred))
    return output


def matrix_mul(input, weight, bias=False):
    feature_list = []
    for feature in input:
        feature = torch.mm(feature, weight)
        if isinstance(bias, torch.nn.parameter.Parameter):
            feature = feature + bias.expand(feature.size()[0], bias.size()[1])
        feature = torch.tanh(feature).unsqueeze(0)
        feature_list.append(feature)

    return torch.cat(feature_list, 0).squeeze()


def element_wise_mul(input1, input2):

    feature_list = []
    for feature_1, feature_2 in zip(input1, input2):
        feature_2 = feature_2.unsqueeze(1).expand_as(feature_1)
        feature = feature_1 * feature_2
        feature_list.append(feature.unsqueeze(0))
    output = torch.cat(feature_list, 0)

    return torch.sum(output, 0).unsqueeze(0)


class MyDataset(Dataset):

    def __init__(self, texts, labels, max_length_sentences=3, max_length_word=4):
        super(MyDataset, self).__init__()
        self.texts = texts
        self.labels = labels
        self.max_length_sentences = max_length_sentences
        self.max_length_word = max_length_word
        self.num_classes = len(set(self.labels))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        label = self.labels[index]
        text = self.texts[index]
        document_encode = [
            [word for word in sentence] for sentence in text]

        for sentences in document_encode:
            if len(sentences) < self.max_length_word:
                extended_words = [-1 for _ in range(self.max_length_word - len(sentences))]
                sentences.extend(extended_words)

        if len(document_encode) < self.max_length_sentences:
            extended_sentences = [[-1 for _ in range(self.max_length_word)] for _ in
                                  range(self.max_length_sentences - len(document_encode))]
            document_encode.extend(extended_sentences)

        document_encode = [sentences[:self.max_length_word] for sentences in document_encode][
                          :self.max_length_sentences]

        document_encode = np.stack(arrays=document_encode, axis=0)
        document_encode += 1

        return document_encode.astype(np.int64), label


class WordAttNet(nn.Module):
    def __init__(self, word2vec_path, hidden_size=50):
        super(WordAttNet, self).__init__()
        dict = pd.read_csv(filepath_or_buffer=word2vec_path, header=None, sep=" ", quoting=csv.QUOTE_NONE).values[:, 1:]
        dict_len, embed_size = dict.shape
        dict_len += 1
        unknown_word = np.zeros((1, embed_size))
        dict = torch.from_numpy(np.concatenate([unknown_word, dict], axis=0).astype(np.float64))

        self.word_weight = nn.Parameter(torch.Tensor(2 * hidden_size, 2 * hidden_size))
        self.word_bias = nn.Parameter(torch.Tensor(1, 2 * hidden_size))
        self.context_weight = nn.Parameter(torch.Tensor(2 * hidden_size, 1))

        self.lookup = nn.Embedding(num_embeddings=dict_len, embedding_dim=embed_size).from_pretrained(dict)
        self.gru = nn.GRU(embed_size, hidden_size, bidirectional=True)
        self._create_weights(mean=0.0, std=0.05)

    def _create_weights(self, mean=0.0, std=0.05):

        self.word_weight.data.normal_(mean, std)
        self.context_weight.data.normal_(mean, std)

    def forward(self, input, hidden_state):

        output = self.lookup(input)
        f_output, h_output = self.gru(output.float(), hidden_state)  # feature output and hidden state output
        output = matrix_mul(f_output, self.word_weight, self.word_bias)
        output = matrix_mul(output, self.context_weight).permute(1,0)
        output = F.softmax(output)
        output = element_wise_mul(f_output,output.permute(1,0))

        return output, h_output


class SentAttNet(nn.Module):
    def __init__(self, sent_hidden_size=50, word_hidden_size=50, num_classes=14):
        super(SentAttNet, self).__init__()

        self.sent_weight = nn.Parameter(torch.Tensor(2 * sent_hidden_size, 2 * sent_hidden_size))
        self.sent_bias = nn.Parameter(torch.Tensor(1, 2 * sent_hidden_size))
        self.context_weight = nn.Parameter(torch.Tensor(2 * sent_hidden_size, 1))

        self.gru = nn.GRU(2 * word_hidden_size, sent_hidden_size, bidirectional=True)
        self.fc = nn.Linear(2 * sent_hidden_size, num_classes)
        # self.sent_softmax = nn.Softmax()
        # self.fc_softmax = nn.Softmax()
        self._create_weights(mean=0.0, std=0.05)

    def _create_weights(self, mean=0.0, std=0.05):
        self.sent_weight.data.normal_(mean, std)
        self.context_weight.data.normal_(mean, std)

    def forward(self, input, hidden_state):
        f_output, h_output = self.gru(input, hidden_state)
        output = matrix_mul(f_output, self.sent_weight, self.sent_bias)
        output = matrix_mul(output, self.context_weight).permute(1, 0)
        output = F.softmax(output)
        output = element_wise_mul(f_output, output.permute(1, 0)).squeeze(0)
        output = self.fc(output)

        return output, h_output


class HierAttNet(nn.Module):
    def __init__(self, word_hidden_size, sent_hidden_size, batch_size, num_classes, pretrained_word2vec_path,
                 max_sent_length, max_word_length):
        super(HierAttNet, self).__init__()
        self.batch_size = batch_size
        self.word_hidden_size = word_hidden_size
        self.sent_hidden_size = sent_hidden_size
        self.max_sent_length = max_sent_length
        self.max_word_length = max_word_length
        self.word_att_net = WordAttNet(pretrained_word2vec_path, word_hidden_size)
        self.sent_att_net = SentAttNet(sent_hidden_size, word_hidden_size, num_classes)
        self._init_hidden_state()

    def _init_hidden_state(self, last_batch_size=None):
        if last_batch_size:
            batch_size = last_batch_size
        else:
            batch_size = self.batch_size
        self.word_hidden_state = torch.zeros(2, batch_size, self.word_hidden_size)
        self.sent_hidden_state = torch.zeros(2, batch_size, self.sent_hidden_size)
        if torch.cuda.is_available():
            self.word_hidden_state = self.word_hidden_state.cuda()
            self.sent_hidden_state = self.sent_hidden_state.cuda()

    def forward(self, input):

        output_list = []
        input = input.permute(1, 0, 2)
        for i in input:
            output, self.word_hidden_state = self.word_att_net(i.permute(1, 0), self.word_hidden_state)
            output_list.append(output)
        output = torch.cat(output_list, 0)
        output, self.sent_hidden_state = self.sent_att_net(output, self.sent_hidden_state)

        return output


def train(opt, texts, labels):
    training_params = {"batch_size": opt.batch_size,
                       "shuffle": True,
                       "drop_last": True}
    training_set = MyDataset(texts, labels, opt.max_sent_length, opt.max_word_length)
    training_generator = DataLoader(training_set, **training_params)

    model = HierAttNet(opt.word_hidden_size, opt.sent_hidden_size, opt.batch_size, training_set.num_classes,
                       opt.word2vec_path, opt.max_sent_length, opt.max_word_length)
    initialize(model)

    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=opt.lr, momentum=opt.momentum)
    model.train()
    num_iter_per_epoch = len(training_generator)
    for epoch in range(opt.num_epoches):
        for iter, (feature, label) in enumerate(training_generator):
            if torch.cuda.is_available():
                feature = feature.cuda()
                label = label.cuda()
            optimizer.zero_grad()
            model._init_hidden_state()
            predictions = model(feature)
            loss = criterion(predictions, label)
            loss.backward()
            optimizer.step()
            training_metrics = get_evaluation(label.cpu().numpy(), predictions.cpu().detach().numpy(), list_metrics=["accuracy"])
            print("Epoch: {}/{}, Iteration: {}/{}, Lr: {}, Loss: {:.4f}, Accuracy: {}".format(
                epoch + 1,
                opt.num_epoches,
                iter + 1,
                num_iter_per_epoch,
                optimizer.param_groups[0]['lr'],
                loss, training_metrics["accuracy"]))
            record.append(loss.item())
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

HAN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.utils.data import DataLoader, Dataset\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.utils.data import DataLoader, Dataset\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


class _Word2VecTable:
    """``pd.read_csv(...)`` of a GloVe text file, as the program reads it: ``.values`` is the
    word column then the vector."""

    def __init__(self, vectors):
        self.vectors = vectors

    def read_csv(self, filepath_or_buffer, header, sep, quoting):
        words = np.array([[f"w{i}"] for i in range(len(self.vectors))], dtype=object)
        return type("Frame", (), {"values": np.concatenate([words, self.vectors], 1)})()


class _HANOptions:
    batch_size = 2
    max_sent_length = 3
    max_word_length = 4
    word_hidden_size = 4
    sent_hidden_size = 3
    word2vec_path = "glove.6B.50d.txt"
    lr = 0.1
    momentum = 0.9
    num_epoches = 2


def test_hierarchical_attention_network_trains_as_torch(capsys):
    rng = np.random.default_rng(6605)
    vectors = rng.standard_normal((7, 5))
    # documents of sentences of word ids (-1 pads, as the dataset's encoder writes it)
    texts = [
        [[0, 1, 2], [3, 4, 5, 6]],
        [[6, 5], [4, 3, 2], [1, 0, 0, 2]],
        [[2, 2, 3, 1, 5]],
        [[1], [2, 3], [4, 5, 6]],
        [[0, 6, 1], [5, 2]],
        [[3, 3, 4], [1, 2, 6], [0]],
    ]
    labels = [0, 1, 2, 0, 1, 2]
    records, logs = [], []
    from test_real_ports_65 import defined_initializer

    initialize = defined_initializer(6605)  # the biases are torch.Tensor's uninitialised memory
    for lib in (torch, rg):
        record = []
        text = HAN_SOURCE if lib is torch else port(HAN_SOURCE, HAN_STEPS)
        names = run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            pd=_Word2VecTable(vectors),
        )
        texts_copy = [[list(sentence) for sentence in document] for document in texts]
        with SharedPermutations(lib, 6605):
            names["train"](_HANOptions, texts_copy, labels)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert logs[0].count("Epoch: ") == 6
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


CHAR_LM_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable


class Highway(nn.Module):
    \"\"\"Highway network\"\"\"
    def __init__(self, input_size):
        super(Highway, self).__init__()
        self.fc1 = nn.Linear(input_size, input_size, bias=True)
        self.fc2 = nn.Linear(input_size, input_size, bias=True)

    def forward(self, x):
        t = F.sigmoid(self.fc1(x))
        return torch.mul(t, F.relu(self.fc2(x))) + torch.mul(1-t, x)


class charLM(nn.Module):
    \"\"\"CNN + highway network + LSTM
    # Input:
        4D tensor with shape [batch_size, in_channel, height, width]
    # Output:
        2D Tensor with shape [batch_size, vocab_size]
    # Arguments:
        char_emb_dim: the size of each character's embedding
        word_emb_dim: the size of each word's embedding
        vocab_size: num of unique words
        num_char: num of characters
        use_gpu: True or False
    \"\"\"
    def __init__(self, char_emb_dim, word_emb_dim,
                vocab_size, num_char, use_gpu):
        super(charLM, self).__init__()
        self.char_emb_dim = char_emb_dim
        self.word_emb_dim = word_emb_dim
        self.vocab_size = vocab_size

        # char embedding layer
        self.char_embed = nn.Embedding(num_char, char_emb_dim)

        # convolutions of filters with different sizes
        self.convolutions = []

        # list of tuples: (the number of filter, width)
        self.filter_num_width = [(2, 1), (3, 2), (4, 3)]

        for out_channel, filter_width in self.filter_num_width:
            self.convolutions.append(
                nn.Conv2d(
                    1,           # in_channel
                    out_channel, # out_channel
                    kernel_size=(char_emb_dim, filter_width), # (height, width)
                    bias=True
                    )
            )

        self.highway_input_dim = sum([x for x, y in self.filter_num_width])

        self.batch_norm = nn.BatchNorm1d(self.highway_input_dim, affine=False)

        # highway net
        self.highway1 = Highway(self.highway_input_dim)
        self.highway2 = Highway(self.highway_input_dim)

        # LSTM
        self.lstm_num_layers = 2

        self.lstm = nn.LSTM(input_size=self.highway_input_dim,
                            hidden_size=self.word_emb_dim,
                            num_layers=self.lstm_num_layers,
                            bias=True,
                            dropout=0.0,
                            batch_first=True)

        # output layer
        self.dropout = nn.Dropout(p=0.0)
        self.linear = nn.Linear(self.word_emb_dim, self.vocab_size)


        if use_gpu is True:
            for x in range(len(self.convolutions)):
                self.convolutions[x] = self.convolutions[x].cuda()
            self.highway1 = self.highway1.cuda()
            self.highway2 = self.highway2.cuda()
            self.lstm = self.lstm.cuda()
            self.dropout = self.dropout.cuda()
            self.char_embed = self.char_embed.cuda()
            self.linear = self.linear.cuda()
            self.batch_norm = self.batch_norm.cuda()


    def forward(self, x, hidden):
        # Input: Variable of Tensor with shape [num_seq, seq_len, max_word_len+2]
        # Return: Variable of Tensor with shape [num_words, len(word_dict)]
        lstm_batch_size = x.size()[0]
        lstm_seq_len = x.size()[1]

        x = x.contiguous().view(-1, x.size()[2])
        # [num_seq*seq_len, max_word_len+2]

        x = self.char_embed(x)
        # [num_seq*seq_len, max_word_len+2, char_emb_dim]

        x = torch.transpose(x.view(x.size()[0], 1, x.size()[1], -1), 2, 3)
        # [num_seq*seq_len, 1, max_word_len+2, char_emb_dim]

        x = self.conv_layers(x)
        # [num_seq*seq_len, total_num_filters]

        x = self.batch_norm(x)
        # [num_seq*seq_len, total_num_filters]

        x = self.highway1(x)
        x = self.highway2(x)
        # [num_seq*seq_len, total_num_filters]

        x = x.contiguous().view(lstm_batch_size,lstm_seq_len, -1)
        # [num_seq, seq_len, total_num_filters]

        x, hidden = self.lstm(x, hidden)
        # [seq_len, num_seq, hidden_size]

        x = self.dropout(x)
        # [seq_len, num_seq, hidden_size]

        x = x.contiguous().view(lstm_batch_size*lstm_seq_len, -1)
        # [num_seq*seq_len, hidden_size]

        x = self.linear(x)
        # [num_seq*seq_len, vocab_size]
        return x, hidden


    def conv_layers(self, x):
        chosen_list = list()
        for conv in self.convolutions:
            feature_map = F.tanh(conv(x))
            # (batch_size, out_channel, 1, max_word_len-width+1)
            chosen = torch.max(feature_map, 3)[0]
            # (batch_size, out_channel, 1)
            chosen = chosen.squeeze()
            # (batch_size, out_channel)
            chosen_list.append(chosen)

        # (batch_size, total_num_filers)
        return torch.cat(chosen_list, 1)


def to_var(x):
    if torch.cuda.is_available():
        x = x.cuda()
    return Variable(x)


def train(net, data, opt):
    torch.manual_seed(1024)

    train_input = data.train_input
    valid_input = data.valid_input
    train_label = data.train_label
    valid_label = data.valid_label

    num_epoch = opt.epochs
    num_iter_per_epoch = train_input.size()[0] // opt.lstm_batch_size

    learning_rate = opt.init_lr
    old_PPL = 100000
    best_PPL = 100000

    # Log-SoftMax
    criterion = nn.CrossEntropyLoss()

    # word_emb_dim == hidden_size / num of hidden units
    hidden = (to_var(torch.zeros(2, opt.lstm_batch_size, opt.word_embed_dim)),
              to_var(torch.zeros(2, opt.lstm_batch_size, opt.word_embed_dim)))

    for epoch in range(num_epoch):

        ################  Validation  ####################
        net.eval()
        loss_batch = []
        PPL_batch = []
        iterations = valid_input.size()[0] // opt.lstm_batch_size

        valid_generator = batch_generator(valid_input, opt.lstm_batch_size)
        vlabel_generator = batch_generator(valid_label, opt.lstm_batch_size*opt.lstm_seq_len)

        for t in range(iterations):
            batch_input = valid_generator.__next__()
            batch_label = vlabel_generator.__next__()

            hidden = [state.detach() for state in hidden]
            valid_output, hidden = net(to_var(batch_input), hidden)

            length = valid_output.size()[0]

            # [num_sample-1, len(word_dict)] vs [num_sample-1]
            valid_loss = criterion(valid_output, to_var(batch_label))

            PPL = torch.exp(valid_loss.data)

            loss_batch.append(float(valid_loss))
            PPL_batch.append(float(PPL))

        PPL = np.mean(PPL_batch)
        print("[epoch {}] valid PPL={}".format(epoch, round(PPL, 3)))
        print("valid loss={}".format(round(np.mean(loss_batch), 3)))
        print("PPL decrease={}".format(round(float(old_PPL - PPL), 3)))
        record.append(PPL)

        # Preserve the best model
        if best_PPL > PPL:
            best_PPL = PPL

        # Adjust the learning rate
        if float(old_PPL - PPL) <= 1.0:
            learning_rate /= 2
            print("halved lr:{}".format(learning_rate))

        old_PPL = PPL

        ##################################################
        #################### Training ####################
        net.train()
        optimizer  = optim.SGD(net.parameters(),
                               lr = learning_rate,
                               momentum=0.85)

        # split the first dim
        input_generator = batch_generator(train_input, opt.lstm_batch_size)
        label_generator = batch_generator(train_label, opt.lstm_batch_size*opt.lstm_seq_len)

        for t in range(num_iter_per_epoch):
            batch_input = input_generator.__next__()
            batch_label = label_generator.__next__()

            # detach hidden state of LSTM from last batch
            hidden = [state.detach() for state in hidden]

            output, hidden = net(to_var(batch_input), hidden)
            # [num_word, vocab_size]

            loss = criterion(output, to_var(batch_label))

            net.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm(net.parameters(), 5, norm_type=2)
            optimizer.step()
            record.append(loss.item())


def batch_generator(x, batch_size):
    # x: [num_words, in_channel, height, width]
    # partitions x into batches
    num_step = x.size()[0] // batch_size
    for t in range(num_step):
        yield x[t*batch_size:(t+1)*batch_size]
"""

CHAR_LM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\nfrom torch.autograd import Variable\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nfrom retrograd.autograd import Variable\n",
    ),
    (
        "            loss.backward()\n            torch.nn.utils.clip_grad_norm(net.parameters(), 5, norm_type=2)\n            optimizer.step()\n",
        "            grads = loss.backward()\n            torch.nn.utils.clip_grad_norm(grads, net.parameters(), 5, norm_type=2)\n            optimizer.step(grads)\n",
    ),
]


class _CharLMOptions:
    word_embed_dim = 5
    lstm_seq_len = 3
    lstm_batch_size = 2
    epochs = 2
    init_lr = 0.5


def test_character_aware_language_model_with_highway_layers_trains_as_torch(capsys):
    rng = np.random.default_rng(6606)
    max_word_len = 6  # with the start and end characters
    words = rng.integers(0, 9, (8, 3, max_word_len))  # 8 sequences of 3 words of characters
    labels = rng.integers(0, 7, 8 * 3)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = CHAR_LM_SOURCE if lib is torch else port(CHAR_LM_SOURCE, CHAR_LM_STEPS)
        names = run_source(text, lib, record=record)
        net = names["charLM"](4, _CharLMOptions.word_embed_dim, 7, 9, False)
        initialize(net)
        for conv in net.convolutions:  # a plain list: not the model's, trained by no one
            initialize(conv)
        data = type(
            "Data",
            (),
            {
                "train_input": lib.tensor(words[:4]),
                "train_label": lib.tensor(labels[:12]),
                "valid_input": lib.tensor(words[4:]),
                "valid_label": lib.tensor(labels[12:]),
            },
        )
        names["train"](net, data, _CharLMOptions)
        record.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "halved lr" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


BAYES_BY_BACKPROP_SOURCE = """
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

DEVICE = torch.device("cpu")
BATCH_SIZE = 4
TEST_BATCH_SIZE = 4
CLASSES = 3
TRAIN_EPOCHS = 2
SAMPLES = 2
TEST_SAMPLES = 3
NUM_BATCHES = 2


class Gaussian(object):
    def __init__(self, mu, rho):
        super().__init__()
        self.mu = mu
        self.rho = rho
        self.normal = torch.distributions.Normal(0,1)

    @property
    def sigma(self):
        return torch.log1p(torch.exp(self.rho))

    def sample(self):
        epsilon = self.normal.sample(self.rho.size()).to(DEVICE)
        return self.mu + self.sigma * epsilon

    def log_prob(self, input):
        return (-math.log(math.sqrt(2 * math.pi))
                - torch.log(self.sigma)
                - ((input - self.mu) ** 2) / (2 * self.sigma ** 2)).sum()


class ScaleMixtureGaussian(object):
    def __init__(self, pi, sigma1, sigma2):
        super().__init__()
        self.pi = pi
        self.sigma1 = sigma1
        self.sigma2 = sigma2
        self.gaussian1 = torch.distributions.Normal(0,sigma1)
        self.gaussian2 = torch.distributions.Normal(0,sigma2)

    def log_prob(self, input):
        prob1 = torch.exp(self.gaussian1.log_prob(input))
        prob2 = torch.exp(self.gaussian2.log_prob(input))
        return (torch.log(self.pi * prob1 + (1-self.pi) * prob2)).sum()


PI = 0.5
SIGMA_1 = torch.FloatTensor([math.exp(-0)])
SIGMA_2 = torch.FloatTensor([math.exp(-6)])


class BayesianLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        # Weight parameters
        self.weight_mu = nn.Parameter(torch.Tensor(out_features, in_features).uniform_(-0.2, 0.2))
        self.weight_rho = nn.Parameter(torch.Tensor(out_features, in_features).uniform_(-5,-4))
        self.weight = Gaussian(self.weight_mu, self.weight_rho)
        # Bias parameters
        self.bias_mu = nn.Parameter(torch.Tensor(out_features).uniform_(-0.2, 0.2))
        self.bias_rho = nn.Parameter(torch.Tensor(out_features).uniform_(-5,-4))
        self.bias = Gaussian(self.bias_mu, self.bias_rho)
        # Prior distributions
        self.weight_prior = ScaleMixtureGaussian(PI, SIGMA_1, SIGMA_2)
        self.bias_prior = ScaleMixtureGaussian(PI, SIGMA_1, SIGMA_2)
        self.log_prior = 0
        self.log_variational_posterior = 0

    def forward(self, input, sample=False, calculate_log_probs=False):
        if self.training or sample:
            weight = self.weight.sample()
            bias = self.bias.sample()
        else:
            weight = self.weight.mu
            bias = self.bias.mu
        if self.training or calculate_log_probs:
            self.log_prior = self.weight_prior.log_prob(weight) + self.bias_prior.log_prob(bias)
            self.log_variational_posterior = self.weight.log_prob(weight) + self.bias.log_prob(bias)
        else:
            self.log_prior, self.log_variational_posterior = 0, 0

        return F.linear(input, weight, bias)


class BayesianNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = BayesianLinear(6*6, 8)
        self.l2 = BayesianLinear(8, 8)
        self.l3 = BayesianLinear(8, 3)

    def forward(self, x, sample=False):
        x = x.view(-1, 6*6)
        x = F.relu(self.l1(x, sample))
        x = F.relu(self.l2(x, sample))
        x = F.log_softmax(self.l3(x, sample), dim=1)
        return x

    def log_prior(self):
        return self.l1.log_prior \\
               + self.l2.log_prior \\
               + self.l3.log_prior

    def log_variational_posterior(self):
        return self.l1.log_variational_posterior \\
               + self.l2.log_variational_posterior \\
               + self.l2.log_variational_posterior

    def sample_elbo(self, input, target, samples=SAMPLES):
        outputs = torch.zeros(samples, BATCH_SIZE, CLASSES).to(DEVICE)
        log_priors = torch.zeros(samples).to(DEVICE)
        log_variational_posteriors = torch.zeros(samples).to(DEVICE)
        for i in range(samples):
            outputs[i] = self(input, sample=True)
            log_priors[i] = self.log_prior()
            log_variational_posteriors[i] = self.log_variational_posterior()
        log_prior = log_priors.mean()
        log_variational_posterior = log_variational_posteriors.mean()
        negative_log_likelihood = F.nll_loss(outputs.mean(0), target, size_average=False)
        loss = (log_variational_posterior - log_prior)/NUM_BATCHES + negative_log_likelihood
        return loss, log_prior, log_variational_posterior, negative_log_likelihood


def train(net, optimizer, epoch, train_loader):
    net.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(DEVICE), target.to(DEVICE)
        net.zero_grad()
        loss, log_prior, log_variational_posterior, negative_log_likelihood = net.sample_elbo(data, target)
        loss.backward()
        optimizer.step()
        record.append([loss.item(), log_prior.item(), log_variational_posterior.item(), negative_log_likelihood.item()])


def test_ensemble(net, test_loader):
    net.eval()
    correct = 0
    corrects = np.zeros(TEST_SAMPLES+1, dtype=int)
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(DEVICE), target.to(DEVICE)
            outputs = torch.zeros(TEST_SAMPLES+1, TEST_BATCH_SIZE, CLASSES).to(DEVICE)
            for i in range(TEST_SAMPLES):
                outputs[i] = net(data, sample=True)
            outputs[TEST_SAMPLES] = net(data, sample=False)
            output = outputs.mean(0)
            preds = outputs.max(2, keepdim=True)[1]
            pred = output.max(1, keepdim=True)[1] # index of max log-probability
            corrects += preds.eq(target.view_as(pred)).sum(dim=1).squeeze().cpu().numpy()
            correct += pred.eq(target.view_as(pred)).sum().item()
    for index, num in enumerate(corrects):
        if index < TEST_SAMPLES:
            print('Component {} Accuracy: {}/{}'.format(index, num, len(test_loader.dataset)))
        else:
            print('Posterior Mean Accuracy: {}/{}'.format(num, len(test_loader.dataset)))
    print('Ensemble Accuracy: {}/{}'.format(correct, len(test_loader.dataset)))
    record.append(corrects.tolist())


def main(train_loader, test_loader):
    net = BayesianNetwork().to(DEVICE)
    initialize(net)
    optimizer = optim.Adam(net.parameters())
    for epoch in range(TRAIN_EPOCHS):
        train(net, optimizer, epoch, train_loader)
    test_ensemble(net, test_loader)
    record.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
"""

BAYES_BY_BACKPROP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class SharedNormalSample:
    """``Normal.sample(shape)`` of a library's standard normal drawing from one seeded
    stream (Bayes by Backprop's weight noise)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        normal = lib.distributions.Normal
        self.saved = normal.__dict__.get("sample")

        def sample(distribution, sample_shape=()):
            shape = tuple(sample_shape) + tuple(distribution.batch_shape)
            noise = lib.tensor(rng.standard_normal(shape), dtype=lib.float32)
            return distribution.loc + distribution.scale * noise

        normal.sample = sample
        return self

    def __exit__(self, *exc):
        normal = self.lib.distributions.Normal
        if self.saved is None:
            del normal.sample
        else:
            normal.sample = self.saved
        return False


def test_bayes_by_backprop_trains_as_torch(capsys):
    rng = np.random.default_rng(6607)
    images = rng.uniform(size=(3, 4, 1, 6, 6)).astype(np.float32)
    targets = rng.integers(0, 3, (3, 4))
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            BAYES_BY_BACKPROP_SOURCE
            if lib is torch
            else port(BAYES_BY_BACKPROP_SOURCE, BAYES_BY_BACKPROP_STEPS)
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        batches = [(lib.tensor(x), lib.tensor(y)) for x, y in zip(images, targets)]
        test_loader = type("Loader", (list,), {"dataset": range(4)})(batches[2:])
        with SharedNormalSample(lib, 6607):
            names["main"](batches[:2], test_loader)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "Ensemble Accuracy" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


RAM_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal


class Retina:
    \"\"\"A visual retina.

    Extracts a foveated glimpse `phi` around location `l`
    from an image `x`.
    \"\"\"

    def __init__(self, g, k, s):
        self.g = g
        self.k = k
        self.s = s

    def foveate(self, x, l):
        \"\"\"Extract `k` square patches of size `g`, centered
        at location `l`. The initial patch is a square of
        size `g`, and each subsequent patch is a square
        whose side is `s` times the size of the previous
        patch.

        The `k` patches are finally resized to (g, g) and
        concatenated into a tensor of shape (B, k, g, g, C).
        \"\"\"
        phi = []
        size = self.g

        # extract k patches of increasing size
        for i in range(self.k):
            phi.append(self.extract_patch(x, l, size))
            size = int(self.s * size)

        # resize the patches to squares of size g
        for i in range(1, len(phi)):
            k = phi[i].shape[-1] // self.g
            phi[i] = F.avg_pool2d(phi[i], k)

        # concatenate into a single tensor and flatten
        phi = torch.cat(phi, 1)
        phi = phi.view(phi.shape[0], -1)

        return phi

    def extract_patch(self, x, l, size):
        \"\"\"Extract a single patch for each image in `x`.

        Args:
        x: a 4D Tensor of shape (B, H, W, C). The minibatch
            of images.
        l: a 2D Tensor of shape (B, 2).
        size: a scalar defining the size of the extracted patch.

        Returns:
            patch: a 4D Tensor of shape (B, size, size, C)
        \"\"\"
        B, C, H, W = x.shape

        start = self.denormalize(H, l)
        end = start + size

        # pad with zeros
        x = F.pad(x, (size // 2, size // 2, size // 2, size // 2))

        # loop through mini-batch and extract patches
        patch = []
        for i in range(B):
            patch.append(x[i, :, start[i, 1] : end[i, 1], start[i, 0] : end[i, 0]])
        return torch.stack(patch)

    def denormalize(self, T, coords):
        \"\"\"Convert coordinates in the range [-1, 1] to
        coordinates in the range [0, T] where `T` is
        the size of the image.
        \"\"\"
        return (0.5 * ((coords + 1.0) * T)).long()

    def exceeds(self, from_x, to_x, from_y, to_y, T):
        \"\"\"Check whether the extracted patch will exceed
        the boundaries of the image of size `T`.
        \"\"\"
        if (from_x < 0) or (from_y < 0) or (to_x > T) or (to_y > T):
            return True
        return False


class GlimpseNetwork(nn.Module):
    def __init__(self, h_g, h_l, g, k, s, c):
        super().__init__()

        self.retina = Retina(g, k, s)

        # glimpse layer
        D_in = k * g * g * c
        self.fc1 = nn.Linear(D_in, h_g)

        # location layer
        D_in = 2
        self.fc2 = nn.Linear(D_in, h_l)

        self.fc3 = nn.Linear(h_g, h_g + h_l)
        self.fc4 = nn.Linear(h_l, h_g + h_l)

    def forward(self, x, l_t_prev):
        # generate glimpse phi from image x
        phi = self.retina.foveate(x, l_t_prev)

        # flatten location vector
        l_t_prev = l_t_prev.view(l_t_prev.size(0), -1)

        # feed phi and l to respective fc layers
        phi_out = F.relu(self.fc1(phi))
        l_out = F.relu(self.fc2(l_t_prev))

        what = self.fc3(phi_out)
        where = self.fc4(l_out)

        # feed to fc layer
        g_t = F.relu(what + where)

        return g_t


class CoreNetwork(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()

        self.input_size = input_size
        self.hidden_size = hidden_size

        self.i2h = nn.Linear(input_size, hidden_size)
        self.h2h = nn.Linear(hidden_size, hidden_size)

    def forward(self, g_t, h_t_prev):
        h1 = self.i2h(g_t)
        h2 = self.h2h(h_t_prev)
        h_t = F.relu(h1 + h2)
        return h_t


class ActionNetwork(nn.Module):
    def __init__(self, input_size, output_size):
        super().__init__()

        self.fc = nn.Linear(input_size, output_size)

    def forward(self, h_t):
        a_t = F.log_softmax(self.fc(h_t), dim=1)
        return a_t


class LocationNetwork(nn.Module):
    def __init__(self, input_size, output_size, std):
        super().__init__()

        self.std = std

        hid_size = input_size // 2
        self.fc = nn.Linear(input_size, hid_size)
        self.fc_lt = nn.Linear(hid_size, output_size)

    def forward(self, h_t):
        # compute mean
        feat = F.relu(self.fc(h_t.detach()))
        mu = torch.tanh(self.fc_lt(feat))

        # reparametrization trick
        l_t = torch.distributions.Normal(mu, self.std).rsample()
        l_t = l_t.detach()
        log_pi = Normal(mu, self.std).log_prob(l_t)

        # we assume both dimensions are independent
        # 1. pdf of the joint is the product of the pdfs
        # 2. log of the product is the sum of the logs
        log_pi = torch.sum(log_pi, dim=1)

        # bound between [-1, 1]
        l_t = torch.clamp(l_t, -1, 1)

        return log_pi, l_t


class BaselineNetwork(nn.Module):
    def __init__(self, input_size, output_size):
        super().__init__()

        self.fc = nn.Linear(input_size, output_size)

    def forward(self, h_t):
        b_t = self.fc(h_t.detach())
        return b_t


class RecurrentAttention(nn.Module):
    def __init__(
        self, g, k, s, c, h_g, h_l, std, hidden_size, num_classes,
    ):
        super().__init__()

        self.std = std

        self.sensor = GlimpseNetwork(h_g, h_l, g, k, s, c)
        self.rnn = CoreNetwork(hidden_size, hidden_size)
        self.locator = LocationNetwork(hidden_size, 2, std)
        self.classifier = ActionNetwork(hidden_size, num_classes)
        self.baseliner = BaselineNetwork(hidden_size, 1)

    def forward(self, x, l_t_prev, h_t_prev, last=False):
        g_t = self.sensor(x, l_t_prev)
        h_t = self.rnn(g_t, h_t_prev)

        log_pi, l_t = self.locator(h_t)
        b_t = self.baseliner(h_t).squeeze()

        if last:
            log_probas = self.classifier(h_t)
            return h_t, l_t, b_t, log_probas, log_pi

        return h_t, l_t, b_t, log_pi


class Trainer:
    def __init__(self, config, train_loader):
        self.config = config
        self.device = torch.device("cpu")
        self.patch_size = config.patch_size
        self.glimpse_scale = config.glimpse_scale
        self.num_patches = config.num_patches
        self.loc_hidden = config.loc_hidden
        self.glimpse_hidden = config.glimpse_hidden
        self.num_glimpses = config.num_glimpses
        self.hidden_size = config.hidden_size
        self.std = config.std
        self.M = config.M
        self.train_loader = train_loader
        self.num_classes = 3
        self.num_channels = 1
        self.model = RecurrentAttention(
            self.patch_size,
            self.num_patches,
            self.glimpse_scale,
            self.num_channels,
            self.loc_hidden,
            self.glimpse_hidden,
            self.std,
            self.hidden_size,
            self.num_classes,
        )
        initialize(self.model)
        self.model.to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=self.config.init_lr
        )

    def reset(self):
        h_t = torch.zeros(
            self.batch_size,
            self.hidden_size,
            dtype=torch.float,
            device=self.device,
            requires_grad=True,
        )
        l_t = torch.FloatTensor(self.batch_size, 2).uniform_(-1, 1).to(self.device)
        l_t.requires_grad = True

        return h_t, l_t

    def train_one_epoch(self, epoch):
        self.model.train()
        for i, (x, y) in enumerate(self.train_loader):
            self.optimizer.zero_grad()

            x, y = x.to(self.device), y.to(self.device)

            # initialize location vector and hidden state
            self.batch_size = x.shape[0]
            h_t, l_t = self.reset()

            # save images
            imgs = []
            imgs.append(x[0:9])

            # extract the glimpses
            locs = []
            log_pi = []
            baselines = []
            for t in range(self.num_glimpses - 1):
                # forward pass through model
                h_t, l_t, b_t, p = self.model(x, l_t, h_t)

                # store
                locs.append(l_t[0:9])
                baselines.append(b_t)
                log_pi.append(p)

            # last iteration
            h_t, l_t, b_t, log_probas, p = self.model(x, l_t, h_t, last=True)
            log_pi.append(p)
            baselines.append(b_t)
            locs.append(l_t[0:9])

            # convert list to tensors and reshape
            baselines = torch.stack(baselines).transpose(1, 0)
            log_pi = torch.stack(log_pi).transpose(1, 0)

            # calculate reward
            predicted = torch.max(log_probas, 1)[1]
            R = (predicted.detach() == y).float()
            R = R.unsqueeze(1).repeat(1, self.num_glimpses)

            # compute losses for differentiable modules
            loss_action = F.nll_loss(log_probas, y)
            loss_baseline = F.mse_loss(baselines, R)

            # compute reinforce loss
            # summed over timesteps and averaged across batch
            adjusted_reward = R - baselines.detach()
            loss_reinforce = torch.sum(-log_pi * adjusted_reward, dim=1)
            loss_reinforce = torch.mean(loss_reinforce, dim=0)

            # sum up into a hybrid loss
            loss = loss_action + loss_baseline + loss_reinforce * 0.01

            # compute accuracy
            correct = (predicted == y).float()
            acc = 100 * (correct.sum() / len(y))

            # compute gradients and update SGD
            loss.backward()
            self.optimizer.step()

            print("Epoch {} batch {}: loss {:.3f} - acc {:.3f}".format(epoch, i, loss.item(), acc.item()))
            record.append([loss.item(), loss_reinforce.item()])
            record.append(torch.stack(locs).numpy().copy())
"""

RAM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.distributions import Normal\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.distributions import Normal\n",
    ),
    (
        "            loss.backward()\n            self.optimizer.step()\n",
        "            grads = loss.backward()\n            self.optimizer.step(grads)\n",
    ),
]


class SharedNormalRsample:
    """``Normal.rsample()`` of a library drawing its noise from one seeded stream."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        normal = lib.distributions.Normal
        self.saved = normal.__dict__.get("rsample")

        def rsample(distribution, sample_shape=()):
            shape = tuple(sample_shape) + tuple(distribution.batch_shape)
            noise = lib.tensor(rng.standard_normal(shape), dtype=lib.float32)
            return distribution.loc + distribution.scale * noise

        normal.rsample = rsample
        return self

    def __exit__(self, *exc):
        normal = self.lib.distributions.Normal
        if self.saved is None:
            del normal.rsample
        else:
            normal.rsample = self.saved
        return False


class _RAMConfig:
    patch_size = 2
    glimpse_scale = 2
    num_patches = 2
    loc_hidden = 6
    glimpse_hidden = 6
    num_glimpses = 3
    hidden_size = 12  # glimpse_hidden + loc_hidden, as the defaults (128 + 128 = 256)
    std = 0.05
    M = 1
    init_lr = 3e-3


def test_recurrent_attention_model_trains_as_torch(capsys):
    from test_real_ports_65 import SharedUniformFill

    rng = np.random.default_rng(6608)
    images = rng.uniform(size=(2, 4, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 3, (2, 4))
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = RAM_SOURCE if lib is torch else port(RAM_SOURCE, RAM_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        loader = [(lib.tensor(x), lib.tensor(y)) for x, y in zip(images, labels)]
        trainer = names["Trainer"](_RAMConfig, loader)
        with SharedUniformFill(lib, 6608), SharedNormalRsample(lib, 6608):
            for epoch in range(2):
                trainer.train_one_epoch(epoch)
        record.append({k: v.detach().numpy().copy() for k, v in trainer.model.state_dict().items()})
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)
