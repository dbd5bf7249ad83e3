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
    IGNORED,
    INSTALL,
    ConformCase,
    _base,
    _decoded,
    _refusal,
    _service_documents,
    edge_values,
    edge_variants,
    kept,
    make_cases,
    name_ignored_inputs,
    run_batch,
    write_kept,
)
from tensor_ops_client._verdict import Verdict
from tensor_ops_client._verify_command import find_cases, judge_cases
from tensor_ops_client._verify_reports import Outcome, summary_rows
from tensor_ops_client._waivers import WaiverError, read_waivers, waive
from tensor_ops_client.cli import main
from tensor_ops_client.client import TensorOpsClient
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
    arguments += ["--ops", "roll,gather", "--dtype", "int64,float64", "--examples-only"]
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


def test_every_example_gets_negative_index_and_empty_dimension_variants() -> None:
    # Registry-driven: an op's examples give its variants, with no line written for the op.
    for op in REGISTRY.values():
        inputs = {item.name for item in op.inputs}
        like_data = [item.name for item in op.inputs if item.like_data]
        for example in op.examples.values():
            request = example["value"]
            variants = dict(edge_variants(request, inputs, like_data))
            for key, value in request.items():
                if _base(key) not in inputs:
                    continue
                array = _decoded(value)
                if array.dtype.kind == "b":
                    continue
                if array.ndim >= 1 and array.shape[0] > 0:
                    empty = variants[f"empty-{key}"][key]
                    assert _decoded(empty).size == 0, (op.name, key)
                    assert _decoded(empty).shape[1:] == array.shape[1:], (op.name, key)
                index_like = _base(key) not in like_data and array.dtype.kind in "iuf"
                if index_like and (array > 0).any():
                    negative = np.asarray(variants[f"neg-{key}"][key])
                    assert negative.tolist() == np.where(array > 0, -array, array).tolist()
                    assert negative.shape == array.shape
                else:
                    assert f"neg-{key}" not in variants, (op.name, key)


def test_refused_variants_are_kept_only_when_the_device_died() -> None:
    data = {"data": np.zeros(2, np.float32)}
    cases = [ConformCase("op", "1", "Op", "float32", data, {}, ("data",)) for _ in range(4)]
    cases[1].refused = cases[2].refused = cases[3].refused = "indices: negative"
    cases[1].device_error = "crashed (exit code -6)"
    cases[2].device_error = "RuntimeError: points to non-existing output tensor element"
    cases[3].device_error = f"{HANGED}no answer within 2 s"
    assert kept(cases) == [cases[0], cases[1], cases[3]]


def _cpu_outcomes(
    service: str, tmp_path: Path, op: str, dtype: str, labels: set[str]
) -> tuple[dict[str, ConformCase], list[Outcome]]:
    """The named cases of ``op`` (``<dtype>-<label>``) run on the CPU plugin, written, judged by
    the service and their ignored inputs named: as ``tensor-ops conform`` does, on fewer cases."""
    pytest.importorskip("openvino")
    with TensorOpsClient(service) as client:
        info, openapi = _service_documents(client)
        made = make_cases(
            info,
            openapi,
            [op],
            [dtype],
            None,
            None,
            0,
            probe=lambda name, version, request: _refusal(client, name, version, request),
        )
        cases = [case for case in made if case.path.stem in {f"{dtype}-{x}" for x in labels}]
        assert {case.path.stem for case in cases} == {f"{dtype}-{x}" for x in labels}
        run_batch(cases, "CPU", 60)
        write_kept(cases, tmp_path)
        outcomes = judge_cases(TensorOpsClient(service), find_cases([str(tmp_path)]), None, [])
        by_name = {case.path.as_posix(): case for case in cases}
        name_ignored_inputs(client, outcomes, by_name)
    return by_name, outcomes


@pytest.mark.e2e
def test_cpu_scatter_update_negative_indices_crash_is_recorded_and_the_batch_resumes(
    service: str, tmp_path: Path
) -> None:
    # Example 2 is ScatterUpdate-3's 1D one (data [1, 2, 3, 4], indices [1, 3]); its negative
    # variant (indices [-1, -3]) is refused by the service (the spec raises) and kills the CPU
    # plugin's process; example 3 runs after it in a new child.
    cases, outcomes = _cpu_outcomes(
        service, tmp_path, "scatter_update", "int64", {"2", "2-neg-indices", "3"}
    )
    crash = cases["scatter_update/v3/int64-2-neg-indices.npz"]
    assert crash.inputs["indices"].tolist() == [-1, -3]
    assert crash.refused is not None and "negative" in crash.refused
    assert crash.device_error is not None and crash.device_error.startswith("crashed (exit code")
    words = {outcome.name: (outcome.outcome, outcome.message) for outcome in outcomes}
    assert words["scatter_update/v3/int64-2-neg-indices.npz"] == (
        "device_failed",
        crash.device_error,
    )
    # The cases before and after the crash have the device's answers, judged by the service.
    for name in ("scatter_update/v3/int64-2.npz", "scatter_update/v3/int64-3.npz"):
        assert cases[name].outputs is not None, name
        assert words[name][0] in ("equal", "not_equal"), words[name]
    replayed = read_case(tmp_path / "scatter_update" / "v3" / "int64-2-neg-indices.npz")
    assert replayed.device_error == crash.device_error


@pytest.mark.e2e
def test_cpu_pad_run_time_pad_value_ignored_is_named(service: str, tmp_path: Path) -> None:
    # Example 5 pads with a run-time pad_value (an edge value here); its emptied-data variant
    # is all padding.
    cases, outcomes = _cpu_outcomes(service, tmp_path, "pad", "float32", {"5", "5-empty-data"})
    for outcome in outcomes:
        case = cases[outcome.name]
        pad_value = case.inputs["pad_value"]
        assert pad_value.any(), outcome.name
        assert outcome.outcome == "not_equal", outcome.name
        assert set(outcome.causes) == {f"{IGNORED}pad_value"}, outcome.causes
        assert case.outputs is not None
        # The bits: the device padded with zeros where the spec pads with pad_value.
        output = case.outputs["output"]
        assert outcome.verdict is not None
        assert outcome.verdict["output"].mismatches == outcome.causes[f"{IGNORED}pad_value"]
        if case.inputs["data"].size == 0:
            # Emptied data: the output is all padding, every element 0 (+0.0) on the device.
            assert not output.view(np.uint32).any() and output.size > 0
            assert outcome.causes[f"{IGNORED}pad_value"] == output.size
            continue
        # Negative pads crop, positive ones pad (with zeros, as the device did).
        begin, end, data = case.inputs["pads_begin"], case.inputs["pads_end"], case.inputs["data"]
        kept_part = tuple(
            slice(max(-b, 0), size - max(-e, 0))
            for b, e, size in zip(begin, end, data.shape, strict=True)
        )
        widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end, strict=True)]
        zeros = np.pad(data[kept_part], widths, constant_values=0)
        assert output.view(np.uint32).tolist() == zeros.view(np.uint32).tolist()
        # Every padded element differs (pad_value is an edge value, not 0).
        assert outcome.causes[f"{IGNORED}pad_value"] == output.size - data[kept_part].size


@pytest.mark.e2e
def test_cpu_float16_signalling_nan_is_quieted(service: str, tmp_path: Path) -> None:
    cases, outcomes = _cpu_outcomes(service, tmp_path, "roll", "float16", {"0", "0-neg-shift"})
    for outcome in outcomes:
        case = cases[outcome.name]
        sent = case.inputs["data"].view(np.uint16).ravel().tolist()
        assert 0x7C01 in sent  # the signalling NaN with payload 1
        assert outcome.outcome == "not_equal", outcome.name
        assert set(outcome.causes) == {"nan_quieted"}, outcome.causes
        assert case.outputs is not None
        got = case.outputs["output"].view(np.uint16).ravel().tolist()
        # Quieted: the quiet bit set, the payload kept.
        assert 0x7E01 in got and 0x7C01 not in got


@pytest.mark.e2e
def test_cpu_pad_value_ignored_is_told_apart_from_a_quieted_nan(
    service: str, tmp_path: Path
) -> None:
    # float16: example 5's data holds a signalling NaN too, which the plugin quiets; the
    # padding it ignores and the NaN it quiets are each named.
    cases, outcomes = _cpu_outcomes(service, tmp_path, "pad", "float16", {"5"})
    (outcome,) = outcomes
    case = cases[outcome.name]
    assert case.outputs is not None and outcome.verdict is not None
    data, output = case.inputs["data"], case.outputs["output"]
    quieted = int(np.count_nonzero(data.view(np.uint16) == 0x7C01))
    assert quieted == 1 and np.count_nonzero(output.view(np.uint16) == 0x7E01) == 1
    padding = output.size - int(np.count_nonzero(output.view(np.uint16)))
    assert outcome.causes == {"nan_quieted": quieted, f"{IGNORED}pad_value": padding}
    assert outcome.verdict["output"].mismatches == quieted + padding


def test_an_ignored_input_cause_is_reported_and_waivable(tmp_path: Path) -> None:
    item = {"name": "output", "equal": False, "shape_equal": True, "dtype_equal": True,
            "compared": 24, "mismatches": 19, "causes": {"ignored_pad_value": 18,
                                                        "nan_quieted": 1}}  # fmt: skip
    verdict = Verdict.of({"equal": False, "rule": {}, "outputs": [item]})
    outcome = Outcome(Path("a.npz"), "a.npz", "not_equal", 0.0, "pad", "float16", "12", verdict)
    _head, rows = summary_rows([outcome])
    assert rows[-1][-1] == "nan_quieted 1, ignored_pad_value 18"
    known = tmp_path / "known.toml"
    known.write_text('[[waiver]]\nreason = "CPU pads with 0"\ncause = "ignored_pad_value"\n')
    (waiver,) = read_waivers(known)
    assert waiver.cause == "ignored_pad_value"
    # Only the ignored elements are known: the quieted NaN keeps the case not waived.
    assert waive([waiver], "pad", "float16", "12", verdict) is None
    known.write_text('[[waiver]]\nreason = "typo"\ncause = "ignored"\n')
    with pytest.raises(WaiverError, match="cause 'ignored' is none of"):
        read_waivers(known)
