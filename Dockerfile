# tensor-ops: OpenVINO's Roll-7 and Gather-8 over HTTP (8000) and KServe V2 gRPC (8001).
# Build: docker build -t tensor-ops .    Run: docker run --rm -p 8000:8000 -p 8001:8001 tensor-ops

# ---- build stage: a virtual environment with the service and its dependencies ----
FROM python:3.11.7-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH"
WORKDIR /build

# Dependencies first, in their own layer: it is rebuilt only when the lock changes. It pins every
# third-party package of the server and of tensor-ops-client (the wire codecs, installed from
# client/ below), each file checked against its hash (requirements.lock, made by scripts/lock:
# the versions CI tests), with the tracing extra's (OpenTelemetry's SDK and OTLP exporters, as
# `pip install 'tensor-ops[tracing]'` would add): the image traces when the OTEL_* variables say
# so. The server itself is installed below with --no-deps, so the lock alone says what is in. The
# dependencies' own test suites (numpy's, numba's, llvmlite's: 14 MB) go afterwards; nothing
# imports them at run time. So do the command line's progress bars, tables and completion (rich,
# pygments, shtab: 14 MB): the service has no use for them, and the client's modules import them
# only when the command line draws.
COPY requirements.lock ./
RUN pip install --no-compile --require-hashes -r requirements.lock \
    && pip uninstall --yes rich pygments markdown-it-py mdurl shtab \
    && find /opt/venv/lib -type d -name tests -prune -exec rm -rf {} +

# Then the code: the client's distribution and the server's, with --no-deps (their dependencies are
# the lock's, installed above). pip and setuptools leave the environment after this last install
# (12 MB): the service does not install anything. Then every module is compiled to bytecode once,
# here (27 MB): on a read-only root filesystem a process cannot write it, and each worker would
# compile its imports at every start (5.8 s instead of 1.6 s, measured in the image). Checked by
# hash, not time stamp, never: the image does not change under them.
COPY pyproject.toml README.md LICENSE ./
COPY client ./client
COPY app ./app
RUN pip install --no-compile --no-deps ./client . \
    && pip uninstall --yes pip setuptools \
    && find /opt/venv -name '__pycache__' -type d -prune -exec rm -rf {} + \
    && python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/venv/lib

# The kernels' compiled loops (numba), compiled once here, into app/ops/__pycache__ of the
# installed package, for any x86-64 CPU (NUMBA_CPU_NAME, set in the final stage too: the cache
# is keyed by it): a container loads them in a second at start-up (beside the service, which
# answers meanwhile), read-only root filesystem or not, instead of compiling them. -P: the
# installed app, not ./app. scripts/compile_kernels compiles them on every core (each process a
# share of the loops), then checks that a start loads every one of them from the cache.
COPY scripts/compile_kernels ./scripts/
RUN NUMBA_CPU_NAME=generic python -P scripts/compile_kernels

# ---- final stage: the runtime and the virtual environment, nothing else ----
FROM python:3.11.7-slim-bookworm

# The version is pyproject.toml's (tests/test_release.py keeps them the same); the licence is
# LICENSE's, as in both distributions' metadata.
LABEL org.opencontainers.image.title="tensor-ops" \
      org.opencontainers.image.description="OpenVINO's movement ops over HTTP, KServe V2 and gRPC" \
      org.opencontainers.image.version="0.4.0" \
      org.opencontainers.image.licenses="Apache-2.0"

# MALLOC_ARENA_MAX: the worker threads share two malloc arenas instead of one each, so memory
# freed after a large request is not kept in a dozen per-thread heaps.
# MALLOC_MMAP_THRESHOLD_: glibc serves blocks of 1 MiB and more by mmap, and so gives them back
# when they are freed (its default threshold grows to the largest block freed, up to 32 MiB, and
# an idle worker then keeps hundreds of MiB). Read once, when the process starts.
# NUMBA_CPU_NAME: the kernels' compiled loops are those compiled at build for any x86-64 CPU,
# found in the image by this name (another CPU's name would have them compiled again).
ENV PATH="/opt/venv/bin:$PATH" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    MALLOC_MMAP_THRESHOLD_=1048576 \
    TENSOR_OPS_HOST=0.0.0.0 \
    TENSOR_OPS_PORT=8000 \
    TENSOR_OPS_GRPC_PORT=8001 \
    NUMBA_CPU_NAME=generic

RUN groupadd --system --gid 10001 tensorops \
    && useradd --system --uid 10001 --gid tensorops --no-create-home --shell /usr/sbin/nologin tensorops

COPY --from=build /opt/venv /opt/venv

USER 10001:10001
WORKDIR /tmp
# 8000: HTTP (the plain routes, /v2, /health, /metrics). 8001: KServe V2 over gRPC
# (inference.GRPCInferenceService, grpc.health.v1.Health, reflection), cleartext HTTP/2 (h2c).
# TENSOR_OPS_GRPC_PORT=0 serves HTTP alone.
EXPOSE 8000 8001

# The image has Python but no curl: the probe is a few lines of the standard library. It asks
# HTTP only: a worker starts its gRPC server before it answers HTTP, and does not answer at all
# when gRPC cannot start.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"]

# Exec form: uvicorn is PID 1 and gets SIGTERM itself; it lets in-flight requests finish
# (TENSOR_OPS_GRACEFUL_TIMEOUT seconds at most) and exits cleanly.
CMD ["python", "-m", "app"]
