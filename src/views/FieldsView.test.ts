import { beforeEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor } from '@testing-library/svelte';
import type { FieldsResult } from '../lib/api';

const mocks = vi.hoisted(() => ({
  documents: vi.fn(),
  runFields: vi.fn(),
  pickSave: vi.fn(),
  writeTextFile: vi.fn(),
}));
vi.mock('../lib/api', async (orig) => ({ ...(await orig<typeof import('../lib/api')>()), api: mocks }));

import FieldsView from './FieldsView.svelte';
import { app } from '../lib/state.svelte';

const f = (label: string, norm: number) => ({ label, tokens: 4, norm, embedding: [], cached: false, time_share: 1 / 3, time_ms: 2 });
const result: FieldsResult = {
  meta: {
    model: 'ab', pooling: 'last', with_document: true, dim: 2,
    fields: [f('Title', 28.9), f('Summary', 28.3), f('Label', 28.8)],
    similarity: [[1, 0.226, 0.398], [0.226, 1, 0.139], [0.398, 0.139, 1]],
    timing: { total_ms: 10, tokenize_ms: 0.05, forward_ms: 312, similarity_ms: 0.05 },
    document: 'letter', setup_ms: 20, resumed: true,
    adapters: { loras: [{ path: '/l/style.safetensors', scale: 0.5 }], init_state: null },
  },
  vectors: [new Float32Array([1, 0]), new Float32Array([0, 1]), new Float32Array([1, 1])],
};

describe('FieldsView', () => {
  beforeEach(() => {
    Object.values(mocks).forEach((m) => m.mockReset());
    app.model = { path: '/m.gguf' } as never;
    mocks.documents.mockResolvedValue([{ id: 'd1', name: 'letter', chars: 10, tokens: 91, prefill_ms: 1, tok_s: 1, model: 'm', created_ms: 0, preview: '', adapters: { loras: [], init_state: null } }]);
  });

  it('runs the analysis against the chosen document and shows the engine numbers', async () => {
    mocks.runFields.mockResolvedValue(result);
    render(FieldsView);
    await waitFor(() => expect(screen.getByRole('option', { name: 'letter' })).toBeInTheDocument());
    await fireEvent.change(screen.getByTestId('fields-document'), { target: { value: 'd1' } });
    await fireEvent.click(screen.getByTestId('fields-run'));
    expect(mocks.runFields).toHaveBeenCalledWith('d1', [
      { label: 'Title', text: 'Pride and Prejudice' },
      expect.objectContaining({ label: 'Summary' }),
      expect.objectContaining({ label: 'Label' }),
    ]);
    await waitFor(() => expect(screen.getAllByTestId('heat-cell')).toHaveLength(9));
    expect(screen.getAllByTestId('heat-cell').map((c) => c.textContent?.trim())).toEqual(
      ['1.00', '0.23', '0.40', '0.23', '1.00', '0.14', '0.40', '0.14', '1.00'],
    );
    expect(screen.getByTestId('norms').textContent).toContain('28.900');
    expect(screen.getByTestId('fields-timings').textContent).toContain('312 ms');
    // What ran comes from the backend's answer (the document's adapters).
    expect(screen.getByTestId('fields-ran-with').textContent).toBe('style.safetensors ×0.5');
  });

  it('exports the analysis as CSV to the chosen file', async () => {
    mocks.runFields.mockResolvedValue(result);
    mocks.pickSave.mockResolvedValue('/home/me/fields.csv');
    mocks.writeTextFile.mockResolvedValue(undefined);
    render(FieldsView);
    await fireEvent.click(screen.getByTestId('fields-run'));
    await waitFor(() => expect(screen.getByTestId('export-csv')).toBeInTheDocument());
    await fireEvent.click(screen.getByTestId('export-csv'));
    await waitFor(() => expect(mocks.writeTextFile).toHaveBeenCalled());
    const [path, csv] = mocks.writeTextFile.mock.calls[0];
    expect(path).toBe('/home/me/fields.csv');
    expect(csv.split('\n')[0]).toBe('field,tokens,norm,Title,Summary,Label');
    expect(csv.split('\n')[1]).toBe('Title,4,28.900000,1.000000,0.226000,0.398000');
  });
});
