"""Fit a line with gradients as values: the 10-line example of the README, runnable."""

import retrograd as rg

rg.seed(0)
x = rg.random((64, 1))
y = 3.0 * x + 0.5
w = rg.zeros((1, 1)).require_grad()
b = rg.zeros((1,)).require_grad()
for _ in range(200):
    loss = ((x @ w + b - y) ** 2).mean()
    grads = loss.backward()  # a value: nothing is mutated
    w = (w - 0.5 * w.grad(grads)).detach().require_grad()
    b = (b - 0.5 * b.grad(grads)).detach().require_grad()
print(f"loss {loss.item():.6f}  w {w.item():.4f}  b {b.item():.4f}")
