"""Batch strategies as objects, in diffrax's style (like its step-size controllers).

A strategy says *how* :func:`simulate_batch` advances the members; it carries its own
options, so no flag of ``simulate_batch`` is meaningful for one strategy only::

    simulate_batch(models, controls, x0s, t_span)                              # Adaptive()
    simulate_batch(models, controls, x0s, t_span, strategy=Lockstep(group_size=512))
    simulate_batch(models, controls, x0s, t_span, strategy=Fixed(dt=0.01, refine=False))

The string names (``"adaptive"``, ``"lockstep"``, ``"shared"``, ``"fixed"``) remain as a
shorthand for a strategy with its default options (:func:`strategy_from_name`, used by the
sweep configuration files). Measurements: ``docs/batch.md``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx

from .._typing import RealScalar
from ..errors import ModelError


class AbstractBatchStrategy(eqx.Module):
    """How the members of a batch are advanced. Subclasses: :class:`Adaptive`,
    :class:`Lockstep`, :class:`Shared`, :class:`Fixed`."""

    name: ClassVar[str]


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
    refine: bool = True


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
