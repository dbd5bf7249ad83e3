"""``tensor-ops verify`` over a folder of case files against a real server: every case ends as it
was made to (equal, a flipped bit, inputs the op refuses, no case file at all), the summary
counts them, the exit status says the worst, and the JUnit report validates against a JUnit
XML schema (tests/client/data/junit.xsd, checked by libxml2) with one testcase per case file."""

import ctypes
import ctypes.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tensor_ops_client import main, write_case
from tests.support import free_port

pytestmark = pytest.mark.e2e

SCHEMA = Path(__file__).parent / "data" / "junit.xsd"
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.uint64, np.bool_]
#: The outcome each case is made to have, in this proportion.
PLAN = ["equal"] * 6 + ["not_equal"] * 2 + ["refused", "unreadable"]


def validate_junit(document: bytes) -> None:
    """Fail unless ``document`` is valid under the JUnit schema (libxml2's XML Schema check)."""
    found = ctypes.util.find_library("xml2")
    assert found, "libxml2 (libxml2.so.2) is needed to check the JUnit report against its schema"
    lib = ctypes.CDLL(found)
    pointer = ctypes.c_void_p
    lib.xmlSchemaNewMemParserCtxt.restype = pointer
    lib.xmlSchemaNewMemParserCtxt.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.xmlSchemaParse.restype = pointer
    lib.xmlSchemaParse.argtypes = [pointer]
    lib.xmlSchemaNewValidCtxt.restype = pointer
    lib.xmlSchemaNewValidCtxt.argtypes = [pointer]
    lib.xmlReadMemory.restype = pointer
    lib.xmlReadMemory.argtypes = [
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        pointer,
        ctypes.c_int,
    ]
    lib.xmlSchemaValidateDoc.argtypes = [pointer, pointer]
    for name in (
        "xmlFreeDoc",
        "xmlSchemaFreeValidCtxt",
        "xmlSchemaFree",
        "xmlSchemaFreeParserCtxt",
    ):
        getattr(lib, name).argtypes = [pointer]
    schema_text = SCHEMA.read_bytes()
    parser = lib.xmlSchemaNewMemParserCtxt(schema_text, len(schema_text))
    schema = lib.xmlSchemaParse(parser)
    assert schema, "the JUnit schema does not parse"
    checker = lib.xmlSchemaNewValidCtxt(schema)
    doc = lib.xmlReadMemory(document, len(document), b"report.xml", None, 0)
    try:
        assert doc, "the JUnit report is not well-formed XML"
        assert lib.xmlSchemaValidateDoc(checker, doc) == 0, "invalid JUnit report (see stderr)"
    finally:
        if doc:
            lib.xmlFreeDoc(doc)
        lib.xmlSchemaFreeValidCtxt(checker)
        lib.xmlSchemaFree(schema)
        lib.xmlSchemaFreeParserCtxt(parser)


def make_cases(folder: Path, count: int, seed: int = 0) -> dict[str, str]:
    """``count`` case files of Roll and Gather over every kind of element type, each made to
    end one way (``PLAN``), some in a subfolder; their names (as reported) to that outcome."""
    rng = np.random.default_rng(seed)
    planned = {}
    for number in range(count):
        outcome = PLAN[number % len(PLAN)]
        dtype = np.dtype(DTYPES[number % len(DTYPES)])
        where = folder / ("deep" if number % 3 else "") / f"case-{number:05d}.npz"
        where.parent.mkdir(parents=True, exist_ok=True)
        planned[where.as_posix()] = outcome
        if outcome == "unreadable":
            where.write_bytes(b"PK\x03\x04 not a zip")
            continue
        raw = rng.integers(0, 256, 24 * dtype.itemsize, dtype=np.uint8)
        data = (raw % 2).astype(bool) if dtype.kind == "b" else raw.view(dtype)
        data = data.reshape(4, 6)
        op = "roll" if number % 2 else "gather"
        if op == "roll":
            inputs: dict[str, Any] = {"data": data, "shift": 2, "axes": 1}
            output = np.roll(data, 2, axis=1)
            if outcome == "refused":
                inputs["axes"] = 2
        else:
            indices = np.array([3, 0, 3])
            inputs = {"data": data, "indices": indices, "axis": 0}
            output = data[indices]
            if outcome == "refused":
                inputs["axis"] = 5
        if outcome == "not_equal":
            output = output.copy()
            if dtype.kind == "b":
                output[1, 1] = not output[1, 1]
            else:
                place = output.reshape(-1).view(np.uint8)
                place[int(rng.integers(0, place.size))] ^= np.uint8(1 << int(rng.integers(0, 8)))
        write_case(where, op, inputs, {"output": output})
    return planned


def run_harness(
    url: str, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *options: str
) -> tuple[int, str, bytes, str]:
    junit, summary = tmp_path / "report.xml", tmp_path / "summary.md"
    status = main(
        [
            "--url",
            url,
            "verify",
            str(folder),
            "--junit",
            str(junit),
            "--markdown",
            str(summary),
            *options,
        ]
    )
    return status, capsys.readouterr().out, junit.read_bytes(), summary.read_text()


def check_run(planned: dict[str, str], status: int, out: str, report: bytes, summary: str) -> None:
    expected = {kind: list(planned.values()).count(kind) for kind in set(PLAN)}
    assert status == 1  # some case not equal
    head = out.splitlines()[[line.startswith("op ") for line in out.splitlines()].index(True)]
    columns = head.split()
    (total,) = [line.split() for line in out.splitlines() if line.startswith("all ")]
    counts = dict(zip(columns[2:], total[1:], strict=False))
    assert counts["cases"] == str(len(planned))
    for kind in ("equal", "not_equal", "refused", "unreadable"):
        assert counts[kind] == str(expected[kind]), kind
    validate_junit(report)
    root = ET.fromstring(report)
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(planned)
    assert {suite.get("name") for suite in root.findall("testsuite")} == {"roll", "gather", "?"}
    assert root.get("tests") == str(len(planned))
    assert root.get("failures") == str(expected["not_equal"])
    assert root.get("errors") == str(expected["refused"] + expected["unreadable"])
    for case in cases:
        outcome = planned[case.get("file", "")]
        # Names relative to the folder given: a checkout elsewhere keeps the failure history.
        assert case.get("file", "") == f"cases/{case.get('name')}"
        failure, error = case.find("failure"), case.find("error")
        if outcome == "equal":
            assert failure is None and error is None
        elif outcome == "not_equal":
            assert failure is not None and error is None
            assert re.match(r"output: 1 of (18|24) elements differ", failure.get("message", ""))
            assert case.findtext("system-out", "").startswith("{")
        else:
            assert error is not None and error.get("type") == outcome
        if outcome != "unreadable":
            dtype = case.find("properties/property[@name='dtype']")
            assert dtype is not None and dtype.get("value") in {np.dtype(d).name for d in DTYPES}
    assert summary.splitlines()[2].startswith("| op | dtype | cases | equal | not_equal |")
    assert f"| ` all ` |  | {len(planned)} | {expected['equal']} | {expected['not_equal']} |" in summary


def test_a_folder_of_cases_is_judged_case_by_case(
    live_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    planned = make_cases(Path("cases"), 120)
    status, out, report, summary = run_harness(live_url, Path("cases"), tmp_path, capsys, "-j", "4")
    check_run(planned, status, out, report, summary)


def test_a_few_thousand_cases(
    live_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    planned = make_cases(Path("cases"), 3000, seed=1)
    status, out, report, summary = run_harness(live_url, Path("cases"), tmp_path, capsys, "-j", "8")
    check_run(planned, status, out, report, summary)


def test_all_equal_exits_0_and_a_tolerance_forgives(
    live_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = np.linspace(0, 1, 12, dtype=np.float32)
    near = np.roll(data, 1)
    near.view(np.uint32)[3] += 1
    write_case(
        tmp_path / "near.npz", "roll", {"data": data, "shift": 1, "axes": 0}, {"output": near}
    )
    assert main(["--url", live_url, "verify", str(tmp_path / "near.npz")]) == 1
    assert "NOT_EQUAL     near.npz: output: 1 of 12 elements differ [other 1]" in (
        capsys.readouterr().out
    )
    forgiving = ["--url", live_url, "verify", str(tmp_path), "--tolerance", '{"ulp": 1}']
    assert main(forgiving) == 0
    assert "NOT_EQUAL" not in capsys.readouterr().out
    assert main(["--url", live_url, "verify", str(tmp_path), "--tolerance", '{"ulp": -1}']) == 2


def test_an_unreachable_service_is_an_error_per_case_and_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_cases(tmp_path / "cases", 3)  # equal, equal, equal
    url = f"http://127.0.0.1:{free_port()}"
    status, out, report, _ = run_harness(
        url, tmp_path / "cases", tmp_path, capsys, "--retries", "0"
    )
    assert status == 4
    validate_junit(report)
    errors = ET.fromstring(report).findall("./testsuite/testcase/error")
    assert [error.get("type") for error in errors] == ["unreachable"] * 3
    (total,) = [line.split() for line in out.splitlines() if line.startswith("all ")]
    assert total[-1] == "3"  # the unreachable column, shown when some case is


def test_no_case_found_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path)]) == 2
    assert "no case file" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "missing")]) == 2
