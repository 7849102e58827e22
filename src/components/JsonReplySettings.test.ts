import { describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen } from '@testing-library/svelte';
import JsonReplySettings from './JsonReplySettings.svelte';
import type { GenerateOptions } from '../lib/api';

const base: GenerateOptions = {
  max_tokens: 64,
  sampler: {
    temperature: 1, top_p: 0.3, top_k: 0, min_p: 0, presence_penalty: 0.5, frequency_penalty: 0.5,
    penalty_decay: 0.996, repetition_penalty: 1, seed: null, stop_tokens: [0], stop_strings: ['\n\n'],
    banned_tokens: [],
  },
};

describe('JsonReplySettings ("Reply as JSON (schema)")', () => {
  it('turns the schema on as a json_schema constraint, keeping the sampler, and off again', async () => {
    const onchange = vi.fn();
    render(JsonReplySettings, { settings: base, onchange });
    const area = screen.getByTestId('json-reply-schema') as HTMLTextAreaElement;
    await fireEvent.change(area, { target: { value: '{"type": "object", "properties": {"a": {"type": "integer"}}}' } });
    expect(onchange).not.toHaveBeenCalled(); // off: editing alone changes nothing
    await fireEvent.click(screen.getByTestId('json-reply-toggle'));
    const sent = onchange.mock.calls.at(-1)?.[0] as GenerateOptions;
    expect(sent.constraint).toEqual({ type: 'json_schema', value: { type: 'object', properties: { a: { type: 'integer' } } } });
    expect(sent.sampler).toEqual(base.sampler);
    expect(sent.max_tokens).toBe(64);
  });

  it('names a schema that is not JSON and sends nothing', async () => {
    const onchange = vi.fn();
    render(JsonReplySettings, { settings: { ...base, constraint: { type: 'json_schema', value: { type: 'object' } } }, onchange });
    await fireEvent.change(screen.getByTestId('json-reply-schema'), { target: { value: '{oops' } });
    expect(screen.getByTestId('json-reply-problem').textContent).toMatch(/Not JSON/);
    expect(onchange).not.toHaveBeenCalled();
    await fireEvent.click(screen.getByTestId('json-reply-toggle')); // checked → off
    expect((onchange.mock.calls.at(-1)?.[0] as GenerateOptions).constraint).toBeNull();
  });
});
