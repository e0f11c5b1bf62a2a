"""Old path kept for ``python -m replay_harness.external_adapter``: see :mod:`replay_harness.impls.external_adapter`."""
import sys

from replay_harness.impls.external_adapter import main, serve  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
