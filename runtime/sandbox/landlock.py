"""Landlock (Linux 5.13+): let this process, and every process it starts, write only beneath some folders.

An unprivileged process restricts itself through three system calls, reached with ctypes (Python has
no binding). Only the rights that change the file system are handled, so reading and executing stay
allowed everywhere. Landlock does not cover changes of metadata (chmod, chown, utime, extended
attributes): ``writewatch`` refuses those into the user's folder.
"""

from __future__ import annotations

import ctypes
import os
import sys

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_*: the rights that write, by the ABI that brought them.
WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (1 << b for b in range(6, 13))
REFER = 1 << 13  # ABI 2: rename and link across folders (ABI 1 refuses them all: too strict to run scripts)
TRUNCATE = 1 << 14  # ABI 3
ABI1_WRITES = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
               | MAKE_BLOCK | MAKE_SYM)
MIN_ABI = 2


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]  # the later fields (net, scoped) stay unhandled


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in linux/landlock.h
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class Unavailable(OSError):
    """The kernel (or this system) cannot restrict the process; the message says why."""


def _libc():
    if not sys.platform.startswith("linux"):
        raise Unavailable(f"Landlock is Linux only (this is {sys.platform})")
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version; raises Unavailable when there is none."""
    libc = _libc()
    version = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                           ctypes.c_uint32(CREATE_RULESET_VERSION))
    if version < 0:
        err = ctypes.get_errno()
        raise Unavailable(f"no Landlock in this kernel ({os.strerror(err)})")
    return int(version)


def writes_for(version: int) -> int:
    rights = ABI1_WRITES | REFER
    if version >= 3:
        rights |= TRUNCATE
    return rights


def restrict(writable: list[str]) -> int:
    """From now on this process and its children may write only beneath ``writable`` (folders that
    exist). Sets no_new_privs, as Landlock requires of an unprivileged process. Returns the ABI."""
    version = abi()
    if version < MIN_ABI:
        raise Unavailable(f"Landlock ABI {version} refuses every rename across folders (needs {MIN_ABI}+)")
    libc = _libc()
    rights = writes_for(version)
    attr = _RulesetAttr(rights)
    ruleset = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise Unavailable(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for folder in writable:
            fd = os.open(folder, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr(rights, fd)
                if libc.syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    raise Unavailable(f"landlock_add_rule({folder}): {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if libc.prctl(ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)) != 0:
            raise Unavailable(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
        if libc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise Unavailable(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return version
