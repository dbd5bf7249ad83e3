"""The kernels: Roll-7 and Gather-8 on NumPy arrays, with the specs' rules checked."""

from app.ops.errors import SpecError
from app.ops.gather import GatherPlan, gather, gather_plan
from app.ops.roll import ROLL_INDEX_TYPES, roll, roll_shifts

__all__ = [
    "ROLL_INDEX_TYPES",
    "GatherPlan",
    "SpecError",
    "gather",
    "gather_plan",
    "roll",
    "roll_shifts",
]
