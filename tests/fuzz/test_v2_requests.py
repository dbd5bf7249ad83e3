"""A grammar-based fuzzer over ``/v2`` infer requests: the JSON header (inputs with odd names,
shapes, datatypes, data and parameters; outputs; request parameters such as ``batch_dims`` of
every JSON type; ids), the binary tensors after it with sizes that lie, and the
``Inference-Header-Content-Length`` that frames them (non-ASCII digits, huge, negative, spaced).

Every answer is a 4xx in ``{"error"}`` or a 200, never a 5xx, never a traceback in the log.
"""

import math
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.registry import REGISTRY
from tests.fuzz.driver import Service, check, fuzz_settings
from tests.fuzz.grammar import (
    EDGE_SIZES,
    INTS,
    JSON_SCALARS,
    JSON_VALUES,
    SIZES,
    json_text,
    number_header_value,
)

_INPUTS = {"roll": ["data", "shift", "axes"], "gather": ["data", "indices", "axis"]}
_ITEMSIZES = {
    "BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
    "INT32": 4, "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8,
}  # fmt: skip
_ODD_DATATYPES = st.one_of(
    st.sampled_from(["BYTES", "fp32", "", "FP128", "INT4", "F32", "float32", "x" * 500]),
    JSON_SCALARS,
)
_HEADER = b"inference-header-content-length"
#: What one request bends: nothing (edge shapes of valid inputs) most often, else one part.
_BENDS = st.sampled_from(
    [
        *["none"] * 10, "names", "datatype", "shape", "shape", "data", "binary_data_size",
        "input_parameters", "parameters", "batch_dims", "outputs", "id", "top",
        "header_length", "binary_length", "media", "path",
    ]
)  # fmt: skip
_SMALL_SHAPES = st.sampled_from([[], [1], [2], [3], [2, 2], [2, 3], [1, 1, 2]])
_ODD_SHAPES = st.one_of(
    st.sampled_from(
        [[-1], [1.5], [True], ["2"], [[2]], [None], [2**64], [-(2**70)], [0] * 65, [1] * 5000]
    ),
    JSON_SCALARS,
)
_ODD_SIZES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([0, 1, 7, -1, 2**63, 2**64, True, False, 1.0, "8", None, [8], {}]),
    JSON_SCALARS,
)
_ODD_DATA = st.one_of(
    JSON_VALUES, st.lists(INTS, max_size=6), st.just([]), st.just([[1], [2, 3]]), st.just([[0]])
)
_ODD_PARAMETERS = st.one_of(
    JSON_VALUES,
    st.dictionaries(st.sampled_from(["binary_data_output", "batch_dims", "x"]), JSON_VALUES),
)
_ODD_OUTPUTS = st.one_of(
    JSON_VALUES,
    st.lists(
        st.fixed_dictionaries(
            {"name": st.one_of(st.sampled_from(["output", "out", ""]), JSON_SCALARS)},
            optional={"parameters": st.dictionaries(st.just("binary_data"), JSON_VALUES)},
        ),
        max_size=2,
    ),
)
_PATHS = {
    model: [f"/v2/models/{model}/infer", f"/v2/models/{model}/versions/{version}/infer"]
    for model in _INPUTS
    for version in (REGISTRY[model].version,)
}
_ODD_PATHS = st.sampled_from(
    ["/v2/models/roll/versions/2/infer", "/v2/models/conv/infer", "/v2/models/gather/infer/"]
)
_MEDIA = st.sampled_from([b"application/json", b"application/octet-stream", None])
_ODD_MEDIA = st.sampled_from([b"text/plain", b"\xff", b"application/x-npz", b""])


def _shape(draw: st.DrawFn, name: str) -> list[int]:
    """A legal declared shape: small, or (for data and indices) a 0 beside edge sizes."""
    if name in ("shift", "axes"):
        return draw(st.sampled_from([[], [1], [2]]))
    if name == "axis":
        return draw(st.sampled_from([[], [1]]))
    if draw(st.integers(0, 2)) == 0:
        dims = draw(st.lists(SIZES, min_size=1, max_size=5))
        dims[draw(st.integers(0, len(dims) - 1))] = 0
        return dims
    return list(draw(_SMALL_SHAPES))


def _count(shape: Any) -> int | None:
    """The elements of a shape, when it is a list of non-negative integers holding few."""
    if not isinstance(shape, list) or not all(type(size) is int and size >= 0 for size in shape):
        return None
    if 0 in shape:
        return 0
    count = 1
    for size in shape:
        count *= size
        if count > 64:
            return None
    return count


def _input(
    draw: st.DrawFn, name: Any, bend: str | None, binary: bool
) -> tuple[dict[str, Any], bytes | None]:
    """One input, valid but for ``bend``, and its binary data when it is sent as binary."""
    key = name if isinstance(name, str) else "data"
    if key == "data":
        datatype: Any = draw(st.sampled_from(sorted(_ITEMSIZES)))
    else:
        datatype = draw(st.sampled_from(["INT64", "INT32", "INT64"]))
    if bend == "datatype":
        datatype = draw(_ODD_DATATYPES)
    shape: Any = _shape(draw, key)
    if bend == "shape":
        shape = draw(_ODD_SHAPES)
    item: dict[str, Any] = {"name": name, "shape": shape, "datatype": datatype}
    count = _count(shape)
    itemsize = _ITEMSIZES.get(datatype, 4) if isinstance(datatype, str) else 4
    values = [0] * (count or 0)
    if key == "data" and count:
        leaf = st.booleans() if datatype == "BOOL" else st.integers(0, 3)
        values = draw(st.lists(leaf, min_size=count, max_size=count))
    chunk = None
    if binary:
        size: Any = (count or 0) * itemsize
        if bend == "binary_data_size":
            size = draw(_ODD_SIZES)
        item["parameters"] = {"binary_data_size": size}
        if key == "data":
            chunk = random.Random(draw(st.integers(0, 2**32 - 1))).randbytes(
                (count or 0) * itemsize
            )
        else:
            chunk = bytes((count or 0) * itemsize)
    else:
        item["data"] = values
    if bend == "data":
        item["data"] = draw(_ODD_DATA)
    if bend == "input_parameters":
        item["parameters"] = draw(JSON_VALUES)
    if bend == "names" and draw(st.booleans()):
        del item[draw(st.sampled_from(["name", "shape", "datatype"]))]
    return item, chunk


@st.composite
def requests(draw: st.DrawFn, model: str) -> tuple[str, bytes, list[tuple[bytes, bytes]]]:
    """An infer request valid but for one bent part: its path, body and headers."""
    bend = draw(_BENDS)
    names: list[Any] = list(_INPUTS[model])
    if bend == "names":
        mutation = draw(st.integers(0, 2))
        if mutation == 0:
            names.pop(draw(st.integers(0, len(names) - 1)))
        elif mutation == 1:
            names.append(draw(st.sampled_from([*names, "extra", "", "x" * 300, 3, None])))
        else:
            names[draw(st.integers(0, len(names) - 1))] = draw(
                st.sampled_from(["DATA", "data ", "output", 1, None, ["data"]])
            )
    binary = draw(st.booleans())
    bent = draw(st.integers(0, len(names) - 1))
    drawn = [
        _input(draw, name, bend if position == bent else None, binary)
        for position, name in enumerate(names)
    ]
    request: Any = {"inputs": [item for item, _ in drawn]}
    if model == "gather" and draw(st.booleans()):
        request["parameters"] = {"batch_dims": draw(st.integers(-2, 2))}
    if bend == "batch_dims":
        request["parameters"] = {"batch_dims": draw(st.one_of(INTS, JSON_VALUES))}
    if bend == "parameters":
        request["parameters"] = draw(_ODD_PARAMETERS)
    if draw(st.booleans()):
        request["outputs"] = [
            {"name": "output", "parameters": {"binary_data": draw(st.booleans())}}
        ]
    if bend == "outputs":
        request["outputs"] = draw(_ODD_OUTPUTS)
    if draw(st.booleans()):
        request["id"] = draw(st.sampled_from(["1", "", "x" * 300]))
    if bend == "id":
        request["id"] = draw(JSON_VALUES)
    if bend == "top":
        request = draw(JSON_VALUES) if draw(st.booleans()) else {"inputs": draw(JSON_VALUES)}
    head = json_text(request)
    chunks = b"".join(chunk for _, chunk in drawn if chunk is not None)
    if bend == "binary_length":
        cut = draw(st.integers(-8, 8))
        chunks = chunks[:cut] if cut < 0 else chunks + bytes(cut)
    media = draw(_ODD_MEDIA if bend == "media" else _MEDIA)
    headers = [] if media is None else [(b"content-type", media)]
    if binary or bend == "header_length":
        length = number_header_value(draw, len(head)) if bend == "header_length" else None
        headers.append((_HEADER, length or str(len(head)).encode()))
    path = draw(_ODD_PATHS if bend == "path" else st.sampled_from(_PATHS[model]))
    return path, head + chunks, headers


@fuzz_settings(500)
@given(
    model=st.sampled_from(sorted(_INPUTS)),
    data=st.data(),
    app=st.sampled_from(["default", "widest"]),
)
def test_v2_infer_requests(fuzz: Service, model: str, data: st.DataObject, app: str) -> None:
    path, body, headers = data.draw(requests(model))
    answer = fuzz.call(app, "POST", path, headers, body)
    check(fuzz, answer, v2=True, case="v2: infer requests")


@fuzz_settings(250)
@given(
    dims=st.lists(st.sampled_from(EDGE_SIZES), min_size=1, max_size=4),
    zero=st.integers(0, 4),
    indices_dims=st.lists(st.sampled_from(EDGE_SIZES), min_size=0, max_size=3),
    datatype=st.sampled_from(sorted(_ITEMSIZES)),
    axis=st.integers(-4, 4),
    batch_dims=st.integers(-3, 3),
    binary=st.booleans(),
    app=st.sampled_from(["default", "widest"]),
)
def test_v2_shapes_that_hold_nothing(
    fuzz: Service,
    dims: list[int],
    zero: int,
    indices_dims: list[int],
    datatype: str,
    axis: int,
    batch_dims: int,
    binary: bool,
    app: str,
) -> None:
    """Empty tensors of any declared shape, data and indices both: each is legal in itself, and
    their dimensions meet in Gather's output (data.rank - 1 + indices.rank dimensions)."""
    data_shape = list(dims)
    data_shape[min(zero, len(dims) - 1)] = 0
    indices_shape = [*indices_dims, 0] if indices_dims else [0]

    def empty(name: str, shape: list[int], kind: str) -> dict[str, Any]:
        if binary:
            return {"name": name, "shape": shape, "datatype": kind, "parameters": {
                "binary_data_size": 0}}  # fmt: skip
        return {"name": name, "shape": shape, "datatype": kind, "data": []}

    request = {
        "inputs": [
            empty("data", data_shape, datatype),
            empty("indices", indices_shape, "INT64"),
            {"name": "axis", "shape": [], "datatype": "INT64", "data": [axis]},
        ],
        "parameters": {"batch_dims": batch_dims},
    }
    head = json_text(request)
    headers = [(b"content-type", b"application/json")]
    if binary:
        headers.append((_HEADER, str(len(head)).encode()))
    answer = fuzz.call(app, "POST", "/v2/models/gather/infer", headers, head)
    check(fuzz, answer, v2=True, case="v2: empty tensors of edge shapes")
    assert answer.status != 200 or math.prod(answer.json()["outputs"][0]["shape"]) == 0
