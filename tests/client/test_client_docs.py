"""The client's documentation cannot drift: docs/api-reference.md is what
scripts/api_reference.py makes of the docstrings, and every docstring example runs against a
live service and prints what it says."""

import doctest
import importlib.util
import inspect
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import tensor_ops_client
from tensor_ops_client import client as client_module
from tensor_ops_client._core import ClientBase
from tests.support import ROOT

pytestmark = pytest.mark.e2e

DOC_URL = "http://127.0.0.1:8000"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "api_reference", ROOT / "scripts" / "api_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_reference_is_generated_from_the_docstrings() -> None:
    script = _script()
    page = (ROOT / "docs" / "api-reference.md").read_text()
    assert page == script.render(), "docs/api-reference.md is stale: run scripts/api_reference.py"
    # Every public name of the package is on the page.
    for name in tensor_ops_client.__all__:
        if name not in ("main", "__version__"):
            assert f"`{name}" in page, name
    assert script.main(["--check"]) == 0


def _documented() -> Iterator[tuple[str, Any]]:
    """The package, the client module, each public class and the functions and properties
    each defines (the clients' shared methods under ``TensorOpsClient``)."""
    yield "tensor_ops_client", tensor_ops_client
    yield "tensor_ops_client.client", client_module
    classes = [getattr(tensor_ops_client, name) for name in tensor_ops_client.__all__]
    for target in [*filter(inspect.isclass, classes), ClientBase]:
        name = "TensorOpsClient" if target is ClientBase else target.__name__
        if target is not ClientBase:
            yield name, target
        for member, value in vars(target).items():
            function = value.__func__ if isinstance(value, classmethod | staticmethod) else value
            if member.startswith("_"):
                continue
            if inspect.isfunction(function) or isinstance(function, property):
                yield f"{name}.{member}", function


EXAMPLES = sorted(
    {
        name: inspect.getdoc(target) or ""
        for name, target in _documented()
        if ">>>" in (inspect.getdoc(target) or "")
    }.items()
)


def test_the_public_objects_have_examples() -> None:
    names = {name for name, _ in EXAMPLES}
    for needed in (
        "tensor_ops_client",
        "TensorOpsClient",
        "AsyncTensorOpsClient",
        "TensorOpsClient.call",
        "TensorOpsClient.roll",
        "TensorOpsClient.gather",
        "TensorOpsClient.health",
        "TensorOpsClient.info",
        "Retry",
        "TensorOpsError",
    ):
        assert needed in names, needed


@pytest.mark.parametrize(("name", "text"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_docstring_examples_run(live_url: str, name: str, text: str) -> None:
    with tensor_ops_client.TensorOpsClient(live_url) as client:
        globs = {
            "np": np,
            "client": client,
            **{item: getattr(tensor_ops_client, item) for item in tensor_ops_client.__all__},
        }
        test = doctest.DocTestParser().get_doctest(
            text.replace(DOC_URL, live_url), globs, name, None, 0
        )
        assert test.examples, name
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        runner.run(test, out=lambda report: pytest.fail(report, pytrace=False))
        assert runner.failures == 0 and runner.tries == len(test.examples)
