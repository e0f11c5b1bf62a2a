"""pytest plugin (entry point ``pytest11``: ``replay``): assert that a sampler replays a recording.

    def test_my_sampler_replays(replay_check):
        replay_check("fixtures/my-engine-run")               # the --replay-impl impl (default reference)
        replay_check("fixtures/my-engine-run", MySampler())   # or an object with sample(step)

Or no test code at all: ``replay_recordings = tests/recordings`` in the ini file makes every recording under that
folder (inside a collected path) one test, ``replay: NAME``, run through the configured impl.

Options (command line, else the ini option of the same name, else the default): ``--replay-impl NAME`` /
``replay_impl`` (a registered impl, ``exec:PROGRAM``, default ``reference``), ``--replay-impl-arg ARG`` (repeatable,
for exec:), ``--replay-device`` / ``replay_device`` (default auto: CUDA when torch sees a GPU, as in the CLI and the
API; a failure names the device that ran, and the terminal summary counts the checks per device),
``--replay-recordings`` / ``replay_recordings`` (folders whose recordings are collected as tests),
``--replay-routes-only`` (accept routes, refusals and greedy tokens alone when the RNG contracts differ; without it
such a check FAILS as inconclusive, never passes; ``replay_check(..., routes_only=True)`` asks for it per call),
``--replay-update`` (re-record on purpose: every checked recording's expected tokens are what the impl emits now,
written as a NEW recording beside it, ``REC.updated``, never over the input; the check then passes and says so).
Fixtures: ``replay_impl`` (the name chosen) and ``replay_check`` (calls :func:`replay_harness.api.assert_replays`
and returns the Comparison). Importing this module imports neither torch nor the harness.
docs/INTEGRATION.md has a worked example.
"""
from __future__ import annotations

from pathlib import Path

import pytest

INI = {"replay_impl": ("impl replay_check replays through (default reference)", "reference"),
       "replay_device": ("auto (default), cpu or cuda", "auto"),
       "replay_recordings": ("folders (relative to the ini file) whose recordings are collected as tests", "")}


def pytest_addoption(parser):
    group = parser.getgroup("replay", "replay: sampler replay against recordings")
    group.addoption("--replay-impl", default=None, metavar="NAME",
                    help="impl replay_check replays through: a registered name or exec:PROGRAM (default: the "
                         "replay_impl ini option, else reference)")
    group.addoption("--replay-impl-arg", action="append", default=None, metavar="ARG",
                    help="argument for an exec:PROGRAM impl (repeatable)")
    group.addoption("--replay-device", default=None,
                    help="auto (default: cuda when torch sees a GPU, else cpu), cpu or cuda")
    group.addoption("--replay-recordings", action="append", default=None, metavar="FOLDER",
                    help="collect every recording under FOLDER as a test (repeatable; ini: replay_recordings)")
    group.addoption("--replay-routes-only", action="store_true", default=False,
                    help="when the RNG contracts differ, accept routes, refusals and greedy tokens alone (else "
                         "replay_check fails as inconclusive)")
    group.addoption("--replay-update", action="store_true", default=False,
                    help="re-record: write what the impl emits now as REC.updated beside each checked recording "
                         "(never over it); the checks pass")
    for name, (text, default) in INI.items():
        parser.addini(name, text, default=default)


def _setting(config, name: str) -> str:
    """The command-line option, else the ini option, else the default."""
    value = config.getoption("--" + name.replace("_", "-"))
    return value if value is not None else (config.getini(name) or INI[name][1])


def _recording_roots(config) -> list[Path]:
    given = config.getoption("--replay-recordings")
    if given:
        return [Path(p).resolve() for p in given]
    base = Path(config.inipath).parent if config.inipath else Path(config.rootpath)
    return [(base / p).resolve() for p in str(config.getini("replay_recordings")).split()]


def _check(config, recording, impl=None, *, against="recorded", routes_only=None):
    """One replay check with the run's settings; --replay-update writes REC.updated instead of comparing."""
    __tracebackhide__ = True
    from replay_harness.api import assert_replays

    name = impl if impl is not None else _setting(config, "replay_impl")
    args = config.getoption("--replay-impl-arg") if isinstance(name, str) and name.startswith("exec:") else None
    device = _setting(config, "replay_device")
    if config.getoption("--replay-update"):
        written = _update(recording, name, device, args)
        config.stash.setdefault(_UPDATED, []).append(written)
        return None
    if routes_only is None:
        routes_only = config.getoption("--replay-routes-only")
    cmp = assert_replays(recording, name, against=against, device=device, impl_args=args, routes_only=routes_only)
    _ran(config, name, cmp)
    return cmp


def _update(recording, impl, device, impl_args) -> Path:
    """Write ``REC.updated``: the recording's steps with what ``impl`` emits now as the expected tokens."""
    import torch

    from replay_harness.api import load, replay
    from replay_harness.recording.store import Emitted, RecordingWriter

    rec = load(recording)
    out = Path(f"{rec.path}.updated")
    label = impl if isinstance(impl, str) else getattr(impl, "name", type(impl).__name__)
    results = replay(rec, impl, device=device, impl_args=impl_args)
    source = {**rec.manifest.get("source", {}), "updated_from": str(rec.path), "updated_by": str(label)}
    with RecordingWriter(out, vocab_size=rec.vocab_size, rng_contract=rec.rng_contract, source=source,
                         synthetic=rec.synthetic, overwrite=True) as w:
        for record, res in zip(rec, results):
            w.write_step(record.step, Emitted(res.tokens.to(torch.int32), res.counts.to(torch.int32),
                                              res.routes.to(torch.int8)))
    return out


@pytest.fixture
def replay_impl(request) -> str:
    """The impl named by --replay-impl (or the replay_impl ini option)."""
    return _setting(request.config, "replay_impl")


@pytest.fixture
def replay_check(request, replay_impl):
    """``replay_check(recording, impl=None, *, against="recorded", routes_only=None)``: fail the test unless
    ``impl`` (default: --replay-impl) replays ``recording`` (token divergences, routing violations and
    refusals fail; near-ties pass, as in ``replay run``). A check whose stochastic tokens could not be
    compared (the sampler does not declare the recording's RNG contract) fails as INCONCLUSIVE with the
    count of tokens not compared, unless ``routes_only`` (default: --replay-routes-only). Under --replay-update
    it writes ``REC.updated`` instead and returns None."""
    config = request.config

    def check(recording, impl=None, *, against="recorded", routes_only=None):
        __tracebackhide__ = True
        return _check(config, recording, impl, against=against, routes_only=routes_only)

    return check


class ReplayRecording(pytest.Item):
    """One recording under a replay_recordings folder, replayed through the configured impl."""

    def runtest(self):
        _check(self.config, self.path.parent)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value) if isinstance(excinfo.value, AssertionError) else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"replay: {self.path.parent.name}"


class RecordingFile(pytest.File):
    def collect(self):
        yield ReplayRecording.from_parent(self, name=self.path.parent.name)


def pytest_collect_file(file_path, parent):
    """A recording's manifest.json under a replay_recordings folder is a test (updated copies are not)."""
    if file_path.name != "manifest.json" or file_path.parent.name.endswith(".updated"):
        return None
    roots = parent.config.stash.get(_ROOTS, None)
    if roots is None:
        roots = parent.config.stash[_ROOTS] = _recording_roots(parent.config)
    folder = file_path.resolve().parent
    if any(folder == r or r in folder.parents for r in roots):
        return RecordingFile.from_parent(parent, path=file_path)
    return None


_RAN = pytest.StashKey[dict]()
_UPDATED = pytest.StashKey[list]()
_ROOTS = pytest.StashKey[list]()


def _ran(config, impl, cmp) -> None:
    """Count a passed check under (impl label, device that ran) for the terminal summary."""
    label = impl if isinstance(impl, str) else getattr(impl, "name", type(impl).__name__)
    ran = config.stash.setdefault(_RAN, {})
    key = (str(label), getattr(cmp, "device", "?"))
    ran[key] = ran.get(key, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per (impl, device) that replayed: which device ran the passed checks (failures name it too);
    under --replay-update, one line per recording written."""
    for (label, device), n in sorted(config.stash.get(_RAN, {}).items()):
        terminalreporter.write_line(f"replay: {n} check(s) passed: {label} on {device}")
    for path in config.stash.get(_UPDATED, []):
        terminalreporter.write_line(f"replay: --replay-update wrote {path} (review it, then move it over the "
                                    f"recording if it is what you mean)")
