//! Chat turns over the engine: the RWKV chat template, per-message state snapshots and
//! streaming.
//!
//! Template (as `rwkv chat`): `User: {text}\n\nAssistant:`; a reply ends at the blank line
//! (stop string `\n\n`, not fed to the state), so every later turn starts with `\n\n`.
//!
//! After each reply the state is saved next to the chat as an engine state file
//! (`chats/<chat>/<message>.rwkvstate`, docs/state-format.md). Sending, regenerating and editing all mean "keep the
//! first `keep` messages, add a user message, reply": the reply starts from the snapshot
//! after message `keep - 1`, so the history is never prefilled again. Only when that
//! snapshot is missing or belongs to another model is the transcript prefilled instead
//! (the reply's stats say which: `resumed`).

use std::path::{Path, PathBuf};

use rwkv_engine::{
    CancelToken, ConstraintSpec, Engine, GenerateOptions, InitState, StateId, StopReason,
    TextEvent, TextOutput,
};
use serde::Serialize;
use tauri::ipc::Channel;

use crate::error::{AppError, AppResult, ErrorCode};
use crate::store::{self, now_ms, AdapterSet, Chat, Message, ReplyStats, Role, Store};
use crate::worker::{EngineHandle, Worker};

/// What a reply streams to the UI (mirrored by `ChatEvent` in `src/lib/api.ts`).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ChatEvent {
    /// The user message is stored; the reply (with this id) begins.
    Started { user: Message, assistant_id: String },
    /// New text of the reply (valid UTF-8), with the number of tokens it came from.
    Text { text: String, tokens: usize },
}

/// Most bytes of one chat message (about 64k tokens): a longer text (a 10 MB paste) is
/// refused with a hint, before anything is stored, rather than prefilled for minutes;
/// documents take up to [`crate::documents::MAX_DOC_CHARS`].
pub const MAX_MESSAGE_BYTES: usize = 256 << 10;

/// The prompt for a user turn. `first`: nothing (no earlier turn, no document) before it.
pub fn turn_prompt(first: bool, user: &str) -> String {
    let sep = if first { "" } else { "\n\n" };
    format!("{sep}User: {}\n\nAssistant:", user.trim())
}

/// The text whose prefill gives the state after `messages` (when no snapshot is usable).
pub fn transcript(document: Option<&str>, messages: &[Message]) -> String {
    let mut out = document.unwrap_or("").to_string();
    for m in messages {
        match m.role {
            Role::User => out.push_str(&turn_prompt(out.is_empty(), &m.text)),
            Role::Assistant => out.push_str(&m.text),
        }
    }
    out
}

/// The loaded model's file name (recorded with replies and documents).
pub fn model_file_name(eng: &Engine) -> String {
    Path::new(&eng.info().path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A chat title from its first message.
pub fn title_from(text: &str) -> String {
    let t: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.chars().count() > 48 {
        format!("{}…", t.chars().take(47).collect::<String>())
    } else {
        t
    }
}

/// A new state holding the tokens `ids`: fed from `init` (a state-tuned initial state)
/// when given, else from the zero state. The caller owns (frees) it.
pub fn fresh_state(eng: &mut Engine, init: Option<&InitState>, ids: &[u32]) -> AppResult<StateId> {
    let st = match init {
        Some(i) => eng.new_state_from(i)?,
        None => eng.new_state()?,
    };
    if let Err(e) = eng.feed(st, ids) {
        let _ = eng.free_state(st);
        return Err(e.into());
    }
    Ok(st)
}

/// A new state for a turn: the state file at `snapshot` if it is there and belongs to this
/// model (the engine checks the fingerprint and checksum), else `text` prefilled from
/// `init` or the zero state ([`fresh_state`]). Returns the state and whether it was ready
/// without a prefill (state file used, or no text before this point).
pub fn start_state(
    eng: &mut Engine,
    snapshot: Option<&Path>,
    text: &str,
    init: Option<&InitState>,
) -> AppResult<(StateId, bool)> {
    if let Some(p) = snapshot.filter(|p| p.exists()) {
        match eng.load_state(p) {
            Ok(st) => return Ok((st, true)),
            // Another model's state, or a damaged file: rebuild it from the text.
            Err(e) => log::warn!("{e}; prefilling instead"),
        }
    }
    let ids = eng.tokenizer().encode(text);
    let st = fresh_state(eng, init, &ids)?;
    Ok((st, ids.is_empty()))
}

/// Keeps the first `keep` messages of chat `chat_id`, appends the user message `text`, and
/// streams the reply to `events`. `keep` must be a turn boundary (even). Stopping (see
/// [`EngineHandle::cancel`] with the chat id) ends the reply early; what was written stays.
pub async fn reply(
    handle: &EngineHandle,
    store: &Store,
    chat_id: &str,
    keep: usize,
    text: &str,
    events: Channel<ChatEvent>,
) -> AppResult<Message> {
    check_message(text)?;
    let (chat, user) = begin_turn(store, chat_id, keep, text)?;
    let assistant_id = store::new_id();
    let _ = events.send(ChatEvent::Started {
        user,
        assistant_id: assistant_id.clone(),
    });
    let turn = Turn::plan(store, &chat, keep, text, &assistant_id)?;
    let ticket = handle.begin(chat_id);
    let cancel = ticket.token.clone();
    let result = handle.run(move |w| turn.run(w, &cancel, &events)).await;
    handle.end(chat_id, &ticket);
    match result {
        Ok((out, resumed, model)) => {
            let message = assistant_message(assistant_id, out, resumed, model);
            // Re-read: settings may have changed while the reply ran.
            let mut chat: Chat = store.load_chat(chat_id)?;
            chat.messages.truncate(keep + 1);
            chat.messages.push(message.clone());
            chat.updated_ms = now_ms();
            store.save_chat(&chat)?;
            Ok(message)
        }
        Err(e) => {
            // No reply: take the user message back out, so the chat stays a list of turns.
            if let Ok(mut chat) = store.load_chat(chat_id) {
                chat.messages.truncate(keep);
                let _ = store.save_chat(&chat);
            }
            Err(e)
        }
    }
}

/// A chat message must have text and at most [`MAX_MESSAGE_BYTES`].
///
/// Errors: `bad_request` (empty), `too_long` (with `details.bytes`, `details.max`).
fn check_message(text: &str) -> AppResult<()> {
    if text.trim().is_empty() {
        return Err(AppError::bad_request("the message is empty"));
    }
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(AppError::new(
            ErrorCode::TooLong,
            format!(
                "The message has {:.1} MiB; a chat message takes at most {} KiB. \
                 Add a long text as a document (Documents view) and chat about it.",
                text.len() as f64 / 1048576.0,
                MAX_MESSAGE_BYTES >> 10
            ),
        )
        .with_details(serde_json::json!({ "bytes": text.len(), "max": MAX_MESSAGE_BYTES })));
    }
    Ok(())
}

/// Stores the chat cut to its first `keep` messages plus the user message `text`; returns
/// the chat and that message.
///
/// Errors: `not_found`, `bad_request` (`keep` past the end or not a turn boundary), the
/// store's.
fn begin_turn(store: &Store, chat_id: &str, keep: usize, text: &str) -> AppResult<(Chat, Message)> {
    let mut chat = store.load_chat(chat_id)?;
    if keep > chat.messages.len() || keep % 2 != 0 {
        return Err(AppError::bad_request(format!(
            "cannot reply after message {keep} of {}",
            chat.messages.len()
        )));
    }
    chat.messages.truncate(keep);
    let user = Message {
        id: store::new_id(),
        role: Role::User,
        text: text.trim().to_string(),
        stats: None,
        model: None,
        created_ms: now_ms(),
    };
    chat.messages.push(user.clone());
    if keep == 0 && chat.document.is_none() {
        chat.title = title_from(text);
    }
    chat.updated_ms = now_ms();
    store.save_chat(&chat)?;
    // Only once the shorter chat is on disk may the dropped messages' states go: a kill in
    // between must never leave a stored reply without its snapshot.
    store.prune_chat_states(&chat);
    Ok((chat, user))
}

/// What the engine job of one turn needs, gathered from the store beforehand.
struct Turn {
    /// The state after message `keep - 1` (or the document's), if stored.
    snapshot: Option<PathBuf>,
    /// The text before this turn (prefilled when the snapshot is not usable).
    history: String,
    prompt: String,
    settings: GenerateOptions,
    adapters: AdapterSet,
    /// Where the state after the reply goes.
    state_out: PathBuf,
}

impl Turn {
    /// The turn after the first `keep` messages of `chat` (the last of which is the new
    /// user message `text`), replied to as message `assistant_id`.
    fn plan(
        store: &Store,
        chat: &Chat,
        keep: usize,
        text: &str,
        assistant_id: &str,
    ) -> AppResult<Turn> {
        // Where this turn starts from: the snapshot after message keep-1, or the document's.
        let snapshot = match keep {
            0 => match &chat.document {
                Some(d) => Some(store.doc_state_path(&d.id)?),
                None => None,
            },
            _ => Some(store.chat_state_path(&chat.id, &chat.messages[keep - 1].id)?),
        };
        let doc_text = match &chat.document {
            Some(d) => Some(store.document_text(&d.id)?),
            None => None,
        };
        let history = transcript(doc_text.as_deref(), &chat.messages[..keep]);
        let state_out = store.chat_state_path(&chat.id, assistant_id)?;
        if let Some(dir) = state_out.parent() {
            store::private_dir(dir).map_err(|e| AppError::io(dir, e))?;
        }
        Ok(Turn {
            snapshot,
            prompt: turn_prompt(history.is_empty(), text),
            history,
            settings: GenerateOptions {
                // "Reply as JSON (schema)": the reply starts after `Assistant:` with a space.
                constraint: chat
                    .settings
                    .constraint
                    .clone()
                    .map(ConstraintSpec::after_space),
                ..chat.settings.clone()
            },
            adapters: chat.adapters.clone(),
            state_out,
        })
    }

    /// On the engine thread: the reply, streamed to `events`, and its state saved. Returns
    /// the engine's output, whether the turn resumed from a stored state, and the model's
    /// file name.
    fn run(
        self,
        w: &mut Worker,
        cancel: &CancelToken,
        events: &Channel<ChatEvent>,
    ) -> AppResult<(TextOutput, bool, String)> {
        // This chat's LoRAs become the engine's active set (loaded once, by path).
        let (eng, init) = w.prepare(&self.adapters)?;
        let model = model_file_name(eng);
        let (st, resumed) = start_state(
            eng,
            self.snapshot.as_deref(),
            &self.history,
            init.as_deref(),
        )?;
        let mut out = eng.generate_text(st, &self.prompt, &self.settings, cancel, &mut |ev| {
            let TextEvent::Text { text, tokens } = ev;
            events.send(ChatEvent::Text { text, tokens }).is_ok()
        });
        // The engine leaves the last sampled token out of the state. Unless it ended the
        // reply (stop token or string, which the template restates), feed it, so that
        // the stored state is exactly the transcript's.
        let unfed = match &out {
            Ok(o) if !matches!(o.stats.stop, StopReason::StopToken | StopReason::StopString) => {
                o.tokens.last().copied()
            }
            _ => None,
        };
        if let Some(last) = unfed {
            if let Err(e) = eng.feed(st, &[last]) {
                out = Err(e);
            }
        }
        if let Ok(o) = &out {
            let tokens = (o.stats.prompt_tokens + o.tokens.len()) as u64;
            if let Err(e) = eng.save_state(st, tokens, &self.state_out) {
                // The reply stands; the next turn prefills the history instead.
                log::warn!("state not saved: {e}");
            }
        }
        let _ = eng.free_state(st);
        Ok((out?, resumed, model))
    }
}

/// The stored assistant message of a reply.
fn assistant_message(id: String, out: TextOutput, resumed: bool, model: String) -> Message {
    let s = &out.stats;
    Message {
        id,
        role: Role::Assistant,
        stats: Some(ReplyStats {
            prompt_tokens: s.prompt_tokens,
            generated_tokens: s.generated_tokens,
            ttft_ms: s.ttft_ms,
            prefill_ms: s.prefill_ms,
            decode_ms: s.decode_ms,
            prefill_tok_s: s.prefill_tok_s,
            decode_tok_s: s.decode_tok_s,
            stop: s.stop,
            resumed,
        }),
        text: out.text,
        model: Some(model),
        created_ms: now_ms(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, text: &str) -> Message {
        Message {
            id: "1".into(),
            role,
            text: text.into(),
            stats: None,
            model: None,
            created_ms: 0,
        }
    }

    #[test]
    fn template_matches_rwkv_chat() {
        assert_eq!(turn_prompt(true, " Hi "), "User: Hi\n\nAssistant:");
        assert_eq!(turn_prompt(false, "Hi"), "\n\nUser: Hi\n\nAssistant:");
    }

    #[test]
    fn transcript_is_the_text_of_earlier_turns() {
        let m = [
            msg(Role::User, "Hello"),
            msg(Role::Assistant, " Good day."),
            msg(Role::User, "Again"),
            msg(Role::Assistant, " Yes."),
        ];
        let t = transcript(None, &m);
        assert_eq!(
            t,
            "User: Hello\n\nAssistant: Good day.\n\nUser: Again\n\nAssistant: Yes."
        );
        // The next prompt continues it exactly as a live chat would have.
        assert_eq!(
            format!("{t}{}", turn_prompt(false, "More")),
            "User: Hello\n\nAssistant: Good day.\n\nUser: Again\n\nAssistant: Yes.\n\nUser: More\n\nAssistant:"
        );
        let d = transcript(Some("A letter."), &m[..2]);
        assert_eq!(d, "A letter.\n\nUser: Hello\n\nAssistant: Good day.");
    }

    #[test]
    fn titles_are_short_single_lines() {
        assert_eq!(title_from("  What is\n the sea?  "), "What is the sea?");
        let long = "word ".repeat(30);
        let t = title_from(&long);
        assert_eq!(t.chars().count(), 48);
        assert!(t.ends_with('…'));
    }
}
