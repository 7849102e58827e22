"""The `curl` examples of docs/server.md, run as written against a real `rwkv serve`."""

import json
import os
import re
import subprocess
from pathlib import Path

from conftest import REPO
from server_support import Served


def blocks():
    doc = (REPO / "docs" / "server.md").read_text()
    return [b for b in re.findall(r"```bash\n(.*?)```", doc, re.S) if b.lstrip().startswith("curl")]


def test_every_curl_example_of_docs_server_md_works():
    bs = blocks()
    assert len(bs) >= 5, "docs/server.md lost its curl examples"
    s = Served()
    try:
        env = {**os.environ, "RWKV_URL": s.url, "RWKV_MODEL": s.model}
        for b in bs:
            r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + b], env=env,
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, (b, r.stderr)
            out = r.stdout.strip()
            if out.startswith("data:"):
                events = [line[5:].strip() for line in out.splitlines() if line.startswith("data:")]
                assert events[-1] == "[DONE]", out[-300:]
                chunks = [json.loads(e) for e in events[:-1]]
                assert chunks[-1]["usage"]["completion_tokens"] > 0
            else:
                j = json.loads(out)
                assert "error" not in j, (b, j)
                assert j["object"] in ("list", "chat.completion", "text_completion"), j
    finally:
        assert s.stop() == 0
