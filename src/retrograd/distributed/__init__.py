"""Distributed data parallel: gradient sync during backward and collectives."""

from .params import ParamId

__all__ = ["ParamId"]
