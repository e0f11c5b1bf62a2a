"""Outputs of the kernel benchmark: OUT/bench.json (everything), OUT/bench.csv (the shared long layout,
:mod:`replay_harness.bench.csvlog`), OUT/bench.md (headline tables per V, every median, what was skipped),
and the headline printed last."""
from __future__ import annotations

import json
from pathlib import Path

from replay_harness.bench import csvlog
from replay_harness.bench.kernels.checks import FAILED
from replay_harness.bench.kernels.settings import SERIAL_V, Settings
from replay_harness.guarded import Folder

PEER_FAMILIES = ("vllm", "flashinfer", "torch")


def _key(r: dict) -> tuple:
    return r["vocab"], r["requests"], r["max_drafts"], r["top_p"], r["mode"], r["impl"]


def summarize(rows: list) -> dict:
    """(V, R, k, top_p, mode, impl) -> us (median over rounds), spread (max - min of the round medians),
    family, floor (µs at copy bandwidth), pct (% of copy bandwidth, first round), gbps (first round)."""
    agg: dict = {}
    for r in rows:
        if r["median_us"] is None:
            continue
        a = agg.setdefault(_key(r), dict(meds=[], family=r["family"], floor=r["floor_us"], pct=r["pct_copy_bw"],
                                         gbps=r["gbps"]))
        a["meds"].append(r["median_us"])
    out = {}
    for key, a in agg.items():
        m = sorted(a["meds"])
        out[key] = dict(us=m[len(m) // 2] if len(m) % 2 else 0.5 * (m[len(m) // 2 - 1] + m[len(m) // 2]),
                        spread=m[-1] - m[0], family=a["family"], floor=a["floor"], pct=a["pct"], gbps=a["gbps"])
    return out


def headline(rows: list, V: int) -> str:
    s = summarize(rows)
    shapes = sorted({(k[1], k[2], k[3]) for k in s if k[0] == V}, key=lambda x: (x[1], x[0], -x[2]))
    if not shapes:
        return f"(no timings at V={V})\n"
    lines = [f"### V={V}: eager-cold median us (L2 flushed; spread = max-min over rounds) and graph us/launch",
             "",
             "| R | k | top_p | floor | gumbel-max | stochastic | best peer (cold) | ours/peer | "
             "graph ours | graph peer | ours/peer graph |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]

    def best(R, k, tp, mode):
        c = [(v["us"], key[5]) for key, v in s.items() if key[:5] == (V, R, k, tp, mode) and v["family"] in
             PEER_FAMILIES]
        return min(c) if c else None

    def cell(v):
        return "-" if v is None else f"{v['us']:.1f}±{v['spread']:.1f}"

    for R, k, tp in shapes:
        gmx, sto = s.get((V, R, k, tp, "eager-cold", "gumbel-max")), s.get((V, R, k, tp, "eager-cold", "stochastic"))
        floor = (gmx or sto or {}).get("floor")
        ours_fast = min([x for x in [(gmx or {}).get("us"), (sto or {}).get("us")] if x is not None], default=None)
        peer, pg = best(R, k, tp, "eager-cold"), best(R, k, tp, "graph")
        og = [x["us"] for x in [s.get((V, R, k, tp, "graph", n)) for n in ("gumbel-max", "stochastic")] if x]
        ratio = f"{ours_fast / peer[0]:.2f}" if ours_fast and peer else "-"
        gratio = f"{min(og) / pg[0]:.2f}" if og and pg else "-"
        lines.append(f"| {R} | {k} | {tp} | {floor if floor is not None else '-'} | {cell(gmx)} | {cell(sto)} | "
                     f"{'-' if not peer else f'{peer[0]:.1f} {peer[1]}'} | {ratio} | "
                     f"{'-' if not og else f'{min(og):.1f}'} | {'-' if not pg else f'{pg[0]:.1f} {pg[1]}'} | {gratio} |")
    ser = [(key, v) for key, v in s.items() if key[0] == V and key[5] == "serial-scan" and key[4] == "eager-cold"]
    if ser:
        lines += ["", "serial-scan (eager-cold): " + ", ".join(
            f"R={key[1]} top_p={key[3]}: {v['us']:.0f} us" for key, v in sorted(ser))]
    return "\n".join(lines) + "\n"


def markdown(env: dict, copy: dict, peers: dict, cfg: Settings, checks: list, rows: list, skipped: list) -> str:
    n_real = sum(1 for c in checks if c.get("verdict") in FAILED)
    md = [f"# Sampler kernel benchmark ({env.get('gpu', env['device'])}, {env['date']})", "",
          f"torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, python {env['python']}, "
          f"commit {env.get('commit')}" + (f", nvidia-smi: {env['nvidia_smi']}" if env.get("nvidia_smi") else ""), "",
          f"copy bandwidth: {copy['gbps']:.0f} GB/s ({copy['note']}, median {copy['median_us']:.0f} us)", "",
          "peers: " + "; ".join(f"{k}: {v}" for k, v in peers.items()), "",
          f"correctness: {sum(1 for c in checks if c.get('verdict') == 'PASS')} checks PASS, "
          f"{n_real} FAIL/ERROR" + (" <<<<<< LOOK AT THE LOG" if n_real else ""), ""]
    md += [f"- {c.get('verdict')}: {c.get('check')} {c.get('impl', '')} V={c['V']} R={c['R']} k={c['k']} "
           f"top_p={c['top_p']}: {c.get('detail', '')}" for c in checks if c.get("verdict") not in ("PASS", "INFO")]
    md.append("")
    md += [headline(rows, V) for V in cfg.vocabs]
    md += ["bytes: plain R*V*4, verify N*V*4 (+R*k*V*4 draft probs for FlashInfer); floor = bytes / copy bw.",
           "cold = triton do_bench with L2 flush; warm = back-to-back eager calls; graph = CUDA-graph replay / launches.",
           "vLLM MRV2 takes no top-p; FlashInfer chain_speculative_sampling applies no top-p (those cells are n/a).",
           "", "## skipped", ""]
    md += [f"- {impl}: {reason}" for impl, reason in dict.fromkeys((sk["impl"], sk["reason"]) for sk in skipped)]
    md += ["", "## all eager-cold / eager-warm / graph medians (us)", "",
           "| impl | V | R | k | top_p | cold | warm | graph | GB/s cold | % copy bw | floor |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    s = summarize(rows)
    for V, R, k, tp, impl in sorted({(k[0], k[1], k[2], k[3], k[5]) for k in s},
                                    key=lambda x: (-x[0], x[2], x[1], -x[3], x[4])):
        c, w, g = (s.get((V, R, k, tp, m, impl)) for m in ("eager-cold", "eager-warm", "graph"))
        us = [("-" if v is None else f"{v['us']:.1f}") for v in (c, w, g)]
        md.append(f"| {impl} | {V} | {R} | {k} | {tp} | {' | '.join(us)} | {'-' if c is None else c['gbps']} | "
                  f"{'-' if c is None else c['pct']} | {'-' if c is None else c['floor']} |")
    errs = [r for r in rows if r.get("error")]
    if errs:
        md += ["", "## timing errors", ""] + [f"- {r['impl']} V={r['vocab']} R={r['requests']} k={r['max_drafts']} "
                                               f"top_p={r['top_p']} {r['mode']}: {r['error']}" for r in errs]
    return "\n".join(md) + "\n"


def write_outputs(out: Path, env: dict, copy: dict, peers: dict, cfg: Settings, checks: list, rows: list,
                  skipped: list, final: bool) -> None:
    """bench.json, bench.csv and bench.md in ``out`` (made when missing), each written atomically relative to the
    folder's descriptor (replay_harness.guarded)."""
    out.mkdir(parents=True, exist_ok=True)
    doc = dict(env=env, copy_bandwidth=copy, peers=peers, settings=cfg.to_dict(), checks=checks, skipped=skipped,
               rows=rows, elapsed_s=round(cfg.elapsed(), 1), complete=final)
    with Folder.at(out) as folder:
        folder.write_file("bench.json", json.dumps(doc, indent=1, default=str).encode())
        folder.write_file("bench.csv", csvlog.render(rows, env).encode())
        folder.write_file("bench.md", markdown(env, copy, peers, cfg, checks, rows, skipped).encode())


def print_headline(out: Path, env: dict, copy: dict, peers: dict, cfg: Settings, checks: list, rows: list) -> None:
    bad = [c for c in checks if c.get("verdict") in FAILED]
    print("\n" + "=" * 100)
    print(f"## HEADLINE  ({env.get('gpu', env['device'])}, torch {env['torch']}, triton {env['triton']}, "
          f"CUDA {env['cuda']}, {env['date']}, commit {env.get('commit')}, elapsed {cfg.elapsed():.0f}s)")
    print(f"copy bandwidth {copy['gbps']:.0f} GB/s; peers: " + "; ".join(f"{k}: {v[:60]}" for k, v in peers.items()))
    n_pass = sum(1 for c in checks if c.get("verdict") == "PASS")
    print(f"correctness: {n_pass} PASS, {len(bad)} FAIL/ERROR" + ("" if not bad else "  <<<<<<<<<< FAILURES:"))
    for c in bad[:10]:
        print(f"  {c.get('verdict')} {c.get('check')} {c.get('impl', '')} V={c['V']} R={c['R']} k={c['k']} "
              f"top_p={c['top_p']} {str(c.get('detail', ''))[:200]}")
    par = [c for c in checks if c.get("check") == "vllm-parity"]
    if par:
        print("vllm parity (token-identical requests): " + ", ".join(
            f"V{c['V']}R{c['R']}k{c['k']}:{c['identical']}/{c['total']}" for c in par))
    n_err = sum(1 for r in rows if r.get("error"))
    if n_err:
        print(f"timing errors: {n_err} (see bench.md)")
    print()
    print(headline(rows, SERIAL_V if SERIAL_V in cfg.vocabs else cfg.vocabs[0]))
    print(f"full results: {out}/bench.md, bench.csv ({len(rows)} measurements), bench.json")
