import { describe, expect, it } from 'vitest';
import { EXAMPLE_SCHEMA, parseSchema, prettyJson, schemaText } from './structured';

describe('structured output helpers', () => {
  it('parses objects and true as schemas, and names what is not one', () => {
    expect(parseSchema('{"type": "object"}').schema).toEqual({ type: 'object' });
    expect(parseSchema('true').schema).toBe(true);
    expect(parseSchema('[1]').error).toMatch(/object/);
    expect(parseSchema('{nope').error).toMatch(/^Not JSON/);
  });

  it('shows the stored schema, or the example', () => {
    expect(JSON.parse(schemaText(null))).toEqual(EXAMPLE_SCHEMA);
    expect(JSON.parse(schemaText({ type: 'json_schema', value: { type: 'integer' } }))).toEqual({ type: 'integer' });
  });

  it('pretty-prints JSON and leaves a cut one alone', () => {
    expect(prettyJson('{"a":1}')).toBe('{\n  "a": 1\n}');
    expect(prettyJson('{"a": ')).toBe('{"a": ');
  });
});
