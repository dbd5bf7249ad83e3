"""GatherTree-1: the complete beams of a beam search, from the ids of each step and the parent
beam ids, filled with ``end_token`` past the first one decoded."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import Arrays, Attributes, Plan
from app.ops.errors import SpecError
from app.ops.raw import as_raw

#: Elements checked at a time (the checks' temporaries stay this small, whatever the input).
_CHUNK = 1 << 16
_NAMES = ("step_ids", "parent_ids", "max_seq_len", "end_token")


def _is_float(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _integral(name: str, array: npt.NDArray[Any]) -> None:
    """Refuse a float input holding a value that is not an integer (a fraction, NaN, infinity):
    the spec's inputs "should have integer values only"."""
    if not _is_float(array.dtype):
        return
    flat = array.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK].astype(np.float64)
        # x - trunc(x) is 0 for an integer, not 0 for a fraction, NaN for NaN and infinities.
        bad = np.flatnonzero((chunk - np.trunc(chunk)) != 0)
        if bad.size:
            where = np.unravel_index(start + int(bad[0]), array.shape)
            raise SpecError(
                name,
                f"{name} must have integer values only, got {chunk[bad[0]]!r} at "
                f"{[int(i) for i in where]}",
            )


def gather_tree_plan(
    step_ids: npt.NDArray[Any],
    parent_ids: npt.NDArray[Any],
    max_seq_len: npt.NDArray[Any],
    end_token: npt.NDArray[Any],
) -> list[int]:
    """Check the inputs against the spec; each batch's number of decoded steps,
    min(MAX_TIME, max_seq_len[batch]). The output has step_ids' shape."""
    if step_ids.ndim != 3:
        raise SpecError(
            "step_ids",
            "step_ids must have rank 3 ([MAX_TIME, BATCH_SIZE, BEAM_WIDTH]), got shape "
            f"{list(step_ids.shape)}",
        )
    for name, array in zip(_NAMES[1:], (parent_ids, max_seq_len, end_token), strict=True):
        if array.dtype != step_ids.dtype:
            raise SpecError(
                name,
                f"{name} must be of the type of step_ids (T: every input has one type), got "
                f"{array.dtype.name} and {step_ids.dtype.name}",
            )
    if parent_ids.shape != step_ids.shape:
        raise SpecError(
            "parent_ids",
            f"parent_ids must have the shape of step_ids {list(step_ids.shape)} "
            f"([MAX_TIME, BATCH_SIZE, BEAM_WIDTH]), got {list(parent_ids.shape)}",
        )
    max_time, batch_size, beam_width = step_ids.shape
    if max_seq_len.shape != (batch_size,):
        raise SpecError(
            "max_seq_len",
            f"max_seq_len must be a 1D tensor of BATCH_SIZE ({batch_size}) elements, got shape "
            f"{list(max_seq_len.shape)}",
        )
    if end_token.ndim != 0:
        raise SpecError(
            "end_token", f"end_token must be a scalar, got shape {list(end_token.shape)}"
        )
    for name, array in zip(_NAMES, (step_ids, parent_ids, max_seq_len, end_token), strict=True):
        _integral(name, array)
    lengths = []
    for batch, value in enumerate(max_seq_len.tolist()):
        length = int(value)
        if length < 0:
            raise SpecError(
                "max_seq_len",
                f"max_seq_len[{batch}] = {length}: a sequence length cannot be negative",
            )
        lengths.append(min(max_time, length))
    _check_parents(parent_ids, lengths, beam_width)
    return lengths


def _check_parents(parent_ids: npt.NDArray[Any], lengths: list[int], beam_width: int) -> None:
    """Refuse a parent id that the beams follow (steps 1 to max_seq_len - 1 of each batch)
    outside [0, BEAM_WIDTH): it names no beam."""
    batch_size = parent_ids.shape[1]
    rows = max(1, _CHUNK // max(1, batch_size * beam_width))
    for first in range(1, parent_ids.shape[0], rows):
        block = parent_ids[first : first + rows]
        levels = np.arange(first, first + block.shape[0])[:, None]
        followed = levels < np.array(lengths, np.int64)[None, :]
        # Compared in float64 or as integers of their own type: exact for every value here.
        values = block.astype(np.float64) if _is_float(block.dtype) else block
        bad = (values < 0) | (values >= beam_width)
        bad &= followed[:, :, None]
        if bad.any():
            level, batch, beam = (int(i) for i in np.argwhere(bad)[0])
            value = block[level, batch, beam].item()
            raise SpecError(
                "parent_ids",
                f"parent_ids[{first + level}, {batch}, {beam}] = {value} is no beam: a parent "
                f"id must be in [0, {beam_width - 1}] (BEAM_WIDTH {beam_width})",
            )


def gather_tree(
    step_ids: npt.ArrayLike,
    parent_ids: npt.ArrayLike,
    max_seq_len: npt.ArrayLike,
    end_token: npt.ArrayLike,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """GatherTree-1: the beams ``step_ids`` and ``parent_ids`` describe; into ``out`` if
    given."""
    arrays = [np.asarray(item) for item in (step_ids, parent_ids, max_seq_len, end_token)]
    lengths = gather_tree_plan(*arrays)
    return _gathered(arrays[0], arrays[1], lengths, arrays[3], out)


def _gathered(
    step_ids: npt.NDArray[Any],
    parent_ids: npt.NDArray[Any],
    lengths: list[int],
    end_token: npt.NDArray[Any],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(step_ids.shape, step_ids.dtype)
    max_time, batch_size, beam_width = step_ids.shape
    if not out.size:
        return out
    width = batch_size * beam_width
    steps = as_raw(step_ids).reshape(max_time, width)
    parents = parent_ids.reshape(max_time, width)
    target = as_raw(out).reshape(max_time, width)
    end_bits = as_raw(end_token.reshape(1))[0]
    decoded = np.repeat(np.array(lengths, np.int64), beam_width)
    # The beam each (batch, beam) follows at the current step, as a flat index into a step's
    # row; every beam starts as itself at its last decoded step.
    row_start = np.repeat(np.arange(batch_size, dtype=np.int64) * beam_width, beam_width)
    index = np.arange(width, dtype=np.int64)
    undecoded = np.empty(width, np.bool_)
    for level in range(max_time - 1, -1, -1):
        np.less_equal(decoded, level, out=undecoded)
        np.take(steps[level], index, out=target[level])
        if undecoded.any():
            target[level][undecoded] = end_bits
            following = parents[level].take(index)
            index = np.where(undecoded, index, row_start + following.astype(np.int64))
        else:
            index = row_start + parents[level].take(index).astype(np.int64)
    _fill_past_the_end(out.reshape(max_time, width), end_token, target, end_bits)
    return out


def _fill_past_the_end(
    values: npt.NDArray[Any],
    end_token: npt.NDArray[Any],
    target: npt.NDArray[Any],
    end_bits: Any,
) -> None:
    """Past the step holding a beam's first end_token (compared by value: -0.0 is 0), every
    value is end_token (its bits)."""
    finished = np.zeros(values.shape[1], np.bool_)
    end_value = end_token[()]
    hit = np.empty(values.shape[1], np.bool_)
    for level in range(values.shape[0]):
        if finished.any():
            target[level][finished] = end_bits
        np.equal(values[level], end_value, out=hit)
        finished |= hit


def plan(arrays: Arrays, attributes: Attributes) -> Plan:
    """GatherTree-1's planner: every check made, the output's shape (step_ids')."""
    step_ids, parent_ids = arrays["step_ids"], arrays["parent_ids"]
    end_token = arrays["end_token"]
    lengths = gather_tree_plan(step_ids, parent_ids, arrays["max_seq_len"], end_token)
    return Plan(
        step_ids.shape,
        lambda out: _gathered(step_ids, parent_ids, lengths, end_token, out),
    )
