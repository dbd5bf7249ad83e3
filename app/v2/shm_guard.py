"""A shared memory object cut short while the worker reads or writes it must not kill the worker.

A region is a mapping of the client's object. If the client truncates the object (``ftruncate``)
while a request uses the region, the next touch of a page past the object's new end is a SIGBUS,
and a SIGBUS kills the process. A check of the object's size before each use narrows the window
but cannot close it: the object can shrink between the check and the kernel's read.

So, as Wayland compositors do with their clients' shared memory pools, the worker handles SIGBUS
itself: a handler, compiled with numba so that it runs with no GIL and no Python, looks the
faulting address up in a table of the regions' mappings. When the address lies in one, the
handler maps anonymous memory (zeros) over the whole mapping, counts the fault against it, and
returns: the access is retried and succeeds, the request runs to its end with bytes that mean
nothing, and the request is then refused (``Mapping.faults`` is not 0) and the region with it,
until it is registered again. A SIGBUS anywhere else is passed to the handler that was there
before (the default one ends the process, as it would have).

The handler is installed with the first mapping, once per process. Linux only (``/dev/shm``);
the ``sigaction`` and ``siginfo_t`` layouts are glibc's on 64-bit Linux.
"""

from __future__ import annotations

import asyncio
import ctypes
import mmap
import signal
import threading
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import loops

#: Mappings guarded at once: the regions registered, and those unregistered that a request
#: still holds. Past it, a registration is refused.
SLOTS = 1024
#: A slot: the mapping's first byte, the byte past its last (0, 0 when the slot is free), and
#: the SIGBUS faults it has taken.
_START, _END, _FAULTS = 0, 1, 2
_TABLE: npt.NDArray[np.int64] = np.zeros((SLOTS, 3), np.int64)
#: The ``struct sigaction`` that was there before (the handler restores it for other faults).
_PREVIOUS: npt.NDArray[np.uint8] = np.zeros(256, np.uint8)

_PAGE = mmap.PAGESIZE
_BUS_ADRERR = 2  # si_code of an access to a page past the end of the mapped object
_MAP_FIXED = 0x10
_ANONYMOUS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED
_READ_WRITE = mmap.PROT_READ | mmap.PROT_WRITE
_SA_SIGINFO = 0x4
_SA_RESTART = 0x10000000
_SA_FLAGS_AT = 136  # struct sigaction: handler (8), sa_mask (128), sa_flags (int)

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long,
]  # fmt: skip
_mmap.restype = ctypes.c_void_p
_sigaction = _libc.sigaction
_sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_sigaction.restype = ctypes.c_int
_raise = _libc["raise"]
_raise.argtypes = [ctypes.c_int]
_raise.restype = ctypes.c_int

_lock = threading.Lock()
_install_lock = threading.Lock()
#: The compiled handler, once installed: kept for the life of the process.
_handler: list[Any] = []


def _compile_handler() -> Any:
    # After the kernels, never beside them: numba's first compile in a process initialises its
    # target context under two locks taken in opposite orders by two compiling threads
    # (``threadsafe_cached_property`` and the compiler lock), so the kernels' thread and this one
    # compiling at once deadlock both (a fresh start's first registration hung for good, about
    # one start in two on a cold cache). Waiting costs the first registration of a fresh start
    # the kernels' compile (a second from the cache); once they are in, nothing is shared.
    loops.wait_compiled()
    # numba imported here, with the first region, not with the module: its import is most of a
    # second of every start of the service, most of which never maps a region.
    from numba import carray, cfunc, types  # noqa: PLC0415
    from numba.extending import intrinsic  # noqa: PLC0415

    @intrinsic  # type: ignore[untyped-decorator]
    def _pointer(typingctx: Any, address: Any) -> Any:
        """An address (an integer) as a pointer, in compiled code."""

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

        return types.voidptr(types.intp), codegen

    table_at = _TABLE.ctypes.data
    previous_at = _PREVIOUS.ctypes.data
    slots, page = SLOTS, _PAGE

    @cfunc(types.void(types.int32, types.voidptr, types.voidptr), nopython=True)  # type: ignore[untyped-decorator]
    def handler(number: int, info: Any, context: Any) -> None:  # pragma: no cover (compiled)
        # siginfo_t: si_signo, si_errno, si_code (ints), padding, then si_addr at byte 16.
        code = carray(info, 4, dtype=np.int32)[2]
        address = np.int64(carray(info, 3, dtype=np.uint64)[2])
        table = carray(_pointer(table_at), (slots, 3), dtype=np.int64)
        if code == _BUS_ADRERR:
            for slot in range(slots):
                start = table[slot, _START]
                end = table[slot, _END]
                # A slot being filled or freed may read half-written: a start of 0 is no
                # mapping's (``_free`` clears the start first, a new slot sets the end last).
                if start != 0 and start <= address < end:
                    length = (end - start + page - 1) // page * page
                    _mmap(_pointer(start), length, _READ_WRITE, _ANONYMOUS, -1, 0)
                    table[slot, _FAULTS] += 1
                    return
        # Not a region's: the previous handler's, once this one returns (a fault happens
        # again; a signal sent is sent again, pending until then).
        _sigaction(number, _pointer(previous_at), _pointer(0))
        _raise(number)

    return handler


async def ready() -> None:
    """Install the handler, off the event loop (compiling it takes about a second, once)."""
    if not _handler:
        await asyncio.to_thread(_install)


def _install() -> None:
    with _install_lock:
        _install_unlocked()


def _install_unlocked() -> None:
    if _handler:
        if not _installed(_handler[0]):
            # Replaced since (faulthandler enabled or disabled after us, a handler set by
            # another library, or ours giving the signal back for a fault not a region's):
            # installed again, over whatever is there now.
            _set(_handler[0])
        return
    handler = _compile_handler()
    _set(handler)
    _handler.append(handler)


def _installed(handler: Any) -> bool:
    """Whether ``handler`` is SIGBUS's action now."""
    current = np.zeros(256, np.uint8)
    if _sigaction(signal.SIGBUS, 0, current.ctypes.data) != 0:
        return False
    return bool(int(current[:8].view(np.int64)[0]) == handler.address)


def _set(handler: Any) -> None:
    """Make ``handler`` SIGBUS's action, keeping the one it replaces for other faults."""
    action = np.zeros(256, np.uint8)
    action[:8] = np.frombuffer(np.int64(handler.address).tobytes(), np.uint8)
    action[_SA_FLAGS_AT : _SA_FLAGS_AT + 4] = np.frombuffer(
        np.int32(_SA_SIGINFO | _SA_RESTART).tobytes(), np.uint8
    )
    if _sigaction(signal.SIGBUS, action.ctypes.data, _PREVIOUS.ctypes.data) != 0:
        raise OSError(ctypes.get_errno(), "sigaction(SIGBUS) failed")


class SlotsFullError(Exception):
    """Every slot holds a mapping."""


class Mapping:
    """One guarded mapping: its slot in the table, freed when the mapping is collected."""

    def __init__(self, mapping: mmap.mmap) -> None:
        probe = ctypes.c_char.from_buffer(mapping)
        start = ctypes.addressof(probe)
        del probe  # it holds an export of the mapping
        _install()
        with _lock:
            free = np.flatnonzero(_TABLE[:, _END] == 0)
            if not free.size:
                raise SlotsFullError
            self.slot = int(free[0])
            _TABLE[self.slot] = (start, start + len(mapping), 0)
        weakref.finalize(mapping, _free, self.slot)

    @property
    def faults(self) -> int:
        """SIGBUS faults taken in the mapping: not 0 once its object was cut short under it."""
        return int(_TABLE[self.slot, _FAULTS])


def _free(slot: int) -> None:
    with _lock:
        # The start first: a slot with no start is skipped by the handler whatever its end.
        _TABLE[slot, _START] = 0
        _TABLE[slot, _END] = 0
        _TABLE[slot, _FAULTS] = 0
