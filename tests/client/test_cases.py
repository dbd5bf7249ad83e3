"""Case files keep every element type, bfloat16 included, and nothing in them is unpickled."""

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tensor_ops_client import CaseError, read_case, write_case
from tensor_ops_wire.cases import encode_case

TYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    ml_dtypes.bfloat16,
    np.float32,
    np.float64,
]


@pytest.mark.parametrize("kind", TYPES)
def test_a_case_comes_back_as_it_was_written(tmp_path: Path, kind: Any) -> None:
    dtype = np.dtype(kind)
    data = np.random.default_rng(0).integers(0, 256, 32, dtype=np.uint8).view(np.uint8)
    data = (data % 2).astype(bool) if dtype.kind == "b" else data.view(dtype).reshape(2, -1)
    output = np.roll(data, 1, axis=0)
    path = write_case(
        tmp_path / "case.npz",
        "roll",
        {"data": data, "shift": 1, "axes": np.array([0], dtype=np.int32)},
        {"output": output},
        {"note": 3},
        tolerance={"ulp": 1},
    )
    case = read_case(path)
    assert case.op == "roll" and case.attributes == {"note": 3}
    assert case.tolerance == {"ulp": 1} and case.path == path
    assert list(case.inputs) == ["data", "shift", "axes"]
    assert case.inputs["data"].dtype == dtype and case.outputs["output"].dtype == dtype
    assert case.inputs["data"].tobytes() == data.tobytes()
    assert case.outputs["output"].tobytes() == output.tobytes()
    assert case.inputs["axes"].dtype == np.int32 and case.inputs["shift"].dtype == np.int64
    # Plain .npy members: NumPy reads the archive with pickles off.
    with np.load(path, allow_pickle=False) as archive:
        assert sorted(archive.files) == [
            "input.axes",
            "input.data",
            "input.shift",
            "meta",
            "output.output",
        ]
        meta = json.loads(archive["meta"].tobytes())
    assert meta["format"] == "tensor-ops-case/1" and meta["op"] == "roll"
    assert meta["dtypes"]["output.output"] == dtype.name


def _archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def test_a_pickled_member_is_refused_not_loaded(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array([object()], dtype=object), allow_pickle=True)
    path = tmp_path / "evil.npz"
    path.write_bytes(_archive({"input.data.npy": buffer.getvalue()}))
    with pytest.raises(CaseError, match="pickle"):
        read_case(path)


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ({"stray.npy": b""}, "none of input.<name>"),
        ({"meta.npy": b"not npy"}, "magic"),
    ],
)
def test_what_is_no_case_is_refused_saying_why(
    tmp_path: Path, members: dict[str, bytes], words: str
) -> None:
    path = tmp_path / "bad.npz"
    path.write_bytes(_archive(members))
    with pytest.raises(CaseError, match=words):
        read_case(path)


def test_a_case_without_its_op_is_refused(tmp_path: Path) -> None:
    body = encode_case("roll", {}, {})
    path = tmp_path / "noop.npz"
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        meta = json.loads(np.load(io.BytesIO(archive.read("meta.npy"))).tobytes())
    del meta["op"]
    buffer = io.BytesIO()
    np.save(buffer, np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    path.write_bytes(_archive({"meta.npy": buffer.getvalue()}))
    with pytest.raises(CaseError, match="names no op"):
        read_case(path)
