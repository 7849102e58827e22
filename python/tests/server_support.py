"""Starting `rwkv serve` for the server tests: a real process on a free port, stopped
with SIGINT at the end (the CLI's graceful shutdown), its stderr kept for failures."""

import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import DEMO, rwkv_cli

START_TIMEOUT_S = 120


class Served:
    """A running `rwkv serve`: `base` (http://127.0.0.1:PORT/v1), `model` (its id)."""

    def __init__(self, *args: str, model: Path = DEMO):
        self.cmd = [str(rwkv_cli()), "serve", "--model", str(model), "--port", "0", *args]
        self.proc = subprocess.Popen(
            self.cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        self.log: list[str] = []
        ready = threading.Event()
        found: dict = {}

        def read():
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"serving on (http://\S+/v1)", line)
                if m:
                    found["base"] = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(START_TIMEOUT_S) or "base" not in found:
            self.stop()
            pytest.fail(f"`{' '.join(self.cmd)}` did not start:\n{''.join(self.log)}")
        self.base: str = found["base"]
        self.url = self.base.removesuffix("/v1")
        self.model = model.stem

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def metrics(self, key: str = "") -> dict:
        """The Prometheus text as {name{labels}: value}."""
        import urllib.request

        req = urllib.request.Request(self.url + "/metrics")
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        text = urllib.request.urlopen(req, timeout=30).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def wait_metric(self, name: str, pred, key: str = "", timeout: float = 60) -> float:
        end = time.monotonic() + timeout
        while True:
            v = self.metrics(key).get(name, 0.0)
            if pred(v) or time.monotonic() > end:
                return v
            time.sleep(0.05)
