"""Everything the sync and async clients share: their methods, arguments and documentation, and
each call's course (requests, answers, errors, retries) written once as a *plan*.

A plan is a generator that yields what it needs done (``SendHttp``, ``SendGrpc``, ``Wait``)
and is sent the result, or has the failure (``TensorOpsError``) thrown into it; it returns the
call's result. ``TensorOpsClient`` carries the actions out with httpx's and gRPC's blocking
calls and ``time.sleep``, ``AsyncTensorOpsClient`` with their ``async`` twins and
``asyncio.sleep``: the I/O is all that differs between the two.
"""

import os
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

import httpx
import numpy.typing as npt

from tensor_ops_client._actions import HttpAnswer, Plan, SendGrpc, SendHttp, Wait
from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._grpc import (
    WHICH_PORT,
    ChannelSecurity,
    default_target,
    infer_output,
    infer_request,
)
from tensor_ops_client._http import HttpRequest, failure, op_request, read_output
from tensor_ops_client._inputs import given_as_numbers, tensors_of, typed_like
from tensor_ops_client._retry import Attempts, Retry
from tensor_ops_client._shm import shared_memory_plan
from tensor_ops_client._verdict import Verdict, read_verdict, verify_request
from tensor_ops_wire.ops import OPS, AttributeValue, OpListError, OpSpec, from_info
from tensor_ops_wire.verdict import parse_tolerance, tolerance_json

Transport = Literal["npz", "json", "v2", "grpc"]
TRANSPORTS: tuple[Transport, ...] = ("npz", "json", "v2", "grpc")
DEFAULT_URL = "http://127.0.0.1:8000"
#: Seconds each attempt of a call may take (see ``TensorOpsClient``); None: no limit.
DEFAULT_TIMEOUT = 120.0
#: The environment variable an API key is read from when none is given.
API_KEY_VARIABLE = "TENSOR_OPS_API_KEY"
#: How the server's certificate is checked: True (the default roots), False (not at all; HTTP
#: only), a CA bundle's path, or an ``ssl.SSLContext`` (HTTP only).
Verify = bool | str | os.PathLike[str] | ssl.SSLContext
#: A client certificate (chain) and its private key, two PEM files.
ClientCert = tuple[str | os.PathLike[str], str | os.PathLike[str]]
#: Called as bytes go out and come in: ``progress("upload" | "download", done, total)``,
#: ``total`` None when the size is not known. HTTP transports only.
ProgressHook = Callable[[str, int, int | None], None]

R = TypeVar("R")
ArrayT = TypeVar("ArrayT")
HealthT = TypeVar("HealthT")
InfoT = TypeVar("InfoT")
VerdictT = TypeVar("VerdictT")


@dataclass(frozen=True)
class Health:
    """The service's liveness (its process answers) and readiness (it takes work)."""

    live: bool
    ready: bool


#: What an op's, an input's or an attribute's name may be: it goes into a URL's path (the op),
#: a JSON field, a query parameter, an ``.npz`` member's name.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
#: Names the transports use beside the inputs and attributes (the element type of ``data``).
_RESERVED = frozenset({"dtype"})


def check_version(version: object) -> str | None:
    """An op's version as the wire carries it ("7"), None for the newest; ValueError for what
    no version can be (a negative number, a fraction, letters)."""
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int | str):
        raise ValueError(f"version must be an opset version number, got {version!r:.40}")
    text = str(version)
    if not text.isascii() or not text.isdigit() or len(text) > 4:
        raise ValueError(f"version must be an opset version number, got {text!r:.40}")
    return text


def check_call(op: str, inputs: Mapping[str, object], attributes: Mapping[str, object]) -> None:
    """Refuses (ValueError) what no transport could carry: a name that is not a plain word
    (letters, digits, ``_``, ``.``, ``-``), an attribute named as an input or as ``dtype``.
    Whether the op, its inputs and its attributes exist is the service's to say."""
    if not isinstance(op, str) or not _NAME.fullmatch(op):
        raise ValueError(f"op must be an op's name (letters, digits, _ . -), got {op!r:.80}")
    for kind, names in (("input", inputs), ("attribute", attributes)):
        for name in names:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ValueError(f"{kind} names are letters, digits, _ . -; got {name!r:.80}")
    for name in attributes:
        if name in inputs or name in _RESERVED:
            raise ValueError(f"{name!r} is an input's name (or dtype), not an attribute's")


def api_key_of(given: str | None) -> str | None:
    """The key to send: the one given, else ``TENSOR_OPS_API_KEY``'s; None for none or ``""``."""
    key = (os.environ.get(API_KEY_VARIABLE, "") if given is None else given).strip()
    # A header value with a space or a control character would be refused by httpx or gRPC
    # with the value quoted in the message: refused here, unquoted.
    if any(not "!" <= character <= "~" for character in key):
        raise ValueError(
            f"api_key (or {API_KEY_VARIABLE}) must be printable ASCII without spaces; "
            "the value is not shown"
        )
    return key or None


def tls_of(url: httpx.URL, verify: Verify, cert: ClientCert | None) -> bool:
    """Whether the calls go over TLS (an https:// URL); ``verify`` or ``cert`` given for a
    plaintext URL is refused rather than ignored."""
    tls = url.scheme == "https"
    if not tls and (cert is not None or verify is not True):
        raise ValueError(
            f"verify= and cert= are for TLS, but the URL is {url.scheme}:// (plaintext, for "
            "gRPC too): give the service's https:// URL"
        )
    return tls


def http_verify(verify: Verify, cert: ClientCert | None) -> ssl.SSLContext | bool:
    """httpx's ``verify``: as given, or a context with the CA bundle and client certificate."""
    if isinstance(verify, ssl.SSLContext):
        if cert is not None:
            raise ValueError(
                "cert= goes with verify= True or a CA bundle's path; with an ssl.SSLContext, "
                "load the client certificate into it (load_cert_chain)"
            )
        return verify
    if isinstance(verify, bool):
        if cert is None:
            return verify
        context = httpx.create_ssl_context(verify=verify)
    else:
        context = ssl.create_default_context(cafile=os.fspath(verify))
    if cert is not None:
        context.load_cert_chain(os.fspath(cert[0]), os.fspath(cert[1]))
    return context


class ClientBase(Generic[ArrayT, HealthT, InfoT, VerdictT]):
    """The methods of both clients, each a plan run by the subclass's ``_run``.

    ``ArrayT``, ``HealthT``, ``InfoT`` and ``VerdictT`` are what the methods give: the values
    themselves (``TensorOpsClient``) or awaitables of them (``AsyncTensorOpsClient``).
    """

    def __init__(
        self,
        url: str,
        base_url: httpx.URL,
        *,
        transport: Transport,
        timeout: float | None,
        retry: "Retry | bool | int | None",
        progress: ProgressHook | None,
        grpc_target: str | None,
        api_key: str | None,
        verify: Verify,
        cert: ClientCert | None,
        shared_memory: bool = False,
    ) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
        if shared_memory and transport not in ("v2", "grpc"):
            raise ValueError(
                f"shared_memory=True needs transport 'v2' or 'grpc', not {transport!r}"
            )
        #: Whether calls pass their tensors through system shared memory (``_shm.py``).
        self.shared_memory = shared_memory
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
        self.transport: Transport = transport
        self.timeout = timeout
        #: The retry policy (``retry=`` as given, made a ``Retry``).
        self.retry = Retry.of(retry)
        self.progress = progress
        #: Where ``transport="grpc"`` calls (None: no host to default to; give grpc_target).
        self.grpc_target = grpc_target or default_target(base_url)
        self._api_key = api_key_of(api_key)
        self._tls = tls_of(base_url, verify, cert)
        self._verify = verify
        self._cert = cert
        self._auth = {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        #: The service's ops as its ``GET /info`` describes them, read once, when a call first
        #: needs to know which inputs take the data's element type (None: not read yet).
        self._served: dict[str, OpSpec] | None = None

    def __repr__(self) -> str:
        # The key is never shown.
        return (
            f"{type(self).__name__}(transport={self.transport!r}, timeout={self.timeout!r}, "
            f"retry={self.retry!r})"
        )

    def _grpc_security(self) -> ChannelSecurity:
        return ChannelSecurity(self._tls, self._verify, self._cert, self._api_key)

    def _run(self, plan: Plan[Any]) -> Any:
        raise NotImplementedError

    # --- The methods ------------------------------------------------------------------------

    def call(
        self,
        op: str,
        inputs: Mapping[str, npt.ArrayLike],
        attributes: Mapping[str, AttributeValue] | None = None,
        version: int | str | None = None,
    ) -> ArrayT:
        """Any op of the service by its name (``GET /info`` lists them): ``inputs`` by their
        names, ``attributes`` (integers, or strings for enumerations such as Pad's
        ``pad_mode``) by theirs; the attributes left out take the op's defaults. An op of
        several outputs (Split, VariadicSplit) gives the list of them, in order.

        Every transport carries any op the same way: each input a tensor of its name, each
        attribute an integer (the query of ``npz``, a field of ``json``'s body, a request
        parameter of ``v2`` and ``grpc``). The service checks the op, its inputs and its
        attributes: an op it does not have is refused with its 404, a missing input or an
        unknown attribute with its 422. ``version`` picks the op's opset version (``7`` for
        Gather-7; the newest when None; one the service does not serve is its 404). A ``data``
        input of bfloat16 gives a bfloat16 output,
        as the service's ops keep the element type of ``data``. ``roll()`` and ``gather()``
        are this call, typed.

        >>> client.call("gather", {"data": [1, 2, 3, 4, 5], "indices": [3, 10, -20], "axis": 0})
        array([4, 0, 0])
        >>> client.call("gather", {"data": [[1, 2], [3, 4]], "indices": [[1], [0]], "axis": 1},
        ...             {"batch_dims": 1})
        array([[2],
               [3]])
        """
        return cast(ArrayT, self._run(self._call_plan(op, inputs, attributes or {}, version)))

    def verify(
        self,
        op: str,
        inputs: Mapping[str, npt.ArrayLike],
        outputs: Mapping[str, npt.ArrayLike],
        attributes: Mapping[str, Any] | None = None,
        tolerance: Mapping[str, Any] | str | None = None,
        *,
        version: str | int | None = None,
    ) -> VerdictT:
        """Whether ``outputs`` (what a device computed, by output name) are what the op gives
        for ``inputs`` and ``attributes``: a ``Verdict`` (``POST /verify/{op}``).

        Bit for bit by default; ``tolerance`` may be ``{"ulp": N}``, ``{"atol": x, "rtol":
        y}``, ``{"nan_payload": "ignore"}``, ``{"signed_zero": "ignore"}``, combined in one
        mapping, or a preset's name (``"ieee"``: docs/verify.md lists them; a bad one raises
        ValueError before anything is sent). ``version`` is the op's opset version (None: the
        newest). A wrong shape, type or
        element is the verdict's (``equal`` False), a request the op refuses the op's own
        ``TensorOpsError``. ``transport="json"`` sends base64 ``.npy`` in JSON; every other
        transport sends a case file (``.npz``) over HTTP, as V2 and gRPC have no message for a
        verdict (docs/verify.md).

        >>> x = np.arange(6.0)
        >>> y = np.roll(x, 1)
        >>> y[0] = np.nextafter(y[0], np.inf)  # one ULP off
        >>> verdict = client.verify("roll", {"data": x, "shift": 1, "axes": 0}, {"output": y})
        >>> verdict.equal, verdict["output"].mismatches, verdict["output"].max_ulp
        (False, 1, 1)
        >>> client.verify("roll", {"data": x, "shift": 1, "axes": 0}, {"output": y},
        ...               tolerance={"ulp": 1}).equal
        True
        """
        return cast(
            VerdictT,
            self._run(self._verify_plan(op, inputs, outputs, attributes or {}, tolerance, version)),
        )

    def roll(self, data: npt.ArrayLike, shift: npt.ArrayLike, axes: npt.ArrayLike) -> ArrayT:
        """Roll-7: ``data`` with its elements shifted by ``shift`` along ``axes``.

        ``shift`` and ``axes`` are integers or 1-D integer arrays of the same length (one shift
        for all axes is broadcast); negative axes count from the end. The output has the shape
        and element type of ``data``.

        >>> client.roll([[1, 2, 3], [4, 5, 6]], shift=1, axes=1)
        array([[3, 1, 2],
               [6, 4, 5]])
        """
        return self.call("roll", {"data": data, "shift": shift, "axes": axes})

    def gather(
        self,
        data: npt.ArrayLike,
        indices: npt.ArrayLike,
        axis: npt.ArrayLike,
        batch_dims: int = 0,
    ) -> ArrayT:
        """Gather-8: the slices of ``data`` along ``axis`` at ``indices``.

        Negative indices count from the end of the axis; an index out of range gives a slice
        of zeros. ``batch_dims`` leading dimensions are shared by ``data`` and ``indices``.

        >>> client.gather([1, 2, 3, 4, 5], indices=[3, 10, -20], axis=0)
        array([4, 0, 0])
        """
        inputs = {"data": data, "indices": indices, "axis": axis}
        return self.call("gather", inputs, {"batch_dims": batch_dims})

    def health(self) -> HealthT:
        """Whether the service is live and ready (``GET /health``, ``/health/ready``).

        Not ready (shutting down) is ``Health(live=True, ready=False)``, not an error; no
        answer raises ``TensorOpsError`` with status 0. One attempt, no retry: it is a probe.

        >>> client.health()
        Health(live=True, ready=True)
        """
        return cast(HealthT, self._run(self._health_plan()))

    def info(self) -> InfoT:
        """The service's name, version, ops, limits and ports (``GET /info``), a dict.

        >>> client.info()["limits"]["max_rank"]
        32
        """
        return cast(InfoT, self._run(self._info_plan()))

    # --- The plans --------------------------------------------------------------------------

    def _call_plan(
        self,
        op: str,
        arrays: Mapping[str, npt.ArrayLike],
        attributes: Mapping[str, AttributeValue],
        version: int | str | None = None,
    ) -> Plan[Any]:
        check_call(op, arrays, attributes)
        model_version = check_version(version)
        given = arrays
        # What NumPy cannot hold (ragged, not numbers, integers beyond int64) is refused here,
        # in the service's words, before anything is sent.
        arrays = yield from self._typed_plan(op, given, tensors_of(given))
        attempts = Attempts(self.retry)
        if self.shared_memory:
            return (
                yield from shared_memory_plan(self, op, arrays, attributes, attempts, model_version)
            )
        if self.transport == "grpc":
            message = infer_request(op, arrays, attributes, model_version)
            while True:
                try:
                    answer = yield SendGrpc(message, attempts.timeout(self.timeout))
                    return infer_output(answer)
                except TensorOpsError as error:
                    wait = attempts.wait_after(error)
                    if wait is None:
                        raise
                yield Wait(wait)
        request = op_request(op, arrays, attributes, self.transport, model_version)
        request.headers.update(self._auth)

        def read(answer: HttpAnswer) -> Any:
            return read_output(request, answer.body, answer.headers)

        return (yield from self._http_plan(request, attempts, read))

    def _verify_plan(
        self,
        op: str,
        inputs: Mapping[str, npt.ArrayLike],
        outputs: Mapping[str, npt.ArrayLike],
        attributes: Mapping[str, Any],
        tolerance: Mapping[str, Any] | str | None,
        version: str | int | None,
    ) -> Plan[Verdict]:
        check_call(op, inputs, attributes)
        check_call(op, outputs, {})
        # A ToleranceError (ValueError) before anything is sent; a preset sent as what it is.
        rule = None if tolerance is None else tolerance_json(parse_tolerance(tolerance))
        arrays = yield from self._typed_plan(op, inputs, tensors_of(inputs))
        candidates = tensors_of(outputs)
        request = verify_request(
            op,
            arrays,
            candidates,
            attributes,
            rule,
            self.transport,
            None if version is None else str(version),
        )
        request.headers.update(self._auth)

        def read(answer: HttpAnswer) -> Verdict:
            return read_verdict(answer.body)

        return (yield from self._http_plan(request, Attempts(self.retry), read))

    def _http_plan(
        self, request: HttpRequest, attempts: Attempts, read: Callable[[HttpAnswer], R]
    ) -> Plan[R]:
        """One HTTP call, repeated as the retry policy says; ``read`` makes a 200's result."""
        while True:
            try:
                answer: HttpAnswer = yield SendHttp(request, attempts.timeout(self.timeout))
                if answer.status != 200:
                    raise failure(answer.status, bytes(answer.body), answer.headers)
                return read(answer)
            except TensorOpsError as error:
                wait = attempts.wait_after(error)
                if wait is None:
                    raise
            yield Wait(wait)

    def _typed_plan(
        self,
        op: str,
        given: Mapping[str, npt.ArrayLike],
        arrays: dict[str, npt.NDArray[Any]],
    ) -> Plan[dict[str, npt.NDArray[Any]]]:
        """``arrays``, with the inputs given as numbers that hold values of the data's element
        type (Pad's ``pad_value``, the scatters' ``updates``, Concat's ``data_N``: ``/info``'s
        ``like_data``) in the data's type, as the JSON route types them: ``pad_value=0.5``
        beside float32 data is float32. Arrays keep the type their caller gave them."""
        loose = [name for name, value in given.items() if given_as_numbers(value)]
        known = {spec.name: spec for spec in OPS}
        if not loose or set(loose) <= {"data", "data_0"}:
            return arrays
        if op not in known and self._served is None:
            self._served = yield from self._served_plan()
        spec = known.get(op) or (self._served or {}).get(op)
        if spec is None or spec.type_source not in arrays:
            return arrays
        dtype = arrays[spec.type_source].dtype
        return {
            name: typed_like(array, dtype) if name in loose and spec.typed_as_data(name) else array
            for name, array in arrays.items()
        }

    def _served_plan(self) -> Plan[dict[str, OpSpec]]:
        """The service's ops from its ``GET /info`` (one attempt); none when it cannot say
        (a gRPC-only service, an /info refused): the inputs then keep NumPy's types."""
        try:
            info = yield from self._info_once_plan()
            described = from_info(info.get("ops", []), info.get("op_details"))
        except (TensorOpsError, OpListError):
            return {}
        return {spec.name: spec for spec in described}

    def _info_once_plan(self) -> Plan[dict[str, Any]]:
        return (yield from self._info_plan(Attempts(Retry.of(False))))

    def _health_plan(self) -> Plan[Health]:
        live: HttpAnswer = yield SendHttp(
            HttpRequest("GET", "/health", headers=dict(self._auth)), self.timeout
        )
        if live.status != 200:
            raise failure(live.status, bytes(live.body), live.headers)
        ready: HttpAnswer = yield SendHttp(
            HttpRequest("GET", "/health/ready", headers=dict(self._auth)), self.timeout
        )
        if ready.status not in (200, 503):
            raise failure(ready.status, bytes(ready.body), ready.headers)
        return Health(live=True, ready=ready.status == 200)

    def _info_plan(self, attempts: Attempts | None = None) -> Plan[dict[str, Any]]:
        request = HttpRequest("GET", "/info", headers=dict(self._auth))

        def read(answer: HttpAnswer) -> dict[str, Any]:
            try:
                info = httpx.Response(200, content=bytes(answer.body)).json()
            except ValueError as error:
                raise TensorOpsError(0, f"the service's /info is not JSON: {error}") from None
            if not isinstance(info, dict):
                raise TensorOpsError(0, "the service's /info is not a JSON object")
            return info

        return (yield from self._http_plan(request, attempts or Attempts(self.retry), read))


def _reason(error: httpx.HTTPError) -> str:
    """httpx's words for a failure, without the errno: ``"connection refused"``. For a failed
    connection, the system's words for its error (the async client says only "All connection
    attempts failed")."""
    text = re.sub(r"^\[Errno -?\d+\] ", "", str(error)).strip() or type(error).__name__
    if isinstance(error, httpx.ConnectError):
        cause: BaseException | None = error
        for _ in range(8):  # httpx's error, httpcore's, anyio's, the socket's
            if cause is None:
                break
            if isinstance(cause, ssl.SSLError):
                break  # its errno is the TLS library's: httpx's words say it
            if isinstance(cause, OSError) and cause.errno is not None:
                text = os.strerror(cause.errno) if cause.errno > 0 else str(cause.strerror)
                break
            cause = cause.__cause__ or cause.__context__
    # "Connection refused" reads as part of the sentence; "SSL: ..." keeps its capitals.
    return text[0].lower() + text[1:] if text[1:2].islower() else text


def _answered_http2(error: httpx.HTTPError) -> bool:
    """Whether the answer began with a binary byte where an HTTP/1.1 status line was due: the
    frames of HTTP/2, which a gRPC port sends first (its SETTINGS) whatever it is sent. (h11
    says so as "illegal request line", or quotes the line when it holds a line break.)"""
    text = str(error)
    return isinstance(error, httpx.RemoteProtocolError) and (
        text == "illegal request line" or text.startswith("illegal status line: b'\\x")
    )


def service_url(base_url: httpx.URL) -> str | None:
    """The service's address as an error names it: the base URL, without its final slash."""
    return str(base_url).rstrip("/") or None


def _origin(error: httpx.HTTPError) -> str | None:
    """``scheme://host:port`` of the request that failed (a client with no base URL)."""
    try:
        url = error.request.url
    except RuntimeError:  # no request attached
        return None
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}" if url.host else None


def transport_failure(
    error: httpx.HTTPError, timeout: float | None, url: str | None = None
) -> TensorOpsError:
    """httpx's failure as ``TensorOpsError`` status 0, naming ``url`` (the service's base URL):
    retryable when the connection could not be made or broke, not when the timeout passed, nor
    when the port answered in HTTP/2 (a gRPC port: a repeat gets the same answer)."""
    url = url or _origin(error)
    where = f" at {url}" if url else ""
    origin = f" from {url}" if url else ""
    if isinstance(error, httpx.ConnectTimeout):
        return TensorOpsError(
            0, f"cannot reach the service{where}: {_reason(error)}", retryable=True
        )
    if isinstance(error, httpx.TimeoutException):
        limit = f" of {timeout:g} s" if timeout is not None else ""
        return TensorOpsError(0, f"no answer within the timeout{limit}{origin}: {error}")
    if _answered_http2(error):
        return TensorOpsError(
            0,
            f"{url or 'the URL'} speaks HTTP/2 (gRPC), not HTTP/1.1, as the service's gRPC port "
            f"does: {WHICH_PORT}",
        )
    retryable = isinstance(error, httpx.NetworkError | httpx.RemoteProtocolError)
    return TensorOpsError(
        0, f"cannot reach the service{where}: {_reason(error)}", retryable=retryable
    )
