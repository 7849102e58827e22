//! Structured output for chat: `response_format` and `tools` / `tool_choice` → the
//! constraint the reply is decoded under, the tools' description in the prompt, and a
//! tool call read back out of the reply. Pure (no engine, no HTTP).
//!
//! Tool-call format (Hermes style, which RWKV G1 models saw in training): the reply is
//! ` <tool_call>{"name": NAME, "arguments": {...}}</tool_call>`; `arguments` is
//! constrained to that function's `parameters` schema. One call per reply.
//! - `tool_choice` `"auto"` (the default with tools): either that, or text that does not
//!   start with `<`;
//! - `"required"`: a call of one of the functions; `{"type": "function", "function":
//!   {"name": N}}`: a call of N;
//! - `"none"`: free text (the tools are still described).
//!
//! Replies start after `Assistant:`; every constrained reply begins with one space (what
//! the model writes there), which the response drops like any leading whitespace.

use rwkv_engine::constraint::compact_json_options;
use rwkv_engine::ConstraintSpec;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::openai::request::{ChatRequest, ResponseFormat};

/// Opens a tool call in a reply.
pub const CALL_OPEN: &str = "<tool_call>";
/// Closes it.
pub const CALL_CLOSE: &str = "</tool_call>";
/// Most tools one request may list.
pub const MAX_TOOLS: usize = 128;

/// What a chat request asks of its reply's shape.
#[derive(Debug, Clone, Default)]
pub struct Structured {
    /// The constraint to decode under; `None`: free text.
    pub spec: Option<ConstraintSpec>,
    /// The reply may be a tool call: read one back into `tool_calls`.
    pub tool_calls: bool,
    /// The tools' description, rendered as a system message before the conversation.
    pub preamble: Option<String>,
}

/// One function of `tools`.
#[derive(Debug, Clone)]
struct Function {
    name: String,
    description: String,
    parameters: Value,
}

/// `response_format`, `tools` and `tool_choice` of `req`, checked.
///
/// Errors: 400 naming the field: an unknown `response_format.type`, a `json_schema`
/// whose `schema` is not an object, a tool that is not `{"type": "function", "function":
/// {"name": …}}` or more than [`MAX_TOOLS`], a `tool_choice` that is not `none` / `auto`
/// / `required` / a listed function, `tool_choice` without tools, a JSON
/// `response_format` together with tools.
pub fn structured(req: &ChatRequest) -> Result<Structured, ApiError> {
    let format = response_spec(req.response_format.as_ref())?;
    let tools = functions(req.tools.as_deref().unwrap_or(&[]))?;
    if tools.is_empty() {
        if req.tool_choice.as_ref().is_some_and(|c| c != "none") {
            return Err(ApiError::invalid(
                Some("tool_choice"),
                "`tool_choice` needs `tools`",
            ));
        }
        return Ok(Structured {
            spec: format,
            ..Default::default()
        });
    }
    if format.is_some() {
        return Err(ApiError::invalid(
            Some("response_format"),
            "a JSON `response_format` together with `tools` is not supported; use one",
        ));
    }
    let preamble = Some(preamble(&tools));
    let choice = req.tool_choice.clone().unwrap_or(json!("auto"));
    let (call_schema, auto) = match &choice {
        Value::String(s) if s == "none" => {
            return Ok(Structured {
                preamble,
                ..Default::default()
            })
        }
        Value::String(s) if s == "auto" => (calls_schema(&tools), true),
        Value::String(s) if s == "required" => (calls_schema(&tools), false),
        Value::Object(o) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid(
                        Some("tool_choice"),
                        "expected {\"type\": \"function\", \"function\": {\"name\": …}}",
                    )
                })?;
            let f = tools.iter().find(|f| f.name == name).ok_or_else(|| {
                ApiError::invalid(
                    Some("tool_choice"),
                    format!("`tool_choice` names `{name}`, which is not among `tools`"),
                )
            })?;
            (call_schema(f), false)
        }
        other => {
            return Err(ApiError::invalid(
                Some("tool_choice"),
                format!("`tool_choice` {other}: expected none, auto, required or a function"),
            ))
        }
    };
    let schema = serde_json::to_string(&with_compact(call_schema)).unwrap_or_default();
    let call = format!("{CALL_OPEN:?} call {CALL_CLOSE:?}");
    let lark = if auto {
        // Text may not start with `<` (so a reply is one or the other); it ends at the
        // chat's blank line (a stop string) like any reply.
        format!("start: \" \" ({call} | TEXT)\nTEXT: /[^<](?s:.)*/\ncall: %json {schema}\n")
    } else {
        format!("start: \" \" {call}\ncall: %json {schema}\n")
    };
    Ok(Structured {
        spec: Some(ConstraintSpec::Lark(lark)),
        tool_calls: true,
        preamble,
    })
}

/// `response_format` → a constraint: `text` none, `json_object` any object,
/// `json_schema` its `schema` (any object when absent). Both after one space.
fn response_spec(f: Option<&ResponseFormat>) -> Result<Option<ConstraintSpec>, ApiError> {
    let Some(f) = f else { return Ok(None) };
    let schema = match f.kind.as_str() {
        "text" => return Ok(None),
        "json_object" => json!({"type": "object"}),
        "json_schema" => match f.json_schema.as_ref().and_then(|j| j.get("schema")) {
            None => json!({"type": "object"}),
            Some(s) if s.is_object() || s.is_boolean() => s.clone(),
            Some(_) => {
                return Err(ApiError::invalid(
                    Some("response_format.json_schema.schema"),
                    "`schema` must be a JSON Schema object",
                ))
            }
        },
        other => {
            return Err(ApiError::invalid(
                Some("response_format"),
                format!("response_format `{other}`: expected text, json_object or json_schema"),
            ))
        }
    };
    Ok(Some(ConstraintSpec::JsonSchema(schema).after_space()))
}

fn with_compact(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(compact_json_options);
    }
    schema
}

fn functions(tools: &[Value]) -> Result<Vec<Function>, ApiError> {
    if tools.len() > MAX_TOOLS {
        return Err(ApiError::invalid(
            Some("tools"),
            format!("{} tools; at most {MAX_TOOLS}", tools.len()),
        ));
    }
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let bad = |what: &str| ApiError::invalid(Some("tools"), format!("tools[{i}]: {what}"));
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad("only `{\"type\": \"function\"}` tools are supported"));
            }
            let f = t
                .get("function")
                .ok_or_else(|| bad("`function` is missing"))?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty() && n.len() <= 64)
                .ok_or_else(|| bad("`function.name` must be a string of 1 to 64 characters"))?;
            let parameters = match f.get("parameters") {
                None => json!({"type": "object"}),
                Some(p) if p.is_object() => p.clone(),
                Some(_) => return Err(bad("`function.parameters` must be a JSON Schema object")),
            };
            Ok(Function {
                name: name.to_string(),
                description: f
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                parameters,
            })
        })
        .collect()
}

/// `{"name": const, "arguments": parameters}`, in that order.
fn call_schema(f: &Function) -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"const": f.name}, "arguments": f.parameters},
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}

fn calls_schema(fs: &[Function]) -> Value {
    match fs {
        [one] => call_schema(one),
        many => json!({"anyOf": many.iter().map(call_schema).collect::<Vec<_>>()}),
    }
}

/// The system message that describes the tools (one JSON line per function).
fn preamble(fs: &[Function]) -> String {
    let mut s = String::from(
        "You can call these functions. To call one, reply with only <tool_call>{\"name\": \
         NAME, \"arguments\": ARGUMENTS}</tool_call>; otherwise reply in text.",
    );
    for f in fs {
        let line =
            json!({"name": f.name, "description": f.description, "parameters": f.parameters});
        s.push('\n');
        s.push_str(&line.to_string());
    }
    s
}

/// A reply's tool call: `(name, arguments as JSON text)`, when the reply (leading
/// whitespace dropped) is exactly one `<tool_call>{…}</tool_call>` with a string `name`.
pub fn parse_call(reply: &str) -> Option<(String, String)> {
    let inner = reply
        .trim()
        .strip_prefix(CALL_OPEN)?
        .strip_suffix(CALL_CLOSE)?;
    let v: Value = serde_json::from_str(inner).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let args = v.get("arguments").cloned().unwrap_or(json!({}));
    Some((name, args.to_string()))
}

/// An assistant message's tool call as the reply text the model wrote for it (history
/// sent back by a client).
pub fn call_text(name: &str, arguments: &str) -> String {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::String(arguments.into()));
    format!(
        "{CALL_OPEN}{{\"name\": {}, \"arguments\": {}}}{CALL_CLOSE}",
        Value::String(name.into()),
        args
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(extra: Value) -> ChatRequest {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(body).unwrap()
    }

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    }

    #[test]
    fn formats_and_tool_choices_become_constraints() {
        assert!(structured(&req(json!({}))).unwrap().spec.is_none());
        let s = structured(&req(json!({"response_format": {"type": "json_object"}}))).unwrap();
        assert!(matches!(s.spec, Some(ConstraintSpec::Lark(ref g)) if g.contains("%json")));
        let s = structured(&req(json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})))
        .unwrap();
        assert!(matches!(s.spec, Some(ConstraintSpec::Lark(ref g)) if g.contains("\"a\"")));
        let s = structured(&req(json!({"tools": weather()}))).unwrap();
        assert!(s.tool_calls && s.preamble.as_deref().unwrap().contains("get_weather"));
        assert!(matches!(s.spec, Some(ConstraintSpec::Lark(ref g)) if g.contains("TEXT")));
        let s = structured(&req(json!({"tools": weather(), "tool_choice": "required"}))).unwrap();
        assert!(matches!(s.spec, Some(ConstraintSpec::Lark(ref g)) if !g.contains("TEXT")));
        let s = structured(&req(json!({"tools": weather(), "tool_choice": "none"}))).unwrap();
        assert!(s.spec.is_none() && !s.tool_calls);
        for (extra, param) in [
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format",
            ),
            (json!({"tool_choice": "auto"}), "tool_choice"),
            (
                json!({"tools": weather(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice",
            ),
            (json!({"tools": [{"type": "retrieval"}]}), "tools"),
            (
                json!({"tools": weather(), "response_format": {"type": "json_object"}}),
                "response_format",
            ),
        ] {
            let e = structured(&req(extra.clone())).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{extra}");
        }
    }

    #[test]
    fn tool_calls_read_back_and_render_the_same() {
        let text = call_text("get_weather", r#"{"city":"Paris"}"#);
        assert_eq!(
            text,
            r#"<tool_call>{"name": "get_weather", "arguments": {"city":"Paris"}}</tool_call>"#
        );
        let (name, args) = parse_call(&format!(" {text}")).unwrap();
        assert_eq!(name, "get_weather");
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap(),
            json!({"city": "Paris"})
        );
        assert!(parse_call("<tool_call>{\"name\": 3}</tool_call>").is_none());
        assert!(parse_call("plain text").is_none());
    }
}
