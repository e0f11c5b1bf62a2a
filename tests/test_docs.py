"""The code and the docs speak of the project, never of the work periods that built it.

A line under replay_harness/, replay_kernels/, tools/, docs/ (the raw data under docs/bench/ aside), examples/ or
README.md must not cite a work period (an ordinal followed by the word for one, or a run folder named after one,
as in test_a_work_period_is_found): it cites a doc section, a date or a commit instead (``git log -S'text'`` finds
when a thing landed). The word is left to the two things it really names: a pytest fixture's scope and a process
group (``start_new_session``, ``setsid``). The examples below are built from parts, so this file's own lines do
not cite a work period either.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("replay_harness", "replay_kernels", "tools", "docs", "examples", "README.md")
SKIP = ("docs/bench/",)  # raw output of the measurements, as the tools printed it
SUFFIXES = {".py", ".md", ".sh", ".txt", ".rst", ".toml", ".cfg", ".hpp", ".cpp", ".h", ".c", ""}

_UNITS = ("first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
          "fifteenth sixteenth seventeenth eighteenth nineteenth").split()
_TENS = ("twentieth", "thirtieth", "fortieth")
_ORDINAL_WORD = "|".join([f"(?:twenty|thirty)-(?:{'|'.join(_UNITS[:9])})", *_TENS, *_UNITS])
_ORDINAL = rf"(?:{_ORDINAL_WORD}|\d{{1,2}}(?:st|nd|rd|th))"
# an ordinal (a word or 27th), two joined by "and"/"to", then the word; or a run folder h200-sNN
ORDINAL_SESSION = re.compile(rf"\b{_ORDINAL}(?:\s+(?:and|to)\s+{_ORDINAL})?\s+sessions?\b|\bh200(?:x\d)?-s\d{{1,2}}\b",
                             re.IGNORECASE)
SESSION = re.compile(r"session", re.IGNORECASE)
# the sessions that are sessions: pytest fixture scopes and process groups
ALLOWED = re.compile(r"""scope\s*=\s*["']session["']|start_new_session|new session|session leader|session id""",
                     re.IGNORECASE)

# Lines in files this change does not own, each to be rewritten by that file's owner (path -> text of the line).
PENDING: dict[str, tuple[str, ...]] = {}  # path -> line fragments still to rewrite (owned elsewhere while in flight)


def names_a_work_period(line: str) -> bool:
    """Whether ``line`` cites a work period: an ordinal then the word, or the word outside the allowed uses."""
    return bool(ORDINAL_SESSION.search(line) or SESSION.search(ALLOWED.sub("", line)))


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for root in ROOTS:
        path = REPO / root
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in candidates:
            rel = p.relative_to(REPO).as_posix()
            if "__pycache__" in rel or rel.startswith(SKIP) or p.suffix not in SUFFIXES or p.stat().st_size > 1 << 20:
                continue
            files.append(p)
    return files


def offending_lines(pending: dict[str, tuple[str, ...]] = PENDING) -> list[str]:
    hits = []
    for p in scanned_files():
        rel = p.relative_to(REPO).as_posix()
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if names_a_work_period(line) and not any(s in line for s in pending.get(rel, ())):
                hits.append(f"{rel}:{n}: {line.strip()[:160]}")
    return hits


_S = "ses" + "sion"  # the word, spelled so that no line here is itself an example


@pytest.mark.parametrize("line", [
    f"measured (docs/BENCHMARKS.md, twenty-seventh {_S}): 1.3 µs",
    f"the 27th {_S} found it",
    f"H200, seventh and eighth {_S}s",
    f"the thirty-third {_S}'s variant",
    f"(thirteenth {_S.capitalize()})",
    "scripts in docs/bench/2026-12-04-h200-" + "s33/scripts/",
    f"a {_S} of the project",
])
def test_a_work_period_is_found(line):
    assert names_a_work_period(line)


@pytest.mark.parametrize("line", [
    '@pytest.fixture(scope="session")',
    "subprocess.Popen(cmd, start_new_session=True)",
    "a daemon that double-forks into a new session",
    "measured 2026-12-03 (docs/KERNELS.md \"Verify position launches\")",
    "the first call records the sequence; the second call replays it",
    "sessions_per_host = 2".replace("sessions", "slots"),
])
def test_a_fact_about_the_code_passes(line):
    assert not names_a_work_period(line)


def test_no_line_names_a_work_period():
    hits = offending_lines()
    assert not hits, "cite a doc section, a date or a commit instead:\n" + "\n".join(hits)


def test_pending_lines_are_rewritten():
    """PENDING only excuses lines that still need it (an entry whose line was rewritten must go)."""
    assert not [h for h in offending_lines(pending={}) if h not in offending_lines()]


LINK = re.compile(r"\]\(((?:\.\./)*\w[\w.-]*(?:/[\w.-]+)*/?)(?:#[\w-]*)?\)")
BENCH_PATH = re.compile(r"docs/bench/[\w./-]*\w")


def test_every_link_and_bench_path_resolves():
    """A markdown link of docs/ or README.md, and a ``docs/bench/...`` path named anywhere scanned, names a file
    or folder that exists (the raw data of docs/bench/ is kept only where the current docs point at it)."""
    missing = []
    for p in scanned_files():
        rel = p.relative_to(REPO).as_posix()
        text = p.read_text(encoding="utf-8", errors="replace")
        targets = [(p.parent / t) for t in LINK.findall(text) if p.suffix == ".md" and "://" not in t
                   and not t.startswith("mailto:")]
        targets += [REPO / t for t in BENCH_PATH.findall(text)]
        missing += [f"{rel}: {t.relative_to(REPO) if t.is_relative_to(REPO) else t}" for t in targets
                    if not t.exists()]
    assert not missing, "\n".join(missing)


def test_every_file_under_docs_bench_is_pointed_at():
    """docs/bench/ keeps only the raw data the current docs cite: every file there is linked or named by path,
    itself or through a folder of docs/bench/ that a doc links (issue 57: old runs live in git history)."""
    bench = REPO / "docs" / "bench"
    cited: set[Path] = set()
    for p in scanned_files():
        if p.is_relative_to(bench):
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        links = [(p.parent / t) for t in LINK.findall(text) if p.suffix == ".md" and "://" not in t]
        cited |= {t.resolve() for t in links + [REPO / t for t in BENCH_PATH.findall(text)]}
    cited.discard(bench.resolve())  # a link to docs/bench/ itself cites no run
    orphans = [f.relative_to(REPO).as_posix() for f in sorted(bench.rglob("*")) if f.is_file()
               and not any(c == f or c in f.parents for c in cited)]
    assert not orphans, "files under docs/bench/ no doc points at (delete them; git keeps them):\n" + "\n".join(orphans)
