"""Type annotations of array *inputs*.

The package accepts lists and tuples of numbers wherever it takes an array (``Ball(...,
inertia=[1, 2, 3])``) and converts them; ``jaxtyping.ArrayLike`` does not include them, so
with shape checking on (``pytest --jaxtyping-packages=...``, as the test suite runs) a
list would be refused. These aliases say what is accepted:

* :data:`ArrayInput`: an array, a scalar or a (nested) sequence of numbers;
* ``FloatInput[dims]``: an array of that shape (any numeric dtype, complex included: the
  callee converts it) or a sequence (converted, then checked by the function's own
  validation);
* :data:`RealScalar`: a Python or NumPy number or a 0-d array (a traced one too: the
  tolerances and times of a design problem are arrays so that changing them does not
  recompile).

Vector fields and the kinematics they call are annotated ``Inexact[Array, ...]``: the
paper's complex-step derivatives evaluate them at complex states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

from jaxtyping import ArrayLike, Shaped

#: An array, a scalar, or a (nested) sequence of numbers.
ArrayInput = Union[ArrayLike, Sequence]
#: A number or a 0-d array (possibly traced).
RealScalar = Shaped[ArrayLike, ""]
#: ``(t0, t1)``: a tuple or list of two numbers, or an array of shape (2,).
TimeSpan = Union[Sequence, Shaped[ArrayLike, "2"]]


class FloatInput:
    """``FloatInput[" N"]`` is ``Shaped[ArrayLike, " N"] | Sequence`` (see the module docstring)."""

    def __class_getitem__(cls, dims: str):
        return Union[Shaped[ArrayLike, dims], Sequence]
