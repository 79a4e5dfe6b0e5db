"""tap.py — the TAP lines and helpers the Python test drivers share.

  check(desc, cond, detail="")  prints "ok - desc" or "not ok - desc" (with the
                                detail as "# " lines) and counts the failure;
                                returns cond
  n_failed()                    failures so far (a driver ends with
                                sys.exit(1 if tap.n_failed() else 0))
  free_port()                   a TCP port on 127.0.0.1 nothing listens on now

Python 3 standard library only.
"""
import socket

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


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
