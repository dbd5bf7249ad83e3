"""``tensor-ops verify`` over a folder of case files against a real server: every case ends as it
was made to (equal, a flipped bit, inputs the op refuses, no case file at all), the summary
counts them, the exit status says the worst, and the JUnit report validates against a JUnit
XML schema (tests/client/data/junit.xsd, checked by libxml2) with one testcase per case file."""

import ctypes
import ctypes.util
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tensor_ops_client import main, read_case, write_case
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
    assert (
        f"| ` all ` |  | {len(planned)} | {expected['equal']} | {expected['not_equal']} |"
        in summary
    )


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


def _roll_case(folder: Path, name: str, output: Any = None, **extra: Any) -> Path:
    data = np.array([np.inf, 0.1, 1.0, 2.0], dtype=np.float64)
    inputs: dict[str, Any] = {"data": data, "shift": 1, "axes": 0}
    return write_case(
        folder / name, "roll", inputs, None if output is None else {"output": output}, **extra
    )


def _summary_line(out: str, first: str) -> dict[str, str]:
    lines = out.splitlines()
    head = next(line for line in lines if line.startswith("op ")).split()
    row = next(line for line in lines if line.startswith(first)).split()
    return dict(zip(head, row, strict=False))


def test_waivers_skip_known_issues_and_stale_ones_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A case whose every mismatch a waiver matches is waived (JUnit skipped with the reason,
    exit 0); one with a mismatch no waiver matches still fails; a waiver matching nothing is
    stale. Judged in this process (--local): the service's own code."""
    right = np.array([2.0, np.inf, 0.1, 1.0])
    saturated = right.copy()
    saturated[1] = float(np.finfo(np.float32).max)
    both = saturated.copy()
    both[2] = float(np.float32(0.1))
    _roll_case(tmp_path / "cases", "right.npz", right)
    _roll_case(tmp_path / "cases", "saturated.npz", saturated)
    _roll_case(tmp_path / "cases", "both.npz", both)
    waivers = tmp_path / "known.toml"
    waivers.write_text(
        '[[waiver]]\nop = "roll"\ndtype = "f64"\ncause = "saturated"\n'
        'reason = "the CPU plugin saturates infinities (ticket 42)"\n'
        '[[waiver]]\ncause = "nan_quieted"\nreason = "quiets sNaN"\n'
    )
    report = tmp_path / "r.xml"
    argv = ["verify", "--local", str(tmp_path / "cases"), "--junit", str(report)]
    assert main([*argv, "--waivers", str(waivers)]) == 1  # both.npz: through_float32 unwaived
    out = capsys.readouterr().out
    assert _summary_line(out, "roll ")["waived"] == "1"
    assert _summary_line(out, "roll ")["not_equal"] == "1"
    assert "stale waiver (matched nothing): cause=nan_quieted: quiets sNaN" in out
    assert "through_float32: both.npz" in out
    validate_junit(report.read_bytes())
    (skipped,) = ET.fromstring(report.read_bytes()).iter("skipped")
    assert skipped.get("message") == "waived: the CPU plugin saturates infinities (ticket 42)"
    (tmp_path / "cases" / "both.npz").unlink()
    assert main([*argv, "--waivers", str(waivers)]) == 0
    waivers.write_text('[[waiver]]\ncause = "through_float99"\nreason = "x"\n')
    assert main([*argv, "--waivers", str(waivers)]) == 2
    assert "cause 'through_float99' is none of narrowed_to_32_bits" in capsys.readouterr().err


def test_a_device_that_failed_is_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _roll_case(tmp_path, "crash.npz", device_error="CPU plugin: segfault in Roll", version=7)
    case = read_case(path)
    assert (case.device_error, case.version, case.outputs) == (
        "CPU plugin: segfault in Roll",
        "7",
        {},
    )
    report = tmp_path / "r.xml"
    assert main(["verify", "--local", str(path), "--junit", str(report)]) == 1
    out = capsys.readouterr().out
    assert "DEVICE_FAILED crash.npz: device failed: CPU plugin: segfault in Roll" in out
    assert "no output of this name" not in out
    (error,) = ET.fromstring(report.read_bytes()).iter("error")
    assert error.get("type") == "device_failed"
    assert error.get("message") == "device failed: CPU plugin: segfault in Roll"


def test_op_and_dtype_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = np.arange(4, dtype=np.int8)
    write_case(
        tmp_path / "a.npz",
        "roll",
        {"data": data, "shift": 1, "axes": 0},
        {"output": np.roll(data, 1)},
    )
    write_case(
        tmp_path / "b.npz",
        "gather",
        {"data": data.astype(np.float16), "indices": [1], "axis": 0},
        {"output": data[[1]].astype(np.float16)},
    )
    assert main(["verify", "--local", str(tmp_path), "--op", "gather"]) == 0
    assert _summary_line(capsys.readouterr().out, "all")["cases"] == "1"
    assert main(["verify", "--local", str(tmp_path), "--dtype", "i8,f16"]) == 0
    assert _summary_line(capsys.readouterr().out, "all")["cases"] == "2"
    assert main(["verify", "--local", str(tmp_path), "--dtype", "float16", "--op", "roll"]) == 2


def test_hostile_paths_are_refused_unread_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No FIFO waited on, no device or oversized file read: stat first, exit 2, one line."""
    fifo = tmp_path / "pipes" / "fifo.npz"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    big = tmp_path / "big" / "large.npz"
    big.parent.mkdir()
    with big.open("wb") as file:
        file.truncate(3 << 30)  # 3 GiB, sparse: never read
    for argv, words in [
        (["verify", "/dev/zero"], "/dev/zero: a character device, not a case file"),
        (["verify", str(fifo)], "fifo.npz: a FIFO, not a case file"),
        (["verify", str(fifo.parent)], "fifo.npz: a FIFO, not a case file"),
        (["verify", str(big)], f"large.npz: {3 << 30} bytes, more than the case limit"),
        (["verify", str(big.parent), "--max-case-bytes", "100"], "more than the case limit (100"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err


def test_every_report_field_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A case's name and a device's text cannot forge a stdout line, a Markdown heading or
    link, or break the JUnit XML."""
    hostile = "\x1b[2J## owned [x](javascript:alert(1))|`\nNOT_EQUAL fake\u2028\x85"
    right = np.array([2.0, np.inf, 0.1, 1.0])
    wrong = right.copy()
    wrong[0] = 3.0
    _roll_case(tmp_path / "c", f"{hostile}.npz", wrong)
    _roll_case(tmp_path / "c", "dev.npz", device_error=hostile)
    report, summary = tmp_path / "r.xml", tmp_path / "r.md"
    argv = ["verify", "--local", str(tmp_path / "c"), "--junit", str(report)]
    assert main([*argv, "--markdown", str(summary)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u2028" not in out and "\x85" not in out
    assert not any(line.startswith("NOT_EQUAL fake") for line in out.splitlines())
    assert "\\x1b[2J## owned" in out and "\\x0aNOT_EQUAL fake\\u2028\\x85" in out
    validate_junit(report.read_bytes())
    names = [case.get("name") for case in ET.fromstring(report.read_bytes()).iter("testcase")]
    assert "\\x1b[2J## owned [x](javascript:alert(1))|`\\x0aNOT_EQUAL fake\\u2028\\x85.npz" in names
    text = summary.read_text()
    assert not any(line.startswith("#") and "owned" in line for line in text.splitlines())
    # Each hostile field is a code span (no link, no markup) whose | is escaped for the table.
    assert "`` \\x1b[2J## owned [x](javascript:alert(1))\\|`\\x0aNOT_EQUAL" in text
    assert "\x1b" not in text and "\n\n## owned" not in text


def test_local_without_the_service_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _roll_case(tmp_path, "a.npz", np.array([2.0, np.inf, 0.1, 1.0]))
    monkeypatch.setitem(sys.modules, "app.http.verify", None)  # as if app were not installed
    assert main(["verify", "--local", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tensor-ops: --local judges in this process and needs the service's")
    assert "pip install" in err and len(err.splitlines()) == 1


def test_local_and_the_service_give_the_same_verdicts(
    live_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_cases(tmp_path / "cases", 30, seed=3)
    local, remote = tmp_path / "local.xml", tmp_path / "remote.xml"
    assert main(["verify", "--local", str(tmp_path / "cases"), "--junit", str(local)]) == 1
    assert main(["--url", live_url, "verify", str(tmp_path / "cases"), "--junit", str(remote)]) == 1

    def outcomes(path: Path) -> dict[str, tuple[str | None, str | None]]:
        found = {}
        for case in ET.fromstring(path.read_bytes()).iter("testcase"):
            child = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
            found[case.get("name", "")] = (
                None if child is None else child.tag,
                None if child is None else child.get("message"),
            )
        return found

    assert outcomes(local) == outcomes(remote)
