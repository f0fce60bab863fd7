"""What torchvision's model builders share here: pretrained weights are refused (nothing is
downloaded), with a message that says how to load a checkpoint instead."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgumentError


def refuse_weights(name: str, weights: Any, kwargs: dict[str, Any]) -> None:
    pretrained = kwargs.pop("pretrained", False)
    if weights is not None or pretrained:
        raise InvalidArgumentError(
            f"{name}(weights={weights!r}): retrograd downloads no pretrained weights; build "
            f"{name}(weights=None) and load a torchvision checkpoint you have with "
            "model.load_state_dict(retrograd.load(path))"
        )
