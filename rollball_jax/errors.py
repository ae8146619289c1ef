"""Exceptions raised by rollball_jax at its boundaries (construction, solving, config)."""

from __future__ import annotations

import numpy as np

__all__ = ["RollballError", "ModelError", "SimulationError", "ConfigError", "NotTraceableError"]


class RollballError(Exception):
    """Base class of every error raised by rollball_jax."""


class ModelError(RollballError, ValueError):
    """Invalid model, rail or control parameters (raised at construction).

    Attributes
    ----------
    mass : int or None
        Index (from 0, in the model's mass order) of the point mass whose rail is at fault
        (a rail leaving the ball, or a disk's rail leaving the x–z plane); ``None`` when the
        error is not about one mass. The message numbers masses from 1, as the paper does.
    detail : str
        The message without the words naming the mass (``"reaches |ζ(θ)| = …"``), for
        callers that name the mass their own way (a config file's ``masses[0].rail``).
    """

    def __init__(self, message: str = "", mass: int | None = None, detail: str | None = None):
        super().__init__(message)
        self.mass = mass
        self.detail = message if detail is None else detail


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


class NotTraceableError(RollballError, TypeError):
    """A function that checks its inputs on the host and returns NumPy results was called
    under ``jax.jit``, ``jax.vmap`` or autodiff; the message names the traceable function
    to use instead."""


def host_only(name: str, instead: str):
    """Decorator for a function that returns NumPy results (``rb.simulate``,
    ``simulate_batch``): JAX's tracer-conversion errors, raised when it is called on traced
    values, become :class:`NotTraceableError` naming ``instead`` (JAX's own message names
    neither the function nor an alternative). Costs nothing on a normal call."""
    import functools

    import jax

    tracer_errors = (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError,
                     jax.errors.TracerIntegerConversionError)

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except tracer_errors as e:
                raise NotTraceableError(
                    f"{name} checks its inputs and returns NumPy results, so it cannot run under jax.jit, "
                    f"jax.vmap or autodiff; {instead}") from e

        return wrapper

    return decorate


# Construction-time arrays follow one rule: when every input is concrete (numbers, lists,
# NumPy or concrete JAX arrays) they are shaped in NumPy and moved to JAX once by
# ``to_jax``; anything traced keeps ``jnp``. Eager ``jnp`` operations would compile a small
# XLA program per new shape (~5–8 ms each on the CPU, measured in jax 0.10: building the
# paper ball took 0.52 s that way, 0.20 s this way).


def to_device(v):
    """A concrete NumPy array (or number) as a concrete JAX array of the same dtype.

    ``jax.device_put`` (``jnp.asarray`` compiles a program per new shape), evaluated at
    trace time so that a model built inside a ``jit`` from concrete data stays concrete
    and keeps its checks."""
    import jax

    with jax.ensure_compile_time_eval():
        return jax.device_put(np.asarray(v))


def array_namespace(*xs):
    """``np`` when every given value that is not ``None`` is concrete, else ``jax.numpy``:
    the namespace construction code assembles its arrays in (see the rule above)."""
    if all(x is None or concrete(x) is not None for x in xs):
        return np
    import jax.numpy as jnp

    return jnp


def to_jax(x):
    """``x`` as a JAX array: a NumPy result moved by :func:`to_device`, a JAX array (or
    tracer) as it is."""
    return to_device(x) if isinstance(x, (np.ndarray, np.generic)) else x


def as_float64(x):
    """``x`` as a float64 JAX array, converted in NumPy when concrete (see the rule above)."""
    return to_jax(array_namespace(x).asarray(x, dtype=np.float64))


def concrete(x):
    """``x`` as a NumPy array, or ``None`` when ``x`` is a JAX tracer.

    Validation only runs on concrete values: under ``jit``/``vmap``/``grad`` the
    checks were made when the concrete model was built.
    """
    try:
        return np.asarray(x)
    except Exception:  # jax.errors.TracerArrayConversionError and friends
        return None
