"""tap.py — the TAP lines and helpers the Python test drivers share.

  check(desc, cond, detail="")  prints "ok - desc" or "not ok - desc" (with the
                                detail as "# " lines) and counts the failure;
                                returns cond
  n_failed()                    failures so far (a driver ends with
                                sys.exit(1 if tap.n_failed() else 0))
  free_port()                   a TCP port on 127.0.0.1 nothing listens on now,
                                below the kernel's ephemeral range and never
                                handed out before in this test (see there)

  python3 tap.py free-port      prints free_port() (tests/lib.sh's free_port)

Python 3 standard library only.
"""
import os
import random
import socket
import sys

_n_failed = 0


def check(desc, cond, detail=""):
    global _n_failed
    print(("ok - " if cond else "not ok - ") + desc, flush=True)
    if not cond:
        _n_failed += 1
        if detail:
            print("# " + str(detail).replace("\n", "\n# "), flush=True)
    return cond


def n_failed():
    return _n_failed


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _bindable(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port():
    """A port to hand to a server the test starts a moment later. Two races
    made tests flaky with a port the kernel picks (bind to 0): the kernel
    may pick the same port again for the test's next call, and any outgoing
    connection (curl, a worker dialling its gateway) may take it as its own
    ephemeral port before the server binds it. So: a random port below the
    ephemeral range (10000 up to it), that binds now, and that this test has
    not been given before ($PAGODA_PORTS_FILE, which tests/lib.sh sets per
    script, lists those). Falls back to the kernel's pick when the range
    below is too small."""
    low = _ephemeral_low()
    used_file = os.environ.get("PAGODA_PORTS_FILE")
    used = set()
    if used_file:
        try:
            with open(used_file) as f:
                used = {int(x) for x in f.read().split()}
        except (OSError, ValueError):
            used = set()
    port = 0
    if low - 10000 >= 1000:
        for _ in range(200):
            p = random.randrange(10000, low)
            if p not in used and _bindable(p):
                port = p
                break
    if not port:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
    if used_file:
        with open(used_file, "a") as f:
            f.write("%d\n" % port)
    return port


if __name__ == "__main__" and sys.argv[1:] == ["free-port"]:
    print(free_port())
