"""The compiled loops of the ops (numba), compiled when this module is imported.

Each loop is compiled for explicit signatures, so no request ever waits for the compiler: a call
whose types match no signature is a ``TypeError``, never a compilation. The loops work on the
raw unsigned views of ``app.ops.raw`` (four element widths at most; bytes or 8-byte words where
only whole runs are moved), and Gather's indices on their signed view of the same width (four
index types), the strided block copy (Reverse, Pad), Pad's rows, SliceScatter's rows, the tiled
transpose (blocks transposed in the vector registers) and GatherTree's walk of every width,
GatherTree's check of float ids (3 widths), Col2Im's reach along an axis (int64) and its sum of
blocks (every width), Unique's table of slots (1- and 2-byte values) and hash table (keys of 2,
4 or 8 bytes), writing either index type, and ScatterElementsUpdate's puts (each width) and
reductions (each type it computes in; float16 and bfloat16 as their bits): 73 compiled
signatures.

The copies that write a large output front to back (Reverse's, Pad's rows, SliceScatter's, the
interleaved rows of DepthToSpace, Col2Im and BatchToSpace) write its whole 64-byte lines by
non-temporal stores (``_stream_row``), the caller choosing by the output's size.

Long (some 1,800 lines) because numba's cache is kept per source file: a loop's cached machine
code is reused while its own file is unchanged, whatever changed in the modules it imports, so
the intrinsics and helpers a loop inlines live in the file of the loops (a helper in another
module, once changed, would leave every cache built before it in use, stale).

The machine code is cached on disk (numba's ``cache=True``): in ``NUMBA_CACHE_DIR`` when it is
set, else in ``__pycache__`` beside this file. A cache directory that exists but cannot be
written (an image's, under a read-only root filesystem) is still read; what is compiled then
stays in memory. Without any usable directory everything is compiled in memory, as with no cache.
"""

import contextlib
import itertools
import platform
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from app.numba_cache import in_share, use_readable_cache

# ---------------------------------------------------------------------------------------------
# Compilation and its cache


_ORDER = itertools.count()


def _compiled(function: Callable[..., Any], signatures: Sequence[Any]) -> Any:
    """``function`` compiled (or loaded from the cache) for each of ``signatures``, and no other
    (left out in a process of ``scripts/compile_kernels`` that another one compiles it in)."""
    dispatcher = numba.njit(nogil=True, boundscheck=False, error_model="numpy")(function)
    # Without a usable cache directory (RuntimeError), everything is compiled in memory.
    with contextlib.suppress(RuntimeError, OSError):
        use_readable_cache(dispatcher, function)
    if not in_share(next(_ORDER)):
        return dispatcher
    for signature in signatures:
        dispatcher.compile(signature)
    dispatcher.disable_compile()
    return dispatcher


def _helper(function: Callable[..., Any]) -> Any:
    """``function`` compiled for the types the loops call it with, when they are compiled (a
    helper inlined by numba's ``inline="always"`` is the other way: numba's IR inliner fails on
    ScatterElementsUpdate's overloads and branchy helpers). Not cached on its own: its machine
    code is linked into each loop that calls it, and a loop loaded from the cache needs nothing
    else, so its own entries would be files no start reads (the image holds the loops' only)."""
    return numba.njit(nogil=True, boundscheck=False, error_model="numpy")(function)


@intrinsic  # type: ignore[untyped-decorator]
def _prefetch(typingctx: Any, array: Any, index: Any) -> Any:
    """Ask the CPU to bring ``array[index]``'s cache line in (``llvm.prefetch``: read, keep)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        pointer_type = ir.IntType(8).as_pointer()
        word = ir.IntType(32)
        function_type = ir.FunctionType(ir.VoidType(), [pointer_type, word, word, word])
        prefetch = cgutils.get_or_insert_function(builder.module, function_type, "llvm.prefetch")
        address = builder.bitcast(builder.gep(data, [args[1]]), pointer_type)
        builder.call(prefetch, [address, word(0), word(3), word(1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


#: Whether the loops are compiled for x86 (numba compiles for the machine it runs on): its
#: store fence is an x86 instruction.
_X86 = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686"}


def _small_tables_compiled() -> bool:
    """Whether the permutes of ``_small_line`` and the GatherTree walk are compiled: x86 with
    AVX-512 VBMI, for the host CPU (an image's loops are compiled for any x86-64,
    ``NUMBA_CPU_NAME``: none there)."""
    if not _X86 or numba.config.CPU_NAME is not None or numba.config.CPU_FEATURES is not None:
        return False
    from llvmlite import binding  # noqa: PLC0415

    features = binding.get_host_cpu_features()
    return all(features.get(name, False) for name in ("avx512f", "avx512bw", "avx512vbmi"))


#: Whether ``hash_lines`` takes a small table (``SMALL_TABLE_WORDS``' layout), its keys found by
#: permutes in the vector registers (the caller passes an empty one where this is False),
#: whether ``gather_tree`` walks a batch of at most 128 bytes of beams by permutes, and whether
#: ``take`` gathers bytes by a table of columns (``_rows_to_columns``, ``_columns_to_rows``:
#: elsewhere LLVM would make each of their shuffles of 64 bytes a few dozen instructions).
SMALL_TABLES = _small_tables_compiled()


@intrinsic  # type: ignore[untyped-decorator]
def _fence(typingctx: Any) -> Any:
    """Order the non-temporal stores before every later store (``sfence`` on x86-64; elsewhere
    LLVM's own sequentially consistent fence, which every target has): they are weakly
    ordered, and the output is handed to another thread once the loop returns."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if not _X86:
            builder.fence("seq_cst")
            return context.get_dummy_value()
        function_type = ir.FunctionType(ir.VoidType(), [])
        fence = cgutils.get_or_insert_function(builder.module, function_type, "llvm.x86.sse.sfence")
        builder.call(fence, [])
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _address(typingctx: Any, array: Any, index: Any) -> Any:
    """The address of ``array[index]`` (uint64)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.ptrtoint(builder.gep(data, [args[1]]), ir.IntType(64))

    return types.uint64(array, index), codegen


def _element_constant(of_bits: Callable[[int], int]) -> Any:
    """An intrinsic giving, for an array, ``of_bits`` of its element's bits as a uint64
    constant of the compiled code (read at run time, a loop stepping by it would not unroll)."""

    def typer(typingctx: Any, array: Any) -> Any:
        value = of_bits(array.dtype.bitwidth)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return context.get_constant(types.uint64, value)

        return types.uint64(array), codegen

    return intrinsic(typer)


#: ``array``'s element width in bytes (uint64), a constant of the compiled code (an array's
#: ``itemsize`` is read at run time).
_width = _element_constant(lambda bits: bits // 8)


def _gather_lane_count(bits: int) -> int:
    """The lanes of one vector gather of elements of ``bits``: 16 (32-bit words gathered, a
    512-bit vector), 8 for 8-byte elements."""
    return 8 if bits == 64 else 16


def _splat(builder: Any, kind: Any, value: Any) -> Any:
    """``value`` in every lane of a vector of ``kind`` (an ``ir.VectorType`` of its type)."""
    undefined = ir.Constant(kind, ir.Undefined)
    first = ir.Constant(ir.VectorType(ir.IntType(32), kind.count), [0] * kind.count)
    one = builder.insert_element(undefined, value, ir.IntType(32)(0))
    return builder.shuffle_vector(one, undefined, first)


class _VectorAddresses(ir.Instruction):  # type: ignore[misc]
    """``getelementptr`` of one pointer by a vector of indices: the vector of the elements'
    pointers (llvmlite's builder takes scalar indices only). One base and 32-bit indices let
    x86 gather by 32-bit offsets (``vpgatherdd``): 16 lanes to an instruction."""

    def __init__(self, parent: Any, pointer: Any, indices: Any, lanes: int) -> None:
        kind = ir.VectorType(pointer.type, lanes)
        super().__init__(parent, kind, "getelementptr", [pointer, indices])

    def descr(self, buf: list[str]) -> None:
        pointer, indices = self.operands
        buf.append(
            f"getelementptr inbounds {pointer.type.pointee}, {pointer.type} "
            f"{pointer.get_reference()}, {indices.type} {indices.get_reference()}\n"
        )


def _gathered(
    builder: Any, table: Any, indices: Any, kind: Any, lanes: int, align: int | None = None
) -> Any:
    """``table[indices]`` for a vector of 32-bit ``indices``: one ``llvm.masked.gather`` of
    ``lanes`` elements of ``kind`` (every lane read), at code-generation time. ``table`` may
    point to narrower elements than ``kind``: then each lane reads the ``kind`` word at its
    element's address, aligned to ``align`` bytes (``kind``'s width when not given)."""
    word = ir.IntType(32)
    addresses = _VectorAddresses(builder.block, table, indices, lanes)
    builder._insert(addresses)
    pointers = builder.bitcast(addresses, ir.VectorType(kind.as_pointer(), lanes))
    loaded = ir.VectorType(kind, lanes)
    flags = ir.VectorType(ir.IntType(1), lanes)
    function_type = ir.FunctionType(loaded, [pointers.type, word, flags, loaded])
    name = f"llvm.masked.gather.v{lanes}i{kind.width}.v{lanes}p0i{kind.width}"
    gather = cgutils.get_or_insert_function(builder.module, function_type, name)
    every = ir.Constant(flags, [1] * lanes)
    zeros = ir.Constant(loaded, [0] * lanes)
    alignment = kind.width // 8 if align is None else align
    return builder.call(gather, [pointers, word(alignment), every, zeros])


def _streamed(builder: Any, values: Any, out: Any) -> None:
    """``values`` stored at ``out`` (a 64-byte line, aligned) by a non-temporal store."""
    store = builder.store(values, builder.bitcast(out, values.type.as_pointer()), align=64)
    store.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))


@intrinsic  # type: ignore[untyped-decorator]
def _gather_lanes(
    typingctx: Any,
    source: Any,
    base: Any,
    limit: Any,
    end: Any,
    indices: Any,
    k: Any,
    wrap: Any,
    out: Any,
    o: Any,
) -> Any:
    """One vector gather (``llvm.masked.gather``): the lanes' worth of ``out`` from ``out[o]``
    on (``_gather_width``) set to ``source[base + position]`` for the positions of
    ``indices[k:k + lanes]`` below ``limit``, and to 0 for the others. A negative value of a
    signed index type gets ``wrap`` added (``_take_loop``'s rule); an unsigned type's values are
    positions as they are. Worked on in lanes of the index type's width: 32-bit indices need
    ``end`` at most 2**31 (the lanes' offsets are signed). Elements of 1 and 2 bytes are
    gathered as 32-bit words at their address (x86 reads a word at any byte) and cut to their
    width: ``limit`` is where a word would reach past ``source`` (``_word_limit``). Returns the
    lanes, a bit each, whose position is in ``[limit, end)``: left to the caller; and from bit
    32 on, those whose position is outside ``[0, end)`` (zeros written: a caller that checks
    indices as it reads them refuses them)."""
    bits = out.dtype.bitwidth
    lanes = _gather_lane_count(bits)
    index_bits = indices.dtype.bitwidth
    signed = indices.dtype.signed
    word_bits = max(32, bits)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        word = ir.IntType(32)
        lane = ir.IntType(index_bits)
        vector = ir.VectorType(lane, lanes)
        zeros = ir.Constant(vector, [0] * lanes)

        def splat(value: Any) -> Any:
            if index_bits < 64:
                value = builder.trunc(value, lane)
            return _splat(builder, vector, value)

        source_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        index_data = context.make_array(signature.args[4])(context, builder, args[4]).data
        out_data = context.make_array(signature.args[7])(context, builder, args[7]).data
        at = builder.bitcast(builder.gep(index_data, [args[5]]), vector.as_pointer())
        values = builder.load(at, align=1)
        if signed:
            negative = builder.icmp_signed("<", values, zeros)
            values = builder.add(values, builder.select(negative, splat(args[6]), zeros))
        inside = builder.icmp_unsigned("<", values, splat(args[3]))
        readable = builder.icmp_unsigned("<", values, splat(args[2]))
        addresses = _VectorAddresses(builder.block, builder.gep(source_data, [args[1]]), values,
                                     lanes)  # fmt: skip
        builder._insert(addresses)
        loaded = ir.VectorType(ir.IntType(word_bits), lanes)
        pointers = builder.bitcast(addresses, ir.VectorType(loaded.element.as_pointer(), lanes))
        flags = ir.VectorType(ir.IntType(1), lanes)
        function_type = ir.FunctionType(loaded, [pointers.type, word, flags, loaded])
        name = f"llvm.masked.gather.v{lanes}i{word_bits}.v{lanes}p0i{word_bits}"
        gather = cgutils.get_or_insert_function(builder.module, function_type, name)
        got = builder.call(gather, [pointers, word(1), readable, ir.Constant(loaded, [0] * lanes)])
        element = ir.VectorType(ir.IntType(bits), lanes)
        if bits < word_bits:
            got = builder.trunc(got, element)
        target = builder.bitcast(builder.gep(out_data, [args[8]]), element.as_pointer())
        builder.store(got, target, align=1)
        left = builder.and_(inside, builder.not_(readable))
        long = ir.IntType(64)
        bits_of = builder.zext(builder.bitcast(left, ir.IntType(lanes)), long)
        outside = builder.zext(builder.bitcast(builder.not_(inside), ir.IntType(lanes)), long)
        return builder.or_(bits_of, builder.shl(outside, long(32)))

    return types.uint64(source, base, limit, end, indices, k, wrap, out, o), codegen


#: The lanes of ``_gather_lanes`` into an array (uint64), a constant of the compiled code.
_gather_width = _element_constant(_gather_lane_count)


#: The rows of bytes ``_rows_to_columns`` and ``_columns_to_rows`` work on together: a column of
#: them is one 8-byte word.
_COLUMN_ROWS = 8


def _column_layout(level: int, slot: int) -> list[tuple[int, int]]:
    """What the vector ``slot`` (of 8, 64 bytes each) holds after ``level`` rounds of
    ``_column_network``, byte by byte as (row, column) of the 8 x 64 block: groups of 2**level
    rows, each a run of 64 / 2**level columns with every row's byte of a column side by side
    (round 0: the rows; round 3: 8 columns of 8 bytes)."""
    rows, columns = 1 << level, 64 >> level
    group, part = slot >> level, slot & (rows - 1)
    return [(group * rows + q, part * columns + c) for c in range(columns) for q in range(rows)]


def _column_network(forward: bool) -> list[list[tuple[int, int, list[int]]]]:
    """The 3 rounds of shuffles that turn 8 rows of 64 bytes into their 64 columns of 8 bytes
    (``forward``; column c is bytes 8 (c % 8) to 8 (c % 8) + 7 of vector c // 8), or back.
    Each round makes each of the 8 vectors from two of the round before: a list of (first,
    second, picks), ``picks`` indexing their 128 bytes (``vpermt2b``, or a cheaper shuffle
    where LLVM finds one). Forward, vector s of round r + 1 takes its rows' groups from the
    vectors of round r holding its columns; back, a vector of round r from the two of round
    r + 1 its columns went to."""
    rounds = []
    for level in range(3) if forward else reversed(range(3)):
        made = []
        for slot in range(_COLUMN_ROWS):
            if forward:
                group, part = slot >> (level + 1), slot & ((2 << level) - 1)
                pair = [((2 * group + h) << level) | (part >> 1) for h in range(2)]
                before, after = level, level + 1
            else:
                group, part = slot >> level, slot & ((1 << level) - 1)
                pair = [((group >> 1) << (level + 1)) | (2 * part + h) for h in range(2)]
                before, after = level + 1, level
            where = {
                label: h * 64 + p
                for h in range(2)
                for p, label in enumerate(_column_layout(before, pair[h]))
            }
            picks = [where[label] for label in _column_layout(after, slot)]
            made.append((pair[0], pair[1], picks))
        rounds.append(made)
    return rounds


def _shuffled(
    builder: Any, rounds: list[list[tuple[int, int, list[int]]]], vectors: list[Any]
) -> Any:
    """``vectors`` (8 of 64 bytes) through ``_column_network``'s ``rounds``."""
    word = ir.IntType(32)
    for made in rounds:
        vectors = [
            builder.shuffle_vector(
                vectors[first], vectors[second], ir.Constant(ir.VectorType(word, 64), picks)
            )
            for first, second, picks in made
        ]
    return vectors


@intrinsic  # type: ignore[untyped-decorator]
def _rows_to_columns(typingctx: Any, source: Any, s: Any, step: Any, table: Any, t: Any) -> Any:
    """The 64 columns of 8 rows of bytes, ``source[s + i * step]`` to ``source[s + i * step +
    63]`` for i below 8, stored as 8-byte words (column c's bytes in row order) at ``table[t +
    8 c]``: 8 vector loads, the 24 shuffles of ``_column_network``, 8 vector stores. Nothing
    without ``SMALL_TABLES`` (never called there)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if not SMALL_TABLES:
            return context.get_dummy_value()
        index = ir.IntType(64)
        line = ir.VectorType(ir.IntType(8), 64).as_pointer()
        source_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        table_data = context.make_array(signature.args[3])(context, builder, args[3]).data
        rows = []
        for i in range(_COLUMN_ROWS):
            at = builder.add(args[1], builder.mul(args[2], index(i)))
            rows.append(
                builder.load(builder.bitcast(builder.gep(source_data, [at]), line), align=1)
            )
        for k, value in enumerate(_shuffled(builder, _FORWARD_COLUMNS, rows)):
            at = builder.add(args[4], index(64 * k))
            builder.store(value, builder.bitcast(builder.gep(table_data, [at]), line), align=1)
        return context.get_dummy_value()

    return types.void(source, s, step, table, t), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _columns_to_rows(
    typingctx: Any, table: Any, positions: Any, k: Any, out: Any, o: Any, step: Any, stream: Any
) -> Any:
    """``_rows_to_columns`` back, from gathered columns: the 8-byte words of ``table`` (bytes,
    read as words) at ``positions[k]`` to ``positions[k + 63]`` (uint32, below 2**31), by 8
    vector gathers (``vpgatherdq``), turned into 8 rows of 64 bytes by the inverse shuffles
    and stored at ``out[o + i * step]`` (i below 8); by non-temporal stores, each address a
    multiple of 64, where ``stream`` (a literal) is 1. Nothing without ``SMALL_TABLES``."""
    if not isinstance(stream, types.IntegerLiteral):
        return None
    streamed = stream.literal_value == 1

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if not SMALL_TABLES:
            return context.get_dummy_value()
        word, index = ir.IntType(32), ir.IntType(64)
        lanes = _COLUMN_ROWS
        line = ir.VectorType(ir.IntType(8), 64)
        columns = ir.VectorType(index, lanes)
        table_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        position_data = context.make_array(signature.args[1])(context, builder, args[1]).data
        out_data = context.make_array(signature.args[3])(context, builder, args[3]).data
        words = builder.bitcast(table_data, index.as_pointer())
        flags = ir.VectorType(ir.IntType(1), lanes)
        function_type = ir.FunctionType(
            columns, [ir.VectorType(index.as_pointer(), lanes), word, flags, columns]
        )
        gather = cgutils.get_or_insert_function(
            builder.module, function_type, f"llvm.masked.gather.v{lanes}i64.v{lanes}p0i64"
        )
        every = ir.Constant(flags, [1] * lanes)
        gathered = []
        for g in range(_COLUMN_ROWS):
            at = builder.add(args[2], index(lanes * g))
            pointer = builder.bitcast(
                builder.gep(position_data, [at]), ir.VectorType(word, lanes).as_pointer()
            )
            addresses = _VectorAddresses(
                builder.block, words, builder.load(pointer, align=1), lanes
            )
            builder._insert(addresses)
            got = builder.call(
                gather, [addresses, word(8), every, ir.Constant(columns, ir.Undefined)]
            )
            gathered.append(builder.bitcast(got, line))
        for i, value in enumerate(_shuffled(builder, _BACK_COLUMNS, gathered)):
            at = builder.add(args[4], builder.mul(args[5], index(i)))
            target = builder.bitcast(builder.gep(out_data, [at]), line.as_pointer())
            if streamed:
                store = builder.store(value, target, align=64)
                store.set_metadata("nontemporal", builder.module.add_metadata([word(1)]))
            else:
                builder.store(value, target, align=1)
        return context.get_dummy_value()

    return types.void(table, positions, k, out, o, step, stream), codegen


_FORWARD_COLUMNS = _column_network(forward=True)
_BACK_COLUMNS = _column_network(forward=False)


def _block_lanes(bits: int) -> int:
    """The elements of ``bits`` bits in the register ``_transpose_block`` moves a block's row in:
    16 bytes for elements of 1 and 2 bytes (16 x 16 and 8 x 8 blocks), 32 for 4 and 8 bytes (8 x
    8 and 4 x 4: AVX2's registers, two halves where a machine has only 16-byte ones)."""
    return (256 if bits >= 32 else 128) // bits


#: The side (uint64) of ``_transpose_block``'s square blocks of an array's elements.
_block_side = _element_constant(_block_lanes)


def _block_codegen(bits: int, groups: int) -> Any:
    """The code of ``_transpose_block`` (``groups`` 1) and ``_transpose_lines`` (rows of
    ``groups`` blocks side by side, each row loaded as one vector): with n the side
    (``_block_lanes``), the n rows go through log2(n) rounds, each pairing row i with row i + n/2
    and replacing the pair by the low and the high halves of their interleaving (rows 2i and
    2i + 1), each block's part of the rows interleaved on its own: after the last round, row i
    holds column i of each block, stored as its own vector (block g's column i is the output's
    row ``g * n + i``). LLVM chooses the target's shuffles for each interleaving."""
    lanes = _block_lanes(bits)
    half = lanes // 2
    total = lanes * groups

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        word = ir.IntType(32)
        index = ir.IntType(64)
        vector = ir.VectorType(ir.IntType(bits), total)
        piece = ir.VectorType(ir.IntType(bits), lanes)
        mask = ir.VectorType(word, total)

        def interleaving(first: int) -> Any:
            picks = [
                g * lanes + v
                for g in range(groups)
                for k in range(first, first + half)
                for v in (k, total + k)
            ]
            return ir.Constant(mask, [word(v) for v in picks])

        low, high = interleaving(0), interleaving(half)
        source_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        out_data = context.make_array(signature.args[3])(context, builder, args[3]).data

        def row(data: Any, start: Any, step: Any, i: int, kind: Any) -> Any:
            at = builder.add(start, builder.mul(step, index(i)))
            return builder.bitcast(builder.gep(data, [at]), kind.as_pointer())

        rows = [
            builder.load(row(source_data, args[1], args[2], i, vector), align=1)
            for i in range(lanes)
        ]
        for _ in range(lanes.bit_length() - 1):
            paired = []
            for i in range(half):
                paired.append(builder.shuffle_vector(rows[i], rows[i + half], low))
                paired.append(builder.shuffle_vector(rows[i], rows[i + half], high))
            rows = paired
        undefined = ir.Constant(vector, ir.Undefined)
        for g in range(groups):
            block = ir.Constant(
                ir.VectorType(word, lanes), [word(g * lanes + k) for k in range(lanes)]
            )
            for i, value in enumerate(rows):
                part = value if groups == 1 else builder.shuffle_vector(value, undefined, block)
                builder.store(part, row(out_data, args[4], args[5], g * lanes + i, piece), align=1)
        return context.get_dummy_value()

    return codegen


@intrinsic  # type: ignore[untyped-decorator]
def _transpose_block(
    typingctx: Any, source: Any, s: Any, s_step: Any, out: Any, o: Any, o_step: Any
) -> Any:
    """A square block transposed in the registers: its rows are the vectors of ``source`` from
    ``source[s + i * s_step]`` on (i from 0 to the side, ``_block_lanes``), its transpose is
    stored as the vectors of ``out`` from ``out[o + i * o_step]`` on (``_block_codegen``)."""
    codegen = _block_codegen(out.dtype.bitwidth, 1)
    return types.void(source, s, s_step, out, o, o_step), codegen


#: The bits of a cache line (64 bytes), the length of ``_transpose_lines``'s rows.
_LINE_BITS = 512


@intrinsic  # type: ignore[untyped-decorator]
def _transpose_lines(
    typingctx: Any, source: Any, s: Any, s_step: Any, out: Any, o: Any, o_step: Any
) -> Any:
    """``_transpose_block`` on rows of one cache line (64 bytes) each: the side's count of rows
    (``_block_lanes``) from ``source[s + i * s_step]`` on, each loaded as one vector holding
    64 / (side x width) blocks side by side (4 of 16 x 16 bytes, 4 of 8 x 8 elements of 2 bytes,
    2 of 8 x 8 of 4, 2 of 4 x 4 of 8), transposed together; the transpose's rows (one line's
    worth of elements) are stored as vectors of ``out`` from ``out[o + j * o_step]`` on."""
    bits = out.dtype.bitwidth
    codegen = _block_codegen(bits, _LINE_BITS // (_block_lanes(bits) * bits))
    return types.void(source, s, s_step, out, o, o_step), codegen


def _line_codegen(
    builder: Any, source_data: Any, s: Any, out_data: Any, o: Any, kind: int, bits: int
) -> None:
    """``_stream_line``'s code: the 64-byte line of ``out_data`` from element ``o`` on (i64)
    set by a non-temporal store to the line's worth of ``source_data`` from element ``s`` on
    (``kind`` 1), ending there reversed (-1), that element repeated (0) or every other element
    from there on (2)."""
    lanes = 512 // bits
    word = ir.IntType(32)
    line = ir.VectorType(ir.IntType(bits), lanes)
    if kind == 0:
        at = builder.bitcast(builder.gep(source_data, [s]), line.element.as_pointer())
        one = builder.load(at, align=1)
        loaded = builder.insert_element(ir.Constant(line, ir.Undefined), one, word(0))
        order = [word(0)] * lanes
    elif kind == 2:
        first = builder.bitcast(builder.gep(source_data, [s]), line.as_pointer())
        later = builder.add(s, ir.IntType(64)(lanes))
        second = builder.bitcast(builder.gep(source_data, [later]), line.as_pointer())
        order_type = ir.VectorType(word, lanes)
        loaded = builder.shuffle_vector(
            builder.load(first, align=1),
            builder.load(second, align=1),
            ir.Constant(order_type, [word(2 * k) for k in range(lanes)]),
        )
    else:
        first = s if kind == 1 else builder.sub(s, ir.IntType(64)(lanes - 1))
        pointer = builder.bitcast(builder.gep(source_data, [first]), line.as_pointer())
        loaded = builder.load(pointer, align=1)
        order = [word(k if kind == 1 else lanes - 1 - k) for k in range(lanes)]
    if kind in (0, -1):
        order_type = ir.VectorType(word, lanes)
        loaded = builder.shuffle_vector(
            loaded, ir.Constant(line, ir.Undefined), ir.Constant(order_type, order)
        )
    pointer = builder.bitcast(builder.gep(out_data, [o]), line.as_pointer())
    store = builder.store(loaded, pointer, align=64)
    store.set_metadata("nontemporal", builder.module.add_metadata([word(1)]))


@intrinsic  # type: ignore[untyped-decorator]
def _stream_line(typingctx: Any, source: Any, s: Any, out: Any, o: Any, step: Any) -> Any:
    """The 64-byte line of ``out`` from ``out[o]`` on (its address a multiple of 64) set by
    non-temporal stores to the line's worth of ``source`` from ``source[s]`` on (``step`` 1),
    ending at ``source[s]`` in reverse order (-1), ``source[s]`` repeated (0), or every other
    element from ``source[s]`` on (2; two lines loaded, so the element after the last one
    taken is read too): one vector load (two for step 2; or one element, repeated), a
    shuffle, aligned vector stores (the widest the target has: 2 of 32 bytes with AVX2, 4 of
    16 bytes on generic x86-64)."""
    if not isinstance(step, types.IntegerLiteral):
        return None
    kind = step.literal_value
    bits = out.dtype.bitwidth

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        source_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        out_data = context.make_array(signature.args[2])(context, builder, args[2]).data
        _line_codegen(builder, source_data, args[1], out_data, args[3], kind, bits)
        return context.get_dummy_value()

    return types.void(source, s, out, o, step), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _stream_row(typingctx: Any, source: Any, out: Any, s: Any, o: Any, size: Any, step: Any) -> Any:
    """``out[o + e] = source[s + e * step]`` for ``e`` below ``size``, ``step`` 1, -1 or 0 (any
    integers): the whole 64-byte lines of the row written a line at a time by non-temporal
    stores (``_stream_line``'s), the parts of lines at either end by regular stores (a line
    written partly by non-temporal stores is flushed partial, and its other part may be another
    row's); an ``out`` whose address is not a whole number of elements all by regular stores.
    A non-temporal store writes a line without reading it in first, as a regular store does: a
    third less memory traffic, when the output is far larger than the caches and written front
    to back (a 64 MiB copy in lines: 0.4-0.7x ``np.copyto``).

    Generated code, not a numba function inlined: numba took a reference to each array it
    passed to one (``NRT_incref``/``NRT_decref``, locked instructions), and a locked
    instruction waits for every non-temporal store before it to reach memory, as a fence does:
    a row of 8 KiB then cost some 270 ns more (64 MiB filled in rows of 8 KiB: 5.1 ms, in one
    row 2.9 ms)."""
    bits = out.dtype.bitwidth
    width = bits // 8
    lanes = 512 // bits

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        word = ir.IntType(64)
        source_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        out_data = context.make_array(signature.args[1])(context, builder, args[1]).data
        s, o, size, step = (
            context.cast(builder, value, kind, types.int64)
            for value, kind in zip(args[2:], signature.args[2:], strict=True)
        )
        address = builder.ptrtoint(builder.gep(out_data, [o]), word)
        lead = builder.udiv(
            builder.and_(builder.sub(word(64), builder.and_(address, word(63))), word(63)),
            word(width),
        )
        fits = builder.icmp_unsigned("<", lead, size)
        head = builder.select(fits, lead, size)
        whole_elements = builder.icmp_unsigned(
            "==", builder.and_(address, word(width - 1)), word(0)
        )
        head = builder.select(whole_elements, head, size)
        count = builder.udiv(builder.sub(size, head), word(lanes))
        whole = builder.add(head, builder.mul(count, word(lanes)))

        def element(e: Any) -> None:
            at = builder.add(s, builder.mul(step, e))
            value = builder.load(builder.gep(source_data, [at]), align=1)
            builder.store(value, builder.gep(out_data, [builder.add(o, e)]), align=1)

        with cgutils.for_range(builder, head) as loop:
            element(loop.index)

        def lines(kind: int) -> None:
            with cgutils.for_range(builder, count) as loop:
                e = builder.add(head, builder.mul(loop.index, word(lanes)))
                at = s if kind == 0 else (builder.add(s, e) if kind == 1 else builder.sub(s, e))
                _line_codegen(builder, source_data, at, out_data, builder.add(o, e), kind, bits)

        forward = builder.icmp_signed("==", step, word(1))
        with builder.if_else(forward) as (then, otherwise):
            with then:
                lines(1)
            with otherwise:
                reversed_ = builder.icmp_signed("==", step, word(-1))
                with builder.if_else(reversed_) as (back, repeated):
                    with back:
                        lines(-1)
                    with repeated:
                        lines(0)
        with cgutils.for_range(builder, builder.sub(size, whole)) as loop:
            element(builder.add(whole, loop.index))
        return context.get_dummy_value()

    return types.void(source, out, s, o, size, step), codegen


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _line_parts(out: Any, o: Any, size: Any) -> Any:  # pragma: no cover - compiled
    """How ``size`` elements of ``out`` from ``o`` on fall on 64-byte lines: the elements
    before the first whole line, the end of the last whole line (both counted from ``o``) and
    a line's elements. An ``out`` whose address is not a whole number of elements has no whole
    line (all of it is the head)."""
    u = np.uint64
    width = _width(out)
    address = _address(out, o)
    line = u(64) // width
    head = size
    if address % width == u(0):
        head = min(size, ((u(64) - address % u(64)) % u(64)) // width)
    return head, head + (size - head) // line * line, line


@_helper
def _stream_every_other(
    source: Any, out: Any, s: Any, o: Any, size: Any
) -> None:  # pragma: no cover - compiled
    """``out[o + e] = source[s + 2 * e]`` for ``e`` below ``size`` (all uint64), as
    ``_stream_row`` writes its rows: whole lines by non-temporal stores, each two source lines
    shuffled (``_stream_line``'s step 2), the parts of lines at either end by regular stores. A
    line's loads reach one element past the last one it takes: the last line, if that is past
    the source's end, is written by regular stores too. A function of its own, not a branch of
    ``_stream_row``: inlined into the strided copy's loop, the branch moved the loop's other
    shapes by 6-7% (SpaceToDepth float32 slower, int8 quicker)."""
    u = np.uint64
    head, whole, line = _line_parts(out, o, size)
    if whole > head and s + u(2) * whole > u(source.size):
        whole -= line
    for e in range(head):
        out[o + e] = source[s + u(2) * e]
    for e in range(head, whole, line):
        _stream_line(source, s + u(2) * e, out, o + e, 2)
    for e in range(whole, size):
        out[o + e] = source[s + u(2) * e]


# ---------------------------------------------------------------------------------------------
# The loops. Offsets are unsigned (uint64): numba then indexes without its negative-index
# wrap-around, and the copy loops vectorise.


#: Indices ``_take_by_positions`` reads into positions at a time (4 bytes each: 256 KiB).
TAKE_CHUNK = 1 << 16


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _word_limit(total: Any, base: Any, end: Any, width: Any) -> Any:  # pragma: no cover
    """The positions from ``source[base]`` on (below ``end``) that ``_gather_lanes`` may read
    as a 32-bit word within the ``total`` elements of ``source``: all of them for elements of 4
    and 8 bytes; for narrower ones, those whose word ends by the array's last byte."""
    u = np.uint64
    if width >= u(4):
        return end
    room = (total - base) * width
    if room < u(4):
        return u(0)
    return min(end, (room - u(4)) // width + u(1))


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _take_run(
    source: Any,
    indices: Any,
    out: Any,
    base: Any,
    first: Any,
    last: Any,
    at: Any,
    to: Any,
    end: Any,
    limit: Any,
    wrap: Any,
) -> Any:  # pragma: no cover - compiled
    """``out[to + k] = source[base + position]`` for ``k`` in ``[first, last)``, the position
    that of ``indices[at + k]`` by ``_take_loop``'s rule (0 outside ``[0, end)``): a vector
    gather a ``_gather_width`` of them (on x86; 32-bit indices while ``end`` is at most 2**31),
    its lanes at ``[limit, end)`` (``_word_limit``) and the last few one by one. Not 0 when a
    position was outside ``[0, end)``."""
    u = np.uint64
    lanes = _gather_width(out)
    k = first
    outside = u(0)
    if _X86 and (_width(indices) == u(8) or end <= u(1 << 31)):
        while k + lanes <= last:
            got = _gather_lanes(source, base, limit, end, indices, at + k, wrap, out, to + k)
            outside |= got >> u(32)
            left = got & u(0xFFFFFFFF)
            if left:
                for e in range(k, k + lanes):
                    value = np.int64(indices[at + e])
                    value += (value >> 63) & wrap
                    if u(value) < end:
                        out[to + e] = source[base + u(value)]
            k += lanes
    for e in range(k, last):
        value = np.int64(indices[at + e])
        value += (value >> 63) & wrap
        position = u(value)
        if position < end:
            out[to + e] = source[base + position]
        else:
            out[to + e] = 0
            outside = u(1)
    return outside


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _take_by_positions(
    source: Any,
    indices: Any,
    out: Any,
    batches: int,
    outer: int,
    length: int,
    count: int,
    wrap: int,
) -> Any:  # pragma: no cover - compiled
    """``_take_loop``'s way for narrow elements: positions of a chunk of indices worked out once
    for all the rows of their batch (``length`` at most 2**32). Not 0 when a position was
    outside ``[0, length)``."""
    u = np.uint64
    end = u(length)
    span = u(count)
    per = u(outer)
    total = u(source.size)
    width = _width(out)
    positions = np.empty(min(span, u(TAKE_CHUNK)), np.uint32)
    found = u(0)
    for batch in range(u(batches)):
        idx = indices[batch * span : (batch + u(1)) * span]
        for first in range(u(0), span, u(TAKE_CHUNK)):
            last = min(span, first + u(TAKE_CHUNK))
            outside = u(0)
            for k in range(first, last):
                value = np.int64(idx[k])
                value += (value >> 63) & wrap
                outside |= u(u(value) >= end)
                positions[k - first] = np.uint32(value)
            found |= outside
            inside = outside == u(0)
            for row in range(batch * per, (batch + u(1)) * per):
                if inside:
                    limit = _word_limit(total, row * end, end, width)
                    _take_run(source, positions, out, row * end, u(0), last - first, u(0),
                              row * span + first, end, limit, u(0))  # fmt: skip
                    continue
                src = source[row * end : (row + u(1)) * end]
                dst = out[row * span + first : row * span + last]
                for k in range(last - first):
                    value = np.int64(idx[first + k])
                    value += (value >> 63) & wrap
                    position = u(value)
                    dst[k] = src[position] if position < end else 0
    return found


#: The longest row (elements) ``_take_by_columns`` takes: its table of 8-byte columns stays
#: within 1 MiB, in the L2 cache, where the gathers find it.
_COLUMNS_LONGEST = 1 << 17
#: The output (bytes) from which ``_take_by_columns`` writes by non-temporal stores (as
#: ``raw.STREAM_BYTES``: far past the L2), its rows of ``_COLUMNS_STREAM_ROW`` bytes or more
#: (the columns before a row's first 64-byte line are moved one by one: rows of 64 columns were
#: 2x slower so). Measured on a 64 MiB output of 8 KiB rows: 1.1x faster, at the byte floor
#: (``np.copyto``).
_COLUMNS_STREAM_BYTES = 8 << 20
_COLUMNS_STREAM_ROW = 4096


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _column_positions(
    indices: Any, at: Any, size: Any, end: Any, wrap: Any, positions: Any
) -> Any:  # pragma: no cover - compiled
    """``positions[k]`` (uint32) the position of ``indices[at + k]`` by ``_take_loop``'s rule,
    ``end`` where it is out of range (``_take_by_columns``' zero column), for k below ``size``;
    not 0 when one was."""
    u = np.uint64
    outside = u(0)
    for k in range(size):
        value = np.int64(indices[at + k])
        value += (value >> 63) & wrap
        outside |= u(u(value) >= end)
        positions[k] = np.uint32(value) if u(value) < end else np.uint32(end)
    return outside


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _columns_run(
    table: Any, positions: Any, out: Any, o: Any, size: Any, step: Any, stream: Any
) -> None:  # pragma: no cover - compiled
    """``out[o + i * step + k] = table[8 positions[k] + i]`` for the 8 rows i and k below
    ``size``: 64 columns at a time by ``_columns_to_rows``, the others one byte at a time (with
    ``stream``, the columns before ``out[o]``'s next 64-byte line too)."""
    u = np.uint64
    head = u(0)
    if stream:
        head = min(size, (u(64) - _address(out, o) % u(64)) % u(64))
    whole = head + (size - head) // u(64) * u(64)
    for k in range(head):
        at = u(_COLUMN_ROWS) * u(positions[k])
        for i in range(u(_COLUMN_ROWS)):
            out[o + i * step + k] = table[at + i]
    for k in range(head, whole, u(64)):
        if stream:
            _columns_to_rows(table, positions, k, out, o + k, step, 1)
        else:
            _columns_to_rows(table, positions, k, out, o + k, step, 0)
    for k in range(whole, size):
        at = u(_COLUMN_ROWS) * u(positions[k])
        for i in range(u(_COLUMN_ROWS)):
            out[o + i * step + k] = table[at + i]


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _take_by_columns(
    source: Any,
    indices: Any,
    out: Any,
    batches: int,
    outer: int,
    length: int,
    count: int,
    wrap: int,
) -> Any:  # pragma: no cover - compiled
    """``_take_loop``'s way for bytes, 8 rows of a batch at a time (``SMALL_TABLES``): their
    columns made 8-byte words in a table (``_rows_to_columns``, a zero word after the last for
    the positions out of range), each output column of the 8 rows is then one word gathered
    from it, 64 columns turned back into 8 output rows by ``_columns_to_rows``: 8 output
    bytes to a gathered lane where ``_take_run`` moves one. The positions are read
    ``TAKE_CHUNK`` indices at a time (once for all the batch's rows when they are fewer); the
    rows left over (fewer than 8) go through ``_take_run``. Not 0 when a position was outside
    ``[0, length)``."""
    u = np.uint64
    found = u(0)
    rows = u(_COLUMN_ROWS)
    end = u(length)
    span = u(count)
    per = u(outer)
    table = np.empty(rows * (end + u(1)), np.uint8)
    for i in range(rows):
        table[rows * end + i] = 0
    positions = np.empty(min(span, u(TAKE_CHUNK)), np.uint32)
    whole = end // u(64) * u(64)
    stream = (
        u(out.size) >= u(_COLUMNS_STREAM_BYTES)
        and span >= u(_COLUMNS_STREAM_ROW)
        and span % u(64) == u(0)
    )
    total = u(source.size)
    for batch in range(u(batches)):
        first_row = batch * per
        last_group = first_row + per // rows * rows
        for group in range(first_row, last_group, rows):
            start = group * end
            for c in range(u(0), whole, u(64)):
                _rows_to_columns(source, start + c, end, table, rows * c)
            for c in range(whole, end):
                for i in range(rows):
                    table[rows * c + i] = source[start + i * end + c]
            for first in range(u(0), span, u(TAKE_CHUNK)):
                size = min(span - first, u(TAKE_CHUNK))
                if group == first_row or span > u(TAKE_CHUNK):
                    found |= _column_positions(indices, batch * span + first, size, end, wrap,
                                               positions)  # fmt: skip
                _columns_run(table, positions, out, group * span + first, size, span, stream)
        for row in range(last_group, first_row + per):
            limit = _word_limit(total, row * end, end, u(1))
            found |= _take_run(source, indices, out, row * end, u(0), span, batch * span,
                               row * span, end, limit, wrap)  # fmt: skip
    if stream:
        _fence()
    return found


def _take_loop(
    source: Any,
    indices: Any,
    out: Any,
    batches: int,
    outer: int,
    length: int,
    count: int,
    wrap: int,
    line: int,
) -> Any:  # pragma: no cover - compiled
    """Gather-8 of single elements on flat arrays: ``source`` is (batches, outer, length),
    ``indices`` (batches, count), ``out`` (batches, outer, count), all C-ordered. Returns 1
    when a position was outside ``[0, length)`` (its element a zero), else 0: a caller may
    leave the indices' range to be checked so, as they are read.

    ``indices`` is the signed view of the index type; a negative value gets ``wrap`` added:
    ``length`` for a signed type (counting from the end), ``2**32`` for uint32 (its true value),
    0 for uint64 (a value of 2**63 or more stays negative: out of range). A position outside
    ``[0, length)`` gives a zero.

    ``line`` > 0: the next row's cache lines (``line`` elements each) are prefetched while a row
    is gathered, one every few indices: its elements are read in index order, which the CPU's
    own prefetcher cannot follow.

    On x86 the elements are taken by vector gathers (``_take_run``): 16 indices at a time (8
    for 8-byte elements) read, wrapped and tested as a vector and the elements gathered by one
    instruction, masked to the positions in range (the others zeros): reading, wrapping and
    testing each index one at a time cost more than its element's move (the loop alone, 64
    MiB, inner axis, int32 indices: GatherElements 1.3x (float32) and 2.0x (int8) faster,
    Gather of float32 1.2x). Elements of 1 and 2 bytes are gathered as the 32-bit words at
    their addresses, a position whose word would reach past the source's end taken alone.

    Elements of 1 and 2 bytes, several rows to a batch: the indices are read ``TAKE_CHUNK`` at a
    time into positions (uint32) once for all the batch's rows; where all of a chunk's are in
    range, each row takes its elements at them by the vector gathers (1.15x faster than one by
    one: a gather moves about one element every 0.2 ns in the cache, as byte loads do). A
    chunk with one out of range goes element by element as above.

    Bytes, 8 rows or more a batch, with AVX-512 VBMI (``SMALL_TABLES``): 8 rows at a time
    through a table of their 8-byte columns (``_take_by_columns``), one gathered lane moving 8
    output bytes (64 MiB, rows of 8192: 18.3 -> 11.0 ms, the byte floor 9.4).
    """
    u = np.uint64
    end = u(length)
    span = u(count)
    per = u(outer)
    total = u(source.size)
    if (
        SMALL_TABLES
        and _width(out) == u(1)
        and per >= u(_COLUMN_ROWS)
        and span >= u(64)
        and end <= min(u(_COLUMNS_LONGEST), u(4) * span)
    ):
        found = _take_by_columns(source, indices, out, batches, outer, length, count, wrap)
        return np.int64(found != u(0))
    if _width(out) <= u(2) and per > u(1) and end <= u(1 << 32):
        found = _take_by_positions(source, indices, out, batches, outer, length, count, wrap)
        return np.int64(found != u(0))
    found = u(0)
    lines = (end + u(line) - u(1)) // u(line) if line else u(0)
    # Whole vector gathers to a step; the next row's lines prefetched as far as the share of
    # the row's indices done.
    lanes = _gather_width(out)
    step = (max(u(1), span // lines) + lanes - u(1)) // lanes * lanes if lines else span
    for row in range(u(batches) * per):
        batch = row // per
        start = row * end
        limit = _word_limit(total, start, end, _width(out))
        ahead = start + end
        stop = min(ahead + end, total) if lines else ahead
        j = u(0)
        while j < span:
            last = min(span, j + step)
            if lines:
                reach = min(stop, start + end + last * lines // span * u(line))
                while ahead < reach:
                    _prefetch(source, ahead)
                    ahead += u(line)
            found |= _take_run(source, indices, out, start, j, last, batch * span, row * span,
                               end, limit, wrap)  # fmt: skip
            j = last
    return np.int64(found != u(0))


def _take_slices_loop(
    source: Any,
    indices: Any,
    out: Any,
    batches: int,
    outer: int,
    length: int,
    count: int,
    inner: int,
    wrap: int,
) -> None:  # pragma: no cover - compiled
    """Gather-8 of slices: as ``_take_loop`` with ``inner`` units (bytes or 8-byte words) a
    slice: ``source`` is (batches, outer, length, inner), ``out`` (batches, outer, count,
    inner); a position out of range gives a slice of zeros."""
    u = np.uint64
    width = u(inner)
    end = u(length)
    span = u(count)
    per = u(outer)
    row_length = end * width
    for row in range(u(batches) * per):
        batch = row // per
        src = source[row * row_length : (row + u(1)) * row_length]
        idx = indices[batch * span : (batch + u(1)) * span]
        dst = out[row * span * width : (row + u(1)) * span * width]
        for k in range(span):
            value = np.int64(idx[k])
            value += (value >> 63) & wrap
            position = u(value)
            into = k * width
            if position < end:
                start = position * width
                for e in range(width):
                    dst[into + e] = src[start + e]
            else:
                for e in range(width):
                    dst[into + e] = 0


def _roll_loop(
    source: Any, out: Any, table: Any, row: int, split: int
) -> None:  # pragma: no cover - compiled
    """Roll ``source`` into ``out``, both flat: rows of ``row`` elements, each rolled by ``split``
    (two runs copied). ``table`` holds, for the dimensions before the rows, their lengths, their
    shifts (in ``[0, length)``) and their strides in rows: output row ``r`` (a multi-index over
    those lengths) is taken from the source row at ``(r - shifts) mod lengths``."""
    u = np.uint64
    dims = table.size // 3
    lengths = table[:dims]
    shifts = table[dims : 2 * dims]
    strides = table[2 * dims :]
    rows = u(1)
    for d in range(dims):
        rows *= u(lengths[d])
    index = np.zeros(dims, np.int64)
    origin_index = np.empty(dims, np.int64)
    origin = 0
    for d in range(dims):
        origin_index[d] = (lengths[d] - shifts[d]) % lengths[d]
        origin += origin_index[d] * strides[d]
    size = u(row)
    head = u(row - split)
    tail = u(split)
    for r in range(rows):
        at = r * size
        start = u(origin) * size
        for e in range(head):
            out[at + tail + e] = source[start + e]
        for e in range(tail):
            out[at + e] = source[start + head + e]
        d = dims - 1
        while d >= 0:
            origin_index[d] += 1
            origin += strides[d]
            if origin_index[d] == lengths[d]:
                origin_index[d] = 0
                origin -= lengths[d] * strides[d]
            index[d] += 1
            if index[d] < lengths[d]:
                break
            index[d] = 0
            d -= 1


#: The most of an interleaved row the strided copy puts together in its buffer before it
#: streams it to the output (8 KiB: a 64 MiB BatchToSpace int8 streamed pieces of 1 KiB at
#: 1.2-1.25x the floor, of 2 KiB at 1.02-1.07x, of 4 to 32 KiB at 0.75-0.79x).
_PIECE_BYTES = 8 << 10


@_helper
def _interleaved_row(
    source: Any, out: Any, s: Any, o: Any, size: Any, lanes: Any, block: Any, lane: Any
) -> None:  # pragma: no cover - compiled
    """``lanes`` rows of ``size`` blocks of ``block`` elements, read forward from
    ``source[s]`` on, ``lane`` elements apart, written interleaved from ``out[o]`` on: block
    ``e`` of row ``k`` (``source[s + k * lane + e * block]`` on) at ``(e * lanes + k) * block``,
    every store to the next element (all arguments uint64). A function of its own, not a branch
    of the strided copy's loop: compiled there, the same loops ran 1.5x slower (64 MiB
    BatchToSpace int8: 13.9 against 9.4 ms, one process). The usual shapes are written out,
    their index steps constants the compiler vectorises by."""
    u = np.uint64
    if block == 1:
        if lanes == 2:
            for e in range(size):
                out[o + e * u(2)] = source[s + e]
                out[o + e * u(2) + u(1)] = source[s + lane + e]
        elif lanes == 4:
            for e in range(size):
                out[o + e * u(4)] = source[s + e]
                out[o + e * u(4) + u(1)] = source[s + lane + e]
                out[o + e * u(4) + u(2)] = source[s + u(2) * lane + e]
                out[o + e * u(4) + u(3)] = source[s + u(3) * lane + e]
        else:
            for e in range(size):
                for k in range(lanes):
                    out[o + e * lanes + k] = source[s + k * lane + e]
    elif block == 2 and lanes == 2:
        for e in range(size):
            out[o + e * u(4)] = source[s + e * u(2)]
            out[o + e * u(4) + u(1)] = source[s + e * u(2) + u(1)]
            out[o + e * u(4) + u(2)] = source[s + lane + e * u(2)]
            out[o + e * u(4) + u(3)] = source[s + lane + e * u(2) + u(1)]
    elif block == 3 and lanes == 2:
        for e in range(size):
            out[o + e * u(6)] = source[s + e * u(3)]
            out[o + e * u(6) + u(1)] = source[s + e * u(3) + u(1)]
            out[o + e * u(6) + u(2)] = source[s + e * u(3) + u(2)]
            out[o + e * u(6) + u(3)] = source[s + lane + e * u(3)]
            out[o + e * u(6) + u(4)] = source[s + lane + e * u(3) + u(1)]
            out[o + e * u(6) + u(5)] = source[s + lane + e * u(3) + u(2)]
    elif block == 4 and lanes == 2:
        # Written out: a loop over the block's 4 elements indexed by a signed counter, and
        # the compiler moved 16 bytes at a time with a wrap-around check on each index.
        for e in range(size):
            out[o + e * u(8)] = source[s + e * u(4)]
            out[o + e * u(8) + u(1)] = source[s + e * u(4) + u(1)]
            out[o + e * u(8) + u(2)] = source[s + e * u(4) + u(2)]
            out[o + e * u(8) + u(3)] = source[s + e * u(4) + u(3)]
            out[o + e * u(8) + u(4)] = source[s + lane + e * u(4)]
            out[o + e * u(8) + u(5)] = source[s + lane + e * u(4) + u(1)]
            out[o + e * u(8) + u(6)] = source[s + lane + e * u(4) + u(2)]
            out[o + e * u(8) + u(7)] = source[s + lane + e * u(4) + u(3)]
    else:
        for e in range(size):
            for k in range(lanes):
                at = o + (e * lanes + k) * block
                start = s + k * lane + e * block
                for j in range(block):
                    out[at + j] = source[start + j]


@_helper
def _gathered_row(
    source: Any, out: Any, s: Any, o: Any, size: Any, lanes: Any, block: Any, gap: Any
) -> None:  # pragma: no cover - compiled
    """``_interleaved_row`` the other way round: ``size * lanes`` blocks of ``block`` elements
    read forward from ``source[s]`` on, block ``e * lanes + k`` written to row ``k`` (``gap``
    elements apart, from ``out[o]`` on) at ``e * block``: the source line read once, each
    block to its lane's row (SpaceToBatch's channel runs, the block column the lanes). All
    arguments uint64; the usual shapes written out."""
    u = np.uint64
    if block == 2 and lanes == 2:
        for e in range(size):
            out[o + e * u(2)] = source[s + e * u(4)]
            out[o + e * u(2) + u(1)] = source[s + e * u(4) + u(1)]
            out[o + gap + e * u(2)] = source[s + e * u(4) + u(2)]
            out[o + gap + e * u(2) + u(1)] = source[s + e * u(4) + u(3)]
    elif block == 3 and lanes == 2:
        for e in range(size):
            out[o + e * u(3)] = source[s + e * u(6)]
            out[o + e * u(3) + u(1)] = source[s + e * u(6) + u(1)]
            out[o + e * u(3) + u(2)] = source[s + e * u(6) + u(2)]
            out[o + gap + e * u(3)] = source[s + e * u(6) + u(3)]
            out[o + gap + e * u(3) + u(1)] = source[s + e * u(6) + u(4)]
            out[o + gap + e * u(3) + u(2)] = source[s + e * u(6) + u(5)]
    elif block == 4 and lanes == 2:
        for e in range(size):
            out[o + e * u(4)] = source[s + e * u(8)]
            out[o + e * u(4) + u(1)] = source[s + e * u(8) + u(1)]
            out[o + e * u(4) + u(2)] = source[s + e * u(8) + u(2)]
            out[o + e * u(4) + u(3)] = source[s + e * u(8) + u(3)]
            out[o + gap + e * u(4)] = source[s + e * u(8) + u(4)]
            out[o + gap + e * u(4) + u(1)] = source[s + e * u(8) + u(5)]
            out[o + gap + e * u(4) + u(2)] = source[s + e * u(8) + u(6)]
            out[o + gap + e * u(4) + u(3)] = source[s + e * u(8) + u(7)]
    else:
        for e in range(size):
            for k in range(lanes):
                at = o + k * gap + e * block
                start = s + (e * lanes + k) * block
                for j in range(block):
                    out[at + j] = source[start + j]


def _strided_copy_loop(  # noqa: PLR0915 - each row shape its own loop, so each vectorises
    source: Any,
    out: Any,
    table: Any,
    source_start: int,
    out_start: int,
    run: int,
    step: int,
    out_step: int,
    lane_step: int,
    stream: int,
) -> None:  # pragma: no cover - compiled
    """Copy a block of ``source`` into ``out`` (both flat): rows of ``run`` elements, each written
    into ``out`` ``out_step`` elements apart (positive; 1 forward) and read from ``source``
    ``step`` elements apart (1 forward, -1 reversed, 0 one element repeated, any other a
    stride). With ``lane_step`` positive (``step`` a block's length, ``out_step`` a multiple
    of it) a row is of blocks of ``step`` elements and fills the gaps too:
    ``out_step / step`` rows read forward ``lane_step`` apart, written interleaved, block ``e``
    of row ``k`` at ``(e * out_step / step + k) * step``, so every store is to the next element
    (``_interleaved_row``: a depth-to-space block's bytes and Col2Im's kernel row, blocks of
    one element; BatchToSpace's channel runs, blocks of a run). With ``lane_step`` negative (and
    ``out_step`` 1, ``step`` 2 to 4) a row read ``step`` apart is read with the ``step`` rows
    that fill its gaps: element ``e`` of row ``k`` read at ``e * step + k`` and written at
    ``k * -lane_step + e`` (image patches whose stride is their size); with ``out_step`` a
    block's length (not 1) the same of blocks: block ``e`` of row ``k`` read at
    ``(e * step + k) * out_step`` and written at ``k * -lane_step + e * out_step``
    (``_gathered_row``: SpaceToBatch's channel runs, ``step`` any count of rows). ``table``
    holds, for the dimensions before the rows, their lengths, then their strides in
    ``source`` (signed: negative walks backwards), then their strides in ``out``, all in
    elements; the first row starts at ``source_start`` and ``out_start``. Reverse and Pad's
    edge, reflect and symmetric modes are such blocks, a reversed row copied at the speed of a
    forward one.
    With ``stream`` not 0, rows written forward and read forward, reversed or two apart (a
    slice of every other element), and interleaved rows (``lane_step`` positive), are written
    by non-temporal stores (``_stream_row``; an interleaved row put together in a buffer
    first, a piece at a time)."""
    u = np.uint64
    dims = table.size // 3
    lengths = table[:dims]
    source_strides = table[dims : 2 * dims]
    out_strides = table[2 * dims :]
    rows = 1
    for d in range(dims):
        rows *= lengths[d]
    index = np.zeros(dims, np.int64)
    at_source = source_start
    at_out = out_start
    size = u(run)
    spread = u(out_step)
    # Interleaved rows by non-temporal stores: put together in a buffer that stays in the L1
    # cache, a piece of at most _PIECE_BYTES at a time, then streamed (``_stream_row``).
    piece = size
    if stream and lane_step > 0:
        pieces = max(u(1), (size * spread * _width(out) + u(_PIECE_BYTES - 1)) // u(_PIECE_BYTES))
        piece = (size + pieces - u(1)) // pieces
    buffer = np.empty(piece * spread if stream and lane_step > 0 else u(0), out.dtype)
    lanes = spread // u(step) if lane_step > 0 else u(1)
    for _ in range(rows):
        s = u(at_source)
        o = u(at_out)
        if lane_step < 0:
            # A row read ``step`` apart whose gaps the next rows fill (image patches of a
            # stride equal to their size): the ``step`` rows are read together, the source
            # line once, forward, and each written to its own place ``-lane_step`` apart.
            gap = u(-lane_step)
            if out_step != 1:
                _gathered_row(source, out, s, o, size, u(step), spread, gap)
            elif step == 2:
                for e in range(size):
                    out[o + e] = source[s + e * u(2)]
                    out[o + gap + e] = source[s + e * u(2) + u(1)]
            elif step == 3:
                for e in range(size):
                    out[o + e] = source[s + e * u(3)]
                    out[o + gap + e] = source[s + e * u(3) + u(1)]
                    out[o + u(2) * gap + e] = source[s + e * u(3) + u(2)]
            else:
                for e in range(size):
                    out[o + e] = source[s + e * u(4)]
                    out[o + gap + e] = source[s + e * u(4) + u(1)]
                    out[o + u(2) * gap + e] = source[s + e * u(4) + u(2)]
                    out[o + u(3) * gap + e] = source[s + e * u(4) + u(3)]
        elif lane_step != 0:
            if stream:
                for first in range(u(0), size, piece):
                    count = min(piece, size - first)
                    _interleaved_row(source, buffer, s + first * u(step), u(0), count, lanes,
                                     u(step), u(lane_step))  # fmt: skip
                    _stream_row(buffer, out, u(0), o + first * spread, count * spread, 1)
            else:
                _interleaved_row(source, out, s, o, size, lanes, u(step), u(lane_step))
        elif out_step != 1:
            # A row read forward and written ``out_step`` apart (depth-to-space, Col2Im's
            # blocks): the next rows fill the gaps while the lines are in the cache.
            if step == 1 and out_step == 2:
                for e in range(size):
                    out[o + e * u(2)] = source[s + e]
            elif step == 1 and out_step == 4:
                for e in range(size):
                    out[o + e * u(4)] = source[s + e]
            else:
                for e in range(size):
                    out[o + e * spread] = source[u(np.int64(s) + np.int64(e) * step)]
        elif stream and abs(step) == 1:
            _stream_row(source, out, s, o, size, step)
        elif stream and step == 2:
            _stream_every_other(source, out, s, o, size)
        elif step == 1:
            for e in range(size):
                out[o + e] = source[s + e]
        elif step == -1:
            for e in range(size):
                out[o + e] = source[s - e]
        elif step == 0:
            value = source[s]
            for e in range(size):
                out[o + e] = value
        elif step == 2:
            # Small constant steps (image patches, space-to-depth): the compiler vectorises
            # a constant stride's loads as shuffles, not a variable one's.
            for e in range(size):
                out[o + e] = source[s + e * u(2)]
        elif step == 3:
            for e in range(size):
                out[o + e] = source[s + e * u(3)]
        elif step == 4:
            for e in range(size):
                out[o + e] = source[s + e * u(4)]
        else:
            for e in range(size):
                out[o + e] = source[u(np.int64(s) + np.int64(e) * step)]
        d = dims - 1
        while d >= 0:
            index[d] += 1
            at_source += source_strides[d]
            at_out += out_strides[d]
            if index[d] < lengths[d]:
                break
            at_source -= lengths[d] * source_strides[d]
            at_out -= lengths[d] * out_strides[d]
            index[d] = 0
            d -= 1
    if stream:
        _fence()


def _pad_rows_loop(
    source: Any,
    out: Any,
    table: Any,
    segments: Any,
    source_start: int,
    out_start: int,
    stream: int,
) -> None:  # pragma: no cover - compiled
    """Rows of ``out`` (flat) each put together from pieces of a row of ``source`` (flat), one
    row after another and each whole before the next, so that ``out`` is written front to back
    (Pad's edge, reflect and symmetric modes: the last axis's runs of one row). ``segments``
    holds, for each piece, where it starts in the output row, where in the source row its first
    element is read, its length and its step (1 forward, -1 reversed, 0 one element repeated;
    2 a constant, whose bits stand where the source position would: Pad's constant mode),
    four groups of ``segments.size // 4``; ``table`` the rows as ``_strided_copy_loop``'s (their
    lengths, strides in ``source`` (signed), strides in ``out``), the first starting at
    ``source_start`` and ``out_start``. With ``stream`` not 0 every piece is written by
    non-temporal stores (``_stream_row``): the output is then one long stream of whole lines,
    the only ones written by regular stores those two pieces share."""
    u = np.uint64
    dims = table.size // 3
    lengths = table[:dims]
    source_strides = table[dims : 2 * dims]
    out_strides = table[2 * dims :]
    count = segments.size // 4
    rows = 1
    for d in range(dims):
        rows *= lengths[d]
    index = np.zeros(dims, np.int64)
    # The constants: element k the bits of piece k's, when it has one.
    constants = np.zeros(count, out.dtype)
    for k in range(count):
        if segments[3 * count + k] == 2:
            constants[k] = segments[count + k]
    at_source = source_start
    at_out = out_start
    for _ in range(rows):
        for k in range(count):
            o = u(at_out + segments[k])
            size = u(segments[2 * count + k])
            step = segments[3 * count + k]
            if step == 2:
                if stream:
                    _stream_row(constants, out, u(k), o, size, 0)
                else:
                    value = constants[k]
                    for e in range(size):
                        out[o + e] = value
                continue
            s = u(at_source + segments[count + k])
            if stream:
                _stream_row(source, out, s, o, size, step)
            elif step == 1:
                for e in range(size):
                    out[o + e] = source[s + e]
            elif step == -1:
                for e in range(size):
                    out[o + e] = source[s - e]
            else:
                value = source[s]
                for e in range(size):
                    out[o + e] = value
        # The odometer step written out as in _strided_copy_loop: an inlined helper returning
        # the two starts took twice as long on rows of 64 bytes (measured on the strided copy).
        d = dims - 1
        while d >= 0:
            index[d] += 1
            at_source += source_strides[d]
            at_out += out_strides[d]
            if index[d] < lengths[d]:
                break
            at_source -= lengths[d] * source_strides[d]
            at_out -= lengths[d] * out_strides[d]
            index[d] = 0
            d -= 1
    if stream:
        _fence()


@intrinsic  # type: ignore[untyped-decorator]
def _pair_line(typingctx: Any, target: Any, t: Any, updates: Any, k: Any, data: Any, d: Any) -> Any:
    """The 64 bytes of ``target`` from ``target[t]`` on set to pairs of an update and a data
    element: ``target[t + 2 * i] = updates[k + i]`` and ``target[t + 2 * i + 1] =
    data[d + 2 * i + 1]``, for the line's half of its elements ``i``. One load of a line of
    data (the even elements unused) and of half a line of updates, one shuffle of the two
    (``vpermt2b``/``w``/``d``/``q`` with AVX-512), one store; every access unaligned."""
    bits = target.dtype.bitwidth
    lanes = 512 // bits
    half = lanes // 2

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        word = ir.IntType(32)
        line = ir.VectorType(ir.IntType(bits), lanes)
        half_line = ir.VectorType(ir.IntType(bits), half)
        order_type = ir.VectorType(word, lanes)

        def at(position: int, kind: Any) -> Any:
            array = context.make_array(signature.args[position])(context, builder, args[position])
            place = builder.gep(array.data, [args[position + 1]])
            return builder.bitcast(place, kind.as_pointer())

        odd = builder.load(at(4, line), align=1)
        fresh = builder.load(at(2, half_line), align=1)
        # Both halves of a shuffle are of one type: the updates widened to a line first.
        widened = builder.shuffle_vector(
            fresh,
            ir.Constant(half_line, ir.Undefined),
            ir.Constant(order_type, [word(i % half) for i in range(lanes)]),
        )
        order = [word(i // 2 if i % 2 == 0 else lanes + i) for i in range(lanes)]
        paired = builder.shuffle_vector(widened, odd, ir.Constant(order_type, order))
        builder.store(paired, at(0, line), align=1)
        return context.get_dummy_value()

    return types.void(target, t, updates, k, data, d), codegen


#: The bytes of output ``_slice_scatter_loop`` puts together in a buffer at a time, then writes by
#: non-temporal stores (a third of the L1 data cache here: the buffer, and the data and updates
#: it is made from, stay in it).
SCATTER_CHUNK_BYTES = 16 << 10


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _scatter_part(
    data: Any,
    updates: Any,
    target: Any,
    t: Any,
    b: Any,
    ub: Any,
    lo: Any,
    hi: Any,
    first: Any,
    step: Any,
    count: Any,
    backward: int,
) -> None:  # pragma: no cover - compiled
    """Elements ``lo`` to ``hi`` (exclusive) of one output row, written from ``target[t]`` on:
    element ``e`` is ``data[b + e]``, or, at a slot ``e = first + k * step`` (``k`` below
    ``count``), ``updates[ub + k]`` (``updates[ub + count - 1 - k]`` when ``backward``). Every
    argument but ``backward`` is unsigned, ``step`` at least 1."""
    u = np.uint64
    stop = first + (count - u(1)) * step + u(1) if count else first  # past the last slot
    for e in range(lo, min(hi, first)):
        target[t + e - lo] = data[b + e]
    low = max(lo, first)
    high = min(hi, stop)
    if low < high:
        k = (low - first + step - u(1)) // step  # the first slot at or after ``low``
        p = first + k * step
        for e in range(low, p):
            target[t + e - lo] = data[b + e]
        at = t + p - lo
        if step == u(2) and not backward:
            # An update and a data element a pair, a 64-byte line of pairs at a time
            # (``_pair_line``: one shuffle; NumPy's stores two apart, one element at a time,
            # cost int8 twice a copy, and the compiler's own vectorising of this loop read
            # the data two apart by gathers, one element at a time for 2-byte elements).
            pairs = (high - p) // u(2)
            half = u(32) // _width(target)  # the pairs of a line
            whole = pairs // half * half
            for j in range(u(0), whole, half):
                _pair_line(target, at + u(2) * j, updates, ub + k + j, data, b + p + u(2) * j)
            for j in range(whole, pairs):
                target[at + u(2) * j] = updates[ub + k + j]
                target[at + u(2) * j + u(1)] = data[b + p + u(2) * j + u(1)]
            if (high - p) % u(2):
                target[at + u(2) * pairs] = updates[ub + k + pairs]
        else:
            if step != u(1):  # the data between the slots (a step of 1 leaves none)
                for e in range(p, high):
                    target[t + e - lo] = data[b + e]
            slots = (high - u(1) - p) // step + u(1)
            if backward:
                last = ub + count - u(1) - k
                for j in range(slots):
                    target[at + j * step] = updates[last - j]
            else:
                for j in range(slots):
                    target[at + j * step] = updates[ub + k + j]
    for e in range(max(lo, stop), hi):
        target[t + e - lo] = data[b + e]


def _slice_scatter_loop(
    data: Any,
    updates: Any,
    out: Any,
    rows: int,
    length: int,
    first: int,
    step: int,
    count: int,
    backward: int,
    stream: int,
) -> None:  # pragma: no cover - compiled
    """SliceScatter along one axis: ``out`` (flat, ``rows`` rows of ``length``) is ``data`` (of
    the same shape) with, in each row ``r``, the element at ``first + k * step`` (``step`` at
    least 1, ``k`` below ``count``) replaced by ``updates[r * count + k]`` (by
    ``updates[r * count + count - 1 - k]`` when ``backward``: a negative step's slice read
    from its lowest element). Each output element is written once, from one source or the
    other. With ``stream`` not 0 the output is put together ``SCATTER_CHUNK_BYTES`` at a time
    in a buffer, whatever its rows, and each piece written by non-temporal stores
    (``_stream_row``)."""
    u = np.uint64
    size = u(length)
    start = u(first)
    pace = u(step)
    slots = u(count)
    if not stream:
        for r in range(u(rows)):
            b = r * size
            _scatter_part(
                data, updates, out, b, b, r * slots, u(0), size, start, pace, slots, backward
            )
        return
    chunk = u(SCATTER_CHUNK_BYTES) // _width(out)
    buffer = np.empty(chunk, out.dtype)
    total = u(rows) * size
    o = u(0)
    while o < total:
        end = min(total, o + chunk)
        at = o
        while at < end:
            row = at // size
            row_start = row * size
            hi = min(size, end - row_start)
            _scatter_part(
                data, updates, buffer, at - o, row_start, row * slots, at - row_start, hi, start,
                pace, slots, backward,
            )  # fmt: skip
            at = row_start + hi
        _stream_row(buffer, out, u(0), o, end - o, 1)
        o = end
    _fence()


def _transpose_loop(
    source: Any,
    out: Any,
    batch: int,
    rows: int,
    columns: int,
    tall: int,
    wide: int,
    columns_first: int,
    lines: int,
) -> None:  # pragma: no cover - compiled
    """A batch of 2-D transposes: ``source`` (batch, rows, columns) into ``out`` (batch,
    columns, rows), both flat and C-ordered. With ``lines`` set, in tiles of one cache line a
    side (``_line_tiles``); else in tiles of ``tall`` x ``wide`` elements (multiples of the
    block's side), the tiles down a strip of columns one after another. Inside a tile, square
    blocks of one vector register's elements a side (``_transpose_block``: 16 x 16 bytes, 8 x 8
    elements of 2 or 4 bytes, 4 x 4 of 8) are read as whole rows, transposed in the registers
    and written as whole rows, a row of blocks after another, or a column of blocks after
    another (``columns_first``: each target line is then written whole before the next); the
    rows and columns past the last whole block move an element at a time."""
    if lines:
        _line_tiles(source, out, batch, rows, columns)
        return
    u = np.uint64
    side = _block_side(out)
    height = u(rows)
    width = u(columns)
    plane = height * width
    covered_rows = height - height % side  # the rows and columns that whole blocks cover
    covered_columns = width - width % side
    for b in range(u(batch)):
        base = b * plane
        for left in range(u(0), covered_columns, u(wide)):
            right = min(left + u(wide), covered_columns)
            for top in range(u(0), covered_rows, u(tall)):
                bottom = min(top + u(tall), covered_rows)
                if columns_first:
                    for c in range(left, right, side):
                        for r in range(top, bottom, side):
                            _transpose_block(
                                source, base + r * width + c, width, out, base + c * height + r,
                                height,
                            )  # fmt: skip
                    continue
                for r in range(top, bottom, side):
                    for c in range(left, right, side):
                        _transpose_block(
                            source, base + r * width + c, width, out, base + c * height + r, height
                        )
        for r in range(height):
            for c in range(covered_columns, width):
                out[base + c * height + r] = source[base + r * width + c]
        for r in range(covered_rows, height):
            for c in range(covered_columns):
                out[base + c * height + r] = source[base + r * width + c]


@intrinsic  # type: ignore[untyped-decorator]
def _as_single(typingctx: Any, bits: Any) -> Any:
    """The float32 whose bits are the low 32 of ``bits`` (uint64)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

    return types.float32(bits), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _as_double(typingctx: Any, bits: Any) -> Any:
    """The float64 whose bits are ``bits`` (uint64)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(bits), codegen


#: How many tiles on along a band ``_line_tiles`` asks for the source lines of. Measured on
#: 64 MiB 2-D transposes (thread time, one process, against ``np.copyto`` of 64 MiB, 10.7-11.2
#: ms): int8 8192 x 8192 13.0-13.5 ms without, 10.4-10.6 ms one, two or eight tiles on;
#: float32 4096 x 4096 9.5 ms without, 8.6-9.0 ms one to four tiles on.
_PREFETCH_TILES = 2


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _line_tiles(
    source: Any, out: Any, batch: int, rows: int, columns: int
) -> None:  # pragma: no cover - compiled
    """``_transpose_loop`` in square tiles of one cache line's elements a side (16 x 16 of 4
    bytes, 64 x 64 of 1), along each band of a line's worth of source rows: a tile's source
    rows are read as whole lines (``_transpose_lines``), transposed into a buffer of the tile,
    whose rows, each a whole line of the target, are written by non-temporal stores
    (``_stream_line``), where the target's rows start at the same place in a line (their
    length a multiple of 64 bytes; the bands start where a target row's line does); else by
    regular stores. Every line is read and written whole in one go, so the matrix's side, a
    power of two (a multiple of 4 KiB apart, rows in one cache set) costs nothing more. The
    source lines of the tile ``_PREFETCH_TILES`` on along the band are asked for
    (``_prefetch``) before a tile is read: a band has a line's worth of rows (64 in int8), more
    streams than the hardware prefetcher follows. The rows above the
    first band and below the last and the columns past the last whole tile go through the same
    buffer an element at a time."""
    u = np.uint64
    width = _width(out)
    line = u(64) // width
    side = _block_side(out)
    height = u(rows)
    length = u(columns)
    plane = height * length
    tile = np.empty(line * line, out.dtype)
    stream = (height * width) % u(64) == u(0)
    for b in range(u(batch)):
        base = b * plane
        first = u(0)
        address = _address(out, base)
        aligned = stream and address % width == u(0)
        if aligned:
            first = min(((u(64) - address % u(64)) % u(64)) // width, height)
        last = first + (height - first) // line * line
        whole = length // line * line
        for top in range(first, last, line):
            for left in range(u(0), whole, line):
                ahead = left + u(_PREFETCH_TILES) * line
                if ahead < whole:
                    for r in range(line):
                        _prefetch(source, base + (top + r) * length + ahead)
                for r in range(u(0), line, side):
                    _transpose_lines(
                        source, base + (top + r) * length + left, length, tile, r, line
                    )
                for c in range(line):
                    o = base + (left + c) * height + top
                    if aligned:
                        _stream_line(tile, c * line, out, o, 1)
                    else:
                        for r in range(line):
                            out[o + r] = tile[c * line + r]
            if whole < length:
                _part_tile(source, out, tile, base, top, whole, line, length - whole, height,
                           length, line, aligned)  # fmt: skip
        for left in range(u(0), length, line):
            count = min(line, length - left)
            if first > u(0):
                _part_tile(source, out, tile, base, u(0), left, first, count, height, length,
                           line, False)  # fmt: skip
            if last < height:
                _part_tile(source, out, tile, base, last, left, height - last, count, height,
                           length, line, False)  # fmt: skip
    if stream:
        _fence()


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _part_tile(
    source: Any,
    out: Any,
    tile: Any,
    base: Any,
    top: Any,
    left: Any,
    tall: Any,
    wide: Any,
    height: Any,
    length: Any,
    line: Any,
    aligned: bool,
) -> None:  # pragma: no cover - compiled
    """``_line_tiles``'s tile of ``tall`` x ``wide`` elements (at most a line's worth each way)
    from row ``top`` and column ``left`` on, moved an element at a time into ``tile``; its rows
    written by non-temporal stores when they are whole aligned lines, else by regular stores."""
    for r in range(tall):
        for c in range(wide):
            tile[c * line + r] = source[base + (top + r) * length + left + c]
    for c in range(wide):
        o = base + (left + c) * height + top
        if aligned and tall == line:
            _stream_line(tile, c * line, out, o, 1)
        else:
            for r in range(tall):
                out[o + r] = tile[c * line + r]


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _whole_float(raw: Any, mask: Any, fraction: int, bias: int) -> Any:  # pragma: no cover
    """The value (uint64) of the float whose bits are ``raw`` (``fraction`` mantissa bits,
    exponent ``bias``; ``mask`` keeps all but its sign), right for every whole number below
    2**(63 - fraction) and either zero, without a branch: the mantissa with its leading 1,
    shifted right by what the exponent lacks of ``fraction`` (a zero's or a subnormal's exponent
    shifts every bit out), or left by what it has past it. Other values give some number, which
    the caller clips."""
    u = np.uint64
    magnitude = u(raw) & mask
    exponent = np.int64(magnitude >> u(fraction)) - bias
    whole = (magnitude & ((u(1) << u(fraction)) - u(1))) | (u(1) << u(fraction))
    shift = min(max(np.int64(fraction) - exponent, np.int64(0)), np.int64(63))
    # Past 2**(fraction + 1) the mantissa moves up (bfloat16's 258, float16's 4096).
    up = min(max(exponent - np.int64(fraction), np.int64(0)), np.int64(63 - fraction))
    return (whole >> u(shift)) << u(up)


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _float_beam(raw: Any, single: Any, top: Any) -> Any:  # pragma: no cover - compiled
    """The value (uint64) of the float32 (``single``) or float64 whose bits are ``raw``, by the
    FPU, clipped into [0, ``top``] first (a NaN to 0), so that the conversion is defined for any
    bits."""
    real = _as_single(raw) if single else _as_double(raw)
    real = real if real > 0.0 else 0.0
    return np.uint64(real if real < top else top)


def _masked_call(builder: Any, name: str, kind: Any, arguments: list[Any]) -> Any:
    """A call of ``llvm.masked.load`` or ``llvm.masked.store`` (``name``) on vectors of
    ``kind``: lanes whose mask is off are neither read nor written."""
    word = ir.IntType(32)
    flags = ir.VectorType(ir.IntType(1), kind.count)
    suffix = f"v{kind.count}i{kind.element.width}.p0v{kind.count}i{kind.element.width}"
    if name == "load":
        function_type = ir.FunctionType(kind, [kind.as_pointer(), word, flags, kind])
    else:
        function_type = ir.FunctionType(ir.VoidType(), [kind, kind.as_pointer(), word, flags])
    function = cgutils.get_or_insert_function(
        builder.module, function_type, f"llvm.masked.{name}.{suffix}"
    )
    return builder.call(function, arguments)


def _beam_values(builder: Any, ids: Any, reading: int, highest: Any, top: Any, bits: int) -> Any:
    """The beams (a vector of ``bits``-bit integers) that the parent ids ``ids`` (a vector of
    their raw bits) name, clipped into [0, ``highest``] whatever the bits: an integer id's bits
    as they are (``reading`` 0); a float's value (1: of the ids' own width, half, single or
    double; 2: bfloat16) by the FPU, clipped into [0, ``top``] first (a NaN to 0) so that the
    conversion is defined."""
    lanes = ids.type.count
    id_bits = ids.type.element.width
    if (reading == 0 or id_bits == 8) and bits == id_bits:
        # Beams of the ids' own width (a permute's: ``highest`` fits it): clipped in it.
        limit = _splat(builder, ids.type, builder.trunc(highest, ids.type.element)
                       if id_bits < 64 else highest)  # fmt: skip
        return builder.select(builder.icmp_unsigned("<", ids, limit), ids, limit)
    if reading == 0 or id_bits == 8:
        wide_bits = max(32, id_bits)
        wide = ir.VectorType(ir.IntType(wide_bits), lanes)
        values = builder.zext(ids, wide) if id_bits < wide_bits else ids
        limit = _splat(builder, wide, builder.trunc(highest, wide.element)
                       if wide_bits < 64 else highest)  # fmt: skip
        values = builder.select(builder.icmp_unsigned("<", values, limit), values, limit)
    else:
        if reading == 2 and id_bits == 16:  # bfloat16: the high half of a float32
            words = builder.zext(ids, ir.VectorType(ir.IntType(32), lanes))
            shifted = builder.shl(words, ir.Constant(words.type, [16] * lanes))
            real = builder.bitcast(shifted, ir.VectorType(ir.FloatType(), lanes))
        elif id_bits == 16:
            # A float16 as the float32 of its bits (exponent rebiased by 112, mantissa moved up
            # 13): exact for every normal number; a zero reads 2**-15, a subnormal or an
            # infinity some value, all clipped below. Not LLVM's fpext of halves: without F16C
            # (the image's generic build) that is a call of a runtime function numba lacks.
            words = builder.zext(ids, ir.VectorType(ir.IntType(32), lanes))

            def constant(value: int) -> Any:
                return ir.Constant(words.type, [value] * lanes)

            magnitude = builder.and_(words, constant(0x7FFF))
            moved = builder.shl(builder.add(magnitude, constant(112 << 10)), constant(13))
            sign = builder.shl(builder.and_(words, constant(0x8000)), constant(16))
            real = builder.bitcast(builder.or_(moved, sign), ir.VectorType(ir.FloatType(), lanes))
        elif id_bits == 32:
            real = builder.bitcast(ids, ir.VectorType(ir.FloatType(), lanes))
        else:
            real = builder.bitcast(ids, ir.VectorType(ir.DoubleType(), lanes))
        element = real.type.element
        ceiling = top if isinstance(element, ir.DoubleType) else builder.fptrunc(top, element)
        zeros = ir.Constant(real.type, [0.0] * lanes)
        real = builder.select(builder.fcmp_ordered(">", real, zeros), real, zeros)
        limit = _splat(builder, real.type, ceiling)
        real = builder.select(builder.fcmp_ordered("<", real, limit), real, limit)
        values = builder.fptoui(real, ir.VectorType(ir.IntType(bits), lanes))
    width = values.type.element.width
    target = ir.VectorType(ir.IntType(bits), lanes)
    if width > bits:
        return builder.trunc(values, target)
    return builder.zext(values, target) if width < bits else values


#: The ids of one 64-byte line (uint64), a constant of the compiled code.
_line_width = _element_constant(lambda bits: 512 // bits)


def _permuted(builder: Any, low: Any, indices: Any, high: Any) -> Any:
    """``(low ++ high)[indices]`` (each index below twice the lanes): one ``vpermi2`` where
    ``SMALL_TABLES`` says it is compiled, else a lane at a time."""
    kind = low.type
    lanes = kind.count
    if SMALL_TABLES:
        name = {8: "qi", 16: "hi", 32: "d", 64: "q"}[kind.element.width]
        function_type = ir.FunctionType(kind, [kind, kind, kind])
        function = cgutils.get_or_insert_function(
            builder.module, function_type, f"llvm.x86.avx512.vpermi2var.{name}.512"
        )
        return builder.call(function, [low, indices, high])
    word = ir.IntType(32)
    result = ir.Constant(kind, ir.Undefined)
    for lane in range(lanes):
        index = builder.zext(builder.extract_element(indices, word(lane)), ir.IntType(64))
        index = builder.and_(index, ir.IntType(64)(2 * lanes - 1))
        inside = builder.trunc(builder.and_(index, ir.IntType(64)(lanes - 1)), word)
        value = builder.select(
            builder.icmp_unsigned("<", index, ir.IntType(64)(lanes)),
            builder.extract_element(low, inside),
            builder.extract_element(high, inside),
        )
        result = builder.insert_element(result, value, word(lane))
    return result


def _state_line(builder: Any, state: Any, word: Any, kind: Any) -> Any:
    """A pointer to ``kind`` (a vector) at ``state``'s word ``word``."""
    return builder.bitcast(builder.gep(state, [word]), kind.as_pointer())


def _piece_tables(builder: Any, source: Any, piece: Any, width: Any, line: Any) -> list[Any]:
    """A batch's piece of a step (``width`` ids of ``source`` from ``piece`` on, at most two
    lines) as two vectors of a line each, the lanes past it 0 and not read."""
    long = ir.IntType(64)
    lanes = line.count
    order = ir.Constant(line, list(range(lanes)))
    halves = []
    for half in range(2):
        left = builder.sub(width, long(half * lanes))
        left = builder.select(builder.icmp_signed(">", left, long(0)), left, long(0))
        left = builder.select(builder.icmp_signed("<", left, long(lanes)), left, long(lanes))
        mask = builder.icmp_unsigned(
            "<", order, _splat(builder, line, builder.trunc(left, line.element))
        )
        place = builder.gep(source, [builder.add(piece, long(half * lanes))])
        pointer = builder.bitcast(place, line.as_pointer())
        zeros = ir.Constant(line, [0] * lanes)
        halves.append(_masked_call(builder, "load", line,
                                   [pointer, ir.IntType(32)(1), mask, zeros]))  # fmt: skip
    return halves


def _ended(builder: Any, values: Any, finished: Any, f: Any, end: Any, alt: Any) -> Any:
    """``values`` with end_token (``end``) wherever the beam has ended (the bytes of
    ``finished`` from ``f`` on, a lane each), and those bytes set where a value is end_token
    (``end`` or ``alt``, its other zero)."""
    lanes = values.type.count
    flags = ir.VectorType(ir.IntType(8), lanes)
    pointer = builder.bitcast(builder.gep(finished, [f]), flags.as_pointer())
    before = builder.icmp_unsigned("!=", builder.load(pointer, align=1),
                                   ir.Constant(flags, [0] * lanes))  # fmt: skip
    ends = _splat(builder, values.type, end)
    hit = builder.or_(
        builder.icmp_unsigned("==", values, ends),
        builder.icmp_unsigned("==", values, _splat(builder, values.type, alt)),
    )
    builder.store(builder.zext(builder.or_(before, hit), flags), pointer, align=1)
    return builder.select(before, ends, values)


def _array_data(context: Any, builder: Any, signature: Any, args: Any, position: int) -> Any:
    return context.make_array(signature.args[position])(context, builder, args[position]).data


def _gathered_ids(builder: Any, source: Any, piece: Any, state: Any, s: Any, bits: int) -> Any:
    """The ids of ``bits`` at ``source[piece + beam]`` for the vector of uint32 beams in
    ``state``'s words from ``s`` on (``_gather_lane_count`` of them): one vector gather, ids of 1
    and 2 bytes read as 32-bit words at their address and cut to their width."""
    lanes = _gather_lane_count(bits)
    word_bits = max(32, bits)
    index_type = ir.VectorType(ir.IntType(32), lanes)
    indices = builder.load(_state_line(builder, state, s, index_type), align=4)
    got = _gathered(builder, builder.gep(source, [piece]), indices, ir.IntType(word_bits), lanes, 1)
    return builder.trunc(got, ir.VectorType(ir.IntType(bits), lanes)) if bits < word_bits else got


def _looked_up(builder: Any, tables: list[Any], state: Any, s: Any, half: int) -> Any:
    """Line ``half`` of a batch's beams (ids of the tables' width in ``state``'s words from ``s``
    + 16 * ``half`` on) and the ids at them in its piece (``tables``, ``_piece_tables``): where
    the beams are, and the ids, by one permute."""
    line = tables[0].type
    at = _state_line(builder, state, builder.add(s, ir.IntType(64)(16 * half)), line)
    return at, _permuted(builder, tables[0], builder.load(at, align=4), tables[1])


def _each_half(builder: Any, width: Any, lanes: int, body: Callable[[int], None]) -> None:
    """``body`` for the first line of a batch's ``width`` beams, then for the second when there
    are beams in it."""
    body(0)
    with builder.if_then(builder.icmp_signed(">", width, ir.IntType(64)(lanes))):
        body(1)


@intrinsic  # type: ignore[untyped-decorator]
def _follow_gather(
    typingctx: Any,
    parents: Any,
    piece: Any,
    state: Any,
    s: Any,
    s_next: Any,
    highest: Any,
    top: Any,
    reading: Any,
) -> Any:
    """The walk down, a vector of beams (``_gather_width``: 16, 8 for 8-byte ids) at a time:
    ``state[s_next + i]`` (uint32) set to the beam ``parents[piece + state[s + i]]`` names
    (``_beam_values``; ``reading`` a literal), by one vector gather. Ids of 1 and 2 bytes are
    gathered as 32-bit words at their address: the caller keeps the last word inside
    ``parents``."""
    if not isinstance(reading, types.IntegerLiteral):
        return None
    bits = parents.dtype.bitwidth
    lanes = _gather_lane_count(bits)
    mode = reading.literal_value

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        parents_data = _array_data(context, builder, signature, args, 0)
        state_data = _array_data(context, builder, signature, args, 2)
        got = _gathered_ids(builder, parents_data, args[1], state_data, args[3], bits)
        beams = _beam_values(builder, got, mode, args[5], args[6], 32)
        index_type = ir.VectorType(ir.IntType(32), lanes)
        builder.store(beams, _state_line(builder, state_data, args[4], index_type), align=4)
        return context.get_dummy_value()

    return types.void(parents, piece, state, s, s_next, highest, top, reading), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _follow_permute(
    typingctx: Any,
    parents: Any,
    piece: Any,
    width: Any,
    state: Any,
    s: Any,
    s_next: Any,
    highest: Any,
    top: Any,
    reading: Any,
) -> Any:
    """The walk down of a whole batch whose ``width`` beams are at most two 64-byte lines of
    ids: its piece of the step loaded as a table of two lines, each line of beams (ids of the
    steps' width in ``state``'s words from ``s`` on, 16 words a line) looked up in it by one
    permute, and the beams the parent ids name (``_beam_values``) stored from word ``s_next``
    on (the second line only when there are beams in it)."""
    if not isinstance(reading, types.IntegerLiteral):
        return None
    bits = parents.dtype.bitwidth
    lanes = 512 // bits
    mode = reading.literal_value

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        parents_data = _array_data(context, builder, signature, args, 0)
        state_data = _array_data(context, builder, signature, args, 3)
        line = ir.VectorType(ir.IntType(bits), lanes)
        tables = _piece_tables(builder, parents_data, args[1], args[2], line)

        def follow(half: int) -> None:
            _, named = _looked_up(builder, tables, state_data, args[4], half)
            beams = _beam_values(builder, named, mode, args[6], args[7], bits)
            word = builder.add(args[5], ir.IntType(64)(16 * half))
            builder.store(beams, _state_line(builder, state_data, word, line), align=4)

        _each_half(builder, args[2], lanes, follow)
        return context.get_dummy_value()

    return types.void(parents, piece, width, state, s, s_next, highest, top, reading), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _take_gather(
    typingctx: Any,
    steps: Any,
    piece: Any,
    state: Any,
    s: Any,
    finished: Any,
    f: Any,
    buffer: Any,
    r: Any,
    end: Any,
    alt: Any,
) -> Any:
    """The walk up, a vector of beams at a time: ``buffer[r + i]`` set to
    ``steps[piece + state[s + i]]`` (one vector gather), or to end_token where the beam has
    ended (``_ended``, its flags in ``finished`` from ``f`` on)."""
    bits = steps.dtype.bitwidth

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        steps_data = _array_data(context, builder, signature, args, 0)
        state_data = _array_data(context, builder, signature, args, 2)
        finished_data = _array_data(context, builder, signature, args, 4)
        buffer_data = _array_data(context, builder, signature, args, 6)
        got = _gathered_ids(builder, steps_data, args[1], state_data, args[3], bits)
        values = _ended(builder, got, finished_data, args[5], args[8], args[9])
        place = builder.bitcast(builder.gep(buffer_data, [args[7]]), got.type.as_pointer())
        builder.store(values, place, align=1)
        return context.get_dummy_value()

    return types.void(steps, piece, state, s, finished, f, buffer, r, end, alt), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _take_permute(
    typingctx: Any,
    steps: Any,
    piece: Any,
    width: Any,
    state: Any,
    s: Any,
    finished: Any,
    f: Any,
    buffer: Any,
    r: Any,
    end: Any,
    alt: Any,
) -> Any:
    """The walk up of a whole batch of at most two lines of ids (``_follow_permute``'s
    layout): ``buffer[r + i]`` set to ``steps[piece + beam[i]]`` by a permute of the piece, or
    to end_token where the beam has ended (``_ended``: a line of flags a line of beams, from
    ``finished[f]`` on). A line is stored whole: the lanes past the batch land where the next
    batch's values go (written after) or in the buffer's spare end."""
    bits = steps.dtype.bitwidth
    lanes = 512 // bits

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        steps_data = _array_data(context, builder, signature, args, 0)
        state_data = _array_data(context, builder, signature, args, 3)
        finished_data = _array_data(context, builder, signature, args, 5)
        buffer_data = _array_data(context, builder, signature, args, 7)
        long = ir.IntType(64)
        line = ir.VectorType(ir.IntType(bits), lanes)
        tables = _piece_tables(builder, steps_data, args[1], args[2], line)

        def take(half: int) -> None:
            _, got = _looked_up(builder, tables, state_data, args[4], half)
            flags = builder.add(args[6], long(half * lanes))
            values = _ended(builder, got, finished_data, flags, args[9], args[10])
            place = builder.gep(buffer_data, [builder.add(args[8], long(half * lanes))])
            builder.store(values, builder.bitcast(place, line.as_pointer()), align=1)

        _each_half(builder, args[2], lanes, take)
        return context.get_dummy_value()

    return types.void(steps, piece, width, state, s, finished, f, buffer, r, end, alt), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _beams_start(typingctx: Any, steps: Any, width: Any, state: Any, s: Any) -> Any:
    """``_follow_permute``'s beams of a batch at their start: the line of ids of the steps'
    width in ``state``'s words from ``s`` on (and the next when there are beams in it) set to
    0, 1, 2 and on."""
    bits = steps.dtype.bitwidth
    lanes = 512 // bits

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        state_data = _array_data(context, builder, signature, args, 2)
        line = ir.VectorType(ir.IntType(bits), lanes)

        def start(half: int) -> None:
            word = builder.add(args[3], ir.IntType(64)(16 * half))
            first = half * lanes
            builder.store(ir.Constant(line, [first + i for i in range(lanes)]),
                          _state_line(builder, state_data, word, line), align=4)  # fmt: skip

        _each_half(builder, args[1], lanes, start)
        return context.get_dummy_value()

    return types.void(steps, width, state, s), codegen


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _parent_beam(
    raw: Any,
    kind: int,
    itemsize: int,
    highest: Any,
    top: Any,
    magnitude_mask: Any,
    fraction: int,
    bias: int,
) -> Any:  # pragma: no cover - compiled
    """The beam (uint64, in [0, ``highest``]) a parent id of bits ``raw`` (``itemsize`` bytes)
    names, a beam at a time. An id the walk reads is an integer in [0, BEAM_WIDTH) (checked);
    clipped all the same: an integer's bits (as unsigned, a negative is large), a float32 or
    float64 by the FPU (``_float_beam``), a float16 or bfloat16 by its mantissa shifted by its
    exponent (``_whole_float``: a zero's exponent shifts every bit out)."""
    u = np.uint64
    if kind < 2:
        return min(u(raw), highest)
    if itemsize >= 4:
        return _float_beam(u(raw), itemsize == 4, top)
    return min(_whole_float(raw, magnitude_mask, fraction, bias), highest)


def _gather_tree_loop(  # noqa: PLR0915 - the two walks and the one-pass walk, one loop
    steps: Any,
    parents: Any,
    out: Any,
    lengths: Any,
    state: Any,
    ends: Any,
    max_time: int,
    batch_size: int,
    beam_width: int,
    block: int,
    kind: int,
    fraction: int,
    bias: int,
    stream: int,
    seen: Any,
) -> Any:  # pragma: no cover - compiled
    """GatherTree-1. ``steps``, ``parents`` and ``out`` are the flat (max_time, batch_size,
    beam_width) raw ids (one type T); a parent id's value is its bits read as ``kind`` says (0
    and 1, an integer: its bits; 2, a float of ``fraction`` mantissa bits and exponent
    ``bias``). Where the walk reads, the checks have let through only integers in
    [0, BEAM_WIDTH); whatever else is clipped into the batch's beams. ``lengths`` holds each
    batch's decoded steps. A step at or past a batch's length is ``ends[0]`` (end_token's bits);
    every value past a beam's first end_token (bits ``ends[0]`` or ``ends[1]``, its other zero)
    becomes ``ends[0]``.

    ``seen`` not empty (a 64-byte line of T's bits): the walks check the ids as they read them,
    not the plan (one read of each input, not two), and the loop says what it saw; empty, it
    returns 0. 1: a float id of either input is no integer; else 0, ``seen[0]`` the largest
    bits of the parent ids past the first step; -1: nothing was checked (the one-pass walk).

    Batches are walked a block at a time, in two walks, each reading one input once. Down:
    from each batch's last decoded step, where each beam is at every step (``state``, uint32
    words, all of the block's steps: ``_follow_gather``/``_follow_permute``). Up: each step's
    ids taken where the beams are, end_token once a beam has ended (``_take_gather``/
    ``_take_permute``), into a buffer of the block's row, then written out (``stream``: by
    non-temporal stores, a large output's lines not read first). A batch's beams are a vector
    at a time: by permutes of its piece of the step when that is at most two 64-byte lines and
    the CPU has them (``SMALL_TABLES``; the beams then ids of T's width, a line of 16 words
    each), else by vector gathers (uint32 beams; those past the last whole vector one at a
    time). The next step's piece of a batch is prefetched as the batch is walked.

    When even one batch's steps hold more beams than ``state`` (``block`` * max(beam_width, 32)
    words at least: long sequences), the walk is one pass down, a beam at a time, writing the
    output, then one up ending the beams."""
    u = np.uint64
    width = u(beam_width)
    row = u(batch_size) * width
    end = ends[0]
    alt = ends[1]
    highest = u(beam_width - 1)
    top = np.float64(beam_width - 1)
    magnitude_mask = (u(1) << u(8 * steps.itemsize - 1)) - u(1)
    line = _line_width(steps)
    total = u(steps.size)
    permuted = SMALL_TABLES and width <= u(2) * line
    lanes = _gather_width(steps)
    # Ids of 1 and 2 bytes are gathered as 32-bit words: a piece whose last word would reach
    # past the arrays is walked a beam at a time.
    reach = (u(4) + _width(steps) - u(1)) // _width(steps) - u(1)
    whole = width - width % lanes
    # How a parent id's bits are read: 0 an integer, 1 a float of T's width, 2 a bfloat16.
    reading = 0 if kind < 2 else (2 if fraction == 7 else 1)
    words = (u(16) if width <= line else u(32)) if permuted else width
    flags = u(2) * line if permuted else width
    checking = seen.size > 0
    found = u(0)
    if checking:
        for k in range(seen.size):
            seen[k] = 0
    if u(max_time) * words <= u(state.size):
        together = max(u(1), min(u(block), u(state.size) // (u(max_time) * words)))
        finished = np.empty(min(together, u(batch_size)) * flags, np.uint8)
        buffer = np.empty(min(together, u(batch_size)) * width + u(2) * line, steps.dtype)
        for first in range(u(0), u(batch_size), together):
            batches = min(together, u(batch_size) - first)
            base = first * width
            size = batches * width
            per_step = batches * words
            t = max_time - 1
            while t >= 0:
                if checking:
                    # The step's ids of the block, each line read once, in the cache for the
                    # walk's lookups: no integer among them, the largest past the first step.
                    if reading == 0:
                        if t > 0:
                            _row_largest(parents, u(t) * row + base, size, seen)
                    else:
                        found |= _row_scanned(parents, u(t) * row + base, size, fraction, bias,
                                              seen, t > 0)  # fmt: skip
                for j in range(batches):
                    length = lengths[first + j]
                    if t >= length:
                        continue
                    s = u(t) * per_step + j * words
                    if t == length - 1:
                        if permuted:
                            _beams_start(steps, width, state, s)
                        else:
                            for k in range(width):
                                state[s + k] = k
                    if t == 0:
                        continue
                    piece = u(t) * row + base + j * width
                    for offset in range(u(0), width, line):
                        _prefetch(parents, piece - row + offset)
                    if permuted:
                        if reading == 0:
                            _follow_permute(parents, piece, width, state, s, s - per_step,
                                            highest, top, 0)  # fmt: skip
                        elif reading == 1:
                            _follow_permute(parents, piece, width, state, s, s - per_step,
                                            highest, top, 1)  # fmt: skip
                        else:
                            _follow_permute(parents, piece, width, state, s, s - per_step,
                                            highest, top, 2)  # fmt: skip
                        continue
                    vectors = whole if piece + width + reach <= total else u(0)
                    for k in range(u(0), vectors, lanes):
                        if reading == 0:
                            _follow_gather(parents, piece, state, s + k, s + k - per_step,
                                           highest, top, 0)  # fmt: skip
                        elif reading == 1:
                            _follow_gather(parents, piece, state, s + k, s + k - per_step,
                                           highest, top, 1)  # fmt: skip
                        else:
                            _follow_gather(parents, piece, state, s + k, s + k - per_step,
                                           highest, top, 2)  # fmt: skip
                    for k in range(vectors, width):
                        value = _parent_beam(parents[piece + u(state[s + k])], kind, steps.itemsize,
                                             highest, top, magnitude_mask, fraction,
                                             bias)  # fmt: skip
                        state[s + k - per_step] = value
                t -= 1
            for k in range(batches * flags):
                finished[k] = 0
            for step in range(u(max_time)):
                at = step * row + base
                if checking and reading != 0:
                    found |= _row_scanned(steps, at, size, fraction, bias, seen, False)
                for j in range(batches):
                    r = j * width
                    if step >= u(lengths[first + j]):
                        for k in range(width):
                            buffer[r + k] = end
                        continue
                    piece = at + r
                    if step + u(1) < u(max_time):
                        for offset in range(u(0), width, line):
                            _prefetch(steps, piece + row + offset)
                    s = step * per_step + j * words
                    if permuted:
                        _take_permute(steps, piece, width, state, s, finished, j * flags, buffer,
                                      r, end, alt)  # fmt: skip
                        continue
                    vectors = whole if piece + width + reach <= total else u(0)
                    for k in range(u(0), vectors, lanes):
                        _take_gather(steps, piece, state, s + k, finished, r + k, buffer, r + k,
                                     end, alt)  # fmt: skip
                    for k in range(vectors, width):
                        value = steps[piece + u(state[s + k])]
                        done = finished[r + k] != 0
                        buffer[r + k] = end if done else value
                        finished[r + k] = done | (value == end) | (value == alt)
                if stream:
                    _stream_row(buffer, out, u(0), at, size, 1)
                else:
                    for k in range(size):
                        out[at + k] = buffer[k]
        if stream:
            _fence()
        if not checking:
            return np.int64(0)
        if reading != 0:
            for k in range(u(1), line):
                seen[0] = max(seen[0], seen[k])
        return np.int64(1) if found != u(0) else np.int64(0)
    # One pass down writing the output, a beam at a time (the beams of ``block`` batches in
    # ``state``), then one up ending the beams.
    ended = np.empty(min(u(block), u(batch_size)) * width, np.bool_)
    for first in range(u(0), u(batch_size), u(block)):
        batches = min(u(block), u(batch_size) - first)
        size = batches * width
        base = first * width
        for k in range(size):
            state[k] = k % width
        t = max_time - 1
        while t >= 0:
            at = u(t) * row + base
            for j in range(batches):
                start = j * width
                piece = at + start
                if t >= lengths[first + j]:
                    for k in range(width):
                        out[piece + k] = end
                    continue
                for k in range(width):
                    at_parent = piece + u(state[start + k])
                    out[piece + k] = steps[at_parent]
                    if t > 0:
                        state[start + k] = _parent_beam(parents[at_parent], kind, steps.itemsize,
                                                        highest, top, magnitude_mask, fraction,
                                                        bias)  # fmt: skip
            t -= 1
        flags_now = ended[:size]
        for k in range(size):
            flags_now[k] = False
        # Without a branch (a beam's end comes at no step the predictor can learn): a value is
        # end_token's bits once its beam has ended, and the beam ends at its first end_token.
        for step in range(u(max_time)):
            at = step * row + base
            for k in range(size):
                value = out[at + k]
                done = flags_now[k]
                out[at + k] = end if done else value
                flags_now[k] = done | ((value == end) | (value == alt))
    return np.int64(-1) if checking else np.int64(0)


@intrinsic  # type: ignore[untyped-decorator]
def _fraction_line(
    typingctx: Any,
    raw: Any,
    i: Any,
    fraction: Any,
    bias: Any,
    largest: Any,
    skip: Any,
    track: Any,
) -> Any:
    """The lanes (a bit each) of the 64-byte line of ``raw`` from ``raw[i]`` on (a float's
    bits: ``fraction`` mantissa bits, exponent ``bias``) whose values are not integers, tested
    in the float's own width (``_first_fraction_loop``'s test: 16 lanes of a float32, not 8);
    and (``track``, a literal: 1 for a line across ``raw[skip]``, 2 for one past it, 0 for none)
    the line of ``largest`` raised, lane by lane, to the bits of those at ``raw[skip]`` or
    later."""
    if not isinstance(track, types.IntegerLiteral):
        return None
    bits = raw.dtype.bitwidth
    lanes = 512 // bits
    tracked = track.literal_value

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        long = ir.IntType(64)
        element = ir.IntType(bits)
        line = ir.VectorType(element, lanes)
        raw_data = _array_data(context, builder, signature, args, 0)
        largest_data = _array_data(context, builder, signature, args, 4)
        values = builder.load(builder.bitcast(builder.gep(raw_data, [args[1]]),
                                              line.as_pointer()), align=1)  # fmt: skip

        def constant(value: int) -> Any:
            return ir.Constant(line, [value] * lanes)

        def splat(value: Any) -> Any:
            return _splat(builder, line, builder.trunc(value, element) if bits < 64 else value)

        magnitude_mask = (1 << (bits - 1)) - 1
        magnitude = builder.and_(values, constant(magnitude_mask))
        mantissa = splat(args[2])
        above = builder.sub(builder.lshr(magnitude, mantissa), splat(args[3]))
        shift = builder.select(builder.icmp_unsigned("<", above, mantissa), above, mantissa)
        mantissa_mask = builder.sub(builder.shl(constant(1), mantissa), constant(1))
        below = builder.and_(magnitude, builder.lshr(mantissa_mask, shift))
        span = builder.sub(builder.lshr(constant(magnitude_mask), mantissa), splat(args[3]))
        zeros = constant(0)
        bad = builder.and_(
            builder.or_(builder.icmp_unsigned(">=", above, span),
                        builder.icmp_unsigned("!=", below, zeros)),
            builder.icmp_unsigned("!=", magnitude, zeros),
        )  # fmt: skip
        kept = values
        if tracked == 1:
            # The lanes at raw[skip] or later: from lane skip - i on.
            first = builder.sub(args[5], args[1])
            first = builder.select(builder.icmp_signed(">", first, long(0)), first, long(0))
            first = builder.select(builder.icmp_signed("<", first, long(lanes)), first,
                                   long(lanes))  # fmt: skip
            order = ir.Constant(line, list(range(lanes)))
            kept = builder.select(builder.icmp_unsigned(">=", order, splat(first)), values, zeros)
        if tracked:
            at = builder.bitcast(largest_data, line.as_pointer())
            before = builder.load(at, align=1)
            raised = builder.select(builder.icmp_unsigned(">", kept, before), kept, before)
            builder.store(raised, at, align=1)
        mask = builder.bitcast(bad, ir.IntType(lanes))
        return mask if lanes == 64 else builder.zext(mask, long)

    return types.uint64(raw, i, fraction, bias, largest, skip, track), codegen


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _no_integer(bits: Any, itemsize: int, fraction: Any, bias: Any) -> Any:  # pragma: no cover
    """Whether the float of bits ``bits`` (``itemsize`` bytes: ``fraction`` mantissa bits,
    exponent ``bias``) is no integer: a fraction, NaN or an infinity. A value other than a zero
    is an integer when its exponent field minus the bias (``above``, unsigned: a value below 1
    wraps past every exponent) is below the infinities' and its mantissa has no bit below the
    point: the mantissa's mask shifted right by ``above``."""
    u = np.uint64
    width = u(8 * itemsize)
    mantissa = u(fraction)
    magnitude_mask = (u(1) << (width - u(1))) - u(1)
    magnitude = u(bits) & magnitude_mask
    above = (magnitude >> mantissa) - u(bias)
    below = magnitude & (((u(1) << mantissa) - u(1)) >> min(above, mantissa))
    span = (magnitude_mask >> mantissa) - u(bias)
    return magnitude != u(0) and ((above >= span) | (below != u(0)))


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _row_scanned(
    raw: Any, start: Any, size: Any, fraction: Any, bias: Any, seen: Any, tracked: bool
) -> Any:  # pragma: no cover - compiled
    """Whether a value of ``raw[start:start + size]`` (a float's bits) is no integer (not 0:
    the lanes of the lines that hold one), a 64-byte line at a time (``_fraction_line``), the
    tail a value at a time; ``tracked``: ``seen``'s line raised, lane by lane, to their
    bits."""
    u = np.uint64
    line = _line_width(raw)
    stop = start + size
    found = u(0)
    i = start
    if tracked:
        while i + line <= stop:
            found |= _fraction_line(raw, i, fraction, bias, seen, i, 2)
            i += line
    else:
        while i + line <= stop:
            found |= _fraction_line(raw, i, fraction, bias, seen, i, 0)
            i += line
    for k in range(i, stop):
        if _no_integer(raw[k], raw.itemsize, fraction, bias):
            found = u(1)
        if tracked and raw[k] > seen[0]:
            seen[0] = raw[k]
    return found


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _row_largest(raw: Any, start: Any, size: Any, seen: Any) -> None:  # pragma: no cover
    """``seen[0]`` raised to the largest bits of ``raw[start:start + size]`` (integer ids)."""
    largest = seen[0]
    for k in range(start, start + size):
        largest = max(largest, raw[k])
    seen[0] = largest


def _first_fraction_loop(
    raw: Any, fraction: Any, bias: Any, skip: Any, largest: Any
) -> Any:  # pragma: no cover - compiled
    """The position of the first value of ``raw`` (a float's bits: ``fraction`` mantissa bits,
    exponent ``bias``) that is not an integer (a fraction, NaN or an infinity), or -1; and,
    when there is none, ``largest[0]`` set to the largest bits of ``raw[skip:]`` (0 if none;
    ``largest`` holds a 64-byte line of them). Read a line at a time (``_fraction_line``), in
    chunks, the first found only in a chunk that has one (``_no_integer``'s test)."""
    u = np.uint64
    total = u(raw.size)
    line = _line_width(raw)
    whole = total - total % line
    for k in range(line):
        largest[k] = 0
    chunk = u(4096)
    for start in range(u(0), total, chunk):
        stop = min(total, start + chunk)
        lines = max(start, min(stop, whole))
        found = u(0)
        for i in range(start, lines, line):
            if i >= u(skip):
                found |= _fraction_line(raw, i, fraction, bias, largest, skip, 2)
            elif i + line <= u(skip):
                found |= _fraction_line(raw, i, fraction, bias, largest, skip, 0)
            else:
                found |= _fraction_line(raw, i, fraction, bias, largest, skip, 1)
        for i in range(lines, stop):
            if _no_integer(raw[i], raw.itemsize, fraction, bias):
                found = u(1)
            if i >= u(skip) and raw[i] > largest[0]:
                largest[0] = raw[i]
        if found:
            for i in range(start, stop):
                if _no_integer(raw[i], raw.itemsize, fraction, bias):
                    return np.int64(i)
    for k in range(u(1), line):
        largest[0] = max(largest[0], largest[k])
    return np.int64(-1)


# ---------------------------------------------------------------------------------------------
# Signatures

_I64 = types.int64
_WIDTHS = (types.uint8, types.uint16, types.uint32, types.uint64)
_INDEX_TYPES = (types.int32, types.int64)


# Arrays are typed unaligned: an aligned one matches too, and a tensor read from a body at an odd
# offset (V2's binary tensors) goes through as it is. x86 loads and stores either at one speed.
def _readonly(element: Any) -> Any:
    return types.Array(element, 1, "C", readonly=True, aligned=False)


def _mutable(element: Any) -> Any:
    return types.Array(element, 1, "C", aligned=False)


#: take(source, indices, out, batches, outer, length, count, wrap, line) -> outside: single
#: elements of each width; int32 or int64 indices (narrower ones are widened first).
take = _compiled(
    _take_loop,
    [
        _I64(_readonly(width), _readonly(index), _mutable(width), *[_I64] * 6)
        for width in _WIDTHS
        for index in _INDEX_TYPES
    ],
)

#: take_slices(source, indices, out, batches, outer, length, count, inner, wrap): slices as
#: bytes or 8-byte words.
take_slices = _compiled(
    _take_slices_loop,
    [
        types.void(_readonly(unit), _readonly(index), _mutable(unit), *[_I64] * 6)
        for unit in (types.uint8, types.uint64)
        for index in _INDEX_TYPES
    ],
)

#: roll(source, out, table, row, split): bytes, or 8-byte words.
roll_rows = _compiled(
    _roll_loop,
    [
        types.void(_readonly(width), _mutable(width), _readonly(_I64), _I64, _I64)
        for width in (types.uint8, types.uint64)
    ],
)


#: strided_copy(source, out, table, source_start, out_start, run, step, out_step, lane_step,
#: stream): each width.
strided_copy = _compiled(
    _strided_copy_loop,
    [
        types.void(_readonly(width), _mutable(width), _readonly(_I64), *[_I64] * 7)
        # complex128: 16-byte units, only loaded and stored (``raw.copy_permuted``'s widest).
        for width in (*_WIDTHS, types.complex128)
    ],
)

#: pad_rows(source, out, table, segments, source_start, out_start, stream): each width.
pad_rows = _compiled(
    _pad_rows_loop,
    [
        types.void(_readonly(width), _mutable(width), _readonly(_I64), _readonly(_I64), *[_I64] * 3)
        for width in _WIDTHS
    ],
)

#: slice_scatter(data, updates, out, rows, length, first, step, count, backward, stream): each
#: width (the elements, or the runs of elements after the sliced axis, as one unit).
slice_scatter = _compiled(
    _slice_scatter_loop,
    [
        types.void(_readonly(width), _readonly(width), _mutable(width), *[_I64] * 7)
        for width in _WIDTHS
    ],
)

#: transpose_tiles(source, out, batch, rows, columns, tall, wide, columns_first, lines): each
#: width.
transpose_tiles = _compiled(
    _transpose_loop,
    [types.void(_readonly(width), _mutable(width), *[_I64] * 7) for width in _WIDTHS],
)

#: gather_tree(steps, parents, out, lengths, state, ends, max_time, batch_size, beam_width,
#: block, kind, fraction, bias, stream, seen) -> checked: each width of ids; int64 lengths,
#: uint32 state.
gather_tree = _compiled(
    _gather_tree_loop,
    [
        _I64(
            _readonly(width),
            _readonly(width),
            _mutable(width),
            _readonly(_I64),
            _mutable(types.uint32),
            _readonly(width),
            *[_I64] * 8,
            _mutable(width),
        )
        for width in _WIDTHS
    ],
)

#: first_fraction(raw, fraction, bias, skip, largest): the float widths (2, 4 and 8 bytes).
first_fraction = _compiled(
    _first_fraction_loop,
    [_I64(_readonly(width), _I64, _I64, _I64, _mutable(width)) for width in _WIDTHS[1:]],
)

# ---------------------------------------------------------------------------------------------
# Col2Im's loops: which kernel element first reaches each pixel of an axis, and the blocks
# summed into the image in the kernel's row-major order. Values are handled as their bits
# (uint64 here, whatever the width): a sum of floats is worked out from them, as NumPy and
# ml_dtypes work it out (float16 and bfloat16 through float32, rounded to nearest even). The
# conversions between the half floats and float32 or float64 bits here are the only ones:
# ScatterElementsUpdate's reductions below use them too (``_as_single`` and ``_as_double``, the
# floats of given bits, are defined above, with GatherTree's loop, which reads float ids so).


@intrinsic  # type: ignore[untyped-decorator]
def _bits_of(typingctx: Any, value: Any) -> Any:
    """The bits of a float32 or float64 ``value``, as a uint64."""
    width = value.bitwidth

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        bits = builder.bitcast(args[0], ir.IntType(width))
        return bits if width == 64 else builder.zext(bits, ir.IntType(64))

    return types.uint64(value), codegen


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _half_to_single(half: Any) -> Any:  # pragma: no cover - compiled
    """The float32 bits of the same value as float16 bits ``half`` (exact; a NaN keeps its
    payload, a signalling one stays signalling: NumPy's conversion)."""
    u = np.uint64
    sign = (half & u(0x8000)) << u(16)
    exponent = (half >> u(10)) & u(0x1F)
    mantissa = half & u(0x3FF)
    if exponent == u(0x1F):
        return sign | u(0x7F800000) | (mantissa << u(13))
    if exponent != u(0):
        return sign | ((exponent + u(112)) << u(23)) | (mantissa << u(13))
    # Zero or subnormal: mantissa units of 2**-24, exact in float32.
    return sign | _bits_of(np.float32(mantissa) * np.float32(2.0**-24))


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _double_to_half(double: Any) -> Any:  # pragma: no cover - compiled
    """float64 bits ``double`` rounded once to the nearest float16 (ties to even), as bits:
    from 65520 on an infinity, a NaN the top bits of its payload (1 where they are all zero),
    as NumPy converts float64 to float16."""
    u = np.uint64
    sign = (double >> u(48)) & u(0x8000)
    magnitude = double & u(0x7FFFFFFFFFFFFFFF)
    if magnitude > u(0x7FF0000000000000):
        return sign | u(0x7C00) | max((magnitude >> u(42)) & u(0x3FF), u(1))
    if magnitude >= u(0x40F0000000000000):  # 2**16 and up: past the largest half's rounding
        return sign | u(0x7C00)
    if magnitude >= u(0x3F10000000000000):  # 2**-14 and up: a normal half (or 65520 up: inf)
        half = (magnitude >> u(42)) - u(1008 << 10)
        rest = magnitude & u((1 << 42) - 1)
        if rest > u(1 << 41) or (rest == u(1 << 41) and (half & u(1)) == u(1)):
            half += u(1)
        return sign | half
    # Below: a subnormal half, in units of 2**-24 (exact in float64), rounded to even.
    return sign | u(np.rint(_as_double(magnitude) * 2.0**24))


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _single_to_half(single: Any) -> Any:  # pragma: no cover - compiled
    """float32 bits ``single`` rounded to the nearest float16 as NumPy converts float32 to
    float16: ``_double_to_half`` of the same value (float64 holds every float32 exactly, so
    there is one rounding), a NaN's payload taken from its float32 bits (widening would quiet
    a signalling one)."""
    u = np.uint64
    if (single & u(0x7FFFFFFF)) > u(0x7F800000):
        payload = max((single >> u(13)) & u(0x3FF), u(1))
        return ((single >> u(16)) & u(0x8000)) | u(0x7C00) | payload
    return _double_to_half(_bits_of(np.float64(_as_single(single))))


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _single_to_brain(single: Any) -> Any:  # pragma: no cover - compiled
    """float32 bits ``single`` rounded to the nearest bfloat16 (ties to even), as bits, as
    ml_dtypes converts: a NaN becomes its default NaN with the sign."""
    u = np.uint64
    if (single & u(0x7FFFFFFF)) > u(0x7F800000):
        return ((single >> u(16)) & u(0x8000)) | u(0x7FC0)
    return (single + u(0x7FFF) + ((single >> u(16)) & u(1))) >> u(16)


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _single_sum(a: Any, b: Any, second_nan: bool) -> Any:  # pragma: no cover - compiled
    """The float32 bits of the sum of float32 bits ``a`` and ``b``: where one is a NaN, that
    one quieted; where both are, ``a`` (``b`` if ``second_nan``), as NumPy's loops give them
    (its float32 loops keep the first's, its float16 and ml_dtypes' bfloat16 the second's)."""
    u = np.uint64
    x = _as_single(a)
    y = _as_single(b)
    total = x + y
    if not np.isnan(total):
        return _bits_of(total)
    first_nan = np.isnan(x)
    other_nan = np.isnan(y)
    if first_nan and not (other_nan and second_nan):
        return a | u(0x400000)
    if other_nan:
        return b | u(0x400000)
    return _bits_of(total)  # infinities of opposite signs: the CPU's NaN


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _double_sum(a: Any, b: Any) -> Any:  # pragma: no cover - compiled
    """``_single_sum`` for float64 bits (a NaN quieted; of two, the first's)."""
    u = np.uint64
    x = _as_double(a)
    y = _as_double(b)
    total = x + y
    if not np.isnan(total):
        return _bits_of(total)
    if np.isnan(x):
        return a | u(0x8000000000000)
    if np.isnan(y):
        return b | u(0x8000000000000)
    return _bits_of(total)


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _element_sum(a: Any, b: Any, kind: int, width: Any) -> Any:  # pragma: no cover - compiled
    """The bits of ``a + b`` in the element type (``kind``: 0 an integer, wrapping; 1 bool, an
    or; 2 an IEEE float of ``width`` bytes; 3 bfloat16), from their bits (uint64; the caller
    keeps the low ``width`` bytes). Floats of 2 bytes are summed in float32 and rounded."""
    u = np.uint64
    if kind == 0:
        return a + b
    if kind == 1:
        return u((a | b) != u(0))
    if kind == 3:
        return _single_to_brain(_single_sum(a << u(16), b << u(16), True))
    if width == u(2):
        return _single_to_half(_single_sum(_half_to_single(a), _half_to_single(b), True))
    if width == u(4):
        return _single_sum(a, b, False)
    return _double_sum(a, b)


def _col2im_reach_loop(
    first: Any, size: int, stride: int, dilation: int, pad: int, blocks: int
) -> bool:  # pragma: no cover - compiled
    """Along one axis of ``first.size`` pixels: in ``first`` (filled with ``size`` by the
    caller), the first kernel element (of ``size``) that reaches each pixel, element ``o`` of
    block ``p`` lying at ``o * dilation + p * stride - pad``; whether a pixel is reached twice.

    Every (element, block) pair is tried (``size * blocks``, at most the data's elements), the
    pixel worked out in wrapping uint64: with ``blocks`` from Col2Im's formula the true value
    lies in (-2**63, 2**63 + length), so it is a pixel exactly when its wrapped value is below
    the length, whatever the pads, strides and dilations (no division, no overflow)."""
    u = np.uint64
    length = u(first.size)
    twice = False
    for offset in range(u(size)):
        start = offset * u(dilation) - u(pad)
        for p in range(u(blocks)):
            y = start + p * u(stride)
            if y < length:
                if first[y] < size:
                    twice = True
                else:
                    first[y] = offset
    return twice


def _col2im_loop(
    source: Any, out: Any, row_first: Any, col_first: Any, axes: Any, planes: int, kind: int
) -> None:  # pragma: no cover - compiled
    """Col2Im's sum: ``source`` the blocks (planes, rows' size, columns' size, rows' blocks,
    columns' blocks), ``out`` the images (planes, rows' length, columns' length), ``axes`` the
    size, stride, dilation, pad, blocks and length of the rows, then of the columns. Each
    block's kernel element goes to the pixel it reaches (found as ``_col2im_reach_loop`` finds
    it): its bits where it is the first to (``row_first``, ``col_first``: per pixel row and
    column), else added in the element type (``kind``, as ``_element_sum`` reads it), the
    kernel's elements in row-major order. Pixels nothing reaches are left as they are."""
    u = np.uint64
    width = _width(out)
    size0, stride0, dilation0, pad0 = u(axes[0]), u(axes[1]), u(axes[2]), u(axes[3])
    blocks0, height = u(axes[4]), u(axes[5])
    size1, stride1, dilation1, pad1 = u(axes[6]), u(axes[7]), u(axes[8]), u(axes[9])
    blocks1, wide = u(axes[10]), u(axes[11])
    per_element = blocks0 * blocks1
    element = u(0)  # the block values of (plane, i, j) start here
    for plane in range(u(planes)):
        image = plane * height * wide
        for i in range(size0):
            y_start = i * dilation0 - pad0
            for j in range(size1):
                x_start = j * dilation1 - pad1
                for p in range(blocks0):
                    y = y_start + p * stride0
                    if y >= height:
                        continue
                    row = image + y * wide
                    taken = element + p * blocks1
                    first_row = u(row_first[y]) == i
                    for q in range(blocks1):
                        x = x_start + q * stride1
                        if x >= wide:
                            continue
                        value = u(source[taken + q])
                        if first_row and u(col_first[x]) == j:
                            out[row + x] = value
                        else:
                            out[row + x] = _element_sum(u(out[row + x]), value, kind, width)
                element += per_element


#: col2im_reach(first, size, stride, dilation, pad, blocks): int64 first elements.
col2im_reach = _compiled(_col2im_reach_loop, [types.boolean(_mutable(_I64), *[_I64] * 5)])

#: col2im(source, out, row_first, col_first, axes, planes, kind): each width.
col2im = _compiled(
    _col2im_loop,
    [
        types.void(
            _readonly(width),
            _mutable(width),
            _readonly(_I64),
            _readonly(_I64),
            _readonly(_I64),
            _I64,
            _I64,
        )
        for width in _WIDTHS
    ],
)

# ---------------------------------------------------------------------------------------------
# Unique's loops: its groups counted in a table of one slot a value (elements of one or two
# bytes), or found by a hash table of their keys (wider ones, a bounded number of groups).


@intrinsic  # type: ignore[untyped-decorator]
def _slot_line(typingctx: Any, slots: Any, s: Any, ranks: Any, out: Any) -> Any:
    """``out[s + k] = ranks[slots[s + k]]`` for the 64-byte line of ``out`` from ``out[s]`` on
    (its address a multiple of 64): the slots' one vector load, one vector gather of the
    ranks, one non-temporal store."""
    lanes = 512 // out.dtype.bitwidth
    slot_bits = slots.dtype.bitwidth
    rank_bits = out.dtype.bitwidth

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        slots_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        ranks_data = context.make_array(signature.args[2])(context, builder, args[2]).data
        out_data = context.make_array(signature.args[3])(context, builder, args[3]).data
        loaded = ir.VectorType(ir.IntType(slot_bits), lanes)
        at = builder.bitcast(builder.gep(slots_data, [args[1]]), loaded.as_pointer())
        indices = builder.zext(builder.load(at, align=1), ir.VectorType(ir.IntType(32), lanes))
        got = _gathered(builder, ranks_data, indices, ir.IntType(rank_bits), lanes)
        _streamed(builder, got, builder.gep(out_data, [args[1]]))
        return context.get_dummy_value()

    return types.void(slots, s, ranks, out), codegen


@intrinsic  # type: ignore[untyped-decorator]
def _hash_line(
    typingctx: Any,
    raw: Any,
    s: Any,
    zero_mask: Any,
    top: Any,
    shift: Any,
    table_keys: Any,
    table_ranks: Any,
    counts: Any,
    groups: Any,
    out: Any,
) -> Any:
    """The 64-byte line of ``out`` from ``out[s]`` on (its address a multiple of 64) set to
    its elements' ranks when each key is in its own slot of the table (``_hash_groups_loop``'s;
    ``table_ranks`` -1 where empty), by vector gathers and one non-temporal store, and each
    rank counted in ``counts`` (lane ``k`` in its table ``k % 4`` of ``groups``). A key is the
    raw bits, 0 where the bits and ``zero_mask`` have none in common (a float's -0.0), none
    whose bits and ``zero_mask`` are above ``top`` (a NaN). Returns 0 when it did, else the
    lanes (a bit each) whose element it cannot place: then nothing is written or counted."""
    lanes = 512 // out.dtype.bitwidth
    key_bits = raw.dtype.bitwidth
    rank_bits = out.dtype.bitwidth

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        word = ir.IntType(32)
        long = ir.IntType(64)
        wide = ir.VectorType(long, lanes)

        def splat(value: Any) -> Any:
            return _splat(builder, wide, value)

        raw_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        keys_data = context.make_array(signature.args[5])(context, builder, args[5]).data
        ranks_data = context.make_array(signature.args[6])(context, builder, args[6]).data
        counts_data = context.make_array(signature.args[7])(context, builder, args[7]).data
        out_data = context.make_array(signature.args[9])(context, builder, args[9]).data
        loaded = ir.VectorType(ir.IntType(key_bits), lanes)
        at = builder.bitcast(builder.gep(raw_data, [args[1]]), loaded.as_pointer())
        keys = builder.load(at, align=1)
        if key_bits < 64:
            keys = builder.zext(keys, wide)
        zeros = ir.Constant(wide, [0] * lanes)
        magnitude = builder.and_(keys, splat(args[2]))
        keys = builder.select(builder.icmp_unsigned("==", magnitude, zeros), zeros, keys)
        nan = builder.icmp_unsigned(">", magnitude, splat(args[3]))
        factor = int(_HASH_FACTOR) - (1 << 64)  # as LLVM's signed constant
        hashed = builder.mul(keys, ir.Constant(wide, [factor] * lanes))
        indices = builder.trunc(builder.lshr(hashed, splat(args[4])), ir.VectorType(word, lanes))
        found = _gathered(builder, keys_data, indices, long, lanes)
        ranks = _gathered(builder, ranks_data, indices, ir.IntType(rank_bits), lanes)
        rank_zeros = ir.Constant(ranks.type, [0] * lanes)
        bad = builder.or_(nan, builder.icmp_unsigned("!=", found, keys))
        bad = builder.or_(bad, builder.icmp_signed("<", ranks, rank_zeros))
        left = builder.zext(builder.bitcast(bad, ir.IntType(lanes)), long)
        with builder.if_then(builder.icmp_unsigned("==", left, long(0)), likely=True):
            _streamed(builder, ranks, builder.gep(out_data, [args[1]]))
            for k in range(lanes):
                rank = builder.extract_element(ranks, word(k))
                if rank_bits < 64:
                    rank = builder.sext(rank, long)
                if k % 4:
                    rank = builder.add(rank, builder.mul(args[8], long(k % 4)))
                place = builder.gep(counts_data, [rank])
                builder.store(builder.add(builder.load(place), long(1)), place)
        return left

    return (
        types.uint64(raw, s, zero_mask, top, shift, table_keys, table_ranks, counts, groups, out),
        codegen,
    )


#: The small table, uint32 words: 32 displacements (one a bucket), the keys of its 256 slots,
#: their ranks (one byte a slot, 128 or more where empty; 64 words), the two multipliers.
SMALL_BUCKETS, SMALL_SLOTS = 32, 256
SMALL_TABLE_WORDS = SMALL_BUCKETS + SMALL_SLOTS + SMALL_SLOTS // 4 + 2


@intrinsic  # type: ignore[untyped-decorator]
def _small_line(  # noqa: PLR0915 - one vector program, written out
    typingctx: Any,
    raw: Any,
    s: Any,
    zero_mask: Any,
    top: Any,
    small: Any,
    found: Any,
    out: Any,
) -> Any:
    """``_hash_line`` for 16 elements of 2 or 4 bytes by the small table (``SMALL_TABLE_WORDS``)
    instead: a key's bucket the top 5 bits of its product with the first multiplier, its slot
    the top 8 bits of its product with the second xor its bucket's displacement (a perfect
    hash of the groups' keys); the slot's key and rank found by permutes of the table's
    vectors (``vpermi2d``, ``vpermi2b``), no gather. ``out`` from ``out[s]`` on is one or two
    64-byte lines (aligned), written by non-temporal stores, and the 16 ranks put in ``found``
    (bytes) for the caller to count. Without ``SMALL_TABLES`` (or for
    keys of 8 bytes), every lane is left (the caller never gets here)."""
    lanes = 16
    key_bits = raw.dtype.bitwidth
    rank_bits = out.dtype.bitwidth
    sig = types.uint64(raw, s, zero_mask, top, small, found, out)
    if not SMALL_TABLES or key_bits > 32:  # 8-byte keys: never a small table

        def nothing(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return ir.IntType(64)((1 << lanes) - 1)

        return sig, nothing

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:  # noqa: PLR0915
        word = ir.IntType(32)
        byte = ir.IntType(8)
        long = ir.IntType(64)
        words = ir.VectorType(word, lanes)

        def splat(value: Any) -> Any:
            return _splat(builder, words, value)

        def constant(value: int) -> Any:
            return ir.Constant(words, [value] * lanes)

        raw_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        small_data = context.make_array(signature.args[4])(context, builder, args[4]).data
        found_data = context.make_array(signature.args[5])(context, builder, args[5]).data
        out_data = context.make_array(signature.args[6])(context, builder, args[6]).data

        def table(at: int) -> Any:
            pointer = builder.bitcast(builder.gep(small_data, [long(at)]), words.as_pointer())
            return builder.load(pointer, align=4)

        def permute(name: str, low: Any, index: Any, high: Any) -> Any:
            kind = low.type
            function_type = ir.FunctionType(kind, [kind, kind, kind])
            function = cgutils.get_or_insert_function(
                builder.module, function_type, f"llvm.x86.avx512.vpermi2var.{name}.512"
            )
            return builder.call(function, [low, index, high])

        loaded = ir.VectorType(ir.IntType(key_bits), lanes)
        at = builder.bitcast(builder.gep(raw_data, [args[1]]), loaded.as_pointer())
        keys = builder.load(at, align=1)
        if key_bits < 32:
            keys = builder.zext(keys, words)
        magnitude = builder.and_(keys, splat(builder.trunc(args[2], word)))
        keys = builder.select(
            builder.icmp_unsigned("==", magnitude, constant(0)), constant(0), keys
        )
        nan = builder.icmp_unsigned(">", magnitude, splat(builder.trunc(args[3], word)))
        multipliers = SMALL_BUCKETS + SMALL_SLOTS + SMALL_SLOTS // 4
        factors = [builder.load(builder.gep(small_data, [long(multipliers + k)])) for k in (0, 1)]
        bucket = builder.lshr(builder.mul(keys, splat(factors[0])), constant(27))
        home = builder.lshr(builder.mul(keys, splat(factors[1])), constant(24))
        shift = permute("d", table(0), bucket, table(16))
        slot = builder.xor(home, shift)
        matched = [
            permute("d", table(32 + 32 * k), slot, table(48 + 32 * k))
            for k in range(SMALL_SLOTS // 32)
        ]
        for bit in (32, 64, 128):  # the slot's higher bits choose among the parts
            chosen = builder.icmp_unsigned("!=", builder.and_(slot, constant(bit)), constant(0))
            matched = [
                builder.select(chosen, matched[k + 1], matched[k])
                for k in range(0, len(matched), 2)
            ]
        bytes_type = ir.VectorType(byte, 64)
        narrow = builder.trunc(slot, ir.VectorType(byte, lanes))
        index = builder.shuffle_vector(
            narrow,
            ir.Constant(narrow.type, ir.Undefined),
            ir.Constant(ir.VectorType(word, 64), [k % lanes for k in range(64)]),
        )
        ranks_at = SMALL_BUCKETS + SMALL_SLOTS
        halves = []
        for k in (0, 2):
            low = builder.bitcast(table(ranks_at + 16 * k), bytes_type)
            high = builder.bitcast(table(ranks_at + 16 * (k + 1)), bytes_type)
            both = permute("qi", low, index, high)
            halves.append(
                builder.shuffle_vector(
                    both,
                    ir.Constant(bytes_type, ir.Undefined),
                    ir.Constant(ir.VectorType(word, lanes), list(range(lanes))),
                )
            )
        upper = builder.icmp_unsigned("!=", builder.and_(slot, constant(128)), constant(0))
        ranks = builder.select(upper, halves[1], halves[0])
        bad = builder.or_(nan, builder.icmp_unsigned("!=", matched[0], keys))
        empty = builder.icmp_signed("<", ranks, ir.Constant(ranks.type, [0] * lanes))
        bad = builder.or_(bad, empty)
        left = builder.zext(builder.bitcast(bad, ir.IntType(lanes)), long)
        with builder.if_then(builder.icmp_unsigned("==", left, long(0)), likely=True):
            line = 512 // rank_bits
            wide = builder.zext(ranks, ir.VectorType(ir.IntType(rank_bits), lanes))
            for part in range(lanes // line):
                piece = builder.shuffle_vector(
                    wide,
                    ir.Constant(wide.type, ir.Undefined),
                    ir.Constant(
                        ir.VectorType(word, line), list(range(part * line, (part + 1) * line))
                    ),
                )
                target = builder.gep(out_data, [builder.add(args[1], long(part * line))])
                _streamed(builder, piece, target)
            # Counted by the caller: scalar loads of them keep the vector ports free.
            builder.store(ranks, builder.bitcast(found_data, ranks.type.as_pointer()), align=1)
        return left

    return sig, codegen


#: How far ahead of its lines (bytes) ``hash_lines`` asks for its input: with the output written
#: by non-temporal stores, the CPU's own prefetch of the input lags (its vector part on 64 MiB
#: of float32 took 26 ms without, 10.5 ms 4 KiB ahead).
_AHEAD = 4096


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _line_head(out: Any, size: Any) -> Any:  # pragma: no cover - compiled
    """The elements of ``out`` (of ``size``) before its first 64-byte aligned line."""
    u = np.uint64
    width = _width(out)
    address = _address(out, 0)
    if address % width:
        return size
    return min(size, ((u(64) - address % u(64)) % u(64)) // width)


def _slot_lines_loop(slots: Any, ranks: Any, counts: Any, out: Any) -> None:  # pragma: no cover
    """``out[i] = ranks[slots[i]]`` (each element's group, in the index type) and each slot
    counted in ``counts``, four tables of ``ranks.size`` one after the other (element ``i``'s
    in a table of its own among four, so that repeats of one value in a row do not wait on
    each other's store). The output's whole 64-byte lines written by ``_slot_line``: a vector
    gather and a non-temporal store each (the output is many times the input: 8 or 4 bytes an
    element), so that it is written without being read in first. (Asking for the input ahead,
    as ``hash_lines`` does, made it slower: 27.6 -> 30-31.5 ms on 64 MiB of int8.)"""
    u = np.uint64
    size = u(slots.size)
    table = u(ranks.size)
    lane = u(64) // _width(out)
    head = _line_head(out, size)
    whole = head + (size - head) // lane * lane
    for i in range(head):
        slot = u(slots[i])
        out[i] = ranks[slot]
        counts[slot] += 1
    for i in range(head, whole, lane):
        _slot_line(slots, i, ranks, out)
        for k in range(lane):
            counts[(k % u(4)) * table + u(slots[i + k])] += 1
    for i in range(whole, size):
        slot = u(slots[i])
        out[i] = ranks[slot]
        counts[slot] += 1
    _fence()


def _first_slots_loop(slots: Any, firsts: Any, occurring: int) -> None:  # pragma: no cover
    """Each value's first position in ``slots`` written in ``firsts`` (its entries that are
    negative), read from the start until ``occurring`` values are found: usually a short way."""
    missing = occurring
    for i in range(np.uint64(slots.size)):
        slot = np.uint64(slots[i])
        if missing and firsts[slot] < 0:
            firsts[slot] = i
            missing -= 1
        if not missing:
            break


#: The multiplier of the hash (2**64 over the golden ratio, odd): a key's high product bits
#: pick its slot, spread even for keys that differ in their high bits only.
_HASH_FACTOR = np.uint64(0x9E3779B97F4A7C15)


def _hash_groups_loop(
    raw: Any,
    start: int,
    stop: int,
    groups: int,
    fraction: int,
    shift: int,
    table_keys: Any,
    table_ids: Any,
    firsts: Any,
) -> int:  # pragma: no cover - compiled
    """The groups of equal values of ``raw[start:stop]`` (the bits of an integer type, or of a
    float type with ``fraction`` mantissa bits; 0 for integers) added, in the order they first
    occur, to the ``groups`` in the table: each new one's first position in ``firsts``; their
    number now, or -1 once there would be more than ``firsts`` can hold.

    Keys are the bits, +0.0's for -0.0 (equal values); a NaN equals nothing, so each is a group
    of its own and never enters the table. The table (``table_keys`` and ``table_ids``, a power
    of two of slots, ids -1 where empty, ``shift`` 64 minus its bits) is open-addressed: a key's
    slot the top bits of its product with _HASH_FACTOR, then the next ones, each id a group's.
    """
    u = np.uint64
    sign = u(1) << (u(8) * u(raw.itemsize) - u(1))
    magnitude_mask = sign - u(1)
    infinity = (magnitude_mask >> u(fraction)) << u(fraction)
    mask = u(table_keys.size - 1)
    limit = firsts.size
    for i in range(u(start), u(stop)):
        key = u(raw[i])
        if fraction:
            magnitude = key & magnitude_mask
            if magnitude == u(0):
                key = u(0)
            elif magnitude > infinity:
                if groups == limit:
                    return -1
                firsts[groups] = i
                groups += 1
                continue
        slot = (key * _HASH_FACTOR) >> u(shift)
        while True:
            group = table_ids[slot]
            if group < 0:
                if groups == limit:
                    return -1
                table_keys[slot] = key
                table_ids[slot] = groups
                firsts[groups] = i
                groups += 1
                break
            if table_keys[slot] == key:
                break
            slot = (slot + u(1)) & mask
    return groups


def _hash_lines_loop(  # noqa: PLR0915 - the line's way and the element's, one loop
    raw: Any,
    fraction: int,
    shift: int,
    table_keys: Any,
    table_ranks: Any,
    nan_ranks: Any,
    counts: Any,
    out: Any,
    small: Any,
) -> Any:  # pragma: no cover - compiled
    """Each element's group in the index type, by the table ``_hash_groups_loop`` filled
    (``table_ranks`` the rank of each slot's group, -1 where empty): its key's slot's rank,
    and for the k-th NaN ``nan_ranks[k]`` (NaNs are groups of their own, in the order they
    occur); each group's elements counted in ``counts``: four tables of the groups one after
    the other (by rank; their sum the counts). -1, or the position of the first element whose
    group the table does not have (a key not in it, a NaN past the last of ``nan_ranks``):
    ``out`` and ``counts`` are then written up to it only.

    The output's whole 64-byte lines are written by ``_hash_line`` (vector gathers of the
    keys' own slots, a non-temporal store) where every key of the line is in its own slot and
    none is a NaN, or 16 elements at a time by ``_small_line`` when ``small`` is a small table
    (not empty: the groups' keys of 2 or 4 bytes hashed perfectly, every key in the table);
    the other lines, and the parts of lines at either end, an element at a time.
    """
    u = np.uint64
    sign = u(1) << (u(8) * u(raw.itemsize) - u(1))
    magnitude_mask = sign - u(1)
    infinity = (magnitude_mask >> u(fraction)) << u(fraction)
    # The line's masks: an integer's key is its bits, whatever they are.
    zero_mask = magnitude_mask if fraction else ~u(0)
    top = infinity if fraction else ~u(0)
    mask = u(table_keys.size - 1)
    groups = u(counts.size) // u(4)
    nans = u(0)
    known_nans = u(nan_ranks.size)
    size = u(raw.size)
    lane = u(16) if small.size else u(64) // _width(out)
    found = np.empty(16, np.uint8)  # the ranks of _small_line's 16 elements
    ahead = u(_AHEAD) // _width(raw)
    head = _line_head(out, size)
    whole = head + (size - head) // lane * lane
    start = u(0)
    while start < size:
        if start < head:
            stop = head
        elif start < whole:
            stop = start + lane
            _prefetch(raw, min(start + ahead, size - u(1)))
            if small.size:
                line = _small_line(raw, start, zero_mask, top, small, found, out)
                if line == u(0):
                    for k in range(lane):
                        counts[(k % u(4)) * groups + u(found[k])] += 1
            else:
                line = _hash_line(
                    raw, start, zero_mask, top, u(shift), table_keys, table_ranks, counts, groups,
                    out,
                )  # fmt: skip
            if line == u(0):
                start = stop
                continue
        else:
            stop = size
        for i in range(start, stop):
            key = u(raw[i])
            if fraction:
                magnitude = key & magnitude_mask
                if magnitude == u(0):
                    key = u(0)
                elif magnitude > infinity:
                    if nans == known_nans:
                        _fence()
                        return np.int64(i)
                    rank = nan_ranks[nans]
                    out[i] = rank
                    counts[rank] += 1
                    nans += u(1)
                    continue
            slot = (key * _HASH_FACTOR) >> u(shift)
            while True:
                rank = table_ranks[slot]
                if rank < 0:
                    _fence()
                    return np.int64(i)
                if table_keys[slot] == key:
                    break
                slot = (slot + u(1)) & mask
            out[i] = rank
            counts[rank] += 1
        start = stop
    _fence()
    return np.int64(-1)


_SLOT_WIDTHS = (types.uint8, types.uint16)
_KEY_WIDTHS = (types.uint16, types.uint32, types.uint64)

#: first_slots(slots, firsts, occurring): bytes or 2-byte values, int64 positions.
first_slots = _compiled(
    _first_slots_loop, [types.void(_readonly(w), _mutable(_I64), _I64) for w in _SLOT_WIDTHS]
)

#: slot_lines(slots, ranks, counts, out): bytes or 2-byte values, each index type, int64 counts.
slot_lines = _compiled(
    _slot_lines_loop,
    [
        types.void(_readonly(w), _readonly(index), _mutable(_I64), _mutable(index))
        for w in _SLOT_WIDTHS
        for index in _INDEX_TYPES
    ],
)

#: hash_groups(raw, start, stop, groups, fraction, shift, table_keys, table_ids, firsts): keys of
#: 2, 4 or 8 bytes; uint64 keys, int32 ids, int64 positions.
hash_groups = _compiled(
    _hash_groups_loop,
    [
        _I64(
            _readonly(w), *[_I64] * 5, _mutable(types.uint64), _mutable(types.int32), _mutable(_I64)
        )
        for w in _KEY_WIDTHS
    ],
)

#: hash_lines(raw, fraction, shift, table_keys, table_ranks, nan_ranks, counts, out, small): keys
#: of 2, 4 or 8 bytes, each index type, int64 counts, a uint32 small table (or none).
hash_lines = _compiled(
    _hash_lines_loop,
    [
        _I64(
            _readonly(w),
            _I64,
            _I64,
            _readonly(types.uint64),
            _readonly(index),
            _readonly(index),
            _mutable(_I64),
            _mutable(index),
            _readonly(types.uint32),
        )
        for w in _KEY_WIDTHS
        for index in _INDEX_TYPES
    ],
)

# ---------------------------------------------------------------------------------------------
# ScatterElementsUpdate's loops: each update applied at its position, one after the other in the
# updates' row-major order (the order the op's spec reads them in, and the NumPy stand-ins'),
# with no sort: the cost follows the updates, repeated positions or not.

#: Updates whose positions ``_scatter_positions`` works out at a time (8 bytes each: 32 KiB).
SCATTER_CHUNK = 1 << 12
#: ``scatter_reduce``'s reductions, by code (``numpy_loops.SCATTER_REDUCTIONS``' order).
_SUM, _PROD, _MIN, _MAX, _MEAN = 1, 2, 3, 4, 5
#: ``scatter_reduce``'s ``kind`` of uint16 elements: their own values, or float16's or bfloat16's
#: bits (compared by the values they stand for; summed and multiplied in float32, rounded back).
_FLOAT16_BITS, _BFLOAT16_BITS = 1, 2


@_helper
def _scatter_positions(
    indices: Any,
    table: Any,
    axis: int,
    size: int,
    start: int,
    stop: int,
    counter: Any,
    positions: Any,
) -> None:  # pragma: no cover - compiled
    """The output's flat positions of updates ``start`` to ``stop`` (in row-major order) into
    ``positions``: an update's own multi-index, with the index along ``axis`` from ``indices``
    (``size`` added to a negative one). ``table`` is the updates' shape, then the output's
    strides (elements); ``counter`` the multi-index of update ``start`` with, last, its offset
    without the axis's part: left at ``stop``'s."""
    rank = table.size // 2
    along = table[rank + axis]
    offset = counter[rank]
    for i in range(start, stop):
        index = indices[i]
        index += (index >> 63) & size
        positions[i - start] = offset + index * along
        # The next update's multi-index: the last dimension counted, carried leftwards.
        d = rank - 1
        while d >= 0:
            step = table[rank + d] if d != axis else 0
            counter[d] += 1
            offset += step
            if counter[d] < table[d]:
                break
            offset -= counter[d] * step
            counter[d] = 0
            d -= 1
    counter[rank] = offset


def _scatter_put_loop(
    out: Any, indices: Any, updates: Any, table: Any, axis: int, size: int
) -> None:  # pragma: no cover - compiled
    """``out[position(i)] = updates[i]`` for each update in order: of repeated positions the
    last one stays."""
    counter = np.zeros(table.size // 2 + 1, np.int64)
    positions = np.empty(SCATTER_CHUNK, np.int64)
    total = updates.size
    for start in range(0, total, SCATTER_CHUNK):
        stop = min(total, start + SCATTER_CHUNK)
        _scatter_positions(indices, table, axis, size, start, stop, counter, positions)
        for k in range(stop - start):
            out[positions[k]] = updates[start + k]


def _quiet_nan_of(x: Any, u: Any) -> Any:  # pragma: no cover - typed by its overload
    """The NaN an arithmetic on ``x`` and ``u`` (one a NaN) gives when ``x`` is its first
    operand: ``x`` quieted when it is a NaN, else ``u`` quieted (x86's rule: the first NaN
    operand's payload, the quiet bit set)."""
    raise NotImplementedError


@overload(_quiet_nan_of)  # type: ignore[untyped-decorator]
def _quiet_nan_of_typed(x: Any, u: Any) -> Any:
    # numba views a scalar only as the direct result of a NumPy type's call: one way per width.
    if x.bitwidth == 32:

        def quieted_32(x: Any, u: Any) -> Any:  # pragma: no cover - compiled
            if np.isnan(x):
                return np.uint32(np.float32(x).view(np.uint32) | np.uint32(1 << 22)).view(
                    np.float32
                )
            return np.uint32(np.float32(u).view(np.uint32) | np.uint32(1 << 22)).view(np.float32)

        return quieted_32

    def quieted_64(x: Any, u: Any) -> Any:  # pragma: no cover - compiled
        if np.isnan(x):
            return np.uint64(np.float64(x).view(np.uint64) | np.uint64(1 << 51)).view(np.float64)
        return np.uint64(np.float64(u).view(np.uint64) | np.uint64(1 << 51)).view(np.float64)

    return quieted_64


def _reduced(x: Any, u: Any, reduction: int, kind: int) -> Any:  # pragma: no cover - typed
    """``reduction(u, x)`` in the element type: ``x`` the element there, ``u`` the update."""
    raise NotImplementedError


@overload(_reduced)  # type: ignore[untyped-decorator]
def _reduced_typed(x: Any, u: Any, reduction: Any, kind: Any) -> Any:
    if isinstance(x, types.Boolean):

        def logical(x: Any, u: Any, reduction: Any, kind: Any) -> Any:  # pragma: no cover
            if reduction == _SUM:
                return x | u
            if reduction == _PROD:
                return x & u
            if reduction == _MIN:
                return x if x < u else u
            return x if u < x else u

        return logical
    if isinstance(x, types.Float):

        def real(x: Any, u: Any, reduction: Any, kind: Any) -> Any:  # pragma: no cover
            # std::min(u, x): x stays only when x < u (max: u < x); a NaN update is taken.
            chosen = u
            if reduction == _MIN:
                if x < u:
                    chosen = x
                return chosen
            if reduction == _MAX:
                if u < x:
                    chosen = x
                return chosen
            # Of two NaNs, a sum keeps the update's payload, a product the element's: NumPy's
            # add.at and multiply.at as the stand-ins call them (``numpy_loops.scatter_reduce``).
            value = x + u
            first = u
            second = x
            if reduction == _PROD:
                value = x * u
                first = x
                second = u
            # An invalid operation's NaN (inf - inf, 0 * inf) stays the CPU's default one.
            if np.isnan(value) and (np.isnan(x) or np.isnan(u)):
                value = _quiet_nan_of(first, second)
            return value

        return real
    if x == types.uint16:

        def halves(x: Any, u: Any, reduction: Any, kind: Any) -> Any:  # pragma: no cover
            if kind == 0:
                return _integer_reduced(x, u, reduction)
            if reduction == _SUM or reduction == _PROD:  # noqa: PLR1714, SIM109
                # As NumPy (float16) and ml_dtypes (bfloat16) compute: in float32, rounded to
                # the type after each step. Of two NaNs, the update's payload (sign) is kept by
                # products too: the element and the update change places for them.
                here32 = _half_float32(x, kind)
                there32 = _half_float32(u, kind)
                if reduction == _PROD:
                    return _float32_half(_reduced(there32, here32, _PROD, 0), kind)
                return _float32_half(_reduced(here32, there32, _SUM, 0), kind)
            here = _half_float32(x, kind)  # exact: compared as the values they are
            there = _half_float32(u, kind)
            if reduction == _MIN:
                return x if here < there else u
            return x if there < here else u

        return halves

    def integer(x: Any, u: Any, reduction: Any, kind: Any) -> Any:  # pragma: no cover
        return _integer_reduced(x, u, reduction)

    return integer


@_helper
def _integer_reduced(x: Any, u: Any, reduction: int) -> Any:  # pragma: no cover - compiled
    """``reduction(u, x)`` of integers: sums and products wrap in the element type (the store
    keeps the low bits)."""
    if reduction == _SUM:
        return x + u
    if reduction == _PROD:
        return x * u
    if reduction == _MIN:
        return x if x < u else u
    return x if u < x else u


@_helper
def _half_float32(bits: Any, kind: int) -> Any:  # pragma: no cover - compiled
    """float16's (``kind`` 1) or bfloat16's (2) bits as a float32, exactly; a NaN keeps its
    payload, a signalling one too (NumPy's and ml_dtypes' conversions)."""
    wide = np.uint64(bits)
    if kind == _BFLOAT16_BITS:
        return _as_single(wide << np.uint64(16))
    return _as_single(_half_to_single(wide))


@_helper
def _float32_half(value: Any, kind: int) -> Any:  # pragma: no cover - compiled
    """A float32 rounded to float16's (``kind`` 1: NumPy's conversion) or bfloat16's (2:
    ml_dtypes') bits (uint16), to nearest, ties to even."""
    single = _bits_of(np.float32(value))
    if kind == _BFLOAT16_BITS:
        return np.uint16(_single_to_brain(single))
    return np.uint16(_single_to_half(single))


@_helper
def _half_mean(total: Any, count: Any, kind: int) -> Any:  # pragma: no cover - compiled
    """mean of float16 (``kind`` 1) or bfloat16 (2) bits: the sum as float64 over the count,
    rounded once to float16 (NumPy's conversion from float64), or to float32 then bfloat16
    (ml_dtypes')."""
    mean = np.float64(_half_float32(total, kind)) / np.float64(count)
    if kind == _BFLOAT16_BITS:
        return _float32_half(np.float32(mean), kind)
    return np.uint16(_double_to_half(_bits_of(mean)))


def _mean_of(total: Any, count: Any) -> Any:  # pragma: no cover - typed by its overload
    """A sum (in the element type) over its count: floats divided as float64 (rounded once to
    the element type by the store), integers rounded down (towards negative infinity)."""
    raise NotImplementedError


@overload(_mean_of)  # type: ignore[untyped-decorator]
def _mean_of_typed(total: Any, count: Any) -> Any:
    if isinstance(total, types.Float):

        def divided(total: Any, count: Any) -> Any:  # pragma: no cover - compiled
            return np.float64(total) / np.float64(count)

        return divided
    if isinstance(total, types.Integer) and not total.signed:

        def unsigned_floor(total: Any, count: Any) -> Any:  # pragma: no cover - compiled
            return np.uint64(total) // np.uint64(count)

        return unsigned_floor

    def floor(total: Any, count: Any) -> Any:  # pragma: no cover - compiled
        return np.int64(total) // np.int64(count)

    return floor


def _scatter_reduce_loop(
    out: Any,
    indices: Any,
    updates: Any,
    table: Any,
    axis: int,
    size: int,
    reduction: int,
    use_init_val: int,
    kind: int,
    seen: Any,
    counts: Any,
) -> None:  # pragma: no cover - compiled
    """``out[position(i)] = reduction(updates[i], out[position(i)])`` for each update in order
    (``reduction`` 1 sum, 2 prod, 3 min, 4 max, 5 mean; bool sum and prod are OR and AND).

    With ``use_init_val`` 0 the first update of a position replaces out's element there (marked
    in ``seen``, a bit a position; mean: its count 0). ``counts`` (mean only, a count a position)
    counts each position's updates; their sum is then divided by the values summed (data's
    element among them when ``use_init_val``). Floats' arithmetic is the CPU's; a NaN result of
    NaN operands carries one's payload, quieted, as NumPy's loops give it (a sum the update's
    first, a product the element's); the comparisons of min and max select bits unchanged."""
    counter = np.zeros(table.size // 2 + 1, np.int64)
    positions = np.empty(SCATTER_CHUNK, np.int64)
    total = updates.size
    fresh = use_init_val == 0
    for start in range(0, total, SCATTER_CHUNK):
        stop = min(total, start + SCATTER_CHUNK)
        _scatter_positions(indices, table, axis, size, start, stop, counter, positions)
        for k in range(stop - start):
            p = positions[k]
            u = updates[start + k]
            if reduction == _MEAN:
                before = counts[p]
                counts[p] = before + 1
                if fresh and before == 0:
                    out[p] = u
                else:
                    out[p] = _reduced(out[p], u, _SUM, kind)
                continue
            if fresh:
                byte = p >> 3
                bit = np.uint8(1 << (p & 7))
                if not seen[byte] & bit:
                    seen[byte] |= bit
                    out[p] = u
                    continue
            out[p] = _reduced(out[p], u, reduction, kind)
    if reduction != _MEAN:
        return
    extra = 0 if fresh else 1
    for p in range(out.size):
        if counts[p]:
            if kind:
                # (np.uint16: typed for every element type, run for float16/bfloat16 bits.)
                out[p] = _half_mean(np.uint16(out[p]), np.int64(counts[p]) + extra, kind)
            else:
                out[p] = _mean_of(out[p], np.int64(counts[p]) + extra)


#: scatter_put(out, indices, updates, table, axis, size): each width; int64 indices and table.
scatter_put = _compiled(
    _scatter_put_loop,
    [
        types.void(_mutable(width), _readonly(_I64), _readonly(width), _readonly(_I64), _I64, _I64)
        for width in _WIDTHS
    ],
)

#: The element types ScatterElementsUpdate's reductions compute in (float16 and bfloat16: their
#: bits as uint16, compared for min and max).
_SCATTER_TYPES = (
    types.boolean,
    types.int8,
    types.int16,
    types.int32,
    types.int64,
    *_WIDTHS,
    types.float32,
    types.float64,
)

#: scatter_reduce(out, indices, updates, table, axis, size, reduction, use_init_val, kind, seen,
#: counts): each type; int64 indices and table, uint8 marks, uint32 counts.
scatter_reduce = _compiled(
    _scatter_reduce_loop,
    [
        types.void(
            _mutable(element),
            _readonly(_I64),
            _readonly(element),
            _readonly(_I64),
            *[_I64] * 5,
            _mutable(types.uint8),
            _mutable(types.uint32),
        )
        for element in _SCATTER_TYPES
    ],
)

#: Unique's loops, as ``_LOOPS`` lists them.
_UNIQUE_LOOPS = (
    ("first_slots", first_slots),
    ("slot_lines", slot_lines),
    ("hash_groups", hash_groups),
    ("hash_lines", hash_lines),
)

_LOOPS = (
    ("take", take),
    ("take_slices", take_slices),
    ("roll", roll_rows),
    ("strided_copy", strided_copy),
    ("pad_rows", pad_rows),
    ("slice_scatter", slice_scatter),
    ("transpose_tiles", transpose_tiles),
    ("gather_tree", gather_tree),
    ("first_fraction", first_fraction),
    ("col2im_reach", col2im_reach),
    ("col2im", col2im),
    *_UNIQUE_LOOPS,
    ("scatter_put", scatter_put),
    ("scatter_reduce", scatter_reduce),
)


def compiled_signatures() -> Iterator[tuple[str, int]]:
    """Each compiled loop and how many signatures it has (for tests and logs)."""
    for name, dispatcher in _LOOPS:
        yield name, len(dispatcher.signatures)


def cache_statistics() -> dict[str, tuple[int, int]]:
    """Each compiled loop's signatures this process loaded from numba's cache and compiled (a
    start that found the cache whole compiled none): read by ``scripts/compile_kernels`` and
    the start-up tests, in a fresh process."""
    return {
        name: (
            sum(dispatcher.stats.cache_hits.values()),
            sum(dispatcher.stats.cache_misses.values()),
        )
        for name, dispatcher in _LOOPS
    }


__all__ = [
    "cache_statistics",
    "col2im",
    "col2im_reach",
    "compiled_signatures",
    "first_fraction",
    "gather_tree",
    "pad_rows",
    "roll_rows",
    "scatter_put",
    "scatter_reduce",
    "slice_scatter",
    "strided_copy",
    "take",
    "take_slices",
    "transpose_tiles",
]
__all__ += ["first_slots", "hash_groups", "hash_lines", "slot_lines"]
