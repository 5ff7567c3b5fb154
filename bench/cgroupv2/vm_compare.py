#!/usr/bin/env python3
"""wasmlet and the upstream kubelet on cgroup v2, side by side in a real VM.

Boots a Debian 12 VM with ../shared/vm-lab (systemd 252 as PID 1, the unified hierarchy,
containerd 1.6), then runs each agent in turn there — standalone, the same
KubeletConfiguration, the same static pods (bench/cgroupv2/pods) — under the systemd
and the cgroupfs driver, and records what each made: the pod tree's files and values,
the slices' systemd properties, the pods' status (an OOM kill included) and the
Summary API. Prints the side-by-side table of files and values and the stats, and
writes everything under OUTDIR.

Usage: bench/cgroupv2/vm_compare.py OUTDIR [--kubelet BIN] [--wasmlet BIN]
           [--images TAR] [--agents kubelet,wasmlet] [--drivers systemd,cgroupfs]
           [--settle SECONDS] [--phases] [--deb WASMLET_DEB] [--no-copy]
--phases adds, under the systemd driver: three spinning pods' cores under contention, the
agent restarted (its containers adopted), a pod's manifest removed (its cgroup gone).
--deb adds a real reboot of the VM with the package installed and kubelet.service
enabled, running each agent in turn: the time until the static pods run again.
Environment: VM_LAB_KIT (default ../shared/vm-lab from the repository), VM_LAB and the
kit's own settings; K8S_TESTBED (default /tmp/k8s-testbed-1.33) for the kubelet and the
images.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NODE = "node-1"
# Not /tmp: the guest empties it at boot, and the reboot needs the files after it.
GUEST_DIR = "/var/tmp/cgv2"
POD_DEADLINE = 900  # seconds: agents start slowly under emulation
KIT = os.environ.get("VM_LAB_KIT", os.path.join(REPO, "..", "shared", "vm-lab"))


def log(msg):
    print("[cgroupv2 %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def kit(script, *args, capture=False, check=True):
    r = subprocess.run([os.path.join(KIT, script), *args], capture_output=capture, text=True)
    if check and r.returncode != 0:
        raise SystemExit("%s %s failed (%d): %s" % (script, " ".join(args), r.returncode,
                                                    (r.stderr or "")[-2000:]))
    return r.stdout if capture else None


def guest(*args, check=True):
    """Runs a command in the VM; its stdout."""
    return kit("ssh.sh", NODE, *args, capture=True, check=check)


def boot():
    if subprocess.run([os.path.join(KIT, "ssh.sh"), NODE, "true"], capture_output=True).returncode == 0:
        log("%s is up" % NODE)
        return
    kit("build.sh")
    kit("up.sh", "1")


def copy_in(args):
    guest("mkdir", "-p", GUEST_DIR + "/pods")
    kit("cp.sh", args.kubelet, "%s:%s/kubelet" % (NODE, GUEST_DIR))
    kit("cp.sh", args.wasmlet, "%s:%s/wasmlet" % (NODE, GUEST_DIR))
    kit("cp.sh", args.images, "%s:%s/images.oci.tar" % (NODE, GUEST_DIR))
    kit("cp.sh", os.path.join(HERE, "guest.sh"), "%s:%s/" % (NODE, GUEST_DIR))
    guest("mkdir", "-p", GUEST_DIR + "/pods-cpu")
    for f in sorted(os.listdir(os.path.join(HERE, "pods-cpu"))):
        kit("cp.sh", os.path.join(HERE, "pods-cpu", f), "%s:%s/pods-cpu/" % (NODE, GUEST_DIR))
    guest("mkdir", "-p", GUEST_DIR + "/plugins")
    for plugin in shipped_plugins():
        kit("cp.sh", plugin, "%s:%s/plugins/" % (NODE, GUEST_DIR))
    for f in sorted(os.listdir(os.path.join(HERE, "pods"))):
        kit("cp.sh", os.path.join(HERE, "pods", f), "%s:%s/pods/" % (NODE, GUEST_DIR))
    guest(GUEST_DIR + "/guest.sh", "prepare")


def shipped_plugins():
    """The .wasm files the package ships (host/wasmlet/Cargo.toml's assets)."""
    crate = os.path.join(REPO, "host", "wasmlet")
    with open(os.path.join(crate, "Cargo.toml")) as f:
        found = re.findall(r'\["([^"]+\.wasm)"', f.read())
    return [os.path.normpath(os.path.join(crate, p)) for p in found]


def fetch(path):
    out = guest("curl", "-s", "--max-time", "20", "http://127.0.0.1:10255" + path, check=False)
    return out or ""


def pods_settled(pods):
    """Whether every static pod has its containers running (the oom pod: running, or
    killed once — with memory.oom.group the kernel's kill ends the container, without
    it only dd dies and the shell goes on)."""
    items = pods.get("items") or []
    if len(items) < len(os.listdir(os.path.join(HERE, "pods"))):
        return False
    for p in items:
        for c in (p.get("status") or {}).get("containerStatuses") or []:
            ended = c.get("lastState", {}).get("terminated") or c.get("state", {}).get("terminated")
            if p["metadata"]["name"].startswith("oom") and ended:
                continue
            if not c.get("state", {}).get("running"):
                return False
        if not (p.get("status") or {}).get("containerStatuses"):
            return False
    return True


def wait_for_pods(label):
    deadline = time.time() + POD_DEADLINE
    while time.time() < deadline:
        try:
            pods = json.loads(fetch("/pods") or "{}")
        except json.JSONDecodeError:
            pods = {}
        if pods_settled(pods):
            return pods
        time.sleep(10)
    raise SystemExit("%s: the static pods were not running within %d s (see the agent's journal: "
                     "guest journalctl -u cgv2-agent)" % (label, POD_DEADLINE))


def current_pods():
    try:
        return json.loads(fetch("/pods") or "{}")
    except json.JSONDecodeError:
        return {}


def container_ids(pods):
    """{pod/container: container ID} of the running containers."""
    ids = {}
    for p in pods.get("items") or []:
        for c in (p.get("status") or {}).get("containerStatuses") or []:
            if (c.get("state") or {}).get("running"):
                ids["%s/%s" % (p["metadata"]["name"], c["name"])] = c.get("containerID")
    return ids


def uid_of(pods, prefix):
    for p in pods.get("items") or []:
        if p["metadata"]["name"].startswith(prefix):
            return p["metadata"]["uid"]
    return None


def wait_until(what, check, deadline):
    t0 = time.time()
    while time.time() - t0 < deadline:
        if check():
            return time.time() - t0
        time.sleep(5)
    raise SystemExit("%s: not within %d s" % (what, deadline))


def lifecycle(label):
    """The agent restarted (its pods adopted, not restarted), then a pod's manifest
    removed (its cgroup gone)."""
    before = container_ids(current_pods())
    guest("systemctl", "restart", "cgv2-agent")
    time.sleep(20)
    wait_for_pods(label + " after a restart")
    after = container_ids(current_pods())
    uid = uid_of(current_pods(), "besteffort")
    guest("rm", "-f", "/etc/cgv2/manifests/besteffort.yaml")
    def removed():
        tree = guest(GUEST_DIR + "/guest.sh", "dump")
        return uid not in tree and uid.replace("-", "_") not in tree
    gone = wait_until("%s: besteffort's cgroup removed" % label, removed, 300)
    return {"running before the restart": len(before),
            "the same containers after it": sum(1 for k, v in before.items() if after.get(k) == v),
            "s until a removed pod's cgroup is gone": round(gone)}


def cpu_cores(pods, a, b, seconds):
    names = {}
    for p in pods.get("items") or []:
        names[p["metadata"]["uid"]] = names[p["metadata"]["uid"].replace("-", "_")] = p["metadata"]["name"]

    def parse(text):
        rows = {}
        for line in text.splitlines():
            path, _, usec = line.partition("\t")
            name = next((n for u, n in names.items() if u in path), None)
            if name and usec.strip():
                rows[name.replace("-node-1", "")] = int(usec)
        return rows
    ua, ub = parse(a), parse(b)
    return {k: round((ub[k] - ua[k]) / 1e6 / seconds, 2) for k in ub if k in ua and k.startswith("cpu-")}


def contention(label, window=40):
    """Three spinning pods (Guaranteed 1 CPU, Burstable 500m, BestEffort) alone on the
    node (the others gone first: they would leave no room to admit them): the cores
    each gets of the VM's two, from their cgroups' cpu.stat."""
    guest(GUEST_DIR + "/guest.sh", "cpu-pods", "clear")
    wait_until("%s: the other pods gone" % label, lambda: not container_ids(current_pods()), 600)
    guest(GUEST_DIR + "/guest.sh", "cpu-pods", "on")
    wait_until("%s: the spinning pods running" % label,
               lambda: sum(1 for k in container_ids(current_pods()) if k.startswith("cpu-")) == 3, 600)
    time.sleep(15)
    a = guest(GUEST_DIR + "/guest.sh", "usage")
    time.sleep(window)
    b = guest(GUEST_DIR + "/guest.sh", "usage")
    cores = cpu_cores(current_pods(), a, b, window)
    guest(GUEST_DIR + "/guest.sh", "cpu-pods", "off")
    return cores


def run_one(agent, driver, out, settle, phases=False):
    label = "%s-%s" % (agent, driver)
    d = os.path.join(out, label)
    os.makedirs(d, exist_ok=True)
    guest(GUEST_DIR + "/guest.sh", "stop")
    t0 = time.time()
    guest(GUEST_DIR + "/guest.sh", "start", agent, driver)
    pods = wait_for_pods(label)
    log("%s: pods settled in %.0f s; %d s for the stats" % (label, time.time() - t0, settle))
    time.sleep(settle)
    record = {
        "pods.json": fetch("/pods"),
        "summary.json": fetch("/stats/summary"),
        "metrics-resource.txt": fetch("/metrics/resource"),
        "tree.tsv": guest(GUEST_DIR + "/guest.sh", "dump"),
        "units.tsv": guest(GUEST_DIR + "/guest.sh", "units"),
        "journal.txt": guest("journalctl", "-u", "cgv2-agent", "--no-pager", "-o", "short-monotonic", check=False),
    }
    for name, text in record.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text or "")
    if phases:
        result = {"lifecycle": lifecycle(label)}
        result["cores under contention"] = contention(label)
        with open(os.path.join(d, "phases.json"), "w") as f:
            json.dump(result, f, indent=1)
        log("%s: %s" % (label, json.dumps(result)))
    guest(GUEST_DIR + "/guest.sh", "stop")
    return label


def reboot(agent, out):
    """The package installed, kubelet.service enabled running AGENT with the static
    pods (systemd driver), then a real reboot: how long until the pods run again."""
    label = "%s-reboot" % agent
    guest(GUEST_DIR + "/guest.sh", "stop")
    guest(GUEST_DIR + "/guest.sh", "package", agent, "systemd")
    wait_for_pods(label)
    boot = guest("cat", "/proc/sys/kernel/random/boot_id").strip()
    t0 = time.time()
    kit("reboot.sh", NODE)
    up = time.time() - t0
    wait_for_pods(label + " after the reboot")
    result = {"boot changed": guest("cat", "/proc/sys/kernel/random/boot_id").strip() != boot,
              "s to ssh after the reboot": round(up),
              "s until every pod runs again": round(time.time() - t0),
              "unit": guest("systemctl", "is-active", "kubelet", check=False).strip(),
              "unit enabled": guest("systemctl", "is-enabled", "kubelet", check=False).strip()}
    os.makedirs(os.path.join(out, label), exist_ok=True)
    with open(os.path.join(out, label, "reboot.json"), "w") as f:
        json.dump(result, f, indent=1)
    log("%s: %s" % (label, json.dumps(result)))
    guest(GUEST_DIR + "/guest.sh", "stop")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    tb = os.environ.get("K8S_TESTBED", "/tmp/k8s-testbed-1.33")
    ap.add_argument("--kubelet", default=os.path.join(tb, "bin", "kubelet"))
    ap.add_argument("--wasmlet", default=os.path.join(REPO, "target", "release", "wasmlet"))
    ap.add_argument("--images", default=os.path.join(tb, "images", "conformance-images.oci.tar"))
    ap.add_argument("--agents", default="kubelet,wasmlet")
    ap.add_argument("--drivers", default="systemd,cgroupfs")
    ap.add_argument("--settle", type=int, default=45)
    ap.add_argument("--no-copy", action="store_true", help="the VM has the files already")
    ap.add_argument("--phases", action="store_true",
                    help="under the systemd driver also: CPU under contention, an agent restart, a pod removed")
    ap.add_argument("--deb", help="the package: also a real reboot with it (and the kubelet in its unit)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    boot()
    if not args.no_copy:
        copy_in(args)
    labels = []
    for driver in [d for d in args.drivers.split(",") if d]:
        for agent in args.agents.split(","):
            labels.append(run_one(agent, driver, args.out, args.settle,
                                  phases=args.phases and driver == "systemd"))
    if args.deb:
        if not args.no_copy:
            kit("cp.sh", args.deb, "%s:%s/wasmlet.deb" % (NODE, GUEST_DIR))
        for agent in args.agents.split(","):
            reboot(agent, args.out)
    report = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), args.out, *labels],
                            capture_output=True, text=True)
    sys.stdout.write(report.stdout)
    sys.stderr.write(report.stderr)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(report.stdout)


if __name__ == "__main__":
    main()
