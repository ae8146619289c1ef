"""Vector fields: pure functions f(t, x, model, control) in the paper's state order."""

from .ball import ball_state_split, ball_vector_field, ball_vector_field_vjp, system_matrix
from .disk import disk_vector_field

__all__ = ["ball_vector_field", "ball_vector_field_vjp", "ball_state_split", "system_matrix", "disk_vector_field"]
