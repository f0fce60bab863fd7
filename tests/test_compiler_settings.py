"""torch's compiler settings (``torch._dynamo.config``, ``torch._inductor.config``) and the
``torch.mps`` / ``torch.xpu`` answers of a machine without those GPUs, against torch 2.13."""

import pytest
import retrograd._dynamo.config as dynamo_config
import retrograd._inductor.config as inductor_config
import torch
import torch._dynamo.config
import torch._inductor.config

import retrograd as rg
from retrograd.errors import InvalidArgumentError, RetrogradError

INDEPENDENT = pytest.mark.backend_independent("settings and device queries, no tensor kernel")


@INDEPENDENT
def test_defaults_are_torchs():
    theirs = torch._dynamo.config.get_config_copy()
    for key, value in rg._dynamo.config.get_config_copy().items():
        assert theirs[key] == value, key
    assert rg._dynamo.config.cache_size_limit == torch._dynamo.config.cache_size_limit
    theirs = torch._inductor.config.get_config_copy()
    for key, value in rg._inductor.config.get_config_copy().items():
        if key != "compile_threads":  # torch's is the machine's core count
            assert theirs[key] == value, key
    for key in ("unique_kernel_names", "cudagraphs", "cudagraph_trees", "max_tiles"):
        assert getattr(rg._inductor.config.triton, key) == getattr(
            torch._inductor.config.triton, key
        )


def test_a_fast_training_scripts_preamble_runs():
    # nanoGPT forks and gpt-fast, as written (torch -> rg)
    import retrograd._dynamo

    assert dynamo_config is rg._dynamo.config and inductor_config is rg._inductor.config
    with rg._dynamo.config.patch(suppress_errors=True, cache_size_limit=64):
        assert rg._dynamo.config.suppress_errors is True
        assert rg._dynamo.config.recompile_limit == 64  # the older name is an alias
        inductor_config.coordinate_descent_tuning = True
        inductor_config.triton.unique_kernel_names = True
        inductor_config.fx_graph_cache = True
        model = rg.compile(rg.nn.Linear(2, 2))
        x = rg.ones(3, 2)
        retrograd._dynamo.mark_dynamic(x, 0)
        retrograd._dynamo.graph_break()
        assert model(x).shape == (3, 2)
        assert not rg._dynamo.is_compiling()
    assert rg._dynamo.config.suppress_errors is False
    assert rg._dynamo.config.recompile_limit == 8
    assert inductor_config.coordinate_descent_tuning is True
    inductor_config.coordinate_descent_tuning = False

    @rg._dynamo.config.patch(verbose=True)
    def verbose():
        return rg._dynamo.config.verbose

    assert verbose() is True and rg._dynamo.config.verbose is False
    assert rg._dynamo.optimize("inductor")(len) is len
    rg._dynamo.reset()


@INDEPENDENT
def test_unknown_settings_and_graph_tools_refused():
    with pytest.raises(AttributeError, match=r"torch\._dynamo\.config\.no_such_setting"):
        _ = rg._dynamo.config.no_such_setting
    with pytest.raises(AttributeError):
        _ = torch._dynamo.config.no_such_setting
    with pytest.raises(InvalidArgumentError, match=r"_dynamo\.explain: retrograd compiles"):
        rg._dynamo.explain(len)


@INDEPENDENT
@pytest.mark.parametrize("name", ["mps", "xpu"])
def test_gpu_modules_answer_as_torchs_cpu_build(name):
    mine, theirs = getattr(rg, name), getattr(torch, name)
    assert mine.is_available() is theirs.is_available() is False
    assert mine.device_count() == theirs.device_count() == 0
    assert mine.manual_seed(0) is theirs.manual_seed(0) is None
    with pytest.raises((RuntimeError, AssertionError)):
        theirs.synchronize()
    with pytest.raises(RetrogradError, match=rf"{name}\.synchronize: no {name.upper()} device"):
        mine.synchronize()


@INDEPENDENT
def test_xpu_counters_and_mps_memory():
    assert rg.xpu.memory_allocated() == torch.xpu.memory_allocated() == 0
    assert rg.xpu.max_memory_allocated() == torch.xpu.max_memory_allocated() == 0
    assert rg.xpu.empty_cache() is torch.xpu.empty_cache() is None
    with pytest.raises(RuntimeError):
        torch.mps.empty_cache()
    with pytest.raises(RetrogradError, match=r"mps\.empty_cache: no MPS device"):
        rg.mps.empty_cache()
