"""The Python client of tensor-ops (sync and async; HTTP on httpx, or gRPC) and its command line.

``TensorOpsClient(url).roll(data, shift, axes)`` and ``.gather(data, indices, axis,
batch_dims)`` take and return NumPy arrays; every refusal raises ``TensorOpsError``.
``transport="grpc"`` calls KServe V2 over gRPC instead of HTTP (at ``grpc_target``, by default
the host of ``url`` with port 8001; grpcio comes with ``pip install 'tensor-ops-client[grpc]'``).
"""

from tensor_ops_client._version import __version__
from tensor_ops_client.cli import main
from tensor_ops_client.client import (
    AsyncTensorOpsClient,
    TensorOpsClient,
    TensorOpsError,
    Transport,
)

__all__ = [
    "AsyncTensorOpsClient",
    "TensorOpsClient",
    "TensorOpsError",
    "Transport",
    "__version__",
    "main",
]
