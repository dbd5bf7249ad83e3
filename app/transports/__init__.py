"""The transports: thin adapters of the request pipeline, one per protocol."""
