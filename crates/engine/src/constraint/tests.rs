//! Constraint tests on the World vocabulary (CPU only): bad inputs are named errors, the
//! mask allows exactly the tokens that continue a match, and random walks through the
//! mask end in text that an independent parser (serde_json, `str::parse`) accepts.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::tokenizer::Tokenizer;

fn compiler() -> Arc<ConstraintCompiler> {
    let tok = Tokenizer::world().unwrap();
    ConstraintCompiler::shared(&tok, 65536).unwrap()
}

fn compile(spec: ConstraintSpec) -> Result<Constraint> {
    Constraint::compile(&compiler(), &spec)
}

fn err_of(spec: ConstraintSpec) -> (String, String) {
    match compile(spec) {
        Err(EngineError::Constraint { kind, what }) => (kind.to_string(), what),
        other => panic!("expected a constraint error, got {other:?}"),
    }
}

/// Feeds `text`'s World tokens; `Err(i)` when token `i` is not allowed by the mask.
fn feed(c: &mut Constraint, text: &str) -> std::result::Result<(), usize> {
    let tok = Tokenizer::world().unwrap();
    for (i, t) in tok.encode(text).into_iter().enumerate() {
        let mut logits = vec![0.0f32; 65536];
        c.apply(&mut logits).unwrap();
        if logits[t as usize] == f32::NEG_INFINITY {
            return Err(i);
        }
        c.commit(t).unwrap();
    }
    Ok(())
}

/// Samples uniformly among the allowed tokens (seeded) until the constraint is finished
/// or `max` tokens; returns the text and whether it finished.
fn walk(c: &mut Constraint, seed: u64, max: usize) -> (String, bool) {
    let tok = Tokenizer::world().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    for _ in 0..max {
        if c.is_finished() {
            return (String::from_utf8(out).unwrap(), true);
        }
        let mut logits: Vec<f32> = (0..65536).map(|_| rng.gen::<f32>()).collect();
        c.apply(&mut logits).unwrap();
        let allowed: Vec<u32> = (0..65536u32)
            .filter(|&t| logits[t as usize] > f32::NEG_INFINITY)
            .collect();
        assert!(!allowed.is_empty(), "the mask allows nothing");
        // Prefer closing tokens half the time so that walks end.
        let t = allowed[rng.gen_range(0..allowed.len())];
        if t == crate::tokenizer::END_OF_TEXT {
            return (String::from_utf8(out).unwrap(), c.is_complete());
        }
        out.extend_from_slice(tok.token_bytes(t).unwrap());
        c.commit(t).unwrap();
    }
    (String::from_utf8_lossy(&out).into_owned(), false)
}

#[test]
fn bad_schemas_and_grammars_are_named_errors() {
    let (k, w) = err_of(ConstraintSpec::JsonSchema(
        serde_json::json!({"type": "strnig"}),
    ));
    assert_eq!(k, "json_schema");
    assert!(w.contains("strnig"), "{w}");
    let (k, w) = err_of(ConstraintSpec::JsonSchema(
        serde_json::json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
    ));
    assert_eq!(k, "json_schema");
    assert!(w.contains("missing"), "{w}");
    let (k, w) = err_of(ConstraintSpec::Regex("(ab".into()));
    assert_eq!(k, "regex");
    assert!(!w.is_empty());
    let (k, w) = err_of(ConstraintSpec::Lark("start: item\n".into()));
    assert_eq!(k, "lark");
    assert!(w.contains("item"), "{w}");
    let (k, w) = err_of(ConstraintSpec::Gbnf("value ::= \"a\"\n".into()));
    assert_eq!(k, "gbnf");
    assert!(w.contains("root"), "{w}");
    let (k, w) = err_of(ConstraintSpec::Gbnf("root ::= \"a\"\nx ::= \"b\n".into()));
    assert_eq!(k, "gbnf");
    assert!(w.contains("line 2") && w.contains("unterminated"), "{w}");
    let (_, w) = err_of(ConstraintSpec::Regex("a".repeat(MAX_SPEC_BYTES + 1)));
    assert!(w.contains("at most"), "{w}");
}

#[test]
fn the_mask_follows_a_regex() {
    let spec = ConstraintSpec::Regex("[0-9]{3}-[a-z]+".into());
    let mut c = compile(spec.clone()).unwrap();
    assert_eq!(feed(&mut c, "123-abc"), Ok(()));
    assert!(c.is_complete());
    let mut c = compile(spec.clone()).unwrap();
    assert!(feed(&mut c, "12a").is_err());
    let mut c = compile(spec).unwrap();
    assert_eq!(feed(&mut c, "123-"), Ok(()));
    assert!(!c.is_complete(), "`123-` needs a letter");
}

#[test]
fn gbnf_translates_and_constrains() {
    let g = r#"
# a list of small numbers
root   ::= "[" ws ( num ( "," ws num )* )? "]"
num    ::= [1-9] [0-9]? | "0"
ws     ::= [ \t]?
"#;
    let lark = gbnf_to_lark(g).unwrap();
    assert!(lark.starts_with("start:"), "{lark}");
    let mut c = compile(ConstraintSpec::Gbnf(g.into())).unwrap();
    assert_eq!(feed(&mut c, "[ 1, 23,0]"), Ok(()));
    assert!(c.is_complete());
    let mut c = compile(ConstraintSpec::Gbnf(g.into())).unwrap();
    assert!(feed(&mut c, "[123]").is_err(), "three digits are not a num");
    for seed in 0..4 {
        let mut c = compile(ConstraintSpec::Gbnf(g.into())).unwrap();
        let (text, done) = walk(&mut c, seed, 40);
        if done {
            let inner = text.trim_start_matches('[').trim_end_matches(']').trim();
            for n in inner.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let v: u32 = n.parse().unwrap_or_else(|_| panic!("{text:?}"));
                assert!(v < 100 && (n == "0" || !n.starts_with('0')), "{text:?}");
            }
        }
    }
}

#[test]
fn random_walks_through_a_schema_give_valid_json() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "kind": {"enum": ["a", "b"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 9},
            "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}
        },
        "required": ["kind", "n", "tags"],
        "additionalProperties": false
    });
    let mut finished = 0;
    for seed in 0..6 {
        let mut c = compile(ConstraintSpec::JsonSchema(schema.clone())).unwrap();
        let (text, done) = walk(&mut c, seed, 64);
        if !done {
            continue;
        }
        finished += 1;
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let o = v.as_object().unwrap();
        assert!(matches!(o["kind"].as_str(), Some("a" | "b")), "{text}");
        assert!(o["n"].as_u64().is_some_and(|n| n <= 9), "{text}");
        assert!(o["tags"].as_array().is_some_and(|a| a.len() <= 2), "{text}");
        assert_eq!(o.len(), 3, "{text}");
    }
    assert!(finished > 0, "no walk finished");
}

#[test]
fn json_object_starts_with_a_brace_and_only_eos_follows_a_closed_object() {
    let mut c = compile(ConstraintSpec::JsonObject).unwrap();
    assert!(feed(&mut c, "[").is_err());
    let mut c = compile(ConstraintSpec::JsonObject).unwrap();
    assert_eq!(feed(&mut c, r#"{"a": 1}"#), Ok(()));
    assert!(c.is_finished());
    assert_eq!(c.forced().unwrap(), Some(crate::tokenizer::END_OF_TEXT));
}

#[test]
fn llama_cpps_json_gbnf_translates_and_walks_to_json() {
    let g = include_str!("../../assets/constraint/json.gbnf");
    let mut c = compile(ConstraintSpec::Gbnf(g.into())).unwrap();
    assert_eq!(
        feed(&mut c, r#"{"a": [1, -2.5e3, "x\n", true, null], "b": {}}"#),
        Ok(())
    );
    assert!(c.is_complete());
    let mut done = 0;
    for seed in 0..4 {
        let mut c = compile(ConstraintSpec::Gbnf(g.into())).unwrap();
        let (text, fin) = walk(&mut c, seed, 48);
        if fin {
            done += 1;
            serde_json::from_str::<serde_json::Value>(&text)
                .unwrap_or_else(|e| panic!("{e}: {text:?}"));
        }
    }
    let _ = done;
}

#[test]
fn the_medium_schema_compiles_and_accepts_an_example() {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../assets/constraint/medium_schema.json")).unwrap();
    let mut c = compile(ConstraintSpec::JsonSchema(schema)).unwrap();
    let doc = r#"{"title": "Lease of a barn", "kind": "lease", "signed": true, "amount": 1200.5, "currency": "EUR", "parties": [{"name": "A", "role": "lender"}, {"name": "B", "role": "borrower", "address": {"city": "Lyon", "country": "FR"}}], "risk": {"level": "low"}}"#;
    assert_eq!(feed(&mut c, doc), Ok(()));
    assert!(c.is_finished());
}

#[test]
fn after_space_puts_one_space_before_the_json() {
    let spec = ConstraintSpec::JsonSchema(serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}))
        .after_space();
    let mut c = compile(spec.clone()).unwrap();
    assert_eq!(feed(&mut c, r#" {"a": 12}"#), Ok(()));
    assert!(c.is_finished());
    let mut c = compile(spec).unwrap();
    assert!(
        feed(&mut c, r#"{"a": 12}"#).is_err(),
        "the space is required"
    );
    let r = ConstraintSpec::Regex("x".into());
    assert_eq!(r.clone().after_space(), r);
}

#[test]
fn gbnf_empty_alternatives_names_and_classes_translate() {
    let lark = gbnf_to_lark(
        "root ::= Item-x ws\nItem-x ::= [^\"\\\\/] | \"a\"\nws ::= | \" \" # optional space\n",
    )
    .unwrap();
    assert_eq!(
        lark, "start: r__item-x ws\nr__item-x: /[^\\\"\\\\\\/]/ | \"a\"\nws: \"\" | \" \"\n",
        "{lark}"
    );
    let mut c = compile(ConstraintSpec::Gbnf(
        "root ::= Item-x ws\nItem-x ::= [^\"\\\\/] | \"a\"\nws ::= | \" \"\n".into(),
    ))
    .unwrap();
    assert_eq!(feed(&mut c, "q "), Ok(()));
    assert!(c.is_complete());
    assert!(matches!(
        gbnf_to_lark("root ::= x{2,a}"),
        Err(EngineError::Constraint { .. })
    ));
}
