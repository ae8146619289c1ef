"""``RejectionLimit``: end a solve whose steps keep being rejected.

A vector field that turns non-finite mid-run (a force or control that returns NaN from
some time on) makes every later step's error estimate NaN: diffrax's PID controller
rejects the step and proposes a NaN step size, and the solve spends all of ``max_steps``
on rejected steps (the paper ball with a NaN force from t = 2: 99,954 rejected steps,
2.2 s, before ``max_steps_reached``). Under ``jax.vmap`` one such member holds the whole
batch for ``max_steps`` iterations.

A healthy adaptive solve rejects a few steps in a row at most: every rejection shrinks
the step by a factor between 0.2 and 0.9 (diffrax's ``factormin`` and ``safety``), so 100
rejections in a row shrink it by at least 0.9^100 ≈ 3e-5 and by up to 0.2^100 ≈ 1e-70.
The limit here (``MAX_CONSECUTIVE_REJECTIONS`` = 100) ends the solve with diffrax's own
``max_steps_rejected`` result instead; ``rb.simulate`` then probes the vector field and
names the cause as before. Accepted steps reset the count, so the step sequence of every
solve that does not hit the limit is unchanged: measured bit for bit for the forward
solves (``rb.simulate`` on both paper examples) and for the ``BacksolveAdjoint`` gradient
of the paper ball's final GC over [0, 3], eagerly and under ``jit`` (fresh processes with
and without the limit). Measured margin: the longest run of rejections in the
paper examples at tolerances 1e-10 to 1e-15, with Dopri8, Tsit5 and Kvaerno5, is 1; with
a control jump not declared as a kink time, 13.

Scope: every adaptive solve of the package. Diffrax solves through this controller
(``stepsize_controller``: ``rb.integrate``, ``rb.simulate``, batch strategy ``Adaptive``,
``adjoint="backsolve"``; and the Riccati solve of ``design.riccati``/``tvlqr``, where a
finite escape now ends the solve: 41 → 1 ms compiled for ṗ = p² + 1, results of solves
that succeed bit-identical); the package's own step-size loops count the same rejections
themselves: the discrete adjoint's recording pass (``_rk.adaptive_solve``; the derivative
outputs then raise "100 steps in a row were rejected" instead of naming ``max_steps``,
0.09 → 0.01 s for the NaN force above) and the batch group loops (``Lockstep`` per
member, ``Shared`` per group: status ``max_steps_rejected``; an 8-member batch with one
such member 6.0 → 0.03 s per call, measured). Solves that do not hit the limit are
unchanged bit for bit (batch results of all four strategies and the discrete adjoint's
value and gradient, compared with the previous code in fresh processes).
"""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp

#: Rejected steps in a row after which a solve ends with ``max_steps_rejected``.
MAX_CONSECUTIVE_REJECTIONS = 100


class RejectionLimit(dfx.AbstractAdaptiveStepSizeController):
    """Wraps an adaptive step-size controller: the solve ends with
    ``diffrax.RESULTS.max_steps_rejected`` after ``max_rejections`` rejected steps in a row
    (see the module docstring). Tolerances, norm and step sizes are the wrapped
    controller's."""

    controller: dfx.AbstractAdaptiveStepSizeController
    max_rejections: int = eqx.field(static=True, default=MAX_CONSECUTIVE_REJECTIONS)

    @property
    def rtol(self):
        return self.controller.rtol

    @property
    def atol(self):
        return self.controller.atol

    @property
    def norm(self):  # pyright: ignore[reportIncompatibleMethodOverride]
        return self.controller.norm

    def wrap(self, direction):
        return RejectionLimit(self.controller.wrap(direction), self.max_rejections)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        t1, inner = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return t1, (inner, jnp.asarray(0, jnp.int32))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        inner, rejected = controller_state
        keep_step, next_t0, next_t1, made_jump, inner, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, inner)
        rejected = jnp.where(keep_step, 0, rejected + 1)
        result = dfx.RESULTS.where((rejected >= self.max_rejections) & (result == dfx.RESULTS.successful),
                                   dfx.RESULTS.max_steps_rejected, result)
        return keep_step, next_t0, next_t1, made_jump, (inner, rejected), result
