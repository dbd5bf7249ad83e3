"""Fixtures shared by the test modules: the app, an ASGI client, a live server.

Helpers that tests import by name are in ``tests/support.py``.
"""

import os
import sys
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.ops import loops
from app.settings import Settings
from tests import progress
from tests.support import launch_server, stop_server

#: The system tier (``pytest -m system``, run by .ci/run after README's command): what needs root
#: or system packages (buildah and debootstrap for the image, nginx, Debian's chromium) or takes
#: minutes (the full memory matrix, the nginx failover run), and the default tier's few long runs
#: (each 10 to 60 s on 2 cores: memory under a stream of large refused or concurrent calls, the
#: kernels compiled from cold, property-based fuzzing of the whole API, shutdown under a failing
#: trace collector, replicas killed mid-call). The default ``pytest`` leaves it out
#: (pyproject.toml's addopts). Listed here, in one place: a module, or one test of a module
#: (``module::test``, all its parameters).
SYSTEM_TIER = (
    "deploy/test_image_build.py",
    "deploy/test_image_command.py",
    "deploy/test_failover.py",
    "deploy/test_nginx_keys.py",
    "deploy/test_grpc_deployment.py",
    "deploy/test_cors_browser.py",
    "deploy/test_docs_authorize.py",
    "deploy/test_docs_browser.py",
    "hostile/test_memory_matrix.py",
    "hostile/test_memory_ops.py",
    "hostile/test_declared_limits_memory.py",
    # Long runs (see above).
    "grpc/test_grpc_receive.py::test_refused_requests_are_freed_at_once",
    "grpc/test_grpc_receive.py::test_concurrent_keyed_uploads_stay_within_their_reservations",
    "test_startup.py::test_the_first_start_says_the_kernels_compile_and_a_later_one_does_not",
    "test_schemathesis.py",
    "test_edges.py::test_shutdown_is_on_time_whatever_the_collector_does",
    "client/test_client_retry.py::test_a_replica_killed_mid_call_is_retried_on_the_other",
    "client/test_verify_command.py::test_a_few_thousand_cases",
    # Every op's verify in every element type on every way in (the default tier runs a sample).
    "transports/test_every_op_verify.py::test_the_whole_matrix_on_the_routes",
    "transports/test_every_op_verify.py::test_the_whole_matrix_through_the_client",
    "transports/test_every_op_verify.py::test_the_whole_matrix_through_the_command",
    # Each 15 to 90 s on a loaded 2-core machine: the client's wheel built and installed in a
    # fresh venv, a 2 GiB inflation refused, a cold compile, property-based body encodings,
    # memory under pipelined requests, and the differential tests that build a model per case
    # inside one test (the other ops' differential tests are sampled: SAMPLED below).
    "client/test_client_package.py",
    "client/test_cli_local_limits.py::test_an_npz_member_inflating_to_2_gib_is_refused_before_inflating",
    "client/test_conform.py::test_cpu_plugin_classes_are_named",
    "codecs/test_json_body_property.py::test_every_encoding_of_a_request_parses_as_a_full_parser_reads_it",
    "http/test_head_limits.py::test_pipelined_requests_of_a_client_that_does_not_read_hold_little_memory",
    "test_numba_cache.py::test_the_mapping_guard_never_compiles_beside_the_kernels",
    # A worker's resident memory measured within a time limit's seconds: on a machine loaded
    # past its cores (xdist beside other work) a limit passes before the look (70 MiB seen
    # against 48 allowed at a load of 9 on 2 cores); alone, as the system tier runs, it holds.
    "grpc/test_grpc_receive.py::test_reflection_and_health_messages_are_read_within_the_budget",
    "grpc/test_grpc_send.py::test_a_stream_s_unread_answers_are_bounded_by_bytes",
    "grpc/test_grpc_stream_refusals.py::test_a_stream_s_refused_messages_leave_nothing_behind",
    "ops/test_extract_image_patches.py::test_extract_image_patches_matches_openvino",
    "ops/test_scatter_elements_update.py::test_scatter_elements_update_matches_openvino",
    "ops/test_gather_nd.py::test_gather_nd_matches_openvino",
    "ops/test_col2im.py::test_col2im_matches_openvino",
    "ops/test_scatter_nd_update.py::test_reductions_against_openvino",
    "ops/test_unique.py::test_unique_matches_openvino",
)
#: System-tier tests whose figures a neighbour cannot move (no resident memory read within a
#: time limit that load could pass, no wall-clock limit, no replica killed; a request's own
#: memory high-water mark is its own): .ci/run runs them two at a time, each
#: module on one process (``-m "system and together" -n 2 --dist loadfile``: the image is built
#: once), then the rest one at a time (``-m "system and not together" -n 0``). The sampled
#: matrices' remainders (SAMPLED below) are among them.
SYSTEM_TOGETHER = (
    "deploy/test_image_build.py",
    "deploy/test_image_command.py",
    # The browsers (each step may take 15 s) and nginx in front of replicas on free ports, for
    # keys and gRPC (the failover run, which kills replicas on a schedule, stays alone).
    "deploy/test_cors_browser.py",
    "deploy/test_docs_authorize.py",
    "deploy/test_docs_browser.py",
    "deploy/test_nginx_keys.py",
    "deploy/test_grpc_deployment.py",
    "test_schemathesis.py",
    "transports/test_every_op_verify.py",
    "client/test_client_package.py",
    "client/test_conform.py",
    "client/test_verify_command.py",
    "codecs/test_json_body_property.py",
    "ops/test_compiled_kernels.py",
    # The memory matrices: each request's growth is the worker's own high-water mark (VmHWM,
    # reset before it) against its own reservation, which a neighbour's load does not move (331
    # passed at -n 2 beside two benchmarking processes, load average 4 on 2 cores).
    "hostile/test_memory_matrix.py",
    "hostile/test_memory_ops.py",
    "hostile/test_declared_limits_memory.py",
    # The two cold compiles: a minute of one core each, checked for order and for what they
    # leave in the cache, not for time (their deadlines allow a loaded machine).
    "test_startup.py::test_the_first_start_says_the_kernels_compile_and_a_later_one_does_not",
    "test_numba_cache.py::test_the_mapping_guard_never_compiles_beside_the_kernels",
    "ops/test_extract_image_patches.py",
    "ops/test_scatter_elements_update.py",
    "ops/test_gather_nd.py",
    "ops/test_col2im.py",
    "ops/test_scatter_nd_update.py",
    "ops/test_unique.py",
)
#: Case matrices the default tier samples and the system tier completes: ``module::test`` -> N,
#: one case in N kept by a hash of its id (the same sample on every run and machine), and the
#: first case of each group (an id's first word: the op in ``roll-0042-int8-...``, the mode,
#: type or shape in others) always; the
#: others carry the system marker, so the two tiers together run every case once. For matrices
#: whose cases are many and alike (generated corpora, every type times every op), where a sample
#: finds what the whole finds in a fraction of the time; the registry-wide proofs of every way
#: in (tests/transports/test_every_op.py and the like) are not sampled.
SAMPLED: dict[str, int] = {
    "ops/test_differential_openvino.py::test_roll_matches_openvino": 4,
    "ops/test_differential_openvino.py::test_gather_matches_openvino": 4,
    "ops/test_numpy_stand_ins.py::test_roll_corpus_has_the_same_bits_both_ways": 4,
    "ops/test_numpy_stand_ins.py::test_gather_corpus_has_the_same_bits_both_ways": 4,
    "ops/test_strided_slice.py::test_one_step_as_the_text_says": 8,
    "ops/test_slice.py::test_python_slicing_rules": 4,
    "ops/test_slice_scatter.py::test_the_spec_snippet_on_every_integer": 4,
    "transports/test_transports_agree.py::test_five_transports_agree": 4,
    "client/test_verdict.py::test_a_correct_output_is_equal_and_nothing_is_found": 3,
    "client/test_verdict.py::test_one_flipped_float_bit_is_found_alone": 3,
    "client/test_verdict.py::test_one_flipped_integer_bit_is_found_alone": 3,
    # Every op's differential test against OpenVINO's CPU plugin, one model per case.
    **{f"ops/test_{name}.py::test_openvino_cpu_plugin_agrees": 4 for name in (
        "batch_to_space", "broadcast", "concat", "depth_to_space", "gather_tree", "pad",
        "reverse", "reverse_sequence", "shuffle_channels", "slice", "slice_scatter",
        "space_to_depth", "split", "strided_slice", "tile", "transpose", "variadic_split",
    )},
    "ops/test_space_to_batch.py::test_openvino_cpu_plugin_agrees_but_for_the_padding": 4,
}  # fmt: skip
_TESTS = Path(__file__).resolve().parent


def listed(entries: tuple[str, ...], relative: str, name: str) -> bool:
    """Whether test ``name`` (its parameters aside) of module ``relative`` is in ``entries``
    (a module, or ``module::test``)."""
    return relative in entries or f"{relative}::{name.partition('[')[0]}" in entries


def sampled_out(relative: str, name: str, firsts: set[tuple[str, str]]) -> bool:
    """Whether case ``name`` of a sampled matrix is left to the system tier (``firsts``: the
    matrices' groups whose first case was already kept)."""
    test, _, case = name.partition("[")
    key = f"{relative}::{test}"
    every = SAMPLED.get(key)
    if every is None or not case:
        return False
    group = case.split("-", 1)[0]
    if (key, group) not in firsts:
        firsts.add((key, group))
        return False
    return zlib.crc32(name.encode()) % every != 0


def pytest_configure(config: pytest.Config) -> None:
    # Bytecode cached even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on
    # some CI machines): else every xdist worker and every server a test starts compiles every
    # module from source again (test modules rewritten for assertions, the app at each start),
    # a fifth of the default tier's time on two cores. __pycache__ is ignored by git.
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    progress.register(config)
    # The compiled loops serve every test, as they serve a started service: NumPy's stand-ins
    # (which answer while they compile) are held to the same bits in tests/ops/test_numpy_stand_ins.py.
    loops.wait_compiled()


#: The modules of the system tier's parallel part that take minutes, the longest first: with
#: ``--dist loadfile --no-loadscope-reorder`` they are handed out before the rest (the image's
#: build, which waits on the disk and the network, beside a cold compile, which takes a core),
#: so that no worker is left alone with one of them at the end. xdist's own order (modules with
#: the most tests first) handed them out last: one worker ran the last cold compile alone for
#: 110 s.
LONGEST_FIRST = (
    "test_startup.py",
    "deploy/test_image_build.py",
    "test_numba_cache.py",
    "test_schemathesis.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    firsts: set[tuple[str, str]] = set()
    modules: dict[pytest.Item, str] = {}
    for item in items:
        relative = item.path.resolve().relative_to(_TESTS).as_posix()
        modules[item] = relative
        sampled = sampled_out(relative, item.name, firsts)
        if listed(SYSTEM_TIER, relative, item.name) or sampled:
            item.add_marker(pytest.mark.system)
            if sampled or listed(SYSTEM_TOGETHER, relative, item.name):
                item.add_marker(pytest.mark.together)
    if config.getoption("loadscopereorder", default=True) is False:
        # .ci/run's --dist loadfile --no-loadscope-reorder: the longest modules first, then as
        # xdist would order them, the most tests first (xdist's workers, which collect, are
        # told --dist no). A module's tests keep their order.
        counts: dict[str, int] = {}
        for relative in modules.values():
            counts[relative] = counts.get(relative, 0) + 1

        def longest_first(item: pytest.Item) -> tuple[int, int]:
            relative = modules[item]
            rank = (
                LONGEST_FIRST.index(relative) if relative in LONGEST_FIRST else len(LONGEST_FIRST)
            )
            return rank, -counts[relative]

        items.sort(key=longest_first)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def app() -> FastAPI:
    """The app with default settings, built once (tests needing other settings build their own)."""
    return create_app(Settings())


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.fixture(scope="session")
def live_url() -> Iterator[str]:
    """The URL of a real uvicorn serving the app, shared by the tests that need TCP."""
    url, process = launch_server()
    yield url
    stop_server(process)
