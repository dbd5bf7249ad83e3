"""The Python client of tensor-ops (sync and async, on httpx) and its command line.

``TensorOpsClient(url).roll(data, shift, axes)`` and ``.gather(data, indices, axis,
batch_dims)`` take and return NumPy arrays; every refusal raises ``TensorOpsError``.
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
