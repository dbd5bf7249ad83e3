"""The JSON route's refusals a newcomer meets first, in the op's words, for every op of the
registry: a required attribute left out is named as one (not a bare "Field required"); an
attribute sent as a tensor input is (a base64 .npy or a list) is said to be an attribute, its
value never echoed; a variadic input's tensors sent in one field (a ragged list) say how the
op's inputs are sent."""

import base64
import io
from typing import Any

import httpx
import numpy as np
import pytest

from app.ops.declaration import INTS, Op
from app.registry import REGISTRY

pytestmark = pytest.mark.anyio


def first_example(op: Op) -> dict[str, Any]:
    return dict(next(iter(op.examples.values()))["value"])


def npy_base64(value: Any) -> str:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(value), allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode()


REQUIRED = [
    (op.name, item.name) for op in REGISTRY.values() for item in op.attributes if item.required
]
ATTRIBUTES = [
    (op.name, item.name)
    for op in REGISTRY.values()
    for item in op.attributes
    if item.name in first_example(op)
]
#: The attributes of one value (a list of integers is an INTS attribute's own form).
SINGLE = [
    (name, attribute)
    for name, attribute in ATTRIBUTES
    if getattr(REGISTRY[name].attribute(attribute), "kind", INTS) != INTS
]
VARIADIC = [op.name for op in REGISTRY.values() if op.variadic is not None]


@pytest.mark.parametrize(("op_name", "attribute"), REQUIRED)
async def test_a_required_attribute_left_out_is_named_as_one(
    client: httpx.AsyncClient, op_name: str, attribute: str
) -> None:
    op = REGISTRY[op_name]
    item = op.attribute(attribute)
    assert item is not None
    body = {key: value for key, value in first_example(op).items() if key != attribute}
    response = await client.post(f"/{op_name}", json=body)
    assert response.status_code == 422
    assert response.json()["detail"] == [
        {
            "loc": ["body", attribute],
            "msg": f"missing attribute {attribute!r}: a required attribute of {op.spec} "
            f"(no default), {item.kind_words}",
            "type": "missing",
        }
    ]


@pytest.mark.parametrize(("op_name", "attribute"), ATTRIBUTES)
async def test_an_attribute_sent_as_a_base64_npy_is_told_and_not_echoed(
    client: httpx.AsyncClient, op_name: str, attribute: str
) -> None:
    op = REGISTRY[op_name]
    item = op.attribute(attribute)
    assert item is not None
    example = first_example(op)
    sent = npy_base64(example[attribute])
    response = await client.post(f"/{op_name}", json={**example, attribute: sent})
    assert response.status_code == 422
    assert response.json()["detail"] == [
        {
            "loc": ["body", attribute],
            "msg": f"{attribute} is an attribute of {op.spec}, not a tensor input: send "
            f"{item.kind_words} in the JSON body, not a base64 .npy",
            "type": "invalid_field",
        }
    ]
    assert sent[:12] not in response.text


@pytest.mark.parametrize(("op_name", "attribute"), SINGLE)
async def test_an_attribute_of_one_value_sent_as_a_list_is_told(
    client: httpx.AsyncClient, op_name: str, attribute: str
) -> None:
    op = REGISTRY[op_name]
    item = op.attribute(attribute)
    assert item is not None
    example = first_example(op)
    response = await client.post(f"/{op_name}", json={**example, attribute: [example[attribute]]})
    assert response.status_code == 422
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["body", attribute]
    assert problem["msg"] == (
        f"{attribute} is an attribute of {op.spec}, not a tensor input: send "
        f"{item.kind_words} in the JSON body, not a list"
    )


@pytest.mark.parametrize("op_name", VARIADIC)
async def test_a_variadic_inputs_tensors_in_one_field_say_how_to_send_them(
    client: httpx.AsyncClient, op_name: str
) -> None:
    op = REGISTRY[op_name]
    assert op.variadic is not None
    name = op.variadic.name
    example = first_example(op)
    tensors = [value for key, value in example.items() if key.startswith(f"{name}_")]
    others = {key: value for key, value in example.items() if not key.startswith(f"{name}_")}
    how = (
        f"{op.spec} takes its inputs as the fields {name}_0, {name}_1, {name}_2, ... (one "
        f'tensor a field, at least one): {{"{name}_0": [[1, 2]], "{name}_1": [[3, 4]], ...}}'
    )
    # A ragged list of several tensors where the first goes.
    ragged = [[1, 2], [3, 4, 5]]
    for field in (f"{name}_0", f"{name}_1"):
        body = {**others, f"{name}_0": tensors[0], field: ragged}
        response = await client.post(f"/{op_name}", json=body)
        assert response.status_code == 400
        (problem,) = response.json()["detail"]
        assert problem["loc"] == ["body", field]
        assert problem["msg"].startswith("ragged array: ")
        assert problem["msg"].endswith(f"; to send several tensors: {how}")
    # The tensors under the input's bare name.
    response = await client.post(f"/{op_name}", json={**others, name: tensors})
    assert response.status_code == 422
    assert response.json()["detail"] == [
        {"loc": ["body", name], "msg": f"no field {name!r}: {how}", "type": "extra_forbidden"}
    ]
