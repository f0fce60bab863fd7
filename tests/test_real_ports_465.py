# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them: long lines, trailing blanks)
"""Real PyTorch Jacobian regularization ported to retrograd (the harness:
``tests/real_ports.py``).

- facebookresearch/jacobian_regularizer (``jacobian/jacobian.py``'s ``JacobianReg`` and
  ``examples/mnist.py``'s ``MLP``, ``eval`` and ``main`` as written): the regularizer
  ``(1/2) tr |dy/dx|^2`` by random projections (``torch.randn(B,C)`` normalized by the
  deprecated ``torch.addcdiv(arxilirary_zero, 1.0, v, vnorm)`` overload, ``torch.norm(v, 2, 1,
  True)``) or, in ``eval``, exactly (``v=torch.zeros(B,C); v[:,ii]=1``), each a
  ``torch.autograd.grad(flat_y, x, flat_v, retain_graph=True, create_graph=True)`` with the
  gradient outputs given by position, on inputs made leaves by ``data.requires_grad = True``;
  ``C*torch.norm(Jv)**2 / (num_proj*B)`` summed from ``0``; SGD with momentum and weight decay
  on ``loss_super + lambda_JR*loss_JR`` (double backward through ReLU layers). MNIST is
  replaced by synthetic 8x8 digits in a ``TensorDataset`` read in order (``shuffle=False``:
  torch's shuffling draws from its own generator), the MLP is 32 wide, one epoch.

Both runs start from torch's weights (the MLP's ``xavier_uniform_``) and draw
``torch.randn`` from one stream.
"""

import numpy as np
import pytest
import torch
from tests.real_ports import (
    SharedDraws,
    assert_records_agree,
    global_streams_restored,  # noqa: F401  (a fixture)
    initializer,
    port,
    ported_imports,
    run_source,
)

import retrograd as rg

JACOBIAN_SOURCE = """
from __future__ import division
import torch
import torch.nn as nn
import torch.autograd as autograd


class JacobianReg(nn.Module):
    '''
    Loss criterion that computes the trace of the square of the Jacobian.

    Arguments:
        n (int, optional): determines the number of random projections.
            If n=-1, then it is set to the dimension of the output 
            space and projection is non-random and orthonormal, yielding 
            the exact result.  For any reasonable batch size, the default 
            (n=1) should be sufficient.
    '''
    def __init__(self, n=1):
        assert n == -1 or n > 0
        self.n = n
        super(JacobianReg, self).__init__()

    def forward(self, x, y):
        '''
        computes (1/2) tr |dy/dx|^2
        '''
        B,C = y.shape
        if self.n == -1:
            num_proj = C
        else:
            num_proj = self.n
        J2 = 0
        for ii in range(num_proj):
            if self.n == -1:
                # orthonormal vector, sequentially spanned
                v=torch.zeros(B,C)
                v[:,ii]=1
            else:
                # random properly-normalized vector for each sample
                v = self._random_vector(C=C,B=B)
            if x.is_cuda:
                v = v.to(x.device)
            Jv = self._jacobian_vector_product(y, x, v, create_graph=True)
            J2 += C*torch.norm(Jv)**2 / (num_proj*B)
        R = (1/2)*J2
        return R

    def _random_vector(self, C, B):
        '''
        creates a random vector of dimension C with a norm of C^(1/2)
        (as needed for the projection formula to work)
        '''
        if C == 1: 
            return torch.ones(B)
        v=torch.randn(B,C)
        arxilirary_zero=torch.zeros(B,C)
        vnorm=torch.norm(v, 2, 1,True)
        v=torch.addcdiv(arxilirary_zero, 1.0, v, vnorm)
        return v
                                                                            
    def _jacobian_vector_product(self, y, x, v, create_graph=False): 
        '''
        Produce jacobian-vector product dy/dx dot v.

        Note that if you want to differentiate it,
        you need to make create_graph=True
        '''                                                            
        flat_y = y.reshape(-1)
        flat_v = v.reshape(-1)
        grad_x, = torch.autograd.grad(flat_y, x, flat_v, 
                                        retain_graph=True, 
                                        create_graph=create_graph)
        return grad_x
"""

MNIST_SOURCE = """
from __future__ import division
import time
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

class MLP(nn.Module):
    '''
    Simple MLP to demonstrate Jacobian regularization.
    '''
    def __init__(self, in_channel=1, im_size=28, num_classes=10, 
                 fc_channel1=200, fc_channel2=200):
        super(MLP, self).__init__()
        
        # Parameter setup
        compression=in_channel*im_size*im_size
        self.compression=compression
        
        # Structure
        self.fc1 = nn.Linear(compression, fc_channel1)
        self.fc2 = nn.Linear(fc_channel1, fc_channel2)
        self.fc3 = nn.Linear(fc_channel2, num_classes)
        
        # Initialization protocol
        nn.init.xavier_uniform_(self.fc1.weight)
        nn.init.xavier_uniform_(self.fc2.weight)
        nn.init.xavier_uniform_(self.fc3.weight)
    
    def forward(self, x):
        x = x.view(-1, self.compression)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

def eval(device, model, loader, criterion, lambda_JR):
    correct = 0
    total = 0 
    loss_super_avg = 0 
    loss_JR_avg = 0 
    loss_avg = 0

    # for eval, let's compute the jacobian exactly
    # so n, the number of projections, is set to -1.
    reg_full = JacobianReg(n=-1) 
    for data, targets in loader:
        data = data.to(device)
        data.requires_grad = True # this is essential!
        targets = targets.to(device)
        output = model(data)
        _, predicted = torch.max(output, 1)
        correct += (predicted == targets).sum().item()
        total += targets.size(0)
        loss_super = criterion(output, targets) # supervised loss
        loss_JR = reg_full(data, output) # Jacobian regularization
        loss = loss_super + lambda_JR*loss_JR # full loss
        loss_super_avg += loss_super.item()*targets.size(0)
        loss_JR_avg += loss_JR.item()*targets.size(0)
        loss_avg += loss.item()*targets.size(0)
    loss_super_avg /= total
    loss_JR_avg /= total
    loss_avg /= total
    return correct, total, loss_super.item(), loss_JR.item(), loss.item()

def main():
    '''
    Train MNIST with Jacobian regularization.
    '''
    seed = 1
    batch_size = 16
    epochs = 1

    lambda_JR = .1

    # number of projections, default is n_proj=1
    # should be greater than 0 and less than sqrt(# of classes)
    # can also set n_proj=-1 to compute the full jacobian
    # which is computationally inefficient
    n_proj = 1 

    # setup devices
    torch.manual_seed(seed)
    device = torch.device("cpu")

    # load MNIST trainset and testset (synthetic digits here)
    trainset = make_digits(torch, 48)
    trainloader = torch.utils.data.DataLoader(
        trainset, batch_size=batch_size, shuffle=False
    )
    testset = make_digits(torch, 16)
    testloader = torch.utils.data.DataLoader(
        testset, batch_size=batch_size, shuffle=False
    )

    # initialize the model
    model = MLP(im_size=8, fc_channel1=32, fc_channel2=32)
    initialize(model)
    model.to(device)

    # initialize the loss and regularization
    criterion = nn.CrossEntropyLoss()
    reg = JacobianReg(n=n_proj) # if n_proj = 1, the argument is unnecessary

    # initialize the optimizer
    # including additional regularization, L^2 weight decay
    optimizer = optim.SGD(model.parameters(), 
        lr=0.01, momentum=0.9, weight_decay=5e-4
    )

    # eval on testset before any training
    correct_i, total, loss_super_i, loss_JR_i, loss_i = eval(
        device, model, testloader, criterion, lambda_JR
    )

    # train
    for epoch in range(epochs):
        print('Training epoch %d.' % (epoch + 1) )
        running_loss_super = 0.0
        running_loss_JR = 0.0
        for idx, (data, target) in enumerate(trainloader):        

            data, target = data.to(device), target.to(device)
            data.requires_grad = True # this is essential!

            optimizer.zero_grad()

            output = model(data) # forward pass

            loss_super = criterion(output, target) # supervised loss
            loss_JR = reg(data, output)   # Jacobian regularization
            loss = loss_super + lambda_JR*loss_JR # full loss

            loss.backward() # computes gradients

            optimizer.step()
            record([loss_super.item(), loss_JR.item()])

            # print running statistics
            running_loss_super += loss_super.item()
            running_loss_JR += loss_JR.item()
            if idx % 2 == 1:    # print every 2 mini-batches
                print('[%d, %5d] supervised loss: %.3f, Jacobian loss: %.3f' %
                        (
                            epoch + 1, 
                            idx + 1, 
                            running_loss_super / 2,  
                            running_loss_JR / 2, 
                        )
                )
                running_loss_super = 0.0
                running_loss_JR = 0.0

    # eval on testset after training
    correct_f, total, loss_super_f, loss_JR_f, loss_f = eval(
        device, model, testloader, criterion, lambda_JR
    )
    record([correct_i, loss_super_i, loss_JR_i, loss_i, correct_f, loss_super_f, loss_JR_f, loss_f])
    record({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

    # print results
    print('\\nTest set results on MNIST with lambda_JR=%.3f.\\n' % lambda_JR)
    print('Before training:')
    print('\\taccuracy: %d/%d=%.3f' % (correct_i, total, correct_i/total))
    print('\\tsupervised loss: %.3f' % loss_super_i)
    print('\\tJacobian loss: %.3f' % loss_JR_i)
    print('\\ttotal loss: %.3f' % loss_i)

    print('\\nAfter %d epochs of training:' % epochs)
    print('\\taccuracy: %d/%d=%.3f' % (correct_f, total, correct_f/total))
    print('\\tsupervised loss: %.3f' % loss_super_f)
    print('\\tJacobian loss: %.3f' % loss_JR_f)
    print('\\ttotal loss: %.3f' % loss_f)

main()
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.autograd as autograd\n", "import retrograd.autograd as autograd\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    ("            optimizer.zero_grad()\n", ""),
    (
        "            loss.backward() # computes gradients\n\n            optimizer.step()",
        "            grads = loss.backward() # computes gradients\n\n            optimizer.step(grads)",
    ),
]


def make_digits(lib, n):
    """A ``TensorDataset`` of ``n`` synthetic 1x8x8 "digits" (a fixed pattern a class, plus
    noise) and their labels, the same numbers for both libraries."""
    rng = np.random.default_rng(465 + n)
    patterns = np.random.default_rng(465).normal(size=(10, 1, 8, 8))
    labels = np.arange(n) % 10
    images = patterns[labels] + 0.5 * rng.normal(size=(n, 1, 8, 8))
    return lib.utils.data.TensorDataset(lib.tensor(images, dtype=lib.float32), lib.tensor(labels))


@pytest.mark.usefixtures("global_streams_restored")
def test_jacobian_regularizer_trains_an_mlp_as_torch(capsys):
    torch.manual_seed(0)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        jacobian, source = JACOBIAN_SOURCE, MNIST_SOURCE
        if lib is rg:
            jacobian = ported_imports(port(jacobian, STEPS[:3]))
            source = ported_imports(port(source, [STEPS[0], STEPS[1], *STEPS[3:]]))
        with SharedDraws(lib, 465):
            # (``from jacobian import JacobianReg``: the module run first)
            reg = run_source(jacobian, lib)["JacobianReg"]
            run_source(
                source,
                lib,
                JacobianReg=reg,
                record=record.append,
                initialize=initialize,
                make_digits=make_digits,
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[0] == logs[1]
    assert "Jacobian loss" in logs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
