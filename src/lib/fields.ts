// Field analysis, display side: vector norms, the cosine-similarity matrix and exports.
// The vectors come from the engine (one batched pass); this only compares them.
// When the engine's `analysis` module returns similarities itself, the view shows those.

import type { FieldsResult } from './api';

export function norm(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i] * v[i];
  return Math.sqrt(s);
}

/** Cosine similarity; 0 when either vector is zero. */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`vectors of ${a.length} and ${b.length} values`);
  let dot = 0;
  for (let i = 0; i < a.length; i++) dot += a[i] * b[i];
  const n = norm(a) * norm(b);
  return n === 0 ? 0 : dot / n;
}

/** `[n][n]` cosine similarities. */
export function similarityMatrix(vectors: ArrayLike<number>[]): number[][] {
  return vectors.map((a) => vectors.map((b) => cosine(a, b)));
}

function csvCell(s: string): string {
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** CSV: one row per field: label, tokens, norm, then its similarity to every field. */
export function toCsv(r: FieldsResult): string {
  const sim = similarityMatrix(r.vectors);
  const head = ['field', 'tokens', 'norm', ...r.meta.labels].map(csvCell).join(',');
  const rows = r.meta.labels.map((label, i) =>
    [csvCell(label), String(r.meta.tokens[i]), norm(r.vectors[i]).toFixed(6), ...sim[i].map((x) => x.toFixed(6))].join(','),
  );
  return [head, ...rows].join('\n') + '\n';
}

/** JSON: the meta, norms, the similarity matrix and the vectors. */
export function toJson(r: FieldsResult): string {
  return JSON.stringify(
    {
      ...r.meta,
      norms: r.vectors.map((v) => norm(v)),
      similarity: similarityMatrix(r.vectors),
      vectors: r.vectors.map((v) => Array.from(v)),
    },
    null,
    2,
  );
}
