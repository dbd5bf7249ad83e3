"""``tensor-ops conform``: the install line without OpenVINO, the cases it makes from the
service's examples, and OpenVINO's CPU plugin judged with its known classes named."""

import json
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.registry import REGISTRY
from tensor_ops_client import read_case
from tensor_ops_client._conform import (
    HANGED,
    INSTALL,
    ConformCase,
    edge_values,
    make_cases,
    run_batch,
)
from tensor_ops_client.cli import main
from tests.client.conform_children import crash_or_hang
from tests.support import launch_server, stop_server

ROOT = Path(__file__).resolve().parents[2]


def test_without_openvino_one_line_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # None in sys.modules makes ``import openvino`` raise ImportError, as when not installed.
    monkeypatch.setitem(sys.modules, "openvino", None)
    status = main(["conform", "--device", "CPU", "--out", str(tmp_path / "cases")])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err == INSTALL + "\n"
    assert "pip install 'tensor-ops-client[openvino]'" in captured.err
    assert captured.out == ""
    assert not (tmp_path / "cases").exists()


@pytest.mark.anyio
async def test_info_names_the_inputs_typed_as_the_data(client: httpx.AsyncClient) -> None:
    # conform makes these a model's Parameters, every other input a Constant.
    details = (await client.get("/info")).json()["op_details"]
    for op in REGISTRY.values():
        expected = [item.name for item in op.inputs if item.like_data]
        assert details[op.name]["like_data"] == expected, op.name
    assert details["pad"]["like_data"] == ["data", "pad_value"]
    assert details["roll"]["like_data"] == ["data"]


def test_the_openvino_extra_has_a_lower_bound_only() -> None:
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    (requirement,) = project["optional-dependencies"]["openvino"]
    assert requirement.startswith("openvino>=")
    assert "<" not in requirement and "," not in requirement


def test_cases_cast_data_to_edge_values_and_keep_the_indices() -> None:
    info = {
        "ops": [
            {
                "name": "roll",
                "spec": "Roll-7",
                "inputs": ["data", "shift", "axes"],
                "attributes": {},
                "versions": ["7"],
            }
        ],
        "op_details": {"roll": {"like_data": ["data"]}},
    }
    request = {"data": [[1, 2, 3], [4, 5, 6]], "shift": [-1, 2], "axes": [0, 1]}
    route = {"post": {"requestBody": {"content": {"application/json": {
        "examples": {"example_1": {"summary": "", "value": request}}
    }}}}}  # fmt: skip
    openapi = {"paths": {"/roll/v7": route}}
    cases = list(make_cases(info, openapi, None, ["float16", "int64"], None, None, 0))
    assert [(case.dtype, case.path.as_posix()) for case in cases] == [
        ("float16", "roll/v7/float16-0.npz"),
        ("int64", "roll/v7/int64-0.npz"),
    ]
    half, wide = cases[0].inputs["data"], cases[1].inputs["data"]
    assert half.dtype == np.float16 and half.shape == (2, 3)
    # A quiet NaN with a payload, a signalling one, -0.0, inf, -inf, the smallest subnormal.
    assert half.view(np.uint16).ravel().tolist() == [0x7E01, 0x7C01, 0x8000, 0x7C00, 0xFC00, 1]
    assert wide.dtype == np.int64 and wide.shape == (2, 3)
    assert wide.ravel().tolist() == [2**63 - 1, -(2**63), 1, 0, 2**40 + 7, 2**32]
    for case in cases:
        assert case.inputs["shift"].tolist() == [-1, 2]
        assert case.inputs["axes"].tolist() == [0, 1]
        assert case.inputs["shift"].dtype == np.int64
        assert case.type_name == "Roll" and case.version == "7"
    assert any(value > 2**32 for value in edge_values(np.dtype(np.uint64)))


def test_a_crash_and_a_hang_are_recorded_and_the_batch_resumes() -> None:
    data = {"data": np.zeros(2, np.float32)}
    cases = [
        ConformCase(op, "1", "Op", "float32", data, {}, ("data",))
        for op in ("fine", "crash", "hang", "fine")
    ]
    run_batch(cases, "CPU", timeout=2, child_main=crash_or_hang)
    # The first child ran all four from the start; the third, started after the hang, one.
    assert cases[0].outputs is not None and cases[0].outputs["output"].tolist() == [4]
    assert cases[0].device_error is None
    assert cases[1].outputs is None and cases[1].device_error == "crashed (exit code 3)"
    assert cases[2].outputs is None
    assert cases[2].device_error == f"{HANGED}no answer within 2 s"
    assert cases[3].outputs is not None and cases[3].outputs["output"].tolist() == [1]


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    url, process = launch_server()
    yield url
    stop_server(process)


@pytest.mark.e2e
def test_cpu_plugin_classes_are_named(
    service: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    openvino = pytest.importorskip("openvino")
    out, report = tmp_path / "cases", tmp_path / "report.json"
    junit = tmp_path / "report.xml"
    arguments = ["--url", service, "conform", "--device", "CPU", "--out", str(out)]
    arguments += ["--ops", "roll,gather", "--dtype", "int64,float64"]
    status = main([*arguments, "--json", str(report), "--junit", str(junit)])
    printed = capsys.readouterr().out
    assert status == 1, printed
    document: dict[str, Any] = json.loads(report.read_text())
    assert document["device"] == "CPU"
    assert document["openvino"] == openvino.__version__
    files = sorted(path.relative_to(out).as_posix() for path in out.rglob("*.npz"))
    assert sorted(case["path"] for case in document["cases"]) == files
    assert {case["op"] for case in document["cases"]} == {"roll", "gather"}
    assert {(c["op"], c["version"]) for c in document["cases"]} == {
        ("roll", "7"), ("gather", "1"), ("gather", "7"), ("gather", "8")
    }  # fmt: skip
    causes: dict[str, Counter[str]] = {"int64": Counter(), "float64": Counter()}
    for case in document["cases"]:
        # Every case carries edge values the CPU plugin changes: none is equal.
        assert case["outcome"] == "not_equal", case
        causes[case["dtype"]].update(case["causes"])
        if case["dtype"] == "int64":
            assert case["causes"]["narrowed_to_32_bits"] >= 1, case
    assert set(causes["float64"]) >= {"through_float32", "saturated"}
    assert "narrowed_to_32_bits" not in causes["float64"]
    roll_causes = Counter[str]()
    for case in document["cases"]:
        if case["op"] == "roll":
            roll_causes.update(case["causes"])
    # Roll moves every element it is given: nothing the spec allows is called wrong.
    assert "other" not in roll_causes
    rows = {(row["op"], row["version"], row["dtype"]): row for row in document["summary"]}
    for (op, version, dtype), row in rows.items():
        count = sum(
            1
            for c in document["cases"]
            if (c["op"], c["version"], c["dtype"]) == (op, version, dtype)
        )
        assert row["not_equal"] == count
        assert row["equal"] == row["waived"] == row["refused"] == row["device_failed"] == 0
    # The bits: Roll-7's first example of int64 comes back with each element's low 32 bits.
    case = read_case(out / "roll" / "v7" / "int64-0.npz")
    assert case.version == "7" and case.device_error is None
    data = case.inputs["data"]
    expected = np.roll(data, case.inputs["shift"], case.inputs["axes"])
    assert case.outputs["output"].tolist() == expected.astype(np.int32).astype(np.int64).tolist()
    assert "narrowed_to_32_bits" in printed
    assert junit.read_text().count("<testcase ") == len(files)
    # The folder replays with tensor-ops verify to the same verdicts.
    replay = tmp_path / "replay.xml"
    assert main(["--url", service, "verify", str(out), "--junit", str(replay)]) == 1
    failures = junit.read_text().count("<failure")
    assert replay.read_text().count("<failure") == failures == len(files)
