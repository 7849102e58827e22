//! The records the store keeps (JSON on disk, and the frontend's types in `src/lib/api.ts`).

use rwkv_engine::GenerateOptions;
use serde::{Deserialize, Serialize};

/// A stored file that could not be read when the app started, moved to `set-aside/` (its
/// content is kept there untouched) so that the rest of the store opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetAside {
    /// What it was, for people: `chat 0189…`, `document 0189…`, `benchmark history`.
    pub item: String,
    /// Where it was, relative to the data folder (`chats/0189….json`).
    pub was: String,
    /// Where it is now (absolute).
    pub now: String,
    /// Why it could not be read.
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// Timings of one reply (the engine's `GenerateStats`, kept on disk).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplyStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub ttft_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// `max_tokens`, `stop_token`, `stop_string`, `cancelled`, `callback`.
    pub stop: String,
    /// Whether the reply resumed from a stored state (`false`: the history was prefilled).
    #[serde(default)]
    pub resumed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: String,
    pub role: Role,
    pub text: String,
    #[serde(default)]
    pub stats: Option<ReplyStats>,
    /// The model file that wrote it (assistant messages).
    #[serde(default)]
    pub model: Option<String>,
    pub created_ms: u64,
}

/// A LoRA in use: its file (as the user chose it in the Model view) and the scale `s` of
/// its delta `s · B A`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraUse {
    pub path: String,
    pub scale: f32,
}

/// The adapters a chat, document, field analysis or benchmark run uses: LoRAs applied to
/// every pass (in this order, each with its scale) and the initial-state file its first
/// state starts from. Empty (the default, and what files written before adapters existed
/// read as): the base model from the zero state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdapterSet {
    #[serde(default)]
    pub loras: Vec<LoraUse>,
    #[serde(default)]
    pub init_state: Option<String>,
}

impl AdapterSet {
    pub fn is_empty(&self) -> bool {
        self.loras.is_empty() && self.init_state.is_none()
    }
}

/// A chat's starting point: the zero state, or a document's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocRef {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chat {
    pub id: String,
    pub title: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub settings: GenerateOptions,
    #[serde(default)]
    pub document: Option<DocRef>,
    /// The adapters every turn runs with (a document's chat: the document's).
    #[serde(default)]
    pub adapters: AdapterSet,
    pub messages: Vec<Message>,
}

/// A chat in the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatSummary {
    pub id: String,
    pub title: String,
    pub updated_ms: u64,
    pub messages: usize,
    pub document: Option<DocRef>,
    #[serde(default)]
    pub adapters: AdapterSet,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub id: String,
    pub name: String,
    pub chars: usize,
    pub tokens: usize,
    /// Prefill until the state was read back (GPU done), ms.
    pub prefill_ms: f64,
    pub tok_s: f64,
    pub model: String,
    pub created_ms: u64,
    /// The first characters, for the list.
    pub preview: String,
    /// The adapters its state was prefilled with (chats about it use them too).
    #[serde(default)]
    pub adapters: AdapterSet,
}
