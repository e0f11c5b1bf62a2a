"""The statistical checks of the pytest plugin (docs/QUICKSTART.md, "CI for an engine with its own RNG"):
``replay_verify`` runs a sampler many times per request as `replay verify` does, ``replay_audit`` judges an
engine's recorded tokens as `replay audit` does. Both give the CLI's verdicts: FAIL and INCONCLUSIVE (nothing,
or not every mechanism the recording exercises, could have failed) are test failures whose one message names
the mechanism; only a PASS passes.
"""
from __future__ import annotations

from typing import Any

from replay_harness.checks.power import MECHANISMS, failed_mechanism, gaps_text

DEFAULT_TRIALS = 400  # `replay verify`'s default


class VerifyFailed(AssertionError):
    """`replay verify` would exit 1; ``report`` is the finalized VerifyReport."""

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report


class VerifyInconclusive(AssertionError):
    """`replay verify` would exit 4: a mechanism the recording exercises had no power (not a pass)."""

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report


def verify_sampler(recording: Any, impl: Any, *, trials: int = DEFAULT_TRIALS, seed: int = 0, alpha: float = 1e-3,
                   steps: str | None = None, device: str = "cpu", impl_args: list[str] | None = None):
    """`replay verify RECORDING --impl IMPL` in this process: the finalized VerifyReport on a PASS; raises
    VerifyFailed (exit 1) or VerifyInconclusive (exit 4), their message naming the mechanisms."""
    import torch

    from replay_harness.checks.report import VerifyReport, finalize
    from replay_harness.checks.verify import parse_steps, verify_units
    from replay_harness.compare.runner import load_impl, resolve_device
    from replay_harness.recording.store import Recording

    rec = recording if isinstance(recording, Recording) else Recording(recording)
    dev = resolve_device(device) if isinstance(device, str) else torch.device(device)
    label = str(rec.path)
    chosen = parse_steps(steps, len(rec))

    def open_impl(on):
        return load_impl(impl, on, impl_args) if isinstance(impl, str) else _Borrowed(impl)

    units = verify_units([(label, rec.synthetic, rec, chosen)], open_impl, trials, seed, dev)
    name = impl if isinstance(impl, str) else getattr(impl, "name", type(impl).__name__)
    report = finalize(VerifyReport(impl=str(name), trials=trials + trials % 2, seed=seed, alpha=alpha, units=units))
    if not report.ok:
        named: dict[str, str] = {}
        for c in report.failures:
            named.setdefault(failed_mechanism(c), f"step {c.step}, request {c.request_id}: {c.title}: {c.message}")
        for u in report.refused:
            named.setdefault("refused", f"step {u.step}, request {u.request_id}: {'; '.join(u.notes)}")
        lines = [f"{m} ({MECHANISMS.get(m, m)}): {why}" for m, why in named.items()]
        raise VerifyFailed(f"{label}: verify FAIL: {name} at {trials} trials: " + "; ".join(lines), report)
    if report.inconclusive:
        need = report.trials_needed()
        gaps = gaps_text(report.uncovered) if report.uncovered else "no statistical test could have failed"
        raise VerifyInconclusive(f"{label}: verify INCONCLUSIVE: {name} at {trials} trials: {gaps}"
                                 + (f"; raise trials to {need}" if need else ""), report)
    return report


def audit_engine(recording: Any):
    """`replay audit RECORDING`: the AuditResult when it found nothing and tested something; raises
    AssertionError naming the findings, or that nothing was tested."""
    from replay_harness.checks.audit import audit_recording

    result = audit_recording(str(recording))
    if result.findings:
        raise AssertionError(f"{recording}: audit FAIL: " + "; ".join(f"{f.kind}: {f.message}"
                                                                      for f in result.findings))
    if not result.testable:
        raise AssertionError(f"{recording}: audit INCONCLUSIVE: {result.not_testable}")
    return result


class _Borrowed:
    """An impl object handed in by the test: wrapped so verify's close() leaves it open."""

    def __init__(self, impl: Any) -> None:
        from replay_harness.impls.contract import as_sampler

        self._impl = as_sampler(impl)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._impl, name)

    def close(self) -> None:
        pass
