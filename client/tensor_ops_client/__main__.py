"""``python -m tensor_ops_client``: the ``tensor-ops`` command line."""

from tensor_ops_client.cli import main

raise SystemExit(main())
