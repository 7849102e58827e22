// The app's downloads (Svelte 5 runes), kept outside any view: a download goes on while
// the user chats, and its updates (a `Channel` per download, at most every 250 ms) land
// here. At start `refresh` lists what the backend knows, the `.part` files an earlier run
// left included (shown as paused, to resume).

import { api, toAppError, type AppError, type DownloadStatus, type LibraryView } from './api';

class DownloadsState {
  /** By file name, in the order they were first seen. */
  items = $state<Record<string, DownloadStatus>>({});
  error = $state<AppError | null>(null);
  library = $state<LibraryView | null>(null);

  list(): DownloadStatus[] {
    return Object.values(this.items);
  }

  /** One update from the backend. A finished download enters the library (read again). */
  apply(s: DownloadStatus): void {
    if (s.state === 'cancelled') {
      delete this.items[s.file_name];
      return;
    }
    this.items[s.file_name] = s;
    if (s.state === 'done') void this.refreshLibrary();
  }

  async refresh(): Promise<void> {
    try {
      this.replace(await api.downloads());
    } catch (e) {
      this.error = toAppError(e);
    }
  }

  async refreshLibrary(): Promise<void> {
    try {
      this.library = await api.library();
    } catch (e) {
      this.error = toAppError(e);
    }
  }

  async start(what: { name: string } | { url: string; sha256: string | null }): Promise<boolean> {
    return this.act(async () => this.first(await api.downloadStart(what, (s) => this.apply(s))));
  }

  async resume(fileName: string): Promise<boolean> {
    return this.act(async () => this.first(await api.downloadResume(fileName, (s) => this.apply(s))));
  }

  /** The status a start returns, unless the channel's updates overtook it already. */
  private first(s: DownloadStatus): void {
    const now = this.items[s.file_name]?.state;
    if (now !== 'running' && now !== 'verifying' && now !== 'done') this.apply(s);
  }

  async pause(fileName: string): Promise<boolean> {
    return this.act(async () => this.replace(await api.downloadPause(fileName)));
  }

  async cancel(fileName: string): Promise<boolean> {
    return this.act(async () => {
      const rest = await api.downloadCancel(fileName);
      delete this.items[fileName];
      this.replace(rest);
    });
  }

  /** The backend's list, keeping finished downloads this run saw (their "in the library"). */
  private replace(list: DownloadStatus[]): void {
    const next: Record<string, DownloadStatus> = {};
    for (const [k, v] of Object.entries(this.items)) if (v.state === 'done') next[k] = v;
    for (const s of list) next[s.file_name] = s;
    this.items = next;
  }

  private async act(f: () => Promise<void>): Promise<boolean> {
    this.error = null;
    try {
      await f();
      return true;
    } catch (e) {
      this.error = toAppError(e);
      return false;
    }
  }
}

export const downloads = new DownloadsState();
