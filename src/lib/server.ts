// The Local server panel's form and figures: checks that mirror the backend's
// (`worker/server.rs` `ServeOptions::check`), so a typo is named before any call.

import type { AppError } from './api';

/** Most parallel sequences the panel offers (`MAX_PARALLEL` in worker/server.rs). */
export const MAX_PARALLEL = 64;
export const DEFAULT_PORT = 8080;
export const DEFAULT_PARALLEL = 4;

export interface ServerForm {
  port: number;
  apiKey: string | null;
  parallel: number;
}

const bad = (message: string): AppError => ({ code: 'bad_request', message });

/**
 * The panel's fields as `server_start` takes them: a port 0–65535 (0: any free port),
 * parallel 1–`MAX_PARALLEL`, a key of printable ASCII without spaces (blank: none).
 * Returns the error to show instead when a field is wrong.
 */
export function parseServerForm(port: string, apiKey: string, parallel: string): ServerForm | AppError {
  const p = port.trim();
  if (!/^\d+$/.test(p) || Number(p) > 65535) {
    return bad(`“${port}” is not a port: give 1 to 65535, or 0 for any free port.`);
  }
  const n = parallel.trim();
  if (!/^\d+$/.test(n) || Number(n) < 1 || Number(n) > MAX_PARALLEL) {
    return bad(`Parallel sequences: give a whole number from 1 to ${MAX_PARALLEL} (got “${parallel}”).`);
  }
  const key = apiKey.trim();
  if (key && !/^[\x21-\x7e]+$/.test(key)) {
    return bad('The API key may hold only printable ASCII characters, without spaces (clients send it in an HTTP header).');
  }
  return { port: Number(p), apiKey: key || null, parallel: Number(n) };
}

export function isFormError(f: ServerForm | AppError): f is AppError {
  return 'code' in f;
}

/** Seconds as `1 h 02 min`, `3 min 05 s` or `12 s`. */
export function fmtUptime(s: number): string {
  if (!Number.isFinite(s) || s < 0) return '–';
  const t = Math.floor(s);
  const pad = (x: number) => String(x).padStart(2, '0');
  if (t >= 3600) return `${Math.floor(t / 3600)} h ${pad(Math.floor((t % 3600) / 60))} min`;
  if (t >= 60) return `${Math.floor(t / 60)} min ${pad(t % 60)} s`;
  return `${t} s`;
}

/**
 * Puts `text` on the clipboard: the async Clipboard API where the webview offers it,
 * else a hidden textarea and `execCommand('copy')`. Returns whether it worked.
 */
export async function copyText(text: string): Promise<boolean> {
  try {
    if (navigator.clipboard?.writeText) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // Refused (no permission, no focus): the fallback below.
  }
  const ta = document.createElement('textarea');
  ta.value = text;
  ta.setAttribute('readonly', '');
  ta.style.position = 'fixed';
  ta.style.opacity = '0';
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try {
    ok = typeof document.execCommand === 'function' && document.execCommand('copy');
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}
