// Chat display helpers.

import type { ReplyStats, StopReason } from './api';
import { fmtMs, fmtRate } from './format';

const stopLabel: Record<StopReason, string> = {
  max_tokens: 'max tokens',
  stop_token: 'end of text',
  stop_string: 'stop string',
  cancelled: 'stopped',
  callback: 'stopped',
};

/** The line under a reply: tokens, speed, time to first token, prompt, why it stopped. */
export function statsLine(s: ReplyStats): string {
  const parts = [
    `${s.generated_tokens} tok`,
    fmtRate(s.decode_tok_s),
    `first token ${fmtMs(s.ttft_ms)}`,
    `prompt ${s.prompt_tokens} tok @ ${fmtRate(s.prefill_tok_s)}`,
    stopLabel[s.stop] ?? s.stop,
  ];
  if (!s.resumed) parts.push('history prefilled');
  return parts.join(' · ');
}
