"""torch's ``torch._inductor.config``, the code generator's settings that fast training
scripts set before ``torch.compile`` (gpt-fast's ``coordinate_descent_tuning``,
``triton.unique_kernel_names``, ``fx_graph_cache``): kept, read back, and without effect, as
retrograd compiles nothing (:class:`~retrograd.compiler.CompilerSettings`).

>>> import retrograd._inductor.config as inductor_config
>>> inductor_config.coordinate_descent_tuning = True
>>> inductor_config.triton.unique_kernel_names = True
>>> inductor_config.triton.cudagraphs
False
"""

from __future__ import annotations

from .compiler import CompilerSettings

__all__ = ["config"]

#: torch 2.13's defaults of the settings scripts set or read
config = CompilerSettings(
    "torch._inductor.config",
    {
        "coordinate_descent_tuning": False,
        "coordinate_descent_check_all_directions": False,
        "coordinate_descent_search_radius": 1,
        "fx_graph_cache": True,
        "fx_graph_remote_cache": None,
        "max_autotune": False,
        "max_autotune_gemm": False,
        "max_autotune_pointwise": False,
        "freezing": False,
        "epilogue_fusion": True,
        "aggressive_fusion": False,
        "compile_threads": 1,
        "benchmark_kernel": False,
        "debug": False,
        "layout_optimization": True,
        "keep_output_stride": True,
        "fallback_random": False,
        "conv_1x1_as_mm": False,
        "shape_padding": True,
        "emulate_precision_casts": False,
        "reorder_for_compute_comm_overlap": False,
        "triton": CompilerSettings(
            "torch._inductor.config.triton",
            {
                "unique_kernel_names": True,
                "cudagraphs": False,
                "cudagraph_trees": True,
                "max_tiles": None,
            },
        ),
        "cpp": CompilerSettings("torch._inductor.config.cpp", {"threads": -1, "simdlen": None}),
    },
)
