#!/usr/bin/python3
"""Drive a headless Chromium over the DevTools protocol, for tests.

    browser.py URL --wait-for JS_EXPR [--eval JS_EXPR] [--screenshot OUT.png]
               [--width 1280] [--height 900] [--timeout SECONDS]
               [--startup-timeout SECONDS] [--chromium PATH]

Starts a fresh headless Chromium (own temporary profile, loopback only),
navigates its page to URL, evaluates JS_EXPR every 100 ms until it is truthy,
then evaluates --eval (the value must be JSON-serialisable; promises are
awaited) and prints {"value": ...} as one JSON line on stdout, and writes a
PNG screenshot of the viewport when --screenshot is given.

Exit status: 0 success; 2 bad arguments; 3 JS_EXPR not truthy before the
timeout; 1 anything else (Chromium failed to start, navigation failed, --eval
threw, terminated by a signal, ...). Diagnostics go to stderr.

Chromium is always terminated (SIGTERM to its process group, SIGKILL after a
grace period) and its temporary directory removed, also on errors and on
SIGTERM/SIGINT/SIGHUP.

Only the Python standard library and Debian's python3-websocket
(websocket-client) are used.
"""

import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import websocket  # Debian: python3-websocket
except ImportError:  # pragma: no cover - environment problem
    sys.stderr.write("browser.py: the python3-websocket package is required "
                     "(apt-get install -y python3-websocket)\n")
    sys.exit(1)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 3

POLL_INTERVAL_S = 0.1
KILL_GRACE_S = 5.0
HELPER_GRACE_S = 0.5

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-features=Translate,MediaRouter,OptimizationHints,"
    "AutofillServerCommunication,CertificateTransparencyComponentUpdater",
    "--no-pings",
    "--no-proxy-server",
    "--password-store=basic",
    "--use-mock-keychain",
    "--mute-audio",
    # Loopback only: every host but localhost/127.0.0.1/[::1] fails to
    # resolve (the rules apply to IP literals too).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, "
    "EXCLUDE 127.0.0.1, EXCLUDE ::1",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]


class Failure(Exception):
    """An error that ends the run with a message and an exit status."""

    def __init__(self, message, status=EXIT_ERROR):
        super().__init__(message)
        self.status = status


class Terminated(BaseException):
    """Raised from the signal handler so that cleanup runs."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


class UsageParser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        sys.stderr.write("browser.py: error: %s\n" % message)
        sys.exit(EXIT_USAGE)


def parse_args(argv):
    p = UsageParser(prog="browser.py",
                    description="Headless Chromium driver for tests.")
    p.add_argument("url")
    p.add_argument("--wait-for", required=True, metavar="JS_EXPR",
                   help="JavaScript expression to poll until truthy")
    p.add_argument("--eval", dest="eval_expr", metavar="JS_EXPR",
                   help="JavaScript expression whose value is printed as JSON")
    p.add_argument("--screenshot", metavar="OUT.png",
                   help="write a PNG screenshot of the viewport here")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=900)
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="deadline for --wait-for, counted from navigation "
                        "(default 30)")
    p.add_argument("--startup-timeout", type=float, default=60.0,
                   metavar="SECONDS",
                   help="deadline for Chromium to start and open its "
                        "DevTools endpoint (default 60)")
    p.add_argument("--chromium", default="/usr/bin/chromium", metavar="PATH")
    args = p.parse_args(argv)
    if not (1 <= args.width <= 10000 and 1 <= args.height <= 10000):
        p.error("--width/--height must be between 1 and 10000")
    if not args.timeout > 0 or not args.startup_timeout > 0:
        p.error("timeouts must be positive")
    if not args.wait_for.strip():
        p.error("--wait-for must not be empty")
    return args


def log(msg):
    sys.stderr.write("browser.py: %s\n" % msg)
    sys.stderr.flush()


class Chromium:
    """A headless Chromium process in its own process group."""

    def __init__(self, binary, width, height):
        self.binary = binary
        self.width = width
        self.height = height
        self.tmp = None
        self.proc = None
        self.log_path = None

    def start(self, deadline):
        self.tmp = tempfile.mkdtemp(prefix="hdp-browser-")
        profile = os.path.join(self.tmp, "profile")
        home = os.path.join(self.tmp, "home")
        os.mkdir(profile)
        os.mkdir(home)
        self.log_path = os.path.join(self.tmp, "chromium.log")
        env = dict(os.environ)
        for k in list(env):
            if k.lower() in ("http_proxy", "https_proxy", "all_proxy",
                             "no_proxy", "ftp_proxy"):
                del env[k]
        # Keep everything Chromium writes (~/.pki, caches, config) in tmp.
        env["HOME"] = home
        env["XDG_CONFIG_HOME"] = os.path.join(home, ".config")
        env["XDG_CACHE_HOME"] = os.path.join(home, ".cache")
        env.pop("DISPLAY", None)
        env.pop("WAYLAND_DISPLAY", None)
        cmd = [self.binary] + CHROMIUM_FLAGS + [
            "--user-data-dir=" + profile,
            "--window-size=%d,%d" % (self.width, self.height),
            "about:blank",
        ]
        with open(self.log_path, "wb") as logf:
            try:
                # start_new_session: Chromium and all its helpers get their
                # own process group, which cleanup kills as a whole.
                self.proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                    env=env, start_new_session=True)
            except OSError as e:
                raise Failure("cannot start %s: %s" % (self.binary, e))
        port_file = os.path.join(profile, "DevToolsActivePort")
        while True:
            try:
                with open(port_file) as f:
                    lines = f.read().splitlines()
                if len(lines) >= 2 and lines[0].strip().isdigit():
                    return int(lines[0].strip())
            except FileNotFoundError:
                pass
            if self.proc.poll() is not None:
                raise Failure("chromium exited with status %s before opening "
                              "its DevTools port%s"
                              % (self.proc.returncode, self.log_tail()))
            if time.monotonic() >= deadline:
                raise Failure("chromium did not open its DevTools port "
                              "within the start-up timeout%s"
                              % self.log_tail())
            time.sleep(0.05)

    def log_tail(self, limit=2000):
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()[-limit:].decode("utf-8", "replace").strip()
        except (OSError, TypeError):
            return ""
        return ("\n--- chromium output (tail) ---\n" + data) if data else ""

    def _group_alive(self, pgid):
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is not None:
            pgid = proc.pid  # session leader: its pid is the group id
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=KILL_GRACE_S)
                # The browser process has written its profile and exited;
                # its helpers (zygote, renderer) get a short grace period.
                grace = HELPER_GRACE_S
            except subprocess.TimeoutExpired:
                grace = 0.0
            deadline = time.monotonic() + grace
            while self._group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._group_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                log("chromium (pid %d) did not exit after SIGKILL" % proc.pid)
            deadline = time.monotonic() + KILL_GRACE_S
            while self._group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
        tmp, self.tmp = self.tmp, None
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


class DevTools:
    """A minimal synchronous DevTools protocol client for one target."""

    def __init__(self, ws_url, deadline):
        timeout = max(0.1, deadline - time.monotonic())
        try:
            # suppress_origin: Chromium rejects websocket clients that send
            # an Origin header unless --remote-allow-origins is given.
            self.ws = websocket.create_connection(
                ws_url, timeout=timeout, suppress_origin=True,
                enable_multithread=False)
        except Exception as e:
            raise Failure("cannot connect to DevTools at %s: %s" % (ws_url, e))
        self.next_id = 0

    def close(self):
        try:
            self.ws.close(timeout=1)
        except Exception:
            pass

    def call(self, method, params=None, deadline=None, timeout=10.0):
        """Sends a command and returns its result; raises Failure on a
        protocol error or when no answer arrives before the deadline."""
        if deadline is None:
            deadline = time.monotonic() + timeout
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        try:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            self.ws.send(json.dumps(msg))
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Failure("no DevTools answer to %s in time" % method)
                self.ws.settimeout(remaining)
                raw = self.ws.recv()
                if not raw:
                    raise Failure("DevTools connection closed during %s"
                                  % method)
                reply = json.loads(raw)
                if reply.get("id") != mid:
                    continue  # an event or a stale reply
                if "error" in reply:
                    raise ProtocolError(method, reply["error"])
                return reply.get("result", {})
        except websocket.WebSocketTimeoutException:
            raise Failure("no DevTools answer to %s in time" % method)
        except (websocket.WebSocketException, OSError) as e:
            raise Failure("DevTools connection failed during %s: %s"
                          % (method, e))


class ProtocolError(Failure):
    def __init__(self, method, error):
        super().__init__("DevTools %s failed: %s"
                         % (method, error.get("message", error)))
        self.error = error


def http_json(url, deadline):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    timeout = max(0.1, min(5.0, deadline - time.monotonic()))
    with opener.open(url, timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))


def page_ws_url(port, deadline):
    last = None
    while True:
        try:
            for t in http_json("http://127.0.0.1:%d/json/list" % port,
                               deadline):
                if t.get("type") == "page" and t.get("webSocketDebuggerUrl"):
                    return t["webSocketDebuggerUrl"]
            last = "no page target yet"
        except Exception as e:  # not listening yet, reset, bad JSON...
            last = e
        if time.monotonic() >= deadline:
            raise Failure("no DevTools page target on port %d: %s"
                          % (port, last))
        time.sleep(0.1)


def describe_exception(result):
    details = result.get("exceptionDetails") or {}
    exc = details.get("exception") or {}
    return (exc.get("description") or details.get("text")
            or "exception").splitlines()[0]


def wait_for(dt, expr, timeout, url):
    """Polls `!!(expr)` until true; raises Failure(EXIT_TIMEOUT) when the
    timeout passes first. Evaluation errors count as 'not yet', and so does
    the initial about:blank document while the navigation to URL commits."""
    deadline = time.monotonic() + timeout
    guard = "" if url.startswith("about:") else \
        "if (location.href === 'about:blank') return false; "
    wrapped = "(() => { %stry { return !!(%s\n); } catch (e) { " \
              "return 'exception: ' + e; } })()" % (guard, expr)
    last = None
    while True:
        remaining = deadline - time.monotonic()
        try:
            res = dt.call("Runtime.evaluate",
                          {"expression": wrapped, "returnByValue": True},
                          deadline=time.monotonic() + max(0.5, min(5.0, remaining)))
            if "exceptionDetails" in res:
                last = describe_exception(res)  # e.g. a syntax error
            else:
                value = res.get("result", {}).get("value")
                if value is True:
                    return
                last = value if isinstance(value, str) else None
        except ProtocolError as e:
            # e.g. the execution context was destroyed by a navigation.
            last = str(e)
        except Failure as e:
            if "in time" not in str(e):
                raise
            last = str(e)
        if time.monotonic() >= deadline:
            raise Failure("timed out after %gs waiting for %s%s"
                          % (timeout, expr, (" (last: %s)" % last) if last
                             else ""), EXIT_TIMEOUT)
        time.sleep(POLL_INTERVAL_S)


def run(args):
    chromium = Chromium(args.chromium, args.width, args.height)
    dt = None
    try:
        t0 = time.monotonic()
        startup_deadline = t0 + args.startup_timeout
        port = chromium.start(startup_deadline)
        ws_url = page_ws_url(port, startup_deadline)
        dt = DevTools(ws_url, startup_deadline)
        dt.call("Emulation.setDeviceMetricsOverride",
                {"width": args.width, "height": args.height,
                 "deviceScaleFactor": 1, "mobile": False})
        log("chromium ready after %.2fs" % (time.monotonic() - t0))

        nav = dt.call("Page.navigate", {"url": args.url},
                      timeout=max(10.0, args.timeout))
        if nav.get("errorText"):
            raise Failure("navigation to %s failed: %s"
                          % (args.url, nav["errorText"]))
        wait_for(dt, args.wait_for, args.timeout, args.url)

        value = None
        if args.eval_expr is not None:
            res = dt.call("Runtime.evaluate",
                          {"expression": args.eval_expr,
                           "returnByValue": True, "awaitPromise": True},
                          timeout=max(10.0, args.timeout))
            if "exceptionDetails" in res:
                raise Failure("--eval threw: %s" % describe_exception(res))
            value = res.get("result", {}).get("value")
        if args.screenshot:
            shot = dt.call("Page.captureScreenshot",
                           {"format": "png", "captureBeyondViewport": False},
                           timeout=max(20.0, args.timeout))
            try:
                with open(args.screenshot, "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
            except OSError as e:
                raise Failure("cannot write %s: %s" % (args.screenshot, e))
        sys.stdout.write(json.dumps({"value": value}) + "\n")
        sys.stdout.flush()
        return EXIT_OK
    finally:
        # A second signal must not interrupt the cleanup itself.
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        if dt is not None:
            dt.close()
        chromium.stop()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def on_signal(signum, frame):
        raise Terminated(signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    try:
        return run(args)
    except Failure as e:
        log(str(e))
        return e.status
    except Terminated as e:
        log("terminated by signal %d" % e.signum)
        return EXIT_ERROR
    except Exception as e:  # unexpected: still a clean exit status
        log("error: %s: %s" % (type(e).__name__, e))
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
