"""The refusal of torch's sharded training (FSDP, DTensor, device meshes) by name, with what
retrograd offers instead: shared by :mod:`.fsdp`, :mod:`.tensor` and :mod:`.device_mesh`."""

from __future__ import annotations

from typing import Any, NoReturn

from ..errors import DistributedError

#: what to use instead, said by each refusal
OFFERED = (
    "retrograd's data parallel holds the whole model on each rank: wrap the model in "
    "rg.nn.parallel.DistributedDataParallel (or mark parameters under "
    "rg.distributed.DistributedContext), and shard the optimizer state with "
    "rg.distributed.ZeroRedundancyOptimizer; see docs/distributed.md"
)


def refuse(name: str) -> NoReturn:
    raise DistributedError(f"{name}: sharded parameters are not supported; {OFFERED}")


def refusing_function(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        refuse(name)

    refused.__name__ = name.rpartition(".")[2]
    refused.__doc__ = f"torch's ``{name}``: refused (sharded parameters do not exist here)."
    return refused


def refusing_class(name: str) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        refuse(name)

    short = name.rpartition(".")[2]
    return type(
        short,
        (),
        {
            "__init__": __init__,
            "__doc__": f"torch's ``{name}``: refused (sharded parameters do not exist here).",
            "__module__": __name__,
        },
    )
