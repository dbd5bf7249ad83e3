"""Case files: one ``.npz`` holding an op's inputs, attributes and a candidate's outputs.

The layout (docs/verify.md), which is also the ``.npz`` body of ``POST /verify/{op}``:

- ``input.<name>.npy``: each input of the op, by the op's input name (``input.data``);
- ``output.<name>.npy``: each candidate output, by the op's output name (``output.output``,
  ``output.output_0``...);
- ``meta.npy`` (optional in a request body): a 1-D ``uint8`` array holding UTF-8 JSON,
  ``{"format": "tensor-ops-case/1", "op": NAME, "version": "8", "attributes": {...},
  "tolerance": {...}, "device_error": "...", "dtypes": {"input.data": "bfloat16", ...}}``.
  ``dtypes`` names each member's element type, which is how a bfloat16 member (written as
  2-byte ``<u2`` elements, as every ``.npy`` of bfloat16 is) is read back as bfloat16;
  ``version`` (the op's opset version) and ``device_error`` (what a device that failed did)
  are there when given. It is at most ``META_LIMIT`` bytes, checked on the archive's directory
  before it is read: JSON's objects cost many times its text, and it is never counted.

Every member is a plain ``.npy`` that ``np.load`` reads with ``allow_pickle=False``; nothing is
ever unpickled.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec

import numpy as np
import numpy.typing as npt

from tensor_ops_wire.dtypes import (
    BFLOAT16,
    UnknownDTypeError,
    dtype_from_name,
    element_type_of,
    shown,
)
from tensor_ops_wire.errors import TensorError, WireFault, unacceptable, undecodable
from tensor_ops_wire.npz import Pieces, decode_npz, member_names, member_size, npz_pieces

P = ParamSpec("P")

FORMAT = "tensor-ops-case/1"
INPUT, OUTPUT, META = "input.", "output.", "meta"
_META_KEYS = frozenset(
    {"format", "op", "version", "attributes", "tolerance", "device_error", "dtypes"}
)
#: The largest ``meta`` member, its ``.npy`` header included: an op's name and attributes, a
#: tolerance, a device's error and one type name per member fit many times over.
META_LIMIT = 64 * 1024
#: The longest ``device_error`` a case keeps (a longer one is cut, its length said).
DEVICE_ERROR_LIMIT = 4096
_LAYOUT = ("input.<name>", "output.<name>", "meta")


@dataclass
class WireCase:
    """What a case file (or a verify request's ``.npz`` body) holds."""

    op: str | None
    inputs: dict[str, npt.NDArray[Any]]
    outputs: dict[str, npt.NDArray[Any]]
    attributes: dict[str, Any] = field(default_factory=dict)
    #: The tolerance's JSON form, or None (bit-equal).
    tolerance: Any = None
    #: What the device did instead of answering (it crashed, refused...), or None.
    device_error: str | None = None
    #: The op's version (its opset's, as a string), or None: the newest.
    version: str | None = None


def _type_name(dtype: np.dtype[Any]) -> str:
    try:
        return element_type_of(dtype).numpy
    except UnknownDTypeError:
        return dtype.str


def case_pieces(
    op: str,
    inputs: Mapping[str, npt.ArrayLike],
    outputs: Mapping[str, npt.ArrayLike],
    attributes: Mapping[str, Any] | None = None,
    tolerance: Any = None,
    *,
    device_error: str | None = None,
    version: str | None = None,
) -> Pieces:
    """A case file (an uncompressed ``.npz``) as pieces, the arrays' data viewed in place
    (``npz_pieces``); refuses (ValueError) an element type no case can carry, or a meta beyond
    ``META_LIMIT``."""
    members: dict[str, npt.NDArray[Any]] = {}
    dtypes: dict[str, str] = {}
    for prefix, arrays in ((INPUT, inputs), (OUTPUT, outputs)):
        for name, given in arrays.items():
            array = np.asarray(given)
            if array.dtype.hasobject or array.dtype.kind not in "biufV":
                raise ValueError(f"{prefix}{name}: element type {array.dtype} cannot be written")
            members[prefix + name] = array
            dtypes[prefix + name] = _type_name(array.dtype)
    meta: dict[str, Any] = {"format": FORMAT, "op": op}
    if version is not None:
        meta["version"] = str(version)
    meta["attributes"] = dict(attributes or {})
    if tolerance is not None:
        meta["tolerance"] = tolerance
    if device_error is not None:
        meta["device_error"] = _cut_device_error(str(device_error))
    meta["dtypes"] = dtypes
    text = json.dumps(meta, separators=(",", ":")).encode()
    if len(text) > META_LIMIT - 128:  # the .npy header's room
        raise ValueError(f"meta: {len(text)} bytes of JSON, more than a case holds ({META_LIMIT})")
    members[META] = np.frombuffer(text, dtype=np.uint8)
    return npz_pieces(members)


def _joined(make: Callable[P, Pieces], name: str) -> Callable[P, bytes]:
    def joined(*args: P.args, **kwargs: P.kwargs) -> bytes:
        return bytes(make(*args, **kwargs))

    joined.__name__ = joined.__qualname__ = name
    joined.__doc__ = f"The bytes of ``{make.__name__}``'s pieces, joined (its rules, refusals)."
    return joined


encode_case = _joined(case_pieces, "encode_case")


def _cut_device_error(text: str) -> str:
    if len(text) <= DEVICE_ERROR_LIMIT:
        return text
    return f"{text[:DEVICE_ERROR_LIMIT]}... ({len(text)} characters)"


def decode_case(body: bytes | bytearray | memoryview, *, max_bytes: int) -> WireCase:
    """The parts of a case file, each member read without pickle; ``TensorError`` (located at
    the member) for an archive that is not one."""
    names = member_names(body, _LAYOUT)
    for name in names:
        if name != META and not (
            (name.startswith(INPUT) and len(name) > len(INPUT))
            or (name.startswith(OUTPUT) and len(name) > len(OUTPUT))
        ):
            raise TensorError(
                f".npz member {shown(name)} is none of input.<name>, output.<name>, meta",
                WireFault.UNEXPECTED,
                field=name,
            )
    if META in names:
        size = member_size(body, META)
        if size > META_LIMIT:
            raise TensorError(
                f"meta: {size} bytes, more than a case's meta holds ({META_LIMIT})",
                WireFault.TOO_LARGE,
                "meta",
            )
    arrays = decode_npz(body, names, max_bytes=max_bytes)
    meta = _meta(arrays.pop(META, None))
    dtypes = meta.get("dtypes", {})
    if not isinstance(dtypes, dict):
        raise TensorError("meta: dtypes must be an object", WireFault.UNACCEPTABLE, "meta")
    for name, type_name in dtypes.items():
        if name not in arrays:
            raise TensorError(
                f"meta: dtypes names {shown(name)}, which is no member",
                WireFault.UNEXPECTED,
                "meta",
            )
        arrays[name] = _settle(arrays[name], type_name, name)
    op = meta.get("op")
    attributes = meta.get("attributes", {})
    if op is not None and not isinstance(op, str):
        raise TensorError("meta: op must be a string", WireFault.UNACCEPTABLE, "meta")
    if not isinstance(attributes, dict):
        raise TensorError("meta: attributes must be an object", WireFault.UNACCEPTABLE, "meta")
    device_error = meta.get("device_error")
    if device_error is not None and not isinstance(device_error, str):
        raise TensorError("meta: device_error must be a string", WireFault.UNACCEPTABLE, "meta")
    version = meta.get("version")
    if version is not None and not (isinstance(version, str) and version.isdigit()):
        raise TensorError(
            'meta: version must be a string of digits ("8")', WireFault.UNACCEPTABLE, "meta"
        )
    return WireCase(
        op,
        {name[len(INPUT) :]: a for name, a in arrays.items() if name.startswith(INPUT)},
        {name[len(OUTPUT) :]: a for name, a in arrays.items() if name.startswith(OUTPUT)},
        attributes,
        meta.get("tolerance"),
        device_error,
        version,
    )


def _meta(array: npt.NDArray[Any] | None) -> dict[str, Any]:
    if array is None:
        return {}
    if array.dtype != np.uint8 or array.ndim != 1:
        raise TensorError(
            "meta must be a 1-D uint8 array of UTF-8 JSON", WireFault.UNACCEPTABLE, "meta"
        )
    try:
        meta = json.loads(array.tobytes())
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested beyond reason
        raise TensorError("meta is not UTF-8 JSON", WireFault.UNDECODABLE, "meta") from None
    if not isinstance(meta, dict):
        raise TensorError("meta must be a JSON object", WireFault.UNACCEPTABLE, "meta")
    unknown = sorted(set(meta) - _META_KEYS)
    if unknown:
        raise TensorError(
            f"meta: {shown(unknown[0])} is not a key of it ({', '.join(sorted(_META_KEYS))})",
            WireFault.UNEXPECTED,
            "meta",
        )
    return meta


def _settle(array: npt.NDArray[Any], type_name: object, member: str) -> npt.NDArray[Any]:
    """``array`` as the element type ``meta`` names: its own, or bfloat16 over 2-byte data."""
    try:
        dtype = dtype_from_name(type_name) if isinstance(type_name, str) else None
    except UnknownDTypeError:
        dtype = None
    if dtype is None:
        error = undecodable(f"meta: dtypes gives {member} an unknown type {shown(type_name)}")
        error.field = "meta"
        raise error
    if dtype == BFLOAT16 and array.dtype.itemsize == 2 and array.dtype.kind in "uiV":
        if not array.dtype.isnative and array.dtype.kind != "V":
            array = array.astype(array.dtype.newbyteorder("="))
        return array.view(BFLOAT16)
    if array.dtype.newbyteorder("=") != dtype:
        refused = unacceptable(
            f"meta: dtypes gives {member} type {dtype.name}, but it holds {array.dtype.str}"
        )
        refused.field = member
        raise refused
    return array
