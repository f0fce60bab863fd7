"""Node ids: one increasing counter for the nodes of every graph and the keys of the untracked
values backward rules read, so that a key names one value across graphs and threads."""

from __future__ import annotations

import itertools

__all__ = ["new_node_id"]

#: The next id; ``next`` on ``itertools.count`` is atomic under the GIL.
new_node_id = itertools.count(1).__next__
