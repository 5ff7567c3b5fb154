#!/usr/bin/env python3
"""Where a pod start's time goes, from containerd's own log.

containerd's CRI plugin logs when each RunPodSandbox, CreateContainer and
StartContainer call arrives and when it returns. Read after a run of
`cargo bench -p wasmlet-bench --bench agent -- containerd N`, its log splits every
pod's start into the runtime's calls and the waits between them, for the three
runs of each round: the bare floor (pods named `floor-*`), the floor with the
agent's configurations (`floorcfg-*`) and the agent (the others).

    bench/containerd-phases.py /var/lib/wasmlet/test-containerd/containerd.log [SINCE]

SINCE (an RFC 3339 time, UTC, as containerd's log writes it: 2026-11-27T13:47:51)
skips what the log holds from before the run. Per kind: the medians per pod, in
milliseconds, of each call and of the gaps between them ("sandbox → create": from
RunPodSandbox returning to CreateContainer arriving), and per round the span from
its first RunPodSandbox arriving to its last StartContainer returning.
"""

import re
import statistics
import sys
from datetime import datetime, timezone

TIME = re.compile(r'time="([^"]+)"')
SANDBOX = re.compile(
    r'RunPodSandbox for &PodSandboxMetadata\{Name:([^,]+),.*?\}'
    r'( returns sandbox id \\"(\w+))?'
)
CREATE = re.compile(
    r'CreateContainer within sandbox \\"(\w+)\\" for (container )?&ContainerMetadata.*?\}'
    r'( returns container id \\"(\w+))?'
)
START = re.compile(r'StartContainer for \\"(\w+)\\"( returns successfully)?')
PHASES = [
    ("sandbox", "sb_req", "sb_ret"),
    ("sandbox → create", "sb_ret", "cc_req"),
    ("create", "cc_req", "cc_ret"),
    ("create → start", "cc_ret", "sc_req"),
    ("start", "sc_req", "sc_ret"),
    ("in all", "sb_req", "sc_ret"),
]


def seconds(stamp):
    whole, frac = stamp.rstrip("Z").split(".")
    at = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp()
    return at + float("0." + frac)


def read(path, since):
    """Each pod start's six moments, by (sandbox name, occurrence)."""
    starts, current, seen = {}, {}, {}
    of_sandbox, of_container = {}, {}
    for line in open(path, encoding="utf-8", errors="replace"):
        stamp = TIME.search(line)
        if not stamp or stamp.group(1) < since:
            continue
        at = seconds(stamp.group(1))
        if m := SANDBOX.search(line):
            name = m.group(1)
            if m.group(3):
                key = current.get(name)
                if key:
                    starts[key]["sb_ret"] = at
                    of_sandbox[m.group(3)] = key
            else:
                seen[name] = seen.get(name, 0) + 1
                current[name] = (name, seen[name])
                starts[current[name]] = {"sb_req": at}
        elif (m := CREATE.search(line)) and m.group(1) in of_sandbox:
            start = starts[of_sandbox[m.group(1)]]
            if m.group(4):
                start["cc_ret"] = at
                of_container[m.group(4)] = of_sandbox[m.group(1)]
            else:
                start["cc_req"] = at
        elif (m := START.search(line)) and m.group(1) in of_container:
            start = starts[of_container[m.group(1)]]
            start["sc_ret" if m.group(2) else "sc_req"] = at
    return starts


def kind(name):
    if name.startswith("floorcfg-"):
        return "floor with the agent's configurations"
    if name.startswith("floor-"):
        return "bare floor"
    return "agent"


def rounds(starts):
    """Starts grouped into rounds: a round's pods begin within 3 s of its first."""
    groups = []
    for s in sorted(starts, key=lambda s: s["sb_req"]):
        if groups and s["sb_req"] - groups[-1][0]["sb_req"] < 3:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    starts = read(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
    kinds = {}
    for (name, _), s in starts.items():
        if len(s) == 6:
            kinds.setdefault(kind(name), []).append(s)
    print("| run | pods | " + " | ".join(p[0] for p in PHASES) + " | round span (median) |")
    print("|---" * (len(PHASES) + 3) + "|")
    for k, ss in kinds.items():
        ms = [statistics.median((s[b] - s[a]) * 1000 for s in ss) for _, a, b in PHASES]
        spans = [
            (max(s["sc_ret"] for s in g) - min(s["sb_req"] for s in g)) * 1000
            for g in rounds(ss)
        ]
        cells = " | ".join(f"{v:.1f}" for v in ms)
        print(f"| {k} | {len(ss)} | {cells} | {statistics.median(spans):.0f} |")


if __name__ == "__main__":
    main()
