"""The ops the service offers, as its clients see them: each op's name, spec, inputs and integer
attributes (with their defaults), and the words the command line shows for them.

The client and the command line read this table; the server's registry (``app.registry``) is
the authority, and tests/test_registry.py checks every op here against it: same spec, same
inputs in the same order, same attributes with the same defaults. An op the server has and this
table has not is still called through ``TensorOpsClient.call`` and, given ``--url``, through
the command line, which then builds its command from the service's ``GET /info``
(``from_info``).

How a transport carries an attribute is the same for every op: a query parameter of the ``npz``
form, a field of the JSON body, a request parameter of KServe V2 (HTTP and gRPC), each an
integer; an input is a tensor of its name in every form.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InputSpec:
    """One input of an op: a tensor of this name on every transport."""

    name: str
    #: What the command line's help says of it.
    help: str = "integers, or one tensor"
    #: False: the op runs without it (Slice-8's ``axes``, Pad-12's ``pad_value``).
    required: bool = True
    #: "1": a 1D tensor (one integer given is a list of one); "any" otherwise.
    rank: str = "any"
    #: Whether it holds values of the data's element type (Pad's ``pad_value``, the
    #: ``updates`` of the scatters, Concat's ``data_N``) rather than indices: given as numbers
    #: (a Python value, JSON on the command line), it takes the data's type, as on the JSON route.
    like_data: bool = False


#: An attribute's value as a client gives it: an integer, a string (an enumeration's, an element
#: type's), a boolean, or a list of integers.
AttributeValue = int | str | bool | tuple[int, ...] | list[int]


@dataclass(frozen=True)
class AttributeSpec:
    """An attribute of an op (Gather-8's ``batch_dims``, Pad-12's ``pad_mode``) and its
    default (None: required); an enumeration's strings in ``choices``; its ``kind`` as
    ``/info`` says it: "int", "string", "bool", "ints" (a list of integers), "element_type"."""

    name: str
    default: AttributeValue | None
    help: str = ""
    choices: tuple[str, ...] = ()
    kind: str = ""


def parameter_value(value: object) -> object:
    """An attribute as a V2 request parameter carries it (HTTP JSON and gRPC take scalars
    only): a list of integers as one string "1,0,1" ("" for none), anything else as itself."""
    if isinstance(value, list | tuple):
        return ",".join(str(int(item)) for item in value)
    return value


def query_text(value: object) -> str:
    """An attribute as an ``.npz`` body's query parameter spells it: "1,0,1", "true", "3"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(parameter_value(value))


@dataclass(frozen=True)
class OpSpec:
    """One op: its name (the route ``/name`` and the V2 model name), spec, inputs, attributes
    and the command line's summary and examples."""

    name: str
    #: The spec's name and version: "Roll-7".
    spec: str
    summary: str
    inputs: tuple[InputSpec, ...]
    attributes: tuple[AttributeSpec, ...] = ()
    #: Command lines shown under ``tensor-ops NAME --help``.
    examples: tuple[str, ...] = ()
    #: The input sent as ``<name>_0``, ``<name>_1``, ... (Concat-1's ``data``), if any.
    variadic: str | None = None
    #: Whether the op gives several outputs (``output_0``, ...): a list of arrays.
    several_outputs: bool = False

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.inputs)

    @property
    def type_source(self) -> str:
        """The input whose element type the output and the inputs like it take: the first
        (``data``; Concat's ``data_0``)."""
        first = self.inputs[0].name
        return f"{first}_0" if self.variadic == first else first

    def typed_as_data(self, name: str) -> bool:
        """Whether the input sent as ``name`` takes the type source's element type when given
        as numbers: a value input beside it (``pad_value``, ``updates``, ``data_1``...)."""
        if name == self.type_source:
            return False
        base, _, number = name.rpartition("_")
        if self.variadic is not None and base == self.variadic and number.isdigit():
            return True
        return any(item.name == name and item.like_data for item in self.inputs)

    def attribute_defaults(self) -> dict[str, AttributeValue]:
        """The attributes that have defaults, by name (a required one is not among them)."""
        return {item.name: item.default for item in self.attributes if item.default is not None}


ROLL = OpSpec(
    name="roll",
    spec="Roll-7",
    summary="Roll-7: shift the elements of DATA by --shift along --axes",
    inputs=(
        InputSpec("data", "the data tensor (see inputs below)", like_data=True),
        InputSpec("shift"),
        InputSpec("axes"),
    ),
    examples=(
        "tensor-ops roll data.npy --shift 1 --axes 0 -o out.npy",
        "tensor-ops roll '[[1, 2, 3], [4, 5, 6]]' --shift 1 -1 --axes 0 1",
        "tensor-ops roll inputs.npz                 # data, shift and axes from the archive",
        "cat data.npy | tensor-ops roll - --shift 2 --axes -1 > out.npy",
    ),
)

GATHER = OpSpec(
    name="gather",
    spec="Gather-8",
    summary="Gather-8: the slices of DATA along --axis at --indices (out-of-range ones: zeros)",
    inputs=(
        InputSpec("data", "the data tensor (see inputs below)", like_data=True),
        InputSpec("indices"),
        InputSpec("axis", "an integer, or one tensor"),
    ),
    attributes=(
        AttributeSpec("batch_dims", 0, "leading dimensions of DATA and --indices that are batches"),
    ),
    examples=(
        "tensor-ops gather data.npy --indices 2 0 -1 --axis 0 -o out.npy",
        "tensor-ops gather '[[1, 2], [3, 4]]' --indices '[[1], [0]]' --axis 1 --batch-dims 1",
        "tensor-ops gather inputs.npz --format table",
    ),
)

#: The ops this package knows, in the service's order.
OPS: tuple[OpSpec, ...] = (ROLL, GATHER)


class OpListError(ValueError):
    """An op list (``GET /info``'s ``ops``) that is not as the service writes it."""


def from_info(ops: Any, details: Any = None) -> tuple[OpSpec, ...]:
    """The ops of ``GET /info``'s ``"ops"`` list (``name``, ``spec``, ``inputs`` as a list of
    names, ``attributes`` as ``{name: default}``), with what its ``"op_details"`` (``details``)
    says of each where it applies: ``required`` (the attributes without a default),
    ``optional``, ``variadic``, ``choices``, ``outputs`` and ``like_data`` (the inputs of the
    data's element type)."""
    if not isinstance(ops, Sequence) or isinstance(ops, str | bytes):
        raise OpListError("the op list is not a list")
    if details is None:
        details = {}
    if not isinstance(details, Mapping):
        raise OpListError("the op details are not an object")
    specs = []
    for listed in ops:
        if not isinstance(listed, Mapping):
            raise OpListError(f"an op is not an object: {listed!r:.80}")
        more = details.get(listed.get("name"), {})
        if not isinstance(more, Mapping):
            raise OpListError(f"the details of {listed.get('name')!r:.80} are not an object")
        entry = {**more, **listed}
        name, spec = entry.get("name"), entry.get("spec", "")
        inputs, attributes = entry.get("inputs", []), entry.get("attributes", {})
        if not isinstance(name, str) or not name or not isinstance(spec, str):
            raise OpListError(f"an op without a name: {entry!r:.80}")
        if not isinstance(inputs, list) or not all(isinstance(i, str) and i for i in inputs):
            raise OpListError(f"{name}: inputs is not a list of names")
        if not isinstance(attributes, Mapping) or not all(
            isinstance(key, str)
            and (
                value is None
                or isinstance(value, int | str)
                or (isinstance(value, list) and all(isinstance(item, int) for item in value))
            )
            for key, value in attributes.items()
        ):
            raise OpListError(f"{name}: attributes is not an object of defaults")
        kinds = entry.get("kinds", {})
        if not isinstance(kinds, Mapping) or not all(
            isinstance(kind, str) for kind in kinds.values()
        ):
            raise OpListError(f"{name}: kinds is not an object of names")
        optional = _names(entry.get("optional", []), name, "optional")
        like_data = _names(entry.get("like_data", []), name, "like_data")
        required = _names(entry.get("required", []), name, "required")
        attributes = {**attributes, **dict.fromkeys(required)}
        choices = entry.get("choices", {})
        if not isinstance(choices, Mapping) or not all(
            isinstance(values, list) and all(isinstance(value, str) for value in values)
            for values in choices.values()
        ):
            raise OpListError(f"{name}: choices is not an object of string lists")
        variadic = entry.get("variadic")
        if variadic is not None and variadic not in inputs:
            raise OpListError(f"{name}: variadic names no input")
        outputs = entry.get("outputs", ["output"])
        ranks = entry.get("ranks", {})
        if not isinstance(ranks, Mapping):
            raise OpListError(f"{name}: ranks is not an object")
        specs.append(
            OpSpec(
                name=name,
                spec=spec,
                summary=f"{spec or name} (as the service's /info describes it)",
                inputs=tuple(
                    InputSpec(
                        item,
                        "the data tensor (see inputs below)"
                        if i == 0
                        else "integers, or one tensor",
                        item not in optional,
                        str(ranks.get(item, "any")),
                        item in like_data,
                    )
                    for i, item in enumerate(inputs)
                ),
                attributes=tuple(
                    AttributeSpec(
                        key,
                        tuple(value) if isinstance(value, list) else value,
                        choices=tuple(choices.get(key, ())),
                        kind=str(kinds.get(key, "string" if key in choices else "int")),
                    )
                    for key, value in attributes.items()
                ),
                variadic=variadic,
                several_outputs=isinstance(outputs, list) and outputs[:1] == ["output_0"],
            )
        )
    return tuple(specs)


_DATA_HELP = "the data tensor (see inputs below)"


def _names(value: Any, op: str, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise OpListError(f"{op}: {what} is not a list of names")
    return value
