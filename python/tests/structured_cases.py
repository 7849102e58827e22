"""The schemas, regexes and grammars of test_structured.py.

SCHEMAS: (name, schema). The ``jsts_*`` ones are copied from the JSON-Schema-Test-Suite
(https://github.com/json-schema-org/JSON-Schema-Test-Suite, tests/draft2020-12/<file>.json,
the schema of the named group) for the keywords docs/structured-output.md claims.
"""

OBJ = "object"

SCHEMAS = [
    # --- JSON-Schema-Test-Suite (draft2020-12), one group's schema each ---
    ("jsts_type_integer", {"type": "integer"}),  # type.json "integer type matches integers"
    ("jsts_type_number", {"type": "number"}),  # type.json "number type matches numbers"
    ("jsts_type_string", {"type": "string", "maxLength": 20}),  # type.json (+maxLength: short runs)
    ("jsts_type_boolean", {"type": "boolean"}),  # type.json "boolean type matches booleans"
    ("jsts_type_null", {"type": "null"}),  # type.json "null type matches only the null object"
    ("jsts_type_multiple", {"type": ["integer", "string"], "maxLength": 12}),  # type.json "multiple types can be specified in an array"
    ("jsts_enum_simple", {"enum": [1, 2, 3]}),  # enum.json "simple enum validation"
    ("jsts_enum_heterogeneous", {"enum": [6, "foo", [], True, {"foo": 12}]}),  # enum.json "heterogeneous enum validation"
    ("jsts_enum_in_properties", {  # enum.json "enums in properties"
        "type": "object",
        "properties": {"foo": {"enum": ["foo"]}, "bar": {"enum": ["bar"]}},
        "required": ["bar"],
    }),
    ("jsts_const", {"const": 2}),  # const.json "const validation"
    ("jsts_const_object", {"const": {"foo": "bar", "baz": "bax"}}),  # const.json "const with object"
    ("jsts_const_array", {"const": [{"foo": "bar"}]}),  # const.json "const with array"
    ("jsts_anyof", {"anyOf": [{"type": "integer"}, {"minimum": 2}]}),  # anyOf.json "anyOf"
    ("jsts_anyof_base", {"type": "string", "anyOf": [{"maxLength": 2}, {"minLength": 4, "maxLength": 8}]}),  # anyOf.json "anyOf with base schema" (+maxLength)
    ("jsts_anyof_complex", {"anyOf": [  # anyOf.json "anyOf complex types"
        {"properties": {"bar": {"type": "integer"}}, "required": ["bar"], "additionalProperties": False},
        {"properties": {"foo": {"type": "string", "maxLength": 10}}, "required": ["foo"], "additionalProperties": False},
    ]}),
    ("jsts_items", {"type": "array", "items": {"type": "integer"}, "maxItems": 6}),  # items.json "a schema given for items" (+maxItems)
    ("jsts_maxitems", {"type": "array", "maxItems": 2, "items": {"type": "integer"}}),  # maxItems.json "maxItems validation"
    ("jsts_minitems", {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "boolean"}}),  # minItems.json "minItems validation"
    ("jsts_pattern", {"type": "string", "pattern": "^a*$", "maxLength": 8}),  # pattern.json "pattern validation"
    ("jsts_pattern_unanchored", {"type": "string", "pattern": "^[a-z]+[0-9]$"}),  # pattern.json-like, anchored
    ("jsts_properties", {  # properties.json "object properties validation"
        "type": "object",
        "properties": {"foo": {"type": "integer"}, "bar": {"type": "string", "maxLength": 10}},
        "additionalProperties": False,
    }),
    ("jsts_required", {  # required.json "required validation"
        "type": "object",
        "properties": {"foo": {"type": "integer"}, "bar": {"type": "boolean"}},
        "required": ["foo"],
        "additionalProperties": False,
    }),
    ("jsts_additional_false", {  # additionalProperties.json "additionalProperties being false does not allow other properties"
        "type": "object",
        "properties": {"foo": {"type": "integer"}, "bar": {"type": "integer"}},
        "additionalProperties": False,
    }),
    ("jsts_additional_schema", {  # additionalProperties.json "additionalProperties allows a schema which should validate"
        "type": "object",
        "properties": {"foo": {"type": "integer"}, "bar": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"},
        "required": ["foo", "bar"],  # llguidance: maxProperties needs every listed property required
        "maxProperties": 3,
    }),
    ("jsts_minimum", {"type": "number", "minimum": 1.1}),  # minimum.json "minimum validation"
    ("jsts_maximum", {"type": "integer", "maximum": 3}),  # maximum.json "maximum validation" (integer)
    ("jsts_exclusive_minimum", {"type": "integer", "exclusiveMinimum": 1}),  # exclusiveMinimum.json
    ("jsts_minlength", {"type": "string", "minLength": 2, "maxLength": 6}),  # minLength.json + maxLength.json
    ("jsts_ref_defs", {  # ref.json "$ref to $defs"
        "$defs": {"a": {"type": "integer"}},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}},
        "required": ["x"],
        "additionalProperties": False,
    }),
    ("jsts_allof", {  # allOf.json "allOf"
        "allOf": [
            {"properties": {"bar": {"type": "integer"}}, "required": ["bar"]},
            {"properties": {"foo": {"type": "string", "maxLength": 8}}, "required": ["foo"]},
        ],
        "additionalProperties": False,
        "properties": {"bar": {}, "foo": {}},
    }),
    ("jsts_prefix_items", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "maxLength": 6}], "items": False}),  # prefixItems.json
    # --- our own: simple objects ---
    ("person", {"type": OBJ, "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0, "maximum": 130}}, "required": ["name", "age"], "additionalProperties": False}),
    ("point", {"type": OBJ, "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"], "additionalProperties": False}),
    ("flag", {"type": OBJ, "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}),
    ("empty_object", {"type": OBJ, "additionalProperties": False}),
    ("any_object", {"type": OBJ, "maxProperties": 2}),
    ("nullable", {"type": OBJ, "properties": {"v": {"type": ["string", "null"], "maxLength": 10}}, "required": ["v"], "additionalProperties": False}),
    ("color_enum", {"type": OBJ, "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"], "additionalProperties": False}),
    ("status_const", {"type": OBJ, "properties": {"status": {"const": "ok"}, "code": {"type": "integer", "minimum": 100, "maximum": 599}}, "required": ["status", "code"], "additionalProperties": False}),
    ("optional_fields", {"type": OBJ, "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}, "additionalProperties": False}),
    ("bounded_number", {"type": OBJ, "properties": {"p": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["p"], "additionalProperties": False}),
    ("negative_int", {"type": "integer", "maximum": -1}),
    ("short_string", {"type": "string", "minLength": 1, "maxLength": 5}),
    # --- formats ---
    ("date", {"type": OBJ, "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"], "additionalProperties": False}),
    ("time", {"type": OBJ, "properties": {"t": {"type": "string", "format": "time"}}, "required": ["t"], "additionalProperties": False}),
    ("date_time", {"type": OBJ, "properties": {"at": {"type": "string", "format": "date-time"}}, "required": ["at"], "additionalProperties": False}),
    ("uuid", {"type": "string", "format": "uuid"}),
    ("email", {"type": "string", "format": "email", "maxLength": 40}),
    # --- patterns ---
    ("zip_pattern", {"type": OBJ, "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"], "additionalProperties": False}),
    ("code_pattern", {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}),
    ("hex_pattern", {"type": "string", "pattern": "^#[0-9a-f]{6}$"}),
    ("phone_pattern", {"type": OBJ, "properties": {"phone": {"type": "string", "pattern": "^\\+[0-9]{2} [0-9]{3} [0-9]{4}$"}}, "required": ["phone"], "additionalProperties": False}),
    # --- arrays ---
    ("int_list", {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 2, "maxItems": 4}),
    ("string_list", {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3}),
    ("enum_list", {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 5}),
    ("tags", {"type": OBJ, "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3}}, "required": ["tags"], "additionalProperties": False}),
    ("matrix", {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 2}, "minItems": 2, "maxItems": 2}),
    ("bool_pairs", {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}, "maxItems": 3}),
    # --- nested ---
    ("address", {"type": OBJ, "properties": {
        "name": {"type": "string", "maxLength": 20},
        "address": {"type": OBJ, "properties": {"city": {"type": "string", "maxLength": 20}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"], "additionalProperties": False},
    }, "required": ["name", "address"], "additionalProperties": False}),
    ("order", {"type": OBJ, "properties": {
        "id": {"type": "integer", "minimum": 1},
        "items": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": OBJ, "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["sku", "qty"], "additionalProperties": False}},
        "paid": {"type": "boolean"},
    }, "required": ["id", "items", "paid"], "additionalProperties": False}),
    ("tree", {"type": OBJ, "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "maxItems": 2, "items": {"type": OBJ, "properties": {"v": {"type": "integer"}}, "required": ["v"], "additionalProperties": False}}}, "required": ["v", "kids"], "additionalProperties": False}),
    ("event", {"type": OBJ, "properties": {
        "title": {"type": "string", "maxLength": 24},
        "when": {"type": "string", "format": "date"},
        "where": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 16}]},
        "kind": {"enum": ["meeting", "call", "trip"]},
    }, "required": ["title", "when", "kind"], "additionalProperties": False}),
    ("shape_anyof", {"anyOf": [
        {"type": OBJ, "properties": {"circle": {"type": "number", "minimum": 0}}, "required": ["circle"], "additionalProperties": False},
        {"type": OBJ, "properties": {"square": {"type": "number", "minimum": 0}}, "required": ["square"], "additionalProperties": False},
    ]}),
    ("result_oneof_like", {"type": OBJ, "properties": {"result": {"anyOf": [{"type": "integer"}, {"type": "boolean"}, {"type": "null"}]}}, "required": ["result"], "additionalProperties": False}),
    ("contract_small", {"type": OBJ, "properties": {
        "parties": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "string", "maxLength": 16}},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"enum": ["USD", "EUR"]},
        "signed": {"type": "string", "format": "date"},
    }, "required": ["parties", "amount", "currency"], "additionalProperties": False}),
    ("deep", {"type": OBJ, "properties": {"a": {"type": OBJ, "properties": {"b": {"type": OBJ, "properties": {"c": {"type": OBJ, "properties": {"d": {"type": "integer"}}, "required": ["d"], "additionalProperties": False}}, "required": ["c"], "additionalProperties": False}}, "required": ["b"], "additionalProperties": False}}, "required": ["a"], "additionalProperties": False}),
    ("const_in_array", {"type": "array", "items": {"const": "x"}, "minItems": 1, "maxItems": 3}),
    ("defs_array", {"$defs": {"pt": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}], "items": False}}, "type": "array", "items": {"$ref": "#/$defs/pt"}, "maxItems": 2}),
]

# (name, regex); Python's re.fullmatch checks the output (the syntax is common to Rust's
# regex and Python's re).
REGEXES = [
    ("phone", r"[0-9]{3}-[0-9]{4}"),
    ("yes_no", r"(yes|no)"),
    ("name", r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?"),
    ("email", r"[a-z]{3,8}@[a-z]{3,8}\.(com|org)"),
    ("date", r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9])"),
    ("hex", r"0x[0-9a-f]{4}"),
    ("ipv4", r"([0-9]{1,3}\.){3}[0-9]{1,3}"),
    ("clock", r"([01][0-9]|2[0-3]):[0-5][0-9]"),
    ("colors", r"(red|green|blue)( and (red|green|blue))?"),
    ("decimal", r"-?[1-9][0-9]{0,3}(\.[0-9]{1,2})?"),
]

# GBNF / Lark grammars, each with a checker written independently of the grammar engine.
ARITH_GBNF = r"""
root ::= expr
expr ::= term (("+" | "-") term){0,3}
term ::= num | "(" expr ")"
num  ::= [1-9] [0-9]{0,2}
"""

CSV_GBNF = r"""
root  ::= field "," field "," field
field ::= [a-z]{1,8} | [0-9]{1,4}
"""

WORDS_LARK = r"""
start: "[" WORD ("," " " WORD){0,3} "]"
WORD: /[a-z]{1,10}/
"""

KV_GBNF = r"""
root ::= pair (";" pair){0,2}
pair ::= key "=" value
key  ::= [a-z]{1,6}
value ::= [0-9]{1,3} | "true" | "false"
"""
