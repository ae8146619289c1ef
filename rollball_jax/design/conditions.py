"""Conditions on a design's metrics: ``{metric: limit}``, each read as ``metric <= limit``.

One spelling for the design's goals everywhere they are checked: :func:`optimize`'s
``stop_when`` (on the optimiser's own trajectory), the experiments' ``goals`` (on the
SciPy re-simulation, :func:`~rollball_jax.design.report.run_experiment`) and the
benchmarks' stopping rule. A metric name prefixed with ``-`` is negated first, so that a
lower bound reads ``{"-min_clearance": 0.0}`` (clearance ≥ 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["ConditionCheck", "check_condition", "conditions_met"]


class ConditionCheck(NamedTuple):
    """One condition checked on a metrics dict."""

    metric: str  # the metric's name (without the ``-`` prefix)
    value: float  # its value
    relation: str  # "<=" or ">="
    limit: float  # the bound on ``value`` (``-limit`` of a ``-`` prefixed condition)
    met: bool


def check_condition(metrics: Mapping, metric: str, limit: float) -> ConditionCheck:
    """``metric <= limit`` (or ``value >= -limit`` for ``-metric``) on ``metrics``
    (``{name: scalar}``). Raises ``KeyError`` for a name that is not in ``metrics``."""
    lower = metric.startswith("-")
    name = metric.lstrip("-")
    if name not in metrics:
        raise KeyError(f"condition on {name!r}: not a metric of this cost; metrics are {sorted(metrics)}")
    value = float(metrics[name])
    if lower:
        return ConditionCheck(name, value, ">=", -float(limit) + 0.0, bool(-value <= limit))
    return ConditionCheck(name, value, "<=", float(limit), bool(value <= limit))


def conditions_met(metrics: Mapping, conditions: Mapping[str, float]) -> bool:
    """Every condition of ``conditions`` (``{metric: limit}``, see :func:`check_condition`) holds."""
    return all(check_condition(metrics, metric, limit).met for metric, limit in conditions.items())
