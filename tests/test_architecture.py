"""The shape of the code, checked: no import cycle, layers import downward, every module says
what it is for.

The layers are those of docs/architecture.md, data flowing one way: the application on the
library; within the library, nn / optim / distributed on the tensor API, the tensor API on the
backend protocol, the autodiff decorator on an inner backend. Imports are read from the source
with ``ast`` (module level and inside functions alike: a deferred import is still a
dependency), so the check does not depend on what happens to be imported at run time.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_independent("reads the source with ast")

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "retrograd"

#: Each top-level part of ``retrograd`` and its layer. A module may import modules of its own
#: part and of lower layers only; parts of one layer do not import each other.
LAYERS = {
    # what a retried op must not repeat (draws, in-place writes): counted below the errors,
    # whose guard reads them, by the random streams and the in-place writes
    "effects": -2,
    "errors": -1,  # the ground: every part may raise its errors (a device string too)
    "device": 0,
    "files": 0,  # files written whole or not at all (Module.save and the application)
    "backend": 1,
    "autodiff": 2,
    "context": 3,
    "tensor": 4,
    "distributed": 5,
    "memory": 5,
    # torch's other namespaces over the tensor API: torch.autograd, torch.distributions,
    # torch.save/load
    "autograd": 5,
    "distributions": 5,
    "serialization": 5,
    # torch.save's files, read without torch: over the tensor API's dtypes, read with by
    # serialization
    "torch_files": 4.5,
    # torch.save's files, written without torch: over the tensor API and torch_files's zip,
    # used by serialization
    "torch_writer": 4.75,
    "testing": 5,
    # torch.futures; torch's process-wide defaults (default device, autocast state)
    "futures": 5,
    "defaults": 5,
    "linalg": 5,  # torch.linalg over the tensor API
    "types": 5,  # torch.types: annotation aliases over the tensor and device types
    # torch's module paths (torch.optim.adam...), registered by ``rg`` over itself: it imports
    # nothing of retrograd, it is handed the namespace
    "module_paths": 0,
    "special": 5,  # torch.special over the tensor API
    "sparse": 5,  # torch.sparse: sparse COO construction and products, over the tensor API
    "quasirandom": 5,  # torch.quasirandom: Sobol' points (SciPy) made into tensors
    # Burn's burn_tensor::signal (real FFTs as real pairs) over the tensor API, and torch's
    # stft/istft (istft over torch.fft's transforms)
    "signal": 5.5,
    "signal_windows": 5,  # torch.signal.windows over the tensor API (rg.signal.windows)
    "cuda": 5,  # torch.cuda's queries, answered by the backend layer
    "cpu": 5,  # torch.cpu: the CPU's device queries and torch.cpu.amp (amp's autocast)
    "return_types": 6,  # torch.return_types: the result classes of the tensor API and linalg
    "torch_version": 0,  # torch.torch_version.TorchVersion: version strings compared
    "version": 1,  # torch.version: the build's facts
    "accelerator": 6,
    # torch.utils (data loading): DistributedSampler takes the process group's rank
    "utils": 6,
    # torch.multiprocessing: Python's, with spawn (imports only the errors)
    "multiprocessing": 1,
    # torch.onnx and torch.fx: the names model code carries (is_in_onnx_export, fx.wrap);
    # export and tracing refused (they import only the errors)
    "onnx": 1,
    # torch.onnx.operators: shape_as_tensor and reshape_from_tensor_shape over the tensor API
    "onnx_operators": 5,
    "fx": 1,
    "export": 1,  # torch.export: refused by name (imports only the errors)
    # torch.mps and torch.xpu: the answers of a machine without those GPUs (import the errors)
    "mps": 1,
    "xpu": 1,
    # torch._dynamo and torch._inductor: the compilers' settings and markers, with eager
    # meaning (over compiler's); _dynamo's OptimizedModule, the result of rg.compile(module),
    # is an nn.Module
    "_dynamo": 7,
    # torch._C's names that library code calls (usage logging): no-ops (imports the errors)
    "_C": 1,
    # torch.__future__'s conversion flags (imports the errors)
    "__future__": 1,
    "_inductor": 1.5,
    # torch.hub: tqdm, the hub folder, and checkpoints read from it (serialization);
    # downloads refused
    "hub": 5.5,
    # torch.profiler: times the inner backend's calls (the protocol, the current backend)
    "profiler": 4,
    # torch's optimizer step hooks, shared by the optimizers (layer 7) and
    # distributed.ZeroRedundancyOptimizer (layer 5)
    "step_hooks": 4,  # torch.accelerator: cuda's queries (layer 5), device-agnostic
    # torch forms that cannot hold here (nested, shared memory, sparse CSR): errors that say so;
    # they import only the errors (and nested the refusals), so they sit low
    "unsupported": 1,
    # torch.amp's names (autocast, GradScaler): the autocast region over the tensor API's
    # autocast policy (tensor.autocasting); torch.cuda.amp, torch.cpu.amp and the defaults
    # re-export them
    "amp": 4.8,
    # torch.backends flags, and torch's process-wide settings and dtype queries
    "backends": 5,
    "runtime_settings": 5,
    "fft": 5,  # torch.fft: the transforms and helpers over the tensor API (complex tensors)
    "nested": 2,
    # torch.func's transforms, over torch.autograd.functional's pieces, and functional_call
    # (nn.utils.stateless's, re-exported)
    "func": 7,
    # torch.jit's names with eager meaning (futures for fork; ScriptModule is an nn.Module)
    "jit": 7,
    # torch.compiler's queries and decorators with eager meaning (imports only the errors)
    "compiler": 1,
    # nn.parallel.DistributedDataParallel marks parameters through the distributed API
    "nn": 6,
    # optim re-exports nn.utils.clip_grad_norm_ (PyTorch's home for it) as clip_grad_norm
    "optim": 7,
    # torch.ao's quantization stubs and FloatFunctional: nn modules computing in float
    "ao": 7,
    # torch.utils.flop_counter and module_tracker: FLOPs per module, over nn's global hooks
    # and autograd's multi-grad hooks (registered at utils' paths by module_paths)
    "counting": 7,
    # torch.library: custom ops over autograd.Function (layer 5)
    "library": 6,
    # einops' backend and layers for retrograd tensors (over the tensor API and nn); imported
    # by einops' own import, through the watcher that rg installs
    "einops": 7,
    # torchvision's layout (transforms, datasets, utils, ops, models) over nn and utils.data;
    # nothing imports it but the user (``import retrograd.vision as torchvision``)
    "vision": 7.5,
    "capture": 8,  # records and replays whole steps: forward, backward and optimizer
    "__init__": 9,  # the public namespace ``rg``
    "app": 10,
    "__main__": 11,
}


def _module_name(path: Path) -> str:
    parts = ["retrograd", *path.relative_to(PACKAGE).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _part(module: str) -> str:
    """``retrograd.nn.functional`` -> ``nn``; the package itself -> ``__init__``."""
    return module.split(".")[1] if "." in module else "__init__"


def _imported(module: str, path: Path) -> set[str]:
    """The ``retrograd`` modules that ``module`` imports, resolved to files that exist."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            # ``from . import functional`` imports the submodule, not the package's __init__.
            named = [f"{target}.{alias.name}" for alias in node.names]
            submodules = [name for name in named if name in MODULES]
            targets = submodules if len(submodules) == len(node.names) else [target, *submodules]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Each module's imports (parsed at the first test that needs them, not at collection:
    every pytest worker imports this file, and parsing the package costs a second of CPU)."""
    return {module: _imported(module, path) for module, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_sees_relative_and_deferred_imports():
    graph = import_graph()
    assert "retrograd.errors" in graph["retrograd.nn.modules.module"]  # from ...errors import
    assert "retrograd.nn.functional" in graph["retrograd.nn.modules.norm"]  # from .. import
    assert "retrograd.app.graphview" in graph["retrograd.app.cli"]  # inside a function


def test_no_import_cycle():
    assert _cycles(import_graph()) == []


def test_every_part_has_a_layer():
    assert {_part(module) for module in MODULES} <= set(LAYERS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module):
    own = _part(module)
    upward = sorted(
        target
        for target in import_graph()[module]
        if _part(target) != own and LAYERS[_part(target)] >= LAYERS[own]
    )
    assert upward == [], f"{module} ({own}, layer {LAYERS[own]}) imports {upward}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_says_what_it_is_for(module):
    docstring = ast.get_docstring(ast.parse(MODULES[module].read_text(encoding="utf-8")))
    assert docstring, f"{module} has no module docstring"
