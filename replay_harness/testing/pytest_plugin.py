"""pytest plugin (entry point ``pytest11``: ``replay``): assert that a sampler replays a recording.

    def test_my_sampler_replays(replay_check):
        replay_check("fixtures/my-engine-run")               # the --replay-impl impl (default reference)
        replay_check("fixtures/my-engine-run", MySampler())   # or an object with sample(step)

Options: ``--replay-impl NAME`` (a registered impl, ``exec:PROGRAM``, default ``reference``),
``--replay-impl-arg ARG`` (repeatable, for exec:), ``--replay-device`` (default auto: CUDA when torch sees a GPU,
as in the CLI and the API; a failure names the device that ran, and the terminal summary counts the checks per
device),
``--replay-routes-only`` (accept routes, refusals and greedy tokens alone when the RNG contracts differ;
without it such a check FAILS as inconclusive, never passes; ``replay_check(..., routes_only=True)`` asks
for it per call). Fixtures:
``replay_impl`` (the name chosen) and ``replay_check`` (calls :func:`replay_harness.api.assert_replays`
and returns the Comparison). Importing this module imports neither torch nor the harness.
docs/INTEGRATION.md has a worked example.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("replay", "replay: sampler replay against recordings")
    group.addoption("--replay-impl", default="reference", metavar="NAME",
                    help="impl replay_check replays through: a registered name or exec:PROGRAM (default reference)")
    group.addoption("--replay-impl-arg", action="append", default=None, metavar="ARG",
                    help="argument for an exec:PROGRAM impl (repeatable)")
    group.addoption("--replay-device", default="auto", help="auto (default: cuda when torch sees a GPU, else cpu), "
                                                            "cpu or cuda")
    group.addoption("--replay-routes-only", action="store_true", default=False,
                    help="when the RNG contracts differ, accept routes, refusals and greedy tokens alone (else "
                         "replay_check fails as inconclusive)")


@pytest.fixture
def replay_impl(request) -> str:
    """The impl named by --replay-impl."""
    return request.config.getoption("--replay-impl")


@pytest.fixture
def replay_check(request, replay_impl):
    """``replay_check(recording, impl=None, *, against="recorded", routes_only=None)``: fail the test unless
    ``impl`` (default: --replay-impl) replays ``recording`` (token divergences, routing violations and
    refusals fail; near-ties pass, as in ``replay run``). A check whose stochastic tokens could not be
    compared (the sampler does not declare the recording's RNG contract) fails as INCONCLUSIVE with the
    count of tokens not compared, unless ``routes_only`` (default: --replay-routes-only)."""
    from replay_harness.api import assert_replays

    config = request.config

    def check(recording, impl=None, *, against="recorded", routes_only=None):
        __tracebackhide__ = True
        name = impl if impl is not None else replay_impl
        args = config.getoption("--replay-impl-arg") if isinstance(name, str) and name.startswith("exec:") else None
        if routes_only is None:
            routes_only = config.getoption("--replay-routes-only")
        cmp = assert_replays(recording, name, against=against, device=config.getoption("--replay-device"),
                             impl_args=args, routes_only=routes_only)
        _ran(config, name, cmp)
        return cmp

    return check


_RAN = pytest.StashKey[dict]()


def _ran(config, impl, cmp) -> None:
    """Count a passed check under (impl label, device that ran) for the terminal summary."""
    label = impl if isinstance(impl, str) else getattr(impl, "name", type(impl).__name__)
    ran = config.stash.setdefault(_RAN, {})
    key = (str(label), getattr(cmp, "device", "?"))
    ran[key] = ran.get(key, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per (impl, device) that replayed: which device ran the passed checks (failures name it too)."""
    for (label, device), n in sorted(config.stash.get(_RAN, {}).items()):
        terminalreporter.write_line(f"replay: {n} check(s) passed: {label} on {device}")
