"""A differential fuzzer against PyTorch: random single ops on random operands.

``tests/test_random_*programs.py`` chain ops on fixed float64 shapes; this file draws each op's
operands instead (``tests/fuzz_cases.py``): shapes with 0-d, size-0 and size-1 broadcasting
dims up to rank 4, negative dims and dim tuples, keepdim, transposed, strided and expanded
views, float32/float64/int64/bool operands mixed with each other and with Python scalars, and
infinities, NaNs and -0.0. Each case is written once against a namespace that is either
``torch`` or ``retrograd`` and must agree with torch on whether it raises, the result's dtype,
shape and values (NaNs in the same places), the operands after the op (in-place ops, views,
``t[idx] = v``) and, for float64 leaves, the gradients.

``test_second_order_match_torch`` differentiates the float64 cases twice (the gradient of a
weighted sum of the first gradients, ``backward(create_graph=True)``) against
``torch.autograd.grad(create_graph=True)``.

The draws are derandomized (the same examples on every run, so CI is deterministic); set
``FUZZ_EXAMPLES`` to run more of them locally. Known, deliberate differences are left out of
the draws and named where they are (``fuzz_cases.py``).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz11_cases  # noqa: F401 (registers round 11's generators in fuzz_cases.GENERATORS)
import fuzz_cases

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))


def _group(*prefixes: str) -> list[str]:
    return sorted(n for n in fuzz_cases.GENERATORS if n.startswith(prefixes))


GROUPS = {
    "elementwise": _group("bin_", "scalar_", "un_", "zero_dim", "clamp_tensor", "where"),
    "reductions": _group("red_", "api_reductions"),
    "shapes_and_indexing": _group(
        "shape_ops", "cat_stack", "expand", "getitem", "setitem", "gather_scatter", "misc", "more"
    ),
    "products": _group("matmul"),
    "in_place_and_api_names": _group("inplace_", "view_alias", "api_names"),
    "nn_functional": _group("nn_functional"),
    "views_written_in_place": _group("view_write", "view_chain", "setitem_grad", "index_put_acc"),
    "numerics": _group(
        "norms",
        "matrix_norms",
        "var_correction",
        "cumulative",
        "ties",
        "prod_zeros",
        "boundary_values",
        "int_scalar",
        "int_binary",
    ),
    "nn_arguments": _group("nnf_"),
    # round 11 (tests/fuzz11_cases.py)
    "view_programs": _group("prog_", "compose_"),
    "promotion": _group("promote_", "index_combo"),
    "linalg_and_special": _group("linalg_", "special_", "einsum_", "misc2"),
    "nn_argument_grids": _group("nnf2_", "attn_", "mod_"),
}
EXAMPLES = {
    "elementwise": 450,
    "reductions": 300,
    "shapes_and_indexing": 350,
    "products": 120,
    "in_place_and_api_names": 250,
    "nn_functional": 120,
    "views_written_in_place": 150,
    "numerics": 150,
    "nn_arguments": 100,
    "view_programs": 60,
    "promotion": 120,
    "linalg_and_special": 80,
    "nn_argument_grids": 80,
}
# Second derivatives (``backward(create_graph=True)``) of the float64 generators, on finite
# values: infinities make torch's and retrograd's 0 * inf land in different places.
SECOND_ORDER = sorted(
    n
    for n in fuzz_cases.GENERATORS
    if n.startswith(
        ("bin_", "un_", "red_", "nnf_", "nn_functional", "view_", "setitem_grad", "prog_")
        + ("compose_", "linalg_", "special_", "nnf2_", "index_combo", "einsum_", "misc2")
    )
    or n in ("norms", "matrix_norms", "var_correction", "ties", "cumulative", "prod_zeros")
)


def test_every_generator_is_in_a_group():
    grouped = {name for names in GROUPS.values() for name in names}
    assert grouped == set(fuzz_cases.GENERATORS)


def _run(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    case = fuzz_cases.GENERATORS[name](rng)
    case.arrays = fuzz_cases.draw_arrays(rng, case)
    try:
        fuzz_cases.compare(case, case.arrays, seed)
    except fuzz_cases.Mismatch as e:
        operands = [(o.shape, o.dtype, o.view) for o in case.operands]
        raise AssertionError(
            f"{case.name} on {operands} (generator {name!r}, seed {seed}):\n{e}\n"
            f"arrays: {case.arrays!r}"
        ) from None


def _fuzz_test(group: str):
    @settings(
        max_examples=SCALE or EXAMPLES[group],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(name=st.sampled_from(GROUPS[group]), seed=st.integers(0, 2**32 - 1))
    def test(name: str, seed: int) -> None:
        _run(name, seed)

    test.__name__ = f"test_{group}_match_torch"
    return test


test_elementwise_match_torch = _fuzz_test("elementwise")
test_reductions_match_torch = _fuzz_test("reductions")
test_shapes_and_indexing_match_torch = _fuzz_test("shapes_and_indexing")
test_products_match_torch = _fuzz_test("products")
test_in_place_and_api_names_match_torch = _fuzz_test("in_place_and_api_names")
test_nn_functional_match_torch = _fuzz_test("nn_functional")
test_views_written_in_place_match_torch = _fuzz_test("views_written_in_place")
test_numerics_match_torch = _fuzz_test("numerics")
test_nn_arguments_match_torch = _fuzz_test("nn_arguments")
test_view_programs_match_torch = _fuzz_test("view_programs")
test_promotion_match_torch = _fuzz_test("promotion")
test_linalg_and_special_match_torch = _fuzz_test("linalg_and_special")
test_nn_argument_grids_match_torch = _fuzz_test("nn_argument_grids")


def _run_second_order(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    case = fuzz_cases.GENERATORS[name](rng)
    for op in case.operands:
        op.special = False
        if op.values is not None:  # (a drawn pool's infinities too)
            op.values = [v for v in op.values if not isinstance(v, float) or math.isfinite(v)]
    case.arrays = fuzz_cases.draw_arrays(rng, case)
    try:
        fuzz_cases.compare_second_order(case, case.arrays, seed)
    except fuzz_cases.Mismatch as e:
        raise AssertionError(
            f"{case.name} (generator {name!r}, seed {seed}):\n{e}\narrays: {case.arrays!r}"
        ) from None


@settings(
    max_examples=SCALE or 250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(name=st.sampled_from(SECOND_ORDER), seed=st.integers(0, 2**32 - 1))
def test_second_order_match_torch(name: str, seed: int) -> None:
    _run_second_order(name, seed)


@pytest.mark.parametrize("name", sorted(fuzz_cases.GENERATORS))
def test_each_generator_once(name):
    """One fixed draw of every generator, so no op goes unchecked by the sampling."""
    _run(name, 7)


def test_compare_catches_a_wrong_result():
    """The comparison itself can fail: a dtype, a value and a NaN placement off."""
    case = fuzz_cases.Case("neg", [fuzz_cases.Operand((3,), "float64")], lambda lib, a: -a)
    arrays = [np.array([1.0, np.nan, -2.0])]
    fuzz_cases.compare(case, arrays)
    for wrong in (
        lambda lib, a: -a if lib is not fuzz_cases.rg else (-a).float(),
        lambda lib, a: -a if lib is not fuzz_cases.rg else a,
        lambda lib, a: -a if lib is not fuzz_cases.rg else (-a).nan_to_num(),
    ):
        with pytest.raises(fuzz_cases.Mismatch):
            fuzz_cases.compare(fuzz_cases.Case("neg", case.operands, wrong), arrays)
