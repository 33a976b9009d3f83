"""Seccomp user notification: every system call that would change a file, made by any process of the
run (the script's native code and the programs it starts included), waits for the keeper's answer.

Landlock refuses such a call but does not tell anyone: the process only sees EACCES, and a script that
ignores it would pass. Here the keeper (keeper.py, the run's parent, outside the sandbox) reads the
path the call names, and when it lies in the user's folder it answers EACCES and records it, so that
the verdict can say the script tried to write outside its copy. It also refuses what Landlock lets
through there: chmod, chown, utime and extended attributes.

The filter lets everything else through in the kernel: opens without a write flag (imports, reads) never
reach the keeper. The check reads the path before the kernel does, so a second thread that rewrites
it in between could slip past the check; Landlock, where present, is what holds.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import platform
import struct
import sys
from dataclasses import dataclass, field

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# Per architecture: the audit arch, seccomp's own number, and the calls watched.
ARCHES = {
    "x86_64": (0xC000003E, 317, {
        "open": 2, "creat": 85, "openat": 257, "openat2": 437, "truncate": 76, "rename": 82, "mkdir": 83,
        "rmdir": 84, "link": 86, "unlink": 87, "symlink": 88, "chmod": 90, "fchmod": 91, "chown": 92,
        "fchown": 93, "lchown": 94, "utime": 132, "mknod": 133, "setxattr": 188, "lsetxattr": 189,
        "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "utimes": 235,
        "mkdirat": 258, "mknodat": 259, "fchownat": 260, "futimesat": 261, "unlinkat": 263, "renameat": 264,
        "linkat": 265, "symlinkat": 266, "fchmodat": 268, "utimensat": 280, "renameat2": 316, "fchmodat2": 452}),
    "aarch64": (0xC00000B7, 277, {
        "openat": 56, "openat2": 437, "truncate": 45, "mkdirat": 34, "mknodat": 33, "unlinkat": 35,
        "symlinkat": 36, "linkat": 37, "renameat": 38, "renameat2": 276, "fchmod": 52, "fchmodat": 53,
        "fchownat": 54, "fchown": 55, "utimensat": 88, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7,
        "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16, "fchmodat2": 452}),
}
OPEN_FLAGS_ARG = {"open": 1, "openat": 2}  # filtered in the kernel: only opens with a write flag are sent

# What each call changes: ("at", dirfd arg or None, path arg, follows the last link) or ("fd", fd arg).
# A "follow" target is the file the path leads to; otherwise the entry itself (unlink, rename, mkdir).
ENTRY, FOLLOW = False, True
TARGETS: dict = {
    "open": [("at", None, 0, FOLLOW)], "creat": [("at", None, 0, FOLLOW)], "openat": [("at", 0, 1, FOLLOW)],
    "openat2": [("at", 0, 1, FOLLOW)], "truncate": [("at", None, 0, FOLLOW)],
    "rename": [("at", None, 0, ENTRY), ("at", None, 1, ENTRY)],
    "renameat": [("at", 0, 1, ENTRY), ("at", 2, 3, ENTRY)], "renameat2": [("at", 0, 1, ENTRY), ("at", 2, 3, ENTRY)],
    "mkdir": [("at", None, 0, ENTRY)], "mkdirat": [("at", 0, 1, ENTRY)], "rmdir": [("at", None, 0, ENTRY)],
    "unlink": [("at", None, 0, ENTRY)], "unlinkat": [("at", 0, 1, ENTRY)],
    "link": [("at", None, 0, ENTRY), ("at", None, 1, ENTRY)], "linkat": [("at", 0, 1, ENTRY), ("at", 2, 3, ENTRY)],
    "symlink": [("at", None, 1, ENTRY)], "symlinkat": [("at", 1, 2, ENTRY)],
    "mknod": [("at", None, 0, ENTRY)], "mknodat": [("at", 0, 1, ENTRY)],
    "chmod": [("at", None, 0, FOLLOW)], "fchmodat": [("at", 0, 1, FOLLOW)], "fchmodat2": [("at", 0, 1, FOLLOW)],
    "chown": [("at", None, 0, FOLLOW)], "lchown": [("at", None, 0, ENTRY)], "fchownat": [("at", 0, 1, FOLLOW)],
    "utime": [("at", None, 0, FOLLOW)], "utimes": [("at", None, 0, FOLLOW)], "futimesat": [("at", 0, 1, FOLLOW)],
    "utimensat": [("at", 0, 1, FOLLOW)],
    "setxattr": [("at", None, 0, FOLLOW)], "lsetxattr": [("at", None, 0, ENTRY)],
    "removexattr": [("at", None, 0, FOLLOW)], "lremovexattr": [("at", None, 0, ENTRY)],
    "fchmod": [("fd", 0)], "fchown": [("fd", 0)], "fsetxattr": [("fd", 0)], "fremovexattr": [("fd", 0)],
}
METADATA = {"chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchown", "fchownat", "utime", "utimes",
            "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
            "fremovexattr"}  # Landlock lets these through

# linux/seccomp.h and linux/filter.h
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 1 << 3
RET_ALLOW, RET_USER_NOTIF = 0x7FFF0000, 0x7FC00000
LD_W_ABS, JEQ_K, JSET_K, RET_K = 0x20, 0x15, 0x45, 0x06
IOCTL_RECV, IOCTL_SEND, IOCTL_ID_VALID = 0xC0502100, 0xC0182101, 0x40082102
FLAG_CONTINUE = 1
NOTIF = struct.Struct("<QIIiIQ6Q")  # struct seccomp_notif: id, pid, flags, then seccomp_data
RESP = struct.Struct("<QqiI")  # struct seccomp_notif_resp: id, val, error, flags
PR_SET_NO_NEW_PRIVS = 38
MAX_RECORDS = 50
PATH_MAX = 4096


class Unavailable(OSError):
    """No watch here (another architecture, an old kernel, seccomp refused)."""


def _arch():
    if not sys.platform.startswith("linux"):
        raise Unavailable(f"seccomp is Linux only (this is {sys.platform})")
    arch = ARCHES.get(platform.machine())
    if arch is None:
        raise Unavailable(f"no write watch on {platform.machine()}")
    return arch


def program() -> bytes:
    """The BPF filter: notify the watched calls (opens only with a write flag), allow the rest."""
    audit_arch, _, numbers = _arch()
    code: list = []  # (op, jt, jf, k); jt/jf may be the labels "allow" / "notify"

    code += [(LD_W_ABS, 0, 0, 4), (JEQ_K, 0, "allow", audit_arch), (LD_W_ABS, 0, 0, 0)]
    for name, nr in sorted(numbers.items()):
        if name not in OPEN_FLAGS_ARG:
            code.append((JEQ_K, "notify", 0, nr))
    for name, arg in OPEN_FLAGS_ARG.items():
        if name in numbers:  # reload the number: the flags load below replaced it
            code += [(LD_W_ABS, 0, 0, 0), (JEQ_K, 0, 2, numbers[name]),
                     (LD_W_ABS, 0, 0, 16 + 8 * arg), (JSET_K, "notify", "allow", WRITE_FLAGS)]
    allow_at, notify_at = len(code), len(code) + 1
    code += [(RET_K, 0, 0, RET_ALLOW), (RET_K, 0, 0, RET_USER_NOTIF)]

    def jump(i, target):
        if target == "allow":
            return allow_at - i - 1
        if target == "notify":
            return notify_at - i - 1
        return target

    return b"".join(struct.pack("<HBBI", op, jump(i, jt), jump(i, jf), k) for i, (op, jt, jf, k) in enumerate(code))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> int:
    """Filter this process and its future children; returns the listener fd for the keeper. Call it
    while the process has one thread: the filter is not given to threads that already run."""
    _, sys_seccomp, _ = _arch()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        raise Unavailable(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    code = program()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.addressof(buf))
    fd = libc.syscall(ctypes.c_long(sys_seccomp), ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
                      ctypes.c_uint(SECCOMP_FILTER_FLAG_NEW_LISTENER), ctypes.byref(prog))
    if fd < 0:
        raise Unavailable(f"seccomp user notification: {os.strerror(ctypes.get_errno())}")
    return int(fd)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _bytecode_cache(path: str) -> bool:
    """Python caching bytecode next to a module of the user's folder: a write the interpreter tries
    and drops quietly when refused; not the script's doing."""
    parent, name = os.path.split(path)
    return name == "__pycache__" or (os.path.basename(parent) == "__pycache__" and ".pyc" in name)


@dataclass
class Watch:
    """The keeper's side: answers each notification, records the refusals."""

    orig_root: str  # the user's folder (real path)
    private: str  # the run's own folder, which may lie inside it
    writable: list  # where Landlock lets the run write (real paths)
    landlock: bool = False  # whether Landlock holds in the run (then other writes are refused too)
    record_to: str | None = None  # a file: one JSON line per refusal
    names: dict = field(default_factory=dict)
    records: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.names = {nr: name for name, nr in _arch()[2].items()}

    # --- reading the call ------------------------------------------------------------------------
    @staticmethod
    def _string(pid: int, addr: int) -> str | None:
        if not addr:
            return None
        out = b""
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            while len(out) < PATH_MAX:
                step = 256 - (addr + len(out)) % 256  # never across a page boundary in one read
                chunk = os.pread(fd, step, addr + len(out))
                if not chunk:
                    break
                end = chunk.find(b"\0")
                if end >= 0:
                    return os.fsdecode(out + chunk[:end])
                out += chunk
        except OSError:
            return None
        finally:
            os.close(fd)
        return os.fsdecode(out) if out else None

    @staticmethod
    def _flags_of_how(pid: int, addr: int) -> int:
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
            try:
                return struct.unpack("<Q", os.pread(fd, 8, addr))[0]
            finally:
                os.close(fd)
        except (OSError, struct.error):
            return WRITE_FLAGS  # unreadable: look at the path anyway

    @staticmethod
    def _fd_path(pid: int, fd: int) -> str | None:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            return None
        return target if target.startswith("/") and not target.endswith(" (deleted)") else None

    def _resolve(self, pid: int, dirfd: int | None, path: str | None, follow: bool) -> str | None:
        if path is None or path == "":
            return self._fd_path(pid, dirfd) if dirfd is not None and dirfd != AT_FDCWD else None
        for own in ("/proc/self", "/proc/thread-self"):  # the caller's, not the keeper's
            if path == own or path.startswith(own + "/"):
                path = f"/proc/{pid}" + path[len(own):]
        if not path.startswith("/"):
            if dirfd is None or dirfd == AT_FDCWD:
                try:
                    base = os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    return None
            else:
                found = self._fd_path(pid, dirfd)
                if found is None:
                    return None
                base = found
            path = os.path.join(base, path)
        path = os.path.normpath(path)
        if follow:
            return os.path.realpath(path)
        parent, name = os.path.split(path)
        return os.path.join(os.path.realpath(parent), name)

    def targets(self, pid: int, name: str, args: tuple) -> list:
        """The real paths the call would change."""
        follow_flags = True
        if name in ("open", "openat", "openat2"):
            flags = self._flags_of_how(pid, args[2]) if name == "openat2" else args[OPEN_FLAGS_ARG[name]]
            if not flags & WRITE_FLAGS:
                return []
            follow_flags = not (flags & os.O_NOFOLLOW or flags & (os.O_CREAT | os.O_EXCL) == os.O_CREAT | os.O_EXCL)
        elif name in ("fchownat", "utimensat", "fchmodat2"):
            flags = args[4 if name == "fchownat" else 3]
            follow_flags = not flags & AT_SYMLINK_NOFOLLOW
        out = []
        for target in TARGETS[name]:
            if target[0] == "fd":
                out.append(self._fd_path(pid, ctypes.c_int32(args[target[1]]).value))
                continue
            _, dirfd_arg, path_arg, follow = target
            dirfd = None if dirfd_arg is None else ctypes.c_int32(args[dirfd_arg]).value
            path = self._string(pid, args[path_arg])
            out.append(self._resolve(pid, dirfd, path, follow and follow_flags))
        return [p for p in out if p]

    # --- deciding ----------------------------------------------------------------------------------
    def where(self, real: str) -> str:
        if _inside(real, self.orig_root) and not _inside(real, self.private):
            return "original"
        if any(_inside(real, root) for root in self.writable):
            return "allowed"
        return "elsewhere"

    def decide(self, pid: int, nr: int, args: tuple) -> int:
        """0 to let the call go on, or the errno it fails with."""
        name = self.names.get(nr)
        if name is None:
            return 0
        refused = 0
        for real in self.targets(pid, name, args):
            place = self.where(real)
            if place == "original":
                refused = errno.EACCES
                if not _bytecode_cache(real):
                    self._record(real, name, "original", pid)
            elif place == "elsewhere" and self.landlock and name not in METADATA and not _bytecode_cache(real):
                self._record(real, name, "elsewhere", pid)  # Landlock refuses it right after
        return refused

    def _record(self, path: str, call: str, place: str, pid: int) -> None:
        entry = {"path": path, "call": call, "place": place, "by": "write watch (seccomp)", "pid": pid}
        if len(self.records) >= MAX_RECORDS or entry in self.records:
            return
        self.records.append(entry)
        if self.record_to:
            try:
                with open(self.record_to, "a") as f:
                    f.write(json.dumps(entry) + "\n")
            except OSError:
                pass

    # --- the conversation with the kernel ----------------------------------------------------------
    def serve_one(self, listener: int) -> None:
        """Answer one pending notification (call when the listener is readable)."""
        buf = bytearray(NOTIF.size)
        try:
            fcntl.ioctl(listener, IOCTL_RECV, buf, True)
        except OSError:
            return  # the caller died, or a signal interrupted it
        nid, pid, _flags, nr, _arch_id, _ip, *args = NOTIF.unpack(buf)
        try:
            refused = self.decide(pid, nr, tuple(args))
        except Exception:  # never leave a process of the run waiting on a bug here
            refused = 0
        try:
            fcntl.ioctl(listener, IOCTL_ID_VALID, bytearray(struct.pack("<Q", nid)), True)
        except OSError:
            return  # gone while we read its memory: nothing to answer
        response = RESP.pack(nid, 0, -refused, 0) if refused else RESP.pack(nid, 0, 0, FLAG_CONTINUE)
        try:
            fcntl.ioctl(listener, IOCTL_SEND, bytearray(response), True)
        except OSError:
            pass
