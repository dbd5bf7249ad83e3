"""The vocabulary an op module declares itself in: inputs, attributes, outputs, plan, examples.

Every op module (``app/ops/<op>.py``) ends with one ``OP = Op(...)`` (and its older versions,
``OP_1 = Op(...)`` ..., listed in ``OLDER``); ``app/registry.py`` collects them, and the routes,
OpenAPI, V2 and gRPC metadata, Triton's model config, memory admission, the client's generic
call, the command line, the docs and the tests read them.

The planner is the op's one way to compute: it checks a request and returns a ``Plan`` (or a
``SplitPlan``) that runs from what the checks found. Whatever the transport, its attributes
arrive as their kinds' Python values with every default filled in (an attribute the request
left out is there, at its default), and its inputs as the arrays declared, an optional input
left out being absent. What the vocabulary cannot say yet (strings, outputs of a fixed type,
attributes that depend on each other) is listed in docs/development.md.
"""

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_wire.dtypes import ELEMENT_TYPES

Arrays = Mapping[str, npt.NDArray[Any]]
#: An attribute's value: an int64 integer, one of an enumeration's strings (an element type's
#: name among them), a boolean, or a list of int64 integers (held as a tuple).
AttributeValue = int | str | bool | tuple[int, ...]
#: A request's attributes, as a planner receives them: every declared attribute, defaults filled.
Attributes = Mapping[str, Any]

#: The kinds of attribute a declaration can say, and how each travels (shared/api.md section 11).
INT = "int"  # an int64 integer: a JSON integer, a V2 int64_param, an .npz query's digits
STRING = "string"  # one of ``choices``: a JSON string, a V2 string_param
BOOL = "bool"  # true or false: a JSON boolean, a V2 bool_param, "true"/"false" in a query
INTS = "ints"  # a list of int64: a JSON array; in V2 parameters and queries one "1,0,1" string
ELEMENT_TYPE = "element_type"  # an element type's name as the spec writes it ("i32"), a string
ATTRIBUTE_KINDS = (INT, STRING, BOOL, INTS, ELEMENT_TYPE)
#: The most integers a list attribute holds (one an axis at most: NumPy's 64 dimensions).
MAX_LIST = 64
_INT64 = range(-(2**63), 2**63)


@dataclass(slots=True)
class Plan:
    """What an op's planner made of one request's inputs: the output's shape, and how to
    compute it (into ``out`` when given) from the checks already made. The job carries it from
    the checks to the kernel. Nothing changes it once made; it is not frozen because a frozen
    class sets each field through ``object.__setattr__``: a third of a microsecond of every
    request, three times what the slots' own assignment takes.

    ``check`` (optional): checks of the values the planner left to ``run``, which makes them as
    it reads the values (a large request's inputs read once, not twice) and raises
    ``SpecError`` as they would, the same refusal at the same place; a caller that must not
    write a byte of ``out`` for a refused request (a client's shared memory) calls ``check``
    first."""

    output_shape: tuple[int, ...]
    run: Callable[[npt.NDArray[Any] | None], npt.NDArray[Any]]
    check: Callable[[], None] | None = None


@dataclass(frozen=True)
class SplitPlan:
    """The plan of an op of several outputs (Split-1, VariadicSplit-1): each output's shape, in
    order, and how to compute them all (views of the inputs are allowed: the answer copies).

    ``bounded``: the shapes are the largest each output may be (Unique-10's, known only once it
    has run); admission reserves them, and the answer takes each output's shape from the array
    ``run`` gives, which must fit within its bound.

    ``into`` (optional): ``run`` given a ready array for each output (of its bound's shape, the
    output's type in native order; None where the caller has none). It may write an output
    into its array and give that array itself as the output's part, only when the output
    fills it whole (Unique-10's inverse, of a size known before it runs); every other part is
    an array of its own, as ``run`` gives it, for the caller to copy."""

    output_shapes: tuple[tuple[int, ...], ...]
    run: Callable[[], Sequence[npt.NDArray[Any]]]
    bounded: bool = False
    into: Callable[[Sequence[npt.NDArray[Any] | None]], Sequence[npt.NDArray[Any]]] | None = None

    @property
    def output_shape(self) -> tuple[int, ...]:
        """The first output's shape (an op of several outputs has at least one)."""
        return self.output_shapes[0]


#: Checks the inputs against the spec (raising ``SpecError``) and gives a ``Plan``: the output's
#: shape and how to compute it from what the checks found (nothing is checked twice), or a
#: ``SplitPlan`` for several outputs. Nothing the size of an output is allocated here:
#: admission reserves it from the shapes this returns. The attributes arrive with every default
#: filled in.
Planner = Callable[[Arrays, Attributes], "Plan | SplitPlan"]
#: The bytes the kernel holds beyond its inputs and output (its temporaries), for admission.
Workspace = Callable[[Arrays, Attributes], int]


def no_workspace(arrays: Arrays, attributes: Attributes) -> int:
    """The workspace of a kernel that holds nothing beyond its inputs and output."""
    return 0


ALL_TYPES: tuple[str, ...] = tuple(e.numpy for e in ELEMENT_TYPES)
INTEGER_TYPES: tuple[str, ...] = tuple(e.numpy for e in ELEMENT_TYPES if e.dtype.kind in "iu")
INT32_OR_INT64: tuple[str, ...] = ("int32", "int64")

#: How a tensor given in JSON form (nested arrays) gets its element type.
JSON_LIKE_DATA = "data"  # from the request's ``dtype``, or as NumPy infers it (as ``data``)
JSON_INT64 = "int64"  # int64: integers only, no fractions, no booleans
JSON_INFERRED = "inferred"  # as NumPy infers it: booleans -> bool, integers -> int64

#: How many elements an index-like input may hold, or how large a count attribute may be,
#: checked by the pipeline on the input's shape (the attribute's value) before the op's plan
#: runs, so that no plan turns a long input into Python lists or shapes before it is refused.
LIMIT_RANK = "rank"  # one element a dimension at most: the rank limit (Transpose's input_order)
LIMIT_OUTPUTS = "outputs"  # one element (a count) an output at most: MAX_OUTPUTS (split_lengths)
LIMIT_SCALAR = "scalar"  # a single element (Split's axis)
LIMITS = (LIMIT_RANK, LIMIT_OUTPUTS, LIMIT_SCALAR)


@dataclass(frozen=True)
class Input:
    """One input of an op: its name, the element types the spec allows, and its description."""

    name: str
    description: str
    #: The spec's type constraint in words, shown in the OpenAPI schema.
    constraint: str
    #: The element types (NumPy names) the spec allows.
    element_types: tuple[str, ...]
    #: The ranks the spec allows, in words (V2 model metadata shows it).
    rank: str = "any"
    #: Optional inputs may be left out; the op's planner then takes the spec's default.
    optional: bool = False
    #: A variadic input (Concat-1's): sent as ``<name>_0``, ``<name>_1``, ..., at least one.
    variadic: bool = False
    #: How its JSON form is typed (JSON_LIKE_DATA, JSON_INT64 or JSON_INFERRED); "" for the
    #: default: like data when every type is allowed, else int64.
    json_form: str = ""
    #: How many elements it may hold, checked before the plan (LIMIT_RANK, LIMIT_OUTPUTS,
    #: LIMIT_SCALAR); "" for a tensor counted as a tensor (data, indices, updates), whose plan
    #: must then cost no more than its reservation.
    limit: str = ""

    def __post_init__(self) -> None:
        assert self.limit in ("", *LIMITS), f"{self.name}: unknown limit {self.limit!r}"

    @property
    def type_words(self) -> str:
        """The allowed types in words: "type int32 or int64", "an integer type (T_AXIS)"."""
        if self.element_types == INTEGER_TYPES:
            return f"an integer type ({self.constraint.split(':', 1)[0]})"
        if self.element_types == ALL_TYPES:
            return "a supported type"
        return "type " + " or ".join(self.element_types)

    @property
    def json_typing(self) -> str:
        """How the JSON form of this input is typed (one of the JSON_* constants)."""
        if self.json_form:
            return self.json_form
        return JSON_LIKE_DATA if self.element_types == ALL_TYPES else JSON_INT64

    @property
    def is_index(self) -> bool:
        """Indices, shifts, axes: integers, sent as int64 in JSON form."""
        return self.json_typing == JSON_INT64

    @property
    def like_data(self) -> bool:
        """A value tensor typed by the request's ``dtype`` in JSON form (data, updates...)."""
        return self.json_typing == JSON_LIKE_DATA


class AttributeRefusedError(ValueError):
    """Why a value is no value of an attribute, in words that follow its name ("must be ...")."""


@dataclass(frozen=True)
class Attribute:
    """An attribute of an op (Gather's ``batch_dims``, Pad's ``pad_mode``), with its default.

    ``kind`` is one of ATTRIBUTE_KINDS; left empty it is STRING when ``choices`` are given, else
    INT. A default of None makes the attribute required. Whatever the transport, a value reaches
    the planner as its kind's Python value (int, str, bool, tuple of ints), defaults filled in.
    """

    name: str
    default: AttributeValue | None
    description: str
    #: The strings an enumerated or element-type attribute takes (``mode``: index, mask).
    choices: tuple[str, ...] = ()
    kind: str = ""
    #: The largest value a count attribute may take, checked before the plan (LIMIT_OUTPUTS:
    #: Split's num_splits); "" for an attribute whose value makes nothing (an axis).
    limit: str = ""

    def __post_init__(self) -> None:
        if self.limit not in ("", LIMIT_OUTPUTS):
            raise ValueError(f"attribute {self.name}: unknown limit {self.limit!r}")
        if not self.kind:
            object.__setattr__(self, "kind", STRING if self.choices else INT)
        if self.kind not in ATTRIBUTE_KINDS:
            raise ValueError(f"attribute {self.name}: unknown kind {self.kind!r}")
        if self.kind in (STRING, ELEMENT_TYPE) and not self.choices:
            raise ValueError(f"attribute {self.name}: a {self.kind} attribute needs its choices")
        if self.default is not None and self.refusal(self.default) is not None:
            raise ValueError(f"attribute {self.name}: default {self.default!r} is no value of it")

    @property
    def required(self) -> bool:
        return self.default is None

    @property
    def is_string(self) -> bool:
        """Whether the value is one of ``choices`` (an enumeration or an element type)."""
        return self.kind in (STRING, ELEMENT_TYPE)

    @property
    def kind_words(self) -> str:
        """What the attribute takes, in words: "an int64 integer", "one of "index", "mask"."."""
        if self.is_string:
            return "one of " + ", ".join(f'"{choice}"' for choice in self.choices)
        if self.kind == BOOL:
            return "a boolean (true or false)"
        if self.kind == INTS:
            return f"a list of at most {MAX_LIST} int64 integers"
        return "an int64 integer"

    @property
    def parameter_words(self) -> str:
        """How a V2 request parameter (HTTP or gRPC) carries it, in words."""
        if self.kind == INTS:
            return 'one string of comma-separated integers ("1,0,1"; "" for none)'
        return self.kind_words

    def shown(self, value: AttributeValue) -> str:
        """A value as a V2 parameter or a query spells it: ``1,0,1`` for a list, ``true``."""
        if self.kind == INTS:
            assert isinstance(value, tuple)
            return ",".join(str(item) for item in value)
        if self.kind == BOOL:
            return "true" if value else "false"
        return str(value)

    def refusal(self, value: object) -> str | None:
        """Why ``value`` (its kind's Python value) is no value of this attribute (None when it
        is one): "must be one of ...; got an integer"."""
        if self.is_string:
            if isinstance(value, str) and value in self.choices:
                return None
            got = _json_kind(value)
            if isinstance(value, str):
                # Escaped: a client's controls and line separators never reach a log raw.
                got = "another string" if len(value) > 40 else json_quoted(value)
            return f"must be {self.kind_words}; got {got}"
        if self.kind == BOOL:
            return None if isinstance(value, bool) else f"must be {self.kind_words}"
        if self.kind == INTS:
            if not isinstance(value, (tuple, list)):
                return f"must be {self.kind_words}; got {_json_kind(value)}"
            if len(value) > MAX_LIST:
                return f"must be {self.kind_words}; got {len(value)}"
            if all(_is_int64(item) for item in value):
                return None
            return f"must be {self.kind_words}; an element is not one"
        if _is_int64(value):
            return None
        return f"must be {self.kind_words}" + (
            f"; got {_json_kind(value)}" if not isinstance(value, int) else ""
        )

    def accept(self, value: object) -> AttributeValue:
        """``value`` as the planner takes it (a JSON list made a tuple); AttributeRefusedError
        when it is none of this attribute's values."""
        refusal = self.refusal(value)
        if refusal is not None:
            raise AttributeRefusedError(refusal)
        if isinstance(value, list):
            return tuple(value)
        return value  # type: ignore[return-value]

    def from_text(self, text: str) -> AttributeValue:
        """A value spelled as text: an ``.npz`` body's query parameter, or a V2 string parameter
        of a list attribute ("1,0,1"), a boolean ("true"), an integer; AttributeRefusedError when it
        spells none. A long text is refused on its length before it is split."""
        if self.is_string:
            return self.accept(text)
        if self.kind == BOOL:
            if text in ("true", "false"):
                return text == "true"
            raise AttributeRefusedError(f"must be {self.kind_words}")
        if self.kind == INTS:
            if len(text) > MAX_LIST * 21:  # 64 integers of 20 digits, a sign and a comma
                raise AttributeRefusedError(f"must be {self.parameter_words}; got a longer string")
            if not text:
                return ()
            parts = text.split(",")
            if len(parts) > MAX_LIST or not all(_is_integer_text(part) for part in parts):
                raise AttributeRefusedError(f"must be {self.parameter_words}")
            return self.accept([int(part) for part in parts])
        if not _is_integer_text(text):
            raise AttributeRefusedError(f"must be {self.kind_words}")
        return self.accept(int(text))

    def from_parameter(self, value: object) -> AttributeValue:
        """A value from a V2 request parameter (HTTP JSON or gRPC, which carry only scalars):
        a list attribute comes as one string, every other kind as itself."""
        if self.kind == INTS:
            if not isinstance(value, str):
                raise AttributeRefusedError(
                    f"must be {self.parameter_words}; got {_json_kind(value)}"
                )
            return self.from_text(value)
        return self.accept(value)


def _is_int64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value in _INT64


def _is_integer_text(text: str) -> bool:
    digits = text[1:] if text[:1] == "-" else text
    return digits.isascii() and digits.isdigit() and len(digits) <= 19


def _json_kind(value: object) -> str:
    """A value's kind as a client wrote it: "an integer", "a string", ...; never the value."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "null"
    return "an object"


@dataclass(frozen=True)
class Output:
    """One output of an op of fixed outputs (Unique-10's four): its name, and its element type:
    "" for the type of the input the op's ``output_type_from`` names, else the name of an
    element-type attribute whose value gives it (``index_element_type``)."""

    name: str
    description: str
    element_type: str = ""


#: The NumPy type of an element-type attribute's value, as the specs write them.
ELEMENT_TYPE_NAMES: Mapping[str, str] = {
    "i32": "int32",
    "i64": "int64",
}


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per op
class Op:
    """One op, as every transport and the docs see it."""

    name: str
    #: The spec's name and version: "Roll-7".
    spec: str
    summary: str
    description: str
    #: The model's docstring in the OpenAPI document.
    request_doc: str
    inputs: tuple[Input, ...]
    plan: Planner
    workspace: Workspace = no_workspace
    attributes: tuple[Attribute, ...] = ()
    #: name -> {"summary", "value" (a JSON request), "x-expected-output"}: the spec's examples.
    examples: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The input whose element type the outputs have (Transpose-1's ``arg``).
    output_type_from: str = "data"
    #: True for an op of several outputs (``output_0``, ``output_1``...; its plan a SplitPlan)
    #: whose number the request decides (Split-1's ``num_splits``).
    several_outputs: bool = False
    #: The outputs of an op of a fixed number of them (Unique-10's four), each with the source
    #: of its element type; empty: one ``output`` (or, with several_outputs, as many as planned)
    #: of the type of ``output_type_from``.
    outputs: tuple[Output, ...] = ()
    #: Where the registry lists the op: Roll and Gather first, then the others by name.
    position: int = 100
    #: The readings taken where the spec is silent or ambiguous (docs/contract.md lists them).
    decisions: tuple[str, ...] = ()
    #: Where OpenVINO's CPU plugin answers otherwise than the spec, each with a reproducer.
    disagreements: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.outputs) > 1:
            # Fixed outputs are named output_0, output_1, ... as a split's are, and travel so.
            object.__setattr__(self, "several_outputs", True)
        for item in self.outputs:
            if item.element_type:
                source = self.attribute(item.element_type)
                if source is None or source.kind != ELEMENT_TYPE:
                    raise ValueError(
                        f"{self.spec}: output {item.name}'s type names no element-type attribute"
                    )

    @functools.cached_property
    def version(self) -> int:
        """The op's opset version, from its spec's name: 8 for "Gather-8"."""
        return int(self.spec.rpartition("-")[2])

    @functools.cached_property
    def model_key(self) -> tuple[str, str]:
        """The V2 model and version this declaration is served as: ("gather", "8")."""
        return (self.name, str(self.version))

    def output_types(self, arrays: Arrays, attributes: Attributes, count: int) -> tuple[Any, ...]:
        """The element type (a NumPy dtype) of each of ``count`` outputs of a request."""
        data = arrays[self.output_type_from].dtype
        if not self.outputs:
            return (data,) * count
        return tuple(
            np.dtype(ELEMENT_TYPE_NAMES[attributes[item.element_type]])
            if item.element_type
            else data
            for item in self.outputs
        )

    @functools.cached_property
    def input_names(self) -> tuple[str, ...]:
        """The inputs' names as declared (a variadic input by its stem: Concat's ``data``)."""
        return tuple(item.name for item in self.inputs)

    @functools.cached_property
    def _inputs_by_name(self) -> dict[str, Input]:
        return {item.name: item for item in self.inputs if not item.variadic}

    @functools.cached_property
    def variadic(self) -> Input | None:
        """The op's variadic input (Concat-1's ``data``), if it has one."""
        return next((item for item in self.inputs if item.variadic), None)

    def input_for(self, name: str) -> Input | None:
        """The declared input a request's input ``name`` is (``data_3`` is Concat's ``data``),
        None when the op takes no such input."""
        item = self._inputs_by_name.get(name)
        if item is not None or self.variadic is None:
            return item
        stem, _, number = name.rpartition("_")
        if stem == self.variadic.name and variadic_index(number) is not None:
            return self.variadic
        return None

    @functools.cached_property
    def input_words(self) -> str:
        """The inputs a request names, in words: "data, shift, axes", "data_0, data_1, ...",
        optional ones marked."""
        words = []
        for item in self.inputs:
            if item.variadic:
                words.append(f"{item.name}_0, {item.name}_1, ...")
            elif item.optional:
                words.append(f"{item.name} (optional)")
            else:
                words.append(item.name)
        return ", ".join(words)

    def missing_input(self, names: Collection[str]) -> str | None:
        """The first input a request with inputs ``names`` lacks (a variadic input's first, or
        the one after the last in a gap: ``data_1`` when ``data_0`` and ``data_2`` are given),
        None when none is missing."""
        for item in self.inputs:
            if item.variadic:
                count = sum(1 for name in names if self.input_for(name) is item)
                for index in range(max(count, 1)):
                    if f"{item.name}_{index}" not in names:
                        return f"{item.name}_{index}"
            elif not item.optional and item.name not in names:
                return item.name
        return None

    @functools.cached_property
    def data_then_indices(self) -> bool:
        """Whether the op takes ``data`` (its output's type) then index inputs only, all
        required, as Roll and Gather do: the JSON routes read those the short way."""
        first, *rest = self.inputs
        return (
            first.name == self.output_type_from == "data"
            and first.like_data
            and not (first.optional or first.variadic)
            and all(item.is_index and not (item.optional or item.variadic) for item in rest)
        )

    @functools.cached_property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names as metadata lists them: ``output``; an op's fixed outputs; or for
        an op of several (their number known from the request), the first two and a pattern."""
        if self.outputs:
            return tuple(item.name for item in self.outputs)
        return ("output_0", "output_1") if self.several_outputs else ("output",)

    def attribute_defaults(self) -> dict[str, Any]:
        """The attributes that have defaults, by name (a required one is not among them)."""
        return {item.name: item.default for item in self.attributes if item.default is not None}

    def attribute(self, name: str) -> Attribute | None:
        """The attribute ``name`` of this op, None when it has none of that name."""
        return next((item for item in self.attributes if item.name == name), None)

    @functools.cached_property
    def required_attributes(self) -> tuple[Attribute, ...]:
        """The attributes a request must give (no default)."""
        return tuple(item for item in self.attributes if item.default is None)


#: The most inputs a variadic input takes (``data_0`` ... ``data_1023``).
MAX_VARIADIC = 1024
#: The most outputs a request of an op of several outputs may make: each costs the answer its
#: own head (a JSON object, a V2 entry, a protobuf message) beyond its elements.
MAX_OUTPUTS = 1024


def limit_elements(limit: str, rank_limit: int) -> int:
    """The most elements an input of ``limit`` holds (the largest value of a count attribute),
    the rank limit being ``rank_limit``."""
    if limit == LIMIT_RANK:
        return rank_limit
    if limit == LIMIT_OUTPUTS:
        return MAX_OUTPUTS
    return 1


def limit_words(limit: str, rank_limit: int) -> str:
    """Why an input of ``limit`` holds at most so many elements, in words."""
    if limit == LIMIT_RANK:
        return f"one a dimension, and a tensor has at most {rank_limit} (the rank limit)"
    if limit == LIMIT_OUTPUTS:
        return f"one an output, and a request makes at most {MAX_OUTPUTS} outputs"
    return "a single value"


def variadic_index(number: str) -> int | None:
    """The index a variadic input's suffix spells (``"3"`` in ``data_3``): digits without a
    leading zero, below MAX_VARIADIC; None otherwise."""
    if not number.isascii() or not number.isdigit() or (number[0] == "0" and len(number) > 1):
        return None
    index = int(number) if len(number) <= 4 else MAX_VARIADIC
    return index if index < MAX_VARIADIC else None


def output_name(op: Op, index: int) -> str:
    """The name of ``op``'s output number ``index``: ``output``, or ``output_<index>``."""
    if op.outputs:
        return op.outputs[index].name
    return f"output_{index}" if op.several_outputs else "output"


def example(summary: str, request: dict[str, Any], output: Any) -> dict[str, Any]:
    """One of the spec's examples: a JSON request and its expected output (for an op of
    several outputs, the list of them, in order)."""
    return {"summary": summary, "value": request, "x-expected-output": output}


#: The spec's T for ``data``, in words: both ops take, and give back, any element type.
DATA_CONSTRAINT = (
    "T: any supported type (bool, int8-64, uint8-64, float16, bfloat16, float32, float64). "
    "JSON form takes its type from `dtype`, or as NumPy infers it; npy form from its header."
)


def data_input(verb: str, name: str = "data", position: int = 1) -> Input:
    """The input of type T that an op moves the elements of."""
    return Input(
        name,
        f"The tensor to {verb} (input {position}, type T).",
        DATA_CONSTRAINT,
        ALL_TYPES,
    )


def narrowed_by_the_cpu_plugin(spec: str) -> tuple[str, ...]:
    """The disagreement classes OpenVINO's CPU plugin shows on every op that moves data of
    these types (measured on Reverse-1, Transpose-1, Tile-1, Slice-8, Pad-12, Split-1 and
    VariadicSplit-1 with data of every type: 69-75% of their cases bit-exact)."""
    return (
        f"{spec}, int64 and uint64 data on the CPU plugin: narrowed to 32 bits (Reverse-1 of "
        "int64 [2**40 + 7, 2] along axis 0 gives [2, 7]); the service keeps every bit.",
        f"{spec}, float64 data on the CPU plugin: computed through float32 (Reverse-1 of "
        "[1e300, 0.1] gives [0.10000000149011612, 3.4028234663852886e+38]); the service keeps "
        "every bit.",
        f"{spec}, float16 signalling NaNs on the CPU plugin: quieted (0x7c01 comes back "
        "0x7e01); the service passes NaN payloads through.",
    )


def json_quoted(text: str) -> str:
    """``text`` as a JSON string, every control and line separator escaped."""
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif char.isprintable() and char not in "\u2028\u2029":
            escaped.append(char)
        else:
            escaped.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
    return '"' + "".join(escaped) + '"'
