"""Where 0.2 kept the transports; they are now ``app/http``, ``app/grpc`` and ``app/v2``. Only
the protocol class's old path stays (``http_protocol``), for command lines written against 0.2."""
