"""Real ports, continued (the harness: ``tests/real_ports.py``): RWKV-4 in RNN mode, a program
written here in the style of BlinkDL's compact ChatRWKV inference scripts, on a small random
checkpoint (2 layers, 8 channels, a vocabulary of 31) and a character tokenizer.

Surface: ``class RecurrentRWKV(torch.jit.ScriptModule)`` with ``@torch.jit.script_method``
methods (``layer: int`` annotations; TorchScript compiles them from the file), ``self.eval()``
in ``__init__``, ``torch.load(path + '.pth', map_location='cpu')`` of a state dict rewritten in
place (``squeeze()``, ``-torch.exp(w.float())``), the weights nested into
``types.SimpleNamespace`` trees (``setattr``/``getattr``, a dict of blocks keyed by ``int``),
``F.layer_norm(x, (n_embd,), weight=..., bias=...)``, the time mixing (``torch.maximum``, the
max-shifted ``exp`` recurrence) and channel mixing (``torch.square(torch.relu(key @ xk))``)
writing rows of the state in place, ``state == None``, ``torch.zeros(n_layer * 5, n_embd)``
with a row set to ``-1e30``, ``emb.weight[token]`` indexed by a NumPy integer, ``.float()``,
``.clone()`` of the warmed-up logits and state, and nucleus sampling in NumPy
(``F.softmax(...).numpy()``, ``np.sort(probs)[::-1]``, ``np.random.choice``) over three samples
printed as they go.

The checkpoint is written by each library's own ``save`` (retrograd's ``load`` reads its own
files; torch's pickles are refused by design, API.md). The program has no gradient lines, so
the port changes nothing. Regression guarded: there was no ``torch.jit.ScriptModule`` nor
``torch.jit.script_method``; they are now an ``nn.Module`` and a decorator that returns the
method (the eager meaning ``rg.jit`` gives TorchScript's names).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg

RWKV_SOURCE = """
np.set_printoptions(precision=4, suppress=True)

PROMPT = "\\nIn the valley, a quiet river ran past the old mill."
SAMPLES = 3
NEW_TOKENS = 12
TOP_P = 0.85


def nest(flat):
    # "blocks.1.att.key.weight" -> tree.blocks[1].att.key.weight
    tree = types.SimpleNamespace(blocks={})
    for name, value in flat.items():
        *path, leaf = name.split(".")
        node = tree
        for part in path:
            if part.isdigit():
                node = node.setdefault(int(part), types.SimpleNamespace())
            else:
                if not hasattr(node, part):
                    setattr(node, part, types.SimpleNamespace())
                node = getattr(node, part)
        setattr(node, leaf, value)
    return tree


class RecurrentRWKV(torch.jit.ScriptModule):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.eval()  # inference only
        weights = torch.load(cfg.path + ".pth", map_location="cpu")
        for name in weights.keys():
            value = weights[name]
            if ".time_" in name:
                value = value.squeeze()
            # the stored decay w acts as -exp(w): every channel forgets at its own rate
            is_decay = name.endswith("time_decay")
            weights[name] = -torch.exp(value.float()) if is_decay else value.float()
        self.w = nest(weights)

    def norm(self, x, ln):
        return F.layer_norm(x, (self.cfg.n_embd,), weight=ln.weight, bias=ln.bias)

    @torch.jit.script_method
    def shifted_ffn(self, x, state, layer: int, mix_k, mix_r, key, value, receptance):
        prev = state[5 * layer + 4]
        xk = prev + mix_k * (x - prev)
        xr = prev + mix_r * (x - prev)
        state[5 * layer + 4] = x  # (prev is a view of this row: mixed first)
        hidden = torch.square(torch.relu(key @ xk))
        return torch.sigmoid(receptance @ xr) * (value @ hidden)

    @torch.jit.script_method
    def wkv_attention(
        self, x, state, layer: int, key, value, receptance, output,
        bonus, decay, mix_k, mix_v, mix_r,
    ):
        base = 5 * layer
        prev = state[base]
        xk = prev + mix_k * (x - prev)
        xv = prev + mix_v * (x - prev)
        xr = prev + mix_r * (x - prev)
        state[base] = x
        k = key @ xk
        v = value @ xv
        gate = torch.sigmoid(receptance @ xr)
        num, den, top = state[base + 1], state[base + 2], state[base + 3]
        # read out with this token's bonus, every exponent shifted by the running maximum
        m = torch.maximum(top, bonus + k)
        a, b = torch.exp(top - m), torch.exp(bonus + k - m)
        mixed = (a * num + b * v) / (a * den + b)
        # then decay the sums and fold the token in
        m = torch.maximum(top + decay, k)
        a, b = torch.exp(top + decay - m), torch.exp(k - m)
        state[base + 1] = a * num + b * v
        state[base + 2] = a * den + b
        state[base + 3] = m
        return output @ (gate * mixed)

    def forward(self, token_id, state):
        with torch.no_grad():
            if state == None:
                state = torch.zeros(self.cfg.n_layer * 5, self.cfg.n_embd)
                for layer in range(self.cfg.n_layer):
                    state[5 * layer + 3] = -1e30  # no history: its weight exp(-1e30) is 0
            x = self.norm(self.w.emb.weight[token_id], self.w.blocks[0].ln0)
            for layer in range(self.cfg.n_layer):
                block = self.w.blocks[layer]
                att, ffn = block.att, block.ffn
                x = x + self.wkv_attention(
                    self.norm(x, block.ln1), state, layer,
                    att.key.weight, att.value.weight, att.receptance.weight, att.output.weight,
                    att.time_first, att.time_decay, att.time_mix_k, att.time_mix_v, att.time_mix_r,
                )
                x = x + self.shifted_ffn(
                    self.norm(x, block.ln2), state, layer, ffn.time_mix_k, ffn.time_mix_r,
                    ffn.key.weight, ffn.value.weight, ffn.receptance.weight,
                )
            logits = self.w.head.weight @ self.norm(x, self.w.ln_out)
            return logits.float(), state


def nucleus(logits, top_p):
    probs = F.softmax(logits, dim=-1).numpy()
    ranked = np.sort(probs)[::-1]
    # the smallest probability still inside the top-p mass
    floor = float(ranked[np.argmax(np.cumsum(ranked) > top_p)])
    probs[probs < floor] = 0
    return np.random.choice(len(probs), p=probs / probs.sum())


print(f"loading {cfg.path}")
rnn = RecurrentRWKV(cfg)
warm_state = None
for token in tokenizer.encode(PROMPT).ids:
    warm_logits, warm_state = rnn.forward(token, warm_state)

for trial in range(SAMPLES):
    print(f"\\n== sample {trial} ==", PROMPT, end="")
    logits, state = warm_logits.clone(), warm_state.clone()
    for _ in range(NEW_TOKENS):
        token = nucleus(logits, TOP_P)
        print(tokenizer.decode([token]), end="", flush=True)
        logits, state = rnn.forward(token, state)
print()
"""

ALPHABET = "\n .,Iabcdefghijklmnopqrstuvwxyz"


class CharTokenizer:
    """A stand-in for ``tokenizers.Tokenizer``: one id per character."""

    def encode(self, text):
        return types.SimpleNamespace(ids=[ALPHABET.index(c) for c in text])

    def decode(self, ids):
        return "".join(ALPHABET[int(i)] for i in ids)


def _checkpoint(n_layer, n_embd, vocab):
    """An RWKV-4 state dict of random values, in the shapes of the released checkpoints."""
    rng = np.random.default_rng(44)
    c = n_embd
    shapes = {"emb.weight": (vocab, c), "blocks.0.ln0.weight": (c,), "blocks.0.ln0.bias": (c,)}
    for i in range(n_layer):
        b = f"blocks.{i}."
        shapes.update(
            {
                b + "ln1.weight": (c,),
                b + "ln1.bias": (c,),
                b + "ln2.weight": (c,),
                b + "ln2.bias": (c,),
            }
        )
        shapes.update({b + f"att.{n}": (c,) for n in ("time_decay", "time_first")})
        shapes.update({b + f"att.time_mix_{n}": (1, 1, c) for n in "kvr"})
        shapes.update(
            {b + f"att.{n}.weight": (c, c) for n in ("key", "value", "receptance", "output")}
        )
        shapes.update({b + f"ffn.time_mix_{n}": (1, 1, c) for n in "kr"})
        shapes.update(
            {
                b + "ffn.key.weight": (4 * c, c),
                b + "ffn.receptance.weight": (c, c),
                b + "ffn.value.weight": (c, 4 * c),
            }
        )
    shapes.update({"ln_out.weight": (c,), "ln_out.bias": (c,), "head.weight": (vocab, c)})
    state = {}
    for name, shape in shapes.items():
        if "time_mix" in name:
            value = rng.uniform(0, 1, shape)
        elif (
            name.endswith("ln0.weight")
            or (".ln" in name and name.endswith("weight"))
            or name == "ln_out.weight"
        ):
            value = 1 + 0.1 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) * (0.5 if "weight" in name else 1.0)
        state[name] = value.astype(np.float32)
    return state


def _run_from_file(path, lib, cfg):
    """The program run from a file (TorchScript compiles the ``script_method``s from their
    source, which it reads by file name)."""
    path.write_text(RWKV_SOURCE)
    names = {"torch": lib, "F": lib.nn.functional, "np": np, "types": types}
    names.update(cfg=cfg, tokenizer=CharTokenizer())
    exec(compile(RWKV_SOURCE, str(path), "exec"), names)
    return names


@pytest.mark.parametrize("seed", [0, 1])
def test_rwkv4_rnn_generation_matches_torch(tmp_path, capsys, seed):
    cfg = types.SimpleNamespace(n_layer=2, n_embd=8)
    checkpoint = _checkpoint(cfg.n_layer, cfg.n_embd, len(ALPHABET))
    runs = []
    for lib in (torch, rg):
        cfg.path = str(tmp_path / f"rwkv-{lib.__name__}")
        lib.save({k: lib.tensor(v) for k, v in checkpoint.items()}, cfg.path + ".pth")
        np.random.seed(seed)
        names = _run_from_file(tmp_path / f"rwkv_{lib.__name__}.py", lib, cfg)
        runs.append((names, capsys.readouterr().out))
    (theirs, their_text), (ours, our_text) = runs
    assert our_text.replace("rwkv-retrograd", "rwkv-torch") == their_text
    assert their_text.count("== sample") == 3
    generated = [part.split("mill.", 1)[1] for part in their_text.split("== sample")[1:]]
    assert all(len(text.strip("\n")) >= 12 for text in generated), generated
    assert len(set(generated)) == 3  # three different samples
    for name in ("warm_logits", "warm_state", "logits", "state"):
        np.testing.assert_allclose(ours[name].numpy(), theirs[name].numpy(), rtol=1e-4, atol=1e-5)
    assert isinstance(ours["rnn"], rg.nn.Module)


def test_script_module_is_a_module_and_script_method_keeps_the_method():
    """``torch.jit.ScriptModule`` subclasses build, hold parameters and train as modules;
    ``@torch.jit.script_method`` returns the method."""

    class Net(rg.jit.ScriptModule):
        def __init__(self):
            super().__init__()
            self.linear = rg.nn.Linear(2, 1)

        @rg.jit.script_method
        def scaled(self, x, i: int):
            return self.linear(x) * i

        def forward(self, x):
            return self.scaled(x, 3)

    net = Net()
    assert isinstance(net, rg.nn.Module) and [n for n, _ in net.named_parameters()] == [
        "linear.weight",
        "linear.bias",
    ]
    x = rg.tensor([[1.0, 2.0]])
    grads = net(x).sum().backward()
    np.testing.assert_allclose(net.linear.weight.grad(grads).numpy(), [[3.0, 6.0]])
