"""The V2 service's unary calls over gRPC (``InferenceService``): probes, metadata, Triton's
extensions and ``ModelInfer``, each reading its message through the receiver."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from app.access import AccessControl
from app.errors import (
    Fault,
    ServiceError,
)
from app.grpc.exchange import GrpcExchange
from app.grpc.receive import CallNotes, Receiver
from app.grpc.send import SendWatch
from app.grpc.status import unreadable
from app.pipeline.admission import Reservation
from app.pipeline.run import Body, Pipeline
from app.v2.rules import (
    EXTENSIONS,
    SERVER_NAME,
    model,
    model_config,
    model_metadata,
    refuse_model_control,
    repository_index,
    statistics_models,
)
from app.v2.shared_memory import (
    Regions,
    new_request,
    server_extensions,
)
from app.version import VERSION
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb


class InferenceService:
    """The V2 service's calls, each an ``async`` function of the context and the call's notes,
    reading its message through the receiver."""

    def __init__(
        self,
        pipeline: Pipeline,
        ready: Callable[[], bool],
        access: AccessControl | None = None,
        regions: Regions | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.ready = ready
        #: The worker's shared memory regions, the app's (``create_app``) so that ``/v2`` and
        #: gRPC see the same ones; a service made without them has its own.
        self.regions = Regions(pipeline.settings) if regions is None else regions
        #: API keys, when they are on: every call but the probes needs the metadata's key.
        self.access = access
        self.receiver = Receiver(pipeline.settings, pipeline.budget)
        #: Inference calls begun and not yet ended (their answers sent, or given up): the
        #: stop waits for none.
        self.calls_in_flight = 0
        #: When the last of them ended (``time.monotonic()``; never: minus infinity).
        self.last_ended = -math.inf
        #: The minimum send rate of answers (its port set by the server once bound).
        self.send_watch = SendWatch(pipeline.settings)

    async def parsed(self, request_type: Any, context: Any, notes: CallNotes) -> Any:
        """A small call's message (``Receiver.small``), parsed."""
        message = await self.receiver.small(context, notes)
        if message is None:
            raise ServiceError(Fault.TENSOR_DECODE, ("body",), "the call has no message")
        try:
            return request_type.FromString(message)
        except DecodeError as error:
            raise unreadable(error, request_type.DESCRIPTOR.name) from None

    async def server_live(self, context: Any, notes: CallNotes) -> Any:
        await self.parsed(pb.ServerLiveRequest, context, notes)
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, context: Any, notes: CallNotes) -> Any:
        await self.parsed(pb.ServerReadyRequest, context, notes)
        return pb.ServerReadyResponse(ready=self.ready())

    async def model_ready(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.ModelReadyRequest, context, notes)
        model(request.name, request.version or None)
        return pb.ModelReadyResponse(ready=self.ready())

    async def server_metadata(self, context: Any, notes: CallNotes) -> Any:
        await self.parsed(pb.ServerMetadataRequest, context, notes)
        extensions = EXTENSIONS + server_extensions(self.regions)
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=VERSION, extensions=extensions)

    async def model_metadata(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.ModelMetadataRequest, context, notes)
        metadata = model_metadata(model(request.name, request.version or None))
        return pb.ModelMetadataResponse(
            name=metadata["name"],
            versions=metadata["versions"],
            platform=metadata["platform"],
            inputs=[_tensor_metadata(item) for item in metadata["inputs"]],
            outputs=[_tensor_metadata(item) for item in metadata["outputs"]],
        )

    async def model_infer(self, context: Any, notes: CallNotes) -> bytes:
        # No readiness check here: once the service stops, new calls are refused UNAVAILABLE
        # before they get here (GrpcServer.stop), and a call already taken (its message
        # perhaps still arriving when the stop began) is served to the end.
        self.calls_in_flight += 1
        receiver = self.receiver

        def call_ended(_: Any) -> None:
            # One callback for all of it (each costs gRPC a partial and a call).
            self.ended(None)
            # A large message's slices freed in gRPC's arenas go back to the system once the
            # call has been torn down, served or refused (a stalled upload cut off too).
            receiver.heap.after_call(notes.reserved)
            # The answer's bytes stay with gRPC until the call ends (sent, cancelled or timed
            # out): its reservation is held until then, as HTTP holds it until its answer is
            # sent (a refused call's was given back already: this gives nothing).
            if notes.reservation is not None:
                notes.reservation.release_now()

        context.add_done_callback(call_ended)

        async def read(reservation: Reservation) -> Body:
            notes.reservation = reservation
            # ``Receiver.message``, one coroutine fewer.
            message = await receiver.next_message(context, reservation, notes, end_allowed=False)
            assert message is not None  # a call without its message is refused by the read
            return message

        exchange = GrpcExchange(new_request(self.regions, notes.key))
        answer, _ = await self.pipeline.run(read, exchange)
        return bytes(answer.buffers[0])

    def ended(self, _: Any) -> None:
        self.calls_in_flight -= 1
        self.last_ended = time.monotonic()

    # Triton's extensions (docs/triton.md).

    async def model_config(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.ModelConfigRequest, context, notes)
        config = model_config(model(request.name, request.version or None))
        # The service's ModelConfig message has no version_policy: HTTP's JSON carries it.
        config.pop("version_policy")
        return pb.ModelConfigResponse(config=json_format.ParseDict(config, pb.ModelConfig()))

    async def model_statistics(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.ModelStatisticsRequest, context, notes)
        ops = statistics_models(request.name or None, request.version or None)
        response = pb.ModelStatisticsResponse()
        for item in self.pipeline.statistics.read(ops):
            # Empty, and not declared in the service's proto: absent on the wire is empty.
            for empty in ("response_stats", "batch_stats", "memory_usage"):
                item.pop(empty)
            json_format.ParseDict(item, response.model_stats.add())
        return response

    async def repository_index(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.RepositoryIndexRequest, context, notes)
        models = repository_index(request.ready)
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(**item) for item in models]
        )

    async def repository_model_load(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.RepositoryModelLoadRequest, context, notes)
        raise refuse_model_control(request.model_name, "load")

    async def repository_model_unload(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.RepositoryModelUnloadRequest, context, notes)
        raise refuse_model_control(request.model_name, "unload")


def _tensor_metadata(item: dict[str, Any]) -> Any:
    return pb.ModelMetadataResponse.TensorMetadata(
        name=item["name"], datatype=item["datatype"], shape=item["shape"]
    )
