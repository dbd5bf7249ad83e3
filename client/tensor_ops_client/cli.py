"""The ``tensor-ops`` command line: ``tensor-ops roll in.npy --shift 1 --axes 0 -o out.npy``."""

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_client._cli_io import (
    InputError,
    element_type,
    json_form,
    npz_members,
    print_table,
    read_tensor,
    write_npz,
    write_output,
)
from tensor_ops_client._conform import add_conform_command, run_conform
from tensor_ops_client._core import TRANSPORTS
from tensor_ops_client._grpc import DEFAULT_GRPC_PORT
from tensor_ops_client._inputs import typed_like
from tensor_ops_client._verify_command import add_verify_command, run_verify
from tensor_ops_client._version import __version__
from tensor_ops_client.client import (
    API_KEY_VARIABLE,
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    Retry,
    TensorOpsClient,
    TensorOpsError,
)
from tensor_ops_wire.npy import encode_npy
from tensor_ops_wire.npz import encode_npz
from tensor_ops_wire.ops import OPS, OpListError, OpSpec, from_info

#: The variable the service's URL is read from when ``--url`` is not given.
URL_VARIABLE = "TENSOR_OPS_URL"
#: Exit statuses scripts can test.
OK, USAGE, REFUSED, UNREACHABLE = 0, 2, 3, 4
#: Transfers above this size get progress bars (on a terminal).
PROGRESS_BYTES = 4 << 20

EXIT_STATUSES = f"""\
exit status:
  {OK}  done
  {USAGE}  usage: a bad option, or an input file that cannot be read
  {REFUSED}  refused by the service (the status, fault kind, field and message on stderr)
  {UNREACHABLE}  no answer: the service cannot be reached, the connection broke, or --timeout passed
"""

MAIN_EPILOG = f"""\
examples:
  tensor-ops roll data.npy --shift 1 --axes 0 -o out.npy
  tensor-ops roll '[[1, 2, 3], [4, 5, 6]]' --shift 1 --axes 1
  tensor-ops gather data.npy --indices 3 0 -1 --axis 0 --format table
  tensor-ops gather inputs.npz -o out.npy          # data, indices and axis from the archive
  tensor-ops pad '[[1, 2], [3, 4]]' --dtype float32 --pads-begin 0 1 --pads-end 1 0 \
      --pad-value 0.5 --pad-mode constant
  tensor-ops concat a.npy b.npy c.npy --axis 0 -o out.npy
  tensor-ops split data.npy --axis 0 --num-splits 2 -o parts.npz
  tensor-ops --transport grpc roll big.npy --shift 5 --axes 0 -o out.npy
  tensor-ops verify cases/ --junit report.xml       # a device's outputs against the ops
  tensor-ops health && tensor-ops info
  source <(tensor-ops completion bash)

Every op the service serves is a command: its GET /info lists them (tensor-ops info), and
`tensor-ops OP --help` shows an op's inputs and attributes. Roll and Gather are known without
the service; the others are read from it when named.

The service: --url, else ${URL_VARIABLE}, else {DEFAULT_URL}. The API key: --api-key, else
${API_KEY_VARIABLE}.

{EXIT_STATUSES}"""

INPUT_FORMS = """\
inputs: DATA and each other input is one of
  file.npy            a .npy file ('-': a .npy on standard input)
  file.npz            the archive's member of the input's name (data, shift, axes, ...)
  file.npz:member     the archive's member named so
  file.json           nested JSON lists (small tensors; element type: --dtype, else int64 or
                      float64 as the values are)
  file.csv            a CSV table of numbers, rank 1 or 2 (small tensors; float64 unless --dtype)
  '[[1, 2], [3, 4]]'  a JSON literal; index inputs also take integers: --shift 1 -2
The inputs that hold values (--pad-value, --updates, Concat's tensors after the first) given as
JSON or CSV take --dtype, else DATA's element type: --pad-value 0.5 beside float32 data.

output: -o out.npy (.json: the service's JSON form; .csv: rank 1 or 2); without -o, a table on a
terminal, the .npy bytes otherwise (--format to choose).
"""


def _add_service_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name: ``suppress`` (in the
    commands' parsers) leaves what the main parser read when a command does not repeat it."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("service")
    group.add_argument(
        "--url",
        default=default(None),
        help=f"the service's HTTP address (default: ${URL_VARIABLE}, else {DEFAULT_URL})",
    )
    group.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default=default("npz"),
        help="npz or json (POST /<op>), v2 (KServe V2 over HTTP) or grpc (KServe V2 "
        "over gRPC; pip install 'tensor-ops-client[grpc]') (default: npz)",
    )
    group.add_argument(
        "--op-version",
        metavar="N",
        type=int,
        default=default(None),
        help="the op's opset version (7 for Gather-7; default: the newest the service serves)",
    )
    group.add_argument(
        "--grpc-target",
        metavar="HOST:PORT",
        default=default(None),
        help=f"the gRPC address for --transport grpc (default: the host of --url, port "
        f"{DEFAULT_GRPC_PORT})",
    )
    group.add_argument(
        "--timeout",
        type=_positive,
        metavar="SECONDS",
        default=default(DEFAULT_TIMEOUT),
        help=f"each attempt's limit: connecting and each read or write over HTTP, the whole "
        f"call over gRPC (default: {DEFAULT_TIMEOUT:g})",
    )
    group.add_argument(
        "--retries",
        type=_count,
        metavar="N",
        default=default(Retry().attempts - 1),
        help="repeats of a call that failed for a reason a repeat can cure: no connection, a "
        "broken one, a 503 (its Retry-After honoured) (default: 4)",
    )
    group.add_argument(
        "--no-retry",
        dest="retries",
        action="store_const",
        const=0,
        default=argparse.SUPPRESS,
        help="one attempt: the same as --retries 0",
    )
    group.add_argument(
        "--api-key",
        metavar="KEY",
        default=default(None),
        help=f"sent as 'Authorization: Bearer KEY' (default: ${API_KEY_VARIABLE}; prefer the "
        "variable: other users of the machine can read a command's arguments)",
    )
    group.add_argument(
        "--ca-cert",
        metavar="PATH",
        default=default(None),
        help="PEM CA bundle to check an https:// service's certificate against (HTTP and gRPC)",
    )
    group.add_argument(
        "--client-cert",
        metavar="PATH",
        default=default(None),
        help="PEM client certificate for mutual TLS; with --client-key",
    )
    group.add_argument(
        "--client-key", metavar="PATH", default=default(None), help="its PEM private key"
    )
    group.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=default(None),
        help="progress bars on stderr for transfers over 4 MiB (default: when stderr is a "
        "terminal)",
    )


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a count: {text!r}")
    return int(text)


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dtype",
        metavar="TYPE",
        help="element type of JSON and CSV data (float32, int8, bool, bfloat16, ...); with a "
        ".npy file, bfloat16 reads its 2-byte elements as bfloat16",
    )
    parser.add_argument(
        "-o", "--output", metavar="PATH", help="write the output to PATH (.npy, .json or .csv)"
    )
    parser.add_argument(
        "--format",
        choices=["npy", "table", "json"],
        help="what goes to stdout without -o (default: table on a terminal, else npy)",
    )


#: The namespace's names of an op's inputs and attributes (``input_data``, ``attribute_batch_dims``)
#: keep them apart from the options': an op may have an input called ``format``.
_INPUT, _ATTRIBUTE = "input_", "attribute_"


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _op_command(
    commands: "argparse._SubParsersAction[argparse.ArgumentParser]",
    op: OpSpec,
    service: Callable[[argparse.ArgumentParser], None],
) -> None:
    """The command of one op: its first input as DATA, each other input ``--name`` (integers
    or one tensor), each attribute ``--name N`` (its default when not given)."""
    examples = "".join(f"  {line}\n" for line in op.examples)
    epilog = (f"examples:\n{examples}\n" if examples else "") + INPUT_FORMS + "\n" + EXIT_STATUSES
    sub = commands.add_parser(
        op.name,
        help=op.summary,
        description=op.summary,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    service(sub)
    first, *others = op.inputs
    if op.variadic == first.name:
        sub.add_argument(
            _INPUT + first.name,
            metavar=first.name.upper(),
            nargs="+",
            help=f"the tensors {first.name}_0, {first.name}_1, ... (see inputs below)",
        )
    else:
        sub.add_argument(_INPUT + first.name, metavar=first.name.upper(), help=first.help)
    for item in others:
        words = (
            "numbers of the data's type (--dtype, else DATA's), or one tensor"
            if item.like_data
            else item.help
        )
        sub.add_argument(
            _option(item.name),
            dest=_INPUT + item.name,
            nargs="+",
            metavar=item.name[0].upper(),
            help=words + ("" if item.required else " (optional)"),
        )
    for attribute in op.attributes:
        words = f"{attribute.help} " if attribute.help else ""
        said = "required" if attribute.default is None else f"default: {attribute.default}"
        if attribute.kind == "bool":
            sub.add_argument(
                _option(attribute.name),
                dest=_ATTRIBUTE + attribute.name,
                type=_boolean,
                default=None,
                metavar="true|false",
                help=f"{words}({said})",
            )
            continue
        if attribute.kind == "ints":
            if isinstance(attribute.default, tuple):
                said = "default: " + (" ".join(map(str, attribute.default)) or "none")
            sub.add_argument(
                _option(attribute.name),
                dest=_ATTRIBUTE + attribute.name,
                type=int,
                nargs="*",
                default=None,
                metavar="N",
                help=f"{words}a list of integers ({said})",
            )
            continue
        if attribute.choices:
            sub.add_argument(
                _option(attribute.name),
                dest=_ATTRIBUTE + attribute.name,
                choices=attribute.choices,
                default=None,
                help=f"{words}({said})",
            )
            continue
        sub.add_argument(
            _option(attribute.name),
            dest=_ATTRIBUTE + attribute.name,
            type=int,
            default=None,
            metavar="N",
            help=f"{words}({said})",
        )
    _output_options(sub)
    sub.set_defaults(op=op)


def _description(ops: Sequence[OpSpec], unread: str | None) -> str:
    """What the tool is: every op the service serves gets a command, built from its ``GET
    /info``; the ops listed are those it could build (or, the service not read, the ones known
    without it, and why)."""
    words = (
        "Run the OpenVINO operations a tensor-ops service serves (the movement ops: Roll, "
        "Gather, Pad, Concat, Split, ...): each op it lists in GET /info is a command, its "
        "inputs and attributes its options."
    )
    if unread is None:
        return f"{words} Commands for {_specs(ops)}."
    return (
        f"{words} Known without the service: {_specs(ops)}; the others come from the "
        f"service's op list, and {unread}."
    )


def _specs(ops: Sequence[OpSpec]) -> str:
    names = [op.spec or op.name for op in ops]
    return " and ".join(names) if len(names) <= 2 else f"{', '.join(names[:-1])} and {names[-1]}"


def build_parser(ops: Sequence[OpSpec] = OPS, unread: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: a command per op of ``ops`` (by default the ops this package
    knows without asking the service, ``tensor_ops_wire.ops.OPS``), then ``verify``,
    ``conform``, ``health``, ``info`` and ``completion``; ``unread`` says why the service's op
    list is not among them (shown under ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="tensor-ops",
        description=_description(ops, unread),
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_service_options(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def service(sub: argparse.ArgumentParser) -> None:
        _add_service_options(sub, suppress=True)

    def command(name: str, summary: str, epilog: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=summary,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        service(sub)
        return sub

    for op in ops:
        _op_command(commands, op, service)

    add_verify_command(commands, service)
    add_conform_command(commands, service)
    command(
        "health",
        "Whether the service is live and ready (exit 0 ready, 3 live but not ready, 4 no answer)",
        "example:\n  tensor-ops --url http://gpu-box:8000 health\n",
    )
    info = command(
        "info",
        "The service's name, version, ops, limits and ports",
        "example:\n  tensor-ops info --json | jq .limits\n",
    )
    info.add_argument("--json", action="store_true", help="print the JSON the service sends")

    completion = commands.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for your shell.",
        epilog="examples:\n"
        "  source <(tensor-ops completion bash)                 # this shell\n"
        "  tensor-ops completion bash > ~/.local/share/bash-completion/completions/tensor-ops\n"
        "  tensor-ops completion zsh > ~/.zfunc/_tensor-ops     # with fpath+=~/.zfunc\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    completion.add_argument("shell", choices=["bash", "zsh", "tcsh"])
    return parser


@contextmanager
def _progress_bars(enabled: bool) -> Iterator[Callable[[str, int, int | None], None] | None]:
    """A progress hook drawing bars on stderr for transfers over ``PROGRESS_BYTES``."""
    if not enabled:
        yield None
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        DownloadColumn,
        Progress,
        TaskID,
        TextColumn,
        TransferSpeedColumn,
    )

    bars = Progress(
        TextColumn("{task.description:>8}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        console=Console(file=sys.stderr),
        transient=False,
    )
    tasks: dict[str, TaskID] = {}

    def hook(direction: str, done: int, total: int | None) -> None:
        if direction not in tasks:
            if (total or done) < PROGRESS_BYTES:
                return
            if not tasks:
                bars.start()  # on the first large transfer: a small call draws nothing
            tasks[direction] = bars.add_task(direction, total=total)
        bars.update(tasks[direction], completed=done, total=total)

    try:
        yield hook
    finally:
        if tasks:
            bars.stop()


def _client(args: argparse.Namespace, progress: Any = None) -> TensorOpsClient:
    url = _url(args)
    retries = Retry().attempts - 1 if args.retries is None else args.retries
    try:
        return TensorOpsClient(
            url,
            transport=args.transport,
            timeout=args.timeout,
            retry=Retry(attempts=retries + 1),
            progress=progress,
            grpc_target=args.grpc_target,
            api_key=args.api_key,
            verify=args.ca_cert if args.ca_cert is not None else True,
            cert=(args.client_cert, args.client_key) if args.client_cert is not None else None,
        )
    # No grpcio, a URL as --grpc-target, TLS options for an http:// URL, a key that cannot be
    # sent, a certificate file that cannot be read or loaded.
    except (ImportError, ValueError, OSError) as error:
        raise InputError(str(error)) from None


def _index_input(
    values: Sequence[str] | None, option: str, name: str, rank: str = "any"
) -> npt.NDArray[Any]:
    assert values is not None
    if len(values) == 1:
        single = values[0]
        if single.lstrip("-").isdigit():
            # One integer: a scalar, or a list of one where the op takes a 1D tensor.
            return np.array([int(single)] if rank == "1" else int(single), dtype=np.int64)
        return read_tensor(single, name)
    try:
        return np.array([int(value) for value in values], dtype=np.int64)
    except ValueError:
        raise InputError(
            f"{option}: expected integers, or one tensor (file or JSON), got {' '.join(values)}"
        ) from None


def _op_inputs(args: argparse.Namespace) -> dict[str, npt.NDArray[Any]]:
    """The inputs of the op's command: DATA and the options, else DATA's archive's members.
    The inputs that hold values of the data's type (Pad's ``--pad-value``, ``--updates``,
    Concat's second and later tensors) read as numbers take ``--dtype``, else the data's type,
    as the JSON route types them."""
    op: OpSpec = args.op
    first, *others = op.inputs
    dtype = element_type(args.dtype)
    if op.variadic == first.name:
        sources: list[str] = getattr(args, _INPUT + first.name)
        head = read_tensor(sources[0], f"{first.name}_0", dtype)
        tensors = {f"{first.name}_0": head} | {
            f"{first.name}_{index}": _like_data(given, f"{first.name}_{index}", dtype, head)
            for index, given in enumerate(sources[1:], start=1)
        }
        return tensors | _other_inputs(args, others, "", head)
    source: str = getattr(args, _INPUT + first.name)
    data = read_tensor(source, first.name, dtype)
    return {first.name: data} | _other_inputs(args, others, source, data)


def _typed_file(spec: str) -> bool:
    """Whether ``spec`` names a file whose arrays carry their element type (.npy, .npz, -)."""
    return spec == "-" or spec.endswith((".npy", ".npz")) or ".npz:" in spec


def _like_data(
    spec: str, name: str, dtype: np.dtype[Any] | None, data: npt.NDArray[Any]
) -> npt.NDArray[Any]:
    """An input of the data's type: ``--dtype``'s when given (as for DATA), else, read as
    numbers (JSON, CSV), in the data's type where its values are values of it; a .npy keeps
    its own."""
    array = read_tensor(spec, name, dtype)
    if dtype is not None or _typed_file(spec):
        return array
    return typed_like(array, data.dtype)


def _other_inputs(
    args: argparse.Namespace, others: Sequence[Any], source: str, data: npt.NDArray[Any]
) -> dict[str, npt.NDArray[Any]]:
    """The inputs given as options, else as members of DATA's archive (``source``)."""
    inputs: dict[str, npt.NDArray[Any]] = {}
    archive = npz_members(source) if source.endswith(".npz") else set()
    for item in others:
        name = item.name
        given = getattr(args, _INPUT + name)
        if given is not None and item.like_data:
            # Numbers of the data's type: one tensor (file or JSON), or numbers as a list.
            spec = given[0] if len(given) == 1 else "[" + ", ".join(given) + "]"
            inputs[name] = _like_data(spec, name, element_type(args.dtype), data)
        elif given is not None:
            inputs[name] = _index_input(given, _option(name), name, item.rank)
        elif name in archive:
            inputs[name] = read_tensor(f"{source.removesuffix('.npz')}.npz:{name}", name)
        elif item.required:
            raise InputError(
                f"{_option(name)} is required (or a DATA .npz archive with a member {name!r})"
            )
    return inputs


def _boolean(text: str) -> bool:
    """A boolean attribute's value on the command line: true or false (1 or 0)."""
    if text.lower() in ("true", "1"):
        return True
    if text.lower() in ("false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text[:40]!r}")


def _op_attributes(args: argparse.Namespace) -> dict[str, Any]:
    """The op's attributes: as given, else their defaults; a required one not given is the
    command line's usage error."""
    op: OpSpec = args.op
    attributes: dict[str, Any] = {}
    for item in op.attributes:
        given = getattr(args, _ATTRIBUTE + item.name)
        value = item.default if given is None else given
        if value is None:
            raise InputError(f"{_option(item.name)} is required")
        attributes[item.name] = value
    return attributes


def _refused(error: TensorOpsError) -> int:
    where = f"{error.field}: " if error.field and not error.message.startswith(error.field) else ""
    kind = f" {error.kind}" if error.kind else ""
    # A refusal shows the service's status and kind; no answer (status 0), the message alone,
    # which names the address called.
    head = f"[{error.status}{kind}] " if error.status else ""
    print(f"tensor-ops: {head}{where}{error.message}", file=sys.stderr)
    for note in getattr(error, "__notes__", ()):
        print(f"tensor-ops: {note}", file=sys.stderr)
    if error.request_id:
        print(f"tensor-ops: request id {error.request_id}", file=sys.stderr)
    return UNREACHABLE if error.status == 0 else REFUSED


def _run_op(args: argparse.Namespace) -> int:
    inputs = _op_inputs(args)
    show_progress = args.progress if args.progress is not None else sys.stderr.isatty()
    with _progress_bars(show_progress) as hook, _client(args, hook) as client:
        try:
            output = client.call(
                args.op.name, inputs, _op_attributes(args), getattr(args, "op_version", None)
            )
        except ValueError as error:  # a name from /info that no transport carries
            raise InputError(str(error)) from None
    if isinstance(output, list):
        return _several_outputs(args, output)
    if args.output is not None:
        write_output(output, args.output)
        return OK
    form = args.format or ("table" if sys.stdout.isatty() else "npy")
    if form == "table":
        print_table(output, sys.stdout)
    elif form == "json":
        print(json_form(output))
    else:
        sys.stdout.buffer.write(encode_npy(output).data)
        sys.stdout.buffer.flush()
    return OK


def _several_outputs(args: argparse.Namespace, outputs: list[npt.NDArray[Any]]) -> int:
    """An op of several outputs (Split-1): ``-o out.npz`` (one member an output), or to
    stdout as tables, JSON (``{"outputs": [...]}``) or an ``.npz`` archive."""
    named = {f"output_{index}": output for index, output in enumerate(outputs)}
    if args.output is not None:
        if not args.output.endswith(".npz"):
            raise InputError(
                f"{args.op.name} gives {len(outputs)} outputs: write them with -o OUT.npz"
            )
        write_npz(named, args.output)
        return OK
    form = args.format or ("table" if sys.stdout.isatty() else "npy")
    if form == "table":
        for name, output in named.items():
            print(name)
            print_table(output, sys.stdout)
    elif form == "json":
        forms = [{"name": name, **json.loads(json_form(output))} for name, output in named.items()]
        print(json.dumps({"outputs": forms}))
    else:
        sys.stdout.buffer.write(encode_npz(named))
        sys.stdout.buffer.flush()
    return OK


def _run_health(args: argparse.Namespace) -> int:
    with _client(args) as client:
        health = client.health()
    print(f"live: {'yes' if health.live else 'no'}")
    print(f"ready: {'yes' if health.ready else 'no'}")
    return OK if health.ready else REFUSED


def _run_info(args: argparse.Namespace) -> int:
    with _client(args) as client:
        info = client.info()
    if args.json:
        print(json.dumps(info, indent=2))
        return OK
    print(f"{info.get('name')} {info.get('version')}")
    for op in info.get("ops", []):
        attributes = ", ".join(f"{k}={v}" for k, v in op.get("attributes", {}).items())
        extra = f"; attributes {attributes}" if attributes else ""
        names = ", ".join(op.get("inputs", []))
        print(f"  {op.get('name')}: {op.get('spec')} (inputs {names}{extra})")
    limits = info.get("limits", {})
    print("limits:")
    for name, value in limits.items():
        shown = f"{value} ({value / (1 << 20):g} MiB)" if name.endswith("_bytes") else value
        print(f"  {name}: {shown}")
    transports = info.get("transports", {})
    grpc_port = transports.get("grpc_port")
    print(f"transports: {', '.join(transports.get('http', []))} over HTTP", end="")
    print(f"; gRPC on port {grpc_port}" if grpc_port else "; gRPC off")
    access = info.get("access", {})
    keys = "on" if access.get("api_keys") else "off"
    print(f"API keys: {keys}; TLS: {'on' if access.get('tls') else 'off'}")
    return OK


class _Lenient(argparse.ArgumentParser):
    """A parser whose errors are exceptions: the first look at the command line."""

    def error(self, message: str) -> Any:
        raise InputError(message)


def _ops_for(argv: Sequence[str]) -> tuple[tuple[OpSpec, ...], str | None, str | None]:
    """The ops to build commands of, why the service's could not be read (None when they
    were, or were not needed) and the command named (None: none, or a command known without
    the service): ``OPS``, and when the command names none of them (nor
    ``health``, ``info``, ``completion``, ``verify`` or ``conform``), or no command is named
    (``tensor-ops --help``), the ops the service's ``GET /info`` lists besides. The service is
    asked where every command calls it: ``--url``, else ``$TENSOR_OPS_URL``, else the default
    address."""
    first = _Lenient(add_help=False, allow_abbrev=False)
    _add_service_options(first, suppress=False)
    first.add_argument("command", nargs="?")
    try:
        args, _ = first.parse_known_args(argv)
    except InputError:
        return OPS, None, None
    known = {op.name for op in OPS} | {"health", "info", "completion", "verify", "conform"}
    if args.command in known or (args.command is None and not {"-h", "--help"} & set(argv)):
        return OPS, None, None  # a command that needs no op list; --version; a usage error
    command: str | None = args.command
    args.transport, args.grpc_target, args.retries = "npz", None, 0  # /info is HTTP
    url = _url(args)
    try:
        with _client(args) as client:
            info = client.info()
            served = from_info(info.get("ops", []), info.get("op_details"))
    except TensorOpsError as error:
        if error.status == 0:
            return (
                OPS,
                (
                    f"no service answers at {url} to list its ops (give its address with --url or "
                    f"${URL_VARIABLE}): {error.message}"
                ),
                command,
            )
        return OPS, f"the service at {url} did not give its op list: {error.message}", command
    except (InputError, OpListError) as error:
        return OPS, f"the op list of the service at {url} could not be read: {error}", command
    served_ops = tuple(op for op in served if op.name not in known and _fits(op))
    return OPS + served_ops, None, None


def _url(args: argparse.Namespace) -> str:
    """The service's address: ``--url``, else ``$TENSOR_OPS_URL``, else the default."""
    return str(args.url or os.environ.get(URL_VARIABLE) or DEFAULT_URL)


def _fits(op: OpSpec) -> bool:
    """Whether the op's command can be built: no input or attribute takes an option's name
    (``--url``, ``--output``...); one that does is noted on stderr and left out."""
    try:
        build_parser((op,))
    except argparse.ArgumentError as error:
        print(f"tensor-ops: the service's op {op.name!r} has no command: {error}", file=sys.stderr)
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """``tensor-ops roll in.npy --shift 1 --axes 0 -o out.npy``; the exit status is 0 (done),
    2 (usage), 3 (refused by the service) or 4 (no answer)."""
    given = sys.argv[1:] if argv is None else argv
    ops, unread, command = _ops_for(given)
    if unread is not None and command is not None:
        # An op this package does not know, and no op list to find it in: one line, not
        # argparse's "invalid choice" among the two ops known without the service.
        print(
            f"tensor-ops: {command!r} is no op known without the service, and {unread}",
            file=sys.stderr,
        )
        return UNREACHABLE if unread.startswith("no service") else USAGE
    parser = build_parser(ops, unread)
    args = parser.parse_args(argv)
    if args.command != "completion":
        if args.grpc_target is not None and args.transport != "grpc":
            parser.error("--grpc-target is for --transport grpc")
        if (args.client_cert is None) != (args.client_key is None):
            parser.error("--client-cert and --client-key go together")
    try:
        if args.command == "completion":
            import shtab  # noqa: PLC0415

            print(shtab.complete(parser, shell=args.shell))
            sys.stdout.flush()
            return OK
        if args.command == "health":
            return _run_health(args)
        if args.command == "info":
            return _run_info(args)
        if args.command == "verify":
            return run_verify(args, _client)
        if args.command == "conform":
            return run_conform(args, _client)
        return _run_op(args)
    except InputError as error:
        print(f"tensor-ops: {error}", file=sys.stderr)
        return USAGE
    except TensorOpsError as error:
        return _refused(error)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of stdout stopped reading (| head): not a failure of this command. What
        # is left unwritten goes nowhere, so that the exit flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
