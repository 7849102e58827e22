import { describe, expect, it } from 'vitest';
import { toCsv, toJson } from './fields';
import type { FieldsResult } from './api';

const field = (label: string, tokens: number, norm: number) => ({
  label, tokens, norm, embedding: [], cached: false, time_share: 0.5, time_ms: 1,
});

const result: FieldsResult = {
  meta: {
    model: 'ab12', pooling: 'last', with_document: false, dim: 2,
    fields: [field('Title', 3, 1), field('A, "quoted" one', 5, Math.SQRT2)],
    similarity: [[1, 0.7071068], [0.7071068, 1]],
    timing: { total_ms: 3, tokenize_ms: 0.1, forward_ms: 2.5, similarity_ms: 0.01 },
    document: null, setup_ms: 0, resumed: true, adapters: { loras: [], init_state: null },
  },
  vectors: [new Float32Array([1, 0]), new Float32Array([1, 1])],
};

describe('field exports', () => {
  it('CSV quotes labels and lists tokens, norms and similarities', () => {
    const lines = toCsv(result).trim().split('\n');
    expect(lines[0]).toBe('field,tokens,norm,Title,"A, ""quoted"" one"');
    expect(lines[1]).toBe('Title,3,1.000000,1.000000,0.707107');
    expect(lines[2]).toBe('"A, ""quoted"" one",5,1.414214,0.707107,1.000000');
  });

  it('JSON puts the vectors back into the fields', () => {
    const j = JSON.parse(toJson(result));
    expect(j.fields.map((f: { embedding: number[] }) => f.embedding)).toEqual([[1, 0], [1, 1]]);
    expect(j.similarity[0][1]).toBeCloseTo(Math.SQRT1_2, 6);
    expect(j.timing.forward_ms).toBe(2.5);
  });
});
