"""The loops the kernels call: numba's (``app/ops/compiled.py``) once compiled, NumPy's until then.

Compiling the numba loops takes seconds on a first start (a cold cache) and about a second
even from the cache; a service that waited for them would answer nothing meanwhile. So they
are compiled (or loaded) in a thread of their own, started with the service
(``start_compiling``) or by the first call that needs one, and until they are ready a call is
served by the loop's NumPy stand-in (``app/ops/numpy_loops.py``): the same arguments, the same
bits written. A stand-in holds temporaries a compiled loop does not, so only a small call
takes it; a larger one waits for the compiler, within the reservation it was admitted with.

The choice is made per call. A test can ask for the stand-ins (``numpy_stand_ins``) to hold both
ways to the same bits; a context variable, so that it reaches the worker threads a call
runs in and nothing else.
"""

import contextlib
import contextvars
import importlib
import logging
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import numpy_loops

LOG = logging.getLogger("tensor_ops.service")

Array = npt.NDArray[Any]

#: The module numba compiles at import: imported by the compiling thread only.
COMPILED_MODULE = "app.ops.compiled"


class _Compiled:
    """The compiled loops' module once imported, the thread importing it, and how it ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.module: ModuleType | None = None
        self.failure: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.seconds = 0.0

    def run(self) -> None:
        started = time.perf_counter()
        # Here, not at the top: it imports numba (most of a second), which the thread does.
        from app.numba_cache import kernels_cached  # noqa: PLC0415

        if not kernels_cached():
            LOG.info(
                "compiling the kernels (first start only, a few seconds); "
                "NumPy's loops answer meanwhile"
            )
        try:
            self.module = importlib.import_module(COMPILED_MODULE)
        except BaseException as error:  # whatever it is, the stand-ins keep serving
            self.failure = error
            LOG.error("the kernels did not compile (%s); NumPy's loops serve every call", error)
        else:
            self.seconds = time.perf_counter() - started
            LOG.info("kernels ready in %.1f s", self.seconds)
        finally:
            self.done.set()


_COMPILED = _Compiled()
_STAND_INS: contextvars.ContextVar[bool] = contextvars.ContextVar("numpy_stand_ins", default=False)


def start_compiling() -> bool:
    """Compile (or load) the loops in a thread of their own, once per process; True if this
    call started it."""
    with _COMPILED.lock:
        if _COMPILED.thread is not None:
            return False
        _COMPILED.thread = threading.Thread(
            target=_COMPILED.run, name="tensor-ops-compile", daemon=True
        )
        _COMPILED.thread.start()
        return True


def compiled_ready() -> bool:
    """Whether the compiled loops serve the calls now."""
    return _COMPILED.module is not None


def compiling_over() -> bool:
    """Whether the compiling thread has ended (ready, or failed)."""
    return _COMPILED.done.is_set()


def wait_compiled(timeout: float | None = None) -> bool:
    """Start compiling if nothing has, and wait for it (at most ``timeout`` seconds); True
    when the compiled loops are ready."""
    start_compiling()
    _COMPILED.done.wait(timeout)
    return compiled_ready()


def compiled_module() -> ModuleType:
    """``app.ops.compiled``, waited for (its loops, for tests that look at the dispatchers)."""
    wait_compiled()
    if _COMPILED.module is None:
        raise RuntimeError("the kernels did not compile") from _COMPILED.failure
    return _COMPILED.module


@contextlib.contextmanager
def numpy_stand_ins() -> Iterator[None]:
    """Within this block (and the threads it starts calls in), every loop is NumPy's."""
    token = _STAND_INS.set(True)
    try:
        yield
    finally:
        _STAND_INS.reset(token)


def _stand_in_or_loops(cheap: bool) -> ModuleType | None:
    """The compiled loops' module, or None for the stand-ins: when asked for, or while
    compiling for a cheap call (a costly one waits), or if compiling failed. (The callers look
    at ``_COMPILED.module`` first: a ready service's call costs one look and one context
    variable, not this.)"""
    if _STAND_INS.get():
        return None
    module = _COMPILED.module
    if module is not None:
        return module
    if cheap:
        start_compiling()
        return None
    wait_compiled()
    return _COMPILED.module


def take(
    source: Array,
    indices: Array,
    out: Array,
    batches: int,
    outer: int,
    length: int,
    count: int,
    wrap: int,
    line: int,
) -> int:
    """``compiled.take`` (its docstring says what), or its stand-in: 1 when a position was
    outside ``[0, length)``."""
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(out.nbytes <= numpy_loops.CHEAP_OUTPUT_BYTES)
        if module is None:
            return numpy_loops.take(source, indices, out, batches, outer, length, count, wrap, line)
    return int(module.take(source, indices, out, batches, outer, length, count, wrap, line))


def take_slices(
    source: Array,
    indices: Array,
    out: Array,
    batches: int,
    outer: int,
    length: int,
    count: int,
    inner: int,
    wrap: int,
) -> None:
    """``compiled.take_slices``, or its stand-in."""
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(out.nbytes <= numpy_loops.CHEAP_OUTPUT_BYTES)
        if module is None:
            numpy_loops.take_slices(
                source, indices, out, batches, outer, length, count, inner, wrap
            )
            return
    module.take_slices(source, indices, out, batches, outer, length, count, inner, wrap)


def roll_rows(source: Array, out: Array, table: Array, row: int, split: int) -> None:
    """``compiled.roll_rows``, or its stand-in (which holds no temporaries: any size, but
    few rolled dimensions)."""
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(numpy_loops.roll_is_cheap(table))
        if module is None:
            numpy_loops.roll_rows(source, out, table, row, split)
            return
    module.roll_rows(source, out, table, row, split)


def gather_tree(
    steps: Array,
    parents: Array,
    out: Array,
    lengths: Array,
    state: Array,
    ends: Array,
    max_time: int,
    batch_size: int,
    beam_width: int,
    block: int,
    kind: int,
    fraction: int,
    bias: int,
    stream: int,
    seen: Array,
) -> int:
    """``compiled.gather_tree``, or its stand-in (for at most CHEAP_OUTPUT_BYTES of ids: it
    holds a few copies of a step's row; and at most CHEAP_STEPS steps: it walks them in
    Python); what the walk saw of the ids (``seen`` not empty; -1: not checked)."""
    arguments = (max_time, batch_size, beam_width, block, kind, fraction, bias, stream, seen)
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(numpy_loops.gather_tree_is_cheap(out, max_time))
        if module is None:
            return numpy_loops.gather_tree(steps, parents, out, lengths, state, ends, *arguments)
    return int(module.gather_tree(steps, parents, out, lengths, state, ends, *arguments))


def first_fraction(raw: Array, fraction: int, bias: int) -> int:
    """``compiled.first_fraction``'s position of the first value of ``raw`` that is not an
    integer (-1: none)."""
    return first_fraction_and_largest(raw, fraction, bias, raw.size)[0]


def first_fraction_and_largest(raw: Array, fraction: int, bias: int, skip: int) -> tuple[int, int]:
    """``compiled.first_fraction``, or its stand-in (which holds a chunk of its own: any size):
    the position of the first value of ``raw`` that is not an integer (-1: none) and, when
    there is none, the largest bits of ``raw[skip:]`` (0 if none)."""
    largest = np.zeros(64 // raw.itemsize, raw.dtype)
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(True)
        if module is None:
            first = numpy_loops.first_fraction(raw, fraction, bias, skip, largest)
            return first, int(largest[0])
    first = int(module.first_fraction(raw, fraction, bias, skip, largest))
    return first, int(largest[0])


def col2im_reach(
    first: Array, size: int, stride: int, dilation: int, pad: int, blocks: int
) -> bool:
    """``compiled.col2im_reach``, or its stand-in (for at most CHEAP_KERNEL_ELEMENTS kernel
    elements: it goes through them in Python)."""
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(numpy_loops.col2im_reach_is_cheap(size))
        if module is None:
            return numpy_loops.col2im_reach(first, size, stride, dilation, pad, blocks)
    return bool(module.col2im_reach(first, size, stride, dilation, pad, blocks))


def col2im(
    source: Array,
    out: Array,
    row_first: Array,
    col_first: Array,
    axes: Array,
    planes: int,
    kind: int,
) -> None:
    """``compiled.col2im``, or its stand-in (for at most CHEAP_KERNEL_ELEMENTS kernel elements:
    it goes through them in Python, a few NumPy calls each)."""
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(numpy_loops.col2im_is_cheap(axes))
        if module is None:
            numpy_loops.col2im(source, out, row_first, col_first, axes, planes, kind)
            return
    module.col2im(source, out, row_first, col_first, axes, planes, kind)


def scatter_put(
    out: Array, indices: Array, updates: Array, table: Array, axis: int, size: int
) -> None:
    """``compiled.scatter_put``, or its stand-in (for at most CHEAP_SCATTER_UPDATES updates:
    it sorts their positions)."""
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(numpy_loops.scatter_is_cheap(updates))
        if module is None:
            numpy_loops.scatter_put(out, indices, updates, table, axis, size)
            return
    module.scatter_put(out, indices, updates, table, axis, size)


def scatter_reduce(
    out: Array,
    indices: Array,
    updates: Array,
    table: Array,
    axis: int,
    size: int,
    reduction: int,
    use_init_val: int,
    kind: int,
    seen: Array,
    counts: Array,
) -> None:
    """``compiled.scatter_reduce``, or its stand-in (for at most CHEAP_SCATTER_UPDATES updates:
    it sorts their positions)."""
    arguments = (axis, size, reduction, use_init_val, kind, seen, counts)
    module = _COMPILED.module
    if module is None or _STAND_INS.get():
        module = _stand_in_or_loops(numpy_loops.scatter_is_cheap(updates))
        if module is None:
            numpy_loops.scatter_reduce(out, indices, updates, table, *arguments)
            return
    module.scatter_reduce(out, indices, updates, table, *arguments)


def ready_module() -> ModuleType | None:
    """The compiled loops' module when they serve the calls now, else None (compiling started,
    if nothing had started it): for a kernel whose stand-in is NumPy's own copy of the same
    views, which holds no temporaries and writes the same bits at any size."""
    module = _COMPILED.module
    if module is not None and not _STAND_INS.get():
        return module
    if module is None:
        start_compiling()
    return None
