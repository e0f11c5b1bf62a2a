"""What the kernel benchmark runs: one dataclass, filled by tools/bench_kernels.py from its options.

Torch-free on purpose: the script reads its options, sets TRITON_INTERPRET for the CPU, and only then
imports the modules that define Triton kernels.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

VOCABS = (248320, 151936, 32000)  # headline vocabulary first: it is measured even if time runs out
SHAPES = ((1, 0), (64, 0), (256, 0), (1, 4), (8, 4), (64, 4), (256, 4))  # (R, k)
TOP_PS = (1.0, 0.9)
QUICK = dict(vocabs=(1000,), shapes=((1, 0), (2, 4)), top_ps=(1.0, 0.9))  # the CPU smoke (--quick)
SERIAL_R = (1, 64)  # serial-scan is slow: timed at these R, at V = SERIAL_V only
SERIAL_V = 248320


def _list(text: str | None, cast) -> list | None:
    return None if not text else [cast(x) for x in text.split(",") if x.strip()]


@dataclass
class Settings:
    """Every knob of one run (the script's options; see ``python tools/bench_kernels.py --help``)."""

    out: str = "bench_out"
    quick: bool = False
    cuda: bool = False  # time on the GPU (False: CPU, Triton interpreter)
    vocabs: list[int] = field(default_factory=lambda: list(VOCABS))
    shapes: list[tuple[int, int]] = field(default_factory=lambda: list(SHAPES))
    top_ps: list[float] = field(default_factory=lambda: list(TOP_PS))
    top_k: int = 0  # top-k of every request (0 = off), with each of top_ps
    impls: list[str] | None = None  # substrings of impl names to time (None: all)
    no_peers: bool = False
    peers_dir: str = ".peers"
    no_jit: bool = False
    skip_correctness: bool = False
    check_requests: int = 8
    det_launches: int = 100
    warmup: float = 25.0  # do_bench warmup, ms
    rep: float = 60.0  # do_bench rep, ms
    rounds: int = 2
    warm_ms: float = 30.0
    graph_ms: float = 40.0
    graph_launches: int = 16
    copy_gib: float = 2.0
    budget_s: float = 330.0
    t0: float = field(default_factory=time.time)

    @classmethod
    def from_options(cls, quick: bool, vocab: str | None, cases: str | None, top_p: str | None,
                     impls: str | None, **rest) -> "Settings":
        """From the script's options: comma lists parsed, --quick's shapes, --cases filters applied."""
        base = QUICK if quick else dict(vocabs=VOCABS, shapes=SHAPES, top_ps=TOP_PS)
        shapes = list(base["shapes"])
        keys = _list(cases, str.strip)
        if keys:
            shapes = [(r, k) for r, k in shapes if any(c == f"R{r}k{k}" or (c == "plain" and k == 0)
                                                         or (c == "verify" and k > 0) for c in keys)]
        return cls(quick=quick, vocabs=_list(vocab, int) or list(base["vocabs"]), shapes=shapes,
                   top_ps=_list(top_p, float) or list(base["top_ps"]), impls=_list(impls, str.strip), **rest)

    @property
    def device(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def elapsed(self) -> float:
        return time.time() - self.t0

    def over_budget(self) -> bool:
        return self.elapsed() > self.budget_s

    def log(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)

    def to_dict(self) -> dict:
        return asdict(self)
