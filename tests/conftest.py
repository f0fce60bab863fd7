"""Test-suite setup: every backward asserts that the checkpointer was drained (Burn's test
build does the same)."""

import os

os.environ["RETROGRAD_CHECK_CHECKPOINTER"] = "1"
