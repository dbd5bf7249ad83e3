"""The Python client of tensor-ops (sync and async; HTTP on httpx, or gRPC) and its command line.

``TensorOpsClient(url).roll(data, shift, axes)`` and ``.gather(data, indices, axis,
batch_dims)`` take and return NumPy arrays, typed conveniences over ``.call(op, inputs,
attributes)``, which calls any op the service lists by its name; ``.health()`` and ``.info()``
describe the service. ``.verify(op, inputs, outputs)`` judges a device's outputs against the
service's (a ``Verdict``); ``write_case``/``read_case`` keep such a case in one ``.npz`` file.
Every refusal raises ``TensorOpsError`` (``status``, ``kind``, ``field``, ``message``). Calls
that fail for a reason a repeat can cure (no connection, a 503 from a busy service) are
repeated as ``retry=Retry(...)`` says. ``transport=`` is ``"npz"`` (the default), ``"json"``,
``"v2"`` (KServe V2 binary over HTTP) or ``"grpc"`` (KServe V2 over gRPC, at ``grpc_target``,
by default the host of ``url`` with port 8001; grpcio comes with
``pip install 'tensor-ops-client[grpc]'``). ``api_key=`` (default ``TENSOR_OPS_API_KEY``) is
sent as a bearer key; an ``https://`` URL is TLS for HTTP and gRPC, with ``verify=`` (a CA
bundle) and ``cert=`` (mutual TLS).

>>> from tensor_ops_client import TensorOpsClient
>>> with TensorOpsClient("http://127.0.0.1:8000") as client:
...     client.gather([[1, 2], [3, 4]], indices=[1], axis=0)
array([[3, 4]])
"""

from tensor_ops_client._cases import Case, CaseError, read_case, write_case
from tensor_ops_client._version import __version__
from tensor_ops_client.cli import main
from tensor_ops_client.client import (
    API_KEY_VARIABLE,
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    TRANSPORTS,
    AsyncTensorOpsClient,
    ClientCert,
    Health,
    OutputVerdict,
    ProgressHook,
    Retry,
    TensorOpsClient,
    TensorOpsError,
    Transport,
    Verdict,
    Verify,
)

__all__ = [
    "API_KEY_VARIABLE",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "TRANSPORTS",
    "AsyncTensorOpsClient",
    "Case",
    "CaseError",
    "ClientCert",
    "Health",
    "OutputVerdict",
    "ProgressHook",
    "Retry",
    "TensorOpsClient",
    "TensorOpsError",
    "Transport",
    "Verdict",
    "Verify",
    "__version__",
    "main",
    "read_case",
    "write_case",
]
