// App-wide state (Svelte 5 runes): the current view, the loaded model and its loading.

import { api, type AdapterLibrary, type AppError, type AppInfo, type LoadProgress, type ModelInfo, toAppError } from './api';

export type View = 'model' | 'library' | 'chat' | 'documents' | 'fields' | 'bench';

export interface LoadState {
  path: string | null;
  progress: LoadProgress;
  startedMs: number;
}

class AppState {
  view = $state<View>('model');
  info = $state<AppInfo | null>(null);
  model = $state<ModelInfo | null>(null);
  loading = $state<LoadState | null>(null);
  loadError = $state<AppError | null>(null);
  /** A chat another view asked the chat view to open. */
  openChatId = $state<string | null>(null);
  /** A text file dropped on the window, for the documents view. */
  droppedText = $state<string | null>(null);
  /** The Model view's LoRA and initial-state files (`adapter_library`). */
  library = $state<AdapterLibrary | null>(null);

  async refreshLibrary(): Promise<void> {
    this.library = await api.adapterLibrary().catch(() => this.library);
  }

  /** Loads `path` (null: the bundled model) on `adapter` (null: automatic). */
  async load(path: string | null, adapter: number | null = null): Promise<ModelInfo | null> {
    this.loadError = null;
    this.loading = { path, progress: { phase: 'open' }, startedMs: Date.now() };
    try {
      const info = await api.loadModel(path, adapter, (p) => {
        if (this.loading) this.loading = { ...this.loading, progress: p };
      });
      this.model = info;
      return info;
    } catch (e) {
      this.loadError = toAppError(e);
      // Loading replaces the old model first: ask what is loaded now.
      this.model = await api.modelInfo().catch(() => null);
      return null;
    } finally {
      this.loading = null;
    }
  }

  async unload(): Promise<void> {
    await api.unloadModel();
    this.model = null;
  }

  /** First start: load the bundled model unless one is loaded already. */
  async start(): Promise<void> {
    this.info = await api.appInfo().catch(() => null);
    await this.refreshLibrary();
    const current = await api.modelInfo().catch(() => null);
    if (current) this.model = current;
    else await this.load(null);
  }

  openChat(id: string): void {
    this.openChatId = id;
    this.view = 'chat';
  }
}

export const app = new AppState();
