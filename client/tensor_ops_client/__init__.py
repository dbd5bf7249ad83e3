"""The Python client of tensor-ops (sync and async, on httpx) and its command line."""

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import httpx
import numpy as np
import numpy.typing as npt
import orjson

from tensor_ops_wire.dtypes import BFLOAT16
from tensor_ops_wire.npy import decode_npy, encode_npy, encode_npy_base64
from tensor_ops_wire.npz import encode_npz

Transport = Literal["npz", "json"]
DEFAULT_URL = "http://127.0.0.1:8000"


class TensorOpsError(Exception):
    """Any refusal or failure of the service: its HTTP status and its message."""

    def __init__(self, status: int, message: str, detail: Any = None) -> None:
        super().__init__(f"[{status}] {message}")
        self.status = status
        self.message = message
        self.detail = detail


def _request(
    op: str, arrays: Mapping[str, npt.ArrayLike], batch_dims: int | None, transport: Transport
) -> dict[str, Any]:
    """Method, path, body, headers and query of one op call."""
    tensors = {name: np.asarray(value) for name, value in arrays.items()}
    bfloat16 = tensors["data"].dtype == BFLOAT16
    if transport == "npz":
        params: dict[str, Any] = {}
        if batch_dims is not None:
            params["batch_dims"] = batch_dims
        if bfloat16:
            params["dtype"] = "bfloat16"
        return {
            "url": f"/{op}",
            "content": encode_npz(tensors),
            "headers": {"content-type": "application/x-npz", "accept": "application/x-npy"},
            "params": params,
        }
    payload: dict[str, Any] = {name: encode_npy_base64(t) for name, t in tensors.items()}
    if batch_dims is not None:
        payload["batch_dims"] = batch_dims
    if bfloat16:
        payload["dtype"] = "bfloat16"
    return {
        "url": f"/{op}",
        "content": orjson.dumps(payload),
        "headers": {"content-type": "application/json", "accept": "application/x-npy"},
    }


def _failure(status: int, body: bytes) -> TensorOpsError:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return TensorOpsError(status, body[:500].decode("utf-8", "replace") or "no message")
    detail = payload.get("detail") if isinstance(payload, dict) else None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        messages = []
        for item in detail:
            where = ".".join(str(part) for part in item.get("loc", []) if part != "body")
            messages.append(f"{where}: {item.get('msg')}" if where else str(item.get("msg")))
        return TensorOpsError(status, "; ".join(messages), detail)
    if isinstance(payload, dict) and "error" in payload:
        return TensorOpsError(status, str(payload["error"]), payload)
    return TensorOpsError(status, str(detail if detail is not None else payload), payload)


def _output(body: bytearray, data_dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    array = decode_npy(body)
    # Both ops keep the element type of data; bfloat16 comes back as 2-byte elements.
    return array.view(BFLOAT16) if data_dtype == BFLOAT16 else array


class TensorOpsClient:
    """Calls a tensor-ops service: ``TensorOpsClient(url).roll(data, shift, axes)``.

    Tensors go as an ``.npz`` body and come back as raw ``.npy`` by default (no JSON, no
    base64); ``transport="json"`` sends base64 ``.npy`` in JSON instead. Every failure raises
    ``TensorOpsError`` with the service's status and message.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        transport: Transport = "npz",
        timeout: float = 120.0,
        http: httpx.Client | None = None,
    ) -> None:
        self.transport = transport
        self._http = http or httpx.Client(base_url=url, timeout=timeout)

    def roll(
        self, data: npt.ArrayLike, shift: npt.ArrayLike, axes: npt.ArrayLike
    ) -> npt.NDArray[Any]:
        """Roll-7: ``data`` shifted by ``shift`` along ``axes``."""
        return self._call("roll", {"data": data, "shift": shift, "axes": axes}, None)

    def gather(
        self,
        data: npt.ArrayLike,
        indices: npt.ArrayLike,
        axis: npt.ArrayLike,
        batch_dims: int = 0,
    ) -> npt.NDArray[Any]:
        """Gather-8: the slices of ``data`` along ``axis`` at ``indices``."""
        arrays = {"data": data, "indices": indices, "axis": axis}
        return self._call("gather", arrays, batch_dims)

    def _call(
        self, op: str, arrays: Mapping[str, npt.ArrayLike], batch_dims: int | None
    ) -> npt.NDArray[Any]:
        request = _request(op, arrays, batch_dims, self.transport)
        try:
            with self._http.stream("POST", **request) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
        except httpx.HTTPError as error:
            raise TensorOpsError(0, f"cannot reach the service: {error}") from error
        if response.status_code != 200:
            raise _failure(response.status_code, bytes(body))
        return _output(body, np.asarray(arrays["data"]).dtype)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


class AsyncTensorOpsClient:
    """The asynchronous twin of ``TensorOpsClient``: ``await client.roll(...)``."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        transport: Transport = "npz",
        timeout: float = 120.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.transport = transport
        self._http = http or httpx.AsyncClient(base_url=url, timeout=timeout)

    async def roll(
        self, data: npt.ArrayLike, shift: npt.ArrayLike, axes: npt.ArrayLike
    ) -> npt.NDArray[Any]:
        """Roll-7: ``data`` shifted by ``shift`` along ``axes``."""
        return await self._call("roll", {"data": data, "shift": shift, "axes": axes}, None)

    async def gather(
        self,
        data: npt.ArrayLike,
        indices: npt.ArrayLike,
        axis: npt.ArrayLike,
        batch_dims: int = 0,
    ) -> npt.NDArray[Any]:
        """Gather-8: the slices of ``data`` along ``axis`` at ``indices``."""
        arrays = {"data": data, "indices": indices, "axis": axis}
        return await self._call("gather", arrays, batch_dims)

    async def _call(
        self, op: str, arrays: Mapping[str, npt.ArrayLike], batch_dims: int | None
    ) -> npt.NDArray[Any]:
        request = _request(op, arrays, batch_dims, self.transport)
        try:
            async with self._http.stream("POST", **request) as response:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
        except httpx.HTTPError as error:
            raise TensorOpsError(0, f"cannot reach the service: {error}") from error
        if response.status_code != 200:
            raise _failure(response.status_code, bytes(body))
        return _output(body, np.asarray(arrays["data"]).dtype)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()


def _load(path: str, dtype: str | None) -> npt.NDArray[Any]:
    raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    array = decode_npy(bytearray(raw))
    if dtype == "bfloat16":
        if array.dtype.itemsize != 2:
            raise SystemExit(f"{path}: --dtype bfloat16 needs 2-byte elements")
        return array.view(BFLOAT16)
    return array


def _index(values: Sequence[str]) -> npt.NDArray[Any]:
    if len(values) == 1 and values[0].endswith(".npy"):
        return _load(values[0], None)
    try:
        numbers = [int(value) for value in values]
    except ValueError:
        raise SystemExit(f"expected integers or one .npy file, got {' '.join(values)}") from None
    return np.array(numbers[0] if len(numbers) == 1 else numbers, dtype=np.int64)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensor-ops", description="Run Roll-7 or Gather-8 on a tensor-ops service."
    )
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the service (default {DEFAULT_URL})")
    parser.add_argument("--transport", choices=["npz", "json"], default="npz")
    ops = parser.add_subparsers(dest="op", required=True)
    roll = ops.add_parser("roll", help="Roll-7: shift elements along axes")
    roll.add_argument("data", help=".npy file of the data ('-' for standard input)")
    roll.add_argument("--shift", nargs="+", required=True, help="integers, or one .npy file")
    roll.add_argument("--axes", nargs="+", required=True, help="integers, or one .npy file")
    gather = ops.add_parser("gather", help="Gather-8: slices along an axis at indices")
    gather.add_argument("data", help=".npy file of the data ('-' for standard input)")
    gather.add_argument("--indices", nargs="+", required=True, help="integers, or one .npy file")
    gather.add_argument("--axis", nargs="+", required=True, help="an integer, or one .npy file")
    gather.add_argument("--batch-dims", type=int, default=0)
    for command in (roll, gather):
        command.add_argument("--dtype", choices=["bfloat16"], help="read 2-byte data as bfloat16")
        command.add_argument("-o", "--output", default="-", help="output .npy file ('-': stdout)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``tensor-ops roll in.npy --shift 1 --axes 0 -o out.npy``."""
    args = _parser().parse_args(argv)
    data = _load(args.data, args.dtype)
    with TensorOpsClient(args.url, transport=args.transport) as client:
        try:
            if args.op == "roll":
                output = client.roll(data, _index(args.shift), _index(args.axes))
            else:
                output = client.gather(
                    data, _index(args.indices), _index(args.axis), args.batch_dims
                )
        except TensorOpsError as error:
            print(f"tensor-ops: {error}", file=sys.stderr)
            return 1
    encoded = encode_npy(output).data
    if args.output == "-":
        sys.stdout.buffer.write(encoded)
    else:
        Path(args.output).write_bytes(encoded)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
