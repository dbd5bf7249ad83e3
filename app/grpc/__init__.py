"""gRPC: KServe V2 over gRPC (the service, its exchange, receiving, streams, status mapping),
its shared-memory calls, and the server beside HTTP with its port."""
