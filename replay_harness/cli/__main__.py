"""``python -m replay_harness.cli``: the same as the ``replay`` command."""
from replay_harness.cli import entry

entry()
