"""The older versions of the ops already served (issue 44): Gather-1 and -7, GatherND-5, Pad-1 and
ScatterNDUpdate-3. Each is a declaration of its own sharing its successor's kernel: what it
refuses that the successor allows, what it answers otherwise (GatherND-5's output shape), and
OpenVINO's CPU plugin at that version on the cases where it follows its own spec."""

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset1 as ov_opset1
import openvino.opset4 as ov_opset4
import openvino.opset5 as ov_opset5
import openvino.opset7 as ov_opset7
import pytest

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.registry import OLDER, REGISTRY, every_version, versions
from tests.ops.movement_support import ELEMENT_TYPES, assert_same_bits, constant, sample


def run(spec: str, arrays: dict[str, Any], attributes: dict[str, Any] | None = None) -> Any:
    op = next(op for op in every_version() if op.spec == spec)
    given = {name: np.asarray(value) for name, value in arrays.items()}
    plan = op.plan(given, {**op.attribute_defaults(), **(attributes or {})})
    assert isinstance(plan, Plan)
    return plan.run(None)


def refusal(spec: str, arrays: dict[str, Any], attributes: dict[str, Any] | None = None) -> str:
    with pytest.raises(SpecError) as refused:
        run(spec, arrays, attributes)
    return f"{refused.value.field}: {refused.value}"


def test_the_versions_served() -> None:
    assert {name: list(versions(name)) for name in OLDER} == {
        "broadcast": [1, 3],
        "gather": [1, 7, 8],
        "gather_nd": [5, 8],
        "pad": [1, 12],
        "scatter_elements_update": [3, 12],
        "scatter_nd_update": [3, 15],
    }
    for name, older in OLDER.items():
        for op in older:
            assert op.name == name and op.version < REGISTRY[name].version
            assert op.spec == f"{REGISTRY[name].spec.rpartition('-')[0]}-{op.version}"


def test_an_older_version_has_only_its_own_attributes() -> None:
    assert [item.name for item in versions("gather")[1].attributes] == []
    assert [item.name for item in versions("gather")[7].attributes] == ["batch_dims"]
    assert [item.name for item in versions("scatter_nd_update")[3].attributes] == []
    assert [item.name for item in versions("pad")[1].attributes] == ["pad_mode"]


@pytest.mark.parametrize("spec", ["Gather-1", "Gather-7"])
def test_gather_1_and_7_refuse_what_gather_8_reads_as_zeros_or_from_the_end(spec: str) -> None:
    data = [[1, 2, 3], [4, 5, 6]]
    assert run(spec, {"data": data, "indices": [2, 0], "axis": 1}).tolist() == [[3, 1], [6, 4]]
    for bad in (-1, 3):
        words = refusal(spec, {"data": data, "indices": [0, bad], "axis": 1})
        assert words.startswith("indices: ") and f"index {bad}" in words and "[0, 2]" in words
    assert run("Gather-8", {"data": data, "indices": [-1, 3], "axis": 1}).tolist() == [
        [3, 0],
        [6, 0],
    ]
    # Empty indices, and an empty axis with no index: nothing to refuse.
    assert run(spec, {"data": data, "indices": np.zeros(0, np.int64), "axis": 1}).shape == (2, 0)


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (3, 4, 5), seed=2)
    indices = np.array([[3, 0], [1, 1]], np.uint8)
    for spec in ("Gather-1", "Gather-7"):
        assert_same_bits(run(spec, {"data": data, "indices": indices, "axis": 1}), data[:, indices])
    tuples = np.array([[2, 3], [0, 1]], np.int32)
    assert_same_bits(
        run("GatherND-5", {"data": data, "indices": tuples}), data[tuples[:, 0], tuples[:, 1]]
    )
    padded = run("Pad-1", {"data": data, "pads_begin": [1, 0, 0], "pads_end": [0, 0, 2]},
                 {"pad_mode": "symmetric"})  # fmt: skip
    assert_same_bits(padded, np.pad(data, ((1, 0), (0, 0), (0, 2)), mode="symmetric"))
    updates = sample(dtype, (2, 5), seed=3)
    expected = data.copy()
    expected[tuples[:, 0], tuples[:, 1]] = updates
    got = run("ScatterNDUpdate-3", {"data": data, "indices": tuples, "updates": updates})
    assert_same_bits(got, expected)


def test_gather_nd_5_flattens_the_batches() -> None:
    data = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    indices = np.array([[[[1]], [[0]], [[2]]], [[[0]], [[2]], [[2]]]])
    newest = run("GatherND-8", {"data": data, "indices": indices}, {"batch_dims": 2})
    older = run("GatherND-5", {"data": data, "indices": indices}, {"batch_dims": 2})
    assert newest.shape == (2, 3, 1) and older.shape == (6, 1)
    assert older.tolist() == newest.reshape(6, 1).tolist()
    # One batch dimension: the same shape as GatherND-8's.
    one = run("GatherND-5", {"data": data, "indices": [[1], [0]]}, {"batch_dims": 1})
    assert one.tolist() == [[4, 5, 6, 7], [12, 13, 14, 15]]
    words = refusal("GatherND-5", {"data": data, "indices": [[-1]]})
    assert words.startswith("indices: ") and "GatherND-8" in words


def test_pad_1_refuses_negative_pads_that_pad_12_crops() -> None:
    data = [[1, 2, 3], [4, 5, 6]]
    cropped = run("Pad-12", {"data": data, "pads_begin": [0, -1], "pads_end": [1, 0]},
                  {"pad_mode": "constant"})  # fmt: skip
    assert cropped.tolist() == [[2, 3], [5, 6], [0, 0]]
    for name in ("pads_begin", "pads_end"):
        pads = {"pads_begin": [0, 0], "pads_end": [0, 0], name: [0, -1]}
        words = refusal("Pad-1", {"data": data, **pads}, {"pad_mode": "edge"})
        assert words.startswith(f"{name}: Pad-1: {name} must not be negative")


def test_scatter_nd_update_3_refuses_negative_indices() -> None:
    words = refusal("ScatterNDUpdate-3", {"data": [1, 2, 3], "indices": [[-1]], "updates": [9]})
    assert words.startswith("indices: ") and "[0, s_j - 1]" in words
    # Duplicates: the last update stays, as ScatterNDUpdate-15 with reduction none.
    got = run("ScatterNDUpdate-3", {"data": [1, 2, 3], "indices": [[1], [1]], "updates": [7, 8]})
    assert got.tolist() == [1, 8, 3]


# ------------------------------------------------------------------------------------------------
# OpenVINO's CPU plugin at each version, on the cases where it follows its spec


def _plugin(node: Any, parameter: Any, data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    compiled = ov.Core().compile_model(ov.Model([node], [parameter]), "CPU")
    return np.asarray(compiled([data])[0])


def _cases(seed: int) -> list[tuple[np.ndarray[Any, Any], np.random.Generator]]:
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(12):
        shape = tuple(int(size) for size in rng.integers(1, 5, size=int(rng.integers(1, 4))))
        data = rng.integers(-100, 100, size=shape).astype(np.int32)
        found.append((data, rng))
    return found


@pytest.mark.parametrize("version", [1, 7])
def test_gather_against_the_cpu_plugin(version: int) -> None:
    opset = ov_opset1 if version == 1 else ov_opset7
    for data, rng in _cases(version):
        axis = int(rng.integers(0, data.ndim))
        indices = rng.integers(0, data.shape[axis], size=(2, 3)).astype(np.int64)
        parameter = ov_opset1.parameter(list(data.shape), ov.Type.i32)
        node = opset.gather(parameter, constant(indices), constant(np.array(axis, np.int64)))
        expected = _plugin(node, parameter, data)
        got = run(f"Gather-{version}", {"data": data, "indices": indices, "axis": axis})
        assert_same_bits(got, expected)


def test_gather_nd_5_against_the_cpu_plugin() -> None:
    rng = np.random.default_rng(5)
    for batch_dims in (0, 1, 2):
        data = rng.integers(-100, 100, size=(2, 3, 4, 5)).astype(np.int32)
        tuple_length = int(rng.integers(1, 4 - batch_dims))
        high = data.shape[batch_dims : batch_dims + tuple_length]
        indices = np.stack(
            [rng.integers(0, limit, size=(*data.shape[:batch_dims], 2)) for limit in high], -1
        ).astype(np.int64)
        parameter = ov_opset1.parameter(list(data.shape), ov.Type.i32)
        node = ov_opset5.gather_nd(parameter, constant(indices), batch_dims)
        expected = _plugin(node, parameter, data)
        got = run("GatherND-5", {"data": data, "indices": indices}, {"batch_dims": batch_dims})
        assert_same_bits(got, expected)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
def test_pad_1_against_the_cpu_plugin(mode: str) -> None:
    for data, rng in _cases(11):
        limit = [size - 1 if mode == "reflect" else size for size in data.shape]
        begin = np.array([rng.integers(0, bound + 1) for bound in limit], np.int64)
        end = np.array([rng.integers(0, bound + 1) for bound in limit], np.int64)
        parameter = ov_opset1.parameter(list(data.shape), ov.Type.i32)
        node = ov_opset1.pad(parameter, constant(begin), constant(end), mode)
        expected = _plugin(node, parameter, data)
        got = run("Pad-1", {"data": data, "pads_begin": begin, "pads_end": end}, {"pad_mode": mode})
        assert_same_bits(got, expected)


def test_scatter_nd_update_3_against_the_cpu_plugin() -> None:
    rng = np.random.default_rng(3)
    for _ in range(10):
        data = rng.integers(-100, 100, size=(4, 3, 2)).astype(np.int32)
        tuple_length = int(rng.integers(1, 4))
        # Distinct tuples: the spec leaves duplicates undefined.
        flat = rng.permutation(int(np.prod(data.shape[:tuple_length])))[:3]
        indices = np.stack(np.unravel_index(flat, data.shape[:tuple_length]), -1).astype(np.int64)
        updates = rng.integers(-100, 100, size=(3, *data.shape[tuple_length:])).astype(np.int32)
        parameter = ov_opset1.parameter(list(data.shape), ov.Type.i32)
        node = (
            ov_opset4.scatter_nd_update(  # ScatterNDUpdate-3, in opset4 as in every opset up to 14
                parameter, constant(indices), ov_opset1.constant(updates)
            )
        )
        expected = _plugin(node, parameter, data)
        got = run("ScatterNDUpdate-3", {"data": data, "indices": indices, "updates": updates})
        assert_same_bits(got, expected)
