"""`exec:` programs that attack replay's step files or bend the reply rules (docs/EXTERNAL.md, "The temp folder",
"Failures", "Caps"): a FIFO, a symlink or a removed / replaced temp folder never makes replay hang, write outside
its temp folder or blame anyone but the program; a program that never reads its stdin is a timeout, not a
hang; a reply nested too deep, with a too long integer or past its step's size is a bad reply naming program
and step, and what is kept of the notes is capped; a count that contradicts the route, a second reply line to
one step and an out-of-range --impl-timeout are refused by name; `"error": null` is no error; the Python
adapter keeps native writes to fd 1 off the protocol; the documented ExternalImplError reasons are the code's.

Recordings used: the committed fixtures synthetic-founding and synthetic-mixed (SYNTHETIC).
"""
import ast
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import main_inproc
from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.impls import get_impl
from replay_harness.impls.external import ExecSampler, ExternalImplError, sample_at
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.store import Recording

REPO = Path(__file__).resolve().parent.parent
REC = str(REPO / "fixtures" / "synthetic-founding")  # SYNTHETIC: 3 steps of 6 requests
MIXED = str(REPO / "fixtures" / "synthetic-mixed")   # SYNTHETIC: 3 steps of 8 requests

PROGRAM = textwrap.dedent('''
    """A hostile replay.exec/1 program for tests. argv: MODE [ARG]; it refuses every request unless MODE says."""
    import json, os, shutil, struct, sys

    mode, arg = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    if mode == "deep-handshake":
        print("[" * 20000 + "]" * 20000, flush=True)  # within the 64 KiB of a handshake
    if mode == "no-read":  # never reads its stdin, and fills that pipe itself (what 16 long step paths do)
        fd = os.open("/proc/self/fd/0", os.O_WRONLY | os.O_NONBLOCK)
        try:
            while True:
                os.write(fd, b"x" * 4096)
        except BlockingIOError:
            pass
    print(json.dumps({"protocol": "replay.exec/1", "name": "hostile-" + mode, "rng_contract": "mrv2"}), flush=True)
    if mode == "no-read":
        import time
        time.sleep(10)  # not for ever: a replay blocked in write(2) gets EPIPE then (a crash, not a hang)
        sys.exit(0)

    def header(path):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        hdr = json.loads(raw[8:8 + n])
        a, b = hdr["cu_num_logits"]["data_offsets"]
        cu = struct.unpack("<%di" % hdr["cu_num_logits"]["shape"][0], raw[8 + n + a:8 + n + b])
        step = json.loads(hdr["__metadata__"]["replay"])["step"]
        return len(cu) - 1, max(cu[i + 1] - cu[i] - 1 for i in range(len(cu) - 1)), step

    for i, line in enumerate(sys.stdin):
        path = line.rstrip("\\n")
        r, k, step = header(path)
        folder = os.path.dirname(path)
        if mode == "fifo":
            os.unlink(path)
            os.mkfifo(path)
        elif mode == "symlink":
            os.unlink(path)
            os.symlink(arg, path)
        elif mode == "symlink-dir":
            shutil.rmtree(folder)
            os.symlink(arg, folder)
        elif mode == "rmdir":
            shutil.rmtree(folder)
        reply = {"tokens": [[-1] * (k + 1)] * r, "counts": [0] * r, "routes": ["refused"] * r, "notes": [step]}
        if mode == "count0-route":
            reply["routes"] = ["greedy-sample"] * r
        elif mode == "refused-count":
            reply["counts"], reply["tokens"] = [1] * r, [[0] + [-1] * k] * r
        elif mode == "count0-unknown":
            reply["routes"] = [-1] * r
        elif mode == "error-null":
            reply["error"] = None
        if mode == "notes":  # 100 notes of ARG characters each, every reply
            reply["notes"] = ["n" * int(arg)] * 100
        elif mode == "wide":  # ARG empty objects under a key replay ignores
            reply["debug"] = [{}] * int(arg)
        text = json.dumps(reply) + "\\n"
        if mode == "deep":
            text = "[" * 100000 + "]" * 100000 + "\\n"
        elif mode == "unclosed":
            text = "[" * 100000 + "\\n"
        elif mode == "digits":  # a 5,000-digit integer (json.dumps itself refuses to write one)
            text = text.replace('"counts": [0', '"counts": [' + "1" * 5000, 1)
        if mode == "double" and i == int(arg):
            text *= 2  # one write: the second line is there the moment the first one is
        os.write(1, text.encode())
''')


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("hostile") / "hostile_sampler.py"
    path.write_text(PROGRAM)
    return f"{sys.executable} {path}"


def _replay(impl: ExecSampler, path: str = REC) -> list:
    impl.begin_recording(path)
    return [impl.sample(record.step) for record in Recording(path)]


# ---------------------------------------------------------------- the temp folder


def test_a_fifo_at_the_step_path_is_replaced_not_opened(program):
    # the old writer opened the FIFO for writing and waited for ever (past --impl-timeout)
    p = subprocess.run([sys.executable, "-m", "replay_harness.cli", "run", REC, "--impl", f"exec:{program} fifo",
                        "--impl-timeout", "5"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "refused 18 request-steps" in p.stdout, p.stdout + p.stderr


def test_a_symlink_at_the_step_path_is_replaced_not_followed(program, tmp_path):
    victim = tmp_path / "victim.safetensors"  # e.g. a step file of the recording being replayed
    victim.write_bytes(b"recorded step, keep me")
    with ExecSampler(f"{program} symlink {victim}") as impl:
        results = _replay(impl)
        tmpdir = impl._tmpdir
    assert [r.notes for r in results] == [["0"], ["1"], ["2"]]
    assert victim.read_bytes() == b"recorded step, keep me" and not os.path.lexists(tmpdir)


def test_a_temp_folder_replaced_by_a_symlink_is_never_written_through(program, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    impl = ExecSampler(f"{program} symlink-dir {victim}")
    tmpdir = impl._tmpdir
    with pytest.raises(ExternalImplError) as e:
        _replay(impl)
    assert e.value.reason == "step-file" and e.value.exit_code == 3
    assert f"cannot write step 1 of {REC} to the temp folder {tmpdir}" in str(e.value)
    assert sorted(os.listdir(victim)) == ["keep.txt"] and not os.path.lexists(tmpdir)  # the link went, not its target


def test_a_removed_temp_folder_is_exit_3_naming_the_impl_and_step(program):
    impl = f"exec:{program} rmdir"
    rc, out, err = main_inproc("run", REC, "--impl", impl)
    lines = err.strip().splitlines()
    assert rc == 3 and len(lines) == 1, err
    assert lines[0].startswith(f"replay: error: impl '{impl}': cannot write step 1 of {REC} to the temp folder ")
    assert "the program must not remove, replace or change that folder" in lines[0]


# ---------------------------------------------------------------- replies


@pytest.mark.parametrize("mode,says", [
    ("count0-route", "routes[0] = 'greedy-sample' with counts[0] = 0"),
    ("refused-count", "routes[0] = 'refused' with counts[0] = 1"),
])
def test_a_count_that_contradicts_the_route_is_a_bad_reply(program, mode, says):
    # docs/FIXTURES.md, emitted_routes: count 0 if and only if the route is refused (or -1 unknown)
    with pytest.raises(ExternalImplError) as e:
        with ExecSampler(f"{program} {mode}") as impl:
            _replay(impl)
    assert e.value.reason == "value" and f"reply to step 0 of {REC}: {says}" in str(e.value)


def test_count_0_with_an_unknown_route_and_error_null_are_accepted(program):
    for mode in ("count0-unknown", "error-null"):  # null is no error: Go's and Rust's serialisers write it
        with ExecSampler(f"{program} {mode}") as impl:
            results = _replay(impl)
        assert len(results) == 3 and all(int(r.counts.sum()) == 0 for r in results), mode


@pytest.mark.parametrize("at", [0, 2])  # 2: the last step, seen when the program is closed at the latest
def test_a_second_reply_line_is_refused_naming_its_step(program, at):
    with pytest.raises(ExternalImplError) as e:
        with ExecSampler(f"{program} double {at}") as impl:
            _replay(impl)
    assert e.value.reason == "garbage" and "\n" not in str(e.value)
    assert f"more than one reply line for step {at} of {REC}: the next one is '{{\"tokens\"" in str(e.value)


def test_a_second_reply_line_is_exit_3_in_the_cli(program):
    impl = f"exec:{program} double 1"
    rc, out, err = main_inproc("run", REC, "--impl", impl)
    lines = err.strip().splitlines()
    assert rc == 3 and len(lines) == 1, out + err
    assert lines[0].startswith(f"replay: error: impl '{impl}': more than one reply line for step 1 of {REC}")


def test_the_step_number_reaches_the_step_file_and_the_messages(program):
    # what `replay verify` passes (sample_at): the recording's step number, in the file's metadata too
    step = Recording(REC)[1].step
    with ExecSampler(f"{program} count0-route") as impl:
        impl.begin_recording(REC)
        with pytest.raises(ExternalImplError, match=f"reply to step 7 of {REC}: routes"):
            sample_at(impl, step, 7)
    with ExecSampler(f"{program} refuse") as impl:
        assert sample_at(impl, step, 5).notes == ["5"] and impl.sample(step).notes == ["1"]


@pytest.mark.parametrize("command", [("run", MIXED, "--steps", "2"),
                                     ("bench", MIXED, "--repeats", "1", "--warmup", "0")])
def test_run_steps_and_bench_name_the_recording_s_step(program, command):
    """`replay run --steps 2` sends step 2 first and `replay bench` calls a step many times: both name the step
    of the recording (the count0-route reply is refused at the first call), not the count of calls."""
    impl = f"exec:{program} count0-route"
    rc, out, err = main_inproc(*command, "--impl", impl)
    first = 2 if "--steps" in command else 0
    assert rc == 3 and f"reply to step {first} of {MIXED}: routes[0]" in err, out + err


# ---------------------------------------------------------------- bounds: the write, the parser, the notes


def test_a_program_that_never_reads_its_stdin_is_a_timeout_not_a_hang(program):
    """The step path goes to a pipe the program never reads (full here: the program fills it, as 16 long step
    paths do): replay waits --impl-timeout for room at most, kills the group, exit 3, one line."""
    impl = f"exec:{program} no-read"
    try:
        p = subprocess.run([sys.executable, "-m", "replay_harness.cli", "run", REC, "--impl", impl,
                            "--impl-timeout", "1"], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("replay blocked in write(2) past --impl-timeout")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 3 and len(lines) == 1, p.stderr
    assert lines[0].startswith(f"replay: error: impl '{impl}': program did not read step 0 of {REC} from its "
                               "stdin within 1 s (--impl-timeout); program killed"), lines[0]


def test_the_write_timeout_is_a_timeout_error(program):
    with pytest.raises(ExternalImplError) as e:  # blocked in write(2), it was a crash 10 s later (the program's exit)
        _replay(ExecSampler(f"{program} no-read", timeout=0.5))
    assert e.value.reason == "timeout" and "program did not read step 0" in str(e.value)


@pytest.mark.parametrize("mode,says", [
    ("deep", "reply to step 0 of {rec} is nested deeper than the JSON parser goes (1,000 levels, less replay's own)"),
    ("unclosed", "reply to step 0 of {rec} is nested deeper than the JSON parser goes"),
    ("digits", "reply to step 0 of {rec} holds a number of 5,000 digits (at most 100)"),
    ("wide 400000", 'reply to step 0 of {rec} is 1,600,277 bytes, over the 1,050,112 a reply to this step may have'),
    ("deep-handshake", "bad handshake: first stdout line is nested deeper than the JSON parser goes"),
])
def test_a_reply_past_the_parser_s_bounds_is_a_bad_reply_naming_program_and_step(program, mode, says):
    """Nesting 100,000 deep and a 5,000-digit integer were RecursionError / ValueError out of json.loads (an
    internal error naming neither program nor step); 400,000 empty objects under an ignored key were parsed
    whole (1.3 GB for 60 MiB of them): a reply past its step's size (32 bytes per R x (K + 4), + 1 MiB) is
    refused unparsed. Each is a bad reply now: exit 3, one line naming both."""
    impl = f"exec:{program} {mode}"
    rc, out, err = main_inproc("run", REC, "--impl", impl)
    lines = err.strip().splitlines()
    assert rc == 3 and len(lines) == 1 and "internal error" not in err, err
    assert lines[0].startswith(f"replay: error: impl '{impl}': {says.format(rec=REC)}"), lines[0]
    with pytest.raises(ExternalImplError) as e:
        with ExecSampler(f"{program} {mode}") as sampler:
            _replay(sampler)
    assert e.value.reason == ("handshake" if "handshake" in mode else "garbage")


def test_what_is_kept_of_the_notes_is_capped(program):
    """100 notes of 3,000 characters a reply, 40 replies (12 MB): 16 notes of 2,000 characters kept a reply,
    1 MiB of notes over the sampler's life; a note says what was dropped."""
    steps = [record.step for record in Recording(REC)]
    with ExecSampler(f"{program} notes 3000") as impl:
        impl.begin_recording(REC)
        results = [sample_at(impl, steps[i % 3], i % 3) for i in range(40)]
    first = results[0].notes
    assert len(first) == 17 and all(len(n) < 2100 for n in first[:16]), [len(n) for n in first]
    assert first[0].startswith("n" * 2000 + "… (1,000 more characters)") and "84 more notes dropped" in first[16]
    kept = sum(len(n) for r in results for n in r.notes)
    assert (1 << 20) - 40_000 < kept <= (1 << 20) + 1000, kept
    marks = [i for i, r in enumerate(results) if any("notes past 1,048,576 characters dropped" in n for n in r.notes)]
    assert len(marks) == 1 and all(r.notes == [] for r in results[marks[0] + 1:]), marks


@pytest.mark.parametrize("seconds", ["1e10", "inf"])
def test_an_impl_timeout_out_of_range_is_a_usage_error(program, seconds):
    rc, out, err = main_inproc("run", REC, "--impl", f"exec:{program} refuse", "--impl-timeout", seconds)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "internal error" not in err, err
    assert "--impl-timeout must be" in lines[0]


def test_an_impl_timeout_is_checked_wherever_it_is_set(program):
    for bad in (math.inf, 1e10, math.nan, 0, -1):
        with pytest.raises(UsageError, match="must be a number of seconds > 0 and <= 1,000,000"):
            ExecSampler(f"{program} refuse", timeout=bad)
    with ExecSampler(f"{program} refuse", timeout=1e6) as impl:
        with pytest.raises(UsageError):  # what `replay bench` and `verify` do: set_impl_timeout
            impl.timeout = math.inf
        assert impl.timeout == 1e6 and len(_replay(impl)) == 3


# ---------------------------------------------------------------- the Python adapter


NOISY = textwrap.dedent('''
    import os
    os.write(1, b"banner of a native library\\n")  # at import, past Python's sys.stdout
    from replay_harness.impls.reference import ReferenceSampler

    class Noisy(ReferenceSampler):
        def sample(self, step):
            os.write(1, b"native log line\\n")
            print("python log line")
            return super().sample(step)
''')


def test_the_adapter_keeps_native_stdout_off_the_protocol(tmp_path, monkeypatch):
    (tmp_path / "noisy_native.py").write_text(NOISY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    with ExecSampler(f"{sys.executable} -m replay_harness.impls.external_adapter noisy_native:Noisy",
                     handshake_timeout=120) as impl:
        reference = ReferenceSampler()
        for record in Recording(MIXED):
            got, want = impl.sample(record.step), reference.sample(record.step)
            assert torch.equal(got.tokens, want.tokens) and torch.equal(got.counts, want.counts)
        stderr = bytes(impl._err.kept).decode()
    assert "banner of a native library" in stderr and "native log line" in stderr and "python log line" in stderr


# ---------------------------------------------------------------- the documented errors


def _reasons_raised() -> set[str]:
    """The ``reason`` strings external.py passes to ``_fail`` and ExternalImplError (their last argument)."""
    tree = ast.parse((REPO / "replay_harness" / "impls" / "external.py").read_text())
    return {call.args[-1].value for call in ast.walk(tree) if isinstance(call, ast.Call)
            and getattr(call.func, "attr", getattr(call.func, "id", "")) in ("_fail", "ExternalImplError")
            and len(call.args) == 2 and isinstance(call.args[-1], ast.Constant)}


def test_the_documented_reasons_and_error_types_are_the_code_s():
    doc = (REPO / "docs" / "EXTERNAL.md").read_text()
    python_part = doc[doc.index("## From Python"):]
    reasons = _reasons_raised()
    assert {"crash", "timeout", "handshake", "garbage", "shape", "value", "reported", "overflow",
            "step-file"} == reasons
    assert all(f"`{r}`" in python_part for r in reasons), sorted(r for r in reasons if f"`{r}`" not in python_part)
    for missing in ("exec:./no/such/sampler", "exec:no-such-sampler-on-path"):
        with pytest.raises(EnvironmentProblem) as e:
            get_impl(missing)
        assert not isinstance(e.value, ExternalImplError) and e.value.exit_code == 3
    assert "`EnvironmentProblem`" in python_part and "`UsageError`" in python_part
