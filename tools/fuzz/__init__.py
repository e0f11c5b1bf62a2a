"""Helpers of tools/fuzz_recordings.py (docs/HARDENING.md): ``cases`` builds corrupted recordings,
``tree`` snapshots an input tree, ``worker`` runs the `replay` commands on them and checks the outcome."""
