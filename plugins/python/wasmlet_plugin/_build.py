"""Builds a Python plugin into a wasm32-wasip2 component with componentize-py.

    wasmlet-plugin-build WORLD DIR OUT.wasm        (installed with the package)
    python3 -m wasmlet_plugin._build WORLD DIR OUT.wasm

WORLD is admission-policy, probe-handler or pod-source; DIR holds the plugin's app.py
(and any modules it imports). This module runs on the build machine, never in a plugin.

What the build reads besides the source is held still, so that the same source and SDK
give the same bytes:

- the author's folder and the SDK are copied into a directory of the build's own, so the
  guest's bytecode cache is written there, not into the author's tree (a later build
  would load it instead of compiling: different bytes);
- an empty site-packages stands for the host's (componentize-py adds the host's own to
  the guest's path, so whatever pip installed there would be in the snapshot);
- random bytes, clocks and file times through deterministic.so (when a C compiler can
  build it), one tokio worker, the host's hash seed fixed;
- the inode numbers of the files the guest imports: the build runs in a mount namespace
  of its own (`unshare`), its files on a fresh tmpfs, which numbers them alike each time;
- that tmpfs's device number, which is whichever anonymous one is free when it is mounted
  (another build's tmpfs or a container's overlay moves it): deterministic.so makes it
  read as 0:0 in componentize-py's process (reproducible/stable_dev.c).
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WORLDS = ("admission-policy", "probe-handler", "pod-source")
COMPONENTIZE_PY = "0.25.1"

# The package's own folder; installed, the WIT and the reproducibility preload are data
# beside it (`_data/`), in the repository they are the checkout's.
HERE = Path(__file__).resolve().parent
DATA = HERE / "_data"
REPO = HERE.parent.parent.parent


def fail(message, code=2):
    print(f"wasmlet-plugin-build: {message}", file=sys.stderr)
    sys.exit(code)


def wit_dir():
    for candidate in (DATA / "wit", REPO / "wit"):
        if (candidate / "plugin.wit").is_file():
            return candidate
    fail(f"the WIT (plugin.wit) is neither in {DATA / 'wit'} nor in {REPO / 'wit'}")


def preload_script():
    for candidate in (DATA / "reproducible", REPO / "plugins" / "reproducible"):
        if (candidate / "preload.sh").is_file():
            return candidate / "preload.sh"
    return None


def componentize_py():
    """componentize-py beside this interpreter (a virtual environment), else on PATH."""
    beside = Path(sys.executable).parent / "componentize-py"
    if beside.is_file():
        return str(beside)
    found = shutil.which("componentize-py")
    if not found:
        fail(f"componentize-py not found: pip install componentize-py=={COMPONENTIZE_PY}")
    return found


def componentize_command():
    """How componentize-py is run, and the file name of the executable that runs it (where
    deterministic.so holds the device number still: a process that does not exec). pip's
    componentize-py is a script of this interpreter's package, which this interpreter runs
    itself, with no shell or `env` in front; anything else runs as it is."""
    found = componentize_py()
    with open(found, "rb") as head:
        script = head.read(2) == b"#!"
    if script and importlib.util.find_spec("componentize_py") is not None:
        return [sys.executable, found], os.path.basename(os.path.realpath(sys.executable))
    return [found], os.path.basename(os.path.realpath(found))


def deterministic_so():
    script = preload_script()
    if script is None:
        return ""
    run = subprocess.run(["sh", str(script)], stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        print("wasmlet-plugin-build: warning: building without deterministic.so", file=sys.stderr)
        return ""
    return run.stdout.strip()


def stage(source, work):
    """The author's folder and the guest's half of the SDK, copied under `work`."""
    app, sdk = work / "app", work / "sdk" / "wasmlet_plugin"
    shutil.copytree(source, app, ignore=shutil.ignore_patterns("__pycache__", "*.wasm", ".venv", "venv", ".git"))
    shutil.copytree(HERE, sdk, ignore=shutil.ignore_patterns("__pycache__", "_build.py", "_data"))
    (work / "venv" / "lib" / "python3" / "site-packages").mkdir(parents=True)
    return app, sdk.parent


# Set in the build's own mount namespace (see `private_files`).
IN_NAMESPACE = "WASMLET_PY_BUILD_NAMESPACE"


def unshare_args():
    """How this user makes a mount namespace of its own (root: a new one; others: in a
    user namespace of their own, where they are root), or None when the system refuses."""
    for args in (["unshare", "--mount"], ["unshare", "--map-root-user", "--mount"]):
        if shutil.which("unshare") and subprocess.run(
            args + ["true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode == 0:
            return args
    return None


def private_files(argv):
    """Runs this build again in a mount namespace of its own, where its files live on a
    fresh tmpfs: the guest reads the inode numbers of the files it imports (through the
    runtime's own system calls, which no preload reaches), and a new tmpfs numbers the
    same files alike on every build. Returns the build's exit code, or None when no
    namespace can be had (the build then runs as it is, not byte for byte the same)."""
    if os.environ.get(IN_NAMESPACE) == "1":
        return None
    args = unshare_args()
    if args is None:
        print("wasmlet-plugin-build: warning: no mount namespace (unshare): the component "
              "will not be the same bytes on every build", file=sys.stderr)
        return None
    env = dict(os.environ, **{IN_NAMESPACE: "1"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    cmd = args + ["--propagation", "private", sys.executable, "-m", "wasmlet_plugin._build"] + argv
    return subprocess.run(cmd, env=env).returncode


def build(world, source, out):
    with tempfile.TemporaryDirectory(prefix="wasmlet-py-") as tmp:
        work = Path(tmp)
        if os.environ.get(IN_NAMESPACE) == "1":
            subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700", "wasmlet-py", str(work)], check=True)
        (work / "tmp").mkdir()
        app, sdk = stage(source, work)
        program, executable = componentize_command()
        env = dict(os.environ)
        env.pop(IN_NAMESPACE, None)
        env.update(
            TMPDIR=str(work / "tmp"),
            VIRTUAL_ENV=str(work / "venv"),
            TOKIO_WORKER_THREADS="1",
            PYTHONHASHSEED="0",
            LD_PRELOAD=deterministic_so(),
            WASMLET_STABLE_DEV=str(work),
            WASMLET_STABLE_DEV_FOR=executable,
        )
        cmd = program + ["-d", str(wit_dir()), "-w", world, "componentize", "app",
                         "-p", str(app), "-p", str(sdk), "-o", str(out)]
        code = subprocess.run(cmd, env=env).returncode
        if os.environ.get(IN_NAMESPACE) == "1":
            subprocess.run(["umount", str(work)], check=False)
        return code


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        fail("usage: wasmlet-plugin-build admission-policy|probe-handler|pod-source DIR OUT.wasm")
    world, source, out = args[0], Path(args[1]), Path(args[2]).resolve()
    if world not in WORLDS:
        fail(f"unknown world {world} (admission-policy, probe-handler or pod-source)")
    if not (source / "app.py").is_file():
        fail(f"{source / 'app.py'}: no such file")
    code = private_files([world, str(source.resolve()), str(out)])
    sys.exit(build(world, source, out) if code is None else code)


if __name__ == "__main__":
    main()
