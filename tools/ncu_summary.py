"""Summarise ``ncu --csv --section SpeedOfLight [--section Occupancy]`` output from stdin: kernel, duration,
SM %, DRAM %, and with the Occupancy section registers a thread, theoretical and achieved occupancy.

``--pipes FILE``: the raw-page CSV of tools/run_gpu_ncu_pipes.sh (a "case" column, metric names as columns):
per case the duration (at Nsight Compute's locked clocks), DRAM busy % and bytes a second, SM throughput,
issue-slot use, instructions a launch, the busiest pipes (``sm__inst_executed_pipe_*`` and
``sm__pipe_*_cycles_active``, % of peak while active) and the five largest stall reasons (cycles a warp spends
stalled per instruction issued)."""
import csv
import re
import sys

KEEP = ("Duration", "Compute (SM) Throughput", "DRAM Throughput", "Memory Throughput", "Registers Per Thread",
        "Theoretical Occupancy", "Achieved Occupancy")


def main() -> None:
    rows = list(csv.reader(line for line in sys.stdin if line.startswith('"')))
    if not rows:
        print("   (no ncu rows)")
        return
    head = rows[0]
    col = {k: head.index(k) for k in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit")}
    for r in rows[1:]:
        if r[col["Metric Name"]] in KEEP:
            print(f"   {r[col['Kernel Name']][:40]:40s} {r[col['Metric Name']]:28s} "
                  f"{r[col['Metric Value']]:>10s} {r[col['Metric Unit']]}")


def pipes(path: str) -> None:
    rows = list(csv.reader(open(path)))
    head, data = rows[0], rows[2:]
    fixed = (("duration ns", "gpu__time_duration.sum"),
             ("DRAM busy %", "dram__cycles_active.avg.pct_of_peak_sustained_elapsed"),
             ("DRAM B/s", "dram__bytes.sum.per_second"),
             ("SM %", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
             ("issue active %", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
             ("warp instructions", "smsp__inst_executed.sum"), ("registers", "launch__registers_per_thread"),
             ("achieved occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active"))
    pipe = re.compile(r"^sm__(inst_executed_pipe_\w+|pipe_\w+_cycles_active)\.avg\.pct_of_peak_sustained_active$")
    stall = re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+)\.ratio$|"
                       r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")

    def num(v: str) -> float:
        try:
            return float(v.replace(",", ""))
        except ValueError:
            return float("nan")

    for r in data:
        cell = dict(zip(head, r))
        print(f"== {cell.get('case', '?')}: {cell.get('Kernel Name', '')[:40]}")
        print("   " + ", ".join(f"{label} {cell[m]}" for label, m in fixed if m in cell))
        busy = sorted(((num(v), k) for k, v in cell.items() if pipe.match(k)), reverse=True)
        print("   pipes: " + ", ".join(f"{k.split('__')[1].split('.')[0]} {v:.1f}" for v, k in busy[:8]))
        stalls = sorted(((num(v), next(g for g in m.groups() if g)) for k, v in cell.items()
                         if (m := stall.match(k))), reverse=True)
        print("   stalls per issue: " + ", ".join(f"{name} {v:.2f}" for v, name in stalls[:5]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pipes"]:
        pipes(sys.argv[2])
    else:
        main()
