"""The examples of docs/structured-output.md, run as written: the CLI block (its outputs
checked: JSON that validates, a regex match, a grammar sentence), the Python block on
the demo model, and the curl blocks against a real `rwkv serve` (their replies checked
with `jsonschema`)."""

import json
import os
import re
import subprocess
import sys

import jsonschema

from conftest import DEMO, REPO, rwkv_cli
from server_support import Served

DOC = (REPO / "docs" / "structured-output.md").read_text()
FENCE = "`" * 3


def blocks(lang):
    return re.findall(FENCE + lang + r"\n(.*?)" + FENCE, DOC, re.S)


def test_the_cli_block_runs_and_its_outputs_match():
    (b,) = [b for b in blocks("bash") if "rwkv generate" in b]
    env = {**os.environ, "PATH": f"{rwkv_cli().parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + b], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    person = json.loads(lines[0].removeprefix("A person, as JSON: "))
    with open("/tmp/person.schema.json") as f:
        jsonschema.validate(person, json.load(f))
    assert re.fullmatch(r"Call [0-9]{3}-[0-9]{4}", lines[1]), lines[1]
    assert re.fullmatch(r"Is the sea calm\? (yes|no), [a-z]{3,10}", lines[2]), lines[2]


def test_the_python_block_runs():
    (b,) = blocks("python")
    r = subprocess.run([sys.executable, "-c", b], env={**os.environ, "RWKV_MODEL": str(DEMO)},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", r.stdout.splitlines()[-1]), r.stdout


def request_body(block):
    return json.loads(re.search(r"-d '(.*)'\s*$", block, re.S).group(1).replace("'\"$RWKV_MODEL\"'", "m"))


def test_the_curl_blocks_give_valid_replies():
    bs = [b for b in blocks("bash") if b.lstrip().startswith("curl")]
    assert len(bs) == 2
    s = Served()
    try:
        env = {**os.environ, "RWKV_URL": s.url, "RWKV_MODEL": s.model}
        outs = []
        for b in bs:
            r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + b], env=env,
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, (b, r.stderr)
            outs.append(json.loads(r.stdout))
        schema = request_body(bs[0])["response_format"]["json_schema"]["schema"]
        c = outs[0]["choices"][0]
        assert c["finish_reason"] == "stop", c
        jsonschema.validate(json.loads(c["message"]["content"]), schema)
        params = request_body(bs[1])["tools"][0]["function"]["parameters"]
        c = outs[1]["choices"][0]
        assert c["finish_reason"] == "tool_calls", c
        call = c["message"]["tool_calls"][0]["function"]
        assert call["name"] == "get_weather"
        jsonschema.validate(json.loads(call["arguments"]), params)
    finally:
        assert s.stop() == 0
