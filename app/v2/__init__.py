"""The V2 (Open Inference) protocol as both carriers share it: its rules, its messages and the
shared-memory regions that /v2 over HTTP and gRPC both read and write."""
