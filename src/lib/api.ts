// The frontend's one door to the backend: every command of `src-tauri/src/commands/` and
// every type it sends, mirrored. Components import from here and never call `invoke`.
// The backend's wire enums (`ErrorCode`, `StopReason`) are not mirrored by hand: they are
// generated into `wire.gen.ts` (`src-tauri/tests/frontend_types.rs` checks it is current).
//
// Naming: Tauri maps camelCase argument names here to the commands' snake_case
// parameters (`onProgress` → `on_progress`); the values' fields keep the Rust names.

import { Channel, invoke } from '@tauri-apps/api/core';
import type { ErrorCode, StopReason } from './wire.gen';

export type { ErrorCode, StopReason } from './wire.gen';

// ---------- errors ----------

/**
 * Every failure of a command: `error.rs` `AppError`, whose `code` is an `ErrorCode` (the
 * engine's codes from `EngineError::code`, and the app's). `ipc`: the call itself failed
 * (the frontend's own code, set by `toAppError`).
 */
export interface AppError {
  code: ErrorCode | 'ipc';
  message: string;
  details?: unknown;
}

export function isAppError(e: unknown): e is AppError {
  return (
    typeof e === 'object' && e !== null && typeof (e as AppError).code === 'string' &&
    typeof (e as AppError).message === 'string'
  );
}

/** Turns anything thrown into an `AppError` (IPC failures arrive as strings). */
export function toAppError(e: unknown): AppError {
  if (isAppError(e)) return e;
  if (e instanceof Error) return { code: 'ipc', message: e.message };
  return { code: 'ipc', message: String(e) };
}

const SOMETHING_WENT_WRONG = 'Something went wrong';

/** A title for each code, for people (a `Record`: a code without a title fails `npm run check`). */
const ERROR_TITLES: Record<ErrorCode | 'ipc', string> = {
  io: 'The file could not be read',
  malformed_file: 'This file is damaged or incomplete',
  not_rwkv7: 'Not an RWKV-7 model',
  unsupported_model: 'This model is not supported',
  missing_tensor: 'The model file does not match the RWKV-7 layout',
  tensor_shape: 'The model file does not match the RWKV-7 layout',
  unsupported_type: 'Unsupported tensor type',
  tokenizer: SOMETHING_WENT_WRONG,
  gpu: 'GPU problem',
  op: SOMETHING_WENT_WRONG,
  too_large: 'The model does not fit this GPU',
  output_too_large: 'Too much output for one request',
  invalid_input: 'Check the input',
  adapter: 'This adapter does not fit the model',
  state: 'This state file cannot be used',
  constraint: 'This schema or grammar cannot be used',
  cancelled: SOMETHING_WENT_WRONG,
  no_model: 'No model loaded',
  not_found: SOMETHING_WENT_WRONG,
  bad_request: 'Check the input',
  too_long: 'Too long for a chat message',
  not_text: 'Not a text file',
  scope: 'Choose the file first',
  corrupt_file: 'A stored file is damaged',
  server: 'Local server problem',
  offline: 'Cannot reach the download server',
  download: 'The download failed',
  checksum: 'The download is damaged (checksum mismatch)',
  disk_space: 'Not enough disk space',
  catalog: 'Check the catalog entry',
  worker: SOMETHING_WENT_WRONG,
  internal: SOMETHING_WENT_WRONG,
  ipc: SOMETHING_WENT_WRONG,
};

/** A title for an error code, for people (an unknown code: a general one). */
export function errorTitle(code: string): string {
  return Object.prototype.hasOwnProperty.call(ERROR_TITLES, code)
    ? ERROR_TITLES[code as ErrorCode | 'ipc']
    : SOMETHING_WENT_WRONG;
}

async function call<T>(cmd: string, args?: Record<string, unknown>): Promise<T> {
  try {
    return await invoke<T>(cmd, args);
  } catch (e) {
    throw toAppError(e);
  }
}

// ---------- engine types (rwkv-engine, serde) ----------

export interface LoraRanks {
  decay_w: number;
  iclr_a: number;
  value_v: number;
  gate_g: number;
}

export interface Rwkv7Config {
  n_layer: number;
  n_embd: number;
  head_size: number;
  n_head: number;
  ffn_dim: number;
  vocab_size: number;
  lora: LoraRanks;
}

export interface AdapterSummary {
  index: number;
  name: string;
  backend: string;
  device_type: string;
  driver: string;
  driver_info: string;
}

export interface GpuFeatures {
  shader_f16: boolean;
  subgroup: boolean;
  timestamp: boolean;
  timestamp_inside_passes: boolean;
}

export interface ModelInfo {
  path: string;
  format: string;
  file_bytes: number;
  config: Rwkv7Config;
  /** Encodings on the GPU with tensor counts, e.g. `[["Q4_K", 120], ["F32", 84]]`. */
  gpu_types: [string, number][];
  gpu_weight_bytes: number;
  gpu_total_bytes: number;
  adapter: AdapterSummary;
  features: GpuFeatures;
  load_ms: number;
}

/** `LoadProgress` (tagged by `phase`). */
export type LoadProgress =
  | { phase: 'open' }
  | { phase: 'device' }
  | {
      phase: 'upload';
      tensors_done: number;
      tensors_total: number;
      /** Bytes of the weights as laid out on the GPU. */
      bytes_done: number;
      bytes_total: number;
    }
  | { phase: 'compile' }
  | { phase: 'ready' };

export interface SamplerOptions {
  temperature: number;
  top_p: number;
  top_k: number;
  min_p: number;
  presence_penalty: number;
  frequency_penalty: number;
  penalty_decay: number;
  repetition_penalty: number;
  seed: number | null;
  stop_tokens: number[];
  stop_strings: string[];
  banned_tokens: number[];
}

/** What a reply must match (`rwkv_engine::ConstraintSpec`, docs/structured-output.md). */
export type ConstraintSpec =
  | { type: 'json_schema'; value: unknown }
  | { type: 'json_object' }
  | { type: 'regex'; value: string }
  | { type: 'lark'; value: string }
  | { type: 'gbnf'; value: string };

export interface GenerateOptions {
  max_tokens: number;
  sampler: SamplerOptions;
  /** "Reply as JSON (schema)": the reply is JSON valid against it; absent/null: free text. */
  constraint?: ConstraintSpec | null;
}

/** `doc_extract_json`'s answer (`extract::Extracted`). */
export interface Extracted {
  /** The JSON text (valid against the schema when `complete`). */
  json: string;
  /** `false`: max tokens cut the JSON, which is then not valid. */
  complete: boolean;
  generated_tokens: number;
  decode_tok_s: number;
  setup_ms: number;
  compile_ms: number;
}

// ---------- app types (src-tauri) ----------

/** A stored file that did not read at startup, moved to `set-aside/` (`store::SetAside`). */
export interface SetAside {
  /** `chat 0189…`, `document 0189…`, `benchmark history`. */
  item: string;
  /** Where it was, relative to the data folder. */
  was: string;
  /** Where it is now. */
  now: string;
  reason: string;
}

export interface AppInfo {
  version: string;
  /** The commit the app was built from (12 hex digits, or `unknown`). */
  commit: string;
  data_dir: string;
  default_model: string;
  set_aside: SetAside[];
}

export type FileKind = 'model' | 'text' | 'state' | 'csv' | 'json' | 'lora' | 'init_state';

export type Role = 'user' | 'assistant';

export interface ReplyStats {
  prompt_tokens: number;
  generated_tokens: number;
  ttft_ms: number;
  prefill_ms: number;
  decode_ms: number;
  prefill_tok_s: number;
  decode_tok_s: number;
  /** Why the reply ended. */
  stop: StopReason;
  /** Resumed from a stored state (false: the history was prefilled again). */
  resumed: boolean;
}

export interface Message {
  id: string;
  role: Role;
  text: string;
  stats: ReplyStats | null;
  model: string | null;
  created_ms: number;
}

/** A LoRA in use: its file and the scale `s` of its delta `s · B A` (`store::LoraUse`). */
export interface LoraUse {
  path: string;
  scale: number;
}

/**
 * The adapters a chat, document, field analysis or benchmark run uses (`store::AdapterSet`):
 * LoRAs on every pass, and the initial-state file its first state starts from. Empty: the base
 * model from the zero state.
 */
export interface AdapterSet {
  loras: LoraUse[];
  init_state: string | null;
}

/** A LoRA file in the Model view's list (`library::LoraEntry`). */
export interface LoraEntry {
  path: string;
  name: string;
  /** `safetensors`, `pth` or `gguf`. */
  format: string;
  rank: number;
  alpha: number | null;
  /** Adapted block matrices (`att.key`, `ffn.value`, …). */
  targets: string[];
  matrices: number;
  layers: number;
  /** alpha / rank when the file holds alpha, else 1. */
  default_scale: number;
  scale: number;
  enabled: boolean;
}

/** An initial-state file in the list (`library::StateEntry`). */
export interface StateEntry {
  path: string;
  name: string;
  format: string;
  n_layer: number;
  n_head: number;
  head_size: number;
  active: boolean;
}

/** The Model view's adapter list (`library::Library`). */
export interface AdapterLibrary {
  loras: LoraEntry[];
  states: StateEntry[];
}

export interface DocRef {
  id: string;
  name: string;
}

export interface Chat {
  id: string;
  title: string;
  created_ms: number;
  updated_ms: number;
  settings: GenerateOptions;
  document: DocRef | null;
  /** The adapters every turn runs with. */
  adapters: AdapterSet;
  messages: Message[];
}

export interface ChatSummary {
  id: string;
  title: string;
  updated_ms: number;
  messages: number;
  document: DocRef | null;
  adapters: AdapterSet;
}

/** What a reply streams (`chat.rs` `ChatEvent`, tagged by `event`). */
export type ChatEvent =
  | { event: 'started'; user: Message; assistant_id: string }
  | { event: 'text'; text: string; tokens: number };

export interface Document {
  id: string;
  name: string;
  chars: number;
  tokens: number;
  prefill_ms: number;
  tok_s: number;
  model: string;
  created_ms: number;
  preview: string;
  /** The adapters its state was prefilled with. */
  adapters: AdapterSet;
}

export interface FieldInput {
  label: string;
  text: string;
}

/** One field of the engine's `FieldAnalysis` (its embedding arrives as bytes). */
export interface FieldResult {
  label: string;
  tokens: number;
  norm: number;
  embedding: number[];
  cached: boolean;
  time_share: number;
  time_ms: number;
}

export interface FieldTiming {
  total_ms: number;
  tokenize_ms: number;
  forward_ms: number;
  similarity_ms: number;
}

/** The engine's `FieldAnalysis` plus the app's document facts (`documents.rs` `FieldsMeta`). */
export interface FieldsMeta {
  /** Model fingerprint (hex). */
  model: string;
  pooling: string;
  with_document: boolean;
  dim: number;
  fields: FieldResult[];
  /** `[F][F]` cosine similarities, computed by the engine. */
  similarity: number[][];
  timing: FieldTiming;
  document: string | null;
  /** The adapters the analysis ran with. */
  adapters: AdapterSet;
  /** Loading (or prefilling again) the document's state, ms. */
  setup_ms: number;
  resumed: boolean;
}

export interface FieldsResult {
  meta: FieldsMeta;
  /** One vector per field, `dim` values each. */
  vectors: Float32Array[];
}

export interface BenchOptions {
  title: string;
  prompt_tokens: number;
  decode_tokens: number;
}

/** `rwkv_bench::BenchProgress`. */
export interface BenchProgress {
  step: string;
  done: number;
  total: number;
}

export interface Figure {
  median: number;
  min: number;
  max: number;
  n: number;
}

/** `rwkv_bench::BenchReport`: one run, the keys `rwkv bench --json` prints. */
export interface BenchReport {
  title: string;
  change: string;
  date: string;
  model: { path: string; n_layer: number; n_embd: number; types: string[]; file_bytes: number };
  adapter: string;
  backend: string;
  driver: string;
  commit: string;
  command: string;
  load_ms: number;
  load_cold_ms: number | null;
  ttft_ms: number;
  /** Prompt length → tok/s. */
  prefill_tok_s: Record<string, number>;
  decode_tok_s: number;
  doc_state_ms: number;
  fields_ms: number;
  tokenize_us: number;
  gpu_mem_mib: number;
  figures: Record<string, Figure>;
  /** LoRA adapters active in the measured passes, `name ×scale (rank r)` (absent: none). */
  lora?: string[];
  /** The initial-state file the measured states started from. */
  init_state?: string | null;
}

/** `rwkv_engine::profile::Total`. */
export interface ProfileTotal {
  name: string;
  ns: number;
  percent: number;
  dispatches: number;
}

/** `bench.rs` `Dashboard`: runs and the CLI's SVG charts (`rwkv_bench::charts`). */
export interface Dashboard {
  runs: BenchReport[];
  history_svg: string;
  profile_svg: string | null;
  profile_by_op: ProfileTotal[] | null;
}

// ---------- local server ----------

/** `rwkv_server::ServerStats`: the local server's counters since it started. */
export interface ServerStats {
  /** HTTP requests answered. */
  requests: number;
  /** Sequences in the running batch (streams generating now). */
  active: number;
  /** Requests waiting for a place in the batch. */
  queued: number;
  generated_tokens: number;
  prompt_tokens: number;
  /** Prompt tokens resumed from the conversation state cache instead of prefilled. */
  cached_tokens: number;
  cache_hits: number;
  cache_misses: number;
  cache_entries: number;
  /** Generated tokens per second over the last 5 s. */
  tok_s: number;
  uptime_s: number;
}

/** `worker/server.rs` `ServerStatus`: the Local server panel's view. */
export interface ServerStatus {
  running: boolean;
  /** `http://127.0.0.1:PORT/v1` while running. */
  base_url: string | null;
  port: number | null;
  /** The model id clients see: the model file's stem. */
  model_id: string | null;
  parallel: number | null;
  /** Whether clients must send `Authorization: Bearer <key>`. */
  api_key: boolean;
  stats: ServerStats | null;
  /** Why it stopped by itself (the model was unloaded or replaced). */
  stopped: string | null;
}

// ---------- model catalog, downloads, library ----------

/** `rwkv_models::Encoding` by its serde name. */
export type Encoding = 'gguf-q4_k_m' | 'gguf-q8_0' | 'gguf-f16' | 'safetensors' | 'pth';

/** One catalog entry (`rwkv_models::Entry`): the schema of `assets/catalog/models.json`. */
export interface CatalogEntry {
  name: string;
  family: string;
  parameters: string;
  encoding: Encoding;
  file_name: string;
  size_bytes: number;
  /** Lower-case hex; null when the source publishes none. */
  sha256: string | null;
  urls: string[];
  license: string;
  ram_bytes: number | null;
  vram_bytes: number | null;
  description: string;
  /** Where the entry's facts come from. */
  source: string;
}

/** `commands/models.rs` `CatalogItem`: an entry, and whether the user's catalog holds it. */
export interface CatalogItem extends CatalogEntry {
  user: boolean;
}

/** `commands/models.rs` `CatalogView`. */
export interface CatalogView {
  entries: CatalogItem[];
  /** The user's catalog file (where "Add an entry" writes). */
  user_catalog: string | null;
  library_dir: string;
}

/** `downloads.rs` `DownloadStatus` (its `state` tags the variant's own fields). */
export type DownloadStatus = {
  file_name: string;
  name: string | null;
  url: string;
  done: number;
  total: number | null;
  /** Bytes per second. */
  rate: number;
  eta_s: number | null;
  sha256: string | null;
} & (
  | { state: 'running' }
  | { state: 'verifying' }
  | { state: 'paused' }
  | { state: 'failed'; error: AppError; resumable: boolean }
  | { state: 'cancelled' }
  | { state: 'done'; path: string; sha256: string; verified: boolean }
);

export type DownloadState = DownloadStatus['state'];

/** `model_library.rs` `LibraryModel`. */
export interface LibraryModel {
  path: string;
  file_name: string;
  bytes: number;
  encoding: string;
  catalog: string | null;
  vram_bytes: number;
  vram_estimated: boolean;
  origin: 'downloaded' | 'added';
  missing: boolean;
}

/** `gpu_memory.rs` `GpuMemory`. */
export interface GpuMemory {
  adapter: string;
  /** Null where the backend does not say. */
  bytes: number | null;
}

/** `commands/models.rs` `LibraryView`. */
export interface LibraryView {
  dir: string;
  models: LibraryModel[];
  gpu: GpuMemory | null;
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
