"""The Python client of tensor-ops (sync and async; HTTP on httpx, or gRPC) and its command line.

``TensorOpsClient(url).roll(data, shift, axes)`` and ``.gather(data, indices, axis,
batch_dims)`` take and return NumPy arrays; every refusal raises ``TensorOpsError``.
``transport="grpc"`` calls KServe V2 over gRPC instead of HTTP (at ``grpc_target``, by default
the host of ``url`` with port 8001; grpcio comes with ``pip install 'tensor-ops-client[grpc]'``).
``api_key=`` (default ``TENSOR_OPS_API_KEY``) is sent as a bearer key; an ``https://`` URL is TLS
for HTTP and gRPC, with ``verify=`` (a CA bundle) and ``cert=`` (mutual TLS).
"""

from tensor_ops_client._version import __version__
from tensor_ops_client.cli import main
from tensor_ops_client.client import (
    AsyncTensorOpsClient,
    ClientCert,
    TensorOpsClient,
    TensorOpsError,
    Transport,
    Verify,
)

__all__ = [
    "AsyncTensorOpsClient",
    "ClientCert",
    "TensorOpsClient",
    "TensorOpsError",
    "Transport",
    "Verify",
    "__version__",
    "main",
]
