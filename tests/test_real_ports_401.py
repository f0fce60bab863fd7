# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
zfjsail/gae-pytorch, the variational graph auto-encoder for link prediction, as it stands at
commit 00f1154: ``gae/utils.py``'s ``load_data`` (the Planetoid pickles read by
``pkl._Unpickler``, ``torch.FloatTensor(np.array(features.todense()))``, networkx's
adjacency), ``mask_test_edges`` (held-out positive edges and sampled negative ones by
``np.random``), ``preprocess_graph`` and ``sparse_mx_to_torch_sparse_tensor`` (``torch.sparse
.FloatTensor`` of ``torch.from_numpy`` indices and values and a ``torch.Size``), and
``get_roc_score`` on ``mu.data.numpy()``; ``gae/layers.py``'s ``GraphConvolution`` (a
``Parameter(torch.FloatTensor(in, out))`` filled by ``xavier_uniform_``, ``torch.spmm(adj,
support)``, its own ``__repr__``); ``gae/model.py``'s ``GCNModelVAE`` (``torch.randn_like(std)``
and ``eps.mul(std).add_(mu)``) and ``InnerProductDecoder`` (``torch.mm(z, z.t())``);
``gae/optimizer.py``'s ``weighted_binary_cross_entropy`` (``torch.sigmoid(1 - output).log()``,
``torch.neg(torch.mean(loss))``) and the KL term; and ``gae/train.py``'s module-level
``argparse`` and loop.

What stands in: the Cora pickles are a small synthetic graph in their format (two
communities of 14 nodes, sparse binary features, written to the test's working directory);
the arguments are small. Two lines are added to ``gae_for``: ``initialize(model)`` gives the
port torch's initial weights and ``record.append(params_of(model))`` keeps the trained ones.
The package's ``from gae.... import`` lines are dropped (the files are one text, train.py's
``from __future__`` lines at its top); the port
changes the gradient lines and the import lines naming ``torch``; ``randn_like`` draws from one
stream shared by both runs.
"""

from __future__ import annotations

import pickle
import re
import sys

import numpy as np
import scipy.sparse as sp

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

GAE_SOURCE = """from __future__ import division
from __future__ import print_function

# -- gae/utils.py --
import pickle as pkl

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch
from sklearn.metrics import roc_auc_score, average_precision_score


def load_data(dataset):
    # load the data: x, tx, allx, graph
    names = ['x', 'tx', 'allx', 'graph']
    objects = []
    for i in range(len(names)):
        '''
        fix Pickle incompatibility of numpy arrays between Python 2 and 3
        https://stackoverflow.com/questions/11305790/pickle-incompatibility-of-numpy-arrays-between-python-2-and-3
        '''
        with open("data/ind.{}.{}".format(dataset, names[i]), 'rb') as rf:
            u = pkl._Unpickler(rf)
            u.encoding = 'latin1'
            cur_data = u.load()
            objects.append(cur_data)
        # objects.append(
        #     pkl.load(open("data/ind.{}.{}".format(dataset, names[i]), 'rb')))
    x, tx, allx, graph = tuple(objects)
    test_idx_reorder = parse_index_file(
        "data/ind.{}.test.index".format(dataset))
    test_idx_range = np.sort(test_idx_reorder)

    if dataset == 'citeseer':
        # Fix citeseer dataset (there are some isolated nodes in the graph)
        # Find isolated nodes, add them as zero-vecs into the right position
        test_idx_range_full = range(
            min(test_idx_reorder), max(test_idx_reorder) + 1)
        tx_extended = sp.lil_matrix((len(test_idx_range_full), x.shape[1]))
        tx_extended[test_idx_range - min(test_idx_range), :] = tx
        tx = tx_extended

    features = sp.vstack((allx, tx)).tolil()
    features[test_idx_reorder, :] = features[test_idx_range, :]
    features = torch.FloatTensor(np.array(features.todense()))
    adj = nx.adjacency_matrix(nx.from_dict_of_lists(graph))

    return adj, features


def parse_index_file(filename):
    index = []
    for line in open(filename):
        index.append(int(line.strip()))
    return index


def sparse_to_tuple(sparse_mx):
    if not sp.isspmatrix_coo(sparse_mx):
        sparse_mx = sparse_mx.tocoo()
    coords = np.vstack((sparse_mx.row, sparse_mx.col)).transpose()
    values = sparse_mx.data
    shape = sparse_mx.shape
    return coords, values, shape


def mask_test_edges(adj):
    # Function to build test set with 10% positive links
    # NOTE: Splits are randomized and results might slightly deviate from reported numbers in the paper.
    # TODO: Clean up.

    # Remove diagonal elements
    adj = adj - sp.dia_matrix((adj.diagonal()[np.newaxis, :], [0]), shape=adj.shape)
    adj.eliminate_zeros()
    # Check that diag is zero:
    assert np.diag(adj.todense()).sum() == 0

    adj_triu = sp.triu(adj)
    adj_tuple = sparse_to_tuple(adj_triu)
    edges = adj_tuple[0]
    edges_all = sparse_to_tuple(adj)[0]
    num_test = int(np.floor(edges.shape[0] / 10.))
    num_val = int(np.floor(edges.shape[0] / 20.))

    all_edge_idx = list(range(edges.shape[0]))
    np.random.shuffle(all_edge_idx)
    val_edge_idx = all_edge_idx[:num_val]
    test_edge_idx = all_edge_idx[num_val:(num_val + num_test)]
    test_edges = edges[test_edge_idx]
    val_edges = edges[val_edge_idx]
    train_edges = np.delete(edges, np.hstack([test_edge_idx, val_edge_idx]), axis=0)

    def ismember(a, b, tol=5):
        rows_close = np.all(np.round(a - b[:, None], tol) == 0, axis=-1)
        return np.any(rows_close)

    test_edges_false = []
    while len(test_edges_false) < len(test_edges):
        idx_i = np.random.randint(0, adj.shape[0])
        idx_j = np.random.randint(0, adj.shape[0])
        if idx_i == idx_j:
            continue
        if ismember([idx_i, idx_j], edges_all):
            continue
        if test_edges_false:
            if ismember([idx_j, idx_i], np.array(test_edges_false)):
                continue
            if ismember([idx_i, idx_j], np.array(test_edges_false)):
                continue
        test_edges_false.append([idx_i, idx_j])

    val_edges_false = []
    while len(val_edges_false) < len(val_edges):
        idx_i = np.random.randint(0, adj.shape[0])
        idx_j = np.random.randint(0, adj.shape[0])
        if idx_i == idx_j:
            continue
        if ismember([idx_i, idx_j], train_edges):
            continue
        if ismember([idx_j, idx_i], train_edges):
            continue
        if ismember([idx_i, idx_j], val_edges):
            continue
        if ismember([idx_j, idx_i], val_edges):
            continue
        if val_edges_false:
            if ismember([idx_j, idx_i], np.array(val_edges_false)):
                continue
            if ismember([idx_i, idx_j], np.array(val_edges_false)):
                continue
        val_edges_false.append([idx_i, idx_j])

    assert ~ismember(test_edges_false, edges_all)
    assert ~ismember(val_edges_false, edges_all)
    assert ~ismember(val_edges, train_edges)
    assert ~ismember(test_edges, train_edges)
    assert ~ismember(val_edges, test_edges)

    data = np.ones(train_edges.shape[0])

    # Re-build adj matrix
    adj_train = sp.csr_matrix((data, (train_edges[:, 0], train_edges[:, 1])), shape=adj.shape)
    adj_train = adj_train + adj_train.T

    # NOTE: these edge lists only contain single direction of edge!
    return adj_train, train_edges, val_edges, val_edges_false, test_edges, test_edges_false


def preprocess_graph(adj):
    adj = sp.coo_matrix(adj)
    adj_ = adj + sp.eye(adj.shape[0])
    rowsum = np.array(adj_.sum(1))
    degree_mat_inv_sqrt = sp.diags(np.power(rowsum, -0.5).flatten())
    adj_normalized = adj_.dot(degree_mat_inv_sqrt).transpose().dot(degree_mat_inv_sqrt).tocoo()
    # return sparse_to_tuple(adj_normalized)
    return sparse_mx_to_torch_sparse_tensor(adj_normalized)


def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    \"\"\"Convert a scipy sparse matrix to a torch sparse tensor.\"\"\"
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse.FloatTensor(indices, values, shape)


def get_roc_score(emb, adj_orig, edges_pos, edges_neg):
    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    # Predict on test set of edges
    adj_rec = np.dot(emb, emb.T)
    preds = []
    pos = []
    for e in edges_pos:
        preds.append(sigmoid(adj_rec[e[0], e[1]]))
        pos.append(adj_orig[e[0], e[1]])

    preds_neg = []
    neg = []
    for e in edges_neg:
        preds_neg.append(sigmoid(adj_rec[e[0], e[1]]))
        neg.append(adj_orig[e[0], e[1]])

    preds_all = np.hstack([preds, preds_neg])
    labels_all = np.hstack([np.ones(len(preds)), np.zeros(len(preds))])
    roc_score = roc_auc_score(labels_all, preds_all)
    ap_score = average_precision_score(labels_all, preds_all)

    return roc_score, ap_score


# -- gae/layers.py --
import torch
import torch.nn.functional as F
from torch.nn.modules.module import Module
from torch.nn.parameter import Parameter


class GraphConvolution(Module):
    \"\"\"
    Simple GCN layer, similar to https://arxiv.org/abs/1609.02907
    \"\"\"

    def __init__(self, in_features, out_features, dropout=0., act=F.relu):
        super(GraphConvolution, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.dropout = dropout
        self.act = act
        self.weight = Parameter(torch.FloatTensor(in_features, out_features))
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.xavier_uniform_(self.weight)

    def forward(self, input, adj):
        input = F.dropout(input, self.dropout, self.training)
        support = torch.mm(input, self.weight)
        output = torch.spmm(adj, support)
        output = self.act(output)
        return output

    def __repr__(self):
        return self.__class__.__name__ + ' (' \\
               + str(self.in_features) + ' -> ' \\
               + str(self.out_features) + ')'


# -- gae/model.py --
import torch
import torch.nn as nn
import torch.nn.functional as F


class GCNModelVAE(nn.Module):
    def __init__(self, input_feat_dim, hidden_dim1, hidden_dim2, dropout):
        super(GCNModelVAE, self).__init__()
        self.gc1 = GraphConvolution(input_feat_dim, hidden_dim1, dropout, act=F.relu)
        self.gc2 = GraphConvolution(hidden_dim1, hidden_dim2, dropout, act=lambda x: x)
        self.gc3 = GraphConvolution(hidden_dim1, hidden_dim2, dropout, act=lambda x: x)
        self.dc = InnerProductDecoder(dropout, act=lambda x: x)

    def encode(self, x, adj):
        hidden1 = self.gc1(x, adj)
        return self.gc2(hidden1, adj), self.gc3(hidden1, adj)

    def reparameterize(self, mu, logvar):
        if self.training:
            std = torch.exp(logvar)
            eps = torch.randn_like(std)
            return eps.mul(std).add_(mu)
        else:
            return mu

    def forward(self, x, adj):
        mu, logvar = self.encode(x, adj)
        z = self.reparameterize(mu, logvar)
        return self.dc(z), mu, logvar


class InnerProductDecoder(nn.Module):
    \"\"\"Decoder for using inner product for prediction.\"\"\"

    def __init__(self, dropout, act=torch.sigmoid):
        super(InnerProductDecoder, self).__init__()
        self.dropout = dropout
        self.sigmoid = act

    def forward(self, z):
        z = F.dropout(z, self.dropout, training=self.training)
        adj = self.sigmoid(torch.mm(z, z.t()))
        return adj


# -- gae/optimizer.py --
import torch
import torch.nn.modules.loss


def weighted_binary_cross_entropy(output, target, pos_weight):
    # eps = 1e-8  # 1 - eps -> big eats small
    # output = torch.clamp(output, min=eps, max=1-eps)
    if pos_weight is not None:
        loss = (target * torch.sigmoid(output).log()) * pos_weight + \\
               ((1 - target) * torch.sigmoid(1 - output).log())
    else:
        loss = target * torch.log(output) + (1 - target) * torch.log(1 - output)
    loss = torch.neg(torch.mean(loss))
    return loss


def loss_function(preds, labels, mu, logvar, n_nodes, norm, pos_weight):
    cost = norm * torch.mean(weighted_binary_cross_entropy(preds, labels, pos_weight))

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 / n_nodes * torch.mean(torch.sum(
        1 + 2 * logvar - mu.pow(2) - logvar.exp().pow(2), 1))
    return cost + KLD


# -- gae/train.py --
import argparse
import time

import numpy as np
import scipy.sparse as sp
import torch
from torch import optim

parser = argparse.ArgumentParser()
parser.add_argument('--model', type=str, default='gcn_vae', help="models used")
parser.add_argument('--seed', type=int, default=42, help='Random seed.')
parser.add_argument('--epochs', type=int, default=200, help='Number of epochs to train.')
parser.add_argument('--hidden1', type=int, default=32, help='Number of units in hidden layer 1.')
parser.add_argument('--hidden2', type=int, default=16, help='Number of units in hidden layer 2.')
parser.add_argument('--lr', type=float, default=0.01, help='Initial learning rate.')
parser.add_argument('--dropout', type=float, default=0., help='Dropout rate (1 - keep probability).')
parser.add_argument('--dataset-str', type=str, default='cora', help='type of dataset.')

args = parser.parse_args()


def gae_for(args):
    print("Using {} dataset".format(args.dataset_str))
    adj, features = load_data(args.dataset_str)
    n_nodes, feat_dim = features.shape

    # Store original adjacency matrix (without diagonal entries) for later
    adj_orig = adj
    adj_orig = adj_orig - sp.dia_matrix((adj_orig.diagonal()[np.newaxis, :], [0]), shape=adj_orig.shape)
    adj_orig.eliminate_zeros()

    adj_train, train_edges, val_edges, val_edges_false, test_edges, test_edges_false = mask_test_edges(adj)
    adj = adj_train

    # Some preprocessing
    adj_norm = preprocess_graph(adj)
    adj_label = adj_train + sp.eye(adj_train.shape[0])
    # adj_label = sparse_to_tuple(adj_label)
    adj_label = torch.FloatTensor(adj_label.toarray())

    pos_weight = float(adj.shape[0] * adj.shape[0] - adj.sum()) / adj.sum()
    norm = adj.shape[0] * adj.shape[0] / float((adj.shape[0] * adj.shape[0] - adj.sum()) * 2)

    model = GCNModelVAE(feat_dim, args.hidden1, args.hidden2, args.dropout)
    initialize(model)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    hidden_emb = None
    for epoch in range(args.epochs):
        t = time.time()
        model.train()
        optimizer.zero_grad()
        recovered, mu, logvar = model(features, adj_norm)
        loss = loss_function(preds=recovered, labels=adj_label,
                             mu=mu, logvar=logvar, n_nodes=n_nodes,
                             norm=norm, pos_weight=pos_weight)
        loss.backward()
        cur_loss = loss.item()
        optimizer.step()

        hidden_emb = mu.data.numpy()
        roc_curr, ap_curr = get_roc_score(hidden_emb, adj_orig, val_edges, val_edges_false)

        print("Epoch:", '%04d' % (epoch + 1), "train_loss=", "{:.5f}".format(cur_loss),
              "val_ap=", "{:.5f}".format(ap_curr),
              "time=", "{:.5f}".format(time.time() - t)
              )

    print("Optimization Finished!")

    roc_score, ap_score = get_roc_score(hidden_emb, adj_orig, test_edges, test_edges_false)
    print('Test ROC score: ' + str(roc_score))
    print('Test AP score: ' + str(ap_score))
    print(model.gc1)
    record.append(params_of(model))


if __name__ == '__main__':
    gae_for(args)
"""

GAE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("import torch.nn.modules.loss\n", "import retrograd.nn.modules.loss\n"),
    ("from torch import optim\n", "from retrograd import optim\n"),
    (
        "        loss.backward()\n        cur_loss = loss.item()\n        optimizer.step()",
        "        grads = loss.backward()\n        cur_loss = loss.item()\n        optimizer.step(grads)",
    ),
]


def write_planetoid(root) -> None:
    """``data/ind.cora.{x,tx,allx,graph,test.index}`` as Planetoid pickles them: 28 nodes in two
    communities (dense inside, one bridge), 12 sparse binary features leaning on the community;
    the last 6 nodes are the test nodes, listed out of order."""
    rng = np.random.default_rng(11)
    n, n_test, n_features = 28, 6, 12
    community = np.arange(n) % 2
    graph = {i: [] for i in range(n)}
    for i in range(n):
        for j in range(i + 1, n):
            if community[i] == community[j] and rng.uniform() < 0.3:
                graph[i].append(j)
                graph[j].append(i)
    graph[0].append(1)
    graph[1].append(0)
    features = (
        rng.uniform(size=(n, n_features))
        < 0.2 + 0.4 * (np.arange(n_features) % 2 == community[:, None])
    ).astype(np.float32)
    allx = sp.csr_matrix(features[: n - n_test])
    test_index = list(range(n - n_test, n))[::-1]
    tx = sp.csr_matrix(features[test_index])
    data = root / "data"
    data.mkdir()
    for name, value in (("x", allx[:10]), ("tx", tx), ("allx", allx), ("graph", graph)):
        (data / f"ind.cora.{name}").write_bytes(pickle.dumps(value))
    (data / "ind.cora.test.index").write_text("\n".join(str(i) for i in test_index) + "\n")


NUMBER = r"-?\d+\.\d+(?:e[-+]?\d+)?"


def test_gae_pytorch_vgae_trains_as_torch(capsys, monkeypatch, tmp_path):
    write_planetoid(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sys, "argv", ["train.py", "--epochs", "6", "--hidden1", "16", "--hidden2", "8"]
    )
    records, logs = runs_with_draws(
        GAE_SOURCE,
        GAE_STEPS,
        capsys,
        seed=3,
        initialize=initializer(),
        params_of=params_of,
        __name__="__main__",
    )
    ours, theirs = records[1], records[0]
    assert "Optimization Finished!" in logs[0] and "GraphConvolution (12 -> 16)" in logs[0]
    without_times = [re.sub(r"time= \S+", "", log) for log in logs]
    assert re.sub(NUMBER, "#", without_times[1]) == re.sub(NUMBER, "#", without_times[0])
    np.testing.assert_allclose(
        [float(v) for v in re.findall(NUMBER, without_times[1])],
        [float(v) for v in re.findall(NUMBER, without_times[0])],
        rtol=1e-4,
        atol=2e-5,
    )
    losses = [float(v) for v in re.findall(r"train_loss= (\S+)", logs[0])]
    assert losses[-1] < losses[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
