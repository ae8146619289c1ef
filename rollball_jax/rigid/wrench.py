"""External force and torque on a free rigid body (the resultant R and torque M_O of the SE(3) paper).

Every wrench is an ``eqx.Module`` called as ``force, torque = wrench(t, rotation, position)``
with ``rotation`` R ``(3, 3)`` (body → spatial) and ``position`` b ``(3,)`` the spatial
position of the body origin O. It returns, in **spatial components**, the resultant
force ``(3,)`` [mass·length/time²] and the torque about the body origin O ``(3,)``
[mass·length²/time²]. Each SE(3) formulation converts them to its own components
(body for Kirchhoff, about the fixed origin for Newton–Euler). ``potential(rotation,
position)`` is the potential energy of a conservative wrench (0 otherwise); it enters
the ``energy`` observable.
"""

from __future__ import annotations

import abc

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Inexact, PyTree

from .._typing import ArrayInput

from ..errors import ModelError
from . import _common

__all__ = ["AbstractWrench", "ConstantWrench", "GravityWrench", "FunctionWrench"]


class AbstractWrench(eqx.Module):
    """``(force, torque_about_O)`` in spatial components; ``potential`` of conservative wrenches."""

    @abc.abstractmethod
    def __call__(self, t, rotation: Inexact[Array, "3 3"], position: Inexact[Array, "3"]) -> tuple[Array, Array]:
        """``(torque, force)``, each ``(3,)``."""

    def potential(self, rotation: Inexact[Array, "3 3"], position: Inexact[Array, "3"]) -> Inexact[Array, ""]:
        return jnp.zeros((), dtype=position.dtype)


class ConstantWrench(AbstractWrench):
    """Constant force and torque about O, in the ``frame`` "spatial" (default) or "body".

    A body-frame wrench turns with the body (a thruster); a spatial one keeps its
    direction. ``force``, ``torque``: ``(3,)``. Not conservative (``potential`` = 0).
    """

    force: Inexact[Array, "3"]
    torque: Inexact[Array, "3"]
    frame: str = eqx.field(static=True)

    def __init__(self, force: ArrayInput = (0.0, 0.0, 0.0), torque: ArrayInput = (0.0, 0.0, 0.0), frame: str = "spatial"):
        if frame not in ("spatial", "body"):
            raise ModelError(f"ConstantWrench 'frame' must be 'spatial' or 'body'; got {frame!r}")
        self.force = _common.vector(force, "force")
        self.torque = _common.vector(torque, "torque")
        self.frame = frame

    def __call__(self, t, rotation, position):
        if self.frame == "body":
            return rotation @ self.force, rotation @ self.torque
        return self.force + 0.0 * t, self.torque + 0.0 * t


class GravityWrench(AbstractWrench):
    """A vertical force −``weight`` e3 applied at the body point ``point`` (body frame, from O).

    ``weight`` = m g (use a negative weight for buoyancy ρ V g acting at the centre of
    buoyancy). Torque about O: (R c) × (−weight e3). Potential: weight ⟨e3, b + R c⟩.
    """

    weight: Inexact[Array, ""]
    point: Inexact[Array, "3"]

    def __init__(self, weight: ArrayInput, point: ArrayInput = (0.0, 0.0, 0.0)):
        self.weight = _common.scalar(weight, "weight")
        self.point = _common.vector(point, "point")

    def __call__(self, t, rotation, position):
        force = jnp.stack([0.0 * self.weight, 0.0 * self.weight, -self.weight]) + 0.0 * t
        return force, jnp.cross(rotation @ self.point, force)

    def potential(self, rotation, position):
        return self.weight * (position[2] + rotation[2] @ self.point)


class FunctionWrench(AbstractWrench):
    """User wrench ``fn(t, rotation, position, params) -> (force, torque_about_O)``, spatial components."""

    params: PyTree
    fn: Callable[..., Any] = eqx.field(static=True)

    def __init__(self, fn: Callable[..., Any], params: PyTree = None):
        if not callable(fn):
            raise ModelError("FunctionWrench 'fn' must be callable: fn(t, rotation, position, params) -> (force, torque)")
        self.fn = fn
        self.params = params

    def __call__(self, t, rotation, position):
        force, torque = self.fn(t, rotation, position, self.params)
        return jnp.asarray(force), jnp.asarray(torque)


def as_wrenches(wrench) -> tuple[AbstractWrench, ...]:
    """``None`` → (), one wrench → (wrench,), a sequence → tuple; ``ModelError`` otherwise."""
    if wrench is None:
        return ()
    items = (wrench,) if isinstance(wrench, AbstractWrench) else tuple(wrench)
    for w in items:
        if not isinstance(w, AbstractWrench):
            raise ModelError(f"'wrench' must be AbstractWrench instances (e.g. ConstantWrench); got {type(w).__name__}")
    return items


def total_wrench(wrenches, t, rotation, position) -> tuple[Array, Array]:
    """Sum of the wrenches' (force, torque about O), spatial components."""
    force = jnp.zeros(3, dtype=position.dtype)
    torque = jnp.zeros(3, dtype=position.dtype)
    for w in wrenches:
        f, m = w(t, rotation, position)
        force, torque = force + f, torque + m
    return force, torque


def total_potential(wrenches, rotation, position) -> Array:
    return sum((w.potential(rotation, position) for w in wrenches), jnp.zeros((), dtype=position.dtype))
