"""Batched simulation: thousands of designs in one compiled solve, on every local device.

A *batch* is the same pytree as one model (or control) with a leading axis of length B on
every array leaf: build it with :func:`stack` from a list of same-structure modules, or
with ``eqx.filter_vmap`` over a constructor. :func:`simulate_batch` solves all members
with one compilation and returns a :class:`BatchResult` in which every member carries its
own status (``diffrax.RESULTS`` names, e.g. ``max_steps_reached``, ``nonfinite``): a
failed member does not disturb the others.

Strategies are objects passed as ``strategy=`` (diffrax style: each carries its own
options), see ``docs/batch.md`` for measurements; a name stands for the strategy with its
default options (``strategy="lockstep"`` is ``Lockstep()``):

:class:`Adaptive` (default, ``"adaptive"``)
    :func:`rollball_jax.integrate` per member: every member has its own adaptive step
    sequence, exactly as a single :func:`rollball_jax.simulate` call with the same
    settings. On the CPU with the package's small-loop XLA option (the default) the
    members are solved one after the other inside one compiled call per device
    (``lax.map``): the same bits as single solves. Otherwise (other devices, the option
    off) they are vmapped: results agree with single solves to rounding, not bit for bit,
    and the members advance together, as many loop iterations as the slowest member
    (``docs/batch.md``).
:class:`Lockstep` (``group_size``, ``fast_trig``, ``rolled``)
    The same per-member adaptive stepping (diffrax's default controller: I-control,
    safety 0.9, step factors in [0.2, 10], Hairer's initial step, steps landing on the
    control's kinks) written as one loop over a *group* of ``group_size`` members in
    structure-of-arrays layout: every iteration advances each unfinished member by one
    of its own steps. Same accuracy class as ``"adaptive"`` (not bit-identical: the
    arithmetic is reordered and sin/cos are computed by :func:`sincos`), several times
    faster. Failures are per member (``max_steps`` counts each member's own steps).
:class:`Shared` (``group_size``, ``refine``, ...)
    One adaptive step for the whole group: the error norm is the max over the group's
    members of their RMS scaled error, so every member meets the tolerance, but every
    member also takes the steps its hardest neighbour needs. Worth it when members are
    similar (small perturbations of one design). A group whose shared solve fails (e.g.
    one member makes the step collapse and the group runs out of steps) is re-solved
    member by member with :class:`Adaptive` (``refine=True``), so failures stay isolated.
:class:`Fixed` (``dt``, ``refine``, ``group_size``, ...)
    The structure-of-arrays system on a fixed step grid (step ``dt``, refined so that
    steps land on every control kink): no step control and no rejected steps. The
    embedded error estimate of every step is still computed and its maximum per member
    is reported (``BatchResult.error_estimate``, in units of the tolerance: ≤ 1 means
    every step met ``rtol``/``atol``). ``dt=None`` picks the step from the first unit
    of the batch (pilot) so that this estimate is ≤ 1; members that still exceed it are
    re-solved with :class:`Adaptive` (``refine=True``).

The fast modes evaluate the vector field through a structure-of-arrays transformation
of the model's own jaxpr (:class:`SoAVectorField`): every scalar of the single-member
computation becomes one vector over the group, constants are folded at trace time, and
sin/cos are replaced by a vectorisable polynomial :func:`sincos` (≤ 2 ulp for
|x| < 1e5). The physics is not duplicated: the program is derived from
``model.vector_field`` by tracing, so it works for every model, rail and control.

Devices: batches are split over ``devices`` (default: all local devices) with
``jax.shard_map`` over a :class:`jax.sharding.Mesh`, padding B with copies of the first
member. On the CPU, XLA gives one device per process; set
``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` before importing JAX to use
every core (:func:`host_device_flags`).

Layout: ``_strategies`` (the strategy objects), ``_driver`` (:func:`simulate_batch`), ``_group_rk`` (the explicit
Runge–Kutta loops over a group axis, any right-hand side), ``_soa`` (the
structure-of-arrays vector field, self-checked at first use), ``_group_field`` (the
same interface by ``jax.vmap`` of the member's field: the self-check's reference and the
measured alternative, see docs/batch.md), ``_sincos`` (vectorisable sin/cos), ``_result``
(:class:`BatchResult`, member status codes), ``_stacking`` (batches as pytrees).
"""

from ._driver import choose_fixed_dt, host_device_flags, simulate_batch
from ._strategies import (
    MODES,
    AbstractBatchStrategy,
    AbstractGroupStrategy,
    Adaptive,
    Fixed,
    Lockstep,
    Shared,
    strategy_from_name,
)
from ._result import (
    STATUS_INVALID,
    STATUS_MAX_STEPS,
    STATUS_MAX_STEPS_REJECTED,
    STATUS_NAMES,
    STATUS_NONFINITE,
    STATUS_NONFINITE_FIELD,
    STATUS_NOT_RUN,
    STATUS_RAIL_LEFT,
    STATUS_SUCCESS,
    BatchResult,
    status_name,
)
from ._stacking import batch_size, member, stack

__all__ = [
    "MODES",
    "AbstractBatchStrategy",
    "AbstractGroupStrategy",
    "Adaptive",
    "Fixed",
    "Lockstep",
    "Shared",
    "strategy_from_name",
    "STATUS_INVALID",
    "STATUS_MAX_STEPS",
    "STATUS_MAX_STEPS_REJECTED",
    "STATUS_NAMES",
    "STATUS_NONFINITE",
    "STATUS_NONFINITE_FIELD",
    "STATUS_NOT_RUN",
    "STATUS_RAIL_LEFT",
    "STATUS_SUCCESS",
    "BatchResult",
    "batch_size",
    "choose_fixed_dt",
    "host_device_flags",
    "member",
    "simulate_batch",
    "stack",
    "status_name",
]
