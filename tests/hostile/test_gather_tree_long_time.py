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
    lengths = np.full(shape[1], shape[0], np.int64)
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
        module._check_parents(parents, np.array([level, 100_000]), 3)
    assert refused.value.field == "parent_ids"
    assert str(refused.value).startswith(f"parent_ids[{level}, 1, 2] = 3 is no beam")
    parents[level, 0, 1] = 0
    module._check_parents(
        parents, np.array([level + 1, level]), 3
    )  # batch 1 stops before: accepted


def test_float_parent_ids_in_chunks() -> None:
    parents = np.zeros((70_000, 1, 2), np.float16)
    parents[69_999, 0, 0] = 2.0
    with pytest.raises(SpecError) as refused:
        module._check_parents(parents, np.array([70_000]), 2)
    assert str(refused.value).startswith("parent_ids[69999, 0, 0] = 2.0 is no beam")


def test_many_lengths_are_read_as_an_array_and_a_late_negative_one_is_named() -> None:
    """max_seq_len of 4 Mi batches of empty beams: read a chunk at a time into the int64 array
    the workspace counts (a Python number a batch was seconds and hundreds of MiB); a negative
    length past the first chunks is named where it is."""
    batches = 1 << 22
    step_ids = np.zeros((3, batches, 0), np.int32)
    lengths = np.full(batches, 2, np.int32)
    got = module.gather_tree_plan(step_ids, step_ids, lengths, np.array(1, np.int32))
    assert got.dtype == np.int64 and got.shape == (batches,) and (got == 2).all()
    arrays = {"step_ids": step_ids, "parent_ids": step_ids, "max_seq_len": lengths}
    assert module.workspace_bytes(arrays, {}) >= 8 * batches
    lengths[batches - 5] = -4
    with pytest.raises(SpecError) as refused:
        module.gather_tree_plan(step_ids, step_ids, lengths, np.array(1, np.int32))
    assert refused.value.field == "max_seq_len"
    assert str(refused.value).startswith(f"max_seq_len[{batches - 5}] = -4:")


@pytest.mark.parametrize(
    ("dtype", "value"),
    [(np.uint64, 2**64 - 1), (np.int64, 2**63 - 1), (np.float64, 1e300), (np.float16, 65504.0),
     (np.int8, 127), (np.uint32, 2**32 - 1)],
)  # fmt: skip
def test_lengths_past_max_time_are_max_time_whatever_their_type(dtype: Any, value: Any) -> None:
    step_ids = np.zeros((5, 3, 2), dtype)
    lengths = np.array([value, 0, 3], dtype)
    got = module.gather_tree_plan(step_ids, step_ids, lengths, np.array(1, dtype))
    assert got.tolist() == [5, 0, 3]
