#!/usr/bin/env python3
"""Runs one Rust test binary (cargo's target runner: `cargo test --config
"target.'cfg(unix)'.runner=[…]"`, see scripts/test.sh) and gives each test a deadline.

libtest has no per-test timeout on stable Rust, but it prints `test NAME has been running
for over 60 seconds` for every test still running after a minute, and `test NAME ... ok`
when one ends. This runner passes the binary's output through unchanged and watches for
those lines: a test still running `RWKV_TEST_TIMEOUT` seconds after it started (default
600) stops the binary — its whole process group, children included — with the test's
name and status 124, so a hang fails in minutes, named, never by CI's limit. A binary that
does not exit within 60 s of printing its result, or prints nothing for the timeout, is
stopped the same way.

usage: test_deadline.py BINARY [ARGS…]   (what cargo passes to a runner)
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

LIMIT = float(os.environ.get("RWKV_TEST_TIMEOUT", "600"))
# libtest's own warning threshold: a test named in a warning started this long before.
WARN_AFTER = 60.0
EXIT_GRACE = 60.0

RUNNING = re.compile(r"^test (\S+) has been running for over \d+ seconds")
ENDED = re.compile(r"^test (\S+) \.\.\. ")
RESULT = re.compile(r"^test result: ")


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: test_deadline.py BINARY [ARGS…]", file=sys.stderr)
        return 2
    proc = subprocess.Popen(
        sys.argv[1:],
        stdout=subprocess.PIPE,
        stderr=None,  # the binary's stderr goes straight through
        start_new_session=True,  # one group: the test's children go with it
        bufsize=0,
    )
    lock = threading.Lock()
    started = {}  # test name -> monotonic start (warning time - 60 s)
    state = {"last_output": time.monotonic(), "result_at": None, "killed": None}

    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, forward)

    def stop(why: str) -> None:
        with lock:
            if state["killed"] is not None:
                return
            state["killed"] = why
        sys.stdout.flush()
        print(f"\nTIMEOUT ({os.path.basename(sys.argv[1])}): {why}", file=sys.stderr, flush=True)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def watch() -> None:
        while proc.poll() is None:
            time.sleep(1.0)
            now = time.monotonic()
            with lock:
                overdue = [(n, now - t) for n, t in started.items() if now - t > LIMIT]
                result_at = state["result_at"]
                quiet = now - state["last_output"]
            for name, age in overdue:
                stop(f"test {name} still running after {age:.0f} s "
                     f"(limit RWKV_TEST_TIMEOUT={LIMIT:.0f} s): stopped")
            if result_at is not None and now - result_at > EXIT_GRACE:
                stop(f"the binary printed its result but did not exit within {EXIT_GRACE:.0f} s")
            if quiet > LIMIT:
                stop(f"no output for {quiet:.0f} s (limit {LIMIT:.0f} s): stopped")

    threading.Thread(target=watch, daemon=True).start()
    out = sys.stdout.buffer
    assert proc.stdout is not None
    for raw in iter(proc.stdout.readline, b""):
        out.write(raw)
        out.flush()
        line = raw.decode("utf-8", "replace")
        now = time.monotonic()
        with lock:
            state["last_output"] = now
            m = RUNNING.match(line)
            if m:
                started.setdefault(m.group(1), now - WARN_AFTER)
            else:
                m = ENDED.match(line)
                if m:
                    started.pop(m.group(1), None)
                elif RESULT.match(line):
                    state["result_at"] = now
    rc = proc.wait()
    if state["killed"] is not None:
        return 124
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
