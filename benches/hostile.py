#!/usr/bin/env python3
"""Hostile clients against `execprof agent --listen`, with what each got and what a normal
scrape cost meanwhile: malformed request lines, an unknown HTTP version, a 64 KiB header,
wrong methods and paths, a client that never finishes its head, 300 idle connections at once.
Then the agent's count of a known workload, to show nothing was lost. Loopback only. (Plain
HTTP to the TLS port and wrong or missing credentials are the root test
prometheus_scrapes_over_tls_with_basic_auth_and_nothing_else_gets_in.)

    sudo benches/hostile.py [--execprof PATH]
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
exe = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--execprof" else os.path.join(here, "../target/release/execprof")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def exchange(port, raw, timeout=30):
    """The first line the agent answers `raw` with ('' when it closes without a word)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(timeout)
    s.sendall(raw)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return out.split(b"\r\n", 1)[0].decode("latin-1")


def scrape(port):
    t = time.monotonic()
    line = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    return line, time.monotonic() - t


def main():
    work = tempfile.mkdtemp()
    root = next(l.split()[4] for l in open("/proc/self/mountinfo") if " - cgroup2 " in l)
    cg = os.path.join(root, f"execprof-hostile-{os.getpid()}")
    os.mkdir(cg)
    port = free_port()
    report = os.path.join(work, "agent.json")
    agent = subprocess.Popen([exe, "agent", "--cgroup", cg, "--sample-hz", "0", "--listen", f"127.0.0.1:{port}",
                              "--interval", "0.2", "--json", report], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for line in agent.stderr:
        if b"agent counting" in line:
            break
    rows = []
    for name, raw in [
        ("garbage request line", b"GARBAGE\r\n\r\n"),
        ("HTTP/9.9", b"GET /metrics HTTP/9.9\r\n\r\n"),
        ("64 KiB header", b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n"),
        ("POST /metrics", b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
        ("GET /nowhere", b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ("GET /debug/pprof/exec (--sample-hz 0: no profiles)", b"GET /debug/pprof/exec HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    ]:
        rows.append((name, exchange(port, raw) or "(closed)"))
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    slow_since = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    line, took = scrape(port)
    rows.append(("a scrape while 300 idle connections and a slow client are held", f"{line} in {took * 1000:.1f} ms"))
    for s in idle:
        s.close()
    time.sleep(0.5)
    line, took = scrape(port)
    rows.append(("a scrape once the idle ones left", f"{line} in {took * 1000:.1f} ms"))
    slow.settimeout(60)
    said = b""
    try:
        while chunk := slow.recv(4096):
            said += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    first = said.split(b"\r\n", 1)[0].decode("latin-1") or "(closed)"
    rows.append(("the client that never finished its head", f"{first} after {time.monotonic() - slow_since:.1f} s"))
    subprocess.run(["/bin/sh", "-c", f"echo $$ > {cg}/cgroup.procs; /bin/true; /bin/true; /nonexistent/x 2>/dev/null"])
    time.sleep(0.5)
    agent.terminate()
    agent.wait()
    v = json.load(open(report))
    os.rmdir(cg)
    print("| client | answer |")
    print("|---|---|")
    for name, answer in rows:
        print(f"| {name} | {answer} |")
    print()
    print(f"afterwards: a workload of 3 execs counted as {v['analysis']['attempts']}; complete: {v['complete']}")


main()
