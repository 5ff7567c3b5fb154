#!/usr/bin/env python3
"""Give the k8s-testbed kits' busybox images an `nmeter`, for the e2e_node container-lifecycle
and sidecar specs.

    scripts/testbed/add-nmeter.py IN.oci.tar OUT.oci.tar --nmeter BIN

Why: the kits build busybox:1.36.1-1 from Debian's busybox-static, which has no `nmeter`
applet. The e2e_node specs of `Containers Lifecycle` and `[Feature:SidecarContainers]` log
each step with `date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z`; without nmeter the time has no
clock part (`2026-11-28TZ`), the specs cannot order the steps, and they fail for the kubelet
and wasmlet alike. This is the project's workaround, not the kit's: the kit stays as it is.

What it does: every image in IN whose layers begin with the busybox image's first layer
(the busybox applets) gets one more layer holding BIN at /bin/nmeter (build it from
scripts/testbed/nmeter.c: `gcc -Os -static`). The configs, manifests and the index are
rewritten with their new digests; everything else is copied as it is. Output is byte for
byte the same for the same inputs (fixed mtimes, sorted blobs).

Use:  IMAGE_TARS=OUT.oci.tar ../shared/k8s-testbed-1.33/node-e2e.sh …   (the same for both agents)
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

BUSYBOX = "registry.k8s.io/e2e-test-images/busybox:"


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def read_layout(path):
    """{member name: bytes} of an OCI layout tar."""
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}


def nmeter_layer(binary):
    """(diff_id, gzip blob) of a layer holding bin/nmeter."""
    with open(binary, "rb") as f:
        data = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, mode, size in [("bin", tarfile.DIRTYPE, 0o755, 0),
                                       ("bin/nmeter", tarfile.REGTYPE, 0o755, len(data))]:
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.size, ti.mtime, ti.uname, ti.gname = kind, mode, size, 0, "", ""
            tf.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    raw = buf.getvalue()
    return sha(raw), gzip.compress(raw, compresslevel=6, mtime=0)


class Layout:
    def __init__(self, files):
        self.files = files
        self.index = json.loads(files["index.json"])

    def blob(self, digest):
        return self.files["blobs/sha256/" + digest.split(":", 1)[1]]

    def put(self, data):
        self.files["blobs/sha256/" + sha(data).split(":", 1)[1]] = data
        return sha(data)

    def image(self, entry):
        manifest = json.loads(self.blob(entry["digest"]))
        return manifest, json.loads(self.blob(manifest["config"]["digest"]))

    def busybox_base(self):
        """The diff_id of the busybox image's first layer (its applets)."""
        for entry in self.index["manifests"]:
            if entry.get("annotations", {}).get("io.containerd.image.name", "").startswith(BUSYBOX):
                return self.image(entry)[1]["rootfs"]["diff_ids"][0]
        sys.exit("add-nmeter: no %s* image in the input" % BUSYBOX)

    def add_layer(self, entry, diff_id, gz):
        """The image of `entry` with one more layer; returns its new index entry."""
        manifest, config = self.image(entry)
        config["rootfs"]["diff_ids"].append(diff_id)
        config.setdefault("history", []).append(
            {"created": "1970-01-01T00:00:00Z", "created_by": "wasmlet scripts/testbed/add-nmeter.py"})
        body = canonical(config)
        manifest["config"].update(digest=self.put(body), size=len(body))
        manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                   "digest": self.put(gz), "size": len(gz)})
        body = canonical(manifest)
        return dict(entry, digest=self.put(body), size=len(body))


def write_layout(path, layout):
    used = {"index.json": json.dumps(layout.index, indent=1).encode(),
            "oci-layout": layout.files["oci-layout"]}
    used.update({k: v for k, v in layout.files.items() if k.startswith("blobs/")})
    with tarfile.open(path + ".tmp", "w", format=tarfile.PAX_FORMAT) as tf:
        for name in ["blobs", "blobs/sha256"]:
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime, ti.uname, ti.gname = tarfile.DIRTYPE, 0o755, 0, "root", "root"
            tf.addfile(ti)
        for name in ["oci-layout", "index.json"] + sorted(k for k in used if k.startswith("blobs/")):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime, ti.uname, ti.gname = len(used[name]), 0o644, 0, "root", "root"
            tf.addfile(ti, io.BytesIO(used[name]))
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--nmeter", required=True, help="a static nmeter binary (scripts/testbed/nmeter.c)")
    a = ap.parse_args()
    layout = Layout(read_layout(a.input))
    base = layout.busybox_base()
    diff_id, gz = nmeter_layer(a.nmeter)
    changed = []
    for i, entry in enumerate(layout.index["manifests"]):
        if layout.image(entry)[1]["rootfs"]["diff_ids"][:1] == [base]:
            layout.index["manifests"][i] = layout.add_layer(entry, diff_id, gz)
            changed.append(entry["annotations"]["io.containerd.image.name"])
    write_layout(a.output, layout)
    print("add-nmeter: /bin/nmeter added to %d images: %s" % (len(changed), ", ".join(changed)))


if __name__ == "__main__":
    main()
