"""Structured output of `rwkv serve` through the official `openai` package:
`response_format` (json_object, json_schema) and `tools` / `tool_choice`, whole and
streamed, checked with `jsonschema`; `tool` messages fed back; bad schemas are 400s."""

import json

import jsonschema
import openai
import pytest

from server_support import Served

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
ASK = [{"role": "user", "content": "Describe a person as JSON."}]
WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def served():
    s = Served("--parallel", "4")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.base, api_key="x", max_retries=0, timeout=300)


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


def test_json_schema_replies_validate_whole_and_streamed(client, served):
    for seed in (1, 2, 3):
        r = client.chat.completions.create(model=served.model, messages=ASK, max_tokens=80,
                                           seed=seed, response_format=schema_format(PERSON))
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.message.content), PERSON)
    s = client.chat.completions.create(model=served.model, messages=ASK, max_tokens=80, seed=4,
                                       response_format=schema_format(PERSON), stream=True)
    parts, finish = [], None
    for ch in s:
        if ch.choices:
            parts.append(ch.choices[0].delta.content or "")
            finish = ch.choices[0].finish_reason or finish
    assert finish == "stop"
    jsonschema.validate(json.loads("".join(parts)), PERSON)


def test_json_object_is_an_object(client, served):
    r = client.chat.completions.create(model=served.model, messages=ASK, max_tokens=60, seed=5,
                                       response_format={"type": "json_object"})
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:  # cut: said so, and not a complete object
        assert c.finish_reason == "length"


def test_a_cut_reply_says_length(client, served):
    r = client.chat.completions.create(model=served.model, messages=ASK, max_tokens=4, seed=1,
                                       response_format=schema_format(PERSON))
    c = r.choices[0]
    assert c.finish_reason == "length"
    with pytest.raises(ValueError):
        json.loads(c.message.content)


def check_call(call):
    assert call.type == "function" and call.id
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, PARAMS[call.function.name])
    return args


def test_required_and_named_tool_calls_validate(client, served):
    for seed, choice in ((1, "required"), (2, "required"),
                         (3, {"type": "function", "function": {"name": "get_time"}})):
        r = client.chat.completions.create(model=served.model, messages=WEATHER_Q, max_tokens=80,
                                           seed=seed, tools=[WEATHER, TIME], tool_choice=choice)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert c.message.content is None
        assert len(c.message.tool_calls) == 1
        check_call(c.message.tool_calls[0])
        if isinstance(choice, dict):
            assert c.message.tool_calls[0].function.name == "get_time"


def test_streamed_tool_call_and_the_tool_reply_fed_back(client, served):
    s = client.chat.completions.create(model=served.model, messages=WEATHER_Q, max_tokens=80,
                                       seed=6, tools=[WEATHER], tool_choice="required",
                                       stream=True)
    calls, text, finish = [], "", None
    for ch in s:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        text += d.content or ""
        calls += d.tool_calls or []
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls" and text == ""
    assert len(calls) == 1
    args = json.loads(calls[0].function.arguments)
    jsonschema.validate(args, PARAMS["get_weather"])
    history = WEATHER_Q + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": calls[0].id, "type": "function",
            "function": {"name": calls[0].function.name, "arguments": calls[0].function.arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": '{"temperature": 21}'},
    ]
    r = client.chat.completions.create(model=served.model, messages=history, max_tokens=30,
                                       seed=7, tools=[WEATHER], tool_choice="none")
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length") and c.message.tool_calls is None
    assert isinstance(c.message.content, str)


def test_auto_gives_text_or_a_valid_call(client, served):
    for seed in (1, 2, 3, 4):
        r = client.chat.completions.create(model=served.model, messages=WEATHER_Q, max_tokens=60,
                                           seed=seed, tools=[WEATHER, TIME])
        c = r.choices[0]
        if c.finish_reason == "tool_calls":
            check_call(c.message.tool_calls[0])
        else:
            assert c.message.tool_calls is None and not c.message.content.startswith("<")


@pytest.mark.parametrize("kw,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}}},
     "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}}}],
      "tool_choice": "required"}, "tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"response_format": {"type": "xml"}}, "response_format"),
])
def test_bad_schemas_and_tools_are_400_naming_the_field(client, served, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=served.model, messages=ASK, max_tokens=8, **kw)
    assert e.value.param == param, e.value.body
