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
* The one writable folder is a tmpfs of its own (``Limits.work_bytes``, ``Limits.inodes``), filled with a
  copy of the grader's folder: what the command writes never reaches the host's disk and vanishes with
  the namespace, and no file tree it builds there is the grader's to clean up.
* The command runs as a user id of its own (when the grader is root: :func:`fresh_uid`, a number no account
  and no other sandbox of the run has) with ``no_new_privs``, so it cannot signal the grader, write a
  root-owned file or regain privileges, its task limit is its own, and the kernel keyring of that user is
  its own (cleared when it ends: :func:`clear_keys`); without root, ``unshare --user --map-root-user``
  (whose user namespace has keyrings of its own). Either way it joins a new, empty session keyring.
* It has no network (an empty network namespace); the notebook's kernel talks over Unix sockets.
* Memory: each process has at most ``Limits.memory_bytes`` of address space, and :func:`run` adds up the
  resident memory of every process of the sandbox four times a second and ends the sandbox when the total
  passes ``Limits.total_memory_bytes`` (``Result.memory_exceeded``).

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

NOBODY = 65534                    # the probe's user
OUTPUT_CAP_BYTES = 64 * 1024      # of stdout and of stderr kept by the grader; the rest is read and dropped
UID_RANGE = (1 << 30, 1 << 31)    # sandbox users are drawn from here: far above any account's id
MEMORY_POLL_S = 0.25


@dataclass
class Limits:
    wall_s: float
    memory_bytes: int | None = 16 << 30   # address space per process; None on a GPU (CUDA reserves far more)
    total_memory_bytes: int | None = 8 << 30   # resident memory of all its processes together (watched)
    processes: int = 4096                 # tasks of the sandbox's user (the simulator runs a thread per CUDA thread)
    file_bytes: int = 1 << 30             # largest file it may write
    tmp_bytes: int = 512 << 20            # its private /tmp and /dev/shm, each
    work_bytes: int = 512 << 20           # its writable folder (a tmpfs)
    inodes: int = 100_000                 # files and folders in each of those file systems


@dataclass
class Result:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    seconds: float
    memory_exceeded: bool = False         # ended by the grader: its processes held more than the total allowed
    peak_memory_bytes: int = 0            # the largest total resident memory seen


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
    private_work: bool = True            # the writable folder is a tmpfs holding a copy of `workdir`


def _unshare_argv() -> list[str]:
    argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--ipc", "--uts", "--net",
            "--propagation", "private"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    return argv


def python_paths(exclude: Path) -> list[str]:
    """The folders this Python needs (its installation, its venv, its import path) outside `exclude`. The
    working directory is never one of them (``python -m`` puts it first on sys.path: binding it into the
    sandbox would reopen whatever lies below it, a submissions folder included)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    cwd = os.path.realpath(os.getcwd())
    paths.update(p for p in sys.path if p and os.path.isdir(p) and os.path.realpath(p) != cwd)
    paths = {os.path.realpath(p) for p in paths}
    keep = [p for p in paths if not (Path(p) == exclude or (exclude in Path(p).parents
                                                           and not p.startswith(os.path.realpath(sys.prefix))))]
    return sorted(p for p in keep if not any(p.startswith(q.rstrip("/") + "/") for q in keep if q != p))


def python_executable() -> str:
    """This Python as the sandbox can reach it: the interpreter under the real path of its prefix (a venv
    reached through a symbolic link inside a hidden folder, as a worktree's .venv is, stays a venv)."""
    prefix = os.path.realpath(sys.prefix)
    for name in (os.path.basename(sys.executable), "python3", "python"):
        candidate = os.path.join(prefix, "bin", name)
        if os.path.exists(candidate):
            return candidate
    return sys.executable


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
                 limits=Limits(wall_s=20, memory_bytes=None), sandboxed=True, uid=NOBODY)
    if result.stdout.strip() != b"ok":
        detail = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
        return "no sandbox: unshare failed here (" + (detail[-1] if detail else f"exit {result.returncode}") + ")"
    return None


_used_uids: set[int] = set()
_uid_lock = threading.Lock()


def fresh_uid() -> int:
    """A user id for one sandbox: in UID_RANGE, with no account, not used by another sandbox of this process."""
    import pwd
    import secrets

    with _uid_lock:
        while True:
            uid = UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0] - 1)
            try:
                pwd.getpwuid(uid)
                continue
            except KeyError:
                pass
            if uid not in _used_uids:
                _used_uids.add(uid)
                return uid


# keyctl(2) on the architectures the book runs on (x86_64, aarch64)
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR = 1, 7
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5


def keyctl(*args) -> int:
    """The raw keyctl system call (no libkeyutils needed); -1 where it is unknown or fails."""
    number = _SYS_KEYCTL.get(os.uname().machine)
    if number is None:
        return -1
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])


def clear_keys(uid: int):
    """Empty the user and user-session keyrings of `uid` (a key a sandbox left there would outlive it and be
    readable by the next process of that user). A forked child takes the user id and clears them (no exec:
    the interpreter itself may sit in a folder that user cannot read). Needs root; never raises."""
    number = _SYS_KEYCTL.get(os.uname().machine)
    if os.geteuid() != 0 or uid == 0 or number is None:
        return
    syscall = ctypes.CDLL(None).syscall   # resolved before the fork
    args = [(ctypes.c_long(number), ctypes.c_long(KEYCTL_CLEAR), ctypes.c_long(ring))
            for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING)]
    try:
        pid = os.fork()
    except OSError:
        return
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for a in args:
                syscall(*a)
        finally:
            os._exit(0)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def run(argv: list[str], *, workdir: Path, new_root: Path, hide: list[str], expose: list[str],
        env: dict[str, str], limits: Limits, sandboxed: bool, uid: int | None = None) -> Result:
    """Run `argv` (sandboxed, or plainly where the sandbox is missing) under `limits`; never raises for
    anything the command does, and returns within about `limits.wall_s` + 5 s whatever it does. As root, the
    command runs as `uid` (default: a fresh one, :func:`fresh_uid`), whose keyrings are cleared afterwards."""
    if sandboxed:
        if os.geteuid() == 0 and uid is None:
            uid = fresh_uid()
        spec = Spec(argv=argv, env=env, new_root=str(new_root), workdir=str(workdir), hide=hide, expose=expose,
                    limits=limits.__dict__, drop_to=uid if os.geteuid() == 0 else None)
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
    watch = _MemoryWatch(proc, limits.total_memory_bytes)
    timed_out = False
    try:
        proc.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    watch.stop()
    _kill_group(proc)
    for s in streams:  # a process that escaped (only possible unsandboxed) may hold a pipe: do not wait for it
        s.thread.join(timeout=5.0)
    if sandboxed and os.geteuid() == 0 and uid is not None:
        clear_keys(uid)
    return Result(proc.returncode, streams[0].data(), streams[1].data(), timed_out and not watch.exceeded,
                  time.monotonic() - t0, watch.exceeded, watch.peak)


def _descendants(root: int) -> list[int]:
    """`root` and every process below it (read from /proc: the sandbox's processes all descend from unshare,
    and an orphan is adopted by the namespace's init, which does too)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return [root]
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _resident_bytes(pid: int) -> int:
    """Private and shared-memory pages the process holds (RssAnon + RssShmem): memory only it can free."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read()
    except OSError:
        return 0
    total = 0
    for line in text.splitlines():
        if line.startswith((b"RssAnon:", b"RssShmem:")):
            total += int(line.split()[1]) * 1024
    return total


class _MemoryWatch:
    """Adds up the resident memory of a process tree every MEMORY_POLL_S and kills its session past a cap."""

    def __init__(self, proc: subprocess.Popen, cap: int | None):
        self.proc, self.cap, self.exceeded, self.peak = proc, cap, False, 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        if cap and sys.platform.startswith("linux"):
            self.thread.start()

    def _watch(self):
        while not self._stop.wait(MEMORY_POLL_S):
            try:
                total = sum(_resident_bytes(p) for p in _descendants(self.proc.pid))
            except Exception:  # noqa: BLE001 - a watcher that fails must not take the grader with it
                continue
            self.peak = max(self.peak, total)
            if total > self.cap:
                self.exceeded = True
                _kill_group(self.proc, wait=False)
                return

    def stop(self):
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5.0)


def _kill_group(proc: subprocess.Popen, wait: bool = True):
    """End the command and everything in its session; in the sandbox, killing unshare ends the namespace."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if wait:
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
    else:  # the grader's own (soft) address-space limit is not the command's
        resource.setrlimit(resource.RLIMIT_AS, (resource.getrlimit(resource.RLIMIT_AS)[1],) * 2)
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
        options = (f"mode=1777,size={spec['limits']['tmp_bytes']},nr_inodes={spec['limits']['inodes']}"
                   if h in private else "mode=755,size=16m")
        _mount("tmpfs", new + h, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for path in spec["expose"]:
        os.makedirs(new + path, exist_ok=True)
        _mount(path, new + path, None, MS_BIND | MS_REC)
        _mount(None, new + path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    os.makedirs(new + spec["workdir"], exist_ok=True)
    if spec.get("private_work", True):
        limits = spec["limits"]
        _mount("tmpfs", new + spec["workdir"], "tmpfs", MS_NOSUID | MS_NODEV,
               f"mode=755,size={limits['work_bytes']},nr_inodes={limits['inodes']}")
        _copy_in(spec["workdir"], new + spec["workdir"], spec["drop_to"])
    else:
        _mount(spec["workdir"], new + spec["workdir"], None, MS_BIND)
    opened = list(spec["expose"]) + [spec["workdir"]]
    # An exposed folder above a hidden one (a parent on sys.path, the working directory) must not reopen it:
    # every hidden folder below an exposed one is hidden again, whether or not a hidden folder above it was
    # the one that first covered it (hiding wins over exposing).
    rehidden = []
    for h in hide:
        if (h not in private and os.path.isdir(h) and h not in rehidden
                and any(h == o.rstrip("/") or h.startswith(o.rstrip("/") + "/") for o in opened)
                and os.path.isdir(new + h)):
            _mount("tmpfs", new + h, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16m")
            rehidden.append(h)
    for h in hidden + rehidden:  # mount points made: the hiding tmpfs become read-only
        if h not in private:
            _mount(None, new + h, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chroot(new)
    os.chdir(spec["workdir"])


def _copy_in(source: str, target: str, uid: int | None):
    """Copy the grader's folder `source` (a notebook, an empty home) into the sandbox's own tmpfs `target`,
    owned by the sandbox's user. Runs in the init, before any untrusted code."""
    for top, dirs, files in os.walk(source):
        rel = os.path.relpath(top, source)
        dest = target if rel == "." else os.path.join(target, rel)
        os.makedirs(dest, exist_ok=True)
        for name in files:
            shutil.copyfile(os.path.join(top, name), os.path.join(dest, name), follow_symlinks=False)
        for name in dirs:
            os.makedirs(os.path.join(dest, name), exist_ok=True)
        if uid is not None:
            for name in [*dirs, *files]:
                os.lchown(os.path.join(dest, name), uid, uid)
    if uid is not None:
        os.chown(target, uid, uid)


def _drop_privileges(uid: int | None):
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    # A new, empty session keyring: the one inherited from the grader's session must not be possessed here.
    keyctl(KEYCTL_JOIN_SESSION_KEYRING, None)
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
