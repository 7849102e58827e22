import { beforeEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor } from '@testing-library/svelte';
import type { CatalogView, DownloadStatus, LibraryView as Lib } from '../lib/api';

// The backend is replaced here only: the view is tested against the API contract of
// src/lib/api.ts (a download's updates arrive through the callback `downloadStart` gets).
const mocks = vi.hoisted(() => ({
  catalog: vi.fn(),
  catalogAdd: vi.fn(),
  downloads: vi.fn(),
  downloadStart: vi.fn(),
  downloadResume: vi.fn(),
  downloadPause: vi.fn(),
  downloadCancel: vi.fn(),
  library: vi.fn(),
  libraryDelete: vi.fn(),
  libraryReveal: vi.fn(),
  loadModel: vi.fn(),
  modelInfo: vi.fn(),
}));
vi.mock('../lib/api', async (orig) => ({ ...(await orig<typeof import('../lib/api')>()), api: mocks }));

import LibraryView from './LibraryView.svelte';
import { downloads } from '../lib/downloads.svelte';
import { app } from '../lib/state.svelte';

const MB = 1_000_000;
const entry = {
  name: 'local-demo', family: 'RWKV-7 demo', parameters: '6x256', encoding: 'gguf-q4_k_m' as const,
  file_name: 'demo.gguf', size_bytes: 28.5 * MB, sha256: 'ab'.repeat(32), urls: ['http://127.0.0.1:9/demo.gguf'],
  license: 'Apache-2.0', ram_bytes: 31 * MB, vram_bytes: 31 * MB, description: 'the demo', source: 'https://example.org/demo',
  user: true,
};
const big = { ...entry, name: 'huge', file_name: 'huge.pth', vram_bytes: 900 * MB, user: false, license: 'MIT' };
const catalog: CatalogView = { entries: [entry, big], user_catalog: '/cfg/rwkv-studio/catalog.json', library_dir: '/data/models' };
const emptyLib: Lib = { dir: '/data/models', models: [], gpu: { adapter: 'llvmpipe', bytes: 100 * MB } };
const status = (over: Partial<DownloadStatus>): DownloadStatus => ({
  file_name: 'demo.gguf', name: 'local-demo', url: entry.urls[0], done: 0, total: entry.size_bytes, rate: 0, eta_s: null,
  sha256: entry.sha256, state: 'running', ...over,
} as DownloadStatus);

describe('LibraryView', () => {
  beforeEach(() => {
    Object.values(mocks).forEach((m) => m.mockReset());
    downloads.items = {};
    downloads.library = null;
    downloads.error = null;
    app.loading = null;
    mocks.catalog.mockResolvedValue(catalog);
    mocks.downloads.mockResolvedValue([]);
    mocks.library.mockResolvedValue(emptyLib);
  });

  it('lists the catalog with size, GPU memory needs against this GPU, licence and source', async () => {
    render(LibraryView);
    await waitFor(() => expect(screen.getAllByTestId('catalog-row')).toHaveLength(2));
    const [demo, huge] = screen.getAllByTestId('catalog-row');
    expect(demo.textContent).toContain('28.5 MB');
    expect(demo.textContent).toContain('Apache-2.0');
    expect(demo.textContent).toContain('example.org/demo');
    expect(demo.querySelector('[data-testid=catalog-fit]')?.textContent).toBe('fits');
    expect(huge.querySelector('[data-testid=catalog-fit]')?.textContent).toBe('too large');
    expect(screen.getByTestId('library-empty')).toBeInTheDocument();
  });

  it('downloads with progress, rate and time left; pause, then resume', async () => {
    let push: (s: DownloadStatus) => void = () => {};
    mocks.downloadStart.mockImplementation(async (_what, on) => {
      push = on;
      return status({});
    });
    render(LibraryView);
    await waitFor(() => expect(screen.getAllByTestId('catalog-download')).toHaveLength(2));
    await fireEvent.click(screen.getAllByTestId('catalog-download')[0]);
    expect(mocks.downloadStart).toHaveBeenCalledWith({ name: 'local-demo' }, expect.any(Function));
    push(status({ done: 7.125 * MB, rate: 2.5 * MB, eta_s: 8.55 }));
    await waitFor(() => expect(screen.getByTestId('download-bytes').textContent).toBe('7.13 MB of 28.5 MB'));
    expect(screen.getByTestId('download-rate').textContent).toBe('2.50 MB/s');
    expect(screen.getByTestId('download-eta').textContent).toBe('9 s left');
    expect(screen.getByRole('progressbar', { name: 'Downloading demo.gguf' }).getAttribute('aria-valuenow')).toBe('25');

    mocks.downloadPause.mockResolvedValue([status({ done: 7.125 * MB, state: 'paused' })]);
    await fireEvent.click(screen.getByTestId('download-pause'));
    expect(mocks.downloadPause).toHaveBeenCalledWith('demo.gguf');
    await waitFor(() => expect(screen.getByTestId('download-state').textContent).toBe('Paused'));
    expect(screen.queryByTestId('download-rate')).toBeNull();
    mocks.downloadResume.mockResolvedValue(status({ done: 7.125 * MB }));
    await fireEvent.click(screen.getByTestId('download-resume'));
    expect(mocks.downloadResume).toHaveBeenCalledWith('demo.gguf', expect.any(Function));
    await waitFor(() => expect(screen.getByTestId('download-state').textContent).toBe('Downloading'));
  });

  it('offers to resume a download an earlier run left, and a finished one enters the library', async () => {
    mocks.downloads.mockResolvedValue([status({ done: 10 * MB, state: 'paused' })]);
    let push: (s: DownloadStatus) => void = () => {};
    mocks.downloadResume.mockImplementation(async (_f, on) => {
      push = on;
      return status({ done: 10 * MB });
    });
    render(LibraryView);
    await waitFor(() => expect(screen.getByTestId('download-state').textContent).toBe('Paused'));
    expect(screen.getByTestId('download-bytes').textContent).toBe('10.0 MB of 28.5 MB');
    await fireEvent.click(screen.getByTestId('download-resume'));
    const lib: Lib = {
      ...emptyLib,
      models: [{ path: '/data/models/demo.gguf', file_name: 'demo.gguf', bytes: 28.5 * MB, encoding: 'gguf-q4_k_m',
        catalog: 'local-demo', vram_bytes: 31 * MB, vram_estimated: false, origin: 'downloaded', missing: false }],
    };
    mocks.library.mockResolvedValue(lib);
    push(status({ done: 28.5 * MB, state: 'done', path: '/data/models/demo.gguf', sha256: entry.sha256!, verified: true } as Partial<DownloadStatus>));
    await waitFor(() => expect(screen.getAllByTestId('library-row')).toHaveLength(1));
    expect(screen.queryByTestId('download-row')).toBeNull();
    expect(screen.getByTestId('library-fit').textContent).toBe('fits');
    expect(screen.getAllByTestId('catalog-have')).toHaveLength(1);
  });

  it('a failed download shows its named error; a checksum failure cannot be resumed', async () => {
    let push: (s: DownloadStatus) => void = () => {};
    mocks.downloadStart.mockImplementation(async (_what, on) => {
      push = on;
      return status({});
    });
    render(LibraryView);
    await waitFor(() => expect(screen.getAllByTestId('catalog-download')).toHaveLength(2));
    await fireEvent.click(screen.getAllByTestId('catalog-download')[0]);
    push(status({
      state: 'failed', resumable: false,
      error: { code: 'checksum', message: 'checksum mismatch for /data/models/demo.gguf: expected sha256 abab…, got 0000… (partial file deleted)' },
    } as Partial<DownloadStatus>));
    await waitFor(() => expect(screen.getByRole('alert').dataset.code).toBe('checksum'));
    expect(screen.getByRole('alert').textContent).toContain('/data/models/demo.gguf');
    expect(screen.queryByTestId('download-resume')).toBeNull();
    // A broken connection keeps the .part: that one resumes.
    push(status({ state: 'failed', resumable: true, error: { code: 'offline', message: 'cannot connect to http://127.0.0.1:9/demo.gguf' } } as Partial<DownloadStatus>));
    await waitFor(() => expect(screen.getByTestId('download-resume')).toBeInTheDocument());
    expect(screen.getByRole('alert').dataset.code).toBe('offline');
  });

  it('loads a library model through the model load and deletes one after a confirmation', async () => {
    const model = { path: '/data/models/demo.gguf', file_name: 'demo.gguf', bytes: 28.5 * MB, encoding: 'gguf',
      catalog: null, vram_bytes: 31 * MB, vram_estimated: true, origin: 'downloaded' as const, missing: false };
    mocks.library.mockResolvedValue({ ...emptyLib, models: [model] });
    mocks.loadModel.mockResolvedValue({ path: model.path });
    render(LibraryView);
    await waitFor(() => expect(screen.getByTestId('library-row')).toBeInTheDocument());
    await fireEvent.click(screen.getByTestId('library-load'));
    expect(mocks.loadModel).toHaveBeenCalledWith('/data/models/demo.gguf', null, expect.any(Function));
    expect(app.view).toBe('model');
    mocks.libraryDelete.mockResolvedValue(emptyLib);
    await fireEvent.click(screen.getByTestId('library-delete'));
    expect(mocks.libraryDelete).not.toHaveBeenCalled();
    await fireEvent.click(screen.getByTestId('library-confirm'));
    expect(mocks.libraryDelete).toHaveBeenCalledWith('/data/models/demo.gguf');
    await waitFor(() => expect(screen.getByTestId('library-empty')).toBeInTheDocument());
  });

  it('a pasted URL downloads; a broken catalog entry is named before any call', async () => {
    mocks.downloadStart.mockResolvedValue(status({ file_name: 'x.gguf', name: null }));
    render(LibraryView);
    await fireEvent.input(screen.getByTestId('add-url'), { target: { value: ' http://h:1/x.gguf ' } });
    await fireEvent.click(screen.getByTestId('add-download'));
    expect(mocks.downloadStart).toHaveBeenCalledWith({ url: 'http://h:1/x.gguf', sha256: null }, expect.any(Function));
    await fireEvent.input(screen.getByTestId('add-name'), { target: { value: 'mine' } });
    await fireEvent.input(screen.getByTestId('add-sha'), { target: { value: 'cd'.repeat(32) } });
    await fireEvent.input(screen.getByTestId('add-size'), { target: { value: 'big' } });
    await fireEvent.click(screen.getByTestId('add-save'));
    expect(mocks.catalogAdd).not.toHaveBeenCalled();
    expect(screen.getByRole('alert').textContent).toContain('Size');
    mocks.catalogAdd.mockResolvedValue({ ...catalog, entries: [...catalog.entries, { ...entry, name: 'mine', file_name: 'x.gguf' }] });
    await fireEvent.input(screen.getByTestId('add-size'), { target: { value: '1234' } });
    await fireEvent.click(screen.getByTestId('add-save'));
    expect(mocks.catalogAdd.mock.calls[0][0]).toMatchObject({ name: 'mine', file_name: 'x.gguf', size_bytes: 1234, sha256: 'cd'.repeat(32) });
    await waitFor(() => expect(screen.getAllByTestId('catalog-row')).toHaveLength(3));
    expect(screen.getByTestId('add-saved').textContent).toContain('mine');
  });
});
