"""Exceptions raised by rollball_jax at its boundaries (construction, solving, config)."""

from __future__ import annotations

import numpy as np


class RollballError(Exception):
    """Base class of every error raised by rollball_jax."""


class ModelError(RollballError, ValueError):
    """Invalid model, rail or control parameters (raised at construction)."""


class SimulationError(RollballError, RuntimeError):
    """A solve failed: step limit reached, step size collapsed or non-finite state.

    Attributes
    ----------
    t_reached : float
        Last time up to which the solution is valid.
    cause : str
        Solver's reason for stopping.
    """

    def __init__(self, message: str, t_reached: float = float("nan"), cause: str = ""):
        super().__init__(message)
        self.t_reached = t_reached
        self.cause = cause


class ConfigError(RollballError, ValueError):
    """A configuration file or mapping is invalid; the message names the offending key."""


def to_device(v):
    """A concrete NumPy array (or number) as a JAX array of the same dtype.

    ``jax.device_put``, not ``jnp.asarray``: in jax 0.10 the latter compiles a small
    program for every new shape (~5–8 ms each on the CPU, measured), which adds up when
    models of many shapes are built."""
    import jax

    return jax.device_put(np.asarray(v))


def host_array(x):
    """``x`` as a NumPy array when it is host data (a number, list or NumPy array), ``None``
    for a JAX array or tracer. Construction code shapes host data with NumPy and moves it
    once with :func:`to_device`; JAX arrays keep the ``jnp`` path, where ``jnp.asarray`` of a
    float64 array is the array itself (a concrete array closed over by a ``jit`` stays
    concrete, so its checks still run)."""
    import jax

    if isinstance(x, jax.Array):
        return None
    try:
        return np.asarray(x)
    except Exception:  # e.g. a list holding tracers
        return None


def concrete(x):
    """``x`` as a NumPy array, or ``None`` when ``x`` is a JAX tracer.

    Validation only runs on concrete values: under ``jit``/``vmap``/``grad`` the
    checks were made when the concrete model was built.
    """
    try:
        return np.asarray(x)
    except Exception:  # jax.errors.TracerArrayConversionError and friends
        return None
