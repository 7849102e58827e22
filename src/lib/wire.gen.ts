// Generated from the backend's enums by src-tauri/tests/frontend_types.rs: do not edit.
// Regenerate: RWKV_WRITE_WIRE_TYPES=1 cargo test -p rwkv-studio --test frontend_types

/** `AppError.code`: what went wrong (`ErrorCode` in src-tauri/src/error.rs; docs/app.md). */
export type ErrorCode =
  /** The engine: the operating system refused a file operation (the path is in `details.path`). Also the app's, for its own files and the user's. */
  | 'io'
  /** The engine: a model, adapter or state file is not a well-formed instance of its format (truncated, bad magic, an offset past the end). */
  | 'malformed_file'
  /** The engine: a well-formed file that is not an RWKV-7 model (another architecture). */
  | 'not_rwkv7'
  /** The engine: an RWKV-7 model this engine cannot run (a head size other than 64). */
  | 'unsupported_model'
  /** The engine: a tensor the model needs is absent from the file. */
  | 'missing_tensor'
  /** The engine: a tensor of the file has another shape than the architecture needs. */
  | 'tensor_shape'
  /** The engine: a tensor is stored in an encoding the engine does not read. */
  | 'unsupported_type'
  /** The engine: the model's tokenizer vocabulary is unusable. */
  | 'tokenizer'
  /** The engine: no usable GPU, a lost device, or a GPU fault. */
  | 'gpu'
  /** The engine: an operation with inconsistent shapes (an engine bug or bad input). */
  | 'op'
  /** The engine: the model or a request needs more GPU memory than the device has. */
  | 'too_large'
  /** The engine: one call would return more than the engine returns at once. */
  | 'output_too_large'
  /** The engine: a value out of range (sampling settings, token ids, an empty prompt). */
  | 'invalid_input'
  /** The engine: a LoRA or initial-state file that does not fit the model (named). */
  | 'adapter'
  /** The engine: a state file or state that belongs to another model or is damaged. */
  | 'state'
  /** The engine: a JSON Schema or grammar that constrained decoding cannot use (the message names the construct). */
  | 'constraint'
  /** The engine: the operation was cancelled by its caller. */
  | 'cancelled'
  /** No model is loaded (load one in the Model view first). */
  | 'no_model'
  /** A chat, document or adapter the request names does not exist (`details.what`, `details.id`). */
  | 'not_found'
  /** The request itself is wrong: an empty or too large text, an id that is not one, a setting out of range. */
  | 'bad_request'
  /** A chat message longer than a chat takes (`details.bytes`, `details.max`); add long texts as documents. */
  | 'too_long'
  /** A file the user chose to read as text is not UTF-8. */
  | 'not_text'
  /** A path the user did not choose in a dialog or drop on the window, or chose for the other direction (read / write). */
  | 'scope'
  /** A stored file of the app (a chat, document, the adapter list) does not parse (`details.path`). */
  | 'corrupt_file'
  /** The local server (Model view) could not start or stopped: its port is taken (`details.port`), it runs already, or its engine thread failed. */
  | 'server'
  /** A model download could not connect: offline, a wrong host, or the server is down (`details.url`). */
  | 'offline'
  /** A model download failed on the way: the server answered an error (404 and others, `details.status`), the connection broke (the `.part` stays; resume continues it), or the server's file has another size than the catalog says (`details.url`). */
  | 'download'
  /** A downloaded model does not hash to the SHA-256 its catalog entry (or the user) gave; the partial file was deleted (`details.expected`, `details.got`). */
  | 'checksum'
  /** Too little free disk space for a model download (checked before it starts, `details.needed`, `details.available`), or the disk filled up while writing. */
  | 'disk_space'
  /** The model catalog: a catalog file or a new entry that breaks the schema (the entry and rule named), a name no entry has, or a URL / SHA-256 that is not one. */
  | 'catalog'
  /** The engine's worker thread is gone; the app must be restarted. */
  | 'worker'
  /** A bug of the app (a state it should never reach); the message says which. */
  | 'internal';

/** Every `ErrorCode`, in the backend's order. */
export const ERROR_CODES: readonly ErrorCode[] = ['io', 'malformed_file', 'not_rwkv7', 'unsupported_model', 'missing_tensor', 'tensor_shape', 'unsupported_type', 'tokenizer', 'gpu', 'op', 'too_large', 'output_too_large', 'invalid_input', 'adapter', 'state', 'constraint', 'cancelled', 'no_model', 'not_found', 'bad_request', 'too_long', 'not_text', 'scope', 'corrupt_file', 'server', 'offline', 'download', 'checksum', 'disk_space', 'catalog', 'worker', 'internal'];

/** Why a reply ended: `ReplyStats.stop` (`rwkv_engine::StopReason`, by its serde names). */
export type StopReason = 'max_tokens' | 'stop_token' | 'stop_string' | 'cancelled' | 'callback';

/** Every `StopReason`, in the engine's order. */
export const STOP_REASONS: readonly StopReason[] = ['max_tokens', 'stop_token', 'stop_string', 'cancelled', 'callback'];
