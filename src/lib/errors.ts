// The backend's failures as the frontend sees them: `AppError` (`src-tauri/src/error.rs`),
// its guards, and a title for each `ErrorCode` (generated into `wire.gen.ts`).
// Re-exported by `api.ts`, the module components import.

import type { ErrorCode } from './wire.gen';

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
