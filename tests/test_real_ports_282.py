# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a recommender over a sparse normalized adjacency.

- LightGCN as gusye1234/LightGCN-PyTorch writes it (``code/model.py``'s ``BasicModel``,
  ``PairWiseModel`` and ``LightGCN``, ``code/dataloader.py``'s ``getSparseGraph``,
  ``_convert_sp_mat_to_sp_tensor`` and ``_split_A_hat``, ``code/utils.py``'s ``BPRLoss``),
  on a small random user-item graph (its files and the ``world`` module left out: the
  interactions are drawn, ``world.config`` a dict, ``world.cprint`` ``print``): the
  normalized adjacency built by ``scipy.sparse`` (``dok_matrix``, ``tolil``, block
  assignment, ``sp.diags``) and made a sparse tensor by ``torch.sparse.FloatTensor(index,
  data, torch.Size(coo.shape))`` of ``torch.stack([row, col])`` with ``row =
  torch.Tensor(coo.row).long()``, then ``.coalesce().to(world.device)``; the graph dropout
  ``__dropout_x`` reading ``x.indices().t()`` and ``x.values()``, masking them by
  ``(torch.rand(len(values)) + keep_prob).int().bool()`` and rebuilding the graph by
  ``torch.sparse.FloatTensor(index.t(), values, size)``; propagation by
  ``torch.sparse.mm(g_droped, all_emb)`` (with ``A_split``, one product per fold of rows,
  ``torch.cat`` of them), ``torch.stack(embs, dim=1)``, ``torch.mean``, ``torch.split``;
  the BPR loss with ``norm(2).pow(2)`` regularization and ``softplus``, Adam; and
  ``getUsersRating``.

The lines changed: the gradient lines (``grads = loss.backward()``, ``self.opt.step(grads)``).
The weights are torch's (``initialize``), the dropout draws one shared stream.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

LIGHTGCN_SOURCE = '''
import torch
from torch import nn, optim
from time import time


class BasicDataset:
    pass


class Loader(BasicDataset):
    """the parts of dataloader.Loader that build the graph (its files replaced by a drawn
    UserItemNet)"""
    def __init__(self, config, n_users, m_items, UserItemNet):
        self.split = config['A_split']
        self.folds = config['A_n_fold']
        self.n_user = n_users
        self.m_item = m_items
        self.UserItemNet = UserItemNet
        self.Graph = None

    @property
    def n_users(self):
        return self.n_user

    @property
    def m_items(self):
        return self.m_item

    def _split_A_hat(self,A):
        A_fold = []
        fold_len = (self.n_users + self.m_items) // self.folds
        for i_fold in range(self.folds):
            start = i_fold*fold_len
            if i_fold == self.folds - 1:
                end = self.n_users + self.m_items
            else:
                end = (i_fold + 1) * fold_len
            A_fold.append(self._convert_sp_mat_to_sp_tensor(A[start:end]).coalesce().to(world.device))
        return A_fold

    def _convert_sp_mat_to_sp_tensor(self, X):
        coo = X.tocoo().astype(np.float32)
        row = torch.Tensor(coo.row).long()
        col = torch.Tensor(coo.col).long()
        index = torch.stack([row, col])
        data = torch.FloatTensor(coo.data)
        return torch.sparse.FloatTensor(index, data, torch.Size(coo.shape))

    def getSparseGraph(self):
        print("loading adjacency matrix")
        if self.Graph is None:
            print("generating adjacency matrix")
            s = time()
            adj_mat = sp.dok_matrix((self.n_users + self.m_items, self.n_users + self.m_items), dtype=np.float32)
            adj_mat = adj_mat.tolil()
            R = self.UserItemNet.tolil()
            adj_mat[:self.n_users, self.n_users:] = R
            adj_mat[self.n_users:, :self.n_users] = R.T
            adj_mat = adj_mat.todok()
            # adj_mat = adj_mat + sp.eye(adj_mat.shape[0])

            rowsum = np.array(adj_mat.sum(axis=1))
            d_inv = np.power(rowsum, -0.5).flatten()
            d_inv[np.isinf(d_inv)] = 0.
            d_mat = sp.diags(d_inv)

            norm_adj = d_mat.dot(adj_mat)
            norm_adj = norm_adj.dot(d_mat)
            norm_adj = norm_adj.tocsr()
            end = time()

            if self.split == True:
                self.Graph = self._split_A_hat(norm_adj)
                print("done split matrix")
            else:
                self.Graph = self._convert_sp_mat_to_sp_tensor(norm_adj)
                self.Graph = self.Graph.coalesce().to(world.device)
                print("don't split the matrix")
        return self.Graph


class BasicModel(nn.Module):
    def __init__(self):
        super(BasicModel, self).__init__()

    def getUsersRating(self, users):
        raise NotImplementedError

class PairWiseModel(BasicModel):
    def __init__(self):
        super(PairWiseModel, self).__init__()
    def bpr_loss(self, users, pos, neg):
        """
        Parameters:
            users: users list
            pos: positive items for corresponding users
            neg: negative items for corresponding users
        Return:
            (log-loss, l2-loss)
        """
        raise NotImplementedError


class LightGCN(BasicModel):
    def __init__(self,
                 config:dict,
                 dataset:BasicDataset):
        super(LightGCN, self).__init__()
        self.config = config
        self.dataset : dataloader.BasicDataset = dataset
        self.__init_weight()

    def __init_weight(self):
        self.num_users  = self.dataset.n_users
        self.num_items  = self.dataset.m_items
        self.latent_dim = self.config['latent_dim_rec']
        self.n_layers = self.config['lightGCN_n_layers']
        self.keep_prob = self.config['keep_prob']
        self.A_split = self.config['A_split']
        self.embedding_user = torch.nn.Embedding(
            num_embeddings=self.num_users, embedding_dim=self.latent_dim)
        self.embedding_item = torch.nn.Embedding(
            num_embeddings=self.num_items, embedding_dim=self.latent_dim)
        if self.config['pretrain'] == 0:
#             nn.init.xavier_uniform_(self.embedding_user.weight, gain=1)
#             nn.init.xavier_uniform_(self.embedding_item.weight, gain=1)
#             print('use xavier initilizer')
# random normal init seems to be a better choice when lightGCN actually don't use any non-linear activation function
            nn.init.normal_(self.embedding_user.weight, std=0.1)
            nn.init.normal_(self.embedding_item.weight, std=0.1)
            world.cprint('use NORMAL distribution initilizer')
        else:
            self.embedding_user.weight.data.copy_(torch.from_numpy(self.config['user_emb']))
            self.embedding_item.weight.data.copy_(torch.from_numpy(self.config['item_emb']))
            print('use pretarined data')
        self.f = nn.Sigmoid()
        self.Graph = self.dataset.getSparseGraph()
        print(f"lgn is already to go(dropout:{self.config['dropout']})")

        # print("save_txt")
    def __dropout_x(self, x, keep_prob):
        size = x.size()
        index = x.indices().t()
        values = x.values()
        random_index = torch.rand(len(values)) + keep_prob
        random_index = random_index.int().bool()
        index = index[random_index]
        values = values[random_index]/keep_prob
        g = torch.sparse.FloatTensor(index.t(), values, size)
        return g

    def __dropout(self, keep_prob):
        if self.A_split:
            graph = []
            for g in self.Graph:
                graph.append(self.__dropout_x(g, keep_prob))
        else:
            graph = self.__dropout_x(self.Graph, keep_prob)
        return graph

    def computer(self):
        """
        propagate methods for lightGCN
        """
        users_emb = self.embedding_user.weight
        items_emb = self.embedding_item.weight
        all_emb = torch.cat([users_emb, items_emb])
        #   torch.split(all_emb , [self.num_users, self.num_items])
        embs = [all_emb]
        if self.config['dropout']:
            if self.training:
                print("droping")
                g_droped = self.__dropout(self.keep_prob)
            else:
                g_droped = self.Graph
        else:
            g_droped = self.Graph

        for layer in range(self.n_layers):
            if self.A_split:
                temp_emb = []
                for f in range(len(g_droped)):
                    temp_emb.append(torch.sparse.mm(g_droped[f], all_emb))
                side_emb = torch.cat(temp_emb, dim=0)
                all_emb = side_emb
            else:
                all_emb = torch.sparse.mm(g_droped, all_emb)
            embs.append(all_emb)
        embs = torch.stack(embs, dim=1)
        #print(embs.size())
        light_out = torch.mean(embs, dim=1)
        users, items = torch.split(light_out, [self.num_users, self.num_items])
        return users, items

    def getUsersRating(self, users):
        all_users, all_items = self.computer()
        users_emb = all_users[users.long()]
        items_emb = all_items
        rating = self.f(torch.matmul(users_emb, items_emb.t()))
        return rating

    def getEmbedding(self, users, pos_items, neg_items):
        all_users, all_items = self.computer()
        users_emb = all_users[users]
        pos_emb = all_items[pos_items]
        neg_emb = all_items[neg_items]
        users_emb_ego = self.embedding_user(users)
        pos_emb_ego = self.embedding_item(pos_items)
        neg_emb_ego = self.embedding_item(neg_items)
        return users_emb, pos_emb, neg_emb, users_emb_ego, pos_emb_ego, neg_emb_ego

    def bpr_loss(self, users, pos, neg):
        (users_emb, pos_emb, neg_emb,
        userEmb0,  posEmb0, negEmb0) = self.getEmbedding(users.long(), pos.long(), neg.long())
        reg_loss = (1/2)*(userEmb0.norm(2).pow(2) +
                         posEmb0.norm(2).pow(2)  +
                         negEmb0.norm(2).pow(2))/float(len(users))
        pos_scores = torch.mul(users_emb, pos_emb)
        pos_scores = torch.sum(pos_scores, dim=1)
        neg_scores = torch.mul(users_emb, neg_emb)
        neg_scores = torch.sum(neg_scores, dim=1)

        loss = torch.mean(torch.nn.functional.softplus(neg_scores - pos_scores))

        return loss, reg_loss


class BPRLoss:
    def __init__(self,
                 recmodel : PairWiseModel,
                 config : dict):
        self.model = recmodel
        self.weight_decay = config['decay']
        self.lr = config['lr']
        self.opt = optim.Adam(recmodel.parameters(), lr=self.lr)

    def stageOne(self, users, pos, neg):
        loss, reg_loss = self.model.bpr_loss(users, pos, neg)
        reg_loss = reg_loss*self.weight_decay
        loss = loss + reg_loss

        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

        return loss.cpu().item()


# Procedure.BPR_train_original's loop, over batches drawn beforehand
dataset = Loader(world.config, n_users, m_items, UserItemNet)
Recmodel = LightGCN(world.config, dataset)
initialize(Recmodel)
bpr = BPRLoss(Recmodel, world.config)
record.append(Recmodel.Graph[0].to_dense().numpy() if world.config['A_split'] else Recmodel.Graph.to_dense().numpy())
for users, pos, neg in batches:
    Recmodel.train()
    record.append(bpr.stageOne(torch.tensor(users), torch.tensor(pos), torch.tensor(neg)))
    record.append(params_of(Recmodel))
Recmodel.eval()
record.append(Recmodel.getUsersRating(torch.tensor([0, 2, 3])).detach().numpy())
'''

LIGHTGCN_STEPS = [
    (
        "        loss.backward()\n        self.opt.step()\n",
        "        grads = loss.backward()\n        self.opt.step(grads)\n",
    ),
    (
        "import torch\nfrom torch import nn, optim\n",
        "import retrograd as torch\nfrom retrograd import nn, optim\n",
    ),
]


class World:
    """``world``: the configuration and the two helpers the model calls."""

    def __init__(self, **config):
        self.config = config
        self.device = "cpu"

    @staticmethod
    def cprint(words):
        print(words)


@pytest.mark.parametrize("split", [False, True], ids=["whole", "A_split"])
@pytest.mark.parametrize("dropout", [0, 1], ids=["no_dropout", "graph_dropout"])
def test_lightgcn_trains_as_torch(capsys, split, dropout):
    rng = np.random.default_rng(282)
    n_users, m_items = 7, 9
    interactions = (rng.random((n_users, m_items)) < 0.35).astype(np.float32)
    interactions[0, 0] = interactions[6, 8] = 1.0
    user_item = sp.csr_matrix(interactions)
    batches = []
    for _ in range(4):
        users = rng.integers(0, n_users, 6)
        batches.append((users, rng.integers(0, m_items, 6), rng.integers(0, m_items, 6)))
    world = World(
        A_split=split, A_n_fold=3, latent_dim_rec=5, lightGCN_n_layers=3, keep_prob=0.6,
        pretrain=0, dropout=dropout, decay=1e-3, lr=0.05,
    )  # fmt: skip
    (theirs, ours), logs = runs_with_draws(
        LIGHTGCN_SOURCE, LIGHTGCN_STEPS, capsys, 2820,
        world=world, sp=sp, n_users=n_users, m_items=m_items, UserItemNet=user_item,
        batches=batches, initialize=initializer(), params_of=params_of, dataloader=None,
    )  # fmt: skip
    assert ("droping" in logs[0]) == bool(dropout)
    assert ("done split matrix" in logs[0]) == split
    assert logs[1] == logs[0]
    first_rows = (n_users + m_items) // 3 if split else n_users + m_items
    assert theirs[0].shape == (first_rows, n_users + m_items)
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
