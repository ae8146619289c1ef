"""Classical rigid bodies of the two papers, simulated with the same ``simulate``/``Solution`` as the ball.

From Putkaradze & Rogers, Appendix A: :class:`FreeRigidBody` (A.11), :class:`HeavyTop` (A.16),
:class:`Suslov` (A.38, ξ(t) allowed), and the Chaplygin ball/top (5.26) via
:func:`ChaplyginBall`. From the SE(3) paper: the free rigid body on SE(3) in Kirchhoff
(:class:`Kirchhoff`), Newton–Euler (:class:`NewtonEuler`) and Lagrange (:class:`Lagrange`)
velocity coordinates, with a general 6×6 inertia (e.g. ellipsoid added mass,
:func:`ellipsoid_added_mass`) and external wrenches. See ``docs/rigid_bodies.md``.
"""

from .added_mass import (
    carlson_rd,
    ellipsoid_added_mass,
    ellipsoid_coefficients,
    ellipsoid_inertia,
    prolate_spheroid_coefficients,
)
from .chaplygin import ChaplyginBall, chaplygin_integrals
from .free_body import FreeRigidBody
from .heavy_top import HeavyTop
from .se3 import AbstractSE3Body, Kirchhoff, Lagrange, NewtonEuler, rigid_body_inertia
from .suslov import AbstractConstraintVector, ConstantVector, FunctionVector, Suslov
from .wrench import AbstractWrench, ConstantWrench, FunctionWrench, GravityWrench

__all__ = [
    "AbstractConstraintVector",
    "AbstractSE3Body",
    "AbstractWrench",
    "ChaplyginBall",
    "ConstantVector",
    "ConstantWrench",
    "FreeRigidBody",
    "FunctionVector",
    "FunctionWrench",
    "GravityWrench",
    "HeavyTop",
    "Kirchhoff",
    "Lagrange",
    "NewtonEuler",
    "Suslov",
    "carlson_rd",
    "chaplygin_integrals",
    "ellipsoid_added_mass",
    "ellipsoid_coefficients",
    "ellipsoid_inertia",
    "prolate_spheroid_coefficients",
    "rigid_body_inertia",
]
