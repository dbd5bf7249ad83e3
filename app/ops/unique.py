"""Unique-10: the unique elements (or slices along an axis) of a tensor, where each first
occurs, where each input element went, and how often each occurs."""

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops import loops
from app.ops.declaration import (
    BOOL,
    ELEMENT_TYPE,
    LIMIT_SCALAR,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Output,
    SplitPlan,
    data_input,
    example,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw
from tensor_ops_wire.dtypes import canonical_bools

ELEMENT_TYPES = ("i64", "i32")
_NUMPY_OF: dict[str, np.dtype[Any]] = {"i64": np.dtype(np.int64), "i32": np.dtype(np.int32)}
_INT32_MAX = 2**31 - 1
_BFLOAT16 = np.dtype("bfloat16")
_SIGN = np.uint64(1 << 63)


class UniquePlan(NamedTuple):
    """What the checks of one Unique found: the axis (None: the flattened tensor), how many
    elements or slices are compared (``compared``), and each output's largest shape (the first,
    second and fourth shrink to the number of unique ones once it is known)."""

    axis: int | None
    compared: int
    sorted: bool
    index_type: np.dtype[Any]
    count_type: np.dtype[Any]
    bounds: tuple[tuple[int, ...], ...]


def unique_plan(
    data: npt.NDArray[Any],
    axis: npt.NDArray[Any] | None = None,
    sort: bool = True,
    index_element_type: str = "i64",
    count_element_type: str = "i64",
) -> UniquePlan:
    """Check the inputs and attributes against the spec and bound the outputs, with nothing
    allocated: at most ``count`` unique elements (or slices), ``count`` indices, ``count``
    counts; the third output has exactly ``count`` indices."""
    for name, type_name in (
        ("index_element_type", index_element_type),
        ("count_element_type", count_element_type),
    ):
        if type_name not in ELEMENT_TYPES:
            raise SpecError(name, f'{name} must be "i64" or "i32", got {type_name!r}')
    if not isinstance(sort, bool | np.bool_):
        raise SpecError("sorted", f"sorted must be a boolean, got {sort!r}")
    normal: int | None = None
    if axis is None:
        count = int(data.size)
        first_bound: tuple[int, ...] = (count,)
    else:
        if axis.dtype.name not in ("int32", "int64"):
            raise SpecError(
                "axis", f"axis must be of type int64 or int32 (T_AXIS), got {axis.dtype}"
            )
        if axis.shape not in ((), (1,)):
            raise SpecError(
                "axis",
                f"axis must be 1D with a single element or a scalar, got shape {list(axis.shape)}",
            )
        rank = data.ndim
        value = int(axis.reshape(-1)[0])
        if not -rank <= value <= rank - 1:
            raise SpecError(
                "axis",
                f"axis must be in the range [-r; r-1] = [{-rank}; {rank - 1}] where r = {rank} is "
                f"the rank of the input tensor, got {value}",
            )
        normal = value % rank
        count = int(data.shape[normal])
        first_bound = tuple(data.shape)
    if index_element_type == "i32" and count > _INT32_MAX:
        raise SpecError(
            "index_element_type",
            f'index_element_type "i32" cannot hold the indices of {count} elements',
        )
    if count_element_type == "i32" and count > _INT32_MAX:
        raise SpecError(
            "count_element_type",
            f'count_element_type "i32" cannot hold a count of up to {count}',
        )
    return UniquePlan(
        normal,
        count,
        bool(sort),
        _NUMPY_OF[index_element_type],
        _NUMPY_OF[count_element_type],
        (first_bound, (count,), (count,), (count,)),
    )


def unique(
    data: npt.ArrayLike,
    axis: npt.ArrayLike | None = None,
    sort: bool = True,
    index_element_type: str = "i64",
    count_element_type: str = "i64",
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    """Unique-10: ``(unique, first_indices, inverse, counts)``; ``sort`` is the spec's
    ``sorted`` attribute.

    Elements are compared by value, as IEEE comparison does: -0.0 and +0.0 are one element
    (given with the bits of its first occurrence), each NaN is an element of its own. Sorted
    ascending (NaNs last, in input order; unsigned values as unsigned), or in the order of first
    occurrence. With ``axis``, slices along it are compared element by element (row-major), and
    sorted lexicographically.
    """
    data = np.asarray(data)
    plan = unique_plan(
        data,
        None if axis is None else np.asarray(axis),
        sort,
        index_element_type,
        count_element_type,
    )
    return unique_planned(data, plan)


def sortable_keys(values: npt.NDArray[Any]) -> tuple[npt.NDArray[np.uint64], Any]:
    """uint64 keys whose order is the values' ascending order and whose equality is the values'
    equality (-0.0 is +0.0), and where the values are NaN (None for types without NaN)."""
    dtype = values.dtype
    if dtype.kind in "bu":
        return values.astype(np.uint64), None
    if dtype.kind == "i":
        return values.astype(np.int64).view(np.uint64) ^ _SIGN, None
    with np.errstate(invalid="ignore"):  # a signalling NaN is a NaN, said once per cast
        wide = values.astype(np.float64)
    nan = np.isnan(wide)
    wide[wide == 0] = 0.0  # -0.0 is +0.0
    bits = wide.view(np.uint64)
    negative = (bits & _SIGN) != 0
    keys = np.where(negative, ~bits, bits | _SIGN)
    keys[nan] = np.uint64(2**64 - 1)  # after +inf
    return keys, nan


def unique_planned(
    data: npt.NDArray[Any], plan: UniquePlan, inverse_out: npt.NDArray[Any] | None = None
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    """``unique`` with the inputs already checked: the groups of equal elements (or slices),
    counted in a table when the elements are booleans or integers of one or two bytes, else
    found by one stable sort of their keys; the first of each group its first occurrence.

    ``inverse_out``: where the third output (each element's group) is written, when given (of
    ``plan.compared`` elements of the index type, native and C-contiguous): it is then that
    output itself."""
    count = plan.compared
    if count == 0:
        empty_index = np.zeros(0, plan.index_type)
        return (
            np.array(data.reshape(0) if plan.axis is None else data),
            empty_index,
            empty_index.copy() if inverse_out is None else inverse_out,
            np.zeros(0, plan.count_type),
        )
    if plan.axis is None:
        rows = data.reshape(count, 1)
    else:
        rows = np.moveaxis(data, plan.axis, 0).reshape(count, -1)
    hashed = None
    # The ready inverse passed on only when there is one.
    into = {} if inverse_out is None else {"inverse": inverse_out}
    if rows.shape[1] == 1 and _countable(rows.dtype):
        first, counts, inverse = _counted_groups(rows.reshape(-1), plan, **into)
    elif rows.shape[1] == 1 and (hashed := _hashed_groups(rows.reshape(-1), plan, **into)):
        first, counts, inverse = hashed
    else:
        first, counts, inverse = _sorted_groups(rows, plan)
    if plan.axis is None:
        values = np.take(as_raw(data).reshape(-1), first).view(data.dtype)
    else:
        values = np.take(as_raw(data), first, axis=plan.axis).view(data.dtype)
    if inverse_out is None:
        inverse = inverse.astype(plan.index_type, copy=False)
    elif inverse is not inverse_out:
        np.copyto(inverse_out, inverse, casting="same_kind")
        inverse = inverse_out
    return values, first.astype(plan.index_type), inverse, counts.astype(plan.count_type)


def _sorted_groups(
    rows: npt.NDArray[Any], plan: UniquePlan
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The first occurrence and size of each group and each row's group, by one stable sort of
    the rows' keys: groups of equal keys are the unique ones. Elements of up to 4 bytes are
    sorted packed with their positions (``_packed_order``), others by an index sort."""
    count = rows.shape[0]
    new_group = np.empty(count, dtype=bool)
    new_group[0] = True
    nan: npt.NDArray[np.bool_] | None
    if rows.shape[1] == 1 and rows.dtype.itemsize <= 4 and count <= _POSITIONS:
        order, ordered, nan = _packed_order(rows[:, 0])
        np.not_equal(ordered[1:], ordered[:-1], out=new_group[1:])
        del ordered
    else:
        keys, nans = sortable_keys(rows)
        if keys.shape[1] == 1:
            order = np.argsort(keys[:, 0], kind="stable")
            ordered = keys[order, 0]
            np.not_equal(ordered[1:], ordered[:-1], out=new_group[1:])
        else:
            # np.lexsort sorts by its last key first: the slices' first element leads.
            order = np.lexsort(keys.T[::-1]) if keys.shape[1] else np.arange(count)
            ordered_rows = keys[order]
            np.any(ordered_rows[1:] != ordered_rows[:-1], axis=1, out=new_group[1:])
        nan = None if nans is None else nans.any(axis=1)
    if nan is not None:
        # A NaN equals nothing, itself included: each element (slice) with one starts a group.
        new_group |= nan[order]
    starts = np.flatnonzero(new_group)
    first = order[starts]
    counts = np.diff(np.append(starts, count))
    group = np.cumsum(new_group, dtype=np.int64)
    group -= 1
    inverse = np.empty(count, dtype=np.int64)
    inverse[order] = group
    if not plan.sorted:
        # Unique ones in the order they first occur.
        by_occurrence = np.argsort(first, kind="stable")
        rank = np.empty_like(by_occurrence)
        rank[by_occurrence] = np.arange(by_occurrence.size)
        first, counts, inverse = first[by_occurrence], counts[by_occurrence], rank[inverse]
    return first, counts, inverse


#: The most elements ``_packed_order`` sorts: a position takes the low 32 bits of a packed key.
_POSITIONS = 1 << 32


def _packed_order(
    values: npt.NDArray[Any],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.bool_] | None]:
    """A stable sort of ``values`` (elements of at most 4 bytes, at most _POSITIONS of them):
    the order, the sorted 32-bit keys (as ``sortable_keys``' are: ascending, equal where the
    values are equal, NaN last) and where the values are NaN (None for types without NaN).
    Each key and its position are packed in one 64-bit word and the words sorted by value:
    NumPy sorts plain numbers with SIMD, many times faster than it sorts indices by their keys
    (``argsort``), and equal keys then stay in their positions' order."""
    dtype = values.dtype
    nan: npt.NDArray[np.bool_] | None = None
    if dtype.kind in "bu":
        keys = values.astype(np.uint64)
    elif dtype.kind == "i":
        keys = (values.astype(np.int32).view(np.uint32) ^ np.uint32(1 << 31)).astype(np.uint64)
    else:
        wide = values.astype(np.float32)  # float16 and bfloat16: exact in float32
        nan = np.isnan(wide)
        wide[wide == 0] = 0.0  # -0.0 is +0.0
        bits = wide.view(np.uint32)
        # A negative value's bits all flipped, a positive one's sign bit set: the bits xor'd
        # with the sign spread over the word (all ones or none), the sign bit or'd in.
        flips = wide.view(np.int32) >> np.int32(31)
        flips |= np.int32(-(1 << 31))
        bits ^= flips.view(np.uint32)
        del flips
        keys = bits.astype(np.uint64)
        del wide, bits
        keys[nan] = np.uint64(2**32 - 1)  # after +inf
    keys <<= np.uint64(32)
    keys |= np.arange(values.size, dtype=np.uint64)
    keys.sort()
    order = (keys & np.uint64(2**32 - 1)).astype(np.int64)
    keys >>= np.uint64(32)
    return order, keys, nan


#: Elements counted at a time (each piece's temporaries: 8 bytes an element).
_PIECE = 1 << 20
#: The first piece searched for first occurrences; each next one twice as long, up to _PIECE.
_FIRST_PIECE = 1 << 12


def _countable(dtype: np.dtype[Any]) -> bool:
    """Booleans and integers of one or two bytes in the machine's order: few enough values
    (256 or 65,536) for a table of one slot a value, where equal bits are equal values."""
    return dtype.kind in "biu" and dtype.itemsize <= 2 and dtype.isnative


def _counted_groups(
    values: npt.NDArray[Any], plan: UniquePlan, inverse: npt.NDArray[Any] | None = None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[Any]]:
    """``_sorted_groups`` of a ``_countable`` type without a sort: each value's slot (its bits
    as unsigned) counted in a table; the first occurrences found from the start until every
    value that occurs has one; each element's group a look-up of its slot, written in the index
    type (into ``inverse`` when given). Slots are ranked in the values' order (a signed type's
    with its sign bit flipped). The compiled loops when they are ready, else NumPy's (the same
    answers).

    Compiled, the look-up and the count are one pass (``slot_lines``), with the ranks of the
    values the first _HASH_PREFIX elements hold: where the count finds a value they do not,
    the ranks are made again from every value and the look-up made again (the common case is
    one pass)."""
    values = canonical_bools(values)  # a true byte other than 1 is the slot of 1 (no copy else)
    width = values.dtype.itemsize
    unsigned: type[np.unsignedinteger[Any]] = np.uint8 if width == 1 else np.uint16
    slots_count = 1 << (8 * width)
    # The raw slots in the values' ascending order: a signed value's bits with the sign flipped.
    ascending = np.arange(slots_count, dtype=np.int64)
    if values.dtype.kind == "i":
        ascending ^= slots_count >> 1
    if inverse is None:
        inverse = np.empty(values.size, plan.index_type)
    compiled = loops.ready_module()
    if compiled is None:
        bits = values.view(unsigned)
        total = np.zeros(slots_count, np.int64)
        for start in range(0, bits.size, _PIECE):
            total += np.bincount(bits[start : start + _PIECE], minlength=slots_count)
        first_of = _first_positions(bits, int(np.count_nonzero(total)), slots_count)
        present, rank = _slot_ranks(total != 0, first_of, ascending, plan)
        for start in range(0, bits.size, _PIECE):
            # Indexing the table (NumPy's take with an output is three times slower here).
            inverse[start : start + _PIECE] = rank[bits[start : start + _PIECE]]
    else:
        bits = np.ascontiguousarray(values).view(unsigned)
        first_of = np.full(slots_count, -1, np.int64)
        compiled.first_slots(bits[:_HASH_PREFIX], first_of, slots_count)
        present, rank = _slot_ranks(first_of >= 0, first_of, ascending, plan)
        tables = np.zeros(4 * slots_count, np.int64)  # slot_lines' four tables
        compiled.slot_lines(bits, rank, tables, inverse)
        total = tables.reshape(4, slots_count).sum(axis=0)
        occurring = int(np.count_nonzero(total))
        if occurring != present.size:  # values the prefix does not hold: ranked again
            compiled.first_slots(bits, first_of, occurring - present.size)
            present, rank = _slot_ranks(total != 0, first_of, ascending, plan)
            tables[:] = 0
            compiled.slot_lines(bits, rank, tables, inverse)
    return first_of[present], total[present], inverse


def _slot_ranks(
    occurs: npt.NDArray[np.bool_],
    first_of: npt.NDArray[np.int64],
    ascending: npt.NDArray[np.int64],
    plan: UniquePlan,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """The slots that occur (``occurs``), in the values' order (``ascending``) or as they first
    occur (``first_of``), and each slot's rank among them in the index type (0 for the others)."""
    present = ascending[occurs[ascending]]
    if not plan.sorted:
        present = present[np.argsort(first_of[present], kind="stable")]
    rank = np.zeros(occurs.size, plan.index_type)
    rank[present] = np.arange(present.size)
    return present, rank


#: The most groups the hash table of ``_hashed_groups`` holds: past them, the sort is taken.
MOST_HASHED_GROUPS = 1 << 16
#: Past this many groups, the hash table takes at most one group in _ELEMENTS_A_GROUP elements:
#: its memory (some 90 bytes a group) stays a small part of the workspace declared, and where
#: nearly every element is a group of its own the sort is as fast.
_FEW_GROUPS = 64
_ELEMENTS_A_GROUP = 8
#: The elements whose groups ``_hashed_groups`` finds before it counts and ranks every one.
_HASH_PREFIX = 1 << 16
#: The mantissa bits of the float types ``_hashed_groups`` takes (integers: 0).
_FRACTION_BITS = {
    np.dtype(np.float16): 10,
    _BFLOAT16: 7,
    np.dtype(np.float32): 23,
    np.dtype(np.float64): 52,
}


def _hashed_groups(
    values: npt.NDArray[Any], plan: UniquePlan, inverse: npt.NDArray[Any] | None = None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[Any]] | None:
    """``_sorted_groups`` of single elements of 2, 4 or 8 bytes by a hash table of their keys
    (compiled; None when the compiled loops are not ready). The groups of the first
    _HASH_PREFIX elements are found (in the order they first occur, with their first
    positions) and ranked (sorted by their keys, ``sortable_keys``, or as they occur); one pass
    over every element then writes each one's group in the index type (into ``inverse`` when
    given) and counts them (``hash_lines``: a line of the output at a time). Most
    data has all its groups early: where an element's group is new, the groups of the rest are
    added from it on and that pass made again. None too when there are more groups than the
    table holds (MOST_HASHED_GROUPS, and one in _ELEMENTS_A_GROUP elements past _FEW_GROUPS):
    the sort takes them."""
    dtype = values.dtype
    if dtype.kind in "iu":
        fraction = 0
    elif dtype in _FRACTION_BITS:
        fraction = _FRACTION_BITS[dtype]
    else:
        return None
    if not dtype.isnative or dtype.itemsize not in (2, 4, 8):
        return None
    compiled = loops.ready_module()
    if compiled is None:
        return None
    raw = as_raw(np.ascontiguousarray(values))
    limit = min(raw.size, MOST_HASHED_GROUPS, max(_FEW_GROUPS, raw.size // _ELEMENTS_A_GROUP))
    bits = (2 * limit - 1).bit_length()  # at least twice the slots of the groups: short probes
    table = (fraction, 64 - bits, np.empty(1 << bits, np.uint64))
    table_ids = np.full(1 << bits, -1, np.int32)
    firsts = np.empty(limit, np.int64)
    if inverse is None:
        inverse = np.empty(raw.size, plan.index_type)
    groups, start, stop = 0, 0, min(raw.size, _HASH_PREFIX)
    while True:
        groups = int(compiled.hash_groups(raw, start, stop, groups, *table, table_ids, firsts))
        if groups < 0:
            return None
        keys, nan = sortable_keys(values[firsts[:groups]])
        order = np.argsort(keys, kind="stable") if plan.sorted else np.arange(groups)
        ranks = np.empty(groups, plan.index_type)
        ranks[order] = np.arange(groups)
        nan_ranks = ranks[:0] if nan is None else ranks[nan]  # NaN groups as they occur
        held = np.flatnonzero(table_ids >= 0)  # the slots of groups
        table_ranks = np.full(table_ids.size, -1, plan.index_type)
        table_ranks[held] = ranks[table_ids[held]]
        counts = np.zeros(4 * groups, np.int64)  # hash_lines' four tables
        small = _small_table(compiled, raw.dtype, table[2][held], ranks[table_ids[held]])
        new = int(compiled.hash_lines(raw, *table, table_ranks, nan_ranks, counts, inverse, small))
        if new < 0:  # counts by rank already
            return firsts[order], counts.reshape(4, groups).sum(axis=0), inverse
        start, stop = new, raw.size  # a group not seen yet: the rest's groups added, then again


#: The most groups ``_small_table`` takes: its 256 slots at most half full.
_SMALL_GROUPS = 128
#: Pairs of multipliers (odd) ``_small_table`` tries, in turn, for a perfect hash.
_SMALL_FACTORS = (
    (0x9E3779B1, 0x85EBCA77),
    (0xC2B2AE3D, 0x27D4EB2F),
    (0x165667B1, 0xD3A2646D),
    (0xFD7046C5, 0xB55A4F09),
)


def _small_table(
    compiled: Any, dtype: np.dtype[Any], keys: npt.NDArray[np.uint64], ranks: npt.NDArray[Any]
) -> npt.NDArray[np.uint32]:
    """The small table of ``hash_lines`` (``compiled.SMALL_TABLE_WORDS``) for the groups of
    ``keys`` (as the hash table holds them) and their ``ranks``, when the compiled loops take
    one, the keys are of 2 or 4 bytes, there are at most _SMALL_GROUPS groups and ranks below
    128, and a perfect hash of them is found: each key's bucket (5 bits of one product)
    displaced (xor) to a slot of its own (8 bits of another), buckets of more keys placed
    first. Else an empty one (the hash table's way)."""
    none = np.zeros(0, np.uint32)
    if not compiled.SMALL_TABLES or dtype.itemsize not in (2, 4):
        return none
    if keys.size > _SMALL_GROUPS or (ranks.size and int(ranks.max()) >= 128):
        return none
    keys = keys.astype(np.uint32)
    buckets, slots = compiled.SMALL_BUCKETS, compiled.SMALL_SLOTS
    for bucket_factor, slot_factor in _SMALL_FACTORS:
        bucket = (keys * np.uint32(bucket_factor)) >> np.uint32(27)
        home = (keys * np.uint32(slot_factor)) >> np.uint32(24)
        if np.unique(bucket * np.uint32(slots) + home).size < keys.size:
            continue  # two keys of one bucket at one home: no displacement parts them
        shifts = _displacements(bucket, home, buckets, slots)
        if shifts is None:
            continue
        small = np.zeros(compiled.SMALL_TABLE_WORDS, np.uint32)
        slot = home ^ shifts[bucket]
        small[:buckets] = shifts
        small[buckets : buckets + slots][slot] = keys
        rank_bytes = np.full(slots, 255, np.uint8)
        rank_bytes[slot] = ranks
        small[buckets + slots : buckets + slots + slots // 4] = rank_bytes.view(np.uint32)
        small[-2:] = bucket_factor, slot_factor
        return small
    return none


def _displacements(
    bucket: npt.NDArray[np.uint32], home: npt.NDArray[np.uint32], buckets: int, slots: int
) -> npt.NDArray[np.uint32] | None:
    """Each bucket's displacement (xor'd into its keys' homes) such that every key gets a slot
    of its own, the buckets of more keys placed first, each at the first displacement whose
    slots are all free; None when a bucket finds none."""
    every = np.arange(slots, dtype=np.uint32)
    candidates = home[:, None] ^ every[None, :]  # each key's slot by each displacement
    by_bucket = np.argsort(bucket, kind="stable")
    sizes = np.bincount(bucket, minlength=buckets)
    ends = np.cumsum(sizes)
    taken = np.zeros(slots, bool)
    shifts = np.zeros(buckets, np.uint32)
    for each in np.argsort(-sizes, kind="stable")[: np.count_nonzero(sizes)]:
        members = by_bucket[ends[each] - sizes[each] : ends[each]]
        free = ~taken[candidates[members]].any(axis=0)
        if not free.any():
            return None
        shift = int(np.argmax(free))
        shifts[each] = shift
        taken[candidates[members, shift]] = True
    return shifts


def _first_positions(
    slots: npt.NDArray[Any], occurring: int, slots_count: int
) -> npt.NDArray[np.int64]:
    """Each slot's first position in ``slots`` (-1 for a slot that does not occur), found in
    pieces from the start, each twice as long as the one before (up to _PIECE), until all
    ``occurring`` slots are found: the common case is a short first piece."""
    first = np.full(slots_count, -1, np.int64)
    missing, start, size = occurring, 0, _FIRST_PIECE
    while missing and start < slots.size:
        found, where = np.unique(slots[start : start + size], return_index=True)
        new = first[found] < 0
        first[found[new]] = where[new] + start
        missing -= int(np.count_nonzero(new))
        start += size
        size = min(2 * size, _PIECE)
    return first


def unique_workspace_bytes(data: npt.NDArray[Any], plan: UniquePlan) -> int:
    """The most bytes ``unique`` holds beyond its input and its outputs' bounds: 8-byte keys
    (float64 values, their bits and the NaN marks too) for every element, and a handful of
    8-byte arrays per compared element or slice (order, groups, inverse, firsts, counts)."""
    return 32 * int(data.size) + 8 * 8 * plan.compared


# ------------------------------------------------------------------------------------------------
# The declaration


def _plan(arrays: Arrays, attributes: Attributes) -> SplitPlan:
    data = arrays["data"]
    checked = unique_plan(
        data,
        arrays.get("axis"),
        attributes["sorted"],
        attributes["index_element_type"],
        attributes["count_element_type"],
    )
    # Sized only once it has run: admission reserves the bounds (every element unique). The
    # inverse's size is known (one index an element or slice): written into its ready array.
    return SplitPlan(
        checked.bounds,
        lambda: unique_planned(data, checked),
        bounded=True,
        into=lambda ready: unique_planned(data, checked, ready[2]),
    )


def _workspace(arrays: Arrays, attributes: Attributes) -> int:
    data = arrays["data"]
    checked = unique_plan(
        data,
        arrays.get("axis"),
        attributes["sorted"],
        attributes["index_element_type"],
        attributes["count_element_type"],
    )
    return unique_workspace_bytes(data, checked)


_DATA = [[1, 2, 1], [1, 2, 1], [3, 1, 2]]
# fmt: off
#: The spec's three examples (3x3 float32 data; their values are not given: these are the
#: text's answers on one 3x3 tensor).
_EXAMPLES: list[tuple[str, str, dict[str, Any], Any]] = [
    ("example_1", "Unique-10 Example 1: axis 0, sorted false, index_element_type i32 (rows "
     "[1, 2, 1] twice and [3, 1, 2])",
     {"data": _DATA, "axis": [0], "sorted": False, "index_element_type": "i32",
      "dtype": "float32"},
     [[[1.0, 2.0, 1.0], [3.0, 1.0, 2.0]], [0, 2], [0, 0, 1], [2, 1]]),
    ("example_2", "Unique-10 Example 2: no axis (the flattened tensor), defaults: sorted, i64",
     {"data": _DATA, "dtype": "float32"},
     [[1.0, 2.0, 3.0], [0, 1, 6], [0, 1, 0, 0, 1, 0, 2, 0, 1], [5, 3, 1]]),
    ("example_3", "Unique-10 Example 3: no axis, sorted false, index and count types i32",
     {"data": [[3, 1, 3], [2, 2, 1], [0, 3, 1]], "sorted": False, "index_element_type": "i32",
      "count_element_type": "i32", "dtype": "float32"},
     [[3.0, 1.0, 2.0, 0.0], [0, 1, 3, 6], [0, 1, 0, 2, 2, 1, 3, 0, 1], [3, 3, 2, 1]]),
]
# fmt: on

_TYPE_CHOICES = ("i64", "i32")

OP = Op(
    name="unique",
    spec="Unique-10",
    summary="Unique-10: the unique elements (or slices) of a tensor, their first indices, the "
    "inverse and the counts",
    description="Unique-10 over `data`: without `axis`, the unique elements of the flattened "
    "tensor; with `axis`, its unique slices along it. Four outputs: `output_0` the unique "
    "elements (slices), sorted ascending (`sorted` true) or in order of first occurrence; "
    "`output_1` the index of each one's first occurrence; `output_2` for each input element "
    "(slice) the index of its unique one in `output_0`; `output_3` each one's count. Indices "
    "are of `index_element_type`, counts of `count_element_type` (i64 or i32). Elements compare "
    "as IEEE values: -0.0 and +0.0 are one element, each NaN its own. The outputs are sized "
    "only once it has run: admission reserves their largest sizes (every element unique) "
    "before it runs. Send JSON (tensors as nested arrays or base64 .npy) or an .npz archive.",
    request_doc="Unique-10: the unique elements of `data` (along `axis` if given).",
    inputs=(
        data_input("search for unique elements"),
        Input(
            "axis",
            "The axis whose slices are compared (input 2, type T_AXIS; optional: left out, the "
            "flattened tensor's elements are).",
            "T_AXIS: int64 or int32, a scalar or a 1D tensor of one element in [-r; r-1]. JSON "
            "form is int64.",
            ("int32", "int64"),
            rank="0 or 1",
            optional=True,
            limit=LIMIT_SCALAR,
        ),
    ),
    attributes=(
        Attribute(
            "sorted",
            True,
            "Whether the unique elements are sorted ascending (true) or in the order they first "
            "occur (false).",
            kind=BOOL,
        ),
        Attribute(
            "index_element_type",
            "i64",
            "The type of output_1 and output_2: i64 or i32.",
            choices=_TYPE_CHOICES,
            kind=ELEMENT_TYPE,
        ),
        Attribute(
            "count_element_type",
            "i64",
            "The type of output_3: i64 or i32.",
            choices=_TYPE_CHOICES,
            kind=ELEMENT_TYPE,
        ),
    ),
    outputs=(
        Output("output_0", "The unique elements (or slices along axis), of data's type."),
        Output(
            "output_1",
            "Each unique one's first occurrence in data (1D).",
            element_type="index_element_type",
        ),
        Output(
            "output_2",
            "For each element (slice) of data, the index of its unique one in output_0 (1D).",
            element_type="index_element_type",
        ),
        Output("output_3", "Each unique one's number of occurrences (1D).", "count_element_type"),
    ),
    plan=_plan,
    workspace=_workspace,
    examples={
        name: example(summary, request, output) for name, summary, request, output in _EXAMPLES
    },
    decisions=(
        "Unique-10 equality: elements compare as IEEE values: -0.0 and +0.0 are one unique "
        "element (given with the bits of its first occurrence), and a NaN equals nothing, "
        "itself included, so each NaN is a unique element of its own (as the CPU plugin does "
        "unsorted); slices are equal when every element is.",
        "Unique-10 sorted ascending: by value (unsigned values as unsigned), NaNs after +inf in "
        "the order they occur; slices lexicographically, element by element in row-major order.",
        "Unique-10 the outputs' sizes are known only after computing: admission reserves the "
        "largest each may be (output_0 data's size, output_1 to output_3 one index or count an "
        "element or slice compared) plus the kernel's workspace (about 32 bytes an element and "
        "64 a slice for its sort keys, order and groups), before anything is computed; the "
        "answer takes each output's real shape.",
        "Unique-10 index_element_type or count_element_type i32 with more than 2**31 - 1 "
        "elements (slices) to index or count: refused (422 naming the attribute) rather than "
        "wrapped.",
        "Unique-10 axis on rank-0 data: the range [-r; r-1] is empty, refused naming axis; "
        "without axis a scalar is one element.",
        "Unique-10's three examples give shapes and types without values: /docs shows the "
        "text's answers on 3x3 float32 tensors with the examples' attributes.",
    ),
    disagreements=(
        "Unique-10 unsigned values are sorted as signed by the CPU plugin: data uint32 [1, "
        "2**31], sorted, gives output_0 [2147483648, 1]; the spec's ascending order is [1, "
        "2147483648].",
        "Unique-10 sorted with NaNs: the CPU plugin's sort breaks on them (values out of "
        "order): data float32 [1, nan, -0.0, 0.0, nan, -1], sorted, gives output_0 [-1, -0, 1, "
        "nan, 0, nan] (0 after a NaN, apart from -0); the spec's answer is [-1, -0, 1, nan, "
        "nan].",
        "Unique-10 along an axis with 8-bit data (int8, uint8), the CPU plugin's output_1, "
        "output_2 and output_3 are uninitialised memory: data int8 [[1, 2]], axis 1 gives "
        "first indices like [-1793130496, 32558] (run to run different); the spec's answer is "
        "[0, 1], [0, 1], [1, 1].",
    ),
)
