"""Collects every op module's declaration (``app/ops/<op>.py``'s ``OP``) into one table.

Routes, the OpenAPI document, ``/v2`` and gRPC metadata, Triton's model config, admission, the
client's ``/info`` and the tests read this table; a new op is its module (and its test file),
found here without a line written.
"""

import importlib
import pkgutil

import app.ops
from app.ops.declaration import (
    ALL_TYPES,
    DATA_CONSTRAINT,
    INTEGER_TYPES,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    Planner,
    SplitPlan,
    Workspace,
)
from app.ops.loops import COMPILED_MODULE

__all__ = [
    "ALL_TYPES",
    "DATA_CONSTRAINT",
    "INTEGER_TYPES",
    "OLDER",
    "REGISTRY",
    "Arrays",
    "Attribute",
    "Attributes",
    "Input",
    "Op",
    "Plan",
    "Planner",
    "SplitPlan",
    "Workspace",
    "attribute_names",
    "collect",
    "every_version",
    "version_of",
    "versions",
]


def collect() -> list[Op]:
    """Every ``OP`` that a module of ``app.ops`` declares, in the order the registry lists them
    (each op's ``position``, then its name)."""
    return sorted(
        (versions[0] for versions in _collect_versions()),
        key=lambda op: (op.position, op.name),
    )


def _collect_versions() -> list[tuple[Op, ...]]:
    """Each op module's versions, newest first: its ``OP`` and the older versions it lists in
    ``OLDER`` (declarations of the same name, older specs)."""
    found = []
    for module in pkgutil.iter_modules(app.ops.__path__):
        if f"app.ops.{module.name}" == COMPILED_MODULE:
            continue  # no op; compiled beside the service once it runs (app/ops/loops.py)
        loaded = importlib.import_module(f"app.ops.{module.name}")
        declared = getattr(loaded, "OP", None)
        if not isinstance(declared, Op):
            continue
        older = tuple(getattr(loaded, "OLDER", ()))
        for item in older:
            if not isinstance(item, Op) or item.name != declared.name:
                raise TypeError(f"app.ops.{module.name}.OLDER holds no older {declared.name}")
            if item.version >= declared.version:
                raise TypeError(f"app.ops.{module.name}.OLDER: {item.spec} is not older")
        found.append((declared, *sorted(older, key=lambda op: -op.version)))
    return found


#: Every op the service offers, by name (the route /name and the V2 model name): its newest
#: version.
REGISTRY: dict[str, Op] = {op.name: op for op in collect()}

#: The older versions of each op that has any, by name, newest first (Gather-7, Gather-1).
OLDER: dict[str, tuple[Op, ...]] = {
    versions[0].name: versions[1:] for versions in _collect_versions() if len(versions) > 1
}


def versions(name: str) -> dict[int, Op]:
    """Every version of the op ``name`` (one REGISTRY has), by version number (its V2 model
    version), oldest first as Triton lists a model's versions; the newest is REGISTRY's."""
    newest = REGISTRY[name]
    found = sorted((*OLDER.get(name, ()), newest), key=lambda op: op.version)
    return {op.version: op for op in found}


def every_version() -> list[Op]:
    """Every declaration the service serves: each op's versions, newest first, in the
    registry's order."""
    return [op for name in REGISTRY for op in (REGISTRY[name], *OLDER.get(name, ()))]


def version_of(name: str, version: str | None) -> Op | None:
    """The op ``name`` at V2 model version ``version`` (a string of digits; None or "" for the
    newest); None when the service has no such op or version."""
    newest = REGISTRY.get(name)
    if newest is None or not version:
        return newest
    if not version.isascii() or not version.isdigit() or len(version) > 4:
        return None
    return versions(name).get(int(version))


def attribute_names() -> frozenset[str]:
    """The attributes of every op at every version: a transport that names one for an op (or
    a version) without it refuses it."""
    return frozenset(item.name for op in every_version() for item in op.attributes)
