import { describe, expect, it } from 'vitest';
import type { DownloadStatus } from './api';
import {
  downloadFraction, entryFromForm, fileNameFromUrl, fitVerdict, fmtByteRate, fmtEta, isEntryError, type EntryForm,
} from './models';

const GB = 1_000_000_000;
const form = (over: Partial<EntryForm> = {}): EntryForm => ({
  name: 'my-demo', url: 'http://127.0.0.1:8000/files/demo.gguf?x=1', sha256: 'AB'.repeat(32), size: '28531904',
  encoding: 'gguf-q4_k_m', parameters: '', license: '', description: '', ...over,
});

describe('models helpers', () => {
  it('formats rates and times left', () => {
    expect(fmtByteRate(4_200_000)).toBe('4.20 MB/s');
    expect(fmtByteRate(0)).toBe('–');
    expect(fmtEta(null)).toBe('–');
    expect(fmtEta(4.2)).toBe('5 s');
    expect(fmtEta(185)).toBe('3 min 05 s');
    expect(fmtEta(3720)).toBe('1 h 02 min');
  });

  it('says whether a model fits the GPU, with a fifth to spare', () => {
    const gpu = { adapter: 'H100', bytes: 80 * GB };
    expect(fitVerdict(6.5 * GB, gpu)).toBe('fits');
    expect(fitVerdict(70 * GB, gpu)).toBe('tight');
    expect(fitVerdict(81 * GB, gpu)).toBe('too_large');
    expect(fitVerdict(1, { adapter: 'Metal', bytes: null })).toBe('unknown');
    expect(fitVerdict(null, gpu)).toBe('unknown');
    expect(fitVerdict(1, null)).toBe('unknown');
  });

  it('a download\'s share done', () => {
    const d = { file_name: 'a', name: null, url: 'u', done: 25, total: 100, rate: 1, eta_s: 1, sha256: null, state: 'running' } as DownloadStatus;
    expect(downloadFraction(d)).toBe(0.25);
    expect(downloadFraction({ ...d, total: null } as DownloadStatus)).toBeNull();
    expect(downloadFraction({ ...d, state: 'done', path: '/a', sha256: 'x', verified: true } as DownloadStatus)).toBe(1);
  });

  it('names the file of a URL', () => {
    expect(fileNameFromUrl('https://huggingface.co/BlinkDL/rwkv7-g1/resolve/main/m.pth?download=true')).toBe('m.pth');
    expect(fileNameFromUrl('https://host/')).toBeNull();
    expect(fileNameFromUrl('ftp://host/m.gguf')).toBeNull();
  });

  it('turns the form into a catalog entry of the schema', () => {
    const e = entryFromForm(form());
    if (isEntryError(e)) throw new Error(e.message);
    expect(e.file_name).toBe('demo.gguf');
    expect(e.sha256).toBe('ab'.repeat(32));
    expect(e.size_bytes).toBe(28531904);
    expect(e.vram_bytes).toBe(28531904 + 2853190);
    expect(e.urls).toEqual(['http://127.0.0.1:8000/files/demo.gguf?x=1']);
    expect(e.source.startsWith('https://')).toBe(true);
  });

  it('names the field a broken form gets wrong', () => {
    for (const [over, needle] of [
      [{ name: 'two words' }, 'Name'],
      [{ url: 'file:///m.gguf' }, 'not an http'],
      [{ sha256: 'abc' }, 'SHA-256'],
      [{ size: '12 MB' }, 'Size'],
      [{ size: '0' }, 'Size'],
    ] as const) {
      const e = entryFromForm(form(over));
      expect(isEntryError(e)).toBe(true);
      if (isEntryError(e)) {
        expect(e.code).toBe('catalog');
        expect(e.message).toContain(needle);
      }
    }
  });
});
