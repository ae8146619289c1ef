"""diffrax solve results as integer status codes, through diffrax's public API only.

diffrax reports the outcome of a solve as ``diffrax.RESULTS`` items, which compare with
``==`` (public) but carry their integer value and message in private fields. This module
keeps the package's own table: a code is the position of the item's name in
:data:`NAMES` (``successful`` = 0), found by comparing with each public item; a name
diffrax does not have (another version) is skipped, and an unknown item maps to
``UNKNOWN``. Stored codes (batch statuses, sweep stores) therefore stay stable across
diffrax releases.
"""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp

from ._rejection_limit import MAX_CONSECUTIVE_REJECTIONS

#: Result names, in code order (0 = successful).
NAMES: tuple[str, ...] = (
    "successful",
    "max_steps_reached",
    "singular",
    "breakdown",
    "stagnation",
    "conlim",
    "nonfinite_input",
    "nonlinear_max_steps_reached",
    "nonlinear_divergence",
    "nonfinite",
    "dt_min_reached",
    "event_occurred",
    "max_steps_rejected",
    "internal_error",
)
CODES: dict[str, int] = {name: i for i, name in enumerate(NAMES)}
UNKNOWN = len(NAMES)

MESSAGES: dict[str, str] = {
    "successful": "",
    "max_steps_reached": "the maximum number of solver steps was reached; increase max_steps",
    "singular": "a linear solver returned non-finite output (a singular matrix)",
    "breakdown": "breakdown in an iterative linear solve",
    "stagnation": "stagnation in an iterative linear solve",
    "conlim": "the condition number of a linear system exceeded its limit",
    "nonfinite_input": "a linear solver received non-finite input",
    "nonlinear_max_steps_reached": "the nonlinear (implicit-step) solver ran out of iterations",
    "nonlinear_divergence": "the nonlinear (implicit-step) solver diverged",
    "nonfinite": "non-finite (inf or nan) values during the solve",
    "dt_min_reached": "the minimum step size was reached",
    "event_occurred": "a terminating event occurred",
    "max_steps_rejected": (f"{MAX_CONSECUTIVE_REJECTIONS} steps in a row were rejected: the step size collapsed "
                           "(a vector field that is not finite, or a blow-up, there)"),
    "internal_error": "an internal error in diffrax",
}

_ITEMS = tuple((CODES[n], getattr(dfx.RESULTS, n)) for n in NAMES if hasattr(dfx.RESULTS, n))


def result_code(result) -> jnp.ndarray:
    """Integer code ``()`` (``int32``; batched under ``vmap``) of a ``diffrax.RESULTS`` item."""
    code = jnp.asarray(UNKNOWN, jnp.int32)
    for c, item in _ITEMS:
        code = jnp.where(result == item, jnp.int32(c), code)
    return code


def name(code: int) -> str:
    """Name of a code of :data:`NAMES` (``"unknown"`` otherwise)."""
    code = int(code)
    return NAMES[code] if 0 <= code < len(NAMES) else "unknown"


def describe(code: int) -> str:
    """``"name: message"`` of a code (``"name"`` when the message is empty)."""
    n = name(code)
    message = MESSAGES.get(n, "")
    return f"{n}: {message}" if message else n


def raise_if_failed(sol: dfx.Solution) -> dfx.Solution:
    """``sol`` whose states raise, when the solve failed, the package's message for its result
    (:func:`describe`) instead of diffrax's own ``throw=True`` text (which names settings
    of diffrax that the package does not use). A runtime error through
    ``equinox.branched_error_if``: it works under ``jit``, ``vmap`` and autodiff. A
    terminating event (a mass leaving the shell) is not a failure."""
    code = result_code(sol.result)
    failed = (code != CODES["successful"]) & (code != CODES["event_occurred"])
    msgs = [f"solve failed: {describe(c)}" for c in range(UNKNOWN + 1)]
    ys = jax.tree.map(lambda y: eqx.branched_error_if(y, failed, code, msgs), sol.ys)
    return eqx.tree_at(lambda s: s.ys, sol, ys)
