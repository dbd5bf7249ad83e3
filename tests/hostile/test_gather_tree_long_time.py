"""GatherTree-1 with a long MAX_TIME and few beams: the check of the parent ids reads them in
chunks of many steps, not one step at a time. (It looped over MAX_TIME in Python: step_ids of
[10**6, 1, 1] int8, a 2 MB request, took 16-20 s to plan, and [2**31 - 1, 1, 0], a request of
a few hundred bytes, held a worker for hours.)"""

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app.ops import gather_tree as module
from app.ops.errors import SpecError

Array = npt.NDArray[Any]


class CountedReads(np.ndarray):
    """An array that counts the slices taken of it."""

    reads = 0

    def __getitem__(self, key: Any) -> Any:
        CountedReads.reads += 1
        return super().__getitem__(key)


def _counted(array: Array) -> Array:
    CountedReads.reads = 0
    return array.view(CountedReads)


@pytest.mark.parametrize("shape", [(100_000, 1, 1), (100_000, 1, 0), (30_000, 2, 3)])
def test_parent_ids_are_checked_in_chunks_of_steps(shape: tuple[int, int, int]) -> None:
    parents = _counted(np.zeros(shape, np.int8))
    lengths = [shape[0]] * shape[1]
    module._check_parents(parents, lengths, shape[2])
    # One slice per _CHUNK / 8 ids or so (and none at all for no ids), not one per step.
    assert CountedReads.reads <= 8 * parents.size // module._CHUNK + 2, CountedReads.reads


@pytest.mark.parametrize("level", [1, 65_535, 65_536, 99_999])
def test_a_late_bad_parent_is_found_and_named(level: int) -> None:
    """The first parent id outside [0, BEAM_WIDTH) that a beam follows, in (step, batch, beam)
    order, across the chunks' edges; one past a batch's length is not followed."""
    parents = np.zeros((100_000, 2, 3), np.int8)
    parents[level, 1, 2] = 3
    parents[level, 0, 1] = -1  # batch 0 is decoded up to `level` only: not followed
    with pytest.raises(SpecError) as refused:
        module._check_parents(parents, [level, 100_000], 3)
    assert refused.value.field == "parent_ids"
    assert str(refused.value).startswith(f"parent_ids[{level}, 1, 2] = 3 is no beam")
    parents[level, 0, 1] = 0
    module._check_parents(parents, [level + 1, level], 3)  # batch 1 stops before: accepted


def test_float_parent_ids_in_chunks() -> None:
    parents = np.zeros((70_000, 1, 2), np.float16)
    parents[69_999, 0, 0] = 2.0
    with pytest.raises(SpecError) as refused:
        module._check_parents(parents, [70_000], 2)
    assert str(refused.value).startswith("parent_ids[69999, 0, 0] = 2.0 is no beam")
