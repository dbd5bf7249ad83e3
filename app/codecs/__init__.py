"""Every server-side codec on one floor: JSON bodies and arrays, the JSON form, V2 tensors."""
