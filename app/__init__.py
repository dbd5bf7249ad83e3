"""tensor-ops: OpenVINO's Roll-7 and Gather-8 as an HTTP service."""
