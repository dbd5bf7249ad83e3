"""Helpers the test modules share: bits compared, request bodies built, real servers launched.

Fixtures live in ``tests/conftest.py``; everything a test imports by name lives here, so no
test module imports from another.
"""

import contextlib
import io
import itertools
import logging
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import zipfile
import zlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import ml_dtypes
import numpy as np
import numpy.typing as npt
import orjson
import pybase64
import pytest

from app.grpc.server import GrpcServer
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------------------------------------
# Bits


def bits(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` as unsigned integers of its width, native order: equal bits compare equal."""
    native = array.astype(array.dtype.newbyteorder("="))
    return native.view(f"u{array.dtype.itemsize}")


def assert_same_bits(actual: npt.NDArray[Any], expected: npt.NDArray[Any]) -> None:
    """Same shape, same element type, same bits (NaN payloads and -0.0 included)."""
    assert actual.shape == expected.shape
    assert actual.dtype.newbyteorder("=") == expected.dtype.newbyteorder("=")
    np.testing.assert_array_equal(bits(actual), bits(expected))


def bits_difference(actual: npt.NDArray[Any], expected: npt.NDArray[Any]) -> str | None:
    """What differs between the two (element type, shape or bits), or None if nothing does."""
    if actual.dtype.newbyteorder("=") != expected.dtype.newbyteorder("="):
        return f"dtype {actual.dtype} instead of {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {actual.shape} instead of {expected.shape}"
    differ = int(np.count_nonzero(bits(actual) != bits(expected)))
    if differ:
        return f"{differ} of {expected.size} elements differ"
    return None


# ------------------------------------------------------------------------------------------------
# Bodies: .npy, base64, .npz


def npy_bytes(array: npt.ArrayLike, version: tuple[int, int] | None = None) -> bytes:
    """``array`` as ``np.save`` writes it (pickled objects included), in ``version`` if given."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asanyarray(array), version=version)
    return buffer.getvalue()


def b64(raw: bytes) -> str:
    return pybase64.b64encode(raw).decode()


def npy_b64(array: npt.ArrayLike) -> str:
    """The npy form of a tensor in JSON: its .npy file in base64."""
    return b64(npy_bytes(array))


def header_npy(header: str, payload: bytes = b"", version: int = 1) -> bytes:
    """A .npy file with any header text (well-formed or not) and any payload after it."""
    text = header.encode("latin-1")
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload
    return b"\x93NUMPY" + bytes((version, 0)) + struct.pack("<I", len(text)) + text + payload


def npz_bytes(compressed: bool = False, **arrays: npt.ArrayLike) -> bytes:
    """An .npz as ``np.savez`` (or ``np.savez_compressed``) writes it."""
    buffer = io.BytesIO()
    save = np.savez_compressed if compressed else np.savez
    save(buffer, allow_pickle=True, **arrays)
    return buffer.getvalue()


def zip_bytes(members: Mapping[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    """A zip archive of ``members`` (names as given, ``.npy`` included), any bytes in each."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    return buffer.getvalue()


def v2_binary_body(
    head: Mapping[str, Any], chunks: Sequence[bytes]
) -> tuple[bytes, dict[str, str]]:
    """A ``/v2`` infer body in Triton's binary tensor extension, and its headers: ``head`` as the
    JSON header, each of its inputs given the ``binary_data_size`` of its chunk, then the chunks."""
    inputs = [
        {**item, "parameters": {"binary_data_size": len(raw)}}
        for item, raw in zip(head["inputs"], chunks, strict=True)
    ]
    header = orjson.dumps({**head, "inputs": inputs})
    headers = {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(header)),
    }
    return header + b"".join(chunks), headers


def gzip_bomb(inflated_bytes: int, fill: bytes = b" ") -> bytes:
    """A gzip stream of ``inflated_bytes`` of ``fill``, built 1 MiB at a time (about 1/1000 of it)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = fill * ((1 << 20) // len(fill))
    whole, rest = divmod(inflated_bytes, len(chunk))
    parts = [compressor.compress(chunk) for _ in range(whole)]
    parts += [compressor.compress(chunk[:rest]), compressor.flush()]
    return b"".join(parts)


# ------------------------------------------------------------------------------------------------
# The Docker image's environment


def image_env() -> dict[str, str]:
    """The variables the Dockerfile's final stage sets with ENV (quotes removed)."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stage = text[text.rindex("\nFROM ") :]
    env: dict[str, str] = {}
    for line in re.findall(r"^ENV (.+)$", stage, flags=re.M):
        for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', line):
            env[key] = value.strip('"')
    return env


def malloc_env() -> dict[str, str]:
    """glibc's allocator settings of the image (``MALLOC_*``): a test server runs with them."""
    return {key: value for key, value in image_env().items() if key.startswith("MALLOC_")}


# ------------------------------------------------------------------------------------------------
# Real servers

_LOGS: dict[int, str] = {}  # server pid -> the file its output goes to


class LogCollector(logging.Handler):
    """Every record a logger hands it, kept (the service's loggers do not propagate to pytest's
    caplog); add it after ``create_app``, which sets the service's handlers anew."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def address(url: str) -> tuple[str, int]:
    """The host and port of a server's ``http://host:port`` URL, for a raw socket."""
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def send_and_read(url: str, request: bytes, until: bytes, timeout: float = 10) -> bytes:
    """``request`` sent as it is on a new connection to ``url``'s host and port, then what comes
    back until ``until`` is in it or the server closes the connection (a server may answer and
    close before the whole request is sent: its answer is read all the same)."""
    with socket.create_connection(address(url), timeout=timeout) as connection:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.sendall(request)
        answer = b""
        while until not in answer:
            piece = connection.recv(65536)
            if not piece:
                break
            answer += piece
    return answer


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections (Linux; else IANA's 49152)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


#: Ports for the tests' servers: below the ephemeral range, where no outgoing connection's local
#: port lands (a port the kernel picked with bind(0) and let go can be any client's local port a
#: moment later: CI saw it taken between the pick and the server's bind), one slice of 2,000 per
#: pytest-xdist worker so two workers never pick the same one, and a probe that skips a port some
#: other program holds.
_PORT_FLOOR, _PORT_SLICE = 12000, 2000
_port_picks = itertools.count(os.getpid() % _PORT_SLICE)


def free_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    low = _PORT_FLOOR + (int(worker) if worker.isdigit() else 0) * _PORT_SLICE
    if low + _PORT_SLICE > _ephemeral_low():  # an odd machine: let the kernel pick
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            picked: int = probe.getsockname()[1]
            return picked
    for _ in range(_PORT_SLICE):
        port = low + next(_port_picks) % _PORT_SLICE
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {low}..{low + _PORT_SLICE - 1}")


def launch_server(
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    settled: bool = False,
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start the service on a free port of 127.0.0.1 and wait until it is healthy.

    By default ``python -m uvicorn app.main:app``; ``command=["-m", "app"]`` runs the launcher,
    which reads host and port from the environment. ``settled``: wait too until the kernels are
    loaded (their log line), for a test that measures the worker's memory: the load (numba's
    import and the machine code, some 60 MiB) goes on in the background after the first
    answer, and on a loaded machine it lands inside the test's measurement.
    """
    for _attempt in range(3):
        try:
            return _launch(env, command, settled)
        except _PortTakenError:
            continue  # another program took the port between the pick and the bind: pick again
    return _launch(env, command, settled)


#: Run before the server's own command (``python -c`` this, then ``os.execv`` into it, the same
#: process): the kernel sends the server SIGTERM when the thread that started it ends, and a
#: server whose starter is gone already does not start. A test process killed outright (an xdist
#: worker whose controller was stopped ends with ``os._exit``, no ``atexit`` or ``finally``)
#: leaves no server behind: it runs in a session of its own, out of reach of the signals that
#: stopped the tests.
_DIE_WITH_STARTER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)


def _dying_with_this_process() -> list[str]:
    """The start of a server's command line: the Python that runs the tests, told to end the
    server with this process (``_DIE_WITH_STARTER``: PR_SET_PDEATHSIG, Linux's), when this is the
    main thread (the signal follows the starting thread, which a helper thread's end would
    fire early)."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return [sys.executable]
    return [sys.executable, "-c", _DIE_WITH_STARTER, str(os.getpid())]


class _PortTakenError(RuntimeError):
    """The server could not bind: its port (or the gRPC port its env names) was taken."""


def _launch(
    env: dict[str, str] | None, command: list[str] | None, settled: bool
) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    arguments = command or [
        "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port", str(port),
        "--http", "app.http.protocol:ServiceHttpProtocol",
    ]  # fmt: skip
    # gRPC off unless a test asks for it: servers started side by side must not share 8001.
    settings = {
        "TENSOR_OPS_HOST": "127.0.0.1",
        "TENSOR_OPS_PORT": str(port),
        "TENSOR_OPS_GRPC_PORT": "0",
    }
    log = tempfile.NamedTemporaryFile(prefix="tensor-ops-server-", suffix=".log", delete=False)  # noqa: SIM115
    process = subprocess.Popen(
        [*_dying_with_this_process(), *arguments],
        cwd=ROOT,
        env={**os.environ, **settings, **(env or {})},
        # A file, not a pipe: a pipe nobody reads fills up and stalls the server's logging.
        stdout=log,
        stderr=subprocess.STDOUT,
        # Its own process group: stopping it stops the workers a supervisor started too.
        start_new_session=True,
    )
    _LOGS[process.pid] = log.name
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                if settled:
                    _wait_for_kernels(process, deadline=time.monotonic() + 180)
                return url, process
        except httpx.TransportError:
            if "address already in use" in server_output(process).lower():
                stop_server(process)
                raise _PortTakenError(f"port {port} taken") from None
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"uvicorn did not start: {server_output(process)}")


#: The service's log lines that end the kernels' load, ready or not (app/ops/loops.py).
_KERNELS_OVER = ("kernels ready in", "the kernels did not compile")


def _wait_for_kernels(process: subprocess.Popen[bytes], deadline: float) -> None:
    while not any(words in server_output(process) for words in _KERNELS_OVER):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"the kernels did not load: {server_output(process)[-2000:]}")
        time.sleep(0.1)


def server_output(process: subprocess.Popen[bytes]) -> str:
    """Everything the server has written to stdout and stderr so far."""
    return Path(_LOGS[process.pid]).read_text(errors="replace")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Stop the server and every process of its group (workers included), then drop its log."""
    for signal_number, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal_number)
        try:
            process.wait(grace)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # workers a supervisor left behind
    Path(_LOGS.pop(process.pid, "/nonexistent")).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------
# V2 conformance samples (the tritonclient suites over HTTP and gRPC)

#: The 13 element types, under their KServe names.
DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "FP16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
INTEGER_TYPES = [name for name in DTYPES if name.startswith(("INT", "UINT"))]
FLOAT_TYPES = ("FP16", "BF16", "FP32", "FP64")
#: Roll's shift and axes of every form and type: (shift, axes).
ROLL_SHIFT_AXES = [
    pytest.param(np.array(2, np.int32), np.array(1, np.int32), id="scalar-i32-i32"),
    pytest.param(np.array(-3, np.int64), np.array([0, 2], np.int32), id="scalar-shift-1d-axes"),
    pytest.param(np.array([1, 2], np.int32), np.array([-1, 0], np.int64), id="i32-shift-i64-axes"),
    pytest.param(np.array([5, -9], np.int64), np.array([1, 1], np.int64), id="repeated-axis"),
    pytest.param(np.array([2**62 + 1], np.int64), np.array([2], np.int32), id="huge-shift"),
    pytest.param(np.array([-(2**31)], np.int32), np.array([-3], np.int32), id="i32-min-shift"),
    pytest.param(np.array([], np.int64), np.array([], np.int64), id="no-axes"),
]

#: Gather's batch_dims cases: (data shape, indices, axis, batch_dims).
GATHER_BATCH_CASES = [
    pytest.param((2, 5), [[0, -1, 4], [5, -6, -5]], 1, 1, id="spec-like"),
    pytest.param((2, 3, 4), [[1, -2], [7, 0]], 2, 1, id="axis-2"),
    pytest.param((2, 3, 4), [[[2], [-4], [0]], [[3], [4], [-1]]], 2, 2, id="two-batches"),
    pytest.param((2, 3, 4), [[[2], [-4], [0]], [[3], [4], [-1]]], -1, -1, id="negative"),
    pytest.param((2, 3, 4), [[0, 1], [-1, 5]], 1, 0, id="zero"),
]

#: The field of gRPC's typed ``contents`` each datatype's elements go in, as the protocol says
#: (FP16 and BF16 have none: they travel as raw contents only).
TYPED_CONTENTS: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}
_DATATYPES = {dtype: name for name, dtype in DTYPES.items()}


def v2_name(dtype: np.dtype[Any]) -> str:
    """The KServe V2 datatype of ``dtype`` (in either byte order)."""
    return _DATATYPES[dtype.newbyteorder("=")]


# Bit patterns per float type: -0.0, the smallest subnormal, the largest finite value and its
# negative (all of which JSON carries exactly), then +inf, -inf, a quiet NaN with a payload and a
# negative signalling NaN with a payload (which only binary data can carry).
FINITE_BITS: dict[str, tuple[int, ...]] = {
    "FP16": (0x8000, 0x0001, 0x7BFF, 0xFBFF),
    "BF16": (0x8000, 0x0001, 0x7F7F, 0xFF7F),
    "FP32": (0x8000_0000, 0x0000_0001, 0x7F7F_FFFF, 0xFF7F_FFFF),
    "FP64": (1 << 63, 1, 0x7FEF_FFFF_FFFF_FFFF, 0xFFEF_FFFF_FFFF_FFFF),
}
NON_FINITE_BITS: dict[str, tuple[int, ...]] = {
    "FP16": (0x7C00, 0xFC00, 0x7E01, 0xFC01),
    "BF16": (0x7F80, 0xFF80, 0x7FC1, 0xFF81),
    "FP32": (0x7F80_0000, 0xFF80_0000, 0x7FC0_0001, 0xFF80_0001),
    "FP64": (0x7FF0 << 48, 0xFFF0 << 48, 0x7FF8_0000_0000_0001, 0xFFF0_0000_0000_0001),
}


def sample(name: str, shape: tuple[int, ...], *, finite: bool, seed: int) -> npt.NDArray[Any]:
    """Values of type ``name``: random, then the type's extremes in the first elements.

    With ``finite`` the floats hold no inf or NaN, for the pairings that use JSON, which cannot
    carry them: tritonclient writes the non-standard tokens NaN and Infinity (the service refuses
    that body, see ``test_refused``), and the service refuses (422) to write inf or NaN in a JSON
    output, asking for binary data instead.
    """
    dtype = DTYPES[name]
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    array: npt.NDArray[Any]
    if dtype.kind == "b":
        array = rng.integers(0, 2, size).astype(np.bool_)
        array[:2] = [True, False]
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        array = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
        array[:3] = [info.min, info.max, 0]
    else:
        array = (rng.standard_normal(size) * 100).astype(np.float32).astype(dtype)
        specials = FINITE_BITS[name] + (() if finite else NON_FINITE_BITS[name])
        raw = array.view(f"u{dtype.itemsize}")
        raw[: len(specials)] = specials
    return array.reshape(shape)


# ------------------------------------------------------------------------------------------------
# gRPC served in-process


@contextlib.asynccontextmanager
async def grpc_serving(app: Any, **settings: Any) -> AsyncIterator[str]:
    """``app``'s pipeline (its settings, memory budget and metrics) and shared memory regions
    served over gRPC on a free port of 127.0.0.1 for the length of the block; yields the
    address. ``settings`` override the
    app's for the gRPC server alone (its message size limits, its graceful timeout)."""
    changed = app.state.settings.model_copy(
        update={"host": "127.0.0.1", "grpc_port": 0, **settings}
    )
    server = GrpcServer(
        changed,
        app.state.pipeline,
        lambda: bool(app.state.ready),
        app.state.access,
        app.state.regions,  # the app's: a region registered over /v2 is seen over gRPC
    )
    port = await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop()


def grpc_channel(address: str) -> grpc.aio.Channel:
    """An asyncio channel to ``address`` that takes messages of any size."""
    return grpc.aio.insecure_channel(
        address,
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )


def inference_stub(channel: grpc.aio.Channel) -> Any:
    """The generated client of the V2 service on ``channel`` (its module is untyped)."""
    return grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)  # type: ignore[no-untyped-call]


def raw_infer(
    channel: grpc.aio.Channel, method: str = "ModelInfer"
) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    """A call of the V2 service that sends and receives bytes as they are (no protobuf)."""
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        f"/inference.GRPCInferenceService/{method}"
    )
    return call


# ------------------------------------------------------------------------------------------------
# Refusals every client transport must report alike: op, inputs, batch_dims, field, words

#: Requests that break the specs, sent through the Python client on every transport.
SPEC_VIOLATIONS = [
    pytest.param(
        "roll",
        {"data": np.zeros((2, 3)), "shift": 1, "axes": 2},
        0,
        "axes",
        "axes = 2 is out of range for data of rank 2",
        id="axes-out-of-range",
    ),
    pytest.param(
        "roll",
        {"data": np.zeros(3), "shift": np.float32(1), "axes": 0},
        0,
        "shift",
        "shift must be of type int32 or int64, got float32",
        id="float-shift",
    ),
    pytest.param(
        "roll",
        {"data": np.zeros(3), "shift": np.uint8(1), "axes": 0},
        0,
        "shift",
        "got uint8",
        id="uint8-shift",
    ),
    pytest.param(
        "roll",
        {"data": np.zeros((2, 2)), "shift": [1, 2], "axes": [0]},
        0,
        "shift",
        "axes must be a 1D tensor of the same size",
        id="shift-axes-lengths",
    ),
    pytest.param(
        "gather",
        {"data": np.zeros((2, 3)), "indices": [[0]], "axis": 1},
        3,
        "batch_dims",
        "batch_dims = 3 is out of range [-2, 2]",
        id="batch-dims-out-of-range",
    ),
    pytest.param(
        "gather",
        {"data": np.zeros((2, 3)), "indices": [0.5], "axis": 0},
        0,
        "indices",
        "indices must be of an integer type",
        id="float-indices",
    ),
    pytest.param(
        "gather",
        {"data": np.zeros((2, 3)), "indices": [0], "axis": [0, 1]},
        0,
        "axis",
        "axis must be a scalar or a 1D tensor with one element",
        id="two-axes",
    ),
]


def refused_call(client: Any, op: str, arrays: dict[str, Any], batch_dims: int) -> Any:
    """Send one of SPEC_VIOLATIONS through a client's typed convenience for its op; the caller
    expects the refusal (the same table runs on every client transport)."""
    if op == "roll":
        return client.roll(arrays["data"], arrays["shift"], arrays["axes"])
    return client.gather(arrays["data"], arrays["indices"], arrays["axis"], batch_dims)


def serving_ops(module: str, names: Sequence[str]) -> str:
    """A ``python -c`` script that serves the app with the ops ``names`` of test module
    ``module`` (declared there, as real op modules declare theirs) added to the registry."""
    return textwrap.dedent(
        f"""
        import os

        import uvicorn

        from app.registry import REGISTRY
        from {module} import {", ".join(names)}

        for op in ({", ".join(names)},):
            REGISTRY[op.name] = op
        uvicorn.run(
            "app.main:create_app",
            factory=True,
            host=os.environ["TENSOR_OPS_HOST"],
            port=int(os.environ["TENSOR_OPS_PORT"]),
            http="app.http.protocol:ServiceHttpProtocol",
            log_level="warning",
        )
        """
    )
