"""``client.verify(op, inputs, outputs)`` against a real server, sync and async, on the HTTP
transports: a Verdict that says what differs, tolerances applied, the op's refusals raised."""

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tensor_ops_client import AsyncTensorOpsClient, TensorOpsClient, TensorOpsError, Verdict

pytestmark = pytest.mark.e2e

HTTP_TRANSPORTS = ["npz", "json", "v2"]


def _case(dtype: Any) -> tuple[dict[str, Any], np.ndarray]:
    data = np.arange(12, dtype=np.float32).reshape(3, 4).astype(dtype)
    return {"data": data, "shift": 1, "axes": 1}, np.roll(data, 1, axis=1)


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int8, np.bool_])
def test_a_right_output_is_equal_and_a_flipped_bit_is_found(
    live_url: str, transport: Any, dtype: Any
) -> None:
    inputs, output = _case(dtype)
    wrong = output.copy()
    wrong.reshape(-1).view(np.uint8)[5 * wrong.dtype.itemsize] ^= 1
    with TensorOpsClient(live_url, transport=transport, retry=False) as client:
        right = client.verify("roll", inputs, {"output": output})
        verdict = client.verify("roll", inputs, {"output": wrong})
    assert isinstance(right, Verdict) and right.equal and right.rule == {"bit_equal": True}
    assert right["output"].compared == 12
    assert not verdict.equal
    (judged,) = verdict.outputs
    assert judged.mismatches == 1 and judged.first[0]["index"] == [1, 1]
    assert judged.expected_dtype == np.dtype(dtype).name
    assert verdict.as_dict()["outputs"][0]["mismatches"] == 1


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_a_tolerance_is_applied_and_said(live_url: str, transport: Any) -> None:
    inputs, output = _case(np.float64)
    near = output.copy()
    near.view(np.uint64)[0, 0] += np.uint64(2)
    with TensorOpsClient(live_url, transport=transport, retry=False) as client:
        strict = client.verify("roll", inputs, {"output": near})
        lenient = client.verify("roll", inputs, {"output": near}, tolerance={"ulp": 2})
        with pytest.raises(ValueError, match=r"tolerance\.ulp"):
            client.verify("roll", inputs, {"output": near}, tolerance={"ulp": -2})
    assert not strict.equal and strict["output"].max_ulp == 2
    assert lenient.equal and lenient.rule["ulp"] == 2


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_the_ops_refusal_is_raised_as_its_own(live_url: str, transport: Any) -> None:
    with TensorOpsClient(live_url, transport=transport, retry=False) as client:
        with pytest.raises(TensorOpsError) as caught:
            client.verify("roll", {"data": [1, 2], "shift": 1, "axes": 5}, {"output": [2, 1]})
        with pytest.raises(TensorOpsError) as own:
            client.call("roll", {"data": [1, 2], "shift": 1, "axes": 5})
    assert (caught.value.status, caught.value.kind, caught.value.field) == (
        own.value.status,
        own.value.kind,
        own.value.field,
    )


@pytest.mark.anyio
async def test_the_async_client_verifies_too(live_url: str) -> None:
    inputs, output = _case(np.float16)
    async with AsyncTensorOpsClient(live_url, retry=False) as client:
        verdict = await client.verify("roll", inputs, {"output": output[:, :2]})
    assert not verdict.equal
    assert verdict["output"].shape_equal is False and verdict["output"].dtype_equal is True
