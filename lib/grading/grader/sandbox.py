"""Run one untrusted command in a sandbox: its own PID, mount, IPC, UTS and network namespaces, a read-only
view of the machine with the instructor's files hidden, one writable folder, an unprivileged user, and caps
on memory, processes, file size, output and wall-clock time.

Built on ``unshare`` (util-linux, present on Debian and on the GPU image, which has no bubblewrap) and a
small init (:func:`_init`, this file run as a script inside the new namespaces, before any untrusted code):

* PID 1 of the namespace is the init; it forks the command and exits when the command exits, so the kernel
  kills every process left in the namespace (daemons, sleepers, pipe holders). ``unshare --kill-child``
  ends the namespace too if the grader kills ``unshare`` (the hard wall-clock limit).
* The file system is a recursive read-only bind of ``/`` with empty read-only tmpfs over the folders the
  grader names (its checkout, the submissions, the report's folder, ``/tmp``, home folders, ``/run``), the
  paths it names bound back read-only (the student edition, Python), one folder bound read-write, and a
  private ``/tmp`` and ``/dev/shm``. The device nodes of ``/dev`` stay (a GPU stays usable).
* The command runs as ``nobody`` (when the grader is root) with ``no_new_privs``, so it cannot signal the
  grader, write a root-owned file or regain privileges; without root, ``unshare --user --map-root-user``.
* It has no network (an empty network namespace); the notebook's kernel talks over Unix sockets.

Where unshare cannot make these namespaces, :func:`probe` says why and the caller runs the command
unsandboxed (and says so in every row); the caps on time and output still hold.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

NOBODY = 65534
OUTPUT_CAP_BYTES = 64 * 1024      # of stdout and of stderr kept by the grader; the rest is read and dropped


@dataclass
class Limits:
    wall_s: float
    memory_bytes: int | None = 16 << 30   # address space per process; None on a GPU (CUDA reserves far more)
    processes: int = 4096                 # tasks of the sandbox's user (the simulator runs a thread per CUDA thread)
    file_bytes: int = 1 << 30             # largest file it may write
    tmp_bytes: int = 512 << 20            # its private /tmp


@dataclass
class Result:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    seconds: float


@dataclass
class Spec:
    """What the init builds: read by :func:`_init` as JSON from its command line."""
    argv: list[str]
    env: dict[str, str]
    new_root: str                        # an empty folder: the mount point of the sandbox's /
    workdir: str                         # read-write; the command's working directory
    hide: list[str] = field(default_factory=list)
    expose: list[str] = field(default_factory=list)
    limits: dict = field(default_factory=dict)
    drop_to: int | None = NOBODY


def _unshare_argv() -> list[str]:
    argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--ipc", "--uts", "--net",
            "--propagation", "private"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    return argv


def python_paths(exclude: Path) -> list[str]:
    """The folders this Python needs (its installation, its venv, its import path) outside `exclude`."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    paths = {os.path.realpath(p) for p in paths}
    keep = [p for p in paths if not (Path(p) == exclude or (exclude in Path(p).parents
                                                           and not p.startswith(os.path.realpath(sys.prefix))))]
    return sorted(p for p in keep if not any(p.startswith(q.rstrip("/") + "/") for q in keep if q != p))


_PROBE: dict = {}


def probe(scratch: Path) -> str | None:
    """None if the sandbox works on this machine, else the reason (tried once per process)."""
    if "reason" not in _PROBE:
        _PROBE["reason"] = _probe(scratch)
    return _PROBE["reason"]


def _probe(scratch: Path) -> str | None:
    if not sys.platform.startswith("linux"):
        return f"no sandbox on {sys.platform} (it needs Linux namespaces)"
    if shutil.which("unshare") is None:
        return "no sandbox: the `unshare` command (util-linux) is not installed"
    work = scratch / "probe-work"
    root = scratch / "probe-root"
    work.mkdir(parents=True, exist_ok=True)
    root.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        os.chown(work, NOBODY, NOBODY)
    result = run(["/bin/sh", "-c", "echo ok; touch /probe 2>/dev/null && echo writable"], workdir=work,
                 new_root=root, hide=[str(scratch)], expose=[], env={"PATH": "/usr/bin:/bin"},
                 limits=Limits(wall_s=20, memory_bytes=None), sandboxed=True)
    if result.stdout.strip() != b"ok":
        detail = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
        return "no sandbox: unshare failed here (" + (detail[-1] if detail else f"exit {result.returncode}") + ")"
    return None


def run(argv: list[str], *, workdir: Path, new_root: Path, hide: list[str], expose: list[str],
        env: dict[str, str], limits: Limits, sandboxed: bool) -> Result:
    """Run `argv` (sandboxed, or plainly where the sandbox is missing) under `limits`; never raises for
    anything the command does, and returns within about `limits.wall_s` + 5 s whatever it does."""
    if sandboxed:
        spec = Spec(argv=argv, env=env, new_root=str(new_root), workdir=str(workdir), hide=hide, expose=expose,
                    limits=limits.__dict__, drop_to=NOBODY if os.geteuid() == 0 else None)
        command = _unshare_argv() + [sys.executable, "-I", "-S", str(Path(__file__).resolve()),
                                     json.dumps(spec.__dict__)]
        proc_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        popen_extra = {}
    else:
        command, proc_env = argv, env
        popen_extra = {"preexec_fn": lambda: _set_limits(limits.__dict__)}
    t0 = time.monotonic()
    proc = subprocess.Popen(command, cwd=workdir, env=proc_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, **popen_extra)
    streams = [_CappedReader(proc.stdout), _CappedReader(proc.stderr)]
    timed_out = False
    try:
        proc.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill_group(proc)
    for s in streams:  # a process that escaped (only possible unsandboxed) may hold a pipe: do not wait for it
        s.thread.join(timeout=5.0)
    return Result(proc.returncode, streams[0].data(), streams[1].data(), timed_out, time.monotonic() - t0)


def _kill_group(proc: subprocess.Popen):
    """End the command and everything in its session; in the sandbox, killing unshare ends the namespace."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


class _CappedReader:
    """Reads a pipe to its end on a thread of its own, keeping the first OUTPUT_CAP_BYTES."""

    def __init__(self, pipe):
        self.pipe, self.kept, self.dropped = pipe, bytearray(), 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        with self.pipe:
            while chunk := self.pipe.read1(1 << 16):
                room = OUTPUT_CAP_BYTES - len(self.kept)
                self.kept += chunk[:max(room, 0)]
                self.dropped += max(len(chunk) - max(room, 0), 0)

    def data(self) -> bytes:
        return bytes(self.kept) + (f"\n[{self.dropped} more bytes dropped]".encode() if self.dropped else b"")


# --- the init: runs inside the namespaces (PID 1), as root there, before any untrusted code -----------------
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 1 << 14, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
_KEEP_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
               "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}


def _mount(source, target, fstype, flags, data=None):
    libc = ctypes.CDLL(None, use_errno=True)
    enc = (lambda s: None if s is None else str(s).encode())
    if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _mounts_under(prefix: str) -> list[tuple[str, int]]:
    """Mount points at or below `prefix`, in mount order, with the flags a read-only remount must keep."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix.rstrip("/") + "/"):
                flags = sum(_KEEP_FLAGS.get(o, 0) for o in fields[5].split(","))
                found.append((point, flags))
    return found


def _set_limits(limits: dict):
    if limits.get("memory_bytes"):
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _build_root(spec: dict):
    new = spec["new_root"].rstrip("/")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("/", new, None, MS_BIND | MS_REC)
    for point, flags in _mounts_under(new):
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError:
            if point == new:
                raise
    _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    private = ["/tmp", "/dev/shm"]  # writable, its own, capped
    hide = private + [h for h in spec["hide"] if h not in private and h != "/"]
    hidden = [h for h in hide if os.path.isdir(h) and not any(h.startswith(o.rstrip("/") + "/") for o in hide)]
    for h in hidden:
        options = f"mode=1777,size={spec['limits']['tmp_bytes']}" if h in private else "mode=755,size=16m"
        _mount("tmpfs", new + h, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for path in spec["expose"]:
        os.makedirs(new + path, exist_ok=True)
        _mount(path, new + path, None, MS_BIND | MS_REC)
        _mount(None, new + path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    os.makedirs(new + spec["workdir"], exist_ok=True)
    _mount(spec["workdir"], new + spec["workdir"], None, MS_BIND)
    opened = list(spec["expose"]) + [spec["workdir"]]
    for h in hidden:  # an exposed folder above a hidden one (a parent on sys.path) must not reopen it
        if h not in private and any(h.startswith(o.rstrip("/") + "/") for o in opened) and os.path.isdir(new + h):
            _mount("tmpfs", new + h, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16m")
    for h in hidden:  # mount points made: the hiding tmpfs become read-only
        if h not in private:
            _mount(None, new + h, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chroot(new)
    os.chdir(spec["workdir"])


def _drop_privileges(uid: int | None):
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    PR_SET_NO_NEW_PRIVS = 38
    ctypes.CDLL(None).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def _init(spec: dict) -> int:
    try:
        _build_root(spec)
    except OSError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 125
    child = os.fork()
    if child == 0:
        try:
            _drop_privileges(spec["drop_to"])
            _set_limits(spec["limits"])
            os.execve(spec["argv"][0] if os.path.isabs(spec["argv"][0]) else shutil.which(
                spec["argv"][0], path=spec["env"].get("PATH")), spec["argv"], spec["env"])
        except BaseException as exc:  # noqa: BLE001 - the child must never return into the init's code
            print(f"sandbox: could not start {spec['argv'][0]}: {exc}", file=sys.stderr)
        os._exit(126)
    while True:  # PID 1 reaps orphans until the command itself ends
        pid, status = os.wait()
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code  # the shell's convention: 128 + the signal


if __name__ == "__main__":
    sys.exit(_init(json.loads(sys.argv[1])))
