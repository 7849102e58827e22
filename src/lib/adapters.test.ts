import { describe, expect, it } from 'vitest';
import { currentSet, fmtScale, isBase, runLabels, setLabels } from './adapters';
import type { AdapterLibrary, LoraEntry } from './api';

const lora = (path: string, scale: number, enabled: boolean): LoraEntry => ({
  path, name: path.split('/').pop() ?? path, format: 'safetensors', rank: 4, alpha: 8, targets: ['att.key'],
  matrices: 6, layers: 6, default_scale: 2, scale, enabled,
});

describe('adapter sets', () => {
  it('the current set is the enabled LoRAs in order and the active state', () => {
    const lib: AdapterLibrary = {
      loras: [lora('/a/one.safetensors', 2, true), lora('/a/off.pth', 1, false), lora('/a/two.pth', -0.5, true)],
      states: [
        { path: '/s/a.pth', name: 'a.pth', format: 'pth', n_layer: 6, n_head: 4, head_size: 64, active: false },
        { path: '/s/b.pth', name: 'b.pth', format: 'pth', n_layer: 6, n_head: 4, head_size: 64, active: true },
      ],
    };
    expect(currentSet(lib)).toEqual({
      loras: [{ path: '/a/one.safetensors', scale: 2 }, { path: '/a/two.pth', scale: -0.5 }],
      init_state: '/s/b.pth',
    });
    expect(currentSet(null)).toEqual({ loras: [], init_state: null });
    expect(isBase(currentSet(null))).toBe(true);
    expect(isBase(currentSet(lib))).toBe(false);
  });

  it('labels name each file with its scale, then the state', () => {
    const labels = setLabels({ loras: [{ path: '/x/style.safetensors', scale: 0.5 }], init_state: 'C:\\s\\tuned.pth' });
    expect(labels.map((l) => l.text)).toEqual(['style.safetensors ×0.5', 'state: tuned.pth']);
    expect(labels.map((l) => l.kind)).toEqual(['lora', 'state']);
    expect(labels[0].title).toBe('/x/style.safetensors');
    expect(fmtScale(2)).toBe('2');
    expect(fmtScale(0.33333)).toBe('0.333');
    expect(setLabels(null)).toEqual([]);
  });

  it('a benchmark run says what it ran with; older runs, nothing', () => {
    const labels = runLabels({ lora: ['style.safetensors ×0.5 (rank 4)'], init_state: '/s/b.pth' });
    expect(labels.map((l) => [l.kind, l.text])).toEqual([['lora', 'style.safetensors ×0.5 (rank 4)'], ['state', 'state: b.pth']]);
    expect(runLabels({})).toEqual([]);
  });
});
