"""GatherTree-1: the complete beams of a beam search, from the ids of each step and the parent
beam ids, filled with ``end_token`` past the first one decoded."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import loops
from app.ops.declaration import (
    ALL_TYPES,
    DATA_CONSTRAINT,
    Arrays,
    Attributes,
    Input,
    Op,
    Plan,
    example,
)
from app.ops.errors import SpecError
from app.ops.raw import STREAM_BYTES, as_raw, into_c_ordered

#: Elements checked at a time (the checks' temporaries stay this small, whatever the input).
_CHUNK = 1 << 16
#: The bytes of ids a block of batches walked together holds in each of its three arrays (the
#: three within a core's L2 between the walk down and up: 7% off the walk against 2 MiB), and
#: the most beams a block holds the state of (5 bytes each: where it is, whether it ended).
_BLOCK_BYTES = 256 << 10
#: The words of state a batch holds at least: two 64-byte lines of beams when they are walked
#: by permutes (the compiled walk's layout).
_STATE_WORDS = 32
_STATE_BEAMS = 1 << 16
#: Ids of this many bytes or more (step_ids') have their values checked by the walk as it reads
#: them, not by the plan: one read of each input where the plan's scans and the walk made two.
_WALK_CHECKS_BYTES = 1 << 20
_NAMES = ("step_ids", "parent_ids", "max_seq_len", "end_token")


def _is_float(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _integral(name: str, array: npt.NDArray[Any]) -> None:
    """Refuse a float input holding a value that is not an integer (a fraction, NaN, infinity):
    the spec's inputs "should have integer values only"."""
    if not _is_float(array.dtype):
        return
    flat = array.reshape(-1)
    if array.flags.c_contiguous and array.dtype.isnative and array.dtype.name in _FLOAT_BITS:
        # One pass over the bits, compiled: x - trunc(x) in NumPy is three.
        first = loops.first_fraction(as_raw(flat), *_FLOAT_BITS[array.dtype.name])
        if first >= 0:
            _refuse_fraction(name, array, first)
        return
    # float16 and bfloat16 are checked as float32 (exact); the others in their own type.
    kind = array.dtype if array.dtype.kind == "f" and array.dtype.itemsize >= 4 else np.float32
    fraction = np.empty(min(flat.size, _CHUNK), kind)
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK].astype(kind, copy=False)
        part = fraction[: chunk.size]
        # x - trunc(x) is 0 for an integer, not 0 for a fraction, NaN for NaN and infinities.
        np.trunc(chunk, out=part)
        with np.errstate(invalid="ignore"):  # inf - inf: the NaN that marks it
            np.subtract(chunk, part, out=part)
        if np.count_nonzero(part):
            _refuse_fraction(name, array, start + int(np.flatnonzero(part)[0]))


def _refuse_fraction(name: str, array: npt.NDArray[Any], first: int) -> None:
    """Refuse ``array``, whose flat element ``first`` is not an integer, naming it."""
    where = [int(i) for i in np.unravel_index(first, array.shape)]
    value = array.reshape(-1)[first].item()
    raise SpecError(name, f"{name} must have integer values only, got {value!r} at {where}")


def gather_tree_plan(
    step_ids: npt.NDArray[Any],
    parent_ids: npt.NDArray[Any],
    max_seq_len: npt.NDArray[Any],
    end_token: npt.NDArray[Any],
    *,
    ids_checked: bool = True,
) -> npt.NDArray[np.int64]:
    """Check the inputs against the spec; each batch's number of decoded steps,
    min(MAX_TIME, max_seq_len[batch]). The output has step_ids' shape.

    ``ids_checked`` False: the values of step_ids and parent_ids are left to the walk, which
    checks them as it reads them (``_checked_ids`` when it finds one to refuse)."""
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
    fits = _integral_ids(step_ids, parent_ids) if ids_checked else None
    _integral("max_seq_len", max_seq_len)
    _integral("end_token", end_token)
    lengths = _decoded_lengths(max_seq_len, max_time)
    if ids_checked:
        _check_parents(parent_ids, lengths, beam_width, fits)
    return lengths


def _integral_ids(step_ids: npt.NDArray[Any], parent_ids: npt.NDArray[Any]) -> bool | None:
    """``_integral`` of step_ids, then of parent_ids; ``_every_parent_names_a_beam``'s answer
    when the scan of the parent ids found it too (None: not known)."""
    _integral("step_ids", step_ids)
    if _scanned_with_largest(parent_ids):
        return _integral_parents(parent_ids, step_ids.shape[2])
    _integral("parent_ids", parent_ids)
    return None


def _checked_ids(
    step_ids: npt.NDArray[Any], parent_ids: npt.NDArray[Any], lengths: npt.NDArray[np.int64]
) -> None:
    """The checks of the ids that ``gather_tree_plan`` leaves to the walk, in its order (the
    other inputs passed before them): the same refusal, of the same id, as the plan's."""
    fits = _integral_ids(step_ids, parent_ids)
    _check_parents(parent_ids, lengths, step_ids.shape[2], fits)


def _scanned_with_largest(parent_ids: npt.NDArray[Any]) -> bool:
    """Whether float ``parent_ids`` are checked integers by ``_integral_parents``, which also
    finds the largest of their bits: C-ordered, native, a float the compiled scan reads."""
    dtype = parent_ids.dtype
    return (
        parent_ids.size > 0
        and dtype.name in _FLOAT_BITS
        and dtype.isnative
        and parent_ids.flags.c_contiguous
    )


def _integral_parents(parent_ids: npt.NDArray[Any], beam_width: int) -> bool:
    """``_integral`` for float parent ids (refused as it refuses them: the first value that is no
    integer, named), and ``_every_parent_names_a_beam``'s answer from the same read: the
    compiled scan also finds the largest bits past the first step's ids (one read of the ids
    where two passes made two)."""
    flat = as_raw(parent_ids.reshape(-1))
    skipped = parent_ids[0].size  # the first step's ids: no beam follows them
    first, largest = loops.first_fraction_and_largest(
        flat, *_FLOAT_BITS[parent_ids.dtype.name], skipped
    )
    if first >= 0:
        _refuse_fraction("parent_ids", parent_ids, first)
    limit = _parent_limit(parent_ids.dtype, beam_width)
    return limit is not None and largest < limit


def _decoded_lengths(max_seq_len: npt.NDArray[Any], max_time: int) -> npt.NDArray[np.int64]:
    """Each batch's decoded steps, min(MAX_TIME, max_seq_len[batch]) (int64, 8 bytes a batch:
    the workspace counts them), max_seq_len's values checked not negative; a chunk of _CHUNK
    at a time (a batch a Python number was seconds and hundreds of MiB for a few MiB of
    lengths). Through float64: exact below 2**53, and any value above is past MAX_TIME."""
    lengths = np.empty(max_seq_len.size, np.int64)
    for start in range(0, max_seq_len.size, _CHUNK):
        chunk = max_seq_len[start : start + _CHUNK]
        negative = np.flatnonzero(chunk < 0)
        if negative.size:
            batch = start + int(negative[0])
            raise SpecError(
                "max_seq_len",
                f"max_seq_len[{batch}] = {max_seq_len[batch].item()}: a sequence length cannot "
                "be negative",
            )
        np.minimum(chunk.astype(np.float64), max_time, out=lengths[start : start + _CHUNK],
                   casting="unsafe")  # fmt: skip
    return lengths


def _check_parents(
    parent_ids: npt.NDArray[Any],
    lengths: npt.NDArray[np.int64],
    beam_width: int,
    fits: bool | None = None,
) -> None:
    """Refuse a parent id that the beams follow (steps 1 to max_seq_len - 1 of each batch)
    outside [0, BEAM_WIDTH): it names no beam. ``fits``: ``_every_parent_names_a_beam``'s
    answer when it is known already (None: asked here)."""
    max_time = parent_ids.shape[0]
    if fits is None:
        fits = not parent_ids.size or _every_parent_names_a_beam(parent_ids, beam_width)
    if fits:
        return
    # Many steps at a time, about _CHUNK / 8 ids (their temporaries, some 15 bytes an id, within
    # the 8 * _CHUNK the workspace counts): a step at a time was a Python loop over MAX_TIME
    # (2**31 - 1 steps of no beam, a request of a few hundred bytes, held a worker for hours).
    steps = max(1, (_CHUNK // 8) // (parent_ids.size // max_time))
    for first in range(1, max_time, steps):
        values = parent_ids[first : first + steps]
        if values.dtype.kind not in "iubf":
            values = values.astype(np.float32)  # bfloat16: exact in float32
        # As Python numbers: compared exactly with BEAM_WIDTH, whatever the type.
        low, high = values.min(initial=0).item(), values.max(initial=0).item()
        if low >= 0 and high < beam_width:
            continue
        levels = np.arange(first, first + len(values), dtype=np.int64)
        followed = (lengths[None, :] > levels[:, None])[:, :, None]
        bad = ((values < 0) | (values >= beam_width)) & followed
        if bad.any():
            step, batch, beam = (int(i) for i in np.argwhere(bad)[0])
            level = first + step
            value = parent_ids[level, batch, beam].item()
            raise SpecError(
                "parent_ids",
                f"parent_ids[{level}, {batch}, {beam}] = {value} is no beam: a parent id must "
                f"be in [0, {beam_width - 1}] (BEAM_WIDTH {beam_width})",
            )


def _every_parent_names_a_beam(parent_ids: npt.NDArray[Any], beam_width: int) -> bool:
    """Whether every parent id past the first step (followed or not) is in [0, BEAM_WIDTH), in
    one pass: the largest of their bits read unsigned, which orders the values from 0 up and puts
    every negative one (its sign bit set) above them all. The float ids are integers here
    (checked before). False also when this cannot tell: the followed ids are then checked as
    they always were (a parent id no beam follows may name no beam)."""
    rest = parent_ids[1:]
    if not rest.size:
        return True
    if not (rest.flags.c_contiguous and rest.dtype.isnative):
        return False
    limit = _parent_limit(rest.dtype, beam_width)
    return limit is not None and int(as_raw(rest).reshape(-1).max()) < limit


def _parent_limit(dtype: np.dtype[Any], beam_width: int) -> int | None:
    """The bits (read unsigned) every parent id of type ``dtype`` in [0, BEAM_WIDTH) is below,
    and no other id: None when there is no such bound to read."""
    if _is_float(dtype):
        if dtype.name not in _FLOAT_BITS:
            return None
        value = np.asarray(beam_width).astype(dtype)
        if float(value) != beam_width:
            return None  # BEAM_WIDTH is no value of T (a float too narrow)
        # A float of T from +0 up to below BEAM_WIDTH has bits below its bits; -0.0 does not
        # (it is then checked as before).
        return int(as_raw(value.reshape(1))[0])
    if dtype.kind == "i":
        # A negative id, read unsigned, is at least 2 ** (bits - 1), past this limit.
        return min(beam_width, int(np.iinfo(dtype).max) + 1)
    return beam_width  # unsigned and bool (a bool's byte is at least its value)


def gather_tree(
    step_ids: npt.ArrayLike,
    parent_ids: npt.ArrayLike,
    max_seq_len: npt.ArrayLike,
    end_token: npt.ArrayLike,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """GatherTree-1: the beams ``step_ids`` and ``parent_ids`` describe; into ``out`` if
    given."""
    arrays = [_native(np.asarray(item)) for item in (step_ids, parent_ids, max_seq_len, end_token)]
    lengths = gather_tree_plan(*arrays)
    return _gathered(arrays[0], arrays[1], lengths, arrays[3], out)


def _native(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` in the machine's byte order (a copy when it is not: the checks and the walk
    read ids from their bits, so a big-endian ``.npy``'s must be turned around first)."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _gathered(
    step_ids: npt.NDArray[Any],
    parent_ids: npt.NDArray[Any],
    lengths: npt.NDArray[np.int64],
    end_token: npt.NDArray[Any],
    out: npt.NDArray[Any] | None,
    checking: bool = False,
) -> npt.NDArray[Any]:
    return into_c_ordered(
        out,
        step_ids.shape,
        step_ids.dtype,
        lambda target: _walk(step_ids, parent_ids, lengths, end_token, target, checking),
    )


#: How the walk reads a parent id's bits, by T's kind: (kind, mantissa bits, exponent bias).
_FLOAT_BITS = {
    "float16": (10, 15),
    "bfloat16": (7, 127),
    "float32": (23, 127),
    "float64": (52, 1023),
}


def _parent_reading(dtype: np.dtype[Any]) -> tuple[int, int, int]:
    """``loops.gather_tree``'s kind, fraction and bias for parent ids of type ``dtype``."""
    if dtype.name in _FLOAT_BITS:
        return (2, *_FLOAT_BITS[dtype.name])
    return (1 if dtype.kind == "i" else 0, 0, 0)


def _walk(
    step_ids: npt.NDArray[Any],
    parent_ids: npt.NDArray[Any],
    lengths: npt.NDArray[np.int64],
    end_token: npt.NDArray[Any],
    out: npt.NDArray[Any],
    checking: bool = False,
) -> None:
    """The compiled walk, batch by batch, into the C-ordered ``out``: the parent ids are read
    from their own bits, so nothing is converted. The float ids are integers and the followed
    parents beams, checked by the plan; or (``checking``) by the walk as it reads them: where
    it saw a float id that is no integer, or a parent id past the last beam (followed or not),
    or could not look, the plan's checks of the ids are made (``_checked_ids``), which refuse
    as the plan would have. Whatever the ids, the walk reads and writes only within the
    arrays: it clips every parent into the batch's beams."""
    max_time, batch_size, beam_width = step_ids.shape
    steps = as_raw(np.ascontiguousarray(step_ids)).reshape(-1)
    parents = as_raw(np.ascontiguousarray(parent_ids)).reshape(-1)
    target = as_raw(out).reshape(-1)
    ends = np.empty(2, target.dtype)
    ends[0] = as_raw(end_token.reshape(1))[0]
    # end_token is compared by value: a float zero equals the other zero too.
    other = -end_token if _is_float(end_token.dtype) and end_token == 0 else end_token
    ends[1] = as_raw(np.asarray(other, end_token.dtype).reshape(1))[0]
    block = _block(max_time, batch_size, beam_width, out.itemsize)
    state = np.empty(_state_words(max_time, batch_size, beam_width), np.uint32)
    stream = int(out.nbytes >= STREAM_BYTES)
    seen = np.zeros(64 // steps.itemsize if checking else 0, steps.dtype)
    saw = loops.gather_tree(steps, parents, target, lengths, state, ends, max_time, batch_size,
                            beam_width, block, *_parent_reading(parent_ids.dtype), stream,
                            seen)  # fmt: skip
    if not checking:
        return
    if saw != 0:  # a float id no integer, or not looked at
        _checked_ids(step_ids, parent_ids, lengths)
        return
    limit = _parent_limit(parent_ids.dtype, beam_width)
    if max_time > 1 and (limit is None or int(seen[0]) >= limit):
        _check_parents(parent_ids, lengths, beam_width, False)


def _state_words(max_time: int, batch_size: int, beam_width: int) -> int:
    """The words of state the walk is given: where every beam of every step is (at least
    _STATE_WORDS a batch and step), at most _STATE_BEAMS; for one pass (steps too many for
    that), a block's beams (a batch's at least)."""
    every = max_time * batch_size * max(beam_width, _STATE_WORDS)
    return max(min(every, _STATE_BEAMS), beam_width, _STATE_WORDS)


def _block(max_time: int, batch_size: int, beam_width: int, itemsize: int) -> int:
    """The batches the walk takes together: their ids, parents and output about _BLOCK_BYTES
    each (in the core's cache between the walk down and up), their state at most
    _STATE_BEAMS words of state (a word a beam, at least _STATE_WORDS a batch); at least one
    batch."""
    per_batch = max(1, max_time * beam_width * itemsize)
    words = max(beam_width, _STATE_WORDS)
    return max(1, min(batch_size, _BLOCK_BYTES // per_batch, _STATE_BEAMS // words))


def workspace_bytes(arrays: Arrays, attributes: Attributes) -> int:
    """What the walk holds beside the output: each beam's state (_state_words: 4 bytes a word,
    at most max(_STATE_BEAMS, BEAM_WIDTH) words), whether each beam of a block has ended (at
    most 4 bytes a word of state: a 128-byte line of flags a batch of at least 32 words), a
    block's row of ids (at most _BLOCK_BYTES, or one batch's row when that is more, and two
    lines), each batch's decoded length (8
    bytes), the checks' chunk of _CHUNK values (8 bytes each at most), and a copy of step_ids
    and parent_ids when they are not C-ordered or not in the machine's byte order (the two
    copies of one that is neither are not held at once: the native one is C-ordered)."""
    step_ids, parent_ids = arrays["step_ids"], arrays["parent_ids"]
    beam_width = step_ids.shape[-1] if step_ids.ndim == 3 else 0
    copied = sum(
        0 if item.flags.c_contiguous and item.dtype.isnative else item.nbytes
        for item in (step_ids, parent_ids)
    )
    lengths = 8 * arrays["max_seq_len"].size
    row = max(_BLOCK_BYTES, beam_width * step_ids.dtype.itemsize)
    walk = 8 * max(beam_width, _STATE_BEAMS) + row + 128
    return walk + lengths + 8 * _CHUNK + copied


def plan(arrays: Arrays, attributes: Attributes) -> Plan:
    """GatherTree-1's planner: the output's shape (step_ids'), every check made; for ids of
    _WALK_CHECKS_BYTES or more, those of the ids' values by the walk as it reads them
    (``Plan.check``: the same checks, made apart), the others here."""
    step_ids, parent_ids, max_seq_len, end_token = (
        _native(arrays[name]) for name in ("step_ids", "parent_ids", "max_seq_len", "end_token")
    )
    if step_ids.nbytes < _WALK_CHECKS_BYTES:
        lengths = gather_tree_plan(step_ids, parent_ids, max_seq_len, end_token)
        return Plan(
            step_ids.shape,
            lambda out: _gathered(step_ids, parent_ids, lengths, end_token, out),
        )
    try:
        lengths = gather_tree_plan(step_ids, parent_ids, max_seq_len, end_token, ids_checked=False)
    except SpecError:
        # Every check, in the plan's order: an id refused before the other inputs is refused
        # first, as it is when the plan makes them all.
        gather_tree_plan(step_ids, parent_ids, max_seq_len, end_token)
        raise
    return Plan(
        step_ids.shape,
        lambda out: _gathered(step_ids, parent_ids, lengths, end_token, out, checking=True),
        check=lambda: _checked_ids(step_ids, parent_ids, lengths),
    )


def _input(name: str, number: int, words: str, shape: str) -> Input:
    return Input(
        name,
        f"{words} (input {number}, type T, {shape}).",
        DATA_CONSTRAINT + " Every input has the type of step_ids; their values are integers.",
        ALL_TYPES,
        rank=shape,
        limit="scalar" if shape == "0" else "",
    )


OP = Op(
    name="gather_tree",
    spec="GatherTree-1",
    summary="GatherTree-1: the complete beams of a beam search, from step ids and parent ids",
    description="GatherTree-1: for each batch and beam, the ids of `step_ids` "
    "([MAX_TIME, BATCH_SIZE, BEAM_WIDTH]) followed back through `parent_ids` from the last "
    "decoded step, min(MAX_TIME, max_seq_len[batch]); past the first `end_token` of a beam, and "
    "past its length, every value is `end_token`. All four inputs have one type T, float "
    "included, and integer values; the output has step_ids' shape and type.",
    request_doc="GatherTree-1: the beams `step_ids` and `parent_ids` describe.",
    inputs=(
        _input("step_ids", 1, "The ids of each step", "3"),
        _input("parent_ids", 2, "The parent beam of each step's id", "3"),
        _input("max_seq_len", 3, "Each batch's sequence length", "1"),
        _input("end_token", 4, "The end marker", "0"),
    ),
    output_type_from="step_ids",
    plan=plan,
    workspace=workspace_bytes,
    examples={
        "example_tensorflow": example(
            "GatherTree-1 on TensorFlow's gather_tree example (the spec's is shapes only: "
            "[100, 1, 10] ids and parents give [100, 1, 10])",
            {
                "step_ids": [[[1, 2, 3]], [[4, 5, 6]], [[7, 8, 9]]],
                "parent_ids": [[[0, 0, 0]], [[0, 1, 1]], [[2, 1, 2]]],
                "max_seq_len": [3],
                "end_token": 10,
            },
            [[[2, 2, 2]], [[6, 5, 6]], [[7, 8, 9]]],
        ),
        "example_end_token": example(
            "GatherTree-1, float32: past a beam's first end_token, and past its length, end_token",
            {
                "step_ids": [[[1, 2]], [[10, 3]], [[4, 5]]],
                "parent_ids": [[[0, 1]], [[0, 1]], [[0, 1]]],
                "max_seq_len": [3],
                "end_token": 10,
                "dtype": "float32",
            },
            [[[1.0, 2.0]], [[10.0, 3.0]], [[10.0, 5.0]]],
        ),
    },
    decisions=(
        'GatherTree-1, "Inputs should have integer values only": a float input holding a '
        "fraction, NaN or an infinity is refused naming it.",
        'GatherTree-1, T is "any supported numeric type", one type for the four inputs: every '
        "supported type is taken (bool included), and an input of another type than step_ids "
        "is refused naming it.",
        "GatherTree-1, max_seq_len of 0: nothing is decoded, the beam is all end_token (the "
        "pseudocode would index step -1; OpenVINO's reference skips the beam); a negative "
        "length is refused naming max_seq_len.",
        "GatherTree-1, parent ids: those a beam follows (steps 1 to length - 1 of its batch) "
        "must name a beam, in [0, BEAM_WIDTH - 1], else refused naming parent_ids with the "
        "place; the first step's parents and those past a batch's length are never read.",
        "GatherTree-1, end_token compared by value: an id of -0.0 equals an end_token of 0 (and "
        "keeps its own bits); end_token must be a scalar (rank 0).",
    ),
    disagreements=(
        "GatherTree-1, int64 and uint64 ids on the CPU plugin: narrowed to 32 bits (step_ids "
        "[[[1, 2, 3]], [[4, 5, 6]], [[2**60 + 7, 8, 9]]], parent_ids [[[0, 0, 0]], [[0, 1, 1]], "
        "[[2, 1, 2]]], max_seq_len [3], end_token 10, uint64: the last step comes back "
        "[7, 8, 9]); the service keeps every bit.",
        "GatherTree-1, int8 and uint8 inputs: the CPU plugin refuses to compile the model; the "
        "service takes them.",
        'GatherTree-1, boolean inputs: OpenVINO refuses them ("Element type of inputs must be '
        'numeric"); the service reads T as every supported type, as Concat-1 does.',
    ),
)
