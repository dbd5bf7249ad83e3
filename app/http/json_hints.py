"""The JSON routes' refusals in the op's own words: a field of another name than the op's (and
the nearest), a required attribute left out, an attribute sent as a string or as a tensor, a
variadic input's tensors sent in one field."""

import difflib
import re
from collections.abc import Mapping
from typing import Any

from app.codecs.json_tensors import INTEGER_TEXT, shown_string
from app.errors import Fault, ServiceError
from app.ops.declaration import INT, INTS
from app.registry import REGISTRY, Op

#: Longer keys are not compared with the op's fields (difflib's cost grows with the length).
_MATCHED_KEY_CHARS = 64


def op_fields(op: Op) -> tuple[str, ...]:
    """The fields of ``op``'s JSON body that are its inputs and attributes, in order (a
    variadic input's first two: ``data_0``, ``data_1``)."""
    names: list[str] = []
    for item in op.inputs:
        names.extend((f"{item.name}_0", f"{item.name}_1") if item.variadic else (item.name,))
    return (*names, *(item.name for item in op.attributes))


def _fields_words(op: Op) -> str:
    """The fields of ``op``'s JSON body in words, a variadic input's as ``data_0, data_1, ...``."""
    names: list[str] = []
    for item in op.inputs:
        names.append(f"{item.name}_0, {item.name}_1, ..." if item.variadic else item.name)
    return ", ".join((*names, *(item.name for item in op.attributes)))


def variadic_words(op: Op) -> str:
    """How ``op``'s variadic input is sent: a field a tensor, numbered from 0."""
    assert op.variadic is not None
    name = op.variadic.name
    return (
        f"{op.spec} takes its inputs as the fields {name}_0, {name}_1, {name}_2, ... (one "
        f'tensor a field, at least one): {{"{name}_0": [[1, 2]], "{name}_1": [[3, 4]], ...}}'
    )


def unknown_field_message(op: Op, key: str) -> str:
    """Why ``key`` is refused in ``op``'s JSON body: the fields the op takes, and the nearest."""
    if op.variadic is not None and key == op.variadic.name:
        return f"no field {key!r}: {variadic_words(op)}"
    newest = REGISTRY.get(op.name)
    if newest is not None and newest is not op and key in op_fields(newest):
        # A field of a later version sent to an older one: say which has it.
        return (
            f"{op.spec} has no {key} ({newest.spec} has; /{op.name} without a version runs "
            f"it): {op.spec} takes {_fields_words(op)}"
        )
    fields = op_fields(op)
    taken = f"{op.name} takes {_fields_words(op)}"
    near = (
        difflib.get_close_matches(key, (*fields, "dtype"), n=1, cutoff=0.6)
        if len(key) <= _MATCHED_KEY_CHARS
        else []
    )
    if near:
        return f'{taken}; did you mean "{near[0]}"?'
    return f"{taken}, and no other field"


def explain_refusal(error: ServiceError, op: Op, payload: Mapping[str, Any]) -> ServiceError:
    """``error`` (the envelope of ``op``'s JSON body refused) in the op's own words:

    - a required attribute left out is named as one, with what it takes;
    - an attribute sent in an input's form (a base64 .npy, a list) says it is an attribute and
      what it takes, without echoing the value;
    - a variadic input sent as one field (Concat's ``data``) says how its inputs are sent;

    - an unknown field names the fields the op takes and the nearest (``axis: roll takes data,
      shift, axes; did you mean "axes"?``); a required field it is the near miss of is not told
      as missing as well;
    - an integer attribute sent as a string says to send the number; any other attribute of
      the wrong value or kind says what it takes (an enumeration's values, true or false, a
      list of integers).
    """
    problems = error.problems
    attributes = {item.name: item for item in op.attributes}
    suggested: set[str] = set()
    for problem in problems:
        if problem.kind is Fault.UNKNOWN_INPUT and len(problem.loc) == 2:
            key = payload_key(payload, problem.loc[1])
            if key is None:
                continue
            problem.msg = unknown_field_message(op, key)
            if op.variadic is not None and key == op.variadic.name:
                suggested.add(f"{key}_0")
            match = re.search(r'did you mean "([a-z_]+)"\?$', problem.msg)
            if match:
                suggested.add(match[1])
        elif (
            problem.kind is Fault.MISSING_INPUT
            and len(problem.loc) == 2
            and str(problem.loc[1]) in attributes
        ):
            item = attributes[str(problem.loc[1])]
            problem.msg = (
                f"missing attribute {item.name!r}: a required attribute of {op.spec} "
                f"(no default), {item.kind_words}"
            )
        elif (
            problem.kind is Fault.INVALID_FIELD
            and len(problem.loc) > 1
            and str(problem.loc[1]) in attributes
        ):
            item = attributes[str(problem.loc[1])]
            value = payload.get(item.name)
            if _tensor_like(value, item.kind):
                # Sent as an input is: never echoed (a base64 .npy is the client's bytes).
                problem.loc = problem.loc[:2]
                problem.msg = (
                    f"{item.name} is an attribute of {op.spec}, not a tensor input: send "
                    f"{item.kind_words} in the JSON body, not {_tensor_words(value)}"
                )
            elif item.kind != INT:
                refusal = item.refusal(value)
                if refusal is not None:
                    problem.loc = problem.loc[:2]  # the attribute, not an element of a list
                    problem.msg = f"{item.name} {refusal}"
            elif isinstance(value, str):
                problem.msg = (
                    f"{shown_string(value)} is a string; {problem.loc[1]} is an integer: "
                    f"{_integer_advice(value)}"
                )
    kept = [
        problem
        for problem in problems
        if not (
            problem.kind is Fault.MISSING_INPUT
            and len(problem.loc) == 2
            and problem.loc[1] in suggested
        )
    ]
    if len(kept) == len(problems):
        return error
    # The first problem's kind fixes the status: a missing field and an unknown one both 422.
    return ServiceError.of(kept)


def payload_key(payload: Mapping[str, Any], located: str | int) -> str | None:
    """The key of ``payload`` a problem's location names (a long key is cut in locations)."""
    if isinstance(located, str) and located in payload:
        return located
    if isinstance(located, str) and located.endswith(" characters)"):
        prefix = located.split("... (", 1)[0]
        return next((key for key in payload if key.startswith(prefix)), None)
    return None


#: The start of every .npy file's bytes in base64 (its magic, b"\x93NUMPY").
_NPY_BASE64 = "k05VTVB"


def _tensor_like(value: object, kind: str) -> bool:
    """Whether an attribute's value is a tensor input's form: a base64 .npy, or a list where
    the attribute is one number or string (a list of integers is an INTS attribute's form)."""
    if isinstance(value, str):
        return value.startswith(_NPY_BASE64)
    return isinstance(value, list | dict) and (kind != INTS or isinstance(value, dict))


def _tensor_words(value: object) -> str:
    if isinstance(value, str):
        return "a base64 .npy"
    return "a list" if isinstance(value, list) else "an object"


def _integer_advice(text: str) -> str:
    spelled = text.strip()
    if INTEGER_TEXT.fullmatch(spelled):
        return f"send the number {spelled}"
    return "send an integer"


def variadic_refusal(error: ServiceError, op: Op, name: str) -> ServiceError:
    """A tensor of ``op``'s variadic input (``name``: ``data_0``...) refused as undecodable (a
    ragged list: several tensors sent in one field), located at its field and told how the op's
    inputs are sent."""
    for problem in error.problems:
        if problem.loc == ("body", "data") and name != "data":
            problem.loc = ("body", name)
        if problem.kind is Fault.TENSOR_DECODE and "ragged" in problem.msg:
            problem.msg = f"{problem.msg}; to send several tensors: {variadic_words(op)}"
    return error
