#!/usr/bin/env python3
"""The side-by-side report of bench/cgroupv2/vm_compare.py runs.

Usage: report.py OUTDIR LABEL... (labels AGENT-DRIVER, e.g. kubelet-systemd wasmlet-systemd)

For each driver: the pod tree's files whose values differ between the agents (paths with
pod UIDs and container IDs replaced by pod and container names), how many are the same,
the slices' systemd properties that differ; then per pod its containers' state (the OOM
kill) and the Summary API's memory and CPU figures for each agent.
"""
import json
import os
import re
import sys

HEX64 = re.compile(r"[0-9a-f]{64}")


def load(out, label):
    d = os.path.join(out, label)

    def read(name):
        try:
            with open(os.path.join(d, name)) as f:
                return f.read()
        except OSError:
            return ""

    def parse(name):
        try:
            return json.loads(read(name) or "{}")
        except json.JSONDecodeError:
            return {}

    return {"pods": parse("pods.json"), "summary": parse("summary.json"),
            "tree": read("tree.tsv"), "units": read("units.tsv"), "phases": parse("phases.json")}


def names(pods):
    """Pod UIDs (both spellings) and container IDs to readable names."""
    m = {}
    for p in pods.get("items") or []:
        uid, name = p["metadata"].get("uid", ""), p["metadata"]["name"].replace("-node-1", "")
        m[uid] = name
        m[uid.replace("-", "_")] = name
        st = p.get("status") or {}
        for c in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or []):
            for s in (c, c.get("lastState") or {}):
                cid = (s.get("containerID") or "").split("://")[-1]
                if not cid and s.get("terminated"):
                    cid = (s["terminated"].get("containerID") or "").split("://")[-1]
                if cid:
                    m[cid] = "%s/%s" % (name, c["name"])
    return m


def normalize(path, m):
    for k, v in m.items():
        if k and k in path:
            path = path.replace(k, "{%s}" % v)
    return HEX64.sub("{sandbox}", path)


def tree(run):
    m = names(run["pods"])
    rows = {}
    for line in run["tree"].splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            rows[(normalize(parts[0], m), parts[1])] = parts[2]
    return rows


def units(run):
    m = names(run["pods"])
    rows = {}
    for line in run["units"].splitlines():
        unit, _, props = line.partition("\t")
        for kv in props.split():
            k, _, v = kv.partition("=")
            rows[(normalize(unit, m), k)] = v
    return rows


def side_by_side(title, a_label, b_label, a, b):
    keys = sorted(set(a) | set(b))
    differ = [k for k in keys if a.get(k) != b.get(k)]
    print("### %s: %d the same, %d differ\n" % (title, len(keys) - len(differ), len(differ)))
    if differ:
        print("| path | file | %s | %s |\n|---|---|---|---|" % (a_label, b_label))
        for k in differ:
            print("| `%s` | `%s` | %s | %s |" % (k[0], k[1], a.get(k, "—"), b.get(k, "—")))
    print()


def pod_rows(run):
    """(pod, container) → (state, last state, working set MiB) from /pods and the summary."""
    rows = {}
    for p in run["pods"].get("items") or []:
        pod = p["metadata"]["name"].replace("-node-1", "")
        for c in (p.get("status") or {}).get("containerStatuses") or []:
            state = next(iter(c.get("state") or {"-": {}}))
            term = (c.get("lastState") or {}).get("terminated") or (c.get("state") or {}).get("terminated")
            last = "%s %s" % (term.get("reason"), term.get("exitCode")) if term else "-"
            rows[(pod, c["name"])] = [state, last, c.get("restartCount", 0), None]
    for ps in run["summary"].get("pods") or []:
        pod = ps["podRef"]["name"].replace("-node-1", "")
        for cs in ps.get("containers") or []:
            ws = (cs.get("memory") or {}).get("workingSetBytes")
            if (pod, cs["name"]) in rows and ws is not None:
                rows[(pod, cs["name"])][3] = ws / 2**20
        ws = (ps.get("memory") or {}).get("workingSetBytes")
        rows.setdefault((pod, "(pod)"), ["", "", "", None])[3] = ws / 2**20 if ws is not None else None
    return rows


def fmt_mib(v):
    return "—" if v is None else "%.1f" % v


def pods_table(driver, labels, runs):
    print("### pods (%s): state, last termination, restarts, working set MiB (Summary API)\n" % driver)
    print("| pod / container | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    tables = [pod_rows(runs[l]) for l in labels]
    for key in sorted(set().union(*tables)):
        cells = []
        for t in tables:
            r = t.get(key)
            cells.append("—" if r is None else "%s, %s, %s, %s" % (r[0], r[1], r[2], fmt_mib(r[3])))
        print("| %s/%s | %s |" % (key[0], key[1], " | ".join(cells)))
    nodes = []
    for l in labels:
        mem = (runs[l]["summary"].get("node") or {}).get("memory") or {}
        nodes.append(fmt_mib(mem.get("workingSetBytes") / 2**20 if mem.get("workingSetBytes") else None))
    print("| node (working set) | %s |" % " | ".join(nodes))
    print("| swap: node / memhog pod / memhog container (usage, available) | %s |\n"
          % " | ".join(swap_cell(runs[l]["summary"]) for l in labels))


def swap_cell(summary):
    def fmt(s):
        if not s:
            return "—"
        return "%s, %s" % (s.get("swapUsageBytes", "—"), s.get("swapAvailableBytes", "—"))
    pod = next((p for p in summary.get("pods") or [] if p["podRef"]["name"].startswith("memhog")), {})
    container = next(iter(pod.get("containers") or []), {})
    return " / ".join(fmt(x) for x in ((summary.get("node") or {}).get("swap"), pod.get("swap"),
                                          container.get("swap")))


def main():
    out, labels = sys.argv[1], sys.argv[2:]
    runs = {l: load(out, l) for l in labels}
    drivers = []
    for l in labels:
        d = l.split("-", 1)[1]
        if d not in drivers:
            drivers.append(d)
    for d in drivers:
        these = [l for l in labels if l.endswith("-" + d)]
        print("## cgroupDriver: %s\n" % d)
        if len(these) == 2:
            a, b = these
            side_by_side("pod tree files", a, b, tree(runs[a]), tree(runs[b]))
            if d == "systemd":
                side_by_side("slice properties", a, b, units(runs[a]), units(runs[b]))
        pods_table(d, these, runs)
        phases_table(these, runs)
    reboot_table(out)


def phases_table(labels, runs):
    rows = {}
    for l in labels:
        for section, values in (runs[l]["phases"] or {}).items():
            for k, v in values.items():
                rows.setdefault((section, k), {})[l] = v
    if not rows:
        return
    print("### under contention (cores of 2) and through the agent's lifecycle\n")
    print("| | " + " | ".join(labels) + " |\n|---|" + "---|" * len(labels))
    for (section, k), vals in sorted(rows.items()):
        print("| %s: %s | %s |" % (section, k, " | ".join(str(vals.get(l, "—")) for l in labels)))
    print()


def reboot_table(out):
    found = sorted(d for d in os.listdir(out) if d.endswith("-reboot"))
    if not found:
        return
    results = {}
    for d in found:
        with open(os.path.join(out, d, "reboot.json")) as f:
            results[d] = json.load(f)
    print("## a real reboot, the package's kubelet.service enabled (systemd driver)\n")
    print("| | " + " | ".join(found) + " |\n|---|" + "---|" * len(found))
    for k in results[found[0]]:
        print("| %s | %s |" % (k, " | ".join(str(results[d].get(k)) for d in found)))
    print()


if __name__ == "__main__":
    main()
