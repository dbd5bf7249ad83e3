"""``tensor-ops conform --device NAME --out DIR``: a device's conformance, judged to the bit.

The cases come from the service: ``GET /info`` (ops, versions, attributes, which inputs are
typed as the data) and each version's spec examples (the request examples of ``POST
/<op>/v<N>`` in ``/openapi.json``). For each example and element type, the data-like inputs are
cast to that type and, where the op only moves data, their first elements replaced by the
type's edge values (NaN payloads quiet and signalling, -0.0, infinities, subnormals, the
integer limits, 64-bit integers beyond 32 bits); the index-like inputs are kept.

Each case is one OpenVINO model: the op at its version (``NodeFactory`` of the opset that
holds it), the data-like inputs Parameters, the index-like ones Constants. An op's cases run in
one child process: a crash is recorded against its case (``device_error``) and a new child
resumes after it; a case that does not finish in time is stopped and recorded as hanged.
Each case is written to ``DIR/<op>/v<N>/<n>.npz`` (``write_case``), then the folder is judged
as ``tensor-ops verify`` judges it, with its reports and exit statuses.
"""

import argparse
import gc
import json
import multiprocessing
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from tensor_ops_client._cases import write_case
from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._verdict import Verdict
from tensor_ops_client._verify_command import (
    USAGE,
    find_cases,
    judge_cases,
    report_outcomes,
)
from tensor_ops_client._verify_reports import Outcome
from tensor_ops_client._waivers import Waiver, WaiverError, read_waivers, waive
from tensor_ops_wire.dtypes import UnknownDTypeError, dtype_from_name, element_type_of
from tensor_ops_wire.npy import decode_npy_base64, encode_npy_base64

#: The line printed (exit status 2) when the OpenVINO package cannot be imported.
INSTALL = "tensor-ops conform needs OpenVINO: pip install 'tensor-ops-client[openvino]'"
DEFAULT_DTYPES = ("float32", "float16", "int64", "float64")
DEFAULT_TIMEOUT = 60.0
#: Ops whose output depends on the data's values, not only on where they are: edge values
#: would ask a question of arithmetic (NaN ordering, sums), not of movement.
_COMPARES_VALUES = frozenset({"unique", "gather_tree"})
#: Outcomes as api.md section 13 names them: verify's, and hanged (a device_failed case that
#: did not finish in time).
HANGED = "hanged: "

EPILOG = """\
examples:
  tensor-ops conform --device CPU --out cases/              # every op, version and type
  tensor-ops conform --device GPU --out cases/ --ops roll,gather --dtype int64,float64 \\
      --json report.json --junit report.xml --markdown report.md --waivers known.toml
  tensor-ops verify cases/                                  # replay: the same verdicts

Installed with: pip install 'tensor-ops-client[openvino]'. Exit statuses as tensor-ops verify's.
"""


def add_conform_command(
    commands: "argparse._SubParsersAction[argparse.ArgumentParser]",
    service: Callable[[argparse.ArgumentParser], None],
) -> None:
    """The ``conform`` command's parser (``--op-version`` is a service option)."""
    sub = commands.add_parser(
        "conform",
        help="Judge a device's OpenVINO plugin on every op's spec examples and edge values",
        description="Run the service's ops on an OpenVINO device and verify every answer.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    service(sub)
    sub.add_argument("--device", required=True, help="OpenVINO's device name: CPU, GPU, NPU...")
    sub.add_argument("--out", required=True, metavar="DIR", help="the folder of case files")
    sub.add_argument("--ops", type=_names, metavar="NAMES", help="only these ops (a,b)")
    sub.add_argument(
        "--dtype",
        type=_dtypes,
        default=list(DEFAULT_DTYPES),
        metavar="TYPES",
        help=f"element types of the data (default: {','.join(DEFAULT_DTYPES)})",
    )
    sub.add_argument(
        "--cases-per-op",
        type=_positive,
        metavar="N",
        help="at most N cases per op, version and type (default: every example)",
    )
    sub.add_argument(
        "--examples-only",
        action="store_true",
        help="the examples alone, without their negative-index and empty-dimension variants",
    )
    sub.add_argument(
        "--seed", type=int, default=0, help="the order of the edge values (default: 0)"
    )
    sub.add_argument(
        "--case-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"a case not done by then is hanged (default: {DEFAULT_TIMEOUT:g})",
    )
    sub.add_argument("--waivers", metavar="FILE", help="known issues (as tensor-ops verify's)")
    sub.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    sub.add_argument("--markdown", metavar="FILE", help="write a Markdown summary")
    sub.add_argument("--json", metavar="FILE", help="write the report as JSON (api.md 13)")


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _dtypes(text: str) -> list[str]:
    names = []
    for name in _names(text):
        try:
            names.append(element_type_of(dtype_from_name(name)).numpy)
        except UnknownDTypeError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return names


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive count: {text!r}")
    return int(text)


@dataclass
class ConformCase:
    """One case: the op at a version, its inputs (data-like ones cast), attributes, outputs."""

    op: str
    version: str
    type_name: str
    dtype: str
    inputs: dict[str, npt.NDArray[Any]]
    attributes: dict[str, Any]
    like_data: tuple[str, ...]
    #: The attributes handed to OpenVINO: the request's, the defaults of the rest.
    model_attributes: dict[str, Any] = field(default_factory=dict)
    path: Path = Path()
    outputs: dict[str, npt.NDArray[Any]] | None = None
    device_error: str | None = None
    #: An edge variant the service refused (its words): run on the device all the same, and
    #: kept only when the device crashed or hanged on it (a dead process conforms to no spec).
    refused: str | None = None


def edge_values(dtype: np.dtype[Any]) -> list[Any]:
    """The values of ``dtype`` a plugin is likely to change while moving them (as raw bits for
    the floating types: a NaN's payload survives no arithmetic)."""
    bits: dict[str, tuple[type, list[int]]] = {
        "float64": (
            np.uint64,
            [
                0x7FF8000000000123,
                0x7FF0000000000123,
                0x8000000000000000,
                0x7FF0000000000000,
                0xFFF0000000000000,
                0x0000000000000001,
                0x7E37E43C8800759C,
                0x3FB999999999999A,
                0x7FEFFFFFFFFFFFFF,
            ],
        ),  # qNaN, sNaN, -0.0, inf, -inf, smallest subnormal, 1e300, 0.1, max
        "float32": (
            np.uint32,
            [
                0x7FC00123,
                0x7F800123,
                0x80000000,
                0x7F800000,
                0xFF800000,
                0x00000001,
                0x3DCCCCCD,
                0x7F7FFFFF,
            ],
        ),
        "float16": (np.uint16, [0x7E01, 0x7C01, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x2E66, 0x7BFF]),
        "bfloat16": (np.uint16, [0x7FC1, 0x7F81, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x3DCD, 0x7F7F]),
    }
    if dtype.name in bits:
        carrier, raw = bits[dtype.name]
        return list(np.array(raw, dtype=carrier).view(dtype))
    if dtype.kind == "b":
        return [True, False]
    limits = np.iinfo(dtype)
    values = [int(limits.max), int(limits.min), 1, 0]
    if dtype.itemsize == 8:
        # Beyond 32 bits: a plugin that narrows keeps only the low half.
        values += [2**40 + 7, 2**32, 2**31] + ([-(2**40) - 3, -(2**31) - 1] if limits.min else [])
    return values


def with_edge_values(array: npt.NDArray[Any], seed: int) -> npt.NDArray[Any]:
    """``array`` (already of its type) with its first elements replaced by the type's edge
    values, rotated by ``seed``; its shape kept (an empty one stays empty)."""
    values = edge_values(array.dtype)
    start = seed % len(values) if values else 0
    values = values[start:] + values[:start]
    flat = array.reshape(-1).copy()
    count = min(len(values), flat.size)
    flat[:count] = np.array(values[:count], dtype=array.dtype)
    return flat.reshape(array.shape)


def _decoded(value: Any) -> npt.NDArray[Any]:
    """An example's input value: base64 .npy text or nested lists."""
    if isinstance(value, str):
        return decode_npy_base64(value)
    return np.asarray(value)


def _base(key: str) -> str:
    """An input's declared name: a variadic one is sent as <name>_0, <name>_1, ..."""
    stem = key.rstrip("0123456789")
    return stem.removesuffix("_") if stem != key and stem.endswith("_") else key


def _request_case(
    request: Mapping[str, Any],
    inputs: set[str],
    like_data: Sequence[str],
    dtype: str,
    op: str,
    seed: int,
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
    """An example request's arrays and attributes: its data-like inputs cast to ``dtype`` (and
    given edge values where the op only moves data), its integer index inputs as int64."""
    arrays: dict[str, npt.NDArray[Any]] = {}
    attributes: dict[str, Any] = {}
    for key, value in request.items():
        if key == "dtype":
            continue
        if key in inputs or _base(key) in inputs:
            arrays[key] = _decoded(value)
        else:
            attributes[key] = value
    moves = op not in _COMPARES_VALUES and attributes.get("reduction", "none") == "none"
    for key, array in arrays.items():
        if _base(key) in like_data:
            cast = array.astype(dtype)
            arrays[key] = with_edge_values(cast, seed) if moves else cast
        elif array.dtype.kind != "b":
            # Index-like: integers (an empty JSON list decodes as float64).
            arrays[key] = array.astype(np.int64)
    return arrays, attributes


#: Says whether the service accepts a request of ``POST /<op>/v<N>``: None when it does, else
#: its refusal's words (a case the service refuses is no conformance case).
Probe = Callable[[str, str, Mapping[str, Any]], str | None]


def _as_json(array: npt.NDArray[Any]) -> Any:
    """An input value for a JSON request: nested lists, or ``.npy`` base64 text where lists
    would lose the shape (an empty dimension that is not the last)."""
    if array.size == 0 and array.ndim > 1:
        return encode_npy_base64(array)
    return array.tolist()


def edge_variants(
    request: Mapping[str, Any], inputs: set[str], like_data: Sequence[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """An example request's edge variants, named: ``neg-<input>``, each positive value of an
    index-like input counted from the end instead (``i`` made ``-i``: the same position when the
    dimension is ``i`` long... and a different one otherwise, which the service judges all the
    same); ``empty-<input>``, an input's first dimension made empty. Which of them an op's
    version admits is the service's to say (see ``make_cases``), not a list kept here."""
    for key, value in request.items():
        if key == "dtype" or (key not in inputs and _base(key) not in inputs):
            continue
        array = _decoded(value)
        if array.dtype.kind == "b":
            continue
        if _base(key) not in like_data and array.dtype.kind in "iuf" and (array > 0).any():
            values = array.astype(np.int64)
            yield f"neg-{key}", {**request, key: _as_json(np.where(values > 0, -values, values))}
        if array.ndim >= 1 and array.shape[0] > 0:
            yield f"empty-{key}", {**request, key: _as_json(array[:0])}


def make_cases(
    info: Mapping[str, Any],
    openapi: Mapping[str, Any],
    ops: Sequence[str] | None,
    dtypes: Sequence[str],
    version: int | None,
    per_op: int | None,
    seed: int,
    probe: Probe | None = None,
) -> Iterator[ConformCase]:
    """The cases of the ops served (``info``: ``GET /info``) from their examples (``openapi``:
    ``/openapi.json``), for each version and element type asked; with ``probe``, also each
    example's edge variants (``edge_variants``), those the service refuses marked ``refused``."""
    details = info.get("op_details", {})
    paths = openapi.get("paths", {})
    for listed in info.get("ops", []):
        name = listed["name"]
        if ops and name not in ops:
            continue
        like_data = tuple(details.get(name, {}).get("like_data", ["data"]))
        inputs = set(listed["inputs"])
        defaults = {key: value for key, value in listed["attributes"].items() if value is not None}
        for served in listed.get("versions", []):
            if version is not None and served != str(version):
                continue
            content = (
                paths.get(f"/{name}/v{served}", {})
                .get("post", {})
                .get("requestBody", {})
                .get("content", {})
                .get("application/json", {})
            )
            examples = list(content.get("examples", {}).values())
            requests: list[tuple[str, dict[str, Any], str | None]] = []
            for number, example in enumerate(examples[:per_op]):
                requests.append((str(number), example["value"], None))
                if probe is None:
                    continue
                for label, variant in edge_variants(example["value"], inputs, like_data):
                    requests.append((f"{number}-{label}", variant, probe(name, served, variant)))
            for dtype in dtypes:
                for number, (label, request, refused) in enumerate(requests):
                    arrays, attributes = _request_case(
                        request, inputs, like_data, dtype, name, seed + number
                    )
                    yield ConformCase(
                        op=name,
                        version=served,
                        type_name=listed["spec"].rpartition("-")[0],
                        dtype=dtype,
                        inputs=arrays,
                        attributes=attributes,
                        like_data=tuple(key for key in arrays if _base(key) in like_data),
                        model_attributes={**defaults, **attributes},
                        path=Path(name) / f"v{served}" / f"{dtype}-{label}.npz",
                        refused=refused,
                    )


# ---- the child process: OpenVINO ------------------------------------------------------------


def _node(case: ConformCase, parameters: list[Any]) -> Any:
    """The op at its version: NodeFactory of the first opset from the version upward that
    makes a node of that name."""
    import openvino as ov  # noqa: PLC0415
    from openvino.utils.node_factory import NodeFactory  # noqa: PLC0415

    arguments = []
    for name, array in case.inputs.items():
        if name in case.like_data:
            parameter = ov.op.Parameter(ov.Type(array.dtype), ov.PartialShape(list(array.shape)))
            parameters.append(parameter)
            arguments.append(parameter.output(0))
        else:
            arguments.append(ov.op.Constant(array).output(0))
    problem = f"no opset holds {case.type_name}-{case.version}"
    attributes = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in case.model_attributes.items()
    }
    # An op's version is the opset it first appeared in, or (ScatterNDUpdate-3, listed from
    # opset4) a later one: the first opset from the version upward that makes it holds it.
    for number in range(int(case.version), 100):
        try:
            factory = NodeFactory(f"opset{number}")
        except (RuntimeError, ValueError):
            break
        try:
            return factory.create(case.type_name, arguments, attributes)
        except (RuntimeError, ValueError, TypeError) as error:
            problem = f"{case.type_name}-{case.version}: {error}"
            if "Couldn't create operation" not in str(error):
                break  # the opset holds it and refused the node: no later version instead
    raise RuntimeError(problem)


def run_case(case: ConformCase, device: str, core: Any) -> dict[str, npt.NDArray[Any]]:
    """The device's outputs of one case (raises what OpenVINO raises)."""
    import openvino as ov  # noqa: PLC0415

    parameters: list[Any] = []
    node = _node(case, parameters)
    model = ov.Model(node.outputs(), parameters)
    compiled = core.compile_model(model, device)
    feed = [case.inputs[name] for name in case.inputs if name in case.like_data]
    results = compiled(feed)
    arrays = [np.array(results[item], copy=True) for item in compiled.outputs]
    # Freed here, inside the case: a plugin that wrote out of its bounds (ScatterUpdate-3's
    # negative indices on CPU) dies when its memory is freed, and the crash must be this case's,
    # not the next one's.
    del results, compiled, model, node
    gc.collect()
    if len(arrays) == 1:
        return {"output": arrays[0]}
    return {f"output_{index}": array for index, array in enumerate(arrays)}


def _child(cases: list[ConformCase], device: str, answers: Any) -> None:
    """Runs in the child: each case's outputs, or its error's words, one message a case, sent
    on the pipe ``answers`` (written at once: a crash loses nothing already sent)."""
    import openvino as ov  # noqa: PLC0415

    core = ov.Core()
    for index, case in enumerate(cases):
        answers.send((index, "started", None))
        try:
            answers.send((index, "outputs", run_case(case, device, core)))
        except Exception as error:
            answers.send((index, "error", f"{type(error).__name__}: {error}".strip()))


def _message(reader: Any, wait: float) -> tuple[int, str, Any] | None:
    """The child's next message within ``wait`` seconds; None when none came; EOFError when
    the child is gone (it held the only writer)."""
    if not reader.poll(wait):
        return None
    message: tuple[int, str, Any] = reader.recv()
    return message


def run_batch(
    cases: list[ConformCase],
    device: str,
    timeout: float,
    child_main: Callable[[list[ConformCase], str, Any], None] = _child,
) -> None:
    """Run one op's cases in child processes, filling each case's outputs or device_error: a
    child that dies leaves its case a crash and a new one resumes after it; a case that does
    not finish within ``timeout`` seconds is hanged. ``child_main`` is what a child runs
    (``_child``; a module-level function, for spawn imports it by name)."""
    context = multiprocessing.get_context("spawn")
    start = 0
    while start < len(cases):
        reader, writer = context.Pipe(duplex=False)
        child = context.Process(target=child_main, args=(cases[start:], device, writer))
        child.start()
        writer.close()  # the child's copy is the only one left: its end is the reader's EOF
        current = done_to = start
        deadline = time.monotonic() + timeout * 4  # the first case also starts OpenVINO
        while done_to < len(cases):
            try:
                message = _message(reader, 0.5)
            except (EOFError, OSError):
                child.join(5)
                cases[current].device_error = f"crashed (exit code {child.exitcode})"
                done_to = current + 1
                break
            if message is None:
                if time.monotonic() > deadline:
                    child.kill()
                    cases[current].device_error = f"{HANGED}no answer within {timeout:g} s"
                    done_to = current + 1
                    break
                continue
            index, kind, value = message
            current = start + index
            if kind == "started":
                deadline = time.monotonic() + timeout
            elif kind == "outputs":
                cases[current].outputs = value
                done_to = current + 1
            else:
                cases[current].device_error = value
                done_to = current + 1
        reader.close()
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
        start = done_to


# ---- the command ------------------------------------------------------------------------------


def _service_documents(client: Any) -> tuple[Any, Any]:
    """``GET /info`` and ``GET /openapi.json``, through the client's own HTTP connection (its
    address, key and TLS settings)."""
    info = client.info()
    response = client._http.get("/openapi.json", headers=client._auth)
    response.raise_for_status()
    return info, response.json()


def _refusal(client: Any, op: str, version: str, request: Mapping[str, Any]) -> str | None:
    """The service's words refusing ``request`` (a 4xx), or None when it answers it."""
    response: httpx.Response = client._http.post(
        f"/{op}/v{version}", json=request, headers=client._auth
    )
    if 400 <= response.status_code < 500:
        return response.text[:300]
    response.raise_for_status()
    return None


def kept(cases: Sequence[ConformCase]) -> list[ConformCase]:
    """The cases of the report: every case the service accepts; of the edge variants it refuses,
    only those the device crashed or hanged on (whatever the spec says of an input, a dead
    process answers nothing it allows)."""
    return [
        case
        for case in cases
        if case.refused is None
        or (
            case.device_error is not None
            and (case.device_error.startswith("crashed") or case.device_error.startswith(HANGED))
        )
    ]


def write_kept(cases: Sequence[ConformCase], folder: Path) -> None:
    """The cases of the report (``kept``) written as case files under ``folder``, each at its
    own relative path, with what the device answered or how it failed."""
    for case in kept(cases):
        write_case(
            folder / case.path,
            case.op,
            case.inputs,
            case.outputs,
            case.attributes,
            device_error=case.device_error,
            version=case.version,
        )


#: The cause of a difference explained by a run-time input the device did not read:
#: ``ignored_<input>`` (``ignored_pad_value``: OpenVINO's CPU plugin pads with zeros whatever
#: Pad's run-time ``pad_value``).
IGNORED = "ignored_"


def name_ignored_inputs(
    client: Any, outcomes: Sequence[Outcome], cases: Mapping[str, ConformCase]
) -> None:
    """Names the cause of a difference that is a run-time input ignored: when a case's device
    outputs differ in fewer elements from what the op gives with one of its single-valued
    data-like inputs after the first (Pad's ``pad_value``, not ``data``) made zero than from
    the op's answer,
    the mismatches that explains are ``ignored_<input>`` instead of what the element-wise
    causes guessed (flushed_subnormal, other); the others keep the causes judged against the
    zeroed answer. Asked of the service for any op with such an input, not a list kept here."""
    for outcome in outcomes:
        case = cases.get(outcome.name)
        if outcome.outcome != "not_equal" or outcome.verdict is None or case is None:
            continue
        if case.outputs is None:
            continue
        for key in case.like_data[1:]:
            if case.inputs[key].size != 1:
                # A single value the op fills with (Pad's pad_value); zeroing a whole tensor
                # (updates) explains elements by chance: narrowed int64 limits come back 0.
                continue
            if not case.inputs[key].any() and not np.signbit(case.inputs[key]).any():
                continue  # already zeros: a device that ignores it gives the same answer
            zeroed = {**case.inputs, key: np.zeros_like(case.inputs[key])}
            try:
                verdict = client.verify(
                    case.op, zeroed, case.outputs, case.attributes, version=case.version
                )
            except TensorOpsError:
                continue
            renamed = _ignored(outcome.verdict.raw, verdict.raw, f"{IGNORED}{key}")
            if renamed is not None:
                outcome.verdict = Verdict.of(renamed)
                break


def _ignored(
    raw: Mapping[str, Any], zeroed: Mapping[str, Any], cause: str
) -> dict[str, Any] | None:
    """The verdict ``raw`` with the mismatches that the op with an input made zeros explains
    (``zeroed``: the device's outputs judged against it) named ``cause``, the rest keeping the
    zeroed verdict's causes (a float16 signalling NaN quieted besides); None when it explains
    none, or a shape or type differs."""
    against = {item["name"]: item for item in zeroed.get("outputs", [])}
    renamed = json.loads(json.dumps(raw))
    explained = False
    for item in renamed["outputs"]:
        other = against.get(item["name"])
        if item["equal"] or other is None:
            continue
        if not (other["shape_equal"] and other["dtype_equal"] and item["shape_equal"]):
            continue
        if other["mismatches"] < item["mismatches"]:
            causes = dict(other.get("causes") or {})
            causes[cause] = item["mismatches"] - other["mismatches"]
            item["causes"] = causes
            explained = True
    return renamed if explained else None


def json_report(
    device: str, version: str, outcomes: Sequence[Outcome], hanged: set[str]
) -> dict[str, Any]:
    """api.md section 13's ``--json`` form."""
    cases = []
    summary: dict[tuple[str, str, str], Counter[str]] = {}
    for outcome in outcomes:
        word = "hanged" if outcome.name in hanged else outcome.outcome
        cases.append(
            {
                "path": outcome.name,
                "op": outcome.op,
                "version": outcome.version,
                "dtype": outcome.dtype,
                "outcome": word,
                "causes": dict(outcome.causes),
            }
        )
        key = (outcome.op, outcome.version or "", outcome.dtype)
        summary.setdefault(key, Counter())[outcome.outcome] += 1
    columns = ("equal", "not_equal", "waived", "refused", "device_failed")
    return {
        "device": device,
        "openvino": version,
        "cases": cases,
        "summary": [
            {"op": op, "version": served, "dtype": dtype, **{c: counts[c] for c in columns}}
            for (op, served, dtype), counts in summary.items()
        ],
    }


def run_conform(args: argparse.Namespace, make_client: Callable[[argparse.Namespace], Any]) -> int:
    """The ``conform`` command: its exit status."""
    try:
        import openvino  # noqa: PLC0415
    except ImportError:
        print(INSTALL, file=sys.stderr)
        return USAGE
    waivers: list[Waiver] = []
    if args.waivers is not None:
        try:
            waivers = read_waivers(Path(args.waivers))
        except WaiverError as error:
            print(f"tensor-ops: --waivers: {error}", file=sys.stderr)
            return USAGE
    started = time.perf_counter()
    try:
        with make_client(args) as client:
            info, openapi = _service_documents(client)
            cases = list(
                make_cases(
                    info,
                    openapi,
                    args.ops,
                    args.dtype,
                    args.op_version,
                    args.cases_per_op,
                    args.seed,
                    probe=None
                    if args.examples_only
                    else lambda op, version, request: _refusal(client, op, version, request),
                )
            )
    except (httpx.HTTPError, TensorOpsError, ValueError) as error:
        print(f"tensor-ops: the service's op list could not be read: {error}", file=sys.stderr)
        return 4
    if not cases:
        print("tensor-ops: no case: no op, version or example matched", file=sys.stderr)
        return USAGE
    out = Path(args.out)
    batches: dict[tuple[str, str], list[ConformCase]] = {}
    for case in cases:
        batches.setdefault((case.op, case.version), []).append(case)
    for batch in batches.values():
        run_batch(batch, args.device, args.case_timeout)
        write_kept(batch, out)
    cases = kept(cases)
    hanged = {
        case.path.as_posix()
        for case in cases
        if case.device_error is not None and case.device_error.startswith(HANGED)
    }
    found = find_cases([str(out)])
    wanted = {case.path.as_posix() for case in cases}
    found = [(path, name) for path, name in found if name in wanted]
    outcomes = judge_cases(make_client(args), found, None, waivers)
    with make_client(args) as client:
        name_ignored_inputs(client, outcomes, {case.path.as_posix(): case for case in cases})
    for outcome in outcomes:
        if outcome.outcome == "not_equal" and outcome.verdict is not None:
            reasons = waive(waivers, outcome.op, outcome.dtype, outcome.version, outcome.verdict)
            if reasons is not None:
                outcome.outcome, outcome.reasons = "waived", reasons
    elapsed = time.perf_counter() - started
    status = report_outcomes(outcomes, elapsed, waivers, args.junit, args.markdown)
    if args.json is not None:
        report = json_report(args.device, openvino.__version__, outcomes, hanged)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return status
