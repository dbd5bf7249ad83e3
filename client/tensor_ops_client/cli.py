"""The ``tensor-ops`` command line: ``tensor-ops roll in.npy --shift 1 --axes 0 -o out.npy``."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_client._grpc import DEFAULT_GRPC_PORT
from tensor_ops_client._version import __version__
from tensor_ops_client.client import (
    API_KEY_VARIABLE,
    DEFAULT_URL,
    TensorOpsClient,
    TensorOpsError,
)
from tensor_ops_wire.dtypes import BFLOAT16
from tensor_ops_wire.npy import decode_npy, encode_npy


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
    parser.add_argument(
        "--transport",
        choices=["npz", "json", "grpc"],
        default="npz",
        help="npz or json over HTTP, or grpc: KServe V2 over gRPC (the grpc extra: "
        "pip install 'tensor-ops-client[grpc]') (default npz)",
    )
    parser.add_argument(
        "--grpc-target",
        metavar="HOST:PORT",
        help="the service's gRPC address, for --transport grpc (default: the host of --url, "
        f"port {DEFAULT_GRPC_PORT})",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"the API key, sent as 'Authorization: Bearer KEY' (default: ${API_KEY_VARIABLE}; "
        "prefer the variable, as other users of the machine can read a command's arguments)",
    )
    parser.add_argument(
        "--ca-cert",
        metavar="PATH",
        help="PEM CA bundle to check the service's certificate against, for an https:// --url "
        "(HTTP and gRPC) (default: the public roots httpx (certifi) and gRPC come with)",
    )
    parser.add_argument(
        "--client-cert",
        metavar="PATH",
        help="PEM client certificate (chain) to present, for a service that asks for one "
        "(mutual TLS); with --client-key",
    )
    parser.add_argument("--client-key", metavar="PATH", help="PEM private key of --client-cert")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
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
    parser = _parser()
    args = parser.parse_args(argv)
    if args.grpc_target is not None and args.transport != "grpc":
        parser.error("--grpc-target is for --transport grpc")
    if (args.client_cert is None) != (args.client_key is None):
        parser.error("--client-cert and --client-key go together")
    data = _load(args.data, args.dtype)
    try:
        client = TensorOpsClient(
            args.url,
            transport=args.transport,
            grpc_target=args.grpc_target,
            api_key=args.api_key,
            verify=args.ca_cert if args.ca_cert is not None else True,
            cert=(args.client_cert, args.client_key) if args.client_cert is not None else None,
        )
    # No grpcio, a URL as --grpc-target, TLS options for an http:// URL, a key that cannot be
    # sent, a certificate file that cannot be read or loaded.
    except (ImportError, ValueError, OSError) as error:
        raise SystemExit(f"tensor-ops: {error}") from None
    with client:
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
