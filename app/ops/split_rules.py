"""What Split and VariadicSplit share: the axis checked, the pieces' shapes and their views."""

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import as_raw, copy_view, is_integer_type


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


def pieces_into(
    data: npt.NDArray[Any],
    axis: int,
    lengths: list[int],
    ready: Sequence[npt.NDArray[Any] | None],
) -> list[npt.NDArray[Any]]:
    """``pieces``, each written into its ready array (``SplitPlan.into``: of the piece's shape,
    C-ordered, in native byte order) and that array given back, or a view where there is none.
    Copied by the compiled strided copy (``copy_view``: non-temporal stores for a large piece)
    where data is in native byte order: NumPy's copy of a piece along an inner axis, rows read
    a stride apart and written through the cache, took 1.3-1.5x a copy of its bytes. A
    big-endian data's values are copied by NumPy, turned to native order."""
    made: list[npt.NDArray[Any]] = []
    source = as_raw(data) if data.dtype.isnative else None
    for view, target in zip(pieces(data, axis, lengths), ready, strict=True):
        if target is None:
            made.append(view)
            continue
        if source is None:
            np.copyto(target, view, casting="equiv")
        else:
            out = as_raw(target)
            copy_view(out, out, source, as_raw(view))
        made.append(target)
    return made
