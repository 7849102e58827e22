//! Chats: the list, one chat, its title and sampling settings, and its turns (sending,
//! regenerating, editing, stopping; the turn itself is [`chat::reply`]).

use rwkv_engine::{Constraint, ConstraintCompiler, GenerateOptions, Tokenizer};
use tauri::ipc::Channel;
use tauri::State;

use crate::chat::{self, ChatEvent};
use crate::error::{AppError, AppResult};
use crate::library;
use crate::store::{Chat, ChatSummary, Message, Role, Store};
use crate::worker::EngineHandle;

/// Logits per token of the RWKV World models (65,536: the vocabulary padded).
const WORLD_LOGITS: usize = 65536;

#[tauri::command]
pub async fn chat_list(store: State<'_, Store>) -> AppResult<Vec<ChatSummary>> {
    Ok(store.list_chats())
}

#[tauri::command]
pub async fn chat_get(store: State<'_, Store>, id: String) -> AppResult<Chat> {
    store.load_chat(&id)
}

/// A new chat with the Model view's current adapters (enabled LoRAs, chosen initial state).
#[tauri::command]
pub async fn chat_create(store: State<'_, Store>) -> AppResult<Chat> {
    store.create_chat(None, library::load(&store)?.current())
}

#[tauri::command]
pub async fn chat_delete(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
) -> AppResult<()> {
    engine.cancel(&id);
    store.delete_chat(&id)
}

#[tauri::command]
pub async fn chat_rename(store: State<'_, Store>, id: String, title: String) -> AppResult<Chat> {
    let mut chat = store.load_chat(&id)?;
    let title = title.trim();
    if title.is_empty() {
        return Err(AppError::bad_request("the title is empty"));
    }
    chat.title = title.to_string();
    store.save_chat(&chat)?;
    Ok(chat)
}

/// Sets a chat's sampling settings (checked by the engine's own validation).
#[tauri::command]
pub async fn chat_settings(
    store: State<'_, Store>,
    id: String,
    settings: GenerateOptions,
) -> AppResult<Chat> {
    settings.sampler.validate()?;
    if settings.max_tokens == 0 || settings.max_tokens > 8192 {
        return Err(AppError::bad_request("max tokens must be 1..=8192"));
    }
    if let Some(c) = &settings.constraint {
        // "Reply as JSON (schema)": a schema the engine cannot use is refused here, named
        // (`constraint`), not at the next reply. Any RWKV model has the World vocabulary.
        let comp = ConstraintCompiler::shared(&Tokenizer::world()?, WORLD_LOGITS)?;
        Constraint::compile(&comp, &c.clone().after_space())?;
    }
    let mut chat = store.load_chat(&id)?;
    chat.settings = settings;
    store.save_chat(&chat)?;
    Ok(chat)
}

/// Sends a user message at the end of the chat and streams the reply.
#[tauri::command]
pub async fn chat_send(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
    text: String,
    on_event: Channel<ChatEvent>,
) -> AppResult<Message> {
    // A chat ends with a user message only when the app was killed before its reply was
    // stored: the new message takes that turn's place (regenerate retries it instead).
    let keep = store.load_chat(&id)?.messages.len() & !1;
    chat::reply(&engine, &store, &id, keep, &text, on_event).await
}

/// Replies again to the user message before assistant message `index`.
#[tauri::command]
pub async fn chat_regenerate(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
    index: usize,
    on_event: Channel<ChatEvent>,
) -> AppResult<Message> {
    let chat = store.load_chat(&id)?;
    let user = index
        .checked_sub(1)
        .and_then(|i| chat.messages.get(i))
        .filter(|m| m.role == Role::User)
        .ok_or_else(|| AppError::bad_request(format!("message {index} is not a reply")))?;
    chat::reply(
        &engine,
        &store,
        &id,
        index - 1,
        &user.text.clone(),
        on_event,
    )
    .await
}

/// Replaces user message `index` with `text` (dropping what followed) and replies.
#[tauri::command]
pub async fn chat_edit(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
    index: usize,
    text: String,
    on_event: Channel<ChatEvent>,
) -> AppResult<Message> {
    chat::reply(&engine, &store, &id, index, &text, on_event).await
}

/// Stops the chat's running reply. Returns whether one was running.
#[tauri::command]
pub fn chat_stop(engine: State<'_, EngineHandle>, id: String) -> bool {
    engine.cancel(&id)
}
