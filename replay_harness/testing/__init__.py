"""Test helpers for engine projects: the pytest plugin (``replay_harness.testing.pytest_plugin``)."""
