# ruff: noqa: E501, W291, W293  (the example scripts are kept as written: long lines, trailing blanks)
"""More official PyTorch examples (github.com/pytorch/examples at 77f55b9, BSD-3-Clause)
ported as in ``test_example_ports.py``: the script's text as torch runs it, the port made from
it by changing only the gradient lines (:func:`port`), both run in float64 from torch's
weights and the same random draws, agreeing to 1e-9 at every step.

- ``mnist_rnn/main.py``: ``nn.LSTM(batch_first=True)``, ``BatchNorm1d`` on ``[N, C]``,
  ``Dropout2d`` on a 2-d input (torch's deprecated element-wise behaviour), ``output[:, -1, :]``,
  Adadelta, StepLR;
- ``gcn/main.py``: ``nn.Parameter(torch.Tensor(in, out))`` (the legacy constructor),
  ``xavier_normal_``, ``torch.spmm`` of the (dense) normalized adjacency, ``nn.Dropout``,
  Adam with ``weight_decay``, ``nn.NLLLoss`` on rows picked by index tensors;
- ``gat/main.py``: ``torch.empty(size=...)``, ``xavier_normal_`` of a 3-d tensor, ``torch.mm``,
  ``F.dropout(training=)``, ``view``/``permute``/``.mT``, ``torch.where`` against
  ``ones_like`` masking, ``LeakyReLU``, ``F.elu``, ``mean(dim=0)`` or
  ``contiguous().view`` of the heads;
- ``mnist_forward_forward/main.py``: ``class Layer(nn.Linear)`` passing ``device, dtype``
  positionally, a ``train`` method shadowing ``Module.train``, layers in a plain list each
  with its own Adam, ``x.norm(2, 1, keepdim=True)``, ``weight.T``, ``log1p``, in-place
  ``x_[:, :10] *= 0.0`` and ``x_[range(n), y] = x.max()``, Python ``sum`` of tensors;
- ``language_translation`` (``src/data.py``, ``src/model.py``, ``main.py``): a DataLoader of
  string pairs with a ``collate_fn`` calling ``pad_sequence``, the sinusoidal positional
  encoding buffer, ``nn.Transformer`` with a float causal mask, a bool source mask and bool
  padding masks, ``CrossEntropyLoss(ignore_index=)``, Adam with ``betas``/``eps``,
  ``torch.save``/``torch.load`` of the state, and greedy decoding through
  ``transformer.encoder``/``decoder`` (``fill_``, ``type_as``, ``torch.max(dim=)``);
- ``imagenet/main.py``'s ``main_worker`` (one CPU process; torchvision's model and
  ``FakeData`` stood in for): ``torch.accelerator.is_available()``, SGD with momentum and
  weight decay, StepLR, ``AverageMeter`` summing 0-d tensors and formatting them
  (``'{val:6.2f}'``), top-k accuracy (``topk``, ``.t()``, ``expand_as``, ``mul_``),
  ``acc1 > best_acc1``, ``max`` of a tensor and an int, and the checkpoint (model, optimizer
  and scheduler state) saved with ``torch.save`` and copied;
- ``legacy/snli`` (``model.py``, ``train.py``): ``class Linear(Bottle, nn.Linear)`` (a mixin
  whose ``forward`` calls ``super().forward``), a bidirectional LSTM from ``new_zeros``
  states, ``ht[-2:].transpose(0, 1).contiguous().view``, one ``ReLU`` and one ``Dropout``
  shared across a ``Sequential``, frozen embeddings (``detach``) filled through
  ``weight.data.copy_``, ``torch.max(answer, 1)[1]``, whole-model ``torch.save`` snapshots;
- ``regression/main.py``: gradient descent written on ``param.data.add_`` (its gradient line,
  ``param.grad``, read as ``param.grad(grads)``), ``fc.zero_grad()``, ``x ** i`` features,
  ``smooth_l1_loss``, ``'{:+.2f}'.format`` of 0-d tensors;
- ``word_language_model/generate.py`` (no gradient line: its text runs unchanged) over
  ``model.py``'s ``RNNModel`` (LSTM) and ``TransformerModel`` (an ``nn.Transformer``
  subclass replacing its ``decoder``): the whole pickled model loaded back under
  ``torch.serialization.safe_globals`` listing torch's module paths, ``init_hidden``,
  ``torch.multinomial(...)[0]`` fed to ``input.fill_``, ``torch.Tensor([[word_idx]]).long()``
  and used as a list index.

Dropout masks are the library's own: retrograd draws them from the generator
``rg.manual_seed`` seeds, and torch's dropout functions are replaced by the same draws
(:class:`Masks`); the transformer runs with ``dropout=0.0`` (torch's attention dropout is
inside ``scaled_dot_product_attention``, out of the harness's reach).
"""

from __future__ import annotations

import sys
import types
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from test_example_ports import Stream, namespaces, port, state_of
from test_example_ports_2 import assert_records_agree


class Masks:
    """One seeded stream of dropout keep-masks for both libraries. retrograd draws its own
    masks (``rng.random(shape) < 1 - p``) from the generator ``rg.manual_seed`` seeds, so the
    port runs the library's dropout itself; torch's dropout functions are replaced by the same
    draw over the mask shape torch documents (``x.shape`` for ``dropout``, ``[N, C, 1, ...]``
    for ``dropout2d``, which ``feature_dropout`` gives any input of 2 or more dimensions)."""

    def __init__(self, seed: int):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        if lib is rg:
            rg.manual_seed(self.seed)
            return
        rng = np.random.default_rng(self.seed)
        functional = torch.nn.functional

        def masked(x, p, shape):
            keep = rng.random(shape) < 1.0 - p
            return x * (torch.tensor(keep).to(x.dtype) * (1.0 / (1.0 - p)))

        def dropout(x, p=0.5, training=True, inplace=False):
            if not training or p == 0.0:
                return x
            return masked(x, p, tuple(x.shape))

        def dropout2d(x, p=0.5, training=True, inplace=False):
            if not training or p == 0.0:
                return x
            return masked(x, p, tuple(x.shape[:2]) + (1,) * (x.ndim - 2))

        monkeypatch.setattr(functional, "dropout", dropout)
        monkeypatch.setattr(functional, "dropout2d", dropout2d)


def run_both(run, source, replacements, **kwargs):
    """``run(lib, source, torch_state)`` on torch, then on the port from torch's weights;
    both runs' records must agree."""
    torch.manual_seed(0)
    initial, theirs = run(torch, source, None, **kwargs)
    start, ours = run(rg, port(source, replacements), initial, **kwargs)
    for name, value in initial.items():
        np.testing.assert_array_equal(start[name], value)
    assert_records_agree(ours, theirs)
    return ours


# -- mnist_rnn/main.py -----------------------------------------------------------------------------
MNIST_RNN_SOURCE = """
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input):
        # Shape of input is (batch_size,1, 28, 28)
        # converting shape of input to (batch_size, 28, 28)
        # as required by RNN when batch_first is set True
        input = input.reshape(-1, 28, 28)
        output, hidden = self.rnn(input)

        # RNN output shape is (seq_len, batch, input_size)
        # Get last output of RNN
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        output = F.log_softmax(output, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        record(loss.item(), model)
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                       100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break


def test(args, model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()
            if args.dry_run:
                break

    test_loss /= len(test_loader.dataset)
    record([test_loss, correct], None)

    print('\\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))

# -- (the harness: the model made, float64, torch's weights) --
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(args, model, device, test_loader)
        scheduler.step()
        record(scheduler.get_last_lr(), None)
"""

MNIST_RNN_PORT = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def split_at_harness(source: str, first_loop_line: str) -> tuple[str, str, str]:
    """The definitions, the lines making the model (dedented out of ``main``), the rest."""
    definitions, rest = source.split(
        "# -- (the harness: the model made, float64, torch's weights) --\n"
    )
    make, loop = rest.split(first_loop_line)
    dedent = lambda text: "\n".join(line[4:] for line in text.splitlines())  # noqa: E731
    return definitions, dedent(make), dedent(first_loop_line + loop)


def _run_mnist_rnn(lib, source, torch_state, monkeypatch):
    batch = 4
    rng = np.random.default_rng(3)
    images = (rng.uniform(0.0, 1.0, (3 * batch, 1, 28, 28)) - 0.1307) / 0.3081
    labels = rng.integers(0, 10, 3 * batch)
    data_module = lib.utils.data

    def loader(rows):
        dataset = data_module.TensorDataset(lib.tensor(images[rows]), lib.tensor(labels[rows]))
        return data_module.DataLoader(dataset, batch_size=batch)

    records: list = []
    ours, theirs = namespaces(
        args=types.SimpleNamespace(lr=1.0, gamma=0.7, epochs=2, log_interval=1, dry_run=False),
        train_loader=loader(slice(0, 2 * batch)),
        test_loader=loader(slice(2 * batch, 3 * batch)),
        device=lib.device("cpu"),
        StepLR=lib.optim.lr_scheduler.StepLR,
        record=lambda value, model: records.append(
            (value, None if model is None else state_of(model))
        ),
    )
    namespace = ours if lib is rg else theirs
    definitions, make, loop = split_at_harness(source, "    scheduler = ")
    exec(compile(definitions + make, "mnist_rnn_main.py", "exec"), namespace)
    model = namespace["model"].double()
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    Masks(29).patch(monkeypatch, lib)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation of dropout2d on 2-d inputs
        exec(compile(loop, "mnist_rnn_main.py", "exec"), namespace)
    return initial, records


def test_the_mnist_rnn_example_ports_changing_only_the_gradient_lines(monkeypatch):
    ours = run_both(_run_mnist_rnn, MNIST_RNN_SOURCE, MNIST_RNN_PORT, monkeypatch=monkeypatch)
    assert len(ours) == 2 * (2 + 1 + 1)  # per epoch: 2 steps, a test, the lr
    assert ours[3][0] == pytest.approx([0.7])


# -- gcn/main.py and gat/main.py -------------------------------------------------------------------
GCN_SOURCE = r'''
class GraphConv(nn.Module):
    """
        Graph Convolutional Layer described in "Semi-Supervised Classification with Graph Convolutional Networks".

        Given an input feature representation for each node in a graph, the Graph Convolutional Layer aims to aggregate
        information from the node's neighborhood to update its own representation. This is achieved by applying a graph
        convolutional operation that combines the features of a node with the features of its neighboring nodes.

        Mathematically, the Graph Convolutional Layer can be described as follows:

            H' = f(D^(-1/2) * A * D^(-1/2) * H * W)

        where:
            H: Input feature matrix with shape (N, F_in), where N is the number of nodes and F_in is the number of 
                input features per node.
            A: Adjacency matrix of the graph with shape (N, N), representing the relationships between nodes.
            W: Learnable weight matrix with shape (F_in, F_out), where F_out is the number of output features per node.
            D: The degree matrix.
    """
    def __init__(self, input_dim, output_dim, use_bias=False):
        super(GraphConv, self).__init__()

        # Initialize the weight matrix W (in this case called `kernel`)
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel) # Initialize the weights using Xavier initialization

        # Initialize the bias (if use_bias is True)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias) # Initialize the bias to zeros

    def forward(self, input_tensor, adj_mat):
        """
        Performs a graph convolution operation.

        Args:
            input_tensor (torch.Tensor): Input tensor representing node features.
            adj_mat (torch.Tensor): Normalized adjacency matrix representing graph structure.

        Returns:
            torch.Tensor: Output tensor after the graph convolution operation.
        """

        support = torch.mm(input_tensor, self.kernel) # Matrix multiplication between input and weight matrix
        output = torch.spmm(adj_mat, support) # Sparse matrix multiplication between adjacency matrix and support
        # Add the bias (if bias is not None)
        if self.bias is not None:
            output = output + self.bias

        return output


class GCN(nn.Module):
    """
    Graph Convolutional Network (GCN) as described in the paper `"Semi-Supervised Classification with Graph 
    Convolutional Networks" <https://arxiv.org/pdf/1609.02907.pdf>`.

    The Graph Convolutional Network is a deep learning architecture designed for semi-supervised node 
    classification tasks on graph-structured data. It leverages the graph structure to learn node representations 
    by propagating information through the graph using graph convolutional layers.

    The original implementation consists of two stacked graph convolutional layers. The ReLU activation function is 
    applied to the hidden representations, and the Softmax activation function is applied to the output representations.
    """
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super(GCN, self).__init__()

        # Define the Graph Convolution layers
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)

        # Define the dropout layer
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        """
        Performs forward pass of the Graph Convolutional Network (GCN).

        Args:
            input_tensor (torch.Tensor): Input node feature matrix with shape (N, input_dim), where N is the number of nodes
                and input_dim is the number of input features per node.
            adj_mat (torch.Tensor): Normalized adjacency matrix of the graph with shape (N, N), representing the relationships between
                nodes.

        Returns:
            torch.Tensor: Output tensor with shape (N, output_dim), representing the predicted class probabilities for each node.
        """

        # Perform the first graph convolutional layer
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x) # Apply ReLU activation function
        x = self.dropout(x) # Apply dropout regularization

        # Perform the second graph convolutional layer
        x = self.gc2(x, adj_mat)

        # Apply log-softmax activation function for classification
        return F.log_softmax(x, dim=1)


def train_iter(epoch, model, optimizer, criterion, input, target, mask_train, mask_val, print_every=10):
    start_t = time.time()
    model.train()
    optimizer.zero_grad()

    # Forward pass
    output = model(*input) 
    loss = criterion(output[mask_train], target[mask_train]) # Compute the loss using the training mask

    loss.backward()
    optimizer.step()
    record(loss.item(), model)

    # Evaluate the model performance on training and validation sets
    loss_train, acc_train = test(model, criterion, input, target, mask_train)
    loss_val, acc_val = test(model, criterion, input, target, mask_val)
    record([loss_train, acc_train, loss_val, acc_val], None)

    if epoch % print_every == 0:
        # Print the training progress at specified intervals
        print(f'Epoch: {epoch:04d} ({(time.time() - start_t):.4f}s) loss_train: {loss_train:.4f} acc_train: {acc_train:.4f} loss_val: {loss_val:.4f} acc_val: {acc_val:.4f}')


def test(model, criterion, input, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*input)
        output, target = output[mask], target[mask]

        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


# -- (the harness: the model made, float64, torch's weights) --
    gcn = GCN(features.shape[1], args.hidden_dim, labels.max().item() + 1, args.include_bias, args.dropout_p).to(device)
    optimizer = Adam(gcn.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()

    for epoch in range(args.epochs):
        train_iter(epoch + 1, gcn, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val, args.val_every)
        if args.dry_run:
            break

    loss_test, acc_test = test(gcn, criterion, (features, adj_mat), labels, idx_test)
    print(f'Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}')
    record([loss_test, acc_test], None)
'''

GAT_SOURCE = r'''
class GraphAttentionLayer(nn.Module):
    """
    Graph Attention Layer (GAT) as described in the paper `"Graph Attention Networks" <https://arxiv.org/pdf/1710.10903.pdf>`.

        This operation can be mathematically described as:

            e_ij = a(W h_i, W h_j)
            α_ij = softmax_j(e_ij) = exp(e_ij) / Σ_k(exp(e_ik))     
            h_i' = σ(Σ_j(α_ij W h_j))
            
            where h_i and h_j are the feature vectors of nodes i and j respectively, W is a learnable weight matrix,
            a is an attention mechanism that computes the attention coefficients e_ij, and σ is an activation function.

    """
    def __init__(self, in_features: int, out_features: int, n_heads: int, concat: bool = False, dropout: float = 0.4, leaky_relu_slope: float = 0.2):
        super(GraphAttentionLayer, self).__init__()

        self.n_heads = n_heads # Number of attention heads
        self.concat = concat # wether to concatenate the final attention heads
        self.dropout = dropout # Dropout rate

        if concat: # concatenating the attention heads
            self.out_features = out_features # Number of output features per node
            assert out_features % n_heads == 0 # Ensure that out_features is a multiple of n_heads
            self.n_hidden = out_features // n_heads
        else: # averaging output over the attention heads (Used in the main paper)
            self.n_hidden = out_features

        #  A shared linear transformation, parametrized by a weight matrix W is applied to every node
        #  Initialize the weight matrix W 
        self.W = nn.Parameter(torch.empty(size=(in_features, self.n_hidden * n_heads)))

        # Initialize the attention weights a
        self.a = nn.Parameter(torch.empty(size=(n_heads, 2 * self.n_hidden, 1)))

        self.leakyrelu = nn.LeakyReLU(leaky_relu_slope) # LeakyReLU activation function
        self.softmax = nn.Softmax(dim=1) # softmax activation function to the attention coefficients

        self.reset_parameters() # Reset the parameters


    def reset_parameters(self):
        """
        Reinitialize learnable parameters.
        """
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a)
    

    def _get_attention_scores(self, h_transformed: torch.Tensor):
        """calculates the attention scores e_ij for all pairs of nodes (i, j) in the graph
        in vectorized parallel form. for each pair of source and target nodes (i, j),
        the attention score e_ij is computed as follows:

            e_ij = LeakyReLU(a^T [Wh_i || Wh_j]) 

            where || denotes the concatenation operation, and a and W are the learnable parameters.

        Args:
            h_transformed (torch.Tensor): Transformed feature matrix with shape (n_nodes, n_heads, n_hidden),
                where n_nodes is the number of nodes and out_features is the number of output features per node.

        Returns:
            torch.Tensor: Attention score matrix with shape (n_heads, n_nodes, n_nodes), where n_nodes is the number of nodes.
        """
        
        source_scores = torch.matmul(h_transformed, self.a[:, :self.n_hidden, :])
        target_scores = torch.matmul(h_transformed, self.a[:, self.n_hidden:, :])

        # broadcast add 
        # (n_heads, n_nodes, 1) + (n_heads, 1, n_nodes) = (n_heads, n_nodes, n_nodes)
        e = source_scores + target_scores.mT
        return self.leakyrelu(e)

    def forward(self,  h: torch.Tensor, adj_mat: torch.Tensor):
        """
        Performs a graph attention layer operation.

        Args:
            h (torch.Tensor): Input tensor representing node features.
            adj_mat (torch.Tensor): Adjacency matrix representing graph structure.

        Returns:
            torch.Tensor: Output tensor after the graph convolution operation.
        """
        n_nodes = h.shape[0]

        # Apply linear transformation to node feature -> W h
        # output shape (n_nodes, n_hidden * n_heads)
        h_transformed = torch.mm(h, self.W)
        h_transformed = F.dropout(h_transformed, self.dropout, training=self.training)

        # splitting the heads by reshaping the tensor and putting heads dim first
        # output shape (n_heads, n_nodes, n_hidden)
        h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)
        
        # getting the attention scores
        # output shape (n_heads, n_nodes, n_nodes)
        e = self._get_attention_scores(h_transformed)

        # Set the attention score for non-existent edges to -9e15 (MASKING NON-EXISTENT EDGES)
        connectivity_mask = -9e16 * torch.ones_like(e)
        e = torch.where(adj_mat > 0, e, connectivity_mask) # masked attention scores
        
        # attention coefficients are computed as a softmax over the rows
        # for each column j in the attention score matrix e
        attention = F.softmax(e, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)

        # final node embeddings are computed as a weighted average of the features of its neighbors
        h_prime = torch.matmul(attention, h_transformed)

        # concatenating/averaging the attention heads
        # output shape (n_nodes, out_features)
        if self.concat:
            h_prime = h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.out_features)
        else:
            h_prime = h_prime.mean(dim=0)

        return h_prime

################################
### MAIN GAT NETWORK MODULE  ###
################################

class GAT(nn.Module):
    """
    Graph Attention Network (GAT) as described in the paper `"Graph Attention Networks" <https://arxiv.org/pdf/1710.10903.pdf>`.
    Consists of a 2-layer stack of Graph Attention Layers (GATs). The fist GAT Layer is followed by an ELU activation.
    And the second (final) layer is a GAT layer with a single attention head and softmax activation function. 
    """
    def __init__(self,
        in_features,
        n_hidden,
        n_heads,
        num_classes,
        concat=False,
        dropout=0.4,
        leaky_relu_slope=0.2):
        """ Initializes the GAT model. 

        Args:
            in_features (int): number of input features per node.
            n_hidden (int): output size of the first Graph Attention Layer.
            n_heads (int): number of attention heads in the first Graph Attention Layer.
            num_classes (int): number of classes to predict for each node.
            concat (bool, optional): Wether to concatinate attention heads or take an average over them for the
                output of the first Graph Attention Layer. Defaults to False.
            dropout (float, optional): dropout rate. Defaults to 0.4.
            leaky_relu_slope (float, optional): alpha (slope) of the leaky relu activation. Defaults to 0.2.
        """

        super(GAT, self).__init__()

        # Define the Graph Attention layers
        self.gat1 = GraphAttentionLayer(
            in_features=in_features, out_features=n_hidden, n_heads=n_heads,
            concat=concat, dropout=dropout, leaky_relu_slope=leaky_relu_slope
            )
        
        self.gat2 = GraphAttentionLayer(
            in_features=n_hidden, out_features=num_classes, n_heads=1,
            concat=False, dropout=dropout, leaky_relu_slope=leaky_relu_slope
            )
        

    def forward(self, input_tensor: torch.Tensor , adj_mat: torch.Tensor):
        """
        Performs a forward pass through the network.

        Args:
            input_tensor (torch.Tensor): Input tensor representing node features.
            adj_mat (torch.Tensor): Adjacency matrix representing graph structure.

        Returns:
            torch.Tensor: Output tensor after the forward pass.
        """

        # Apply the first Graph Attention layer
        x = self.gat1(input_tensor, adj_mat)
        x = F.elu(x) # Apply ELU activation function to the output of the first layer

        # Apply the second Graph Attention layer
        x = self.gat2(x, adj_mat)

        return F.log_softmax(x, dim=1) # Apply log softmax activation function


def train_iter(epoch, model, optimizer, criterion, input, target, mask_train, mask_val, print_every=10):
    start_t = time.time()
    model.train()
    optimizer.zero_grad()

    # Forward pass
    output = model(*input) 
    loss = criterion(output[mask_train], target[mask_train]) # Compute the loss using the training mask

    loss.backward()
    optimizer.step()
    record(loss.item(), model)

    # Evaluate the model performance on training and validation sets
    loss_train, acc_train = test(model, criterion, input, target, mask_train)
    loss_val, acc_val = test(model, criterion, input, target, mask_val)
    record([loss_train, acc_train, loss_val, acc_val], None)

    if epoch % print_every == 0:
        # Print the training progress at specified intervals
        print(f'Epoch: {epoch:04d} ({(time.time() - start_t):.4f}s) loss_train: {loss_train:.4f} acc_train: {acc_train:.4f} loss_val: {loss_val:.4f} acc_val: {acc_val:.4f}')


def test(model, criterion, input, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*input)
        output, target = output[mask], target[mask]

        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


# -- (the harness: the model made, float64, torch's weights) --
    # Create the model
    # The model consists of a 2-layer stack of Graph Attention Layers (GATs).
    gat_net = GAT(
        in_features=features.shape[1],          # Number of input features per node  
        n_hidden=args.hidden_dim,               # Output size of the first Graph Attention Layer
        n_heads=args.num_heads,                 # Number of attention heads in the first Graph Attention Layer
        num_classes=labels.max().item() + 1,    # Number of classes to predict for each node
        concat=args.concat_heads,               # Wether to concatinate attention heads
        dropout=args.dropout_p,                 # Dropout rate
        leaky_relu_slope=0.2                    # Alpha (slope) of the leaky relu activation
    ).to(device)

    # configure the optimizer and loss function
    optimizer = Adam(gat_net.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()

    # Train and evaluate the model
    for epoch in range(args.epochs):
        train_iter(epoch + 1, gat_net, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val, args.val_every)
        if args.dry_run:
            break
    loss_test, acc_test = test(gat_net, criterion, (features, adj_mat), labels, idx_test)
    print(f'Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}')
    record([loss_test, acc_test], None)
'''

GRAPH_PORT = [
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def _graph(nodes: int, features: int, classes: int, normalized: bool):
    """A Cora-shaped graph: row-normalized bag-of-words features, labels covering every
    class, a symmetric adjacency with self-loops (``D^-1/2 A D^-1/2`` for the GCN, as its
    ``load_cora`` makes it, dense: ``torch.spmm`` takes a dense matrix too)."""
    rng = np.random.default_rng(41)
    words = (rng.uniform(size=(nodes, features)) < 0.3).astype(np.float64)
    words[:, 0] = 1.0
    labels = np.arange(nodes) % classes
    edges = np.triu(rng.uniform(size=(nodes, nodes)) < 0.25, 1)
    adj = (edges | edges.T).astype(np.float64) + np.eye(nodes)
    if normalized:
        scale = np.sqrt(1.0 / adj.sum(1))
        adj = scale[:, None] * adj * scale[None, :]
    return words / words.sum(1, keepdims=True), labels, adj, rng.permutation(nodes)


def _run_graph(lib, source, torch_state, monkeypatch, name, args):
    features, labels, adj, idx = _graph(14, 12, 3, normalized=name == "gcn")
    records: list = []
    ours, theirs = namespaces(
        args=args,
        features=lib.tensor(features),
        labels=lib.tensor(labels),
        adj_mat=lib.tensor(adj),
        idx_test=lib.tensor(idx[:4]),
        idx_val=lib.tensor(idx[4:8]),
        idx_train=lib.tensor(idx[8:]),
        device=lib.device("cpu"),
        Adam=lib.optim.Adam,
        time=__import__("time"),
        record=lambda value, model: records.append(
            (value, None if model is None else state_of(model))
        ),
    )
    namespace = ours if lib is rg else theirs
    definitions, make, loop = split_at_harness(source, "    for epoch in range(args.epochs):")
    exec(compile(definitions + make, f"{name}_main.py", "exec"), namespace)
    model = namespace[f"{name}_net" if name == "gat" else name].double()
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    Masks(31).patch(monkeypatch, lib)
    exec(compile(loop, f"{name}_main.py", "exec"), namespace)
    return initial, records


def test_the_gcn_example_ports_changing_only_the_gradient_lines(monkeypatch):
    args = types.SimpleNamespace(
        epochs=3, lr=0.01, l2=5e-4, dropout_p=0.5, hidden_dim=6, val_every=1,
        include_bias=True, dry_run=False,
    )  # fmt: skip
    ours = run_both(
        _run_graph, GCN_SOURCE, GRAPH_PORT, monkeypatch=monkeypatch, name="gcn", args=args
    )
    assert len(ours) == 3 * 2 + 1  # per epoch: the step, the train/val evaluation; the test


@pytest.mark.parametrize("concat", [False, True], ids=["averaged_heads", "concatenated_heads"])
def test_the_gat_example_ports_changing_only_the_gradient_lines(monkeypatch, concat):
    args = types.SimpleNamespace(
        epochs=3, lr=0.005, l2=5e-4, dropout_p=0.6, hidden_dim=8, num_heads=2,
        concat_heads=concat, val_every=1, dry_run=False,
    )  # fmt: skip
    ours = run_both(
        _run_graph, GAT_SOURCE, GRAPH_PORT, monkeypatch=monkeypatch, name="gat", args=args
    )
    assert len(ours) == 3 * 2 + 1


# -- mnist_forward_forward/main.py -----------------------------------------------------------------
FORWARD_FORWARD_SOURCE = r"""
def get_y_neg(y):
    y_neg = y.clone()
    for idx, y_samp in enumerate(y):
        allowed_indices = list(range(10))
        allowed_indices.remove(y_samp.item())
        y_neg[idx] = torch.tensor(allowed_indices)[
            torch.randint(len(allowed_indices), size=(1,))
        ].item()
    return y_neg.to(device)


def overlay_y_on_x(x, y, classes=10):
    x_ = x.clone()
    x_[:, :classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Net(torch.nn.Module):
    def __init__(self, dims):

        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers = self.layers + [Layer(dims[d], dims[d + 1]).to(device)]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            print("training layer: ", i)
            h_pos, h_neg = layer.train(h_pos, h_neg)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=args.lr)
        self.threshold = args.threshold
        self.num_epochs = args.epochs

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(
                torch.exp(
                    torch.cat([-g_pos + self.threshold, g_neg - self.threshold])
                )
            ).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            record(loss.item(), self)
            if i % args.log_interval == 0:
                print("Loss: ", loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


# -- (the harness: the model made, float64, torch's weights) --
    net = Net([784, 500, 500])
    x, y = next(iter(train_loader))
    x, y = x.to(device), y.to(device)
    x_pos = overlay_y_on_x(x, y)
    y_neg = get_y_neg(y)
    x_neg = overlay_y_on_x(x, y_neg)
    net.train(x_pos, x_neg)
    print("train error:", 1.0 - net.predict(x).eq(y).float().mean().item())
    record(1.0 - net.predict(x).eq(y).float().mean().item(), None)
    x_te, y_te = next(iter(test_loader))
    x_te, y_te = x_te.to(device), y_te.to(device)
    if args.save_model:
        torch.save(net.state_dict(), "mnist_ff.pt")
    print("test error:", 1.0 - net.predict(x_te).eq(y_te).float().mean().item())
    record(1.0 - net.predict(x_te).eq(y_te).float().mean().item(), None)
"""

FORWARD_FORWARD_PORT = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            self.opt.step()\n", "            self.opt.step(grads)\n"),
]


class IntegerDraws:
    """One seeded stream for ``torch.randint(high, size=...)`` in both libraries (the
    negative labels of ``get_y_neg``)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def patch(self, monkeypatch, lib):
        def randint(high, size, **_):
            return lib.tensor(self.rng.integers(0, high, tuple(size)))

        monkeypatch.setattr(lib, "randint", randint)


def _run_forward_forward(lib, source, torch_state, monkeypatch):
    rng = np.random.default_rng(43)
    images = (rng.uniform(0.0, 1.0, (2, 12, 784)) - 0.1307) / 0.3081
    labels = rng.integers(0, 10, (2, 12))
    batches = [(lib.tensor(images[i]), lib.tensor(labels[i])) for i in range(2)]
    records: list = []
    ours, theirs = namespaces(
        args=types.SimpleNamespace(
            epochs=4, lr=0.03, threshold=2.0, log_interval=2, save_model=False
        ),
        train_loader=batches[:1],
        test_loader=batches[1:],
        device=lib.device("cpu"),
        Adam=lib.optim.Adam,
        record=lambda value, layer: records.append(
            (value, None if layer is None else state_of(layer))
        ),
    )
    namespace = ours if lib is rg else theirs
    definitions, make, loop = split_at_harness(source, "    x, y = next(iter(train_loader))\n")
    exec(compile(definitions + make, "mnist_forward_forward_main.py", "exec"), namespace)
    layers = namespace["net"].layers
    for index, layer in enumerate(layers):
        layer.double()
        if torch_state is not None:
            layer.load_state_dict(
                {
                    k[len(f"{index}.") :]: v
                    for k, v in torch_state.items()
                    if k.startswith(f"{index}.")
                }
            )
    initial = {f"{i}.{k}": v for i, layer in enumerate(layers) for k, v in state_of(layer).items()}
    IntegerDraws(47).patch(monkeypatch, lib)
    exec(compile(loop, "mnist_forward_forward_main.py", "exec"), namespace)
    return initial, records


def test_the_mnist_forward_forward_example_ports_changing_only_the_gradient_lines(monkeypatch):
    """Each ``Layer`` is an ``nn.Linear`` subclass with its own Adam, trained on its own
    loss; ``Layer.train`` and ``Net.train`` take the place of ``Module.train``, and the layers
    are held in a plain list (``Net`` registers no parameters)."""
    ours = run_both(_run_forward_forward, FORWARD_FORWARD_SOURCE, FORWARD_FORWARD_PORT,
                    monkeypatch=monkeypatch)  # fmt: skip
    assert len(ours) == 2 * 4 + 2  # 4 steps for each layer, the train and the test error


# -- language_translation (src/data.py, src/model.py, main.py) -----------------------------------
TRANSLATION_SOURCE = r"""
# -- src/data.py --
# Turns an iterable into a generator
def _yield_tokens(iterable_data, tokenizer, src):

    # Iterable data stores the samples as (src, tgt) so this will help us select just one language or the other
    index = 0 if src else 1

    for data in iterable_data:
        yield tokenizer(data[index])

# Get data, tokenizer, text transform, vocab objs, etc. Everything we
# need to start training the model
def get_data(opts):

    src_lang = opts.src
    tgt_lang = opts.tgt

    multi30k.URL["train"] = "https://raw.githubusercontent.com/neychev/small_DL_repo/master/datasets/Multi30k/training.tar.gz"
    multi30k.URL["valid"] = "https://raw.githubusercontent.com/neychev/small_DL_repo/master/datasets/Multi30k/validation.tar.gz"

    # Define a token "unkown", "padding", "beginning of sentence", and "end of sentence"
    special_symbols = {
        "<unk>":0,
        "<pad>":1,
        "<bos>":2,
        "<eos>":3
    }

    # Get training examples from torchtext (the multi30k dataset)
    train_iterator = Multi30k(split="train", language_pair=(src_lang, tgt_lang))
    valid_iterator = Multi30k(split="valid", language_pair=(src_lang, tgt_lang))

    # Grab a tokenizer for these languages
    src_tokenizer = get_tokenizer("spacy", src_lang)
    tgt_tokenizer = get_tokenizer("spacy", tgt_lang)

    # Build a vocabulary object for these languages
    src_vocab = build_vocab_from_iterator(
        _yield_tokens(train_iterator, src_tokenizer, True),
        min_freq=1,
        specials=list(special_symbols.keys()),
        special_first=True
    )

    tgt_vocab = build_vocab_from_iterator(
        _yield_tokens(train_iterator, tgt_tokenizer, False),
        min_freq=1,
        specials=list(special_symbols.keys()),
        special_first=True
    )

    src_vocab.set_default_index(special_symbols["<unk>"])
    tgt_vocab.set_default_index(special_symbols["<unk>"])

    # Helper function to sequentially apply transformations
    def _seq_transform(*transforms):
        def func(txt_input):
            for transform in transforms:
                txt_input = transform(txt_input)
            return txt_input
        return func

    # Function to add BOS/EOS and create tensor for input sequence indices
    def _tensor_transform(token_ids):
        return torch.cat(
            (torch.tensor([special_symbols["<bos>"]]),
             torch.tensor(token_ids),
             torch.tensor([special_symbols["<eos>"]]))
        )

    src_lang_transform = _seq_transform(src_tokenizer, src_vocab, _tensor_transform)
    tgt_lang_transform = _seq_transform(tgt_tokenizer, tgt_vocab, _tensor_transform)

    # Now we want to convert the torchtext data pipeline to a dataloader. We
    # will need to collate batches
    def _collate_fn(batch):
        src_batch, tgt_batch = [], []
        for src_sample, tgt_sample in batch:
            src_batch.append(src_lang_transform(src_sample.rstrip("\n")))
            tgt_batch.append(tgt_lang_transform(tgt_sample.rstrip("\n")))

        src_batch = pad_sequence(src_batch, padding_value=special_symbols["<pad>"])
        tgt_batch = pad_sequence(tgt_batch, padding_value=special_symbols["<pad>"])
        return src_batch, tgt_batch

    # Create the dataloader
    train_dataloader = DataLoader(train_iterator, batch_size=opts.batch, collate_fn=_collate_fn)
    valid_dataloader = DataLoader(valid_iterator, batch_size=opts.batch, collate_fn=_collate_fn)

    return train_dataloader, valid_dataloader, src_vocab, tgt_vocab, src_lang_transform, tgt_lang_transform, special_symbols

def generate_square_subsequent_mask(size, device):
    mask = (torch.triu(torch.ones((size, size), device=device)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask

# Create masks for input into model
def create_mask(src, tgt, pad_idx, device):

    # Get sequence length
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]

    # Generate the mask
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len, device)
    src_mask = torch.zeros((src_seq_len, src_seq_len),device=device).type(torch.bool)

    # Overlay the mask over the original input
    src_padding_mask = (src == pad_idx).transpose(0, 1)
    tgt_padding_mask = (tgt == pad_idx).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask

# -- src/model.py --
class PositionalEncoding(nn.Module):
    def __init__(
        self,
        emb_size,
        dropout,
        maxlen=5000
    ):
        super(PositionalEncoding, self).__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2)* math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)

        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding)

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])

class Translator(nn.Module):
    def __init__(
            self,
            num_encoder_layers,
            num_decoder_layers,
            embed_size,
            num_heads,
            src_vocab_size,
            tgt_vocab_size,
            dim_feedforward,
            dropout
        ):
        super(Translator, self).__init__()

        # Output of embedding must be equal (embed_size)
        self.src_embedding = nn.Embedding(src_vocab_size, embed_size)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, embed_size)

        self.pos_enc = PositionalEncoding(embed_size, dropout)

        self.transformer = nn.Transformer(
            d_model=embed_size,
            nhead=num_heads,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers,
            dim_feedforward=dim_feedforward,
            dropout=dropout
        )

        self.ff = nn.Linear(embed_size, tgt_vocab_size)

        self._init_weights()

    def _init_weights(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask):

        src_emb = self.pos_enc(self.src_embedding(src))
        tgt_emb = self.pos_enc(self.tgt_embedding(trg))

        outs = self.transformer(
            src_emb,
            tgt_emb,
            src_mask,
            tgt_mask,
            None,
            src_padding_mask,
            tgt_padding_mask,
            memory_key_padding_mask
        )

        return self.ff(outs)

    def encode(self, src, src_mask):

        embed = self.src_embedding(src)

        pos_enc = self.pos_enc(embed)

        return self.transformer.encoder(pos_enc, src_mask)

    def decode(self, tgt, memory, tgt_mask):
        
        embed = self.tgt_embedding(tgt)

        pos_enc = self.pos_enc(embed)

        return self.transformer.decoder(pos_enc, memory, tgt_mask)

# -- main.py --
# Function to generate output sequence using greedy algorithm
def greedy_decode(model, src, src_mask, max_len, start_symbol, end_symbol):

    # Move to device
    src = src.to(DEVICE)
    src_mask = src_mask.to(DEVICE)

    # Encode input
    memory = model.encode(src, src_mask)

    # Output will be stored here
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long).to(DEVICE)

    # For each element in our translation (which could range up to the maximum translation length)
    for _ in range(max_len-1):

        # Decode the encoded representation of the input
        memory = memory.to(DEVICE)
        tgt_mask = (generate_square_subsequent_mask(ys.size(0), DEVICE).type(torch.bool)).to(DEVICE)
        out = model.decode(ys, memory, tgt_mask)

        # Reshape
        out = out.transpose(0, 1)

        # Covert to probabilities and take the max of these probabilities
        prob = model.ff(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()

        # Now we have an output which is the vector representation of the translation
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == end_symbol:
            break

    return ys

# Train the model for 1 epoch
def train(model, train_dl, loss_fn, optim, special_symbols, opts):

    # Object for accumulating losses
    losses = 0

    # Put model into training mode
    model.train()
    for src, tgt in tqdm(train_dl, ascii=True):

        src = src.to(DEVICE)
        tgt = tgt.to(DEVICE)

        # We need to reshape the input slightly to fit into the transformer
        tgt_input = tgt[:-1, :]

        # Create masks
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input, special_symbols["<pad>"], DEVICE)

        # Pass into model, get probability over the vocab out
        logits = model(src, tgt_input, src_mask, tgt_mask,src_padding_mask, tgt_padding_mask, src_padding_mask)

        # Reset gradients before we try to compute the gradients over the loss
        optim.zero_grad()

        # Get original shape back
        tgt_out = tgt[1:, :]

        # Compute loss and gradient over that loss
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()

        # Step weights
        optim.step()
        record(loss.item(), model)

        # Accumulate a running loss for reporting
        losses += loss.item()

        if opts.dry_run:
            break

    # Return the average loss
    return losses / len(list(train_dl))

# Check the model accuracy on the validation dataset
def validate(model, valid_dl, loss_fn, special_symbols):
    
    # Object for accumulating losses
    losses = 0

    # Turn off gradients a moment
    model.eval()

    for src, tgt in tqdm(valid_dl):

        src = src.to(DEVICE)
        tgt = tgt.to(DEVICE)

        # We need to reshape the input slightly to fit into the transformer
        tgt_input = tgt[:-1, :]

        # Create masks
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input, special_symbols["<pad>"], DEVICE)

        # Pass into model, get probability over the vocab out
        logits = model(src, tgt_input, src_mask, tgt_mask,src_padding_mask, tgt_padding_mask, src_padding_mask)

        # Get original shape back, compute loss, accumulate that loss
        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        losses += loss.item()

    # Return the average loss
    return losses / len(list(valid_dl))

# -- (the harness: the model made, float64, torch's weights) --

    # Set up logging
    os.makedirs(opts.logging_dir, exist_ok=True)
    logger = logging.getLogger(__name__)
    logging.basicConfig(filename=opts.logging_dir + "log.txt", level=logging.INFO)

    # This prints it to the screen as well
    console = logging.StreamHandler()
    console.setLevel(logging.INFO)
    logging.getLogger().addHandler(console)

    logging.info(f"Translation task: {opts.src} -> {opts.tgt}")
    logging.info(f"Using device: {DEVICE}")

    # Get training data, tokenizer and vocab
    # objects as well as any special symbols we added to our dataset
    train_dl, valid_dl, src_vocab, tgt_vocab, _, _, special_symbols = get_data(opts)

    logging.info("Loaded data")

    src_vocab_size = len(src_vocab)
    tgt_vocab_size = len(tgt_vocab)

    logging.info(f"{opts.src} vocab size: {src_vocab_size}")
    logging.info(f"{opts.tgt} vocab size: {tgt_vocab_size}")

    # Create model
    model = Translator(
        num_encoder_layers=opts.enc_layers,
        num_decoder_layers=opts.dec_layers,
        embed_size=opts.embed_size,
        num_heads=opts.attn_heads,
        src_vocab_size=src_vocab_size,
        tgt_vocab_size=tgt_vocab_size,
        dim_feedforward=opts.dim_feedforward,
        dropout=opts.dropout
    ).to(DEVICE)

    logging.info("Model created... starting training!")

    # Set up our learning tools
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=special_symbols["<pad>"])

    # These special values are from the "Attention is all you need" paper
    optim = torch.optim.Adam(model.parameters(), lr=opts.lr, betas=(0.9, 0.98), eps=1e-9)

    best_val_loss = 1e6
    
    for idx, epoch in enumerate(range(1, opts.epochs+1)):

        start_time = time()
        train_loss = train(model, train_dl, loss_fn, optim, special_symbols, opts)
        epoch_time = time() - start_time
        val_loss   = validate(model, valid_dl, loss_fn, special_symbols)
        record([train_loss, val_loss], None)

        # Once training is done, we want to save out the model
        if val_loss < best_val_loss:
            best_val_loss = val_loss
            logging.info("New best model, saving...")
            torch.save(model.state_dict(), opts.logging_dir + "best.pt")

        torch.save(model.state_dict(), opts.logging_dir + "last.pt")

        logger.info(f"Epoch: {epoch}\n\tTrain loss: {train_loss:.3f}\n\tVal loss: {val_loss:.3f}\n\tEpoch time = {epoch_time:.1f} seconds\n\tETA = {epoch_time*(opts.epochs-idx-1):.1f} seconds")
"""

TRANSLATION_PORT = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optim.step()\n", "        optim.step(grads)\n"),
]


class Vocab:
    """The stand-in for torchtext's vocabulary: tokens to indices, the specials first."""

    def __init__(self, tokens):
        self.itos, self.stoi, self.default = (
            list(tokens),
            {t: i for i, t in enumerate(tokens)},
            None,
        )

    def __call__(self, tokens):
        return [self.stoi.get(t, self.default) for t in tokens]

    def __len__(self):
        return len(self.itos)

    def set_default_index(self, index):
        self.default = index

    def lookup_tokens(self, indices):
        return [self.itos[i] for i in indices]


def build_vocab_from_iterator(iterator, min_freq=1, specials=(), special_first=True):
    return Vocab(list(specials) + sorted({token for tokens in iterator for token in tokens}))


def _corpus():
    """Multi30k's stand-in: German-English pairs of 2 to 5 words (torchtext is neither
    library's dependency)."""
    rng = np.random.default_rng(53)
    german, english = (
        ["ein", "mann", "hund", "rot", "sieht", "das", "haus"],
        ["a", "man", "dog", "red", "sees", "the", "house"],
    )

    def sentence(words, n):
        return " ".join(rng.choice(words, n)) + "\n"

    pairs = [(sentence(german, n), sentence(english, n + 1)) for n in rng.integers(2, 6, 9)]
    return {"train": pairs[:6], "valid": pairs[6:]}


class _Logging:
    """The ``logging`` module's stand-in, so the port leaves the process's logging alone."""

    INFO = 20

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


def _run_translation(lib, source, torch_state, monkeypatch, tmp_path):
    corpus = _corpus()
    records: list = []
    opts = types.SimpleNamespace(
        src="de", tgt="en", epochs=2, lr=1e-3, batch=3, attn_heads=2, enc_layers=2,
        dec_layers=2, embed_size=8, dim_feedforward=16, dropout=0.0, dry_run=False,
        logging_dir=str(tmp_path / lib.__name__) + "/",
    )  # fmt: skip
    ours, theirs = namespaces(
        opts=opts,
        math=__import__("math"),
        os=__import__("os"),
        logging=_Logging(),
        time=__import__("time").time,
        tqdm=lambda iterable, **kwargs: iterable,
        DEVICE=lib.device("cpu"),
        pad_sequence=lib.nn.utils.rnn.pad_sequence,
        DataLoader=lib.utils.data.DataLoader,
        Multi30k=lambda split, language_pair: corpus[split],
        multi30k=types.SimpleNamespace(URL={}),
        get_tokenizer=lambda kind, language: str.split,
        build_vocab_from_iterator=build_vocab_from_iterator,
        record=lambda value, model: records.append(
            (value, None if model is None else state_of(model))
        ),
    )
    namespace = ours if lib is rg else theirs
    definitions, make, loop = split_at_harness(source, "    best_val_loss = 1e6\n")
    exec(compile(definitions + make, "language_translation.py", "exec"), namespace)
    model = namespace["model"].double()
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    exec(compile(loop, "language_translation.py", "exec"), namespace)
    # as ``inference(opts)`` translates a sentence, the model loaded back from ``last.pt``
    exec(compile(INFERENCE, "language_translation.py", "exec"), namespace)
    return initial, records


#: ``inference(opts)``'s lines, its sentence from the validation set instead of ``input()``.
INFERENCE = """
_, _, src_vocab, tgt_vocab, src_transform, _, special_symbols = get_data(opts)
model.load_state_dict(torch.load(opts.logging_dir + "last.pt"))
model.eval()
for sentence, _ in Multi30k(split="valid", language_pair=(opts.src, opts.tgt)):
    src = src_transform(sentence.rstrip("\\n")).view(-1, 1)
    num_tokens = src.shape[0]
    src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
    tgt_tokens = greedy_decode(
        model, src, src_mask, max_len=num_tokens+5, start_symbol=special_symbols["<bos>"], end_symbol=special_symbols["<eos>"]
    ).flatten()
    record(tgt_tokens.tolist(), None)
"""


@pytest.mark.filterwarnings("ignore:.*(nested_tensor|mismatched key_padding_mask).*")
def test_the_language_translation_example_ports_changing_only_the_gradient_lines(
    monkeypatch, tmp_path
):
    """nn.Transformer (encoder and decoder stacks, post-norm) with a float causal mask, a
    bool source mask and bool padding masks, an ignore_index cross entropy, Adam with the
    paper's betas; then greedy decoding through ``transformer.encoder``/``decoder``."""
    ours = run_both(_run_translation, TRANSLATION_SOURCE, TRANSLATION_PORT,
                    monkeypatch=monkeypatch, tmp_path=tmp_path)  # fmt: skip
    assert len(ours) == 2 * (2 + 1) + 3  # per epoch: 2 steps, the losses; 3 translations


# -- imagenet/main.py ------------------------------------------------------------------------------
IMAGENET_SOURCE = r'''
best_acc1 = 0


def main_worker(gpu, ngpus_per_node, args):
    global best_acc1
    args.gpu = gpu

    use_accel = not args.no_accel and torch.accelerator.is_available()

    if use_accel:
        if args.gpu is not None:
            torch.accelerator.set_device_index(args.gpu)
        device = torch.accelerator.current_accelerator()
    else:
        device = torch.device("cpu")

    if args.distributed:
        if args.dist_url == "env://" and args.rank == -1:
            args.rank = int(os.environ["RANK"])
        if args.multiprocessing_distributed:
            # For multiprocessing distributed training, rank needs to be the
            # global rank among all the processes
            args.rank = args.rank * ngpus_per_node + gpu
        dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                                world_size=args.world_size, rank=args.rank)
    # create model
    if args.pretrained:
        print("=> using pre-trained model '{}'".format(args.arch))
        model = models.__dict__[args.arch](pretrained=True)
    else:
        print("=> creating model '{}'".format(args.arch))
        model = models.__dict__[args.arch]()

    if not use_accel:
        print('using CPU, this will be slow')
    elif args.distributed:
        # For multiprocessing distributed, DistributedDataParallel constructor
        # should always set the single device scope, otherwise,
        # DistributedDataParallel will use all available devices.
        if device.type == 'cuda':
            if args.gpu is not None:
                torch.cuda.set_device(args.gpu)
                model.cuda(device)
                # When using a single GPU per process and per
                # DistributedDataParallel, we need to divide the batch size
                # ourselves based on the total number of GPUs of the current node.
                args.batch_size = int(args.batch_size / ngpus_per_node)
                args.workers = int((args.workers + ngpus_per_node - 1) / ngpus_per_node)
                model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
            else:
                model.cuda()
                # DistributedDataParallel will divide and allocate batch_size to all
                # available GPUs if device_ids are not set
                model = torch.nn.parallel.DistributedDataParallel(model)
    elif device.type == 'cuda':
        # DataParallel will divide and allocate batch_size to all available GPUs
        if args.arch.startswith('alexnet') or args.arch.startswith('vgg'):
            model.features = torch.nn.DataParallel(model.features)
            model.cuda()
        else:
            model = torch.nn.DataParallel(model).cuda()
    else:
        model.to(device)


    # define loss function (criterion), optimizer, and learning rate scheduler
    criterion = nn.CrossEntropyLoss().to(device)

    optimizer = torch.optim.SGD(model.parameters(), args.lr,
                                momentum=args.momentum,
                                weight_decay=args.weight_decay)
    
    """Sets the learning rate to the initial LR decayed by 10 every 30 epochs"""
    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)
    
    # optionally resume from a checkpoint
    if args.resume:
        if os.path.isfile(args.resume):
            print("=> loading checkpoint '{}'".format(args.resume))
            if args.gpu is None:
                checkpoint = torch.load(args.resume)
            else:
                # Map model to be loaded to specified single gpu.
                loc = f'{device.type}:{args.gpu}'
                checkpoint = torch.load(args.resume, map_location=loc)
            args.start_epoch = checkpoint['epoch']
            best_acc1 = checkpoint['best_acc1']
            if args.gpu is not None:
                # best_acc1 may be from a checkpoint from a different GPU
                best_acc1 = best_acc1.to(args.gpu)
            model.load_state_dict(checkpoint['state_dict'])
            optimizer.load_state_dict(checkpoint['optimizer'])
            scheduler.load_state_dict(checkpoint['scheduler'])
            print("=> loaded checkpoint '{}' (epoch {})"
                  .format(args.resume, checkpoint['epoch']))
        else:
            print("=> no checkpoint found at '{}'".format(args.resume))


    # Data loading code
    if args.dummy:
        print("=> Dummy data is used!")
        train_dataset = datasets.FakeData(1281167, (3, 224, 224), 1000, transforms.ToTensor())
        val_dataset = datasets.FakeData(50000, (3, 224, 224), 1000, transforms.ToTensor())
    else:
        traindir = os.path.join(args.data, 'train')
        valdir = os.path.join(args.data, 'val')
        normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406],
                                     std=[0.229, 0.224, 0.225])

        train_dataset = datasets.ImageFolder(
            traindir,
            transforms.Compose([
                transforms.RandomResizedCrop(224),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                normalize,
            ]))

        val_dataset = datasets.ImageFolder(
            valdir,
            transforms.Compose([
                transforms.Resize(256),
                transforms.CenterCrop(224),
                transforms.ToTensor(),
                normalize,
            ]))

    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
        val_sampler = torch.utils.data.distributed.DistributedSampler(val_dataset, shuffle=False, drop_last=True)
    else:
        train_sampler = None
        val_sampler = None

    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=(train_sampler is None),
        num_workers=args.workers, pin_memory=True, sampler=train_sampler)

    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=args.batch_size, shuffle=False,
        num_workers=args.workers, pin_memory=True, sampler=val_sampler)

    if args.evaluate:
        validate(val_loader, model, criterion, args)
        return

    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)

        # train for one epoch
        train(train_loader, model, criterion, optimizer, epoch, device, args)

        # evaluate on validation set
        acc1 = validate(val_loader, model, criterion, args)
        record(float(acc1), None)
        
        scheduler.step()
        
        # remember best acc@1 and save checkpoint
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)

        if not args.multiprocessing_distributed or (args.multiprocessing_distributed
                and args.rank % ngpus_per_node == 0):
            save_checkpoint({
                'epoch': epoch + 1,
                'arch': args.arch,
                'state_dict': model.state_dict(),
                'best_acc1': best_acc1,
                'optimizer' : optimizer.state_dict(),
                'scheduler' : scheduler.state_dict()
            }, is_best)


def train(train_loader, model, criterion, optimizer, epoch, device, args):
    
    use_accel = not args.no_accel and torch.accelerator.is_available()

    batch_time = AverageMeter('Time', use_accel, ':6.3f', Summary.NONE)
    data_time = AverageMeter('Data', use_accel, ':6.3f', Summary.NONE)
    losses = AverageMeter('Loss', use_accel, ':.4e', Summary.NONE)
    top1 = AverageMeter('Acc@1', use_accel, ':6.2f', Summary.NONE)
    top5 = AverageMeter('Acc@5', use_accel, ':6.2f', Summary.NONE)
    progress = ProgressMeter(
        len(train_loader),
        [batch_time, data_time, losses, top1, top5],
        prefix="Epoch: [{}]".format(epoch))

    # switch to train mode
    model.train()

    end = time.time()
    for i, (images, target) in enumerate(train_loader):
        # measure data loading time
        data_time.update(time.time() - end)

        # move data to the same device as model
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)

        # compute output
        output = model(images)
        loss = criterion(output, target)

        # measure accuracy and record loss
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0], images.size(0))
        top5.update(acc5[0], images.size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record(loss.item(), model)

        # measure elapsed time
        batch_time.update(time.time() - end)
        end = time.time()

        if i % args.print_freq == 0:
            progress.display(i + 1)


def validate(val_loader, model, criterion, args):

    use_accel = not args.no_accel and torch.accelerator.is_available()

    def run_validate(loader, base_progress=0):

        if use_accel:
            device = torch.accelerator.current_accelerator()
        else:
            device = torch.device("cpu")

        with torch.no_grad():
            end = time.time()
            for i, (images, target) in enumerate(loader):
                i = base_progress + i
                if use_accel:
                    if args.gpu is not None and device.type=='cuda':
                        torch.accelerator.set_device_index(args.gpu)
                        images = images.cuda(args.gpu, non_blocking=True)
                        target = target.cuda(args.gpu, non_blocking=True)
                    else:
                        images = images.to(device)
                        target = target.to(device)

                # compute output
                output = model(images)
                loss = criterion(output, target)

                # measure accuracy and record loss
                acc1, acc5 = accuracy(output, target, topk=(1, 5))
                losses.update(loss.item(), images.size(0))
                top1.update(acc1[0], images.size(0))
                top5.update(acc5[0], images.size(0))

                # measure elapsed time
                batch_time.update(time.time() - end)
                end = time.time()

                if i % args.print_freq == 0:
                    progress.display(i + 1)

    batch_time = AverageMeter('Time', use_accel, ':6.3f', Summary.NONE)
    losses = AverageMeter('Loss', use_accel, ':.4e', Summary.NONE)
    top1 = AverageMeter('Acc@1', use_accel, ':6.2f', Summary.AVERAGE)
    top5 = AverageMeter('Acc@5', use_accel, ':6.2f', Summary.AVERAGE)
    progress = ProgressMeter(
        len(val_loader) + (args.distributed and (len(val_loader.sampler) * args.world_size < len(val_loader.dataset))),
        [batch_time, losses, top1, top5],
        prefix='Test: ')

    # switch to evaluate mode
    model.eval()

    run_validate(val_loader)
    if args.distributed:
        top1.all_reduce()
        top5.all_reduce()

    if args.distributed and (len(val_loader.sampler) * args.world_size < len(val_loader.dataset)):
        aux_val_dataset = Subset(val_loader.dataset,
                                 range(len(val_loader.sampler) * args.world_size, len(val_loader.dataset)))
        aux_val_loader = torch.utils.data.DataLoader(
            aux_val_dataset, batch_size=args.batch_size, shuffle=False,
            num_workers=args.workers, pin_memory=True)
        run_validate(aux_val_loader, len(val_loader))

    progress.display_summary()

    return top1.avg


def save_checkpoint(state, is_best, filename='checkpoint.pth.tar'):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, 'model_best.pth.tar')

class Summary(Enum):
    NONE = 0
    AVERAGE = 1
    SUM = 2
    COUNT = 3

class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self, name, use_accel, fmt=':f', summary_type=Summary.AVERAGE):
        self.name = name
        self.use_accel = use_accel
        self.fmt = fmt
        self.summary_type = summary_type
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def all_reduce(self):    
        if self.use_accel:
            device = torch.accelerator.current_accelerator()
        else:
            device = torch.device("cpu")
        total = torch.tensor([self.sum, self.count], dtype=torch.float32, device=device)
        dist.all_reduce(total, dist.ReduceOp.SUM, async_op=False)
        self.sum, self.count = total.tolist()
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = '{name} {val' + self.fmt + '} ({avg' + self.fmt + '})'
        return fmtstr.format(**self.__dict__)
    
    def summary(self):
        fmtstr = ''
        if self.summary_type is Summary.NONE:
            fmtstr = ''
        elif self.summary_type is Summary.AVERAGE:
            fmtstr = '{name} {avg:.3f}'
        elif self.summary_type is Summary.SUM:
            fmtstr = '{name} {sum:.3f}'
        elif self.summary_type is Summary.COUNT:
            fmtstr = '{name} {count:.3f}'
        else:
            raise ValueError('invalid summary type %r' % self.summary_type)
        
        return fmtstr.format(**self.__dict__)


class ProgressMeter(object):
    def __init__(self, num_batches, meters, prefix=""):
        self.batch_fmtstr = self._get_batch_fmtstr(num_batches)
        self.meters = meters
        self.prefix = prefix

    def display(self, batch):
        entries = [self.prefix + self.batch_fmtstr.format(batch)]
        entries += [str(meter) for meter in self.meters]
        print('\t'.join(entries))
        
    def display_summary(self):
        entries = [" *"]
        entries += [meter.summary() for meter in self.meters]
        print(' '.join(entries))

    def _get_batch_fmtstr(self, num_batches):
        num_digits = len(str(num_batches // 1))
        fmt = '{:' + str(num_digits) + 'd}'
        return '[' + fmt + '/' + fmt.format(num_batches) + ']'

def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res
'''

IMAGENET_PORT = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def _run_imagenet(lib, source, torch_state, monkeypatch, tmp_path):
    """``main_worker`` as ``main()`` calls it on one CPU process; torchvision's stand-ins: a
    small CNN for ``models.__dict__[args.arch]`` (torch's weights in the port) and
    ``FakeData`` of one training batch (so the loader's shuffle leaves each step's mean loss
    as it is) and two validation batches."""
    records: list = []
    made: dict = {}
    nn = lib.nn

    def tiny():
        model = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(inplace=True),
            nn.MaxPool2d(2), nn.Conv2d(6, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(8, 10),
        ).double()  # fmt: skip
        if torch_state is not None:
            model.load_state_dict(torch_state)
        made["initial"] = state_of(model)
        return model

    def fake_data(size, image_size, num_classes, transform):
        count, seed = (6, 61) if size > 100000 else (12, 71)  # a seed where acc@1 > 0
        rng = np.random.default_rng(seed)
        images = rng.standard_normal((count, image_size[0], 8, 8))
        return lib.utils.data.TensorDataset(
            lib.tensor(images), lib.tensor(rng.integers(0, 10, count))
        )

    args = types.SimpleNamespace(
        arch="tiny", pretrained=False, no_accel=True, distributed=False, lr=0.1, momentum=0.9,
        weight_decay=1e-4, resume="", dummy=True, batch_size=6, workers=0, evaluate=False,
        start_epoch=0, epochs=2, print_freq=1, multiprocessing_distributed=False, rank=0, gpu=None,
    )  # fmt: skip
    ours, theirs = namespaces(
        models=types.SimpleNamespace(tiny=tiny),
        datasets=types.SimpleNamespace(FakeData=fake_data),
        transforms=types.SimpleNamespace(ToTensor=lambda: None),
        StepLR=lib.optim.lr_scheduler.StepLR,
        Subset=lib.utils.data.Subset,
        Enum=__import__("enum").Enum,
        os=__import__("os"),
        shutil=__import__("shutil"),
        time=__import__("time"),
        record=lambda value, model: records.append(
            (value, None if model is None else state_of(model))
        ),
    )
    namespace = ours if lib is rg else theirs
    (tmp_path / lib.__name__).mkdir()
    monkeypatch.chdir(tmp_path / lib.__name__)
    exec(compile(source, "imagenet_main.py", "exec"), namespace)
    namespace["main_worker"](None, 1, args)
    for name in ("checkpoint.pth.tar", "model_best.pth.tar"):
        checkpoint = lib.load(name)
        momentum = [
            np.asarray(s["momentum_buffer"]) for s in checkpoint["optimizer"]["state"].values()
        ]
        records.append(([checkpoint["epoch"], float(checkpoint["best_acc1"])], None))
        records.append((np.concatenate([m.ravel() for m in momentum]), None))
        records.append((0.0, {k: np.asarray(v) for k, v in checkpoint["state_dict"].items()}))
        records.append(
            ([checkpoint["scheduler"]["last_epoch"], *checkpoint["scheduler"]["base_lrs"]], None)
        )
    return made["initial"], records


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")
def test_the_imagenet_example_ports_changing_only_the_gradient_lines(monkeypatch, tmp_path):
    """``main_worker``'s single-process CPU path: SGD with momentum and weight decay, StepLR,
    ``AverageMeter`` summing 0-d tensors and formatting them (``'{val:6.2f}'``), top-k
    accuracy (``topk``, ``t()``, ``expand_as``, ``mul_``), ``acc1 > best_acc1``, and the
    checkpoint (state, optimizer and scheduler state) saved and copied."""
    ours = run_both(_run_imagenet, IMAGENET_SOURCE, IMAGENET_PORT, monkeypatch=monkeypatch,
                    tmp_path=tmp_path)  # fmt: skip
    assert len(ours) == 2 * (1 + 1) + 2 * 4  # per epoch: the step, acc@1; two checkpoints


# -- legacy/snli (model.py, train.py) --------------------------------------------------------------
SNLI_SOURCE = r"""
# -- model.py --
class Bottle(nn.Module):

    def forward(self, input):
        if len(input.size()) <= 2:
            return super(Bottle, self).forward(input)
        size = input.size()[:2]
        out = super(Bottle, self).forward(input.view(size[0]*size[1], -1))
        return out.view(size[0], size[1], -1)


class Linear(Bottle, nn.Linear):
    pass


class Encoder(nn.Module):

    def __init__(self, config):
        super(Encoder, self).__init__()
        self.config = config
        input_size = config.d_proj if config.projection else config.d_embed
        dropout = 0 if config.n_layers == 1 else config.dp_ratio
        self.rnn = nn.LSTM(input_size=input_size, hidden_size=config.d_hidden,
                        num_layers=config.n_layers, dropout=dropout,
                        bidirectional=config.birnn)

    def forward(self, inputs):
        batch_size = inputs.size()[1]
        state_shape = self.config.n_cells, batch_size, self.config.d_hidden
        h0 = c0 = inputs.new_zeros(state_shape)
        outputs, (ht, ct) = self.rnn(inputs, (h0, c0))
        return ht[-1] if not self.config.birnn else ht[-2:].transpose(0, 1).contiguous().view(batch_size, -1)


class SNLIClassifier(nn.Module):

    def __init__(self, config):
        super(SNLIClassifier, self).__init__()
        self.config = config
        self.embed = nn.Embedding(config.n_embed, config.d_embed)
        self.projection = Linear(config.d_embed, config.d_proj)
        self.encoder = Encoder(config)
        self.dropout = nn.Dropout(p=config.dp_ratio)
        self.relu = nn.ReLU()
        seq_in_size = 2*config.d_hidden
        if self.config.birnn:
            seq_in_size *= 2
        lin_config = [seq_in_size]*2
        self.out = nn.Sequential(
            Linear(*lin_config),
            self.relu,
            self.dropout,
            Linear(*lin_config),
            self.relu,
            self.dropout,
            Linear(*lin_config),
            self.relu,
            self.dropout,
            Linear(seq_in_size, config.d_out))

    def forward(self, batch):
        prem_embed = self.embed(batch.premise)
        hypo_embed = self.embed(batch.hypothesis)
        if self.config.fix_emb:
            prem_embed = prem_embed.detach()
            hypo_embed = hypo_embed.detach()
        if self.config.projection:
            prem_embed = self.relu(self.projection(prem_embed))
            hypo_embed = self.relu(self.projection(hypo_embed))
        premise = self.encoder(prem_embed)
        hypothesis = self.encoder(hypo_embed)
        scores = self.out(torch.cat([premise, hypothesis], 1))
        return scores


# -- train.py --
config = args
config.n_embed = len(inputs.vocab)
config.d_out = len(answers.vocab)
config.n_cells = config.n_layers

# double the number of cells for bidirectional networks
if config.birnn:
    config.n_cells *= 2

if args.resume_snapshot:
    model = torch.load(args.resume_snapshot, map_location=device)
else:
    model = SNLIClassifier(config)
    if args.word_vectors:
        model.embed.weight.data.copy_(inputs.vocab.vectors)
        model.to(device)

# -- (the harness: the model made, float64, torch's weights) --
criterion = nn.CrossEntropyLoss()
opt = O.Adam(model.parameters(), lr=args.lr)

iterations = 0
start = time.time()
best_dev_acc = -1
header = '  Time Epoch Iteration Progress    (%Epoch)   Loss   Dev/Loss     Accuracy  Dev/Accuracy'
dev_log_template = ' '.join('{:>6.0f},{:>5.0f},{:>9.0f},{:>5.0f}/{:<5.0f} {:>7.0f}%,{:>8.6f},{:8.6f},{:12.4f},{:12.4f}'.split(','))
log_template =     ' '.join('{:>6.0f},{:>5.0f},{:>9.0f},{:>5.0f}/{:<5.0f} {:>7.0f}%,{:>8.6f},{},{:12.4f},{}'.split(','))
makedirs(args.save_path)
print(header)

for epoch in range(args.epochs):
    train_iter.init_epoch()
    n_correct, n_total = 0, 0
    for batch_idx, batch in enumerate(train_iter):

        # switch model to training mode, clear gradient accumulators
        model.train(); opt.zero_grad()

        iterations += 1

        # forward pass
        answer = model(batch)

        # calculate accuracy of predictions in the current batch
        n_correct += (torch.max(answer, 1)[1].view(batch.label.size()) == batch.label).sum().item()
        n_total += batch.batch_size
        train_acc = 100. * n_correct/n_total

        # calculate loss of the network output with respect to training labels
        loss = criterion(answer, batch.label)

        # backpropagate and update optimizer learning rate
        loss.backward(); opt.step()
        record(loss.item(), model)

        # checkpoint model periodically
        if iterations % args.save_every == 0:
            snapshot_prefix = os.path.join(args.save_path, 'snapshot')
            snapshot_path = snapshot_prefix + '_acc_{:.4f}_loss_{:.6f}_iter_{}_model.pt'.format(train_acc, loss.item(), iterations)
            torch.save(model, snapshot_path)
            for f in glob.glob(snapshot_prefix + '*'):
                if f != snapshot_path:
                    os.remove(f)

        # evaluate performance on validation set periodically
        if iterations % args.dev_every == 0:

            # switch model to evaluation mode
            model.eval(); dev_iter.init_epoch()

            # calculate accuracy on validation set
            n_dev_correct, dev_loss = 0, 0
            with torch.no_grad():
                for dev_batch_idx, dev_batch in enumerate(dev_iter):
                     answer = model(dev_batch)
                     n_dev_correct += (torch.max(answer, 1)[1].view(dev_batch.label.size()) == dev_batch.label).sum().item()
                     dev_loss = criterion(answer, dev_batch.label)
            dev_acc = 100. * n_dev_correct / len(dev)
            record([dev_acc, dev_loss.item()], None)

            print(dev_log_template.format(time.time()-start,
                epoch, iterations, 1+batch_idx, len(train_iter),
                100. * (1+batch_idx) / len(train_iter), loss.item(), dev_loss.item(), train_acc, dev_acc))

            # update best validation set accuracy
            if dev_acc > best_dev_acc:

                # found a model with better validation set accuracy

                best_dev_acc = dev_acc
                snapshot_prefix = os.path.join(args.save_path, 'best_snapshot')
                snapshot_path = snapshot_prefix + '_devacc_{}_devloss_{}__iter_{}_model.pt'.format(dev_acc, dev_loss.item(), iterations)

                # save model, delete previous 'best_snapshot' files
                torch.save(model, snapshot_path)
                for f in glob.glob(snapshot_prefix + '*'):
                    if f != snapshot_path:
                        os.remove(f)

        elif iterations % args.log_every == 0:

            # print progress message
            print(log_template.format(time.time()-start,
                epoch, iterations, 1+batch_idx, len(train_iter),
                100. * (1+batch_idx) / len(train_iter), loss.item(), ' '*8, n_correct/n_total*100, ' '*12))
        if args.dry_run:
            break
"""

SNLI_PORT = [
    ("        loss.backward(); opt.step()\n", "        grads = loss.backward(); opt.step(grads)\n")
]


class BucketIterator:
    """torchtext's legacy ``BucketIterator`` stood in for: fixed batches with ``premise`` and
    ``hypothesis`` ``[length, batch]`` and ``label`` ``[batch]``."""

    def __init__(self, batches):
        self.batches = batches

    def init_epoch(self):
        pass

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def _run_snli(lib, source, torch_state, monkeypatch, tmp_path):
    rng = np.random.default_rng(59)
    words, batch = 12, 3

    def batches(count):
        return [
            types.SimpleNamespace(
                premise=lib.tensor(rng.integers(0, words, (int(rng.integers(3, 6)), batch))),
                hypothesis=lib.tensor(rng.integers(0, words, (int(rng.integers(3, 6)), batch))),
                label=lib.tensor(rng.integers(0, 3, batch)), batch_size=batch,
            )
            for _ in range(count)
        ]  # fmt: skip

    vectors = rng.standard_normal((words, 6))
    records: list = []
    args = types.SimpleNamespace(
        epochs=2, d_embed=6, d_proj=5, d_hidden=4, n_layers=1, log_every=1, lr=1e-2,
        dev_every=3, save_every=2, dp_ratio=0.2, birnn=True, lower=True, projection=True,
        fix_emb=True, gpu=0, save_path=str(tmp_path / lib.__name__ / "results"),
        word_vectors="glove.6B.100d", resume_snapshot="", dry_run=False,
    )  # fmt: skip
    dev = batches(2)
    ours, theirs = namespaces(
        args=args,
        device=lib.device("cpu"),
        answers=types.SimpleNamespace(vocab=["<unk>", "entailment", "neutral", "contradiction"]),
        train_iter=BucketIterator(batches(3)),
        dev_iter=BucketIterator(dev),
        dev=[None] * (batch * len(dev)),
        O=lib.optim,
        os=__import__("os"),
        glob=__import__("glob"),
        time=__import__("time"),
        makedirs=lambda name: __import__("os").makedirs(name, exist_ok=True),
        record=lambda value, model: records.append(
            (value, None if model is None else state_of(model))
        ),
    )
    namespace = ours if lib is rg else theirs
    namespace["inputs"] = types.SimpleNamespace(vocab=_VocabWithVectors(words, lib.tensor(vectors)))
    script = types.ModuleType(f"snli_on_{lib.__name__}")  # whole-model snapshots pickle its classes
    script.__dict__.update(namespace)
    monkeypatch.setitem(sys.modules, script.__name__, script)
    definitions, loop = source.split(
        "# -- (the harness: the model made, float64, torch's weights) --\n"
    )
    exec(compile(definitions, "snli.py", "exec"), script.__dict__)
    model = script.model.double()
    embedded = np.asarray(model.embed.weight.detach())
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    Masks(37).patch(monkeypatch, lib)
    exec(compile(loop, "snli.py", "exec"), script.__dict__)
    records.append((embedded, None))  # the word vectors, copied in through ``weight.data``
    (best,) = __import__("glob").glob(args.save_path + "/best_snapshot*")
    records.append((0.0, state_of(lib.load(best, weights_only=False))))
    return initial, records


class _VocabWithVectors(list):
    def __init__(self, size, vectors):
        super().__init__(range(size))
        self.vectors = vectors


def test_the_snli_example_ports_changing_only_the_gradient_lines(monkeypatch, tmp_path):
    """``class Linear(Bottle, nn.Linear)`` (a mixin whose ``forward`` calls
    ``super().forward``), a bidirectional LSTM from ``new_zeros`` states, ``ht[-2:]``
    transposed, one ``ReLU`` and one ``Dropout`` shared across a ``Sequential``, frozen
    (detached) embeddings copied in through ``weight.data.copy_``, and whole-model
    ``torch.save`` snapshots loaded back."""
    ours = run_both(_run_snli, SNLI_SOURCE, SNLI_PORT, monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert len(ours) == 2 * 3 + 2 + 2  # 3 steps an epoch, 2 dev evaluations, the vectors, the best


# -- regression/main.py ----------------------------------------------------------------------------
REGRESSION_SOURCE = r'''
POLY_DEGREE = 4
W_target = torch.randn(POLY_DEGREE, 1) * 5
b_target = torch.randn(1) * 5


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE+1)], 1)


def f(x):
    """Approximated function."""
    return x.mm(W_target) + b_target.item()


def poly_desc(W, b):
    """Creates a string description of a polynomial."""
    result = 'y = '
    for i, w in enumerate(W):
        result += '{:+.2f} x^{} '.format(w, i + 1)
    result += '{:+.2f}'.format(b[0])
    return result


def get_batch(batch_size=32):
    """Builds a batch i.e. (x, f(x)) pair."""
    random = torch.randn(batch_size)
    x = make_features(random)
    y = f(x)
    return x, y


# Define model
fc = torch.nn.Linear(W_target.size(0), 1)
# -- (the harness: the model made, float64, torch's weights) --

for batch_idx in count(1):
    # Get data
    batch_x, batch_y = get_batch()

    # Reset gradients
    fc.zero_grad()

    # Forward pass
    output = F.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()

    # Backward pass
    output.backward()

    # Apply gradients
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
    record(loss, fc)

    # Stop criterion
    if loss < 1e-3:
        break

print('Loss: {:.6f} after {} batches'.format(loss, batch_idx))
print('==> Learned function:\t' + poly_desc(fc.weight.view(-1), fc.bias))
print('==> Actual function:\t' + poly_desc(W_target.view(-1), b_target))
'''

REGRESSION_PORT = [
    ("    output.backward()\n", "    grads = output.backward()\n"),
    (
        "        param.data.add_(-0.1 * param.grad)\n",
        "        param.data.add_(-0.1 * param.grad(grads))\n",
    ),
]


def _run_regression(lib, source, torch_state, monkeypatch, printed):
    records: list = []
    Stream(71).patch(monkeypatch, lib)  # ``torch.randn``: the target and every batch
    ours, theirs = namespaces(
        count=lambda start: range(start, start + 25),
        record=lambda value, model: records.append((value, state_of(model))),
        print=lambda *args: printed.setdefault(lib.__name__, []).append(" ".join(map(str, args))),
    )
    namespace = ours if lib is rg else theirs
    definitions, loop = source.split(
        "# -- (the harness: the model made, float64, torch's weights) --\n"
    )
    exec(compile(definitions, "regression_main.py", "exec"), namespace)
    model = namespace["fc"].double()
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    exec(compile(loop, "regression_main.py", "exec"), namespace)
    return initial, records


def test_the_regression_example_ports_changing_only_the_gradient_lines(monkeypatch):
    """Plain gradient descent written on ``param.data`` (``add_`` of ``-0.1 * param.grad``,
    the gradient read as ``param.grad(grads)``), ``fc.zero_grad()``, ``x ** i`` features,
    ``smooth_l1_loss``, and ``'{:+.2f}'`` formatting of 0-d tensors in ``poly_desc``."""
    printed: dict = {}
    ours = run_both(_run_regression, REGRESSION_SOURCE, REGRESSION_PORT,
                    monkeypatch=monkeypatch, printed=printed)  # fmt: skip
    assert len(ours) == 25
    assert printed["retrograd"] == printed["torch"] and len(printed["torch"]) == 3
    assert printed["torch"][1].startswith("==> Learned function:\ty = ")


# -- word_language_model/generate.py ---------------------------------------------------------------
WORD_LANGUAGE_MODEL_SOURCE = r'''
class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            try:
                nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            except KeyError as e:
                raise ValueError( """An invalid option for `--model` was supplied,
                                 options are ['LSTM', 'GRU', 'RNN_TANH' or 'RNN_RELU']""") from e
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

        # Optionally tie weights as in:
        # "Using the Output Embedding to Improve Language Models" (Press & Wolf 2016)
        # https://arxiv.org/abs/1608.05859
        # and
        # "Tying Word Vectors and Word Classifiers: A Loss Framework for Language Modeling" (Inan et al. 2016)
        # https://arxiv.org/abs/1611.01462
        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)

# Temporarily leave PositionalEncoding module here. Will be moved somewhere else.
class PositionalEncoding(nn.Module):
    r"""Inject some information about the relative or absolute position of the tokens in the sequence.
        The positional encodings have the same dimension as the embeddings, so that the two can be summed.
        Here, we use sine and cosine functions of different frequencies.
    .. math:
        \text{PosEncoder}(pos, 2i) = sin(pos/10000^(2i/d_model))
        \text{PosEncoder}(pos, 2i+1) = cos(pos/10000^(2i/d_model))
        \text{where pos is the word position and i is the embed idx)
    Args:
        d_model: the embed dim (required).
        dropout: the dropout value (default=0.1).
        max_len: the max. length of the incoming sequence (default=5000).
    Examples:
        >>> pos_encoder = PositionalEncoding(d_model)
    """

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        r"""Inputs of forward function
        Args:
            x: the sequence fed to the positional encoder model (required).
        Shape:
            x: [sequence length, batch size, embed dim]
            output: [sequence length, batch size, embed dim]
        Examples:
            >>> output = pos_encoder(x)
        """

        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)

class TransformerModel(nn.Transformer):
    """Container module with an encoder, a recurrent or transformer module, and a decoder."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super(TransformerModel, self).__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers)
        self.model_type = 'Transformer'
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)

        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz,sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None

        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)
'''

GENERATE_SOURCE = r"""
torch.manual_seed(args.seed)

if args.accel and torch.accelerator.is_available():
    device = torch.accelerator.current_accelerator()

else:
    device = torch.device("cpu")

if args.temperature < 1e-3:
    parser.error("--temperature has to be greater or equal 1e-3.")

with open(args.checkpoint, 'rb') as f:
    safe_globals = [
        PositionalEncoding,
        RNNModel,
        TransformerModel,
        torch.nn.functional.relu,
        torch.nn.modules.activation.MultiheadAttention,
        torch.nn.modules.container.ModuleList,
        torch.nn.modules.dropout.Dropout,
        torch.nn.modules.linear.Linear,
        torch.nn.modules.linear.NonDynamicallyQuantizableLinear,
        torch.nn.modules.normalization.LayerNorm,
        torch.nn.modules.sparse.Embedding,
        torch.nn.modules.rnn.GRU,
        torch.nn.modules.rnn.LSTM,
        torch.nn.modules.rnn.RNN,
        torch.nn.modules.transformer.TransformerEncoder,
        torch.nn.modules.transformer.TransformerEncoderLayer,
    ]
    with torch.serialization.safe_globals(safe_globals):
        model = torch.load(f, map_location=device)
model.eval()

corpus = data.Corpus(args.data)
ntokens = len(corpus.dictionary)

is_transformer_model = hasattr(model, 'model_type') and model.model_type == 'Transformer'
if not is_transformer_model:
    hidden = model.init_hidden(1)
input = torch.randint(ntokens, (1, 1), dtype=torch.long).to(device)

with open(args.outf, 'w') as outf:
    with torch.no_grad():  # no tracking history
        for i in range(args.words):
            if is_transformer_model:
                output = model(input, False)
                word_weights = output[-1].squeeze().div(args.temperature).exp().cpu()
                word_idx = torch.multinomial(word_weights, 1)[0]
                word_tensor = torch.Tensor([[word_idx]]).long().to(device)
                input = torch.cat([input, word_tensor], 0)
            else:
                output, hidden = model(input, hidden)
                word_weights = output.squeeze().div(args.temperature).exp().cpu()
                word_idx = torch.multinomial(word_weights, 1)[0]
                input.fill_(word_idx)

            word = corpus.dictionary.idx2word[word_idx]
            record(word_weights.tolist(), None)

            outf.write(word + ('\n' if i % 20 == 19 else ' '))

            if i % args.log_interval == 0:
                print('| Generated {}/{} words'.format(i, args.words))
"""


class MultinomialDraws:
    """One seeded stream of uniforms for ``torch.multinomial(weights, 1)`` in both libraries:
    the index is where the draw falls in the normalized cumulative weights."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def patch(self, monkeypatch, lib):
        def multinomial(weights, num_samples, **_):
            p = np.asarray(weights, dtype=np.float64)
            u = self.rng.uniform()
            index = min(int((u > np.cumsum(p / p.sum())).sum()), p.size - 1)
            return lib.tensor([index])

        monkeypatch.setattr(lib, "multinomial", multinomial)


def _run_generate(lib, source, torch_state, monkeypatch, tmp_path, kind):
    """``main.py``'s checkpoint (the whole model, ``torch.save(model, f)``) of a model made
    from ``model.py``, then ``generate.py`` as it is: the model loaded back under
    ``torch.serialization.safe_globals`` and sampled from, word by word."""
    records: list = []
    folder = tmp_path / f"{lib.__name__}_{kind}"
    folder.mkdir()
    words = [f"w{i}" for i in range(15)]
    ours, theirs = namespaces(
        math=__import__("math"),
        args=types.SimpleNamespace(
            data="./data/wikitext-2",
            checkpoint=str(folder / "model.pt"),
            outf=str(folder / "generated.txt"),
            words=12,
            seed=1111,
            temperature=0.8,
            log_interval=4,
            accel=False,
        ),
        parser=types.SimpleNamespace(error=lambda message: pytest.fail(message)),
        data=types.SimpleNamespace(
            Corpus=lambda path: types.SimpleNamespace(dictionary=_Dictionary(words))
        ),
        record=lambda value, model: records.append((value, None)),
    )
    namespace = ours if lib is rg else theirs
    script = types.ModuleType(f"word_language_model_on_{lib.__name__}")  # the pickled classes' home
    script.__dict__.update(namespace)
    monkeypatch.setitem(sys.modules, script.__name__, script)
    exec(compile(WORD_LANGUAGE_MODEL_SOURCE, "model.py", "exec"), script.__dict__)
    if kind == "LSTM":
        model = script.RNNModel("LSTM", len(words), 8, 8, 2, dropout=0.2)
    else:
        model = script.TransformerModel(len(words), 8, 2, 16, 2, dropout=0.2)
    model = model.double()
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    with open(script.args.checkpoint, "wb") as f:  # main.py's ``torch.save(model, f)``
        lib.save(model, f)
    IntegerDraws(73).patch(monkeypatch, lib)
    MultinomialDraws(79).patch(monkeypatch, lib)
    exec(compile(source, "generate.py", "exec"), script.__dict__)
    records.append((0.0, None))
    with open(script.args.outf) as f:
        generated = f.read()
    return initial, records + [(float(len(generated.split())), None)], generated


class _Dictionary:
    def __init__(self, words):
        self.idx2word = words

    def __len__(self):
        return len(self.idx2word)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("kind", ["LSTM", "Transformer"])
def test_the_word_language_model_generate_script_ports_unchanged(monkeypatch, tmp_path, kind):
    """``generate.py`` has no gradient line: its text runs as it is. It loads a whole pickled
    model under ``torch.serialization.safe_globals`` (torch's module paths:
    ``nn.modules.activation.MultiheadAttention``, ``NonDynamicallyQuantizableLinear``...),
    ``init_hidden``'s ``new_zeros``, ``torch.randint(..., dtype=torch.long)``,
    ``div(temperature).exp()``, ``torch.multinomial(...)[0]`` (a 0-d tensor) used in
    ``input.fill_``, ``torch.Tensor([[word_idx]]).long()`` and as a list index; the
    TransformerModel is an ``nn.Transformer`` subclass replacing its ``decoder``."""
    torch.manual_seed(0)
    initial, theirs, their_text = _run_generate(
        torch, GENERATE_SOURCE, None, monkeypatch, tmp_path, kind
    )
    start, ours, our_text = _run_generate(
        rg, port(GENERATE_SOURCE, []), initial, monkeypatch, tmp_path, kind
    )
    for name, value in initial.items():
        np.testing.assert_array_equal(start[name], value)
    assert_records_agree(ours, theirs)
    assert our_text == their_text and len(our_text.split()) == 12
