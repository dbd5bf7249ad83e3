"""The one error root of the service: a fault kind (which fixes the status), a location, a message.

Kernels raise ``SpecError`` and the wire codecs ``TensorError``; both are mapped to a
``ServiceError`` here and nowhere else. Each transport renders a ``ServiceError`` once, in its
own shape (FastAPI's ``detail`` list, V2's ``{"error"}``, a gRPC status).
"""

import difflib
import logging
import re
import traceback
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from app.ops.errors import SpecError
from tensor_ops_wire.errors import FAULT_STATUS, TensorError, WireFault

LOG = logging.getLogger("tensor_ops.errors")

#: A location: where in the request the fault is (``("body", "axes")``, ``("query", "dtype")``).
Loc = tuple[str | int, ...]

#: Client-supplied text quoted in a message is cut to this many characters.
QUOTE_LIMIT = 64
#: At most this many problems are told in one answer; the rest are counted, not listed (a body
#: of a million bad fields must not get a million lines back, nor cost a million objects).
PROBLEM_LIMIT = 10


class Fault(StrEnum):
    """Every kind of fault a request can have; the kind alone fixes the HTTP status."""

    # 400: the request cannot be read
    JSON_INVALID = "json_invalid"
    TENSOR_DECODE = "tensor_decode"
    BAD_HEADER = "bad_header"
    BAD_ENCODING = "bad_encoding"
    BAD_LENGTH = "bad_length"
    DISCONNECTED = "disconnected"
    BAD_PARAMETER = "bad_parameter"
    #: A protocol extension this service does not offer (gRPC: UNIMPLEMENTED).
    NOT_OFFERED = "not_offered"
    # 401: no valid key
    UNAUTHENTICATED = "unauthenticated"
    # 404: no such model or route
    NOT_FOUND = "not_found"
    # 405: a method the route does not take
    METHOD_NOT_ALLOWED = "method_not_allowed"
    # 408: the body did not arrive in time
    TIMEOUT = "timeout"
    # 413: over a size limit
    TOO_LARGE = "too_large"
    # 415: a content type or encoding the route does not take
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    # 422: readable, but breaks the contract or the spec
    MISSING_INPUT = "missing"
    UNKNOWN_INPUT = "extra_forbidden"
    INVALID_FIELD = "invalid_field"
    TENSOR_TYPE = "tensor_type"
    SPEC_VIOLATION = "spec_violation"
    NOT_JSON = "not_json"
    # 503: the memory budget is busy, or the service is shutting down
    BUSY = "busy"
    SHUTTING_DOWN = "shutting_down"
    # 500: a bug
    INTERNAL = "internal"

    @property
    def status(self) -> int:
        return _STATUS[self]


#: Each kind's status, from the wire's table (the client reads the same one).
_STATUS: dict[Fault, int] = {kind: FAULT_STATUS[kind.value] for kind in Fault}

_FROM_WIRE = {
    WireFault.UNDECODABLE: Fault.TENSOR_DECODE,
    WireFault.UNACCEPTABLE: Fault.TENSOR_TYPE,
    WireFault.TOO_LARGE: Fault.TOO_LARGE,
    WireFault.MISSING: Fault.MISSING_INPUT,
    WireFault.UNEXPECTED: Fault.UNKNOWN_INPUT,
}


class ClientKey(str):
    """A part of a location that is the client's own text, not one of the service's names (a
    candidate's output name, a tolerance key it made up): shown in the refusal, one element
    however it is spelled, and never logged as a field."""

    __slots__ = ()


class Problem:
    """One broken rule: its kind, where it is, and what it says."""

    __slots__ = ("kind", "loc", "msg")

    def __init__(self, kind: Fault, loc: Sequence[str | int], msg: str) -> None:
        self.kind = kind
        self.loc: Loc = tuple(_cut(part) for part in loc)
        self.msg = msg

    def as_item(self) -> dict[str, Any]:
        """FastAPI's shape of one error; ``type`` is the kind, the same on every transport."""
        return {"loc": list(self.loc), "msg": self.msg, "type": self.kind.value}

    @property
    def field(self) -> str:
        """Where the problem is, dotted, without the part of the request (``"axes"``,
        ``"parameters.batch_dims"``); ``""`` for the request as a whole."""
        return ".".join(str(part) for part in self.loc if part not in ("body", "header", "query"))

    def in_words(self) -> str:
        """The problem as one line: ``"axes: axis 3 is out of range ..."``."""
        where = self.field
        return f"{where}: {self.msg}" if where else self.msg


class ServiceError(Exception):
    """A refused request: one or more problems, the first one's kind fixing the status."""

    def __init__(
        self,
        kind: Fault,
        loc: Sequence[str | int],
        msg: str,
        *,
        headers: dict[str, str] | None = None,
        more: Sequence[Problem] = (),
    ) -> None:
        super().__init__(msg)
        self.problems = [Problem(kind, loc, msg), *more]
        self.headers = headers or {}

    @classmethod
    def of(cls, problems: Sequence[Problem], total: int | None = None) -> "ServiceError":
        """The problems as one error: the first ``PROBLEM_LIMIT`` of them, and a last line that
        counts the rest (of ``total``, when more were found than are given)."""
        total = max(len(problems), total or 0)
        if total > PROBLEM_LIMIT:
            last = problems[PROBLEM_LIMIT - 1]
            problems = [
                *problems[: PROBLEM_LIMIT - 1],
                Problem(last.kind, last.loc[:1], f"and {total - PROBLEM_LIMIT + 1} more problems"),
            ]
        first, *rest = problems
        error = cls(first.kind, first.loc, first.msg, more=rest)
        error.problems[0] = first
        return error

    @property
    def kind(self) -> Fault:
        return self.problems[0].kind

    @property
    def status(self) -> int:
        return self.kind.status

    @property
    def message(self) -> str:
        """Every problem in words, joined: the text of ``{"error"}`` and of a gRPC status."""
        return "; ".join(problem.in_words() for problem in self.problems)


#: The fault's kind and field of a /v2 refusal (the ``type`` and ``loc`` of the plain routes'
#: items), as gRPC's trailing metadata carries them.
FAULT_HEADER = "Tensor-Ops-Fault"
FIELD_HEADER = "Tensor-Ops-Field"


def fault_headers(error: "ServiceError") -> dict[str, str]:
    """The kind and, when the fault is in one field, the field of a refusal (HTTP headers
    and gRPC trailing metadata alike)."""
    first = error.problems[0]
    headers = {FAULT_HEADER: first.kind.value}
    if first.field and first.field.isascii() and first.field.isprintable():
        headers[FIELD_HEADER] = first.field
    return headers


#: A field is logged only in these characters: the names the service gives its inputs,
#: attributes, headers and parameters, never a client's words.
_LOGGED_FIELD = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def logged_fault(problem: Problem) -> tuple[str, str | None]:
    """A refusal's fault kind and field as its access line may show them: the field only where
    it is one of the service's names (an unknown field's name is the client's own text), and
    only up to the first of its parts that is the client's (``ClientKey``)."""
    loc = problem.loc
    for index, part in enumerate(loc):
        if isinstance(part, ClientKey):
            loc = loc[:index]
            break
    field = ".".join(str(part) for part in loc if part not in ("body", "header", "query"))
    if problem.kind is Fault.UNKNOWN_INPUT or not _LOGGED_FIELD.fullmatch(field):
        return problem.kind.value, None
    return problem.kind.value, field


def quote(text: str) -> str:
    """``text`` as a message may show it: cut to a short prefix, its full length said."""
    if len(text) <= QUOTE_LIMIT:
        return repr(text)
    return f"{text[:QUOTE_LIMIT]!r}... ({len(text)} characters)"


def _cut(part: str | int) -> str | int:
    # A location may hold a client's key (an unknown field): never more than a short prefix.
    if isinstance(part, str) and len(part) > QUOTE_LIMIT:
        cut = f"{part[:QUOTE_LIMIT]}... ({len(part)} characters)"
        return ClientKey(cut) if isinstance(part, ClientKey) else cut
    return part


def from_spec(error: SpecError) -> ServiceError:
    """An input that breaks the op's spec: 422, located at that input."""
    return ServiceError(Fault.SPEC_VIOLATION, ("body", error.field), error.message)


def from_wire(error: TensorError, field: str | None) -> ServiceError:
    """A codec's fault, located at its input (or at the field that held it, or at the body)."""
    where = error.field or field
    loc = ("body", where) if where else ("body",)
    return ServiceError(_FROM_WIRE[error.kind], loc, error.message)


_PYDANTIC_KINDS = {"missing": Fault.MISSING_INPUT, "extra_forbidden": Fault.UNKNOWN_INPUT}


def from_validation(error: ValidationError) -> ServiceError:
    """An envelope pydantic refused: 422 for each field (the first few), the input never echoed
    back."""
    items = error.errors(include_url=False, include_input=False, include_context=False)
    problems = [
        Problem(
            _PYDANTIC_KINDS.get(item["type"], Fault.INVALID_FIELD),
            ("body", *item["loc"]),
            item["msg"],
        )
        for item in items[:PROBLEM_LIMIT]
    ]
    return ServiceError.of(problems, error.error_count())


def refuse_unknown_fields(
    payload: dict[str, Any], known: Iterable[str], where: Sequence[str | int] = ("body",)
) -> None:
    """422 for an object with more unknown fields than an answer tells, before a validator makes
    an error of each: the first few are named, the rest counted. Fewer are left to the
    validator, which names them all beside any other problem."""
    if len(payload) <= PROBLEM_LIMIT:
        return
    names = set(known)
    unknown = [key for key in payload if key not in names]
    if len(unknown) <= PROBLEM_LIMIT:
        return
    problems = [
        Problem(Fault.UNKNOWN_INPUT, (*where, key), "Extra inputs are not permitted")
        for key in unknown[:PROBLEM_LIMIT]
    ]
    raise ServiceError.of(problems, len(unknown))


#: Names longer than this are not compared for a near miss (difflib's time grows with both).
NEAR_MISS_CHARS = 64


def near_miss(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that ``name`` looks like a slip of: the same letters in another case
    or without the underscores (``batchdims``, ``Batch_Dims``), or close by difflib's measure
    (``bacth_dims``); None when nothing is that close."""
    if len(name) > NEAR_MISS_CHARS:
        return None
    known = sorted(names)
    folded = name.lower().replace("_", "").replace("-", "")
    for candidate in known:
        if candidate.replace("_", "") == folded:
            return candidate
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.85)
    return close[0] if close else None


def internal_error(error: BaseException) -> ServiceError:
    """A bug: logged with its traceback, answered without one."""
    LOG.error("unexpected error", exc_info=error)
    return ServiceError(Fault.INTERNAL, (), "internal server error")


def release_frames(error: BaseException) -> None:
    """Let go of what the frames an error was raised through hold (a request's bytes, the
    futures that carried the error), keeping its traceback's lines for the log.

    A caught error whose traceback holds a frame that holds the error (or a future carrying
    it: asyncio's and anyio's awaits do) is a reference cycle; the request's bytes in those
    frames would then wait for the oldest generation's collection. Frames still running (the
    caller's) are left as they are. The error's cause and context are released too."""
    seen: set[int] = set()
    item: BaseException | None = error
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        if item.__traceback__ is not None:
            traceback.clear_frames(item.__traceback__)
        item = item.__cause__ or item.__context__
