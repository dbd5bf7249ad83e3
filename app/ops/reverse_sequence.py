"""ReverseSequence-1: along the batch axis, each slice's first seq_lengths[i] elements reversed."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    ALL_TYPES,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    data_input,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw

#: T2, "any supported numerical type": integers and floats, not booleans.
NUMERICAL_TYPES = tuple(name for name in ALL_TYPES if name != "bool")
#: Up to this many slices, each is reversed by two slice copies; past it, the slices of one
#: length at a time (at most data_shape[seq_axis] of them).
_SLICES_ONE_BY_ONE = 1024


def _axis(name: str, value: int, rank: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -rank <= value < rank:
        raise SpecError(
            name,
            f"{name} must be an integer within the range [{-rank}, {rank - 1}] "
            f"([-rank(data), rank(data) - 1]), got {value}",
        )
    return value % rank


def reverse_sequence_lengths(
    shape: tuple[int, ...], seq_lengths: npt.NDArray[Any], batch_axis: int, seq_axis: int
) -> tuple[int, int, npt.NDArray[np.int64]]:
    """Check ReverseSequence-1's rules; give the batch and sequence axes (normalised) and the
    lengths as int64. The output has data's shape."""
    rank = len(shape)
    if rank < 2:
        raise SpecError(
            "data", f"data must be a tensor of rank greater or equal to 2, got rank {rank}"
        )
    batch = _axis("batch_axis", batch_axis, rank)
    seq = _axis("seq_axis", seq_axis, rank)
    if batch == seq:
        raise SpecError(
            "seq_axis",
            f"seq_axis ({seq_axis}) and batch_axis ({batch_axis}) must name different "
            "dimensions: data is sliced along one and reversed along the other",
        )
    if seq_lengths.dtype.kind not in "iuf" and seq_lengths.dtype.name not in NUMERICAL_TYPES:
        raise SpecError(
            "seq_lengths",
            f"seq_lengths must be of a numerical type (T2), got {seq_lengths.dtype.name}",
        )
    if seq_lengths.shape != (shape[batch],):
        raise SpecError(
            "seq_lengths",
            f"seq_lengths must be a 1D tensor of data_shape[batch_axis] = {shape[batch]} "
            f"elements, got shape {list(seq_lengths.shape)}",
        )
    limit = shape[seq]
    values = seq_lengths
    if values.dtype.kind == "f" or values.dtype.name == "bfloat16":
        values = values.astype(np.float64)
        whole = np.isfinite(values) & (values == np.floor(values))
    else:
        whole = np.ones(values.shape, np.bool_)
    bad = ~whole | (values < 1) | (values > limit)
    if bad.any():
        position = int(np.argmax(bad))
        raise SpecError(
            "seq_lengths",
            f"seq_lengths values must be integer values within the range [1, "
            f"data_shape[seq_axis]] = [1, {limit}]; seq_lengths[{position}] = "
            f"{seq_lengths[position].item()}",
        )
    return batch, seq, values.astype(np.int64)


def reverse_sequence(
    data: npt.ArrayLike,
    seq_lengths: npt.ArrayLike,
    batch_axis: int = 0,
    seq_axis: int = 1,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """ReverseSequence-1 of ``data``; into ``out`` when given."""
    data = np.asarray(data)
    checked = reverse_sequence_lengths(data.shape, np.asarray(seq_lengths), batch_axis, seq_axis)
    return _reversed(data, *checked, out)


def _reversed(
    data: npt.NDArray[Any],
    batch_axis: int,
    seq_axis: int,
    lengths: npt.NDArray[np.int64],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(data.shape, data.dtype)
    if not data.size:
        return out
    # Both seen as [batch, seq, ...the other axes] (views).
    source = np.moveaxis(as_raw(data), (batch_axis, seq_axis), (0, 1))
    target = np.moveaxis(as_raw(out), (batch_axis, seq_axis), (0, 1))
    if lengths.size <= _SLICES_ONE_BY_ONE:
        for index, length in enumerate(lengths.tolist()):
            np.copyto(target[index, :length], source[index, length - 1 :: -1], casting="equiv")
            np.copyto(target[index, length:], source[index, length:], casting="equiv")
        return out
    np.copyto(target, source, casting="equiv")
    for length in np.unique(lengths).tolist():
        if length > 1:
            rows = np.flatnonzero(lengths == length)
            target[rows, :length] = source[rows, length - 1 :: -1]
    return out


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    checked = reverse_sequence_lengths(
        data.shape, arrays["seq_lengths"], attributes["batch_axis"], attributes["seq_axis"]
    )
    return Plan(data.shape, lambda out: _reversed(data, *checked, out))


def _workspace(arrays: Arrays, attributes: Attributes) -> int:
    """Past _SLICES_ONE_BY_ONE slices: the rows of one length and their reversed copy, at most
    twice data, and the lengths' int64 and index copies."""
    data, lengths = arrays["data"], arrays["seq_lengths"]
    if lengths.size <= _SLICES_ONE_BY_ONE:
        return 8 * lengths.size
    return 2 * data.nbytes + 24 * lengths.size


#: The spec's example is [4, 10, 100, 200] (800,000 elements): served with its lengths and
#: axes, its last two dimensions cut to [1, 2].
_EXAMPLE = np.arange(4 * 10 * 1 * 2).reshape(4, 10, 1, 2)
_LENGTHS = [2, 4, 8, 10]


def _spec_reading(data: npt.NDArray[Any], lengths: list[int]) -> npt.NDArray[Any]:
    """Slice i along axis 0, its first lengths[i] elements along axis 1 reversed."""
    out = data.copy()
    for index, length in enumerate(lengths):
        out[index, :length] = data[index, :length][::-1]
    return out


OP = Op(
    name="reverse_sequence",
    spec="ReverseSequence-1",
    summary="ReverseSequence-1: reverse variable length slices of data",
    description="ReverseSequence-1 over `data` (rank >= 2): data is sliced along `batch_axis` "
    "(default 0); in slice i the first `seq_lengths[i]` elements along `seq_axis` (default 1) "
    "are reversed. The output has the shape and type of `data`.",
    request_doc="ReverseSequence-1: in each slice of `data` along batch_axis, the first "
    "seq_lengths[i] elements along seq_axis reversed.",
    inputs=(
        data_input("reverse slices of (rank >= 2)"),
        Input(
            "seq_lengths",
            "The sequence lengths to reverse (input 2, type T2): one a slice along batch_axis.",
            "T2: any numerical type (integer or floating point), a 1D tensor of "
            "data_shape[batch_axis] elements whose values are integers in [1, "
            "data_shape[seq_axis]]. JSON form is int64.",
            NUMERICAL_TYPES,
            rank="1",
        ),
    ),
    attributes=(
        Attribute(
            "batch_axis",
            0,
            "The index of the batch dimension along which data is sliced, in [-rank(data), "
            "rank(data) - 1].",
        ),
        Attribute(
            "seq_axis",
            1,
            "The index of the sequence dimension along which elements are reversed, in "
            "[-rank(data), rank(data) - 1].",
        ),
    ),
    plan=_plan,
    workspace=_workspace,
    examples={
        "example_1": example(
            "ReverseSequence-1's example (batch_axis 0, seq_axis 1, seq_lengths [2, 4, 8, 10]), "
            "its [100, 200] last dimensions cut to [1, 2]",
            {"data": _EXAMPLE.tolist(), "seq_lengths": _LENGTHS, "batch_axis": 0, "seq_axis": 1},
            _spec_reading(_EXAMPLE, _LENGTHS).tolist(),
        ),
        "example_seq_first": example(
            "ReverseSequence-1 with the sequence first: batch_axis 1, seq_axis 0",
            {
                "data": [[1, 2, 3], [4, 5, 6], [7, 8, 9]],
                "seq_lengths": [1, 2, 3],
                "batch_axis": 1,
                "seq_axis": 0,
            },
            [[1, 5, 9], [4, 2, 6], [7, 8, 3]],
        ),
    },
    decisions=(
        "ReverseSequence-1, batch_axis and seq_axis naming the same dimension: refused naming "
        "seq_axis (the spec slices along one and reverses along the other; it does not say).",
        "ReverseSequence-1, seq_lengths of a floating-point type (T2 is any numerical type): "
        "taken when every value is a whole number in range; 2.5, NaN or infinity is refused. "
        "Booleans are no numerical type: refused.",
        "ReverseSequence-1, seq_lengths value 0 or past data_shape[seq_axis]: refused; the "
        "spec's range is [1, data_shape[seq_axis]].",
        "ReverseSequence-1's example is [4, 10, 100, 200] (800,000 elements): the served "
        "example keeps its axes, lengths and first two dimensions with the last two cut to "
        "[1, 2]; the test file checks the full shape.",
    ),
    disagreements=narrowed_by_the_cpu_plugin("ReverseSequence-1"),
)
