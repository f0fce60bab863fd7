"""Round 32 of the differential fuzzer against PyTorch (``tests/fuzz32_cases.py``): the
``nn.Module`` and container API real code drives, on the same random module trees in both
libraries: traversals with ``prefix``/``recurse``/``remove_duplicate``, ``train``/``eval``,
``requires_grad_``, ``apply``, ``__setattr__``/``__delattr__`` of parameters, buffers and
modules, tied modules and parameters, the containers' list and dict methods, ``get_*`` paths,
``state_dict`` and ``load_state_dict``. Every step must agree with torch on raising or not and
on its result; the edited trees must agree on every traversal, flag, state dict value, forward
output and gradient.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

import os
import warnings

import numpy as np
import pytest

import fuzz32_cases as cases

pytest.importorskip("torch")

DRAWS = max(240, int(os.environ.get("FUZZ_EXAMPLES", "0")))


@pytest.mark.parametrize("block", range(4))
def test_round32_matches_torch(block):
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(block, DRAWS, 4):
            draw = cases.draw(np.random.default_rng([32, seed]))
            try:
                cases.check(draw)
            except cases.Mismatch as e:
                failures.append(f"seed {seed}: {str(e)[:400]}")
    assert not failures, f"{len(failures)} of the draws differ:\n" + "\n".join(failures[:10])


def test_the_check_catches_a_wrong_order():
    """A tree whose children differ in order only is told apart."""
    a = ("node", [("child", "a", ("relu",)), ("child", "b", ("tanh",))])
    b = ("node", [("child", "b", ("tanh",)), ("child", "a", ("relu",))])
    import torch

    _, want = cases.run(torch, (a, []))
    _, got = cases.run(cases.rg, (b, []))
    with pytest.raises(cases.Mismatch):
        cases._same(got["named_modules"], want["named_modules"], "named_modules")


def test_the_check_catches_a_missing_refusal():
    """A step torch refuses and retrograd accepts fails the draw."""
    spec = ("node", [("child", "a", ("relu",))])
    step = ("get", 0, 0, ("get_submodule", "nothing"))
    assert cases.check((spec, [step])) == "raise"
    original = cases.do_step

    def lenient(lib, root, pool, step, labels):
        if lib is cases.rg:
            return None
        return original(lib, root, pool, step, labels)

    cases.do_step = lenient
    try:
        with pytest.raises(cases.Mismatch, match="torch raises"):
            cases.check((spec, [step]))
    finally:
        cases.do_step = original
