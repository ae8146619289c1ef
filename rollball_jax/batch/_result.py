"""Member status codes and :class:`BatchResult`."""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import _results



#: Result names by code (:mod:`rollball_jax._results`, diffrax's outcomes), e.g. 0 successful, 1 max_steps_reached.
STATUS_NAMES: dict[int, str] = dict(enumerate(_results.NAMES))
STATUS_SUCCESS = 0
STATUS_MAX_STEPS = next(k for k, v in STATUS_NAMES.items() if v == "max_steps_reached")
STATUS_NONFINITE = next(k for k, v in STATUS_NAMES.items() if v == "nonfinite")
STATUS_MAX_STEPS_REJECTED = next(k for k, v in STATUS_NAMES.items() if v == "max_steps_rejected")
#: Codes used by sweeps for members that were never solved.
STATUS_INVALID = 100
STATUS_NOT_RUN = -1
#: Codes set by the checks after a solve (the cause detail is in ``BatchResult.causes``).
STATUS_NONFINITE_FIELD = 101
STATUS_RAIL_LEFT = 102
STATUS_NAMES[STATUS_INVALID] = "invalid_config"
STATUS_NAMES[STATUS_NOT_RUN] = "not_run"
STATUS_NAMES[STATUS_NONFINITE_FIELD] = "nonfinite_vector_field"
STATUS_NAMES[STATUS_RAIL_LEFT] = "rail_left"


def status_name(code: int | np.integer) -> str:
    """Name of a member status code (diffrax ``RESULTS`` name, or ``invalid_config``)."""
    return STATUS_NAMES.get(int(code), f"code_{int(code)}")



# ======================================================================================
# Results
# ======================================================================================


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """Results of :func:`simulate_batch` (NumPy arrays, member first).

    Attributes
    ----------
    ts : (T,)                  save times.
    ys : (B, T, N)             states at ``ts`` (paper ordering); NaN/inf after a failure.
    x_final : (B, N)           state at ``t_final``.
    t_final : (B,)             time reached (t1 on success).
    status : (B,) int          0 = success, else a diffrax ``RESULTS`` code or one of the
                               package's own (101 ``nonfinite_vector_field``, 102
                               ``rail_left``; :func:`status_name`, ``causes``).
    num_steps, num_accepted_steps, num_rejected_steps : (B,) int
        step counts (shared by a group in modes ``shared``/``fixed``).
    error_estimate : (B,)      modes ``shared``/``fixed``: max over accepted steps of the
                               member's scaled embedded error estimate (≤ 1: every step met
                               the tolerance); NaN in mode ``adaptive``.
    refined : (B,) bool        re-solved in ``adaptive`` mode (failed shared group, or a
                               fixed-step member whose estimate exceeded the tolerance).
    mode : the strategy's name; strategy : the strategy object as given.
    rtol, atol, dt, group_size, n_devices, wall_time : run settings (``dt``: the fixed step
                               used, also when chosen by the pilot; ``group_size``: after
                               rounding) and timing.
    """

    ts: np.ndarray
    ys: np.ndarray
    x_final: np.ndarray
    t_final: np.ndarray
    status: np.ndarray
    num_steps: np.ndarray
    num_accepted_steps: np.ndarray
    num_rejected_steps: np.ndarray
    error_estimate: np.ndarray
    refined: np.ndarray
    mode: str
    rtol: float
    atol: float
    dt: float | None
    group_size: int | None
    n_devices: int
    wall_time: float
    details: tuple = ()
    strategy: object = None

    @property
    def size(self) -> int:
        return int(self.status.shape[0])

    @property
    def ok(self) -> np.ndarray:
        """``(B,)`` True where the member was solved successfully."""
        return self.status == STATUS_SUCCESS

    @property
    def causes(self) -> list[str]:
        """Per member: ``""`` on success, else the status name and diffrax's message."""
        out = []
        for i, code in enumerate(self.status):
            if code == STATUS_SUCCESS:
                out.append("")
                continue
            name = status_name(code)
            if i < len(self.details) and self.details[i]:
                out.append(f"{name}: {self.details[i]}")
                continue
            msg = _results.MESSAGES.get(name, "")
            out.append(f"{name}: {msg}" if msg else name)
        return out

    @property
    def lockstep_efficiency(self) -> float:
        """mean/max steps over members (1: no member waited for another)."""
        n = self.num_steps[self.ok] if np.any(self.ok) else self.num_steps
        return float(np.mean(n) / max(np.max(n), 1)) if n.size else float("nan")
