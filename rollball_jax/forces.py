"""External force F_e(t) acting at the geometric centre, spatial frame (Putkaradze & Rogers, eq. 5.21)."""

from __future__ import annotations

import abc

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Inexact, PyTree

from ._typing import FloatInput

from . import _checks as checks
from .errors import ModelError, as_float64

__all__ = ["AbstractForce", "ConstantForce", "FunctionForce"]


class AbstractForce(eqx.Module):
    """``force(t) -> F_e`` of shape ``(3,)`` [mass·length/time²], spatial frame."""

    @abc.abstractmethod
    def __call__(self, t: FloatInput[""]) -> Inexact[Array, "3"]:
        """The force ``(3,)`` at time ``t``."""


class ConstantForce(AbstractForce):
    """Constant spatial force ``value`` ``(3,)``; the default is zero."""

    value: Inexact[Array, "3"]

    def __init__(self, value=(0.0, 0.0, 0.0)):
        v = as_float64(value)
        if v.shape != (3,):
            raise ModelError(f"force value must have shape (3,); got {v.shape}")
        checks.finite_leaves(v, "ConstantForce.value")
        self.value = v

    def __call__(self, t):
        return self.value + 0.0 * t


class FunctionForce(AbstractForce):
    """User force ``fn(t, params) -> (3,)`` (spatial frame), written with ``jax.numpy``."""

    params: PyTree
    fn: Callable[[Array, Any], Array] = eqx.field(static=True)

    def __init__(self, fn, params=None):
        if not callable(fn):
            raise ModelError("FunctionForce 'fn' must be callable: fn(t, params) -> (3,)")
        checks.finite_leaves(params, "FunctionForce.params")
        self.fn = fn
        self.params = params
        out = checks.traced_output(lambda p: jnp.asarray(fn(jnp.zeros(()), p)), (params,), "FunctionForce 'fn'", "fn(t, params)")
        if out.shape != (3,):
            raise ModelError(f"FunctionForce 'fn' must return a spatial force of shape (3,); got shape {out.shape}")

    def __call__(self, t):
        return jnp.asarray(self.fn(t, self.params))
