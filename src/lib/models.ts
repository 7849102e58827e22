// The Library view's pure parts: download figures for people, whether a model fits the
// GPU, and the "add an entry" form checked by the rules of the catalog's schema
// (`crates/models/src/catalog.rs` `validate`), so a typo is named before any call.

import type { AppError, CatalogEntry, DownloadStatus, Encoding, GpuMemory } from './api';
import { fmtBytes } from './format';

export const ENCODINGS: readonly Encoding[] = ['gguf-q4_k_m', 'gguf-q8_0', 'gguf-f16', 'safetensors', 'pth'];

/** Bytes per second as `4.20 MB/s` (`–` when nothing arrives). */
export function fmtByteRate(bytesPerS: number): string {
  if (!Number.isFinite(bytesPerS) || bytesPerS <= 0) return '–';
  return `${fmtBytes(bytesPerS)}/s`;
}

/** Seconds left as `1 h 02 min`, `3 min 05 s` or `12 s` (`–` when unknown). */
export function fmtEta(s: number | null): string {
  if (s === null || !Number.isFinite(s) || s < 0) return '–';
  const t = Math.ceil(s);
  const pad = (x: number) => String(x).padStart(2, '0');
  if (t >= 3600) return `${Math.floor(t / 3600)} h ${pad(Math.floor((t % 3600) / 60))} min`;
  if (t >= 60) return `${Math.floor(t / 60)} min ${pad(t % 60)} s`;
  return `${t} s`;
}

/** A download's share done in [0, 1], or null when its size is unknown. */
export function downloadFraction(d: DownloadStatus): number | null {
  if (d.state === 'done') return 1;
  if (!d.total) return null;
  return Math.min(1, d.done / d.total);
}

/** `12.3 MB of 28.5 MB` (or just the bytes so far). */
export function fmtProgress(d: DownloadStatus): string {
  return d.total ? `${fmtBytes(d.done)} of ${fmtBytes(d.total)}` : fmtBytes(d.done);
}

export type Fit = 'fits' | 'tight' | 'too_large' | 'unknown';

/**
 * Whether a model needing `need` bytes of GPU memory fits `gpu`: `fits` with a fifth to
 * spare (other programs and the display use GPU memory too), `tight` within it,
 * `too_large` past it, `unknown` when either side is not known.
 */
export function fitVerdict(need: number | null, gpu: GpuMemory | null): Fit {
  if (need === null || !gpu || gpu.bytes === null) return 'unknown';
  if (need > gpu.bytes) return 'too_large';
  return need <= gpu.bytes * 0.8 ? 'fits' : 'tight';
}

export const FIT_LABELS: Record<Fit, string> = {
  fits: 'fits',
  tight: 'tight fit',
  too_large: 'too large',
  unknown: 'unknown',
};

/** The "add an entry" form's fields, as typed. */
export interface EntryForm {
  name: string;
  url: string;
  sha256: string;
  size: string;
  encoding: Encoding;
  parameters: string;
  license: string;
  description: string;
}

const bad = (message: string): AppError => ({ code: 'catalog', message });

/** The file name a URL names (its last path segment), or null. */
export function fileNameFromUrl(url: string): string | null {
  const m = /^https?:\/\/[^/]+\/(?:.*\/)?([^/?#]+)(?:[?#].*)?$/.exec(url.trim());
  return m ? decodeURIComponent(m[1]) : null;
}

/** Whether `s` is 64 hex digits. */
export function isSha256(s: string): boolean {
  return /^[0-9a-fA-F]{64}$/.test(s);
}

/**
 * The form as a catalog entry for `catalog_add`, or the error to show instead. The name
 * must be plain (no spaces or `/`), the URL http(s) and naming a file, the SHA-256 64 hex
 * digits, the size a whole number of bytes > 0.
 */
export function entryFromForm(f: EntryForm): CatalogEntry | AppError {
  const name = f.name.trim();
  if (!name || /[\s/]/.test(name)) return bad('Name: one word, without spaces or “/” (it is what `rwkv pull NAME` takes).');
  const url = f.url.trim();
  const file = fileNameFromUrl(url);
  if (!file || file.startsWith('.')) return bad(`“${f.url}” is not an http:// or https:// address of a file.`);
  const sha = f.sha256.trim().toLowerCase();
  if (!isSha256(sha)) return bad('SHA-256: 64 hex digits, as the source publishes them.');
  const size = f.size.trim();
  if (!/^\d+$/.test(size) || Number(size) <= 0 || !Number.isSafeInteger(Number(size))) {
    return bad(`Size: the file's exact size in bytes (got “${f.size}”).`);
  }
  const bytes = Number(size);
  const vram = bytes + Math.floor(bytes / 10);
  return {
    name,
    family: 'RWKV-7 (user entry)',
    parameters: f.parameters.trim() || '?',
    encoding: f.encoding,
    file_name: file,
    size_bytes: bytes,
    sha256: sha,
    urls: [url],
    license: f.license.trim() || 'unknown',
    ram_bytes: vram,
    vram_bytes: vram,
    description: f.description.trim() || `${file}, added by hand`,
    source: url.startsWith('https://') ? url : 'https://github.com/rwkv-studio/rwkv-studio/blob/main/docs/app.md',
  };
}

export function isEntryError(e: CatalogEntry | AppError): e is AppError {
  return 'code' in e && 'message' in e && !('urls' in e);
}
