"""Triton's system shared memory extension: tensors passed through POSIX shared memory.

A client on the same host (the same ``/dev/shm``) creates a shared memory object, registers a
region of it by name (``POST /v2/systemsharedmemory/region/<name>/register``, or gRPC's
``SystemSharedMemoryRegister``), then names the region in an input's or the output's
parameters (``shared_memory_region``, ``shared_memory_byte_size``, ``shared_memory_offset``)
instead of sending its bytes. An input is read where it lies (a NumPy view of the mapping, no
copy); the output is written by the kernel straight into the region, and the answer names the
region instead of carrying the bytes.

The region's memory is the client's: it is mapped, never reserved from the memory budget. A
region is mapped once, when it is registered, and stays mapped until it is unregistered and
no request uses it any more: a request holds views of the mapping, and the mapping is closed
when the last of them goes (an unregister while a request runs leaves that request whole).

Registrations are per worker process, as Triton's are per server: with more than one worker a
registration would land on one of them only, so it is refused in any process that is one of
several workers, however they were started (app/v2/siblings.py).

With API keys on, a region belongs to the key that registered it (its label in the keys file):
it is listed, used and unregistered only with that key; to any other it does not exist (the
same answer as an unknown name), and another key may register a region of the same name. The
objects a region may map can be restricted to names with a prefix
(``TENSOR_OPS_SHARED_MEMORY_PREFIX``). CUDA shared memory is refused: the service has no GPU.

Long (some 640 lines) because it is the one module that maps client memory: a region's life
(registered, owned, mapped, closed when the last request's views go) and a request's places in
it (read in place, written in place, checked after the work) hold the same mappings, and their
rules (bounds, alignment, owners, the region cut short under a request) must be read together.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import stat
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from app.codecs.v2_tensors import decode_v2_binary, v2_datatype, wire_dtype
from app.errors import Fault, ServiceError, from_wire, quote
from app.pipeline.jobs import Job
from app.settings import Settings
from app.v2 import shm_guard
from app.v2.rules import (
    INPUT_EXTENSIONS,
    OUTPUT_EXTENSIONS,
    OUTPUT_NAME,
    PARAMETER_FAULT,
    json_kind,
)
from app.v2.siblings import Siblings
from tensor_ops_wire.errors import TensorError

#: Where POSIX shared memory objects live (``shm_open``'s directory on Linux).
SHM_DIR = "/dev/shm"
#: The longest object name (``NAME_MAX``).
NAME_MAX = 255
#: Regions one worker holds registered at once; past it, registration is refused (413).
MAX_REGIONS = 64
#: A region's name: letters, digits and ``_ . : -``, at most 128 of them.
REGION_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
#: The largest register body read (a key, an offset and a size take a few hundred bytes).
REGISTER_BODY_LIMIT = 4096

REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"
PARAMETERS = (REGION, BYTE_SIZE, OFFSET)
#: The extensions refused in an input's and the output's parameters when shared memory is on.
INPUT_EXTENSIONS_ON = {
    name: what for name, what in INPUT_EXTENSIONS.items() if name not in PARAMETERS
}
OUTPUT_EXTENSIONS_ON = {
    name: what for name, what in OUTPUT_EXTENSIONS.items() if name not in PARAMETERS
}
#: What the server metadata lists when shared memory is on.
EXTENSION = "system_shared_memory"

CUDA_REFUSAL = (
    "CUDA shared memory is not offered here: the service has no GPU; use system shared memory "
    "(/v2/systemsharedmemory, gRPC SystemSharedMemory*) from a client on the same host"
)


@dataclass(frozen=True)
class Region:
    """A registered region: ``view`` is its bytes in the mapping (``byte_size`` of them)."""

    name: str
    key: str
    offset: int
    byte_size: int
    view: memoryview
    #: The shared memory object (device, inode): two regions of one object may overlap.
    object_id: tuple[int, int]
    #: The object, open while the region lives (closed when it is collected): its size is
    #: looked at by each request, as a mapping read past the end of its object is a SIGBUS.
    descriptor: int
    #: The mapping's slot in the SIGBUS handler's table: its faults say that the object was
    #: cut short while a request used it (app/v2/shm_guard.py).
    guard: shm_guard.Mapping

    def __post_init__(self) -> None:
        weakref.finalize(self, os.close, self.descriptor)

    def require_whole(self, loc: tuple[str, ...]) -> None:
        """Refuse a region whose object has been cut short since it was registered."""
        self.require_unfaulted(loc)
        size = os.fstat(self.descriptor).st_size
        if size < self.offset + self.byte_size:
            raise refused(
                loc,
                f"shared memory object {quote(self.key)} of region {quote(self.name)} has shrunk "
                f"to {size} bytes since it was registered; register the region again",
            )

    def require_unfaulted(self, loc: tuple[str, ...]) -> None:
        """Refuse a region whose mapping faulted while in use: its mapping holds zeros of the
        worker's own since, not the object's bytes. The object cut short (ftruncate) is the
        common cause; one still whole was refused its pages by the system (tmpfs answers a write
        to a page it has no room for so, when /dev/shm is full)."""
        if self.guard.faults:
            if os.fstat(self.descriptor).st_size >= self.offset + self.byte_size:
                raise refused(
                    loc,
                    f"shared memory object {quote(self.key)} of region {quote(self.name)} could "
                    "not be read or written while a request used it, though it is whole (the "
                    "system's shared memory, /dev/shm, may be full): its bytes are gone from the "
                    "region; make room, then unregister the region and register it again",
                )
            raise refused(
                loc,
                f"shared memory object {quote(self.key)} of region {quote(self.name)} was cut "
                "short while a request used it (ftruncate): its bytes are gone from the region; "
                "unregister the region and register it again",
            )

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


def refused(loc: tuple[str, ...], message: str, kind: Fault = PARAMETER_FAULT) -> ServiceError:
    return ServiceError(kind, loc, message)


def check_region_name(name: str, loc: tuple[str, ...]) -> None:
    """Refuse a region name that is not 1 to 128 letters, digits and ``_ . : -``, or that could
    be read as a path (``.``, ``..``)."""
    if not REGION_NAME.fullmatch(name):
        raise refused(
            loc,
            f"region name {quote(name)} is not 1 to 128 letters, digits and '_', '.', ':', '-'",
        )
    if name in (".", ".."):
        raise refused(loc, f"region name {quote(name)} could be read as a path; name it otherwise")


def object_path(key: str, loc: tuple[str, ...]) -> str:
    """The file of shared memory object ``key`` ("/name" or "name", as ``shm_open`` takes it),
    refused unless it is a plain name: not empty, no "/" after the leading one, no "..", no
    NUL, at most ``NAME_MAX`` bytes."""
    name = key[1:] if key.startswith("/") else key
    problem = None
    if not name:
        problem = "is empty"
    elif ".." in name:
        problem = "contains '..'"
    elif "/" in name:
        problem = "has a '/' after the leading one"
    elif "\0" in name:
        problem = "contains a NUL character"
    elif len(name.encode("utf-8", "surrogateescape")) > NAME_MAX:
        problem = f"is longer than {NAME_MAX} bytes"
    elif name == ".":
        problem = "is '.'"
    if problem is not None:
        raise refused(
            loc,
            f"key {quote(key)} {problem}: it must name a POSIX shared memory object, "
            "'/name' as shm_open takes it",
        )
    return os.path.join(SHM_DIR, name)


def _mapped(
    key: str, offset: int, byte_size: int, loc: tuple[str, ...]
) -> tuple[memoryview, tuple[int, int], int, shm_guard.Mapping]:
    """Bytes ``offset`` to ``offset + byte_size`` of object ``key``, mapped read-write; the
    object's identity, its open descriptor (the caller's to close) and the mapping's guard."""
    path = object_path(key, (*loc, "key"))
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        raise refused(
            (*loc, "key"), f"there is no shared memory object {quote(key)} in {SHM_DIR}"
        ) from None
    except OSError as error:
        raise refused(
            (*loc, "key"),
            f"shared memory object {quote(key)} cannot be opened for reading and writing: "
            f"{error.strerror}",
        ) from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise refused(
                (*loc, "key"), f"{quote(key)} is not a shared memory object (a regular file)"
            )
        if offset + byte_size > info.st_size:
            raise refused(
                (*loc, "byte_size"),
                f"offset {offset} + byte_size {byte_size} passes the end of shared memory "
                f"object {quote(key)}, of {info.st_size} bytes",
            )
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        try:
            mapping = mmap.mmap(
                descriptor,
                byte_size + offset - start,
                mmap.MAP_SHARED,
                mmap.PROT_READ | mmap.PROT_WRITE,
                offset=start,
            )
        except (OSError, ValueError, OverflowError) as error:
            raise refused(
                (*loc, "byte_size"), f"shared memory object {quote(key)} cannot be mapped: {error}"
            ) from None
        try:
            guard = shm_guard.Mapping(mapping)
        except shm_guard.SlotsFullError:
            mapping.close()
            raise refused(
                ("path", "name"),
                f"{shm_guard.SLOTS} shared memory mappings are held (registered, or unregistered "
                "with requests still using them); unregister regions, or wait for requests",
                Fault.TOO_LARGE,
            ) from None
    except BaseException:
        os.close(descriptor)
        raise
    view = memoryview(mapping)[offset - start :]
    return view, (info.st_dev, info.st_ino), descriptor, guard


def _unsigned(value: Any, name: str, loc: tuple[str, ...]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        got = json_kind(value)
    elif value < 0:
        got = "a negative one"
    else:
        return value
    raise refused((*loc, name), f"{name} must be a non-negative integer, got {got}")


#: Who registered a region: the label of the API key (None: keys are off, one owner).
Owner = str | None


class Regions:
    """The regions registered with this worker, by owner and name: one made by ``create_app``,
    handed to the ``/v2`` routes and to the gRPC service, so that a region registered over one
    transport is used over the other (with the same key)."""

    def __init__(self, settings: Settings) -> None:
        self.enabled = settings.shared_memory == "on"
        self.workers = settings.workers
        self.prefix = settings.shared_memory_prefix
        #: The other workers this process may have (claimed at start-up by ``create_app``).
        self.siblings = Siblings(settings.workers)
        self._regions: dict[tuple[Owner, str], Region] = {}
        # Registration runs on the event loop; lookups may run on a decoding thread.
        self._lock = threading.Lock()

    def require_enabled(self) -> None:
        if not self.enabled:
            raise refused(
                (),
                "system shared memory is off here (TENSOR_OPS_SHARED_MEMORY=off); send tensors "
                "in the request",
                Fault.NOT_OFFERED,
            )

    def register(
        self, name: str, key: Any, offset: Any, byte_size: Any, owner: Owner = None
    ) -> None:
        """Map ``byte_size`` bytes of object ``key`` from ``offset`` as region ``name``."""
        loc = ("body",)
        offset, byte_size = self.check_registration(name, key, offset, byte_size, owner)
        view, object_id, descriptor, guard = _mapped(key, offset, byte_size, loc)
        region = Region(name, key, offset, byte_size, view, object_id, descriptor, guard)
        with self._lock:
            self._refuse_taken(owner, name)  # registered meanwhile (the open ran unlocked)
            self._regions[owner, name] = region

    def check_registration(
        self, name: str, key: Any, offset: Any, byte_size: Any, owner: Owner = None
    ) -> tuple[int, int]:
        """Every refusal a registration can get before its object is mapped (several workers, a
        bad name, key, offset or size, a name taken): the transports ask before they install
        the mapping's guard, whose first install compiles it; the offset and size checked."""
        self.require_enabled()
        loc = ("body",)
        check_region_name(name, ("path", "name"))
        several = self.siblings.reason()
        if several is not None:
            raise refused(
                ("path", "name"),
                f"shared memory regions are registered with one worker process, and this one "
                f"is one of several ({several}): a request could reach another worker, which "
                "does not know the region; run the service with one worker "
                "(TENSOR_OPS_WORKERS=1, no --workers) to use shared memory",
                Fault.NOT_OFFERED,
            )
        if not isinstance(key, str):
            raise refused((*loc, "key"), f"key must be a string, got {json_kind(key)}")
        self._require_allowed(key, (*loc, "key"))
        offset = _unsigned(offset, "offset", loc)
        byte_size = _unsigned(byte_size, "byte_size", loc)
        if byte_size == 0:
            raise refused((*loc, "byte_size"), "byte_size must be at least 1")
        with self._lock:
            self._refuse_taken(owner, name)
        return offset, byte_size

    def _require_allowed(self, key: str, loc: tuple[str, ...]) -> None:
        """Refuse an object whose name does not start with TENSOR_OPS_SHARED_MEMORY_PREFIX."""
        name = key[1:] if key.startswith("/") else key
        if self.prefix and not name.startswith(self.prefix):
            raise refused(
                loc,
                f"shared memory object {quote(key)} may not be mapped here: only objects whose "
                f"name starts with {quote(self.prefix)} may (TENSOR_OPS_SHARED_MEMORY_PREFIX)",
            )

    def _refuse_taken(self, owner: Owner, name: str) -> None:
        if (owner, name) in self._regions:
            raise refused(
                ("path", "name"),
                f"a region named {quote(name)} is already registered; unregister it first",
            )
        if len(self._regions) >= MAX_REGIONS:
            raise refused(
                ("path", "name"),
                f"{MAX_REGIONS} regions are registered, as many as a worker holds; unregister "
                "one first",
                Fault.TOO_LARGE,
            )

    def unregister(self, name: str, owner: Owner = None) -> None:
        """Forget ``owner``'s region ``name`` (every one of its regions when empty); an unknown
        name is no error, as in Triton. A request using the region keeps its mapping until it
        ends."""
        self.require_enabled()
        with self._lock:
            if not name:
                for item in [item for item in self._regions if item[0] == owner]:
                    del self._regions[item]
            else:
                self._regions.pop((owner, name), None)

    def status(self, name: str, owner: Owner = None) -> list[dict[str, Any]]:
        """``owner``'s regions (the one named, or all of them when empty)."""
        self.require_enabled()
        with self._lock:
            if not name:
                return [
                    region.status() for (held, _), region in self._regions.items() if held == owner
                ]
            return [self.get(name, ("path", "name"), owner).status()]

    def get(self, name: str, loc: tuple[str, ...], owner: Owner = None) -> Region:
        """``owner``'s region ``name``; another key's is unknown, as a name never registered."""
        region = self._regions.get((owner, name))
        if region is None:
            raise refused(
                loc,
                f"no system shared memory region {quote(name)} is registered here; register "
                "it first",
            )
        return region

    def __len__(self) -> int:
        return len(self._regions)


@dataclass(frozen=True)
class Place:
    """Where a tensor lies in a region: ``byte_size`` bytes from ``offset``."""

    region: Region
    offset: int
    byte_size: int

    def overlaps(self, other: Place, length: int) -> bool:
        """Whether ``length`` bytes here share memory with ``other``'s bytes."""
        if self.region.object_id != other.region.object_id:
            return False
        start = self.region.offset + self.offset
        other_start = other.region.offset + other.offset
        return start < other_start + other.byte_size and other_start < start + length

    def view(self, length: int) -> memoryview:
        return self.region.view[self.offset : self.offset + length]


class SharedTensors:
    """One request's tensors in shared memory: its inputs read from regions, its output's
    place. Parameters are checked against the region before any work."""

    def __init__(self, regions: Regions, owner: Owner = None) -> None:
        self.regions = regions
        #: The key the request came with: only its regions are seen.
        self.owner = owner
        self.inputs: list[tuple[str, Place]] = []
        self.output: Place | None = None
        #: An op of several outputs (Split-1): each output's name and place, in order.
        self.several: list[tuple[str, Place]] = []
        #: Bytes the service made of inputs in shared memory (BOOL bytes other than 0 and 1
        #: are copied as 1s): reserved with the output.
        self.copied_bytes = 0

    def place(self, parameters: Mapping[str, Any], loc: tuple[str, ...]) -> Place | None:
        """The place the parameters name (None when they name none), checked to lie in it."""
        if not parameters:  # most tensors: no parameters at all
            return None
        given = [name for name in PARAMETERS if name in parameters]
        if not given:
            return None
        if REGION not in parameters:
            raise refused((*loc, given[0]), f"{given[0]} goes with {REGION}, which is missing")
        name = parameters[REGION]
        if not isinstance(name, str):
            raise refused((*loc, REGION), f"{REGION} must be a string, got {json_kind(name)}")
        if BYTE_SIZE not in parameters:
            raise refused((*loc, BYTE_SIZE), f"{BYTE_SIZE} is missing: {REGION} needs it")
        byte_size = _unsigned(parameters[BYTE_SIZE], BYTE_SIZE, loc)
        offset = _unsigned(parameters.get(OFFSET, 0), OFFSET, loc)
        region = self.regions.get(name, (*loc, REGION), self.owner)
        region.require_whole((*loc, REGION))
        if offset + byte_size > region.byte_size:
            raise refused(
                (*loc, BYTE_SIZE),
                f"{OFFSET} {offset} + {BYTE_SIZE} {byte_size} passes the end of region "
                f"{quote(name)}, of {region.byte_size} bytes",
            )
        return Place(region, offset, byte_size)

    def input(
        self,
        name: str,
        parameters: Mapping[str, Any] | None,
        shape: list[int],
        datatype: str,
        carried: str | None,
    ) -> npt.NDArray[Any] | None:
        """Input ``name`` read from its region (a view, no copy), or None when it names none.
        ``carried``: what else the request carries it in, if anything (refused beside it)."""
        if not parameters:  # most tensors: no parameters at all
            return None
        loc = ("body", name, "parameters")
        place = self.place(parameters, loc)
        if place is None:
            return None
        if carried is not None:
            raise refused(
                ("body", name),
                f"has both {REGION} and {carried}; give the tensor one way",
            )
        try:
            array = decode_v2_binary(place.view(place.byte_size), shape, datatype, BYTE_SIZE)
        except TensorError as error:
            raise from_wire(error, name) from None
        _require_aligned(place, array.dtype, (*loc, OFFSET))
        # canonical_bools makes a copy of BOOL bytes other than 0 and 1: the service's memory.
        if (
            array.dtype.kind == "b"
            and array.size
            and not np.shares_memory(array, np.frombuffer(place.view(place.byte_size), np.uint8))
        ):
            self.copied_bytes += array.nbytes
        self.inputs.append((name, place))
        return array

    def place_output(self, outputs: Iterable[tuple[str, Mapping[str, Any]]], job: Job) -> bool:
        """Whether the output goes to a region (the first entry of it that says where); if so,
        refuse now, before any work, an output that does not fit there or that would write
        over an input."""
        if job.split is not None:
            return self._place_several(outputs, job)
        loc = ("body", OUTPUT_NAME, "parameters")
        for name, parameters in outputs:
            if name == OUTPUT_NAME:
                place = self.place(parameters, loc)
                if place is not None:
                    break
        else:
            return False
        needed = job.output_bytes
        if needed > place.byte_size:
            raise refused(
                (*loc, BYTE_SIZE),
                f"{BYTE_SIZE} {place.byte_size} is too small: the output takes {needed} bytes "
                f"(shape {list(job.output_shape)}, {v2_datatype(job.output_dtype)})",
            )
        _require_aligned(place, job.output_dtype, (*loc, OFFSET))
        for input_name, input_place in self.inputs:
            if place.overlaps(input_place, needed):
                raise refused(
                    (*loc, REGION),
                    f"the output's {needed} bytes overlap input {input_name!r} in shared "
                    "memory; give the output a place of its own",
                )
        self.output = place
        return True

    def _place_several(self, outputs: Iterable[tuple[str, Mapping[str, Any]]], job: Job) -> bool:
        """``place_output`` for an op of several outputs: every output in a region of its own,
        or none (the answer carries them all)."""
        places: dict[str, Place] = {}
        for name, parameters in outputs:
            if name not in places:
                place = self.place(parameters, ("body", name, "parameters"))
                if place is not None:
                    places[name] = place
        if not places:
            return False
        taken: list[tuple[str, Place, int]] = []
        for name, shape, dtype in zip(
            job.output_names, job.output_shapes, job.output_dtypes, strict=True
        ):
            loc = ("body", name, "parameters")
            place = places.get(name)
            if place is None:
                raise refused(
                    loc,
                    f"output {name!r} has no region, where another output has one; give every "
                    "output of the request a region of its own, or none",
                )
            needed = math.prod(shape) * dtype.itemsize
            if needed > place.byte_size:
                most = " at most" if job.split is not None and job.split.bounded else ""
                raise refused(
                    (*loc, BYTE_SIZE),
                    f"{BYTE_SIZE} {place.byte_size} is too small: output {name!r} takes{most} "
                    f"{needed} bytes (shape {list(shape)}, {v2_datatype(dtype)})",
                )
            _require_aligned(place, dtype, (*loc, OFFSET))
            for other_name, other_place in self.inputs:
                if place.overlaps(other_place, needed):
                    raise refused(
                        (*loc, REGION),
                        f"output {name!r}'s {needed} bytes overlap input {other_name!r} in shared "
                        "memory; give the output a place of its own",
                    )
            for other_name, other_place, other_needed in taken:
                if place.overlaps(other_place, needed) or other_place.overlaps(place, other_needed):
                    raise refused(
                        (*loc, REGION),
                        f"output {name!r}'s {needed} bytes overlap output {other_name!r}; give "
                        "each output a place of its own",
                    )
            taken.append((name, place, needed))
        self.several = [(name, place) for name, place, _ in taken]
        return True

    def run_several(self, job: Job) -> list[tuple[str, tuple[int, ...], str, dict[str, Any]]]:
        """Run an op of several outputs into their regions; each output's name, shape, V2
        datatype and parameters for the answer."""
        answered = []
        for (name, place), output in zip(self.several, job.outputs(), strict=True):
            if output.nbytes:
                dtype = wire_dtype(output.dtype)
                target = np.frombuffer(place.view(output.nbytes), dtype).reshape(output.shape)
                np.copyto(target, output, casting="equiv")
            parameters: dict[str, Any] = {REGION: place.region.name, BYTE_SIZE: output.nbytes}
            if place.offset:
                parameters[OFFSET] = place.offset
            answered.append((name, output.shape, v2_datatype(output.dtype), parameters))
        return answered

    def verify(self) -> None:
        """Refuse the request, once run, if an object it read or wrote was cut short meanwhile
        (its bytes were zeros of the worker's then: the answer would mean nothing)."""
        if not self.inputs and self.output is None and not self.several:
            return  # nothing of the request was in shared memory
        places = [(("body", name, "parameters", REGION), place) for name, place in self.inputs]
        if self.output is not None:
            places.append((("body", OUTPUT_NAME, "parameters", REGION), self.output))
        places += [(("body", name, "parameters", REGION), place) for name, place in self.several]
        for loc, place in places:
            place.region.require_unfaulted(loc)

    def output_array(self, job: Job) -> npt.NDArray[Any]:
        """The output's place in its region, as an array for the kernel to write into."""
        assert self.output is not None
        dtype = wire_dtype(job.output_dtype)
        view = self.output.view(job.output_bytes)
        if not job.output_bytes:
            return np.empty(job.output_shape, dtype)
        return np.frombuffer(view, dtype).reshape(job.output_shape)

    def run(self, job: Job) -> dict[str, Any]:
        """Run the job into the output's region; the output's parameters for the answer."""
        assert self.output is not None
        # A refused request leaves the client's region as it was: a check the plan left to
        # the kernel is made before it writes there.
        job.output(self.output_array(job), checked_first=True)
        parameters: dict[str, Any] = {REGION: self.output.region.name, BYTE_SIZE: job.output_bytes}
        if self.output.offset:
            parameters[OFFSET] = self.output.offset
        return parameters


#: What ``decoded_checked``'s stage makes: a job, or an answer.
_Made = TypeVar("_Made")


def decoded_checked(shared: SharedTensors | None, decode: Callable[[], _Made]) -> _Made:
    """``decode()`` (decoding, or a run whose kernel makes checks the plan left to it); a
    refusal it raises gives way to the region's own when an object the request read was cut
    short meanwhile (the zeros mapped in its place, not the client's values, broke the check
    that refused it)."""
    try:
        return decode()
    except ServiceError:
        if shared is not None:
            shared.verify()
        raise


def _require_aligned(place: Place, dtype: np.dtype[Any], loc: tuple[str, ...]) -> None:
    start = place.region.offset + place.offset
    if start % dtype.itemsize:
        raise refused(
            loc,
            f"the tensor starts at byte {start} of its shared memory object, not a multiple of "
            f"its {dtype.itemsize}-byte elements ({v2_datatype(dtype)}); align it",
        )


def server_extensions(regions: Regions) -> list[str]:
    """The extension the server metadata lists for shared memory (none when off)."""
    return [EXTENSION] if regions.enabled else []


def new_request(regions: Regions, owner: Owner = None) -> SharedTensors | None:
    """A request's shared tensors (``owner``'s regions), or None when shared memory is off."""
    return SharedTensors(regions, owner) if regions.enabled else None
