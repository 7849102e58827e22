// Adapter sets for people: what a chat, document or run used, as short labels.

import type { AdapterLibrary, AdapterSet, BenchReport } from './api';
import { baseName } from './format';

/** What new chats, documents and analyses use: as `library::Library::current` in Rust. */
export function currentSet(lib: AdapterLibrary | null): AdapterSet {
  return {
    loras: (lib?.loras ?? []).filter((l) => l.enabled).map((l) => ({ path: l.path, scale: l.scale })),
    init_state: lib?.states.find((s) => s.active)?.path ?? null,
  };
}

export function isBase(set: AdapterSet | null | undefined): boolean {
  return !set || (set.loras.length === 0 && !set.init_state);
}

/** A scale as shown: up to 3 decimals, no trailing zeros (`0.5`, `2`, `-1.25`). */
export function fmtScale(s: number): string {
  return String(Number(s.toFixed(3)));
}

export interface AdapterLabel {
  kind: 'lora' | 'state';
  /** `style.safetensors ×0.5`, `state: tuned.pth`. */
  text: string;
  /** The full path. */
  title: string;
}

/** One label per LoRA (with its scale), then the initial state. */
export function setLabels(set: AdapterSet | null | undefined): AdapterLabel[] {
  if (!set) return [];
  const out: AdapterLabel[] = set.loras.map((l) => ({
    kind: 'lora',
    text: `${baseName(l.path)} ×${fmtScale(l.scale)}`,
    title: l.path,
  }));
  if (set.init_state) {
    out.push({ kind: 'state', text: `state: ${baseName(set.init_state)}`, title: set.init_state });
  }
  return out;
}

/** What a benchmark run had (`rwkv_bench::BenchReport` `lora`, `init_state`), as labels. */
export function runLabels(r: Pick<BenchReport, 'lora' | 'init_state'>): AdapterLabel[] {
  const out: AdapterLabel[] = (r.lora ?? []).map((l) => ({ kind: 'lora', text: l, title: l }));
  if (r.init_state) out.push({ kind: 'state', text: `state: ${baseName(r.init_state)}`, title: r.init_state });
  return out;
}
