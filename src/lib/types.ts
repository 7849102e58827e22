// Every value the backend's commands send or take, mirrored from the Rust types named in
// each docstring (serde's field names kept). Types only: re-exported by `api.ts`, the
// module components import.

import type { StopReason } from './wire.gen';
import type { AppError } from './errors';

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
