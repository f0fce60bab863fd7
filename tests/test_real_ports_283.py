# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a graph recommender with sparse node dropout.

- NGCF as huangtinglin/NGCF-PyTorch writes it (``NGCF/NGCF.py`` and the loop of
  ``NGCF/main.py``), on a small random user-item graph (``utility/load_data.py``'s
  ``Data`` replaced by drawn interactions and batches, its normalized adjacency built by
  ``scipy.sparse`` as ``get_adj_mat`` builds ``norm_adj``): ``nn.ParameterDict`` of
  ``nn.Parameter(initializer(torch.empty(...)))`` with ``nn.init.xavier_uniform_`` and
  ``weight_dict.update``, ``eval(args.layer_size)``, the sparse adjacency by
  ``torch.sparse.FloatTensor(torch.LongTensor([coo.row, coo.col]), torch.from_numpy(coo.data)
  .float(), coo.shape).to(self.device)``, ``sparse_dropout`` (``random_tensor = 1 - rate;
  random_tensor += torch.rand(noise_shape)``, ``torch.floor(...).type(torch.bool)``,
  ``x._indices()[:, dropout_mask]``, ``x._values()[dropout_mask]``, a new
  ``torch.sparse.FloatTensor(i, v, x.shape)`` times ``1. / (1 - rate)``, the mask's length
  ``x._nnz()``), ``torch.sparse.mm(A_hat, ego_embeddings)``, the bi-interaction messages,
  ``nn.LeakyReLU(negative_slope=0.2)(...)`` and ``nn.Dropout(...)(...)`` made in
  ``forward``, ``F.normalize``, the BPR loss with ``nn.LogSigmoid()`` and ``torch.norm`` and
  its ``axis=`` keyword, Adam, the loss sums ``loss += batch_loss``; and ``rating`` of the
  ``drop_flag=False`` embeddings.

The lines changed: the gradient lines. The weights are torch's (``initialize``), the node
dropout draws one shared stream; message dropout is 0 (each library's own mask otherwise).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import scipy.sparse as sp

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

NGCF_SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class NGCF(nn.Module):
    def __init__(self, n_user, n_item, norm_adj, args):
        super(NGCF, self).__init__()
        self.n_user = n_user
        self.n_item = n_item
        self.device = args.device
        self.emb_size = args.embed_size
        self.batch_size = args.batch_size
        self.node_dropout = args.node_dropout[0]
        self.mess_dropout = args.mess_dropout
        self.batch_size = args.batch_size

        self.norm_adj = norm_adj

        self.layers = eval(args.layer_size)
        self.decay = eval(args.regs)[0]

        """
        *********************************************************
        Init the weight of user-item.
        """
        self.embedding_dict, self.weight_dict = self.init_weight()

        """
        *********************************************************
        Get sparse adj.
        """
        self.sparse_norm_adj = self._convert_sp_mat_to_sp_tensor(self.norm_adj).to(self.device)

    def init_weight(self):
        # xavier init
        initializer = nn.init.xavier_uniform_

        embedding_dict = nn.ParameterDict({
            'user_emb': nn.Parameter(initializer(torch.empty(self.n_user,
                                                 self.emb_size))),
            'item_emb': nn.Parameter(initializer(torch.empty(self.n_item,
                                                 self.emb_size)))
        })

        weight_dict = nn.ParameterDict()
        layers = [self.emb_size] + self.layers
        for k in range(len(self.layers)):
            weight_dict.update({'W_gc_%d'%k: nn.Parameter(initializer(torch.empty(layers[k],
                                                                      layers[k+1])))})
            weight_dict.update({'b_gc_%d'%k: nn.Parameter(initializer(torch.empty(1, layers[k+1])))})

            weight_dict.update({'W_bi_%d'%k: nn.Parameter(initializer(torch.empty(layers[k],
                                                                      layers[k+1])))})
            weight_dict.update({'b_bi_%d'%k: nn.Parameter(initializer(torch.empty(1, layers[k+1])))})

        return embedding_dict, weight_dict

    def _convert_sp_mat_to_sp_tensor(self, X):
        coo = X.tocoo()
        i = torch.LongTensor([coo.row, coo.col])
        v = torch.from_numpy(coo.data).float()
        return torch.sparse.FloatTensor(i, v, coo.shape)

    def sparse_dropout(self, x, rate, noise_shape):
        random_tensor = 1 - rate
        random_tensor += torch.rand(noise_shape).to(x.device)
        dropout_mask = torch.floor(random_tensor).type(torch.bool)
        i = x._indices()
        v = x._values()

        i = i[:, dropout_mask]
        v = v[dropout_mask]

        out = torch.sparse.FloatTensor(i, v, x.shape).to(x.device)
        return out * (1. / (1 - rate))

    def create_bpr_loss(self, users, pos_items, neg_items):
        pos_scores = torch.sum(torch.mul(users, pos_items), axis=1)
        neg_scores = torch.sum(torch.mul(users, neg_items), axis=1)

        maxi = nn.LogSigmoid()(pos_scores - neg_scores)

        mf_loss = -1 * torch.mean(maxi)

        # cul regularizer
        regularizer = (torch.norm(users) ** 2
                       + torch.norm(pos_items) ** 2
                       + torch.norm(neg_items) ** 2) / 2
        emb_loss = self.decay * regularizer / self.batch_size

        return mf_loss + emb_loss, mf_loss, emb_loss

    def rating(self, u_g_embeddings, pos_i_g_embeddings):
        return torch.matmul(u_g_embeddings, pos_i_g_embeddings.t())

    def forward(self, users, pos_items, neg_items, drop_flag=True):

        A_hat = self.sparse_dropout(self.sparse_norm_adj,
                                    self.node_dropout,
                                    self.sparse_norm_adj._nnz()) if drop_flag else self.sparse_norm_adj

        ego_embeddings = torch.cat([self.embedding_dict['user_emb'],
                                    self.embedding_dict['item_emb']], 0)

        all_embeddings = [ego_embeddings]

        for k in range(len(self.layers)):
            side_embeddings = torch.sparse.mm(A_hat, ego_embeddings)

            # transformed sum messages of neighbors.
            sum_embeddings = torch.matmul(side_embeddings, self.weight_dict['W_gc_%d' % k]) \\
                                             + self.weight_dict['b_gc_%d' % k]

            # bi messages of neighbors.
            # element-wise product
            bi_embeddings = torch.mul(ego_embeddings, side_embeddings)
            # transformed bi messages of neighbors.
            bi_embeddings = torch.matmul(bi_embeddings, self.weight_dict['W_bi_%d' % k]) \\
                                            + self.weight_dict['b_bi_%d' % k]

            # non-linear activation.
            ego_embeddings = nn.LeakyReLU(negative_slope=0.2)(sum_embeddings + bi_embeddings)

            # message dropout.
            ego_embeddings = nn.Dropout(self.mess_dropout[k])(ego_embeddings)

            # normalize the distribution of embeddings.
            norm_embeddings = F.normalize(ego_embeddings, p=2, dim=1)

            all_embeddings += [norm_embeddings]

        all_embeddings = torch.cat(all_embeddings, 1)
        u_g_embeddings = all_embeddings[:self.n_user, :]
        i_g_embeddings = all_embeddings[self.n_user:, :]

        """
        *********************************************************
        look up.
        """
        u_g_embeddings = u_g_embeddings[users, :]
        pos_i_g_embeddings = i_g_embeddings[pos_items, :]
        neg_i_g_embeddings = i_g_embeddings[neg_items, :]

        return u_g_embeddings, pos_i_g_embeddings, neg_i_g_embeddings


# main.py's loop (its evaluation left out), over batches drawn beforehand
model = NGCF(data_generator.n_users,
             data_generator.n_items,
             norm_adj,
             args).to(args.device)
initialize(model)

optimizer = optim.Adam(model.parameters(), lr=args.lr)

for epoch in range(args.epoch):
    loss, mf_loss, emb_loss = 0., 0., 0.
    n_batch = data_generator.n_train // args.batch_size + 1

    for idx in range(n_batch):
        users, pos_items, neg_items = data_generator.sample()
        u_g_embeddings, pos_i_g_embeddings, neg_i_g_embeddings = model(users,
                                                                       pos_items,
                                                                       neg_items,
                                                                       drop_flag=args.node_dropout_flag)

        batch_loss, batch_mf_loss, batch_emb_loss = model.create_bpr_loss(u_g_embeddings,
                                                                          pos_i_g_embeddings,
                                                                          neg_i_g_embeddings)
        optimizer.zero_grad()
        batch_loss.backward()
        optimizer.step()

        loss += batch_loss
        mf_loss += batch_mf_loss
        emb_loss += batch_emb_loss
        record.append(params_of(model))

    perf_str = 'Epoch %d: train==[%.5f=%.5f + %.5f]' % (
        epoch, loss, mf_loss, emb_loss)
    print(perf_str)
    record.append([float(loss), float(mf_loss), float(emb_loss)])

u_g, i_g, _ = model([0, 1, 2], list(range(data_generator.n_items)), [], drop_flag=False)
record.append(model.rating(u_g, i_g).detach().numpy())
'''

NGCF_STEPS = [
    (
        "        batch_loss.backward()\n        optimizer.step()\n",
        "        grads = batch_loss.backward()\n        optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
]


class Data:
    """``data_generator``: the user-item graph's sizes and ``sample()``, from drawn batches."""

    def __init__(self, n_users, n_items, n_train, batches):
        self.n_users, self.n_items, self.n_train = n_users, n_items, n_train
        self.batches, self.drawn = batches, 0

    def sample(self):
        batch = self.batches[self.drawn % len(self.batches)]
        self.drawn += 1
        return batch


def _norm_adj(interactions):
    """``get_adj_mat``'s ``norm_adj``: the symmetric adjacency plus the identity, each row
    divided by its sum (``normalized_adj_single``)."""
    n_users, n_items = interactions.shape
    adj = sp.dok_matrix((n_users + n_items, n_users + n_items), dtype=np.float32).tolil()
    adj[:n_users, n_users:] = interactions
    adj[n_users:, :n_users] = interactions.T
    adj = adj.todok() + sp.eye(n_users + n_items)
    rowsum = np.array(adj.sum(1))
    d_inv = np.power(rowsum, -1).flatten()
    d_inv[np.isinf(d_inv)] = 0.0
    return sp.diags(d_inv).dot(adj).tocsr()


@pytest.mark.parametrize("node_dropout_flag", [0, 1], ids=["no_dropout", "node_dropout"])
def test_ngcf_trains_as_torch(capsys, node_dropout_flag):
    rng = np.random.default_rng(283)
    n_users, n_items, batch_size = 6, 8, 4
    interactions = (rng.random((n_users, n_items)) < 0.4).astype(np.float32)
    batches = [
        tuple(rng.integers(0, size, batch_size).tolist() for size in (n_users, n_items, n_items))
        for _ in range(3)
    ]
    args = types.SimpleNamespace(
        device="cpu", embed_size=6, batch_size=batch_size, node_dropout=[0.3],
        mess_dropout=[0.0, 0.0], layer_size="[5, 4]", regs="[1e-3]", lr=0.02, epoch=2,
        node_dropout_flag=node_dropout_flag,
    )  # fmt: skip
    (theirs, ours), logs = runs_with_draws(
        NGCF_SOURCE, NGCF_STEPS, capsys, 2830,
        make_data_generator=lambda lib: Data(n_users, n_items, 9, batches),
        norm_adj=_norm_adj(interactions), args=args,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0].count("Epoch ") == 2 and logs[1] == logs[0]
    assert len(theirs) == 2 * 3 + 2 + 1  # 3 batches (9 // 4 + 1) an epoch, the sums, the rating
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
