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
    Kernel,
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
    "REGISTRY",
    "Arrays",
    "Attribute",
    "Attributes",
    "Input",
    "Kernel",
    "Op",
    "Plan",
    "Planner",
    "SplitPlan",
    "Workspace",
    "attribute_names",
    "collect",
]


def collect() -> list[Op]:
    """Every ``OP`` that a module of ``app.ops`` declares, in the order the registry lists them
    (each op's ``position``, then its name)."""
    found = []
    for module in pkgutil.iter_modules(app.ops.__path__):
        if f"app.ops.{module.name}" == COMPILED_MODULE:
            continue  # no op; compiled beside the service once it runs (app/ops/loops.py)
        declared = getattr(importlib.import_module(f"app.ops.{module.name}"), "OP", None)
        if isinstance(declared, Op):
            found.append(declared)
    return sorted(found, key=lambda op: (op.position, op.name))


#: Every op the service offers, by name (the route /name and the V2 model name).
REGISTRY: dict[str, Op] = {op.name: op for op in collect()}


def attribute_names() -> frozenset[str]:
    """The attributes of every op: a transport that names one for an op without it refuses it."""
    return frozenset(item.name for op in REGISTRY.values() for item in op.attributes)
