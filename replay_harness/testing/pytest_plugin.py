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
``--replay-update`` (re-record on purpose: a checked recording whose answer the impl now gives differently is
written as a NEW recording beside it, ``REC.updated``, never over the input, once a run; unchanged recordings and
``.updated`` review copies get nothing; the check then passes and says so).
Fixtures: ``replay_impl`` (the name chosen) and ``replay_check`` (calls :func:`replay_harness.api.assert_replays`
and returns the Comparison). Importing this module imports neither torch nor the harness.

As safe as ``replay run``: a recording or impl the harness refuses fails the test with the CLI's one line (file,
step, field), not a traceback; a recording that did not close cleanly or whose content digest does not match its
steps gives the warning ``run`` prints, as a :class:`ReplayRecordingWarning` (pytest's warnings summary; ``-W
error::...`` makes it fail). docs/INTEGRATION.md has a worked example.
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
                         "whose answer changed (never over it; .updated folders are not re-recorded); the checks "
                         "pass")
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


class ReplayRecordingWarning(UserWarning):
    """A recording that did not close cleanly, or whose content digest does not match its steps (a step file
    changed after close): the warning ``replay run`` prints. ``-W error::replay_harness.testing.pytest_plugin.
    ReplayRecordingWarning`` makes it fail the check."""


UPDATED = ".updated"  # the suffix of the folder --replay-update writes beside a recording


def _check(config, recording, impl=None, *, against="recorded", routes_only=None):
    """One replay check with the run's settings; --replay-update writes REC.updated instead of comparing.
    A recording or impl the harness refuses (InputError, EnvironmentProblem, ...) fails the test with its one
    line, as the CLI prints it, not a traceback."""
    __tracebackhide__ = True
    from replay_harness.errors import ReplayError, printable

    try:
        return _checked(config, recording, impl, against, routes_only)
    except ReplayError as e:
        message = printable(e)
    pytest.fail(message, pytrace=False)  # outside the except: no "During handling of the above exception"


def _checked(config, recording, impl, against, routes_only):
    __tracebackhide__ = True
    from replay_harness.api import assert_replays, load

    name = impl if impl is not None else _setting(config, "replay_impl")
    args = config.getoption("--replay-impl-arg") if isinstance(name, str) and name.startswith("exec:") else None
    device = _setting(config, "replay_device")
    rec = load(recording)
    try:
        if config.getoption("--replay-update"):
            _update_once(config, rec, name, device, args)
            return None
        if routes_only is None:
            routes_only = config.getoption("--replay-routes-only")
        cmp = assert_replays(rec, name, against=against, device=device, impl_args=args, routes_only=routes_only)
    finally:
        _warn_closed(rec)
    _ran(config, name, cmp)
    return cmp


def _warn_closed(rec) -> None:
    """What ``replay run`` warns of, as a ReplayRecordingWarning: not closed cleanly, or a digest mismatch."""
    import warnings

    from replay_harness.errors import printable
    from replay_harness.recording.validate import close_problems

    for problem in close_problems(rec):
        warnings.warn(ReplayRecordingWarning(f"replay: warning: {printable(problem)}"), stacklevel=2)


def _update_once(config, rec, impl, device, impl_args) -> None:
    """--replay-update for one recording, once a run (a recording both collected and passed to replay_check is
    updated once); an ``.updated`` review copy is never re-recorded (no ``X.updated.updated``)."""
    done = config.stash.setdefault(_UPDATED, {})
    key = rec.path.resolve()
    if key in done:
        return
    if rec.path.name.endswith(UPDATED):
        done[key] = ("skipped", rec.path)
        return
    done[key] = _update(config, rec, impl, device, impl_args)


def _update(config, rec, impl, device, impl_args) -> tuple[str, Path]:
    """("wrote", REC.updated): the recording's steps with what ``impl`` emits now as the expected answer, written
    only when that answer differs from the recorded one; else ("unchanged", REC). ``source.updated_from`` is the
    input's path relative to the pytest rootdir. REC.updated lies beside the recording's own folder (``.`` is
    resolved first), is written like ``replay synth --out REC.updated --overwrite`` (recording/swap.py: a
    staging folder swapped in; never an input, a symlink or a mount point) and replaces only a recording."""
    import os

    from replay_harness.api import replay
    from replay_harness.recording.store import RecordingWriter
    from replay_harness.recording.swap import claim_replace, write_replacing

    results = replay(rec, impl, device=device, impl_args=impl_args)
    answers = [_answer(res) for res in results]
    if not any(_differs(record.emitted, answer) for record, answer in zip(rec, answers)):
        return "unchanged", rec.path
    folder = rec.path if rec.path.name not in ("", ".", "..") else rec.path.resolve()
    out = folder.parent / f"{folder.name}{UPDATED}"
    label = impl if isinstance(impl, str) else getattr(impl, "name", type(impl).__name__)
    try:
        origin = os.path.relpath(rec.path.resolve(), Path(config.rootpath).resolve())
    except ValueError:  # another drive (Windows): the folder's name
        origin = rec.path.name
    source = {**rec.manifest.get("source", {}), "updated_from": Path(origin).as_posix(), "updated_by": str(label)}
    claim = claim_replace(out, [rec.path], overwrite=True, option="--replay-update")

    def write(staged: str) -> None:
        with RecordingWriter(staged, vocab_size=rec.vocab_size, rng_contract=rec.rng_contract, source=source,
                             synthetic=rec.synthetic, overwrite=True) as w:
            for record, answer in zip(rec, answers):
                w.write_step(record.step, answer)

    write_replacing(claim, write)
    return "wrote", out


def _answer(res):
    """The :class:`Emitted` of an impl's SampleResult (the fixture dtypes; its logprobs when it has them)."""
    import torch

    from replay_harness.recording.store import Emitted

    extra = {name: getattr(res, name).to(dtype) for name, dtype in
             (("logprobs", torch.float32), ("logprob_ids", torch.int32), ("logprob_ranks", torch.int32),
              ("kept_mask", torch.int32)) if getattr(res, name, None) is not None}
    return Emitted(res.tokens.to(torch.int32), res.counts.to(torch.int32), res.routes.to(torch.int8), **extra)


def _differs(recorded, now) -> bool:
    """Does ``now`` answer a step differently from ``recorded``? Tokens (-1 padding ignored) and counts always;
    routes, logprobs, ranks and kept sets where both hold them."""
    import torch

    def padded(t, width):
        return torch.nn.functional.pad(t.long(), (0, width - t.shape[1]), value=-1)

    width = max(recorded.tokens.shape[1], now.tokens.shape[1])
    if not torch.equal(padded(recorded.tokens, width), padded(now.tokens, width)):
        return True
    if not torch.equal(recorded.counts.long(), now.counts.long()):
        return True
    for name in ("routes", "logprobs", "logprob_ids", "logprob_ranks", "kept_mask"):
        a, b = getattr(recorded, name), getattr(now, name)
        if a is not None and b is not None and not torch.equal(a, b.to(a.dtype)):
            return True
    return False


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
    it writes ``REC.updated`` instead (when the impl's answer changed) and returns None."""
    config = request.config

    def check(recording, impl=None, *, against="recorded", routes_only=None):
        __tracebackhide__ = True
        return _check(config, recording, impl, against=against, routes_only=routes_only)

    return check


@pytest.fixture
def replay_verify(request, replay_impl):
    """``replay_verify(recording, impl=None, *, trials=400, seed=0, steps=None)``: `replay verify` of ``impl``
    (default: --replay-impl; a name or an object with ``sample(step)``) on ``recording``, in this process. Fails
    the test on a FAIL or an INCONCLUSIVE (a mechanism the recording exercises had no power), the message naming
    the mechanisms (replay_harness/testing/statistical.py); returns the VerifyReport on a PASS."""
    config = request.config

    def verify(recording, impl=None, *, trials=None, seed=0, steps=None):
        __tracebackhide__ = True
        from replay_harness.errors import ReplayError, printable
        from replay_harness.testing.statistical import DEFAULT_TRIALS, verify_sampler

        name = impl if impl is not None else replay_impl
        args = config.getoption("--replay-impl-arg") if isinstance(name, str) and name.startswith("exec:") else None
        try:
            return verify_sampler(recording, name, trials=trials or DEFAULT_TRIALS, seed=seed, steps=steps,
                                  device=_setting(config, "replay_device"), impl_args=args)
        except AssertionError as e:
            message = printable(e)  # a recording's name or an impl's note: one line, escaped
        except ReplayError as e:
            message = printable(e)
        pytest.fail(message, pytrace=False)

    return verify


@pytest.fixture
def replay_audit():
    """``replay_audit(recording)``: `replay audit` of an engine's recorded tokens; fails the test on a finding or
    when nothing could be tested; returns the AuditResult otherwise."""

    def audit(recording):
        __tracebackhide__ = True
        from replay_harness.errors import ReplayError, printable
        from replay_harness.testing.statistical import audit_engine

        try:
            return audit_engine(recording)
        except AssertionError as e:
            message = printable(e)  # a recording's name or an impl's note: one line, escaped
        except ReplayError as e:
            message = printable(e)
        pytest.fail(message, pytrace=False)

    return audit


class ReplayRecording(pytest.Item):
    """One recording under a replay_recordings folder, replayed through the configured impl."""

    def runtest(self):
        _check(self.config, self.path.parent)

    def repr_failure(self, excinfo, style=None):
        """An assertion: its message, escaped line by line. Any other exception (the impl's own error): the
        short traceback of the impl's own frames (not replay_harness's, torch's, pytest's: ~900 lines);
        REPLAY_DEBUG=1 gives the whole of it."""
        import os

        from replay_harness.errors import printable

        if isinstance(excinfo.value, AssertionError):
            return "\n".join(printable(line) for line in str(excinfo.value).split("\n"))
        if os.environ.get("REPLAY_DEBUG") or isinstance(excinfo.value, pytest.fail.Exception):
            return super().repr_failure(excinfo)
        outside = excinfo.traceback.filter(lambda entry: not _harness_frame(str(entry.path)))
        if len(outside):
            excinfo.traceback = outside
        return super().repr_failure(excinfo, style="short")

    def reportinfo(self):
        from replay_harness.errors import printable

        return printable(str(self.path)), None, f"replay: {printable(self.path.parent.name)}"


def _harness_frame(path: str) -> bool:
    """A frame of replay_harness, torch, pytest or pluggy (not the impl's own code)."""
    return bool({"replay_harness", "torch", "_pytest", "pluggy"} & set(path.replace("\\", "/").split("/")))


class RecordingFile(pytest.File):
    def collect(self):
        from replay_harness.errors import printable

        yield ReplayRecording.from_parent(self, name=printable(self.path.parent.name))


def pytest_collect_file(file_path, parent):
    """A recording's manifest.json under a replay_recordings folder is a test (updated copies are not)."""
    if file_path.name != "manifest.json" or file_path.parent.name.endswith(UPDATED):
        return None
    roots = parent.config.stash.get(_ROOTS, None)
    if roots is None:
        roots = parent.config.stash[_ROOTS] = _recording_roots(parent.config)
    folder = file_path.resolve().parent
    if any(folder == r or r in folder.parents for r in roots):
        from replay_harness.errors import printable

        collector = RecordingFile.from_parent(parent, path=file_path)
        shown = printable(collector.nodeid)  # a folder name's newline or escape never reaches the terminal
        return collector if shown == collector.nodeid else RecordingFile.from_parent(parent, path=file_path,
                                                                                     nodeid=shown)
    return None


_RAN = pytest.StashKey[dict]()
_UPDATED = pytest.StashKey[dict]()  # resolved recording -> ("wrote" | "unchanged" | "skipped", path)
_ROOTS = pytest.StashKey[list]()


def _ran(config, impl, cmp) -> None:
    """Count a passed check under (impl label, device that ran) for the terminal summary."""
    label = impl if isinstance(impl, str) else getattr(impl, "name", type(impl).__name__)
    ran = config.stash.setdefault(_RAN, {})
    key = (str(label), getattr(cmp, "device", "?"))
    ran[key] = ran.get(key, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per (impl, device) that replayed: which device ran the passed checks (failures name it too);
    under --replay-update, one line per recording written and one counting those left alone."""
    for (label, device), n in sorted(config.stash.get(_RAN, {}).items()):
        terminalreporter.write_line(f"replay: {n} check(s) passed: {label} on {device}")
    updates = list(config.stash.get(_UPDATED, {}).values())
    for what, path in updates:
        if what == "wrote":
            from replay_harness.errors import printable

            terminalreporter.write_line(f"replay: --replay-update wrote {printable(path)} (review it, then move it "
                                        f"over the recording if it is what you mean)")
    unchanged = sum(what == "unchanged" for what, _ in updates)
    skipped = sum(what == "skipped" for what, _ in updates)
    if unchanged:
        terminalreporter.write_line(f"replay: --replay-update: {unchanged} recording(s) unchanged (the impl emits "
                                    "what they hold): nothing written for them")
    if skipped:
        terminalreporter.write_line(f"replay: --replay-update: {skipped} {UPDATED} folder(s) skipped (review copies "
                                    "are never re-recorded)")
