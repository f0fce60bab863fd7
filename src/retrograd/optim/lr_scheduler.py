"""torch's ``torch.optim.lr_scheduler`` path: the learning-rate schedules (their home is
:mod:`.schedules`)."""

from .schedules import (
    ConstantLR,
    CosineAnnealingLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    MultiplicativeLR,
    MultiStepLR,
    PolynomialLR,
    ReduceLROnPlateau,
    StepLR,
)

__all__ = [
    "ConstantLR",
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "StepLR",
]
