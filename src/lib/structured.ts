// Structured output in the UI: the JSON Schema text of "Reply as JSON (schema)" and
// "Extract fields as JSON", parsed and checked before it goes to the backend (which
// compiles it and names what it cannot use).
import type { ConstraintSpec } from './api';

/** A small starting schema: the fields of a typical contract. */
export const EXAMPLE_SCHEMA = {
  type: 'object',
  properties: {
    title: { type: 'string', maxLength: 80 },
    parties: { type: 'array', items: { type: 'string', maxLength: 60 }, maxItems: 4 },
    date: { type: 'string', format: 'date' },
    amount: { type: 'number', minimum: 0 },
  },
  required: ['title', 'parties'],
  additionalProperties: false,
};

/** The schema text of a constraint (the example when there is none). */
export function schemaText(c: ConstraintSpec | null | undefined): string {
  const v = c && c.type === 'json_schema' ? c.value : EXAMPLE_SCHEMA;
  return JSON.stringify(v, null, 2);
}

/** `text` as a JSON Schema: an object (or `true`), else a message saying why not. */
export function parseSchema(text: string): { schema?: unknown; error?: string } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return { error: `Not JSON: ${(e as Error).message}` };
  }
  if (v === true || (typeof v === 'object' && v !== null && !Array.isArray(v))) return { schema: v };
  return { error: 'A JSON Schema is an object, e.g. {"type": "object"}' };
}

/** Pretty-prints an extraction's JSON (left as it is when it does not parse: a cut one). */
export function prettyJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}
