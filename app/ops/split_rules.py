"""What Split and VariadicSplit share: the axis checked, the pieces' shapes and their views."""

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import is_integer_type


def split_axis(rank: int, axis: npt.NDArray[Any], scalar_only: bool = True) -> int:
    """The axis an ``axis`` input names, checked and normalised: a scalar of an integer type
    in ``[-rank, rank - 1]`` (VariadicSplit-1 also takes a tensor of shape [1])."""
    if not is_integer_type(axis.dtype):
        raise SpecError("axis", f"axis must be of an integer type, got {axis.dtype.name}")
    if scalar_only and axis.ndim != 0:
        raise SpecError("axis", f"axis must be a scalar, got a tensor of shape {list(axis.shape)}")
    if not scalar_only and axis.shape not in ((), (1,)):
        raise SpecError(
            "axis",
            f"axis must be a scalar or a tensor of shape [1], got shape {list(axis.shape)}",
        )
    value = int(axis.reshape(-1)[0])
    if not -rank <= value < rank:
        raise SpecError(
            "axis", f"axis {value} is out of range [{-rank}, {rank - 1}] for data of rank {rank}"
        )
    return value % rank


def split_shapes(
    shape: tuple[int, ...], axis: int, lengths: list[int]
) -> tuple[tuple[int, ...], ...]:
    """The pieces' shapes: data's, with ``lengths[i]`` along ``axis``."""
    return tuple((*shape[:axis], length, *shape[axis + 1 :]) for length in lengths)


def pieces(data: npt.NDArray[Any], axis: int, lengths: list[int]) -> list[npt.NDArray[Any]]:
    """Views of ``data``, one a piece, in order."""
    bounds = np.cumsum([0, *lengths])
    index: list[slice] = [slice(None)] * data.ndim
    views = []
    for first, last in itertools.pairwise(bounds.tolist()):
        index[axis] = slice(first, last)
        views.append(data[tuple(index)])
    return views
