"""Tensors on the wire, shared by the tensor-ops server and its client: dtypes, .npy, .npz."""
