#!/usr/bin/env python3
"""Runs a command in a process group that is orphaned while one of the command's processes is stopped.

POSIX: when a process group becomes orphaned (no member has a parent in another group of the same
session) and a member is stopped, the kernel sends the group SIGHUP, then SIGCONT. That happens to a test
whenever the shell that started the suite in the background exits mid-run: ctest runs tests in its own
process group, so a test's processes share the launcher's group. A test that freezes a process with
SIGSTOP (multiprocess_failure.sh stop) then loses it to the SIGHUP (a voltllm rank has no handler: it
dies with no log line), unless the frozen process sits in a process group of its own.

How: this process forks a link L that leads a new process group P; L starts a keeper K (in P) that runs
the command and writes its exit status to a pipe. Once a descendant of K is stopped, L exits: K is
reparented to init, P is orphaned with a stopped member if that member is in P. The command must pass all
the same; this process exits with the command's status, or 1 naming the signal that ended the keeper.

Usage: orphaned_group.py COMMAND [ARGS...]
"""
import os
import signal
import sys
import time


def stat_fields(pid):
    """(state, ppid, pgrp) of pid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    return rest[0], int(rest[1]), int(rest[2])


def stopped_descendant(root):
    """A stopped process below root (pid, pgrp), or None."""
    parents = {}
    stopped = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = stat_fields(int(name))
        if fields is None:
            continue
        parents[int(name)] = fields[1]
        if fields[0] in ("T", "t"):
            stopped.append((int(name), fields[2]))
    for pid, pgrp in stopped:
        p, hops = pid, 0
        while p > 1 and hops < 64:
            p = parents.get(p, 0)
            if p == root:
                return pid, pgrp
            hops += 1
    return None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    read_end, write_end = os.pipe()
    link = os.fork()
    if link == 0:
        os.close(read_end)
        os.setpgid(0, 0)
        keeper = os.fork()
        if keeper == 0:
            child = os.fork()
            if child == 0:
                os.close(write_end)
                try:
                    os.execvp(sys.argv[1], sys.argv[1:])
                finally:
                    os._exit(127)
            _, status = os.waitpid(child, 0)
            os.write(write_end, f"{os.waitstatus_to_exitcode(status)}\n".encode())
            os._exit(0)
        os.close(write_end)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = stopped_descendant(keeper)
            if found is not None:
                pid, pgrp = found
                print(f"orphaned_group: pid {pid} is stopped (process group {pgrp}; the command's is "
                      f"{os.getpgid(0)}); ending the group's last link to the session", flush=True)
                os._exit(0)
            try:
                if os.waitpid(keeper, os.WNOHANG)[0] == keeper:
                    break  # the command ended without stopping anything
            except ChildProcessError:
                break
            time.sleep(0.01)
        print("orphaned_group: nothing below the command was stopped; the group was not orphaned",
              flush=True)
        os._exit(0)
    os.close(write_end)
    os.waitpid(link, 0)
    data = b""
    while True:
        chunk = os.read(read_end, 64)
        if not chunk:
            break
        data += chunk
    if not data:
        print("orphaned_group: the command's keeper ended before the command did (it was hung up with "
              "its process group)")
        sys.exit(1)
    code = int(data)
    if code < 0:
        print(f"orphaned_group: the command was killed by {signal.Signals(-code).name}")
        sys.exit(1)
    sys.exit(code)


if __name__ == "__main__":
    main()
