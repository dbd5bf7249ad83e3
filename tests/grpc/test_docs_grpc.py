"""The gRPC page's examples (docs/grpc.md), run against a real server: what they print is what
the page says (in the comments after each command; tests/test_doc_examples.py runs the Python
block too).

The ``tritonclient.grpc`` block runs as it is (the address swapped for the test server's). The
``grpcurl`` block runs with ``grpcurl`` when it is installed; where it is not (it is a Go
binary, not on PyPI or in Debian), each command is made the way ``grpcurl`` makes it: the
services listed and the messages found by server reflection, the request parsed from its JSON,
the answer printed as protobuf's JSON.
"""

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.support import ROOT, free_port, launch_server, stop_server

pytestmark = pytest.mark.e2e

PAGE = ROOT / "docs" / "grpc.md"
PAGE_ADDRESS = "127.0.0.1:8001"


def blocks(language: str) -> list[str]:
    section = PAGE.read_text()
    found = [part.split("```", 1)[0] for part in section.split(f"```{language}\n")[1:]]
    assert found, f"no {language} block in {PAGE.name}"
    return found


def commands(block: str) -> Iterator[tuple[list[str], list[str]]]:
    """Each command of a shell block (continued lines joined) and the lines the page says it
    prints (the ``# `` comments after it)."""
    lines = block.splitlines()
    position = 0
    while position < len(lines):
        text = lines[position]
        position += 1
        while True:
            try:
                words = shlex.split(text.replace("\\\n", " "))
            except ValueError:  # an open quote: the command goes on
                words = None
            if words is not None and not text.endswith("\\"):
                break
            text += "\n" + lines[position]
            position += 1
        printed = []
        while position < len(lines) and lines[position].startswith("# "):
            printed.append(lines[position][2:])
            position += 1
        yield words, printed


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    port = free_port()
    _, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield f"127.0.0.1:{port}"
    stop_server(process)


def test_tritonclient_example_prints_what_readme_says(address: str) -> None:
    [block] = blocks("python")
    code = block.replace(PAGE_ADDRESS, address)
    printed = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == printed


def run_grpcurl(words: list[str], address: str) -> str:
    words = [address if word == PAGE_ADDRESS else word for word in words]
    done = subprocess.run(words, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def as_grpcurl_does(words: list[str], address: str) -> str:
    """The command's output, made through reflection as grpcurl makes it."""
    options = words[1:]
    body = "{}"
    if "-d" in options:
        body = options[options.index("-d") + 1]
    targets = [word for word in options if not word.startswith("-") and word != body]
    channel = grpc.insecure_channel(address)
    try:
        database = ProtoReflectionDescriptorDatabase(channel)
        if targets[-1] == "list":
            return "\n".join(sorted(database.get_services())) + "\n"
        service_name, method_name = targets[-1].rsplit("/", 1)
        service = DescriptorPool(database).FindServiceByName(service_name)
        method = service.methods_by_name[method_name]
        request = json_format.Parse(body, message_factory.GetMessageClass(method.input_type)())
        answer_class = message_factory.GetMessageClass(method.output_type)
        call: Any = channel.unary_unary(
            f"/{service_name}/{method_name}",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=answer_class.FromString,
        )
        return json_format.MessageToJson(call(request, timeout=10))
    finally:
        channel.close()


def test_grpcurl_examples_print_what_readme_says(address: str) -> None:
    [block] = blocks("sh")
    grpcurl = shutil.which("grpcurl")
    seen = 0
    for words, printed in commands(block):
        assert words[0] == "grpcurl", words
        assert PAGE_ADDRESS in words, words
        output = run_grpcurl(words, address) if grpcurl else as_grpcurl_does(words, address)
        if words[-1] == "list":
            assert output.splitlines() == printed
        else:
            [line] = printed
            assert json.loads(output) == json.loads(line)
        seen += 1
    assert seen == 3
