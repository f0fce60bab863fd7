"""Run under the launch CLI (``python -m retrograd.distributed.launch -n 2 --engine torch
torch_own_group.py OUT``, which starts torchrun): a program that starts torch's default process
group itself, before the distributed context, and still uses it once the context closed.
Writes ``OUT/rank{r}``, a line per result (a file per rank: two ranks' prints share
torchrun's pipe and may interleave)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as td

from retrograd import distributed as dist


def main() -> None:
    out = Path(sys.argv[-1])
    with open(out / f"rank{os.environ['RANK']}", "w") as lines:
        td.init_process_group("gloo")  # the program's own, before the context
        config = dist.DistributedConfig(timeout=30)
        with dist.DistributedContext.from_launcher(config, engine="torch") as c:
            print(f"rank {c.rank} of {c.world_size} {c.device}", file=lines, flush=True)
        t = torch.ones(1)
        td.all_reduce(t)  # still usable: the context left it alone
        print(f"sum {t.item():g}", file=lines, flush=True)
        td.destroy_process_group()


if __name__ == "__main__":
    main()
