"""KServe's ``InferenceGRPCClient`` calls both models of a running service, unchanged.

Run by ``tests/grpc/test_tritonclient_grpc.py`` in a process of its own (KServe's protobuf messages
and tritonclient's share names, and one process holds only one of them):

    python tests/kserve_grpc_sample.py 127.0.0.1:8001

Exits non-zero at the first answer that is not bit for bit the kernel's; prints a summary last.
"""

import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from kserve import InferenceGRPCClient, InferInput, InferRequest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.ops import gather, roll
from tests.support import assert_same_bits, sample, v2_name

Array = npt.NDArray[Any]


def infer_input(name: str, array: Array, raw: bool) -> InferInput:
    datatype = v2_name(array.dtype)
    if raw:
        tensor = InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=True)
        return tensor
    # A flat list: KServe sends it as typed contents.
    return InferInput(name, list(array.shape), datatype, data=array.reshape(-1).tolist())


async def call(
    client: InferenceGRPCClient,
    model: str,
    arrays: dict[str, Array],
    raw: bool,
    parameters: dict[str, Any] | None = None,
) -> Array:
    inputs = [infer_input(name, array, raw) for name, array in arrays.items()]
    request = InferRequest(model, inputs, request_id=f"kserve-{model}", parameters=parameters)
    response = await client.infer(request)
    assert response.id == f"kserve-{model}", response.id
    [output] = response.outputs
    assert output.name == "output"
    result: Array = output.as_numpy()
    return result


async def main(address: str) -> int:
    checked = 0
    async with InferenceGRPCClient(address) as client:
        assert await client.is_server_ready()
        assert await client.is_model_ready("roll")
        assert await client.is_model_ready("gather")
        for dtype in ("BOOL", "INT8", "UINT16", "INT64", "FP16", "FP32", "FP64"):
            for raw in (True, False):
                if dtype == "FP16" and not raw:
                    continue  # no typed contents for FP16 in the protocol
                data = sample(dtype, (3, 4), finite=True, seed=checked)
                shift = np.array([1, -2], np.int64)
                axes = np.array([0, 1], np.int32)
                rolled = await call(
                    client, "roll", {"data": data, "shift": shift, "axes": axes}, raw
                )
                assert_same_bits(rolled, roll(data, shift, axes))
                indices = np.array([[0, 3], [-1, 4]], np.int64)
                axis = np.array(1, np.int64)
                arrays = {"data": data, "indices": indices, "axis": axis}
                picked = await call(client, "gather", arrays, raw)
                assert_same_bits(picked, gather(data, indices, axis))
                per_row = np.array([[0], [3], [-1]], np.int64)  # one index for each row of data
                batched = await call(
                    client,
                    "gather",
                    {"data": data, "indices": per_row, "axis": axis},
                    raw,
                    parameters={"batch_dims": 1},
                )
                assert_same_bits(batched, gather(data, per_row, axis, 1))
                checked += 3
    print(f"kserve sample: {checked} answers bit-exact")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
