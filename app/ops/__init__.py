"""The ops of OpenVINO's movement family: one module each, its kernel on NumPy arrays and its
declaration, the specs' rules checked."""

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
