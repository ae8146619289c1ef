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


def concrete(x):
    """``x`` as a NumPy array, or ``None`` when ``x`` is a JAX tracer.

    Validation only runs on concrete values: under ``jit``/``vmap``/``grad`` the
    checks were made when the concrete model was built.
    """
    try:
        return np.asarray(x)
    except Exception:  # jax.errors.TracerArrayConversionError and friends
        return None
