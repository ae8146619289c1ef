"""Argument checks shared by the public entry points (host side, concrete values only).

Every check raises :class:`~rollball_jax.errors.ModelError` naming the argument, the
member or the state component at fault. Under ``jit``/``vmap``/``grad`` (traced values)
the value checks are skipped: they ran when the concrete objects were built.

Rules stated once, here:

* **float64.** rollball_jax enables ``jax_enable_x64`` at import; if it is switched off
  afterwards every model constructor and solve entry point refuses to run
  (:func:`require_x64`): float32 cannot meet the default tolerances (1e-10) and the
  model checks (a rotation matrix orthonormal to 1e-9) fail for rounding.
* **Versor.** A state's versor ``q`` (ball, Chaplygin ball, the bodies of ``rollball_jax.rigid``) must have unit length to within
  ``VERSOR_TOL = 1e-6`` (a state from a previous solve at the default tolerances drifts far
  less); anything else, including ``q = 0``, is refused, never normalised silently
  (normalise it yourself, ``q / |q|``, or use the model's ``initial_state``).
* **Tolerances and limits.** ``rtol``, ``atol`` positive and finite; ``max_steps`` a
  positive integer.
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from ._dispatch import COMPLEX_MESSAGE
from .errors import ModelError, as_float64, concrete

VERSOR_TOL = 1e-6


def require_x64(where: str) -> None:
    """Raise if JAX runs in float32 (``jax_enable_x64`` switched off after import)."""
    if not jax.config.jax_enable_x64:
        raise ModelError(
            f"{where}: JAX is running in float32 (jax_enable_x64 was switched off after importing rollball_jax); "
            "rollball_jax needs float64: call jax.config.update('jax_enable_x64', True) before building models"
        )


def tolerance(value, name: str) -> None:
    """``rtol``/``atol``: positive and finite (scalar or array)."""
    if type(value) is float and 0.0 < value < math.inf:  # the common case, checked in ~0.1 µs
        return
    v = concrete(value)
    if v is None:
        return
    v = np.asarray(v, dtype=float)
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ModelError(f"'{name}' must be positive and finite; got {v.tolist()}")


def integer(value, name: str, minimum: int = 1) -> int:
    """An integer (not a bool) of at least ``minimum``, as ``int``; ``ModelError`` naming
    ``name`` otherwise (a float such as 2.5 is refused, never truncated)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ModelError(f"'{name}' must be {kind}; got {value!r}")
    return int(value)


def max_steps(value, name: str = "max_steps") -> int:
    """A positive integer."""
    return integer(value, name)


def finite_number(value, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ModelError(f"'{name}' must be a number; got {value!r}") from None
    if not math.isfinite(v):
        raise ModelError(f"'{name}' must be finite; got {v}")
    return v


def finite_leaves(tree, name: str) -> None:
    """Every concrete inexact array leaf of ``tree`` finite (else ModelError naming it)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    for path, leaf in leaves:
        if not hasattr(leaf, "dtype") and not isinstance(leaf, (float, int)):
            continue
        v = concrete(leaf)
        if v is None or not np.issubdtype(np.asarray(v).dtype, np.inexact):
            continue
        if not np.all(np.isfinite(v)):
            where = jax.tree_util.keystr(path)
            raise ModelError(f"'{name}{where}' contains non-finite values: {np.asarray(v).tolist()}")


def control(ctrl, name: str = "control") -> None:
    """``ctrl`` is an :class:`~rollball_jax.controls.AbstractControl` (its output size is
    checked against the model where it is first evaluated); ``ModelError`` otherwise."""
    from .controls import AbstractControl

    if not isinstance(ctrl, AbstractControl):
        raise ModelError(
            f"'{name}' must be a rollball_jax control (ConstantControl, PaperStep, CubicSplineControl, ...); "
            f"got {type(ctrl).__name__}"
        )


def adaptive_solver(solver, name: str = "solver") -> None:
    """``solver`` is a diffrax solver with an error estimate (the package's solves choose
    their steps adaptively); ``ModelError`` otherwise (diffrax raised its own
    "Cannot use adaptive step sizes with a solver that does not provide error estimates")."""
    import diffrax as dfx

    if not isinstance(solver, dfx.AbstractAdaptiveSolver):
        raise ModelError(
            f"'{name}' must be an adaptive diffrax solver, one with an error estimate (Dopri8, the default; "
            f"Tsit5, Kvaerno5, ...); got {type(solver).__name__}: the solves choose their steps by error control"
        )


def traced_output(fn, args: tuple, what: str, call: str):
    """``jax.eval_shape(fn, *args)`` (nothing computed) for a user-supplied function, so that
    one that does not trace with JAX (NumPy or Python control flow on its arguments, a
    wrong signature) is refused when the object is built, naming it (``what``, e.g.
    ``"FunctionRail 'fn'"``) and how it was called (``call``), instead of failing later
    inside a solve with JAX's own error."""
    import equinox as eqx

    try:  # filter_eval_shape: non-array leaves of the parameters (strings, flags) stay static, as in the solves
        return eqx.filter_eval_shape(fn, *args)
    except Exception as e:  # noqa: BLE001 - the user's function failed to trace: say so
        raise ModelError(f"{what} failed when called as {call}: {type(e).__name__}: {e}") from e


def control_value(u, n: int):
    """``u`` (the control's output inside a vector field, or its ``jax.ShapeDtypeStruct``) if
    its shape is ``(n,)``; else ``ModelError``. Shapes are static, so this costs nothing at run time and holds under
    every JAX transformation (it runs while the field is traced)."""
    if np.shape(u) != (n,):
        raise ModelError(f"control returns u of shape {tuple(np.shape(u))} but the model has {n} masses")
    return u


def control_output(model, ctrl) -> None:
    """``ctrl(t, x)`` has the shape ``(model.n,)`` (one θ̈ per point mass) for a float64 time
    and state ``(model.state_size,)``; ``ModelError`` otherwise. Only shapes are traced
    (``jax.eval_shape``: nothing is computed, so it holds under ``jax.jit``/``grad`` too),
    also for a model without masses, whose control the solve never evaluates (e.g.
    ``rb.ConstantControl([])``)."""
    t = jax.ShapeDtypeStruct((), jnp.float64)
    x = jax.ShapeDtypeStruct((model.state_size,), jnp.float64)
    control_value(jax.eval_shape(ctrl, t, x), model.n)


def state(model, x, name: str = "x0", outside=None) -> np.ndarray:
    """A concrete state ``(N,)`` of ``model``: length, finiteness, model rules (versor,
    masses inside the shell; ``outside``: ``model.outside(x)`` if already computed)."""
    if np.iscomplexobj(x):
        raise ModelError(f"'{name}': " + COMPLEX_MESSAGE)
    if np.ndim(x) != 1:  # a (2, N/2) or (1, N) array was flattened silently
        raise ModelError(f"'{name}' must be a state vector of length {model.state_size}; got shape {np.shape(x)}")
    v = np.asarray(x, dtype=np.float64).reshape(-1)
    if v.shape != (model.state_size,):
        raise ModelError(
            f"'{name}' must have length {model.state_size} ({', '.join(model.state_labels())}); got {v.shape[0]}"
        )
    bad = np.nonzero(~np.isfinite(v))[0]
    if bad.size:
        raise ModelError(f"'{name}' contains non-finite values (component {model.state_labels()[int(bad[0])]!r})")
    type(model).check_state(model, v, name, outside=outside)  # not model.check_state: see solve.simulate
    return v


def versor_norm_ok(norm):
    """Whether ``|q|`` (a number or an array of them) is 1 to within :data:`VERSOR_TOL`,
    plus a few ulps, so that q0 = 1 ± VERSOR_TOL (a finite-difference step of that size)
    passes on both sides: |q| − 1 comes out −1.0000000000288e-6 and +0.99999999992e-6."""
    return np.abs(np.asarray(norm) - 1.0) <= VERSOR_TOL + 8 * np.finfo(np.float64).eps


def versor(q, name: str) -> None:
    """``|q| = 1`` to within :data:`VERSOR_TOL` (concrete ``q`` ``(4,)``)."""
    norm = float(np.linalg.norm(q))
    if not versor_norm_ok(norm):
        raise ModelError(
            f"'{name}': the versor q = {np.asarray(q).tolist()} has |q| = {norm:.12g}; it must have unit length "
            f"(to within {VERSOR_TOL:g}): normalise it (q / |q|) or build the state with the model's initial_state"
        )


def positive(x, name: str) -> None:
    """Every entry of a concrete ``x`` positive and finite (traced values are not checked)."""
    v = concrete(x)
    if v is not None and (np.any(~np.isfinite(v)) or np.any(v <= 0)):
        raise ModelError(f"'{name}' must be positive and finite; got {np.asarray(v).tolist()}")


def non_negative(x, name: str) -> None:
    """Every entry of a concrete ``x`` non-negative and finite (traced values are not checked)."""
    v = concrete(x)
    if v is not None and (np.any(~np.isfinite(v)) or np.any(v < 0)):
        raise ModelError(f"'{name}' must be non-negative and finite; got {np.asarray(v).tolist()}")


def numeric(x, name: str):
    """``x`` as a float64 array (NumPy when concrete, as :func:`~rollball_jax.errors.as_float64`);
    ``ModelError`` naming ``name`` for what is not numbers (``masses=["a"]`` raised NumPy's
    "could not convert string to float")."""
    h = concrete(x)
    if h is not None and jnp.issubdtype(h.dtype, jnp.complexfloating):  # the cast would drop the imaginary part
        raise ModelError(f"'{name}': " + COMPLEX_MESSAGE)
    if h is not None and not (jnp.issubdtype(h.dtype, jnp.number) or h.dtype == bool):  # text ("1.0" too), objects
        raise ModelError(f"'{name}' must be numeric; got {x!r}")
    try:
        return as_float64(x)
    except (TypeError, ValueError) as e:
        raise ModelError(f"'{name}' must be numeric; got {x!r}") from e


def principal_moments(inertia, name: str = "inertia"):
    """Principal moments (d1, d2, d3) as a float64 ``(3,)`` array: positive, finite and
    satisfying the triangle inequality d_i ≤ d_j + d_k (every inertia tensor of a mass
    distribution does), with a relative slack of 1e-12. Raises ``ModelError`` naming
    ``name``. Shared by :class:`rollball_jax.Ball` and the rigid bodies."""
    import jax.numpy as jnp

    d = jnp.asarray(numeric(inertia, name))
    if d.shape != (3,):
        raise ModelError(f"'{name}' must be principal moments (d1, d2, d3), shape (3,); got {d.shape}")
    positive(d, name)
    dv = concrete(d)
    if dv is not None:
        for i in range(3):
            j, k = (i + 1) % 3, (i + 2) % 3
            if dv[i] > dv[j] + dv[k] + 1e-12 * dv.sum():
                raise ModelError(
                    f"'{name}' {dv.tolist()} violates the triangle inequality d{i + 1} <= d{j + 1} + d{k + 1}"
                )
    return d


def nonfinite_component(values, labels) -> str | None:
    """Label of the first non-finite entry of ``values`` ``(N,)``, or None."""
    bad = np.nonzero(~np.isfinite(np.asarray(values)))[0]
    return None if bad.size == 0 else labels[int(bad[0])]
