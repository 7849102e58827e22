"""Constrained decoding on the demo model, checked by validators nobody here wrote:
every completed output of every JSON Schema parses (``json``) and validates
(``jsonschema``, draft 2020-12, with its format checker: date, time, date-time, email,
uuid), every regex output passes
``re.fullmatch``, every grammar output passes a checker of the grammar's language
(``ast`` for arithmetic, ``csv``, ``json``, regexes for the token-level ones).

Runs are seeded; "completed" is the engine's own claim (``stats["complete"]``) and the
test asserts that the claim is never false for a valid-looking output's opposite: a
completed output that fails its validator fails the test. Outputs cut by ``max_tokens``
are counted, never validated, and at most a third of the runs may be cut.
"""

import ast
import csv
import io
import json
import re

import jsonschema
import pytest

from conftest import DEMO, load
from structured_cases import ARITH_GBNF, CSV_GBNF, KV_GBNF, REGEXES, SCHEMAS, WORDS_LARK

PROMPT = "Here is the record, as compact JSON:\n"
# (seed, temperature): greedy, the chat default, and a hot one. Every schema runs once,
# the combinations taking turns; the first REPEATED schemas run with all three (lavapipe
# reads the 65,536 logits back at ≈ 5 tokens/s on a shared 2-core machine: the suite's
# size is set by that).
RUNS = [(1, 0.0), (2, 1.0), (3, 1.5)]
REPEATED = 12
MAX_TOKENS = 48


# Draft 2020-12's format checker (RFC 3339 `time` / `date-time` through rfc3339-validator,
# pinned): the generic FormatChecker() would check `time` as draft 3's `%H:%M:%S`.
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
assert {"date", "time", "date-time", "email", "uuid"} <= set(FORMATS.checkers)


def schema_runs():
    for i, (name, schema) in enumerate(SCHEMAS):
        runs = RUNS if i < REPEATED else [RUNS[i % len(RUNS)]]
        for r in runs:
            yield name, schema, r


def run(model, prompt, max_tokens=MAX_TOKENS, **kw):
    seed, temp = kw.pop("run")
    s = model.generate(prompt, max_tokens, temperature=temp, seed=seed, stream=True, **kw)
    text = "".join(s)
    return text, s.stats


@pytest.fixture(scope="module")
def model():
    return load(DEMO)


def test_there_are_enough_cases():
    assert len(SCHEMAS) >= 60
    assert len({n for n, _ in SCHEMAS}) == len(SCHEMAS)
    assert len(REGEXES) + 4 >= 10
    for _, s in SCHEMAS:  # the schemas themselves are valid draft 2020-12
        jsonschema.Draft202012Validator.check_schema(s)


# Decodes 92 constrained runs (68 schemas, the first REPEATED under all three RUNS) of up to
# 48 tokens, each reading the logits back: ≈ 330 s on the 2-core CI machine's lavapipe,
# over the suite's 300 s default.
@pytest.mark.timeout(600)
def test_every_completed_output_validates(model):
    complete = cut = 0
    failures = []
    for name, schema, r in schema_runs():
        v = jsonschema.Draft202012Validator(schema, format_checker=FORMATS)
        text, stats = run(model, PROMPT, json_schema=schema, run=r)
        if not stats["complete"]:
            cut += 1
            assert stats["stop"] == "max_tokens", (name, r, stats)
            continue
        complete += 1
        try:
            v.validate(json.loads(text))
        except (ValueError, jsonschema.ValidationError) as e:
            failures.append(f"{name} {r}: {text!r}: {e}")
    print(f"{complete} complete, {cut} cut by max_tokens")
    assert not failures, "\n".join(failures)
    assert cut <= (complete + cut) // 3, f"{cut} of {complete + cut} runs cut by max_tokens"


def test_every_completed_regex_output_fullmatches(model):
    done = 0
    for i, (name, rx) in enumerate(REGEXES):
        r = RUNS[i % len(RUNS)]
        text, stats = run(model, "The answer: ", 24, regex=rx, run=r)
        if stats["complete"]:
            done += 1
            assert re.fullmatch(rx, text), (name, r, text)
    assert done >= len(REGEXES) * 2 // 3


def arith_ok(text):
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.BinOp, ast.Add, ast.Sub)) or (
            isinstance(node, ast.Constant) and type(node.value) is int and 1 <= node.value <= 999
        )
        if not ok:
            return False
    return "  " not in text and " " not in text


def csv_ok(text):
    rows = list(csv.reader(io.StringIO(text)))
    return len(rows) == 1 and len(rows[0]) == 3 and all(
        re.fullmatch(r"[a-z]{1,8}|[0-9]{1,4}", f) for f in rows[0]
    )


def words_ok(text):
    if not (text.startswith("[") and text.endswith("]")):
        return False
    words = text[1:-1].split(", ")
    return 1 <= len(words) <= 4 and all(re.fullmatch(r"[a-z]{1,10}", w) for w in words)


def kv_ok(text):
    pairs = [p.split("=") for p in text.split(";")]
    return 1 <= len(pairs) <= 3 and all(
        len(p) == 2 and re.fullmatch(r"[a-z]{1,6}", p[0]) and re.fullmatch(r"[0-9]{1,3}|true|false", p[1])
        for p in pairs
    )


JSON_GBNF = (DEMO.parents[2] / "crates" / "engine" / "assets" / "constraint" / "json.gbnf").read_text()

# The demo model writes 19th-century prose: free JSON (llama.cpp's grammar) needs two
# examples in the prompt to end its first key within the token budget.
JSON_SHOTS = 'Record: {"name": "Ann", "age": 31}\nRecord: {"name": "Tom", "age": 42}\nRecord: '

GRAMMARS = [
    ("arith_gbnf", ARITH_GBNF, arith_ok, "Output: "),
    ("csv_gbnf", CSV_GBNF, csv_ok, "Output: "),
    ("words_lark", WORDS_LARK, words_ok, "Output: "),
    ("kv_gbnf", KV_GBNF, kv_ok, "Output: "),
    ("json_gbnf", JSON_GBNF, lambda t: isinstance(json.loads(t), dict), JSON_SHOTS),
]


@pytest.mark.parametrize("name,grammar,check,prompt", GRAMMARS, ids=[g[0] for g in GRAMMARS])
def test_every_completed_grammar_output_is_in_the_language(model, name, grammar, check, prompt):
    done = 0
    for r in RUNS[:2]:
        text, stats = run(model, prompt, 40, grammar=grammar, run=r)
        if stats["complete"]:
            done += 1
            assert check(text), (name, r, text)
    assert done >= 1, f"{name}: no run completed"


def test_a_cut_structure_is_never_called_complete(model):
    s = model.generate(PROMPT, 3, json_schema=SCHEMAS[31][1], seed=1, stream=True)
    text = "".join(s)
    assert s.stats["complete"] is False and s.stats["stop"] == "max_tokens", (text, s.stats)
    with pytest.raises(ValueError):
        json.loads(text)


@pytest.mark.parametrize(
    "kw,named",
    [
        ({"json_schema": {"type": "strnig"}}, "strnig"),
        ({"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}}, "nope"),
        ({"regex": "(ab"}, "regex"),
        ({"grammar": "start: item\n"}, "item"),
        ({"grammar": 'value ::= "a"\n'}, "root"),
        ({"json_schema": "{not json"}, "not JSON"),
    ],
)
def test_bad_schemas_and_grammars_raise_before_any_token(model, kw, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        model.generate(PROMPT, 8, stream=True, **kw)


def test_at_most_one_constraint(model):
    with pytest.raises(ValueError, match="at most one"):
        model.generate(PROMPT, 8, regex="a", grammar='root ::= "a"')
