import { describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen } from '@testing-library/svelte';
import MessageItem from './MessageItem.svelte';
import Heatmap from './Heatmap.svelte';
import ErrorBox from './ErrorBox.svelte';
import SamplingSettings from './SamplingSettings.svelte';
import type { GenerateOptions, Message } from '../lib/api';

const reply: Message = {
  id: 'a1',
  role: 'assistant',
  text: ' The ship was gone.',
  model: 'm.gguf',
  created_ms: 0,
  stats: {
    prompt_tokens: 14, generated_tokens: 6, ttft_ms: 42.5, prefill_ms: 40, decode_ms: 100,
    prefill_tok_s: 350, decode_tok_s: 50, stop: 'stop_string', resumed: true,
  },
};

describe('MessageItem', () => {
  it('shows the reply, its stats line and regenerates on click', async () => {
    const onregenerate = vi.fn();
    render(MessageItem, { message: reply, onregenerate });
    expect(screen.getByTestId('msg-text').textContent).toBe('The ship was gone.');
    const stats = screen.getByTestId('reply-stats').textContent ?? '';
    expect(stats).toContain('6 tok');
    expect(stats).toContain('50.0 tok/s');
    expect(stats).toContain('first token 43 ms');
    expect(stats).toContain('stop string');
    await fireEvent.click(screen.getByTestId('regenerate'));
    expect(onregenerate).toHaveBeenCalledOnce();
  });

  it('hides stats and actions while streaming', () => {
    render(MessageItem, { message: reply, streaming: true });
    expect(screen.queryByTestId('reply-stats')).toBeNull();
    expect(screen.queryByTestId('regenerate')).toBeNull();
  });

  it('edits a user message and resends the new text', async () => {
    const onedit = vi.fn();
    render(MessageItem, { message: { ...reply, role: 'user', text: 'Hello', stats: null }, onedit });
    await fireEvent.click(screen.getByTestId('edit'));
    const ta = screen.getByTestId('edit-text') as HTMLTextAreaElement;
    await fireEvent.input(ta, { target: { value: 'Hello again' } });
    await fireEvent.click(screen.getByTestId('edit-send'));
    expect(onedit).toHaveBeenCalledWith('Hello again');
  });
});

describe('Heatmap', () => {
  it('draws n×n cells carrying their values', () => {
    render(Heatmap, { labels: ['a', 'b'], values: [[1, -0.25], [-0.25, 1]] });
    const cells = screen.getAllByTestId('heat-cell');
    expect(cells).toHaveLength(4);
    expect(cells.map((c) => c.textContent?.trim())).toEqual(['1.00', '-0.25', '-0.25', '1.00']);
    expect(Number(cells[1].dataset.value)).toBe(-0.25);
  });
});

describe('ErrorBox', () => {
  it('shows a readable title, the message and the code', () => {
    render(ErrorBox, { error: { code: 'malformed_file', message: 'x.gguf: malformed GGUF file: truncated' } });
    expect(screen.getByRole('alert').textContent).toContain('This file is damaged or incomplete');
    expect(screen.getByTestId('error-message').textContent).toContain('truncated');
  });

  it('renders nothing without an error', () => {
    const { container } = render(ErrorBox, { error: null });
    expect(container.querySelector('[role=alert]')).toBeNull();
  });
});

describe('SamplingSettings', () => {
  const settings: GenerateOptions = {
    max_tokens: 200,
    sampler: {
      temperature: 1, top_p: 0.3, top_k: 0, min_p: 0, presence_penalty: 0.5, frequency_penalty: 0.5,
      penalty_decay: 0.996, repetition_penalty: 1, seed: null, stop_tokens: [0], stop_strings: ['\n\n'], banned_tokens: [],
    },
  };

  it('edits temperature, seed and stop strings', async () => {
    const onchange = vi.fn();
    render(SamplingSettings, { settings, onchange });
    expect((screen.getByTestId('set-stops') as HTMLTextAreaElement).value).toBe('\\n\\n');
    await fireEvent.change(screen.getByTestId('set-temperature'), { target: { value: '0.7' } });
    expect(onchange).toHaveBeenLastCalledWith({ max_tokens: 200, sampler: { ...settings.sampler, temperature: 0.7 } });
    await fireEvent.change(screen.getByTestId('set-seed'), { target: { value: '42' } });
    expect(onchange.mock.lastCall?.[0].sampler.seed).toBe(42);
    await fireEvent.change(screen.getByTestId('set-stops'), { target: { value: '\\n\\n\nTHE END' } });
    expect(onchange.mock.lastCall?.[0].sampler.stop_strings).toEqual(['\n\n', 'THE END']);
  });
});
