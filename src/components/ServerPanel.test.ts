import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor } from '@testing-library/svelte';
import type { ServerStats, ServerStatus } from '../lib/api';

// The backend is replaced here only: the panel is tested against the API contract of
// src/lib/api.ts (`server_start` / `server_stop` answer with the status).
const mocks = vi.hoisted(() => ({
  serverStart: vi.fn(),
  serverStop: vi.fn(),
  serverStatus: vi.fn(),
}));
vi.mock('../lib/api', async (orig) => ({ ...(await orig<typeof import('../lib/api')>()), api: mocks }));

import ServerPanel from './ServerPanel.svelte';
import { app } from '../lib/state.svelte';

const off: ServerStatus = {
  running: false, base_url: null, port: null, model_id: null, parallel: null, api_key: false, stats: null, stopped: null,
};
const stats = (over: Partial<ServerStats> = {}): ServerStats => ({
  requests: 0, active: 0, queued: 0, generated_tokens: 0, prompt_tokens: 0, cached_tokens: 0, cache_hits: 0,
  cache_misses: 0, cache_entries: 0, tok_s: 0, uptime_s: 1, ...over,
});
const on = (port: number, over: Partial<ServerStats> = {}): ServerStatus => ({
  running: true, base_url: `http://127.0.0.1:${port}/v1`, port, model_id: 'rwkv7-demo-6x256-Q4_K_M', parallel: 4,
  api_key: false, stats: stats(over), stopped: null,
});

describe('ServerPanel', () => {
  beforeEach(() => {
    Object.values(mocks).forEach((m) => m.mockReset());
    mocks.serverStatus.mockResolvedValue(off);
    app.model = null;
    app.loading = null;
  });
  afterEach(() => vi.useRealTimers());

  it('switches on with the form\'s settings and shows the base URL and figures', async () => {
    mocks.serverStart.mockResolvedValue(on(8080, { requests: 3, active: 1, queued: 2, tok_s: 42.5, cache_hits: 1, cache_misses: 2, cached_tokens: 17 }));
    render(ServerPanel);
    await waitFor(() => expect(mocks.serverStatus).toHaveBeenCalled());
    expect(screen.getByTestId('server-state').textContent).toBe('Off');
    expect((screen.getByTestId('server-port') as HTMLInputElement).value).toBe('8080');
    expect(screen.getByTestId('server-loopback').textContent).toContain('127.0.0.1 only');
    await fireEvent.input(screen.getByTestId('server-key'), { target: { value: ' sk-local ' } });
    await fireEvent.click(screen.getByTestId('server-toggle'));
    expect(mocks.serverStart).toHaveBeenCalledWith(8080, 'sk-local', 4);
    await waitFor(() => expect(screen.getByTestId('server-url').textContent).toBe('http://127.0.0.1:8080/v1'));
    expect(screen.getByTestId('server-state').textContent).toBe('On');
    expect(screen.getByTestId('server-toggle').getAttribute('aria-checked')).toBe('true');
    expect(screen.getByTestId('server-requests').textContent).toBe('3');
    expect(screen.getByTestId('server-active').textContent).toBe('1');
    expect(screen.getByTestId('server-queued').textContent).toBe('2');
    expect(screen.getByTestId('server-rate').textContent).toBe('42.5 tok/s');
    expect(screen.getByTestId('server-cache').textContent).toBe('1 / 3');
    expect(screen.getByTestId('server-cached').textContent).toBe('17');
    // The settings are fixed while it runs.
    expect((screen.getByTestId('server-port') as HTMLInputElement).disabled).toBe(true);
  });

  it('reads the figures every second while on, and stops reading when switched off', async () => {
    vi.useFakeTimers();
    let requests = 0;
    mocks.serverStatus.mockImplementation(async () => on(4321, { requests: requests++ }));
    mocks.serverStop.mockResolvedValue(off);
    render(ServerPanel);
    await vi.advanceTimersByTimeAsync(10);
    expect(screen.getByTestId('server-url').textContent).toBe('http://127.0.0.1:4321/v1');
    const reads = mocks.serverStatus.mock.calls.length;
    await vi.advanceTimersByTimeAsync(3_050);
    expect(mocks.serverStatus.mock.calls.length - reads).toBe(3);
    expect(Number(screen.getByTestId('server-requests').textContent)).toBeGreaterThanOrEqual(3);
    await fireEvent.click(screen.getByTestId('server-toggle'));
    await vi.advanceTimersByTimeAsync(10);
    expect(mocks.serverStop).toHaveBeenCalledOnce();
    expect(screen.getByTestId('server-state').textContent).toBe('Off');
    expect(screen.queryByTestId('server-url')).toBeNull();
    const after = mocks.serverStatus.mock.calls.length;
    await vi.advanceTimersByTimeAsync(3_000);
    expect(mocks.serverStatus.mock.calls.length).toBe(after);
  });

  it('a taken port shows the backend\'s error and the panel stays off', async () => {
    mocks.serverStart.mockRejectedValue({
      code: 'server',
      message: 'Port 8080 is already in use on 127.0.0.1 (another program listens there). Choose another port, or 0 for any free one.',
      details: { port: 8080 },
    });
    render(ServerPanel);
    await fireEvent.click(screen.getByTestId('server-toggle'));
    await waitFor(() => expect(screen.getByRole('alert').textContent).toContain('already in use'));
    expect(screen.getByRole('alert').dataset.code).toBe('server');
    expect(screen.getByTestId('server-state').textContent).toBe('Off');
    expect((screen.getByTestId('server-port') as HTMLInputElement).disabled).toBe(false);
  });

  it('no model: the backend\'s no_model error is shown', async () => {
    mocks.serverStart.mockRejectedValue({ code: 'no_model', message: 'No model is loaded. Load one in the Model view first.' });
    render(ServerPanel);
    await fireEvent.click(screen.getByTestId('server-toggle'));
    await waitFor(() => expect(screen.getByRole('alert').dataset.code).toBe('no_model'));
    expect(screen.getByRole('alert').textContent).toContain('No model loaded');
  });

  it('refuses a bad port, parallel or key without calling the backend', async () => {
    render(ServerPanel);
    for (const [id, value, needle] of [
      ['server-port', '70000', 'not a port'],
      ['server-port', 'http', 'not a port'],
      ['server-parallel', '0', 'Parallel sequences'],
      ['server-key', 'two words', 'printable ASCII'],
    ] as const) {
      await fireEvent.input(screen.getByTestId('server-port'), { target: { value: '8080' } });
      await fireEvent.input(screen.getByTestId('server-parallel'), { target: { value: '4' } });
      await fireEvent.input(screen.getByTestId('server-key'), { target: { value: '' } });
      await fireEvent.input(screen.getByTestId(id), { target: { value } });
      await fireEvent.click(screen.getByTestId('server-toggle'));
      expect(screen.getByRole('alert').textContent).toContain(needle);
    }
    expect(mocks.serverStart).not.toHaveBeenCalled();
  });

  it('says why when the server went off with the model, read again on a model change', async () => {
    mocks.serverStatus.mockResolvedValue(on(8080));
    render(ServerPanel);
    await waitFor(() => expect(screen.getByTestId('server-state').textContent).toBe('On'));
    const why = 'The local server was switched off: the model it served was unloaded or replaced.';
    mocks.serverStatus.mockResolvedValue({ ...off, stopped: why });
    app.loading = { path: null, progress: { phase: 'open' }, startedMs: 0 };
    await waitFor(() => expect(screen.getByTestId('server-stopped').textContent).toBe(why));
    expect(screen.getByTestId('server-state').textContent).toBe('Off');
  });

  it('copies the base URL', async () => {
    const writeText = vi.fn().mockResolvedValue(undefined);
    Object.defineProperty(navigator, 'clipboard', { value: { writeText }, configurable: true });
    mocks.serverStatus.mockResolvedValue(on(9000));
    render(ServerPanel);
    await waitFor(() => expect(screen.getByTestId('server-copy')).toBeInTheDocument());
    await fireEvent.click(screen.getByTestId('server-copy'));
    expect(writeText).toHaveBeenCalledWith('http://127.0.0.1:9000/v1');
    await waitFor(() => expect(screen.getByTestId('server-copy').textContent).toBe('Copied'));
  });
});
