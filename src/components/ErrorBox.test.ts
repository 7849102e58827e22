import { beforeEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor } from '@testing-library/svelte';

// The backend is replaced here only: a GPU fault's error box offers a reload of the model
// that was loaded (the bundled one by `null`, as its path is not a user-chosen file).
const mocks = vi.hoisted(() => ({ loadModel: vi.fn(), modelInfo: vi.fn() }));
vi.mock('../lib/api', async (orig) => ({ ...(await orig<typeof import('../lib/api')>()), api: mocks }));

import ErrorBox from './ErrorBox.svelte';
import { app } from '../lib/state.svelte';
import type { AppError } from '../lib/api';

const lost: AppError = { code: 'gpu', message: 'GPU: device unusable: Destroyed', details: null };

describe('ErrorBox', () => {
  beforeEach(() => {
    Object.values(mocks).forEach((m) => m.mockReset());
    mocks.loadModel.mockResolvedValue({ path: '/models/mine.gguf' });
    app.info = { version: '0', commit: 'unknown', data_dir: '/d', default_model: '/bundled.gguf', set_aside: [] };
  });

  it('offers to reload the model after a GPU fault, and reloads the same file', async () => {
    app.model = { path: '/models/mine.gguf' } as never;
    const dismissed = vi.fn();
    render(ErrorBox, { error: lost, ondismiss: dismissed });
    await fireEvent.click(screen.getByTestId('reload-model'));
    await waitFor(() => expect(mocks.loadModel).toHaveBeenCalled());
    expect(mocks.loadModel.mock.calls[0][0]).toBe('/models/mine.gguf');
    expect(dismissed).toHaveBeenCalled();
  });

  it('reloads the bundled model by null', async () => {
    app.model = { path: '/bundled.gguf' } as never;
    render(ErrorBox, { error: lost });
    await fireEvent.click(screen.getByTestId('reload-model'));
    await waitFor(() => expect(mocks.loadModel).toHaveBeenCalled());
    expect(mocks.loadModel.mock.calls[0][0]).toBeNull();
  });

  it('offers no reload for other errors', () => {
    render(ErrorBox, { error: { code: 'not_text', message: 'x: not UTF-8 text', details: null } });
    expect(screen.queryByTestId('reload-model')).toBeNull();
    expect(screen.getByText('Not a text file')).toBeTruthy();
  });
});
