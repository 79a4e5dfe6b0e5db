"""Reading a gateway's /metrics (Prometheus text) in integration tests."""
import time
import urllib.request


def metrics(url):
    """{series with labels: value} of url's /metrics."""
    out = {}
    for line in urllib.request.urlopen(url + "/metrics", timeout=10).read().decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        k, v = line.rsplit(" ", 1)
        out[k] = float(v)
    return out


def metric(m, name, **labels):
    """The sum of name's series in m whose labels include labels."""
    return sum(v for k, v in m.items() if (k == name or k.startswith(name + "{"))
               and all(f'{a}="{b}"' in k for a, b in labels.items()))


def wait(cond, limit=30.0):
    """Polls cond every 0.1 s until it holds (True) or limit seconds pass (False)."""
    t = time.time() + limit
    while time.time() < t:
        if cond():
            return True
        time.sleep(0.1)
    return False
