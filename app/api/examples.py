"""The specs' own examples, as request bodies the docs UI offers and the tests replay."""

from typing import Any

import numpy as np

from tensor_ops_wire.npy import encode_npy_base64

_MATRIX = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]
_BATCHES = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
_FOUR_D = [
    [[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]],
    [[[21, 22, 23, 24], [25, 26, 27, 28], [29, 30, 31, 32], [33, 34, 35, 36], [37, 38, 39, 40]]],
]


def _example(summary: str, request: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"summary": summary, "value": request, "x-expected-output": output}


#: Roll-7 examples 1-3: name -> summary, request body and the output the spec gives.
ROLL_EXAMPLES: dict[str, dict[str, Any]] = {
    "example_1": _example(
        "Roll-7 Example 1: shift = 1, axes = 0",
        {"data": _MATRIX, "shift": 1, "axes": 0},
        [[10, 11, 12], [1, 2, 3], [4, 5, 6], [7, 8, 9]],
    ),
    "example_2": _example(
        "Roll-7 Example 2: shift = [-1, 2], axes = [0, 1]",
        {"data": _MATRIX, "shift": [-1, 2], "axes": [0, 1]},
        [[5, 6, 4], [8, 9, 7], [11, 12, 10], [2, 3, 1]],
    ),
    "example_3": _example(
        "Roll-7 Example 3: shift = [1, 2, 1], axes = [0, 1, 0] (axis 0 rolled by 1 + 1)",
        {"data": _MATRIX, "shift": [1, 2, 1], "axes": [0, 1, 0]},
        [[8, 9, 7], [11, 12, 10], [2, 3, 1], [5, 6, 4]],
    ),
    "example_1_npy": _example(
        "Roll-7 Example 1 with data as base64 .npy (int64, shape (4, 3)); the output comes back so",
        {"data": encode_npy_base64(np.array(_MATRIX, dtype=np.int64)), "shift": 1, "axes": 0},
        [[10, 11, 12], [1, 2, 3], [4, 5, 6], [7, 8, 9]],
    ),
}

#: Gather-8 examples 1-7: name -> summary, request body and the output the spec gives.
GATHER_EXAMPLES: dict[str, dict[str, Any]] = {
    "example_1": _example(
        "Gather-8 Example 1: default batch_dims",
        {"data": [1, 2, 3, 4, 5], "indices": [0, 0, 4], "axis": 0, "batch_dims": 0},
        [1, 1, 5],
    ),
    "example_2": _example(
        "Gather-8 Example 2: batch_dims = 1",
        {"data": _BATCHES, "indices": [[0, 0, 4], [4, 0, 0]], "axis": 1, "batch_dims": 1},
        [[1, 1, 5], [10, 6, 6]],
    ),
    "example_3": _example(
        "Gather-8 Example 3: batch_dims = 2",
        {
            "data": [
                [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
                [[11, 12, 13, 14, 15], [16, 17, 18, 19, 20]],
            ],
            "indices": [[[0, 0, 4], [4, 0, 0]], [[1, 2, 4], [4, 3, 2]]],
            "axis": 2,
            "batch_dims": 2,
        },
        [[[1, 1, 5], [10, 6, 6]], [[12, 13, 15], [20, 19, 18]]],
    ),
    "example_4": _example(
        "Gather-8 Example 4: axis > batch_dims",
        {"data": _FOUR_D, "indices": [[1, 2, 4], [4, 3, 2]], "axis": 2, "batch_dims": 1},
        [
            [[[5, 6, 7, 8], [9, 10, 11, 12], [17, 18, 19, 20]]],
            [[[37, 38, 39, 40], [33, 34, 35, 36], [29, 30, 31, 32]]],
        ],
    ),
    "example_5": _example(
        "Gather-8 Example 5: negative batch_dims (-1 means indices.rank - 1 = 1)",
        {"data": _BATCHES, "indices": [[0, 0, 4], [4, 0, 0]], "axis": 1, "batch_dims": -1},
        [[1, 1, 5], [10, 6, 6]],
    ),
    "example_6": _example(
        "Gather-8 Example 6: negative indices",
        {"data": [1, 2, 3, 4, 5], "indices": [0, -2, -1], "axis": 0, "batch_dims": 0},
        [1, 4, 5],
    ),
    "example_7": _example(
        "Gather-8 Example 7: indices out of range give zeros",
        {"data": [1, 2, 3, 4, 5], "indices": [3, 10, -20], "axis": 0, "batch_dims": 0},
        [4, 0, 0],
    ),
    "example_7_float32": _example(
        "Gather-8 Example 7 with float32 data (dtype given by name)",
        {
            "data": [1.5, 2.5, 3.5, 4.5, 5.5],
            "indices": [3, 10, -20],
            "axis": 0,
            "dtype": "float32",
        },
        [4.5, 0.0, 0.0],
    ),
}


def openapi_examples(examples: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The examples as OpenAPI Example Objects (summary and value only)."""
    return {
        name: {"summary": example["summary"], "value": example["value"]}
        for name, example in examples.items()
    }
