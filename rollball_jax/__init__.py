"""rollball_jax: differentiable simulator of rolling balls and disks driven by internal masses.

Importing the package enables float64 in JAX (``jax_enable_x64``): the paper's
tolerances (1e-10 … 1e-12) are below float32 resolution. It also adds
``--xla_cpu_use_fusion_emitters=false`` to ``XLA_FLAGS`` (about 30 % faster compilation,
same run time; see ``rollball_jax._xla_flags``: an explicit setting wins, and
``ROLLBALL_JAX_XLA_DEFAULTS=0`` leaves ``XLA_FLAGS`` untouched).
"""

from . import _xla_flags

_xla_flags.apply()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from . import geometry, rails, controls, forces, dynamics  # noqa: E402
from .controls import (  # noqa: E402
    AbstractControl,
    ConstantControl,
    CubicSplineControl,
    FunctionControl,
    PaperStep,
    PiecewiseLinearControl,
)
from .errors import ConfigError, ModelError, NotTraceableError, RollballError, SimulationError  # noqa: E402
from .forces import AbstractForce, ConstantForce, FunctionForce  # noqa: E402
from .models import Ball, Disk  # noqa: E402
from .rails import (  # noqa: E402
    AbstractRail,
    CircleRail,
    EllipseRail,
    FigureEightRail,
    FunctionRail,
    RailSet,
    SpokeRail,
)

__version__ = "0.1.0"

from . import observables  # noqa: E402
from .solve import Solution, integrate, simulate  # noqa: E402
from . import jacobians, projection, scipy_bridge, dae  # noqa: E402
from .projection import VersorProjection, project_versor  # noqa: E402
from . import sensitivity  # noqa: E402
from .sensitivity import (  # noqa: E402
    distance_to_target,
    final_gc,
    final_state,
    running_cost,
    state_transition_matrix,
    trajectory,
)
from . import rigid  # noqa: E402
from . import contact  # noqa: E402
from .contact import contact_along, contact_forces  # noqa: E402
from .compilation_cache import enable_compilation_cache  # noqa: E402

import importlib as _importlib

#: Submodules imported on first use (``rb.batch.simulate_batch(...)`` works without an
#: explicit ``import rollball_jax.batch``), so that ``import rollball_jax`` stays light.
_LAZY_SUBMODULES = ("batch", "design", "app")
#: The application layer (config files, sweeps, result files, plots, CLI) lives in
#: ``rollball_jax.app``; ``rb.config``, ``rb.sweep``, ... reach it as before.
_APP_MODULES = ("sweep", "config", "output", "plotting", "sweep_plots")


#: The public names: classes and functions re-exported here, then the public submodules
#: (``batch`` and ``design`` load on first use). The application layer (``app`` and
#: ``rb.config``, ``rb.sweep``, ...) is left out: it needs the ``app`` extra, and
#: ``from rollball_jax import *`` must work without it.
__all__ = [
    # models, rails, controls, forces, errors
    "Ball", "Disk",
    "AbstractRail", "CircleRail", "EllipseRail", "FigureEightRail", "FunctionRail", "RailSet", "SpokeRail",
    "AbstractControl", "ConstantControl", "CubicSplineControl", "FunctionControl", "PaperStep",
    "PiecewiseLinearControl",
    "AbstractForce", "ConstantForce", "FunctionForce",
    "RollballError", "ModelError", "SimulationError", "ConfigError", "NotTraceableError",
    # solves, derivatives, contact
    "Solution", "simulate", "integrate", "VersorProjection", "project_versor",
    "final_state", "final_gc", "trajectory", "running_cost", "distance_to_target", "state_transition_matrix",
    "contact_forces", "contact_along", "enable_compilation_cache",
    # submodules
    "batch", "compilation_cache", "contact", "controls", "dae", "design", "dynamics",
    "errors", "forces", "geometry", "jacobians", "models", "observables", "projection", "rails", "rigid",
    "scipy_bridge", "sensitivity", "solve",
]


def __getattr__(name):
    if name in _LAZY_SUBMODULES or name in _APP_MODULES:
        module = _importlib.import_module(f".app.{name}" if name in _APP_MODULES else f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'rollball_jax' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBMODULES) | set(_APP_MODULES))
