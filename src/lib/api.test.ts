import { beforeEach, describe, expect, it, vi } from 'vitest';

const invoke = vi.fn();
vi.mock('@tauri-apps/api/core', () => ({
  invoke: (...a: unknown[]) => invoke(...a),
  Channel: class {
    onmessage: ((m: unknown) => void) | null = null;
  },
}));

import { api, errorTitle, toAppError, unpackFloats } from './api';
import { ERROR_CODES } from './wire.gen';

/** Packs like `documents.rs` `pack_floats` (written independently here, from its doc). */
function pack(meta: unknown, data: number[]): ArrayBuffer {
  const json = new TextEncoder().encode(JSON.stringify(meta));
  const start = Math.ceil((4 + json.length) / 4) * 4;
  const buf = new ArrayBuffer(start + data.length * 4);
  const v = new DataView(buf);
  v.setUint32(0, json.length, true);
  new Uint8Array(buf, 4, json.length).set(json);
  data.forEach((x, i) => v.setFloat32(start + i * 4, x, true));
  return buf;
}

describe('api', () => {
  beforeEach(() => invoke.mockReset());

  it('unpacks header and floats for every header length', () => {
    for (const label of ['a', 'ab', 'abc', 'abcd']) {
      const { meta, data } = unpackFloats<{ l: string }>(pack({ l: label }, [1.5, -2, 3.25]));
      expect(meta.l).toBe(label);
      expect(Array.from(data)).toEqual([1.5, -2, 3.25]);
    }
  });

  it('runFields splits the vectors by dim', async () => {
    const f = (label: string) => ({ label, tokens: 1, norm: 1, embedding: [], cached: false, time_share: 0.5, time_ms: 1 });
    const meta = {
      model: 'ab', pooling: 'last', with_document: false, dim: 3, fields: [f('a'), f('b')], similarity: [[1, 0], [0, 1]],
      timing: { total_ms: 1, tokenize_ms: 0, forward_ms: 1, similarity_ms: 0 }, document: null, setup_ms: 0, resumed: true,
    };
    invoke.mockResolvedValueOnce(pack(meta, [1, 2, 3, 4, 5, 6]));
    const r = await api.runFields(null, [{ label: 'a', text: 'x' }, { label: 'b', text: 'y' }]);
    expect(invoke).toHaveBeenCalledWith('fields_run', { document: null, fields: [{ label: 'a', text: 'x' }, { label: 'b', text: 'y' }] });
    expect(r.vectors.map((v) => Array.from(v))).toEqual([[1, 2, 3], [4, 5, 6]]);
  });

  it('passes camelCase argument names that Tauri maps to the Rust parameters', async () => {
    invoke.mockResolvedValue(null);
    await api.pickSave('csv', 'fields.csv');
    expect(invoke).toHaveBeenLastCalledWith('pick_save', { kind: 'csv', defaultName: 'fields.csv' });
    await api.loadModel(null, 1, () => {});
    const [cmd, args] = invoke.mock.calls[invoke.mock.calls.length - 1];
    expect(cmd).toBe('model_load');
    expect(args).toMatchObject({ path: null, adapter: 1 });
    expect(args.onProgress).toBeDefined();
  });

  it('errors keep their code; anything else becomes an ipc error', async () => {
    invoke.mockRejectedValueOnce({ code: 'malformed_file', message: 'x.gguf: malformed GGUF file', details: { path: 'x.gguf' } });
    await expect(api.modelInfo()).rejects.toMatchObject({ code: 'malformed_file', message: 'x.gguf: malformed GGUF file' });
    expect(toAppError('boom')).toEqual({ code: 'ipc', message: 'boom' });
    expect(errorTitle('malformed_file')).toMatch(/damaged/);
  });

  it('every backend error code has a title; an unknown code gets the general one', () => {
    for (const code of ERROR_CODES) expect(errorTitle(code)).toMatch(/\w/);
    // The engine's state-file code (`EngineError::State`), once mirrored under names it never sent.
    expect(errorTitle('state')).toBe('This state file cannot be used');
    expect(errorTitle('no_such_code')).toBe('Something went wrong');
    expect(errorTitle('toString')).toBe('Something went wrong');
  });
});
