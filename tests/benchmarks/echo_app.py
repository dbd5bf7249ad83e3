"""A bare FastAPI app, the anchor of the HTTP benchmarks: what the stack costs with no work.

    .venv/bin/python -m uvicorn tests.benchmarks.echo_app:app --host 127.0.0.1 --port 8001

- ``POST /echo``: the request body back, as it is (the same bytes both ways);
- ``POST /constant``: reads the body, answers a small constant JSON;
- ``POST /roll``: the same NumPy call as the service's ``POST /roll`` on a JSON body
  (``{"data": [...], "shift": ..., "axes": ...}``) and nothing else: ``orjson.loads``,
  ``np.array``, ``np.roll``, the answer's JSON by ``orjson.dumps`` (issue 46's anchor of a small
  request: the framework's floor plus the work, no checks, no log line, no metrics);
- ``GET /health``: what ``launch_server`` of ``tests/support.py`` waits for.

``python -m tests.benchmarks.echo_app [uvicorn options]`` runs uvicorn's own command line on
this app at ``TENSOR_OPS_HOST``:``TENSOR_OPS_PORT`` (what ``launch_server`` sets), so the
benchmark can start it on a free port exactly as ``python -m uvicorn`` would.
"""

import os
import sys

import numpy as np
import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

app = FastAPI(title="echo", docs_url=None, redoc_url=None, openapi_url=None)
_CONSTANT = b'{"data":[3,1,2],"dtype":"int64","shape":[3]}'


@app.post("/echo")
async def echo(request: Request) -> Response:
    body = await request.body()
    return Response(body, media_type=request.headers.get("content-type"))


@app.post("/constant")
async def constant(request: Request) -> Response:
    await request.body()
    return Response(_CONSTANT, media_type="application/json")


@app.post("/roll")
async def roll(request: Request) -> Response:
    payload = orjson.loads(await request.body())
    data = np.array(payload["data"])
    rolled = np.roll(data, payload["shift"], payload["axes"])
    answer = {"data": rolled, "dtype": rolled.dtype.name, "shape": list(rolled.shape)}
    return Response(
        orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )


@app.get("/health")
async def health() -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


def main() -> None:
    """``python -m uvicorn tests.benchmarks.echo_app:app`` on the host and port of the env."""
    arguments = [
        "tests.benchmarks.echo_app:app",
        "--host", os.environ.get("TENSOR_OPS_HOST", "127.0.0.1"),
        "--port", os.environ.get("TENSOR_OPS_PORT", "8001"),
        *sys.argv[1:],
    ]  # fmt: skip
    uvicorn.main.main(args=arguments, prog_name="uvicorn")


if __name__ == "__main__":
    main()
