"""What a ``ModelInfer`` message's head was found to ask for, kept by the head's bytes
(``HeadCache``): a client's small calls repeat their head (model, inputs' names, types and
shapes, parameters) call after call, and its checks against the op's declaration give the same
answer each time."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.codecs.v2_tensors import decode_v2_binary, element_count, v2_dtype, wire_dtype
from app.pipeline.jobs import Limits
from app.registry import Op
from tensor_ops_wire.dtypes import canonical_bools
from tensor_ops_wire.grpc_v2.framing import RAW_INPUT_FIELD, FramingError, fields

#: protobuf's wire type of a length-delimited field (a raw entry's).
LENGTH_DELIMITED = 2

#: Heads up to this many bytes, of up to this many inputs and outputs each, are kept (a small
#: call's: names, shapes, a few parameters).
LARGEST_HEAD = 4096
MOST_TENSORS = 16
#: At most this many heads, and this many bytes of them, are kept per worker.
MOST_HEADS = 256
MOST_HEAD_BYTES = 2 * 1024 * 1024
#: What an entry holds beside its key's bytes, at most: the objects of 16 inputs and 16
#: outputs (names, shapes, parameters' dictionaries), counted against ``MOST_HEAD_BYTES``; the
#: parameters' values are counted as twice the key's bytes.
ENTRY_BYTES = 8192


@dataclass(frozen=True, slots=True)
class InputHead:
    """An input as the head declares it: name, shape and datatype; its contents are the
    message's raw contents at the same index, of ``nbytes`` bytes of ``wire`` elements (what
    ``decode_v2_binary`` works out of the shape and datatype)."""

    name: str
    shape: tuple[int, ...]
    datatype: str
    wire: np.dtype[Any]
    nbytes: int
    #: Whether its elements are bools (whose bytes other than 0 and 1 are made 1).
    bools: bool = False
    #: Whether the raw contents, read as a flat array, have the shape already (one dimension).
    flat: bool = False

    @classmethod
    def of(cls, name: str, shape: tuple[int, ...], datatype: str) -> InputHead:
        """An input whose datatype and shape were accepted (``decode_v2_binary`` passed)."""
        dtype = v2_dtype(datatype)
        nbytes = element_count(list(shape), dtype) * dtype.itemsize
        bools = dtype.kind == "b"
        return cls(name, shape, datatype, wire_dtype(dtype), nbytes, bools, len(shape) == 1)

    def decoded(self, chunk: bytes | memoryview) -> npt.NDArray[Any]:
        """The input from its raw contents, as ``decode_v2_binary`` makes it (which refuses
        contents of another length, in its words)."""
        if len(chunk) != self.nbytes:
            return decode_v2_binary(chunk, list(self.shape), self.datatype, "its raw contents")
        array = np.frombuffer(chunk, dtype=self.wire)
        if self.bools:
            array = canonical_bools(array)
        return array if self.flat else array.reshape(self.shape)


@dataclass(frozen=True, slots=True)
class Head:
    """A head that passed every check that reads the head alone: the model is served, the
    parameters and outputs are ones it takes, each input is one of the op's, given once,
    without an extension's parameters, with a shape within the limits, and every input the op
    requires is there. What reads the values (decoding each raw entry, the spec's checks in
    ``make_job``, the answer's size) runs on every call."""

    op: Op
    #: Whether the answer goes as raw contents (``wants_binary``).
    raw_output: bool
    #: The op's attributes from the parameters, defaults filled in: copied for each call.
    attributes: Mapping[str, Any]
    inputs: tuple[InputHead, ...]
    #: The outputs the message names, with their parameters, in order.
    outputs: tuple[tuple[str, Mapping[str, Any]], ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """A small message's bytes around its raw contents, once its head was found kept: a
    message of the same length whose every other byte is the same (``pieces``) has the same
    head, id included, and its raw contents at the same places (``raws``). Such a message needs
    neither protobuf's parse nor the head's key to be made (``HeadCache.match``)."""

    size: int
    #: Each stretch of the message outside the raw contents: (where it starts, its bytes).
    pieces: tuple[tuple[int, bytes], ...]
    #: Where each raw entry's contents start and end, in order.
    raws: tuple[tuple[int, int], ...]
    #: The message parsed, without its raw contents (its model, version and id).
    request: Any
    key: HeadKey
    shared_off: bool
    limits: Limits

    @classmethod
    def of(cls, message: bytes, request: Any, key: HeadKey, limits: Limits) -> Layout | None:
        """The layout of ``message`` (parsed as ``request``, whose raw contents were cleared),
        or None when its raw entries are not the ones protobuf read."""
        pieces: list[tuple[int, bytes]] = []
        raws: list[tuple[int, int]] = []
        position = 0
        piece_start = 0
        try:
            for number, wire_type, entry, payload in fields(message):
                end = position + len(entry)
                if number == RAW_INPUT_FIELD and wire_type == LENGTH_DELIMITED:
                    start = end - len(payload)
                    pieces.append((piece_start, message[piece_start:start]))
                    raws.append((start, end))
                    piece_start = end
                position = end
        except FramingError:
            return None
        if len(raws) != key[1]:
            return None
        if piece_start < len(message):
            pieces.append((piece_start, message[piece_start:]))
        return cls(len(message), tuple(pieces), tuple(raws), request, key, key[2], limits)


#: A head's bytes (a ``ModelInferRequest`` without its raw contents and its id, serialised
#: deterministically),
#: how many raw entries came with it, whether shared memory was off, and the limits it met
#: (rank, output bytes, dimension).
HeadKey = tuple[bytes, int, bool, int, int, int]


def head_key(head: bytes, raw_entries: int, shared_off: bool, limits: Limits) -> HeadKey:
    """The key of a head: everything its checks read."""
    return (
        head,
        raw_entries,
        shared_off,
        limits.max_rank,
        limits.max_output_bytes,
        limits.max_dimension,
    )


class HeadCache:
    """Heads that passed their checks, by their key, the least recently used dropped first;
    bounded in entries and bytes. Only a head whose every check passed is kept: a refusal is
    never remembered, and its next call is checked afresh. Safe from several threads (a large
    message is decoded off the event loop)."""

    def __init__(self, most: int = MOST_HEADS, most_bytes: int = MOST_HEAD_BYTES) -> None:
        self.most = most
        self.most_bytes = most_bytes
        self.held_bytes = 0
        self.entries: OrderedDict[HeadKey, Head] = OrderedDict()
        self.lock = threading.Lock()
        #: Layouts of small messages whose head is kept, by the messages' length: at most
        #: one for each head and length, and ``most`` in all.
        self.layouts: dict[int, list[Layout]] = {}
        self.layout_count = 0

    @staticmethod
    def cost(key: HeadKey) -> int:
        """The bytes an entry is counted as holding: its key's, and what it keeps of them."""
        return 3 * len(key[0]) + ENTRY_BYTES

    def get(self, key: HeadKey) -> Head | None:
        """The head kept under ``key``, if any (it becomes the most recently used)."""
        with self.lock:
            head = self.entries.get(key)
            if head is not None:
                self.entries.move_to_end(key)
            return head

    def put(self, key: HeadKey, head: Head) -> None:
        """Keep ``head`` (whose every check passed) under ``key``, unless it is too large."""
        if len(key[0]) > LARGEST_HEAD or max(len(head.inputs), len(head.outputs)) > MOST_TENSORS:
            return
        cost = self.cost(key)
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return
            self.entries[key] = head
            self.held_bytes += cost
            while len(self.entries) > self.most or self.held_bytes > self.most_bytes:
                dropped, _ = self.entries.popitem(last=False)
                self.held_bytes -= self.cost(dropped)

    def match(
        self, message: bytes, shared_off: bool, limits: Limits
    ) -> tuple[Head, Any, list[bytes]] | None:
        """The kept head of a small ``message`` laid out as one seen before (``Layout``), the
        message's request without its raw contents, and its raw contents; None: the message
        is parsed and its head's key made."""
        candidates = self.layouts.get(len(message))
        if not candidates:
            return None
        for layout in candidates:
            if layout.shared_off is not shared_off or layout.limits != limits:
                continue
            for start, piece in layout.pieces:
                if not message.startswith(piece, start):  # compared in place, no slice made
                    break
            else:
                # Kept still (else the message is checked in full, and its head kept again).
                head = self.get(layout.key)
                if head is None:
                    return None
                return head, layout.request, [message[start:end] for start, end in layout.raws]
        return None

    def keep_layout(self, message: bytes, request: Any, key: HeadKey, limits: Limits) -> None:
        """Keep the layout of ``message``, whose head was found kept under ``key``, unless
        one of that head and length is kept already (a client that gives each call its own
        id has a layout per call: its messages are parsed)."""
        candidates = self.layouts.get(len(message), [])
        if any(layout.key == key for layout in candidates) or len(candidates) >= _LAYOUTS_A_SIZE:
            return
        layout = Layout.of(message, request, key, limits)
        if layout is None:
            return
        with self.lock:
            # Again under the lock: two threads may have found no layout of this head at once.
            candidates = self.layouts.get(len(message), [])
            if any(kept.key == key for kept in candidates) or len(candidates) >= _LAYOUTS_A_SIZE:
                return
            if self.layout_count >= min(self.most, MOST_LAYOUTS):
                self.layouts.clear()
                self.layout_count = 0
            self.layouts.setdefault(len(message), []).append(layout)
            self.layout_count += 1

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.held_bytes = 0
            self.layouts.clear()
            self.layout_count = 0


#: Layouts kept for messages of one length, at most; and in all (each holds a head's bytes
#: and its parsed request: a few KiB at most).
_LAYOUTS_A_SIZE = 4
MOST_LAYOUTS = 64

#: The worker's heads: one cache for every call and stream of the process.
HEADS = HeadCache()
