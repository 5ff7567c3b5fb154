#!/usr/bin/env python3
"""Build an OCI image-layout tarball from the host's static busybox.

    scripts/oci-image.py NAME OUT.tar [--cmd JSON] [--busybox PATH] [--add SRC=DEST ...]

NAME is the full image reference (e.g. localhost/busybox:latest); it is written as
the `io.containerd.image.name` annotation, which is what `ctr images import` reads.
The image has one uncompressed layer: /bin/busybox, a symlink per applet, /etc/passwd,
/etc/group and the usual empty directories, and each --add file (read from SRC on the
host, written at DEST in the image with its mode; a directory on the way is made). The output is byte-for-byte reproducible:
every timestamp is 0 and entries are sorted, so the image id is stable across builds.

No registry is reachable on the machines wasmlet is tested on, so the images the
tests and the examples use are built here, from the host's busybox-static.
"""

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "daemon:x:1:1:daemon:/usr/sbin:/bin/false\n"
    "www-data:x:33:33:www-data:/var/www:/bin/false\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
GROUP = "root:x:0:\ndaemon:x:1:\nwww-data:x:33:\nnogroup:x:65534:\n"
DIRS = {
    "bin": 0o755, "dev": 0o755, "etc": 0o755, "home": 0o755, "proc": 0o555,
    "root": 0o700, "sys": 0o555, "tmp": 0o1777, "usr": 0o755, "usr/bin": 0o755,
    "usr/sbin": 0o755, "sbin": 0o755, "var": 0o755, "var/run": 0o755, "var/www": 0o755,
}


def applets(busybox):
    out = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True)
    return sorted(a for a in out.stdout.split() if a and a != "busybox")


def entry(name, kind, mode, data=b"", link=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def added(files, dirs):
    """Entries for (SRC, DEST) host files, and the directories on their way not in `dirs`."""
    out, made = [], set(dirs)
    for src, dest in files:
        parts = dest.strip("/").split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in made:
                made.add(d)
                out.append(entry(d, tarfile.DIRTYPE, 0o755))
        with open(src, "rb") as f:
            mode = os.stat(src).st_mode & 0o777
            out.append(entry(dest.strip("/"), tarfile.REGTYPE, mode, f.read()))
    return out


def layer_tar(busybox, extra=()):
    entries = []
    for d, mode in DIRS.items():
        entries.append(entry(d, tarfile.DIRTYPE, mode))
    entries.extend(added(extra, DIRS))
    with open(busybox, "rb") as f:
        entries.append(entry("bin/busybox", tarfile.REGTYPE, 0o755, f.read()))
    for a in applets(busybox):
        entries.append(entry("bin/" + a, tarfile.SYMTYPE, 0o777, link="busybox"))
    entries.append(entry("etc/passwd", tarfile.REGTYPE, 0o644, PASSWD.encode()))
    entries.append(entry("etc/group", tarfile.REGTYPE, 0o644, GROUP.encode()))
    entries.sort(key=lambda e: e[0].name)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return buf.getvalue()


def blob(data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return digest, data


def build(name, cmd, busybox, extra=()):
    layer = layer_tar(busybox, extra)
    layer_digest, _ = blob(layer)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": [PATH_ENV], "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "wasmlet scripts/oci-image.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest, _ = blob(config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": len(layer),
        }],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest, _ = blob(manifest_bytes)
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True, separators=(",", ":")).encode(),
    }
    for digest, data in (blob(layer), blob(config_bytes), blob(manifest_bytes)):
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    return files, config_digest


def write_layout(files, out):
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info, _ = entry(d, tarfile.DIRTYPE, 0o755)
            tar.addfile(info)
        for path in sorted(files):
            info, data = entry(path, tarfile.REGTYPE, 0o644, files[path])
            tar.addfile(info, io.BytesIO(data))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", help="full image reference, e.g. localhost/busybox:latest")
    p.add_argument("out", help="where to write the OCI layout tarball")
    p.add_argument("--cmd", default='["sh"]', help="the image's Cmd as a JSON list")
    p.add_argument("--busybox", default="/bin/busybox", help="a statically linked busybox")
    p.add_argument("--add", action="append", default=[], metavar="SRC=DEST",
                   help="a host file to put in the image (repeatable)")
    args = p.parse_args()
    extra = []
    for a in args.add:
        src, sep, dest = a.partition("=")
        if not sep or not dest:
            sys.exit(f"oci-image.py: --add {a!r}: give SRC=DEST")
        extra.append((src, dest))
    try:
        cmd = json.loads(args.cmd)
        if not isinstance(cmd, list) or not all(isinstance(c, str) for c in cmd):
            raise ValueError("must be a JSON list of strings")
    except ValueError as e:
        sys.exit(f"oci-image.py: --cmd {args.cmd!r}: {e}")
    try:
        files, image_id = build(args.name, cmd, args.busybox, extra)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"oci-image.py: cannot read {e.filename or args.busybox}: {e}")
    write_layout(files, args.out)
    print(image_id)


if __name__ == "__main__":
    main()
