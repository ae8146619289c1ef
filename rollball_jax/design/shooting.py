"""Multiple shooting: the horizon cut into segments, each solved from its own free state.

Single shooting differentiates one solve over the whole horizon; from an unstable state
(the paper's ball starts as an inverted pendulum, time constant ≈ 1) the sensitivities
grow like e^{T/τ} and Gauss–Newton stalls. :class:`MultipleShooting` cuts ``[0, T]`` at
``τ_s = s·T/S`` and adds the states at ``τ_1 … τ_{S−1}`` (the *nodes*) to the
parameters; the S segments are independent solves, done in one compiled call
(``lax.map``; exact Jacobians of all segments in one forward-mode pass), and
the continuity defects ``x(τ_{s+1}; node_s) − node_{s+1}`` become least-squares residuals
(the :class:`~.costs.Continuity` term). At convergence the defects vanish and the
segments form one trajectory of the model.

A :class:`MultipleShooting` has the interface :func:`~.optimize.optimize` uses
(``initial_params``, ``evaluate``, ``wrap``, ``control``, ``initial_state``,
``sample_ts``), so every optimiser and cost term works with it; add
``ms.continuity(weight)`` to the cost.

Sample grid: each segment carries its share of the problem's ``n_samples − 1`` intervals
plus its start point, so a boundary time appears twice (segment end, then the next
node); path integrals are unaffected (the duplicate pair has zero width).
"""

from __future__ import annotations

import operator

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from .. import _checks as checks
from .._typing import ArrayInput, RealScalar

from ..errors import ModelError, SimulationError
from ..sensitivity import trajectory
from .costs import Continuity
from .problem import DesignProblem, Evaluation

__all__ = ["MultipleShooting"]


@eqx.filter_jit
def _segments(model, control, starts, seg_ts, solver, rtol, atol, max_steps, adjoint, dense, tangent_control):
    """States ``(S, K, N)`` of every segment from its start ``starts[s]`` at its times
    ``seg_ts[s]``. Compiled once per structure: a ``lax.map`` over a closure built per call
    compiled anew at every eager call of :meth:`MultipleShooting.evaluate` (~1 s each)."""
    # lax.map, not vmap: under vmap the discrete adjoint's "skip the unused step buffer"
    # conditionals would become selects and replay all max_steps steps of every segment.
    return jax.lax.map(lambda a: trajectory(model, control, a[0], a[1], solver=solver, rtol=rtol, atol=atol,
                                            max_steps=max_steps, adjoint=adjoint, throw=False, dense=dense,
                                            tangent_control=tangent_control),
                       (starts, seg_ts))


#: Nominal points per design sample interval for a feedback law (:meth:`MultipleShooting.feedback_nominal`).
FEEDBACK_REFINE = 4


class MultipleShooting(eqx.Module):
    """Multiple-shooting form of a :class:`DesignProblem` with ``n_segments`` segments.

    ``problem.n_samples − 1`` must be a multiple of ``n_segments``. Parameters: those of
    ``problem`` plus ``"nodes"`` ``(S − 1, N)``, the states at the inner boundaries.
    Raises ``ModelError`` for a bad segment count.
    """

    problem: DesignProblem
    n_segments: int = eqx.field(static=True)

    def __init__(self, problem: DesignProblem, n_segments: int):
        try:  # an integer (np.array(4) too); 2.5 was taken for 2
            S = operator.index(n_segments) if not isinstance(n_segments, bool) else 0
        except TypeError:
            S = 0
        if S < 1:
            raise ModelError(f"n_segments must be a positive integer; got {n_segments!r}")
        if (problem.n_samples - 1) % S:
            raise ModelError(
                f"n_samples − 1 = {problem.n_samples - 1} must be a multiple of n_segments = {S} "
                f"(e.g. n_samples = {S * max(1, (problem.n_samples - 1) // S) + 1})"
            )
        self.problem = problem
        self.n_segments = S

    # ---- grid ---------------------------------------------------------------------
    @property
    def per_segment(self) -> int:
        """Sample intervals per segment."""
        return (self.problem.n_samples - 1) // self.n_segments

    @property
    def boundaries(self) -> np.ndarray:
        """``(S + 1,)`` segment boundary times τ_s."""
        return np.asarray(self.problem.sample_ts)[:: self.per_segment]

    def _segment_ts(self) -> Float[Array, "S m"]:
        m = self.per_segment
        ts = self.problem.sample_ts
        idx = np.arange(self.n_segments)[:, None] * m + np.arange(m + 1)[None, :]
        return ts[idx]

    @property
    def sample_ts(self) -> Float[Array, " T"]:
        """``(S·(m + 1),)`` sample times, segment by segment (boundaries twice)."""
        return self._segment_ts().reshape(-1)

    @property
    def pairs(self) -> tuple[int, ...]:
        """Sample indices j (segment end) with j + 1 the next segment's node."""
        m1 = self.per_segment + 1
        return tuple((s + 1) * m1 - 1 for s in range(self.n_segments - 1))

    def continuity(self, weight: float = 1e4) -> Continuity:
        """The :class:`~.costs.Continuity` cost term of this grid."""
        return Continuity(self.pairs, weight)

    # ---- parameters ---------------------------------------------------------------------
    def initial_params(self, values: ArrayInput | None = None, theta0: ArrayInput | None = None,
                       nodes: ArrayInput | None = None) -> dict:
        """The problem's parameters plus ``nodes`` ``(S − 1, N)``. Default nodes: the
        single-shooting trajectory of the initial controls at the boundaries (``rb.simulate``);
        where it fails or is non-finite, the initial state."""
        params = self.problem.initial_params(values, theta0)
        N = self.problem.model.state_size
        shape = (self.n_segments - 1, N)
        if nodes is None:
            x0 = np.asarray(self.problem.initial_state(params))
            nodes = np.repeat(x0[None], shape[0], axis=0)
            if shape[0]:
                from ..solve import simulate

                try:
                    sol = simulate(self.problem.model, self.problem.control(params), x0, (0.0, self.problem.horizon),
                                   ts=self.boundaries, rtol=float(self.problem.rtol), atol=float(self.problem.atol))
                    if np.all(np.isfinite(sol.xs)):
                        nodes = sol.xs[1:-1]
                except SimulationError:
                    pass
        nodes = jnp.asarray(nodes, dtype=jnp.float64)
        if nodes.shape != shape:
            raise ModelError(f"nodes must have shape {shape} (inner boundaries × state); got {nodes.shape}")
        params["nodes"] = nodes
        return params

    def single_shooting_params(self, params: PyTree) -> dict:
        """The parameters of the underlying :class:`DesignProblem` (nodes dropped)."""
        return {k: v for k, v in params.items() if k != "nodes"}

    def control(self, params: PyTree):
        return self.problem.control(params)

    def initial_state(self, params: PyTree) -> Float[Array, " N"]:
        return self.problem.initial_state(params)

    def segment_starts(self, params: PyTree) -> Float[Array, "S N"]:
        """``(S, N)``: the initial state, then the nodes."""
        return jnp.concatenate([self.initial_state(params)[None], params["nodes"]])

    # ---- solving -------------------------------------------------------------------------
    def evaluate(self, params: PyTree, adjoint: str = "discrete") -> Evaluation:
        """All segments solved in one compiled program (``lax.map`` over the segments); the
        samples concatenated segment by segment (pure, differentiable; a failed segment
        gives ``inf`` states)."""
        p = self.problem
        control = self.control(params)
        starts = self.segment_starts(params)
        seg_ts = self._segment_ts()
        xs = _segments(p.model, control, starts, seg_ts, p.solver, p.rtol, p.atol, p.max_steps, adjoint, p.dense,
                       p.tangent_control)
        x0 = self.initial_state(params)
        return Evaluation(p.model, control, x0, seg_ts.reshape(-1), xs.reshape(-1, xs.shape[-1]), p.context(x0))

    def defects(self, params: PyTree) -> Float[Array, "_ N"]:
        """``(S − 1, N)`` continuity defects x(τ_{s+1}; node_s) − node_{s+1}."""
        ev = self.evaluate(params)
        j = np.asarray(self.pairs, dtype=int)
        return ev.xs[j] - ev.xs[j + 1]

    def nominal(self, params: PyTree, per_segment: int = 50, rtol: RealScalar = 1e-11,
                atol: RealScalar = 1e-11) -> tuple[np.ndarray, np.ndarray]:
        """The designed motion, densely: each segment solved from its own start with
        ``rb.simulate`` on ``per_segment + 1`` equally spaced times, joined at the nodes
        (the segment's end replaced by the next node: a jump of one defect; a node's versor
        is normalised first, a change of the order of its defect). Returns
        ``(ts (S·per_segment + 1,), xs (·, N))``, e.g. the ``nominal`` of
        :func:`~.feedback.tvlqr`. Raises ``SimulationError`` if a segment's solve fails,
        ``ModelError`` naming the segment if its start (a node) is not a valid state, and for
        a bad ``per_segment``, ``rtol`` or ``atol``."""
        from ..solve import simulate

        control = self.control(params)
        starts = np.array(self.segment_starts(params))
        k = self.problem.model.versor_index
        if k is not None:  # a free node's versor is unit only to within its defect
            starts[:, k : k + 4] /= np.linalg.norm(starts[:, k : k + 4], axis=1, keepdims=True)
        b = self.boundaries
        ts, xs = [], []
        checks.tolerance(rtol, "rtol")
        checks.tolerance(atol, "atol")
        checks.integer(per_segment, "per_segment")
        for s, x0 in enumerate(starts):
            # a node's state named as its segment's start (simulate would call it 'x0')
            checks.state(self.problem.model, x0, f"start of segment {s} (t = {b[s]:.6g})")
            sol = simulate(self.problem.model, control, x0, (float(b[s]), float(b[s + 1])), n_save=per_segment + 1,
                           rtol=rtol, atol=atol)
            last = s == self.n_segments - 1
            ts.append(np.asarray(sol.ts) if last else np.asarray(sol.ts)[:-1])
            xs.append(np.asarray(sol.xs) if last else np.asarray(sol.xs)[:-1])
        return np.concatenate(ts), np.concatenate(xs)

    def feedback_nominal(self, params: PyTree) -> tuple[np.ndarray, np.ndarray]:
        """The nominal motion a feedback law around this design is built on:
        :meth:`nominal` with ``FEEDBACK_REFINE`` (4) points per design sample interval, so
        that every ``FEEDBACK_REFINE``-th point is a design sample. The closed-loop
        verification of ``rollball_jax.design.report.run_experiment`` and the robustness
        experiment both use it, so they study the same controller (and share its compiled
        Riccati solve). Returns ``(ts (S·4m + 1,), xs (·, N))``; raises ``SimulationError``
        if a segment's solve fails."""
        return self.nominal(params, per_segment=FEEDBACK_REFINE * self.per_segment)

    def wrap(self, params: PyTree, ts: ArrayInput, xs: ArrayInput) -> Evaluation:
        x0 = self.initial_state(params)
        return Evaluation(self.problem.model, self.control(params), x0, jnp.asarray(ts, dtype=jnp.float64),
                          jnp.asarray(xs, dtype=jnp.float64), self.problem.context(x0))

    def flatten(self, params: PyTree):
        from jax.flatten_util import ravel_pytree

        return ravel_pytree(params)

    @property
    def horizon(self) -> float:
        return self.problem.horizon

    @property
    def model(self):
        return self.problem.model
