"""benchlib.py - what the Python benchmark scripts (harvest.py, tenants.py)
share: one HTTP/1.1 call to a server on loopback, and the machine's CPU
name for the report's first line. Standard library only."""

import socket


def http(port, method, path, body=None, key=None, timeout=30):
    """One call on a fresh connection to 127.0.0.1:port: (status, body bytes).
    key: sent as `Authorization: Bearer KEY`; a body is sent as JSON."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    if key:
        head += "Authorization: Bearer %s\r\n" % key
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    s.sendall(head.encode() + b"\r\n" + (body or b""))
    data = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    return int(data.split(b" ", 2)[1]), data.split(b"\r\n\r\n", 1)[1]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return "?"
