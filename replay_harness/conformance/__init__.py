"""Conformance vectors: small recordings that pin every sampling rule of docs/FIXTURES.md (``replay conformance``)."""
