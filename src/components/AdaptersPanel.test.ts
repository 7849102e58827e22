import { beforeEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor } from '@testing-library/svelte';
import type { AdapterLibrary, LoraEntry, StateEntry } from '../lib/api';

// The backend is replaced here only: the panel is tested against the API contract of
// src/lib/api.ts (each library command answers with the new list).
const mocks = vi.hoisted(() => ({
  pickOpen: vi.fn(),
  addLora: vi.fn(),
  addInitState: vi.fn(),
  updateLora: vi.fn(),
  useInitState: vi.fn(),
  removeAdapter: vi.fn(),
  adapterLibrary: vi.fn(),
}));
vi.mock('../lib/api', async (orig) => ({ ...(await orig<typeof import('../lib/api')>()), api: mocks }));

import AdaptersPanel from './AdaptersPanel.svelte';
import AdapterPills from './AdapterPills.svelte';
import { app } from '../lib/state.svelte';

const style: LoraEntry = {
  path: '/home/me/style.safetensors', name: 'style.safetensors', format: 'safetensors', rank: 8, alpha: 16,
  targets: ['att.receptance', 'att.key', 'att.value', 'att.output', 'ffn.key', 'ffn.value'], matrices: 36, layers: 6,
  default_scale: 2, scale: 2, enabled: true,
};
const tuned: StateEntry = {
  path: '/home/me/tuned.pth', name: 'tuned.pth', format: 'pth', n_layer: 6, n_head: 4, head_size: 64, active: true,
};
const lib = (loras: LoraEntry[], states: StateEntry[] = []): AdapterLibrary => ({ loras, states });

describe('AdaptersPanel', () => {
  beforeEach(() => {
    Object.values(mocks).forEach((m) => m.mockReset());
    app.library = null;
  });

  it('adds a LoRA chosen in the dialog and lists what it holds', async () => {
    mocks.pickOpen.mockResolvedValue('/home/me/style.safetensors');
    mocks.addLora.mockResolvedValue(lib([style]));
    render(AdaptersPanel);
    expect(screen.getByTestId('no-adapters')).toBeInTheDocument();
    await fireEvent.click(screen.getByTestId('add-lora'));
    expect(mocks.pickOpen).toHaveBeenCalledWith('lora');
    await waitFor(() => expect(screen.getByTestId('lora-name').textContent).toBe('style.safetensors'));
    expect(mocks.addLora).toHaveBeenCalledWith('/home/me/style.safetensors');
    expect(screen.getByTestId('lora-rank').textContent).toBe('8');
    expect(screen.getByTestId('lora-targets').textContent).toBe('6');
    expect(screen.getByTestId('lora-targets').getAttribute('title')).toContain('ffn.value');
    expect(screen.getByTestId('lora-layers').textContent).toBe('6');
    expect((screen.getByTestId('lora-scale') as HTMLInputElement).value).toBe('2');
    expect((screen.getByTestId('lora-enabled') as HTMLInputElement).checked).toBe(true);
    expect(screen.queryByTestId('no-adapters')).toBeNull();
  });

  it('sets the scale, switches a LoRA off and removes it', async () => {
    app.library = lib([style]);
    mocks.updateLora.mockImplementation(async (_p: string, scale: number, enabled: boolean) => lib([{ ...style, scale, enabled }]));
    mocks.removeAdapter.mockResolvedValue(lib([]));
    render(AdaptersPanel);
    await fireEvent.change(screen.getByTestId('lora-scale'), { target: { value: '0.5' } });
    expect(mocks.updateLora).toHaveBeenLastCalledWith('/home/me/style.safetensors', 0.5, true);
    // Off the default: a button puts it back to alpha / rank.
    await waitFor(() => expect(screen.getByText('default 2')).toBeInTheDocument());
    await fireEvent.click(screen.getByTestId('lora-enabled'));
    expect(mocks.updateLora).toHaveBeenLastCalledWith('/home/me/style.safetensors', 0.5, false);
    await waitFor(() => expect((screen.getByTestId('lora-enabled') as HTMLInputElement).checked).toBe(false));
    await fireEvent.click(screen.getByTestId('lora-remove'));
    expect(mocks.removeAdapter).toHaveBeenCalledWith('/home/me/style.safetensors');
    await waitFor(() => expect(screen.getByTestId('no-adapters')).toBeInTheDocument());
  });

  it('refuses a scale that is not a number without calling the backend', async () => {
    app.library = lib([style]);
    render(AdaptersPanel);
    await fireEvent.change(screen.getByTestId('lora-scale'), { target: { value: '' } });
    expect(mocks.updateLora).not.toHaveBeenCalled();
    expect(screen.getByRole('alert').textContent).toContain('not a number');
  });

  it('a bad file shows the error and the list stays usable', async () => {
    app.library = lib([style]);
    mocks.pickOpen.mockResolvedValue('/home/me/other.safetensors');
    mocks.addLora.mockRejectedValue({
      code: 'adapter',
      message: 'adapter other.safetensors: `blocks.0.att.key`: the adapter is for a 512×512 matrix, the model\'s is 256×256',
    });
    mocks.updateLora.mockResolvedValue(lib([{ ...style, enabled: false }]));
    render(AdaptersPanel);
    await fireEvent.click(screen.getByTestId('add-lora'));
    await waitFor(() => expect(screen.getByRole('alert').textContent).toContain('blocks.0.att.key'));
    expect(screen.getByRole('alert').textContent).toContain('does not fit the model');
    expect(screen.getAllByTestId('lora-row')).toHaveLength(1);
    await fireEvent.click(screen.getByTestId('lora-enabled'));
    expect(mocks.updateLora).toHaveBeenCalledWith('/home/me/style.safetensors', 2, false);
  });

  it('initial states: add one, choose none, choose it again', async () => {
    mocks.pickOpen.mockResolvedValue('/home/me/tuned.pth');
    mocks.addInitState.mockResolvedValue(lib([], [tuned]));
    mocks.useInitState.mockImplementation(async (p: string | null) => lib([], [{ ...tuned, active: p === tuned.path }]));
    render(AdaptersPanel);
    await fireEvent.click(screen.getByTestId('add-init-state'));
    expect(mocks.pickOpen).toHaveBeenCalledWith('init_state');
    await waitFor(() => expect(screen.getByTestId('state-shape').textContent).toBe('6 layers × 4 heads × 64'));
    expect((screen.getByTestId('state-use') as HTMLInputElement).checked).toBe(true);
    await fireEvent.click(screen.getByTestId('state-none'));
    expect(mocks.useInitState).toHaveBeenLastCalledWith(null);
    await waitFor(() => expect((screen.getByTestId('state-use') as HTMLInputElement).checked).toBe(false));
    await fireEvent.click(screen.getByTestId('state-use'));
    expect(mocks.useInitState).toHaveBeenLastCalledWith('/home/me/tuned.pth');
  });

  it('a cancelled dialog changes nothing', async () => {
    mocks.pickOpen.mockResolvedValue(null);
    render(AdaptersPanel);
    await fireEvent.click(screen.getByTestId('add-lora'));
    await waitFor(() => expect(mocks.pickOpen).toHaveBeenCalled());
    expect(mocks.addLora).not.toHaveBeenCalled();
    expect(screen.queryByRole('alert')).toBeNull();
  });
});

describe('AdapterPills', () => {
  it('shows each LoRA with its scale and the initial state', () => {
    render(AdapterPills, { set: { loras: [{ path: '/a/style.safetensors', scale: 0.75 }], init_state: '/a/tuned.pth' } });
    const pills = screen.getAllByTestId('adapter-pill').map((p) => p.textContent?.trim());
    expect(pills).toEqual(['◆ style.safetensors ×0.75', '▶ state: tuned.pth']);
  });

  it('shows ready-made labels (a benchmark run\'s) as given', () => {
    render(AdapterPills, { labels: [{ kind: 'lora', text: 'style.safetensors ×2 (rank 8)', title: 'style.safetensors ×2 (rank 8)' }] });
    expect(screen.getByTestId('adapter-pill').textContent?.trim()).toBe('◆ style.safetensors ×2 (rank 8)');
  });

  it('says base model for an empty set only when asked', () => {
    const { unmount } = render(AdapterPills, { set: { loras: [], init_state: null } });
    expect(screen.queryByTestId('adapter-pills')).toBeNull();
    unmount();
    render(AdapterPills, { set: { loras: [], init_state: null }, showBase: true });
    expect(screen.getByTestId('adapter-pills').textContent).toBe('base model');
  });
});
