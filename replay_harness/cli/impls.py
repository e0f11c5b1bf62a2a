"""`replay impls`: the sampler implementations --impl accepts (the registry: replay_harness.impls)."""
from __future__ import annotations

from replay_harness.cli import tables

from replay_harness.cli.common import JsonFileOpt, JsonOpt, check_json_file, out, print_json
from replay_harness.errors import ReplayError


def impls(as_json: JsonOpt = False, json_file: JsonFileOpt = None) -> None:
    """List the sampler implementations --impl accepts (builtins, replay.impls plugins, exec:PROGRAM).

    Example: replay impls --json
    """
    from replay_harness.impls import BUILTIN, get_impl, known_names

    check_json_file(json_file)

    rows = []
    for name in known_names():
        source = "builtin" if name in BUILTIN else "plugin"
        try:
            impl = get_impl(name)
            rows.append({"name": name, "description": impl.description, "rng_contract": impl.rng_contract,
                         "requires_cuda": impl.requires_cuda, "available": True, "source": source})
        except ReplayError as e:
            rows.append({"name": name, "description": str(e), "rng_contract": None, "requires_cuda": None,
                         "available": False, "source": source})
    if as_json or json_file:
        print_json({"schema": "replay.impls/1", "impls": rows, "external": "exec:PROGRAM"}, json_file=json_file,
                   stdout=as_json)
    if as_json:
        return
    T = tables
    table = T.table("impls", [("name", T.WORD), ("rng", T.WORD), ("needs", T.WORD), ("description", T.TEXT)])
    for r in rows:  # words, never Python's None / False; "-" where an unavailable impl could not say
        needs = "-" if r["requires_cuda"] is None else "CUDA" if r["requires_cuda"] else "CPU or CUDA"
        table.add_row(r["name"], r["rng_contract"] or "-", needs if r["available"] else "unavailable",
                      r["description"])
    table.caption = "also exec:PROGRAM: an external sampler process (docs/EXTERNAL.md)"
    out.print(table)
