#!/usr/bin/env python3
"""Where the status lag goes: the runtime's part and the agent's.

The agent bench's status lag runs from a container's start (containerd's `startedAt`)
to the agent's status saying Running. The status carries the runtime's `startedAt`,
which the agent reads back only after StartContainer has returned; so the lag splits
at that return, which containerd's own log records:

- start → StartContainer returns: the runtime's part (a bare CRI client waits as long);
- StartContainer returns → status Running: the agent's (its read-back and status).

Run the bench with `WASMLET_BENCH_LAGS=FILE` (a line per pod: `LAG <container id>
<startedAt> <Running seen>`, Unix nanoseconds), then:

    bench/lag-split.py /var/lib/wasmlet/test-containerd/containerd.log FILE

Prints, over the pods of FILE, the median, 90th percentile and maximum of each part
(milliseconds), and the slowest pods.
"""

import re
import statistics
import sys
from datetime import datetime, timezone

RETURNED = re.compile(r'time="([^"]+)".*StartContainer for \\"(\w+)\\" returns successfully')


def nanos(stamp):
    whole, frac = stamp.rstrip("Z").split(".")
    at = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc)
    return int(at.timestamp()) * 10**9 + int(frac.ljust(9, "0")[:9])


def returns(log):
    """When StartContainer returned, by container id."""
    out = {}
    for line in open(log, encoding="utf-8", errors="replace"):
        if m := RETURNED.search(line):
            out[m.group(2)] = nanos(m.group(1))
    return out


def lags(path):
    for line in open(path, encoding="utf-8"):
        parts = line.split()
        if len(parts) == 4 and parts[0] == "LAG":
            yield parts[1], int(parts[2]), int(parts[3])


def summary(name, values):
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"| {name} | {statistics.median(ordered):.1f} | {p90:.1f} | {ordered[-1]:.1f} |"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    returned = returns(sys.argv[1])
    rows = []
    for cid, started, seen in lags(sys.argv[2]):
        if cid in returned:
            back = returned[cid]
            rows.append(((seen - started) / 1e6, (back - started) / 1e6, (seen - back) / 1e6))
    if not rows:
        sys.exit("no pod of the lag file has its StartContainer return in the log")
    print(f"{len(rows)} pods (ms)\n")
    print("| part | p50 | p90 | max |")
    print("|---|---|---|---|")
    print(summary("status lag in all", [r[0] for r in rows]))
    print(summary("start → StartContainer returns (containerd)", [r[1] for r in rows]))
    print(summary("StartContainer returns → status Running (agent)", [r[2] for r in rows]))
    print("\nslowest pods: lag = containerd + agent")
    for lag, runtime, agent in sorted(rows)[-5:]:
        print(f"  {lag:.1f} = {runtime:.1f} + {agent:.1f}")


if __name__ == "__main__":
    main()
