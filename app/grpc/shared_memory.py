"""Triton's system shared memory over gRPC: the ``SystemSharedMemory*`` calls (and the
``CudaSharedMemory*`` ones, refused) over the worker's regions, which raw contents a message's
inputs in regions leave out, and the answer of a job whose output went to a region."""

from typing import Any

from app.codecs.v2_tensors import v2_datatype
from app.errors import Fault
from app.pipeline.jobs import Job
from app.pipeline.run import Answer
from app.v2 import shm_guard
from app.v2.rules import OUTPUT_NAME, model_version
from app.v2.shared_memory import CUDA_REFUSAL, REGION, Regions, SharedTensors, refused
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb


def grpc_answer(job: Job, request_id: str, shared: SharedTensors) -> Answer:
    """The gRPC answer of a job whose output goes to shared memory: no raw contents."""
    response = pb.ModelInferResponse(
        model_name=job.op.name, model_version=model_version(job.op), id=request_id
    )
    if job.split is not None:
        answered = shared.run_several(job)
    else:
        answered = [(OUTPUT_NAME, job.output_shape, v2_datatype(job.output_dtype), shared.run(job))]
    for output_name, shape, datatype, parameters in answered:
        tensor = response.outputs.add(name=output_name, datatype=datatype, shape=shape)
        for name, value in parameters.items():
            if isinstance(value, str):
                tensor.parameters[name].string_param = value
            else:
                tensor.parameters[name].int64_param = value
    return Answer([response.SerializeToString()], "application/grpc")


def grpc_calls(service: Any) -> dict[str, Any]:
    """The shared memory methods of the gRPC service (an ``InferenceService``), by name, over
    its regions."""
    regions: Regions = service.regions

    async def register(context: Any, notes: Any) -> Any:
        regions.require_enabled()
        request = await service.parsed(pb.SystemSharedMemoryRegisterRequest, context, notes)
        # Every refusal before the guard, whose first install compiles it.
        regions.check_registration(
            request.name, request.key, request.offset, request.byte_size, notes.key
        )
        await shm_guard.ready()
        regions.register(request.name, request.key, request.offset, request.byte_size, notes.key)
        return pb.SystemSharedMemoryRegisterResponse()

    async def unregister(context: Any, notes: Any) -> Any:
        request = await service.parsed(pb.SystemSharedMemoryUnregisterRequest, context, notes)
        regions.unregister(request.name, notes.key)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def status(context: Any, notes: Any) -> Any:
        request = await service.parsed(pb.SystemSharedMemoryStatusRequest, context, notes)
        response = pb.SystemSharedMemoryStatusResponse()
        for item in regions.status(request.name, notes.key):
            response.regions[item["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**item)
            )
        return response

    def cuda(request_type: Any) -> Any:
        async def refuse(context: Any, notes: Any) -> Any:
            await service.parsed(request_type, context, notes)
            raise refused((), CUDA_REFUSAL, Fault.NOT_OFFERED)

        return refuse

    return {
        "SystemSharedMemoryRegister": register,
        "SystemSharedMemoryUnregister": unregister,
        "SystemSharedMemoryStatus": status,
        "CudaSharedMemoryRegister": cuda(pb.CudaSharedMemoryRegisterRequest),
        "CudaSharedMemoryUnregister": cuda(pb.CudaSharedMemoryUnregisterRequest),
        "CudaSharedMemoryStatus": cuda(pb.CudaSharedMemoryStatusRequest),
    }


def raw_positions(inputs: Any) -> list[int | None] | None:
    """Each gRPC input's entry in ``raw_input_contents`` (None for one in shared memory, which
    has none), or None when no input is in shared memory (each input its own index)."""
    if not any(REGION in item.parameters for item in inputs):
        return None
    positions: list[int | None] = []
    carried = 0
    for item in inputs:
        if REGION in item.parameters:
            positions.append(None)
        else:
            positions.append(carried)
            carried += 1
    return positions
