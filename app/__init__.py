"""tensor-ops: OpenVINO's movement ops as an HTTP and gRPC service."""
