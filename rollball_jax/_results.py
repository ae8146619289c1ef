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

import functools

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


def raise_if_failed(sol: dfx.Solution, throw: bool = True) -> dfx.Solution:
    """``sol`` whose states carry the failure of the solve through :func:`checked`.
    ``throw=True``: when the solve failed they raise the package's message for its result
    (:func:`describe`) instead of diffrax's own ``throw=True`` text (which names settings of
    diffrax that the package does not use), a runtime error that works under ``jit``,
    ``vmap`` and autodiff, derivatives included. ``throw=False``: the states are unchanged
    (``inf`` after the failure) and every derivative through them is NaN. A terminating
    event (a mass leaving the shell) is not a failure."""
    code = result_code(sol.result)
    failed = (code != CODES["successful"]) & (code != CODES["event_occurred"])
    msgs = tuple(f"solve failed: {describe(c)}" for c in range(UNKNOWN + 1))
    ys = jax.tree.map(lambda y: checked(y, failed, code, msgs, throw), sol.ys)
    return eqx.tree_at(lambda s: s.ys, sol, ys)


def checked(y, failed, index, msgs: tuple[str, ...], throw: bool):
    """``y`` (a pytree of inexact arrays) with the failure of a solve made visible in its
    value **and in every derivative through it**.

    ``failed`` ``()`` bool and ``index`` ``()`` int (both may be batched under ``vmap``):
    whether the solve failed and which of ``msgs`` says why. ``throw=True``: a failure
    raises ``msgs[index]`` at run time (``equinox.branched_error_if``); ``throw=False``:
    the value is ``y`` unchanged and the derivatives through it (forward and reverse mode)
    are NaN. Applied to a solve's output; a cotangent reaches the solve's inputs only
    through the steps it took, so the discrete adjoint's own derivative rules multiply
    their results by NaN as well (:func:`rollball_jax._discrete_adjoint.solve`).

    Why not ``equinox.branched_error_if`` on the solve's value alone: under ``jax.jit`` of
    a derivative (``jax.grad``, ``jax.jacfwd``) the value is not an output, so its check is
    dead code and XLA removes it; a solve that ran out of steps then gave a zero gradient,
    silently. Here every tangent is multiplied by 1 when the (checked) status is good and
    by NaN when not, so every derivative's program needs the status, and with it the
    check. ``msgs`` must be a tuple (hashable)."""
    return _checked(y, failed, index, tuple(msgs), bool(throw))


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _checked(y, failed, index, msgs, throw):
    return eqx.branched_error_if(y, failed, index, list(msgs)) if throw else y


@_checked.defjvp
def _checked_jvp(msgs, throw, primals, tangents):
    y, failed, index = primals
    status = eqx.branched_error_if(failed, failed, index, list(msgs)) if throw else failed
    return _checked(y, failed, index, msgs, throw), nan_where(tangents[0], status)


def nan_where(tree, failed):
    """``tree`` (a pytree of inexact arrays) times NaN where ``failed`` (bool, broadcast
    against each leaf; ``()`` for a whole solve) and times 1.0 (exactly: the values are
    unchanged) elsewhere: how a failed solve's derivatives are made NaN."""
    factor = jnp.where(failed, jnp.nan, 1.0)
    return jax.tree.map(lambda a: a * factor, tree)
