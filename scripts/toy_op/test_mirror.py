"""The toy op's own test file (scripts/toy_op_check copies it to tests/ops/test_mirror.py)."""

import numpy as np
import pytest
from app.ops.mirror import OP

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.registry import REGISTRY


def test_it_is_collected() -> None:
    assert REGISTRY["mirror"] is OP


@pytest.mark.parametrize("dtype", ["int8", "float32", "bool"])
def test_it_reverses(dtype: str) -> None:
    data = np.arange(6).reshape(2, 3).astype(dtype)
    plan = OP.plan({"data": data, "axes": np.array([-1])}, {"mode": "flip"})
    assert isinstance(plan, Plan)
    assert plan.run(None).tolist() == data[:, ::-1].tolist()


def test_a_bad_axis_is_refused() -> None:
    with pytest.raises(SpecError) as refused:
        OP.plan({"data": np.zeros((2, 2)), "axes": np.array([2])}, {"mode": "flip"})
    assert refused.value.field == "axes"
