import { describe, expect, it } from 'vitest';
import { cosine, norm, similarityMatrix, toCsv, toJson } from './fields';
import type { FieldsResult } from './api';

describe('field maths', () => {
  it('norm and cosine of known vectors', () => {
    expect(norm([3, 4])).toBe(5);
    expect(cosine([1, 0], [0, 2])).toBe(0);
    expect(cosine([1, 1], [2, 2])).toBeCloseTo(1, 12);
    expect(cosine([1, 0], [-3, 0])).toBeCloseTo(-1, 12);
    expect(cosine([0, 0], [1, 2])).toBe(0);
    expect(() => cosine([1], [1, 2])).toThrow();
  });

  it('similarity matrix is symmetric with a unit diagonal', () => {
    const m = similarityMatrix([new Float32Array([1, 2, 3]), new Float32Array([-1, 0.5, 2]), new Float32Array([0, 1, 0])]);
    expect(m).toHaveLength(3);
    for (let i = 0; i < 3; i++) {
      expect(m[i][i]).toBeCloseTo(1, 6);
      for (let j = 0; j < 3; j++) expect(m[i][j]).toBeCloseTo(m[j][i], 12);
    }
    // (1,2,3)·(0,1,0) / (√14 · 1)
    expect(m[0][2]).toBeCloseTo(2 / Math.sqrt(14), 6);
  });

  const result: FieldsResult = {
    meta: { labels: ['Title', 'A, "quoted" one'], tokens: [3, 5], dim: 2, document: null, setup_ms: 1, embed_ms: 2, resumed: true, model: 'm.gguf' },
    vectors: [new Float32Array([1, 0]), new Float32Array([1, 1])],
  };

  it('CSV quotes labels and lists norms and similarities', () => {
    const lines = toCsv(result).trim().split('\n');
    expect(lines[0]).toBe('field,tokens,norm,Title,"A, ""quoted"" one"');
    expect(lines[1]).toBe('Title,3,1.000000,1.000000,0.707107');
    expect(lines[2].startsWith('"A, ""quoted"" one",5,1.414214,0.707107,')).toBe(true);
  });

  it('JSON holds vectors, norms and the matrix', () => {
    const j = JSON.parse(toJson(result));
    expect(j.vectors).toEqual([[1, 0], [1, 1]]);
    expect(j.norms[1]).toBeCloseTo(Math.SQRT2, 6);
    expect(j.similarity[0][1]).toBeCloseTo(Math.SQRT1_2, 6);
    expect(j.labels).toEqual(result.meta.labels);
  });
});
