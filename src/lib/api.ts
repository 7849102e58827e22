// The frontend's one door to the backend: every command of `src-tauri/src/commands/`,
// mirrored. Components import from here and never call `invoke`; the types the commands
// send live in `types.ts` and the errors in `errors.ts`, both re-exported from here.
// The backend's wire enums (`ErrorCode`, `StopReason`) are not mirrored by hand: they are
// generated into `wire.gen.ts` (`src-tauri/tests/frontend_types.rs` checks it is current).
//
// Naming: Tauri maps camelCase argument names here to the commands' snake_case
// parameters (`onProgress` → `on_progress`); the values' fields keep the Rust names.

import { Channel, invoke } from '@tauri-apps/api/core';
import { toAppError } from './errors';
import type {
  AdapterSummary,
  ModelInfo,
  LoadProgress,
  GenerateOptions,
  Extracted,
  AppInfo,
  FileKind,
  Message,
  AdapterLibrary,
  Chat,
  ChatSummary,
  ChatEvent,
  Document,
  FieldInput,
  FieldsMeta,
  FieldsResult,
  BenchOptions,
  BenchProgress,
  Dashboard,
  ServerStatus,
  CatalogEntry,
  CatalogView,
  DownloadStatus,
  LibraryView,
} from './types';

export type { ErrorCode, StopReason } from './wire.gen';
export * from './errors';
export type * from './types';

/** Every command goes through here: a failure arrives as an `AppError`. */
async function call<T>(cmd: string, args?: Record<string, unknown>): Promise<T> {
  try {
    return await invoke<T>(cmd, args);
  } catch (e) {
    throw toAppError(e);
  }
}

// ---------- bytes ----------

/**
 * Reads what `documents.rs` `pack_floats` writes: u32 LE header length, JSON header,
 * zero padding to 4 bytes, then f32 LE values.
 */
export function unpackFloats<T>(buf: ArrayBuffer): { meta: T; data: Float32Array } {
  const view = new DataView(buf);
  const h = view.getUint32(0, true);
  const meta = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, h))) as T;
  const start = Math.ceil((4 + h) / 4) * 4;
  const n = (buf.byteLength - start) / 4;
  // Copy out: the values are little-endian, as on every platform Tauri runs on.
  const data = new Float32Array(buf.slice(start, start + n * 4));
  return { meta, data };
}

function channel<T>(on: (ev: T) => void): Channel<T> {
  const ch = new Channel<T>();
  ch.onmessage = on;
  return ch;
}

// ---------- commands ----------

export const api = {
  appInfo: () => call<AppInfo>('app_info'),

  // files (the backend shows the dialog and remembers the choice)
  pickOpen: (kind: FileKind) => call<string | null>('pick_open', { kind }),
  pickSave: (kind: FileKind, defaultName: string) =>
    call<string | null>('pick_save', { kind, defaultName }),
  readTextFile: (path: string) => call<string>('read_text_file', { path }),
  writeTextFile: (path: string, contents: string) =>
    call<void>('write_text_file', { path, contents }),

  // model
  adapters: () => call<AdapterSummary[]>('adapters_list'),
  loadModel: (path: string | null, adapter: number | null, onProgress: (p: LoadProgress) => void) =>
    call<ModelInfo>('model_load', { path, adapter, onProgress: channel(onProgress) }),
  modelInfo: () => call<ModelInfo | null>('model_info'),
  unloadModel: () => call<void>('model_unload'),

  // adapters (LoRA and initial-state files; paths come from `pickOpen`)
  adapterLibrary: () => call<AdapterLibrary>('adapter_library'),
  addLora: (path: string) => call<AdapterLibrary>('lora_add', { path }),
  addInitState: (path: string) => call<AdapterLibrary>('init_state_add', { path }),
  updateLora: (path: string, scale: number, enabled: boolean) =>
    call<AdapterLibrary>('lora_update', { path, scale, enabled }),
  useInitState: (path: string | null) => call<AdapterLibrary>('init_state_use', { path }),
  removeAdapter: (path: string) => call<AdapterLibrary>('adapter_remove', { path }),

  // chat
  chats: () => call<ChatSummary[]>('chat_list'),
  chat: (id: string) => call<Chat>('chat_get', { id }),
  createChat: () => call<Chat>('chat_create'),
  deleteChat: (id: string) => call<void>('chat_delete', { id }),
  renameChat: (id: string, title: string) => call<Chat>('chat_rename', { id, title }),
  chatSettings: (id: string, settings: GenerateOptions) =>
    call<Chat>('chat_settings', { id, settings }),
  send: (id: string, text: string, on: (e: ChatEvent) => void) =>
    call<Message>('chat_send', { id, text, onEvent: channel(on) }),
  regenerate: (id: string, index: number, on: (e: ChatEvent) => void) =>
    call<Message>('chat_regenerate', { id, index, onEvent: channel(on) }),
  edit: (id: string, index: number, text: string, on: (e: ChatEvent) => void) =>
    call<Message>('chat_edit', { id, index, text, onEvent: channel(on) }),
  stop: (id: string) => call<boolean>('chat_stop', { id }),

  // documents
  documents: () => call<Document[]>('doc_list'),
  /** "Extract fields as JSON": fills `schema` from the document's state (greedy). */
  extractJson: (id: string, schema: unknown, maxTokens: number) =>
    call<Extracted>('doc_extract_json', { id, schema, maxTokens }),
  createDocument: (name: string, text: string) => call<Document>('doc_create', { name, text }),
  deleteDocument: (id: string) => call<void>('doc_delete', { id }),
  chatAboutDocument: (id: string) => call<Chat>('doc_chat', { id }),
  exportDocument: (id: string, path: string) => call<void>('doc_export', { id, path }),
  importDocument: (path: string) => call<Document>('doc_import', { path }),

  // fields
  runFields: async (document: string | null, fields: FieldInput[]): Promise<FieldsResult> => {
    const buf = await call<ArrayBuffer>('fields_run', { document, fields });
    const { meta, data } = unpackFloats<FieldsMeta>(buf);
    const vectors = meta.fields.map((_, i) => data.subarray(i * meta.dim, (i + 1) * meta.dim));
    return { meta, vectors };
  },

  // benchmarks
  runBench: (options: BenchOptions, onProgress: (e: BenchProgress) => void) =>
    call<Dashboard>('bench_run', { options, onProgress: channel(onProgress) }),
  benchDashboard: () => call<Dashboard>('bench_dashboard'),
  clearBench: () => call<void>('bench_clear'),

  // local server (127.0.0.1 only)
  serverStart: (port: number, apiKey: string | null, parallel: number) =>
    call<ServerStatus>('server_start', { port, apiKey, parallel }),
  serverStop: () => call<ServerStatus>('server_stop'),
  serverStatus: () => call<ServerStatus>('server_status'),

  // model catalog, downloads, library
  catalog: () => call<CatalogView>('catalog_list'),
  catalogAdd: (entry: CatalogEntry) => call<CatalogView>('catalog_add', { entry }),
  downloadStart: (
    what: { name: string } | { url: string; sha256: string | null },
    on: (s: DownloadStatus) => void,
  ) =>
    call<DownloadStatus>('download_start', {
      name: 'name' in what ? what.name : null,
      url: 'url' in what ? what.url : null,
      sha256: 'url' in what ? what.sha256 : null,
      onEvent: channel(on),
    }),
  downloadResume: (fileName: string, on: (s: DownloadStatus) => void) =>
    call<DownloadStatus>('download_resume', { fileName, onEvent: channel(on) }),
  downloadPause: (fileName: string) => call<DownloadStatus[]>('download_pause', { fileName }),
  downloadCancel: (fileName: string) => call<DownloadStatus[]>('download_cancel', { fileName }),
  downloads: () => call<DownloadStatus[]>('downloads_list'),
  library: () => call<LibraryView>('library_list'),
  libraryAdd: (path: string) => call<LibraryView>('library_add', { path }),
  libraryDelete: (path: string) => call<LibraryView>('library_delete', { path }),
  libraryReveal: (path: string) => call<void>('library_reveal', { path }),
};

export type Api = typeof api;

/** Files dropped on the window (their paths are then accepted by the backend). */
export async function onFileDrop(
  cb: (paths: string[]) => void,
  hover?: (over: boolean) => void,
): Promise<() => void> {
  const { getCurrentWebview } = await import('@tauri-apps/api/webview');
  return getCurrentWebview().onDragDropEvent((e) => {
    if (e.payload.type === 'drop') cb(e.payload.paths);
    hover?.(e.payload.type === 'enter' || e.payload.type === 'over');
  });
}

/** An SVG document (the engine's charts) as an `<img>` source (CSP allows `img-src data:`). */
export function svgDataUrl(svg: string): string {
  return `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`;
}
