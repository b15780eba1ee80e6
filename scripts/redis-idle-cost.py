#!/usr/bin/env python3
"""What N connections cost a redis-server that does nothing else, as a fraction of one core.

Starts a private redis-server on a free loopback port, opens N connections and leaves them idle
(`idle`), blocked on a stream with no timeout (`block`: XREAD BLOCK 0) or blocked with a long one
(`blockt`: XREAD BLOCK 600000, as agents block between heartbeats), then reads Redis' own CPU
(INFO cpu, user + sys) over a window. Every mode runs in one invocation, so the figures come from
the same machine state.

Usage: scripts/redis-idle-cost.py [--connections 12500] [--window-s 15] [--redis-server PATH]
"""
import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time


def resp(*args):
    out = "*%d\r\n" % len(args)
    for a in args:
        out += "$%d\r\n%s\r\n" % (len(a.encode()), a)
    return out.encode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(conn):
    conn.sendall(resp("INFO", "cpu"))
    data = b""
    while b"\r\n" not in data:
        data += conn.recv(65536)
    header, _, body = data.partition(b"\r\n")
    length = int(header[1:])  # a bulk string: $<length>
    while len(body) < length + 2:
        body += conn.recv(65536)
    fields = dict(line.split(":", 1) for line in body[:length].decode().split("\r\n") if line.startswith("used_cpu_"))
    return float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])


def measure(server, connections, mode, window_s):
    port = free_port()
    with tempfile.TemporaryDirectory() as home:
        redis = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                  "--maxclients", str(connections + 100), "--dir", home],
                                 stdout=subprocess.DEVNULL)
        try:
            deadline = time.time() + 10
            while True:
                try:
                    monitor = socket.create_connection(("127.0.0.1", port), timeout=5)
                    break
                except OSError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.05)
            monitor.sendall(resp("XADD", "s", "*", "a", "1"))
            monitor.recv(100)
            held = []
            for _ in range(connections):
                c = socket.create_connection(("127.0.0.1", port), timeout=5)
                if mode == "block":
                    c.sendall(resp("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
                elif mode == "blockt":
                    c.sendall(resp("XREAD", "BLOCK", "600000", "STREAMS", "s", "$"))
                held.append(c)
            time.sleep(3)  # let the connections settle (query buffers freed, crons caught up)
            before, start = cpu_seconds(monitor), time.time()
            time.sleep(window_s)
            after, wall = cpu_seconds(monitor), time.time() - start
            for c in held:
                c.close()
            return (after - before) / wall
        finally:
            redis.terminate()
            redis.wait(timeout=10)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--connections", type=int, default=12500)
    p.add_argument("--window-s", type=float, default=15)
    p.add_argument("--redis-server", default=os.environ.get("HDP_REDIS_SERVER", "redis-server"))
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.connections + 200
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            sys.exit("redis-idle-cost: needs %d open files, the limit is %d" % (need, hard))
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    for mode in ("idle", "block", "blockt"):
        fraction = measure(a.redis_server, a.connections, mode, a.window_s)
        print("%6d connections %-6s  Redis CPU %.2f%% of one core" % (a.connections, mode, 100 * fraction), flush=True)


if __name__ == "__main__":
    main()
