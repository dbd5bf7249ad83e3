"""The JSON routes' refusals in the op's own words: a field of another name than the op's (and
the nearest), an attribute sent as a string."""

import difflib
import re
from collections.abc import Mapping
from typing import Any

from app.codecs.json_tensors import INTEGER_TEXT, shown_string
from app.errors import Fault, ServiceError
from app.ops.declaration import INT
from app.registry import Op

#: Longer keys are not compared with the op's fields (difflib's cost grows with the length).
_MATCHED_KEY_CHARS = 64


def op_fields(op: Op) -> tuple[str, ...]:
    """The fields of ``op``'s JSON body that are its inputs and attributes, in order (a
    variadic input's first two: ``data_0``, ``data_1``)."""
    names: list[str] = []
    for item in op.inputs:
        names.extend((f"{item.name}_0", f"{item.name}_1") if item.variadic else (item.name,))
    return (*names, *(item.name for item in op.attributes))


def unknown_field_message(op: Op, key: str) -> str:
    """Why ``key`` is refused in ``op``'s JSON body: the fields the op takes, and the nearest."""
    fields = op_fields(op)
    taken = f"{op.name} takes {', '.join(fields)}"
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
            match = re.search(r'did you mean "([a-z_]+)"\?$', problem.msg)
            if match:
                suggested.add(match[1])
        elif (
            problem.kind is Fault.INVALID_FIELD
            and len(problem.loc) > 1
            and str(problem.loc[1]) in attributes
        ):
            item = attributes[str(problem.loc[1])]
            value = payload.get(item.name)
            if item.kind != INT:
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


def _integer_advice(text: str) -> str:
    spelled = text.strip()
    if INTEGER_TEXT.fullmatch(spelled):
        return f"send the number {spelled}"
    return "send an integer"
