"""Batch strategies as objects, in diffrax's style (like its step-size controllers).

A strategy says *how* :func:`simulate_batch` advances the members; it carries its own
options, so no flag of ``simulate_batch`` is meaningful for one strategy only::

    simulate_batch(models, controls, x0s, t_span)                              # Adaptive()
    simulate_batch(models, controls, x0s, t_span, strategy=Lockstep(group_size=512))
    simulate_batch(models, controls, x0s, t_span, strategy=Fixed(dt=0.01, refine=False))

The behaviour is the object's too: :meth:`AbstractBatchStrategy.solve_batch` solves the
batch through the driver's operations and names the members to re-solve one by one, so
the driver has no branch per strategy (a subclass can change what a strategy does).

The string names (``"adaptive"``, ``"lockstep"``, ``"shared"``, ``"fixed"``) remain as a
shorthand for a strategy with its default options (:func:`strategy_from_name`, used by the
sweep configuration files). Measurements: ``docs/batch.md``.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import equinox as eqx
import numpy as np

from .._typing import RealScalar
from ..errors import ModelError
from ._result import STATUS_SUCCESS


class AbstractBatchStrategy(eqx.Module):
    """How the members of a batch are advanced. Subclasses: :class:`Adaptive`,
    :class:`Lockstep`, :class:`Shared`, :class:`Fixed`.

    Each strategy solves the batch itself (:meth:`solve_batch`) through the driver's
    operations (``run``: solve members with diffrax, solve the batch with a group loop,
    choose a fixed step by a pilot run), and says which members the driver re-solves one
    by one with :class:`Adaptive`."""

    name: ClassVar[str]
    #: the members are solved by diffrax itself (the driver reports the non-finite values
    #: diffrax accepted, and keeps implicit solvers on one device)
    solves_with_diffrax: ClassVar[bool] = False

    @abc.abstractmethod
    def solve_batch(self, run) -> tuple[dict, np.ndarray | None]:
        """``(results, members to re-solve with Adaptive (B,) bool, or None)``. ``run``
        offers ``run.adaptive()`` (every member with diffrax), ``run.group(kind, dt=None)``
        (the whole batch with the group loop ``"lockstep"``, ``"shared"`` or ``"fixed"``) and
        ``run.pilot_dt()`` (a fixed step from a pilot run of the batch's first unit)."""


class Adaptive(AbstractBatchStrategy):
    """:func:`rollball_jax.integrate` (diffrax ``diffeqsolve``) per member: every member has
    its own adaptive step sequence, as one :func:`rollball_jax.simulate` call would. On the
    CPU, with XLA's small-loop option in effect (the package's default,
    :mod:`rollball_jax._xla_flags`), the members are solved one after the other inside one
    compiled call per device (``lax.map``; the same bits as single solves, each solve's
    step loop compiled as one kernel); otherwise they are vmapped. Works with every diffrax
    solver (implicit ones on one device: their linear solves fail under ``jax.shard_map``
    over several devices, so :func:`simulate_batch` then warns and uses the first device).
    The default."""

    name: ClassVar[str] = "adaptive"
    solves_with_diffrax: ClassVar[bool] = True

    def solve_batch(self, run):
        return run.adaptive(), None


class AbstractGroupStrategy(AbstractBatchStrategy):
    """Strategies that advance a *group* of members in structure-of-arrays layout with an
    explicit Runge–Kutta tableau (Dopri8, Dopri5, Tsit5, ...).

    Attributes
    ----------
    group_size : members per group (rounded up to a multiple of 8; at most the batch per
        device, except for :class:`Shared`, whose groups share their steps).
    fast_trig : polynomial :func:`~rollball_jax.batch._sincos.sincos` (≤ 2 ulp) instead of
        XLA's sin/cos in the group vector field.
    rolled : Runge–Kutta stages in a loop (fast compilation) or unrolled (faster runs of
        long batches, slower compilation).
    """

    #: groups may hold more members than the batch per device (see :class:`Shared`)
    groups_span_devices: ClassVar[bool] = False
    group_size: int = 256
    fast_trig: bool = True
    rolled: bool = True

    def __check_init__(self):
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) or self.group_size < 1:
            raise ModelError(f"{type(self).__name__}: group_size must be a positive integer; got {self.group_size!r}")


class Lockstep(AbstractGroupStrategy):
    """Per-member adaptive stepping (diffrax's default controller: I-control, safety 0.9,
    step factors in [0.2, 10], Hairer's initial step, steps landing on the control's kinks)
    as one loop over a group: each iteration advances every unfinished member by one of its
    own steps. Same accuracy class as :class:`Adaptive`, several times faster; failures are
    per member (``max_steps`` counts each member's own steps)."""

    name: ClassVar[str] = "lockstep"

    def solve_batch(self, run):
        # nothing to re-solve: every member already has its own steps and status
        return run.group("lockstep"), None


class Shared(AbstractGroupStrategy):
    """One adaptive step for the whole group (error norm: the max over the group's members of
    their RMS scaled error), so every member meets the tolerance. Worth it for similar
    members.

    Attributes
    ----------
    refine : re-solve the members of a failed group with :class:`Adaptive`, so that
        failures stay isolated.
    """

    name: ClassVar[str] = "shared"
    #: a group shares its steps, so its size does not depend on the number of devices
    groups_span_devices: ClassVar[bool] = True
    refine: bool = True

    def solve_batch(self, run):
        res = run.group("shared")
        return res, (res["code"] != STATUS_SUCCESS) if self.refine else None


class Fixed(AbstractGroupStrategy):
    """A fixed step grid (refined so that steps land on every control kink): no step control.
    Every step's embedded error estimate is still computed; its maximum per member is
    reported (``BatchResult.error_estimate``, ≤ 1 means every step met the tolerance).

    Attributes
    ----------
    dt : the step (time units); ``None`` chooses it from a pilot run of the first unit of
        the batch so that the estimate is ≤ 1 (:func:`choose_fixed_dt`).
    refine : re-solve members whose estimate exceeds the tolerance (or that failed) with
        :class:`Adaptive`.
    """

    name: ClassVar[str] = "fixed"
    dt: RealScalar | None = None
    refine: bool = True

    def solve_batch(self, run):
        res = run.group("fixed", dt=run.pilot_dt() if self.dt is None else self.dt)
        bad = (res["code"] != STATUS_SUCCESS) | ~(res["error_estimate"] <= 1.0)
        return res, bad if self.refine else None

    def __check_init__(self):
        if self.dt is not None and not (isinstance(self.dt, (int, float)) and not isinstance(self.dt, bool)
                                        and self.dt > 0 and self.dt < float("inf")):
            raise ModelError(f"Fixed: dt must be a positive finite number or None; got {self.dt!r}")


STRATEGIES: dict[str, type[AbstractBatchStrategy]] = {
    cls.name: cls for cls in (Adaptive, Lockstep, Shared, Fixed)
}
MODES = tuple(STRATEGIES)


def strategy_from_name(name: str, **options) -> AbstractBatchStrategy:
    """The strategy called ``name`` (one of :data:`MODES`) with ``options`` (its fields;
    ``None`` values are left at their defaults). Raises ``ModelError`` for an unknown name
    or an option the strategy does not have."""
    if name not in STRATEGIES:
        raise ModelError(f"unknown batch strategy {name!r}; choose one of {MODES}")
    cls = STRATEGIES[name]
    options = {k: v for k, v in options.items() if v is not None}
    fields = {f.name for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}  # not the ClassVar name
    extra = sorted(set(options) - fields)
    if extra:
        raise ModelError(f"strategy {name!r} has no option {extra[0]!r} (options: {', '.join(sorted(fields)) or 'none'})")
    return cls(**options)


def as_strategy(strategy) -> AbstractBatchStrategy:
    """A strategy object from an object or a name."""
    if isinstance(strategy, AbstractBatchStrategy):
        return strategy
    if isinstance(strategy, str):
        return strategy_from_name(strategy)
    raise ModelError(f"strategy must be a batch strategy (Adaptive(), Lockstep(...), Shared(...), Fixed(...)) "
                     f"or one of the names {MODES}; got {type(strategy).__name__}")
