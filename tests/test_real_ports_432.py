# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them: long lines, trailing spaces)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
early stopping as Bjarten/early-stopping-pytorch writes it (``early_stopping_pytorch/
early_stopping.py``'s ``EarlyStopping``) and trains with it (``MNIST_Early_Stopping_example
.ipynb``'s ``Net`` and ``train_model``), against torch's run of the same code from the same
weights and images.

- ``EarlyStopping.__call__``: the NaN check by ``np.isnan`` of the epoch's validation loss, the
  best loss with ``delta``, the patience counter and its trace messages, ``save_checkpoint``'s
  ``torch.save(model.state_dict(), self.path)`` into ``checkpoint.pt`` in the working directory
  whenever the loss improves;
- ``train_model``: Adam at its defaults on a three-layer MLP (``x.view(-1, 28 * 28)``,
  ``F.relu``, ``nn.Dropout``), ``np.average`` of the per-batch ``loss.item()`` values, the
  f-string progress lines with nested format specs (``{epoch:>{epoch_len}}``), the stop, and
  ``model.load_state_dict(torch.load('checkpoint.pt'))`` of the best epoch's weights at the end.

What stands in: MNIST by random 28x28 images with random labels (a model that can only
memorize, so the validation loss turns up and the patience runs out), split by the notebook's
``np.random.shuffle`` of indices but batched in that order (``SubsetRandomSampler`` would draw
each library's own order); the dropout rate is 0 (each library's own masks otherwise). The port
changes the import lines and the gradient lines; ``initialize`` gives it torch's weights. Both
run in float64 (the default dtype): Adam divides each weight's gradient by its own running
scale, so the weights whose summed gradient nearly cancels (a few of the 100,352 of ``fc1``)
follow float32's rounding noise. The checkpoint retrograd writes is also read back by torch's
own ``torch.load``.
"""

from __future__ import annotations

import random

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

EARLY_STOPPING_SOURCE = '''
# import libraries
import torch
import numpy as np

from torch.utils.data import Subset


def create_datasets(batch_size):

    # percentage of training set to use as validation
    valid_size = 0.2

    # choose the training and test datasets (random images in MNIST's shapes)
    train_data = torch.utils.data.TensorDataset(torch.rand(60, 1, 28, 28), torch.randint(0, 10, (60,)))

    test_data = torch.utils.data.TensorDataset(torch.rand(10, 1, 28, 28), torch.randint(0, 10, (10,)))

    # obtain training indices that will be used for validation
    num_train = len(train_data)
    indices = list(range(num_train))
    np.random.shuffle(indices)
    split = int(np.floor(valid_size * num_train))
    train_idx, valid_idx = indices[split:], indices[:split]
    
    # load training data in batches
    train_loader = torch.utils.data.DataLoader(Subset(train_data, train_idx),
                                               batch_size=batch_size,
                                               num_workers=0)
    
    # load validation data in batches
    valid_loader = torch.utils.data.DataLoader(Subset(train_data, valid_idx),
                                               batch_size=batch_size,
                                               num_workers=0)
    
    # load test data in batches
    test_loader = torch.utils.data.DataLoader(test_data,
                                              batch_size=batch_size,
                                              num_workers=0)
    
    return train_loader, test_loader, valid_loader


import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(28 * 28, 128)
        self.fc2 = nn.Linear(128, 128)
        self.fc3 = nn.Linear(128, 10)
        self.dropout = nn.Dropout(0.5)
    def forward(self, x):
        # flatten image input
        x = x.view(-1, 28 * 28)
        # add hidden layer, with relu activation function
        x = F.relu(self.fc1(x))
        x = self.dropout(x)
        # add hidden layer, with relu activation function
        x = F.relu(self.fc2(x))
        x = self.dropout(x)
        # add output layer
        x = self.fc3(x)
        return x

# initialize the NN
model = Net()
initialize(model)
model.dropout.p = 0.0  # (the runs' dropout masks would be each library's own draws)
print(model)

# specify loss function
criterion = nn.CrossEntropyLoss()

# specify optimizer
optimizer = torch.optim.Adam(model.parameters())


# early_stopping.py
class EarlyStopping:
    """Early stops the training if validation loss doesn't improve after a given patience."""
    def __init__(self, patience=7, verbose=False, delta=0, path='checkpoint.pt', trace_func=print):
        """
        Args:
            patience (int): How long to wait after last time validation loss improved.
                            Default: 7
            verbose (bool): If True, prints a message for each validation loss improvement.
                            Default: False
            delta (float): Minimum change in the monitored quantity to qualify as an improvement.
                            Default: 0
            path (str): Path for the checkpoint to be saved to.
                            Default: 'checkpoint.pt'
            trace_func (function): trace print function.
                            Default: print
        """
        self.patience = patience
        self.verbose = verbose
        self.counter = 0
        self.best_val_loss = None
        self.early_stop = False
        self.val_loss_min = np.inf
        self.delta = delta
        self.path = path
        self.trace_func = trace_func

    def __call__(self, val_loss, model):
        # Check if validation loss is nan
        if np.isnan(val_loss):
            self.trace_func("Validation loss is NaN. Ignoring this epoch.")
            return

        if self.best_val_loss is None:
            self.best_val_loss = val_loss
            self.save_checkpoint(val_loss, model)
        elif val_loss < self.best_val_loss - self.delta:
            # Significant improvement detected
            self.best_val_loss = val_loss
            self.save_checkpoint(val_loss, model)
            self.counter = 0  # Reset counter since improvement occurred
        else:
            # No significant improvement
            self.counter += 1
            self.trace_func(f'EarlyStopping counter: {self.counter} out of {self.patience}')
            if self.counter >= self.patience:
                self.early_stop = True

    def save_checkpoint(self, val_loss, model):
        \'\'\'Saves model when validation loss decreases.\'\'\'
        if self.verbose:
            self.trace_func(f'Validation loss decreased ({self.val_loss_min:.6f} --> {val_loss:.6f}).  Saving model ...')
        torch.save(model.state_dict(), self.path)
        self.val_loss_min = val_loss


def train_model(model, batch_size, patience, n_epochs):
    
    # to track the training loss as the model trains
    train_losses = []
    # to track the validation loss as the model trains
    valid_losses = []
    # to track the average training loss per epoch as the model trains
    avg_train_losses = []
    # to track the average validation loss per epoch as the model trains
    avg_valid_losses = [] 
    
    # initialize the early_stopping object
    early_stopping = EarlyStopping(patience=patience, verbose=True)
    
    for epoch in range(1, n_epochs + 1):

        ###################
        # train the model #
        ###################
        model.train() # prep model for training
        for batch, (data, target) in enumerate(train_loader, 1):
            # clear the gradients of all optimized variables
            optimizer.zero_grad()
            # forward pass: compute predicted outputs by passing inputs to the model
            output = model(data)
            # calculate the loss
            loss = criterion(output, target)
            # backward pass: compute gradient of the loss with respect to model parameters
            loss.backward()
            # perform a single optimization step (parameter update)
            optimizer.step()
            # record training loss
            train_losses.append(loss.item())

        ######################    
        # validate the model #
        ######################
        model.eval() # prep model for evaluation
        for data, target in valid_loader:
            # forward pass: compute predicted outputs by passing inputs to the model
            output = model(data)
            # calculate the loss
            loss = criterion(output, target)
            # record validation loss
            valid_losses.append(loss.item())

        # print training/validation statistics 
        # calculate average loss over an epoch
        train_loss = np.average(train_losses)
        valid_loss = np.average(valid_losses)
        avg_train_losses.append(train_loss)
        avg_valid_losses.append(valid_loss)
        
        epoch_len = len(str(n_epochs))
        
        print_msg = (f'[{epoch:>{epoch_len}}/{n_epochs:>{epoch_len}}] ' +
                     f'train_loss: {train_loss:.5f} ' +
                     f'valid_loss: {valid_loss:.5f}')
        
        print(print_msg)
        
        # clear lists to track next epoch
        train_losses = []
        valid_losses = []
        
        # early_stopping needs the validation loss to check if it has decresed, 
        # and if it has, it will make a checkpoint of the current model
        early_stopping(valid_loss, model)
        
        if early_stopping.early_stop:
            print("Early stopping")
            break
        
    # load the last checkpoint with the best model
    model.load_state_dict(torch.load('checkpoint.pt'))

    return  model, avg_train_losses, avg_valid_losses


batch_size = 16
n_epochs = 12

train_loader, test_loader, valid_loader = create_datasets(batch_size)

# early stopping patience; how long to wait after last time validation loss improved.
patience = 2

model, train_loss, valid_loss = train_model(model, batch_size, patience, n_epochs)
record.append(train_loss)
record.append(valid_loss)
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
'''

EARLY_STOPPING_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            loss.backward()\n            # perform a single optimization step (parameter update)\n            optimizer.step()\n",
        "            grads = loss.backward()\n            # perform a single optimization step (parameter update)\n            optimizer.step(grads)\n",
    ),
]


def test_early_stopping_example_stops_and_restores_the_best_checkpoint_as_torch(
    capsys, monkeypatch, tmp_path
):
    """The epochs' average losses, the printed progress and early-stopping lines, and the
    weights restored from the best epoch's checkpoint agree with torch's; torch reads the
    checkpoint retrograd wrote as the same weights."""
    torch.manual_seed(0)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        text = (
            EARLY_STOPPING_SOURCE
            if lib is torch
            else port(EARLY_STOPPING_SOURCE, EARLY_STOPPING_STEPS)
        )
        text = text.replace("from torch.", "from retrograd.") if lib is rg else text
        folder = tmp_path / lib.__name__
        folder.mkdir()
        monkeypatch.chdir(folder)
        np.random.seed(43201)
        random.seed(43201)
        record = []
        lib.set_default_dtype(lib.float64)
        try:
            with SharedDraws(lib, 43201):
                run_source(text, lib, record=record, initialize=initialize)
        finally:
            lib.set_default_dtype(lib.float32)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert "Early stopping" in logs[0] and "EarlyStopping counter: 2 out of 2" in logs[0]
    assert len(theirs[0]) < 12  # (it stopped)
    progress = [
        [line for line in log.splitlines() if line.startswith(("[", "Validation", "Early"))]
        for log in logs
    ]
    assert progress[1] == progress[0] and len(progress[0]) == 2 * len(theirs[0]) + 1
    assert_records_agree(ours, theirs, rtol=1e-9, atol=1e-11)
    written = torch.load(tmp_path / "retrograd" / "checkpoint.pt")
    assert list(written) == list(theirs[2])
    for name, value in written.items():
        assert isinstance(value, torch.Tensor)
        np.testing.assert_allclose(value.numpy(), theirs[2][name], rtol=1e-9, atol=1e-11)
