// Field analysis exports. The engine computes the vectors, norms and similarities
// (`Engine::analyze_fields`); this only writes them out.

import type { FieldsResult } from './api';

function csvCell(s: string): string {
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** CSV: one row per field: label, tokens, norm, then its similarity to every field. */
export function toCsv(r: FieldsResult): string {
  const labels = r.meta.fields.map((f) => f.label);
  const head = ['field', 'tokens', 'norm', ...labels].map(csvCell).join(',');
  const rows = r.meta.fields.map((f, i) =>
    [csvCell(f.label), String(f.tokens), f.norm.toFixed(6), ...r.meta.similarity[i].map((x) => x.toFixed(6))].join(','),
  );
  return [head, ...rows].join('\n') + '\n';
}

/** JSON: the engine's analysis, with the vectors back in place. */
export function toJson(r: FieldsResult): string {
  return JSON.stringify(
    {
      ...r.meta,
      fields: r.meta.fields.map((f, i) => ({ ...f, embedding: Array.from(r.vectors[i]) })),
    },
    null,
    2,
  );
}
