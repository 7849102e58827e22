import { beforeEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor } from '@testing-library/svelte';
import type { Chat, ChatEvent, Message } from '../lib/api';

// The backend is replaced here only: the view's logic (streaming, stop, regenerate) is tested
// against the API contract of src/lib/api.ts.
const mocks = vi.hoisted(() => ({
  chats: vi.fn(),
  chat: vi.fn(),
  createChat: vi.fn(),
  send: vi.fn(),
  regenerate: vi.fn(),
  stop: vi.fn(),
  chatSettings: vi.fn(),
  deleteChat: vi.fn(),
  modelInfo: vi.fn(),
  appInfo: vi.fn(),
}));
vi.mock('../lib/api', async (orig) => ({ ...(await orig<typeof import('../lib/api')>()), api: mocks }));

import ChatView from './ChatView.svelte';
import { app } from '../lib/state.svelte';

const settings = {
  max_tokens: 200,
  sampler: {
    temperature: 1, top_p: 0.3, top_k: 0, min_p: 0, presence_penalty: 0.5, frequency_penalty: 0.5,
    penalty_decay: 0.996, repetition_penalty: 1, seed: null, stop_tokens: [0], stop_strings: ['\n\n'], banned_tokens: [],
  },
};
const empty: Chat = {
  id: 'c1', title: 'New chat', created_ms: 0, updated_ms: 0, settings, document: null, messages: [],
  adapters: { loras: [], init_state: null },
};
const user: Message = { id: 'u1', role: 'user', text: 'Hello', stats: null, model: null, created_ms: 1 };
const reply: Message = {
  id: 'a1', role: 'assistant', text: ' Good evening, sir.', model: 'm.gguf', created_ms: 2,
  stats: { prompt_tokens: 6, generated_tokens: 5, ttft_ms: 30, prefill_ms: 30, decode_ms: 80, prefill_tok_s: 200, decode_tok_s: 50, stop: 'stop_string', resumed: true },
};

describe('ChatView', () => {
  beforeEach(() => {
    Object.values(mocks).forEach((m) => m.mockReset());
    app.model = { path: '/m.gguf' } as never;
    mocks.chats.mockResolvedValue([]);
    mocks.createChat.mockResolvedValue(empty);
    mocks.stop.mockResolvedValue(true);
  });

  it('streams a reply, offers Stop while it runs, then shows the stats line', async () => {
    let finish: (m: Message) => void = () => {};
    let emit: (e: ChatEvent) => void = () => {};
    mocks.send.mockImplementation((_id: string, _text: string, on: (e: ChatEvent) => void) => {
      emit = on;
      return new Promise<Message>((r) => (finish = r));
    });
    render(ChatView);
    await waitFor(() => expect(mocks.createChat).toHaveBeenCalled());

    const input = screen.getByTestId('chat-input');
    await fireEvent.input(input, { target: { value: 'Hello' } });
    await fireEvent.click(screen.getByTestId('send'));
    expect(mocks.send).toHaveBeenCalledWith('c1', 'Hello', expect.any(Function));

    emit({ event: 'started', user, assistant_id: 'a1' });
    emit({ event: 'text', text: ' Good', tokens: 1 });
    emit({ event: 'text', text: ' evening', tokens: 1 });
    await waitFor(() => expect(screen.getAllByTestId('msg-text')[1].textContent).toBe('Good evening'));
    await fireEvent.click(screen.getByTestId('stop'));
    expect(mocks.stop).toHaveBeenCalledWith('c1');

    mocks.chat.mockResolvedValue({ ...empty, messages: [user, reply] });
    finish(reply);
    await waitFor(() => expect(screen.getByTestId('reply-stats').textContent).toContain('50.0 tok/s'));
    expect(screen.getByTestId('send')).toBeInTheDocument();
  });

  it('regenerates a reply from its user message', async () => {
    mocks.chats.mockResolvedValue([{ id: 'c1', title: 'Hello', updated_ms: 0, messages: 2, document: null }]);
    mocks.chat.mockResolvedValue({ ...empty, messages: [user, reply] });
    mocks.regenerate.mockResolvedValue(reply);
    render(ChatView);
    await waitFor(() => expect(screen.getByTestId('regenerate')).toBeInTheDocument());
    await fireEvent.click(screen.getByTestId('regenerate'));
    expect(mocks.regenerate).toHaveBeenCalledWith('c1', 1, expect.any(Function));
  });

  it('gives the text back when the turn fails', async () => {
    mocks.send.mockRejectedValue({ code: 'no_model', message: 'No model is loaded.' });
    mocks.chat.mockResolvedValue(empty);
    render(ChatView);
    await waitFor(() => expect(mocks.createChat).toHaveBeenCalled());
    const input = screen.getByTestId('chat-input') as HTMLTextAreaElement;
    await fireEvent.input(input, { target: { value: 'Hello' } });
    await fireEvent.click(screen.getByTestId('send'));
    await waitFor(() => expect(screen.getByRole('alert').textContent).toContain('No model loaded'));
    expect(input.value).toBe('Hello');
  });

  it('shows the adapters the chat runs with, in its header and in the list', async () => {
    const adapters = { loras: [{ path: '/l/style.safetensors', scale: 2 }], init_state: '/l/tuned.pth' };
    mocks.chats.mockResolvedValue([{ id: 'c1', title: 'Tuned', updated_ms: 0, messages: 0, document: null, adapters }]);
    mocks.chat.mockResolvedValue({ ...empty, adapters });
    render(ChatView);
    await waitFor(() => expect(screen.getByTestId('chat-adapters').textContent).toContain('style.safetensors ×2'));
    expect(screen.getByTestId('chat-adapters').textContent).toContain('state: tuned.pth');
    expect(screen.getByTestId('chat-list').textContent).toContain('1 LoRA');
  });
});
