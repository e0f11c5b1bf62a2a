"""Summarise ``ncu --csv --section SpeedOfLight [--section Occupancy]`` output from stdin: kernel, duration,
SM %, DRAM %, and with the Occupancy section registers a thread, theoretical and achieved occupancy."""
import csv
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


if __name__ == "__main__":
    main()
