"""Round 35 of the differential fuzzer against PyTorch (``tests/fuzz35_cases.py``): hooks and
the functional use of modules on the same random small module trees in both libraries, in
train and eval mode: module hooks (forward, backward, global; replacing, raising, removed
mid-run), tensor hooks (``register_hook``, ``retain_grad``, multi-gradient hooks,
``saved_tensors_hooks``), parametrizations (stacked, assigned, cached, removed; orthogonal,
spectral and weight norm), and ``functional_call``, per-sample gradients by ``vmap``, model
ensembling and parameter vectors. Every call must agree with torch on raising or not and on
what it returns; hook logs, outputs, gradients and buffers must agree.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

import os
import warnings

import numpy as np
import pytest

import fuzz35_cases as cases

pytest.importorskip("torch")

DRAWS = {"module_hooks": 50, "tensor_hooks": 30, "parametrize": 50, "functional": 40}
EXTRA = int(os.environ.get("FUZZ_EXAMPLES", "0"))


@pytest.mark.parametrize("family", sorted(DRAWS))
def test_round35_matches_torch(family):
    make = cases.FAMILIES[family][0]
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(max(DRAWS[family], EXTRA)):
            draw = make(np.random.default_rng([35, seed]))
            try:
                cases.check(family, draw)
            except cases.Mismatch as e:
                failures.append(f"seed {seed}: {str(e)[:400]}")
    assert not failures, f"{len(failures)} of the draws differ:\n" + "\n".join(failures[:10])


def test_the_check_catches_a_hook_called_once_too_often():
    """A log with one more hook call than torch's fails the draw."""
    draw = cases.draw_module_hooks(np.random.default_rng([35, 3]))
    draw["hooks"] = [("post", 0, "log", {"prepend": False, "with_kwargs": False,
                                         "always_call": False})]  # fmt: skip
    draw["remove"] = []
    assert cases.check("module_hooks", draw) == "ok"
    original = cases.run_module_hooks

    def twice(lib, d):
        log = original(lib, d)
        if lib is cases.rg:
            log.events.insert(0, log.events[0])
        return log

    cases.FAMILIES["module_hooks"] = (cases.draw_module_hooks, twice)
    try:
        with pytest.raises(cases.Mismatch):
            cases.check("module_hooks", draw)
    finally:
        cases.FAMILIES["module_hooks"] = (cases.draw_module_hooks, original)


def test_the_check_catches_a_missing_refusal():
    """A call torch refuses and retrograd accepts fails the draw."""

    class Fake:
        def __init__(self, events):
            self.events = events

    torch_error = ValueError("shape")
    want = Fake([("raise", "op", torch_error)])
    got = Fake([("event", ["op", 1])])
    original = cases.run
    cases.run = lambda lib, family, draw, twin=None: (want if lib is not cases.rg else got, None)
    try:
        with pytest.raises(cases.Mismatch, match="torch raises"):
            cases.check("functional", None)
    finally:
        cases.run = original
