"""ShuffleChannels-1: the channel dimension's groups interleaved (a [group, C / group] swap)."""

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    ALL_TYPES,
    DATA_CONSTRAINT,
    JSON_LIKE_DATA,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw

#: "Any supported numeric type": booleans are no numbers.
NUMERIC_TYPES = tuple(name for name in ALL_TYPES if name != "bool")


def shuffle_channels_view(
    shape: tuple[int, ...], axis: int, group: int
) -> tuple[int, int, int, int]:
    """Check ShuffleChannels-1's rules and give the 4-D shape data is read as: ``[prod(shape[:
    axis]), group, shape[axis] / group, prod(shape[axis + 1:])]``. The output has data's shape."""
    rank = len(shape)
    if rank < 1:
        raise SpecError("data", "data must be a tensor of rank greater or equal to 1, got rank 0")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
        raise SpecError(
            "axis", f"axis must be an integer in the range [{-rank}, {rank - 1}], got {axis}"
        )
    axis %= rank
    channels = shape[axis]
    if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group <= channels:
        raise SpecError(
            "group",
            f"group must be a positive integer in the range [1, data_shape[axis]] = "
            f"[1, {channels}], got {group}",
        )
    if channels % group:
        raise SpecError(
            "group",
            f"group ({group}) must evenly divide the channel dimension size ({channels})",
        )
    return math.prod(shape[:axis]), group, channels // group, math.prod(shape[axis + 1 :])


def shuffle_channels(
    data: npt.ArrayLike, axis: int = 1, group: int = 1, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """ShuffleChannels-1 of ``data`` along ``axis`` in ``group`` groups; into ``out`` if given."""
    data = np.asarray(data)
    view = shuffle_channels_view(data.shape, axis, group)
    return _shuffled(data, view, out)


def _shuffled(
    data: npt.NDArray[Any], view: tuple[int, int, int, int], out: npt.NDArray[Any] | None
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(data.shape, data.dtype)
    if not data.size:
        return out
    outer, group, per_group, inner = view
    # x' = [outer, group, C / group, inner]; x'' = its axes 1 and 2 swapped, written in order.
    source = as_raw(data).reshape(view).transpose(0, 2, 1, 3)
    np.copyto(as_raw(out).reshape(outer, per_group, group, inner), source, casting="equiv")
    return out


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    view = shuffle_channels_view(data.shape, attributes["axis"], attributes["group"])
    return Plan(data.shape, lambda out: _shuffled(data, view, out))


#: The spec's example is [5, 12, 200, 400] (4.8 million elements): served with its group,
#: axis and channels, its spatial dimensions cut to 1 x 2.
_EXAMPLE = np.arange(5 * 12 * 1 * 2).reshape(5, 12, 1, 2)

OP = Op(
    name="shuffle_channels",
    spec="ShuffleChannels-1",
    summary="ShuffleChannels-1: permute the channel dimension in groups",
    description="ShuffleChannels-1 over `data` (rank >= 1): data read as [outer, group, "
    "C / group, inner] around the channel axis `axis` (default 1), its 2nd and 3rd dimensions "
    "transposed, and reshaped back: the output has the shape and type of `data`. `group` "
    "(default 1) must divide the channel dimension.",
    request_doc="ShuffleChannels-1: `data`'s channels (`axis`) shuffled in `group` groups.",
    inputs=(
        Input(
            "data",
            "The tensor whose channels are shuffled (input 1, type T, rank >= 1).",
            DATA_CONSTRAINT.replace(
                "T: any supported type (bool, ", "T: any supported numeric type (no bool; "
            ),
            NUMERIC_TYPES,
            json_form=JSON_LIKE_DATA,
        ),
    ),
    attributes=(
        Attribute(
            "axis",
            1,
            "The index of the channel dimension, in [-rank(data), rank(data) - 1].",
        ),
        Attribute(
            "group",
            1,
            "The number of groups to split the channel dimension into: in [1, "
            "data_shape[axis]], evenly dividing it.",
        ),
    ),
    plan=_plan,
    examples={
        "example_1": example(
            "ShuffleChannels-1's example (group 3, axis 1, 12 channels), its [200, 400] spatial "
            "dimensions cut to [1, 2]",
            {"data": _EXAMPLE.tolist(), "group": 3, "axis": 1},
            _EXAMPLE.reshape(5, 3, 4, 2).transpose(0, 2, 1, 3).reshape(5, 12, 1, 2).tolist(),
        ),
        "example_last_axis": example(
            "ShuffleChannels-1 along the last axis (axis -1), 6 channels in 2 groups",
            {"data": [[0, 1, 2, 3, 4, 5]], "group": 2, "axis": -1},
            [[0, 3, 1, 4, 2, 5]],
        ),
    },
    decisions=(
        'ShuffleChannels-1, boolean data: refused; T is "any supported numeric type", and a '
        "boolean is no number.",
        "ShuffleChannels-1, an empty channel dimension: refused for every group, since the range "
        "[1, data_shape[axis]] is then empty (the text wins); other empty dimensions are allowed.",
        "ShuffleChannels-1's example is [5, 12, 200, 400] (4.8 million elements): the served "
        "example keeps its group, axis and channels with the spatial dimensions cut to [1, 2]; "
        "the test file checks the full shape.",
    ),
    disagreements=narrowed_by_the_cpu_plugin("ShuffleChannels-1"),
)
