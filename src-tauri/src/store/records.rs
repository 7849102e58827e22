//! The records the store keeps (JSON on disk, and the frontend's types in `src/lib/api.ts`),
//! their ids, and the checks a record file passes before it is used ([`check_chat`],
//! [`check_document`], [`check_history`]: what `Store::open` and every read run).

use std::collections::HashSet;
use std::time::{SystemTime, UNIX_EPOCH};

use rwkv_bench::BenchReport;
use rwkv_engine::{GenerateOptions, StopReason};
use serde::{Deserialize, Serialize};

use crate::error::{AppError, AppResult};

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
    /// Why the reply ended: the engine's reason, by its serde name (`max_tokens`,
    /// `stop_token`, `stop_string`, `cancelled`, `callback`; [`stop_reason`]).
    #[serde(with = "stop_reason")]
    pub stop: StopReason,
    /// Whether the reply resumed from a stored state (`false`: the history was prefilled).
    #[serde(default)]
    pub resumed: bool,
}

/// Every [`StopReason`], in [`stop_rank`] order: what a stored reason reads back as, and
/// the frontend's `StopReason` union (`src/lib/wire.gen.ts`, `tests/frontend_types.rs`).
pub const STOP_REASONS: [StopReason; 5] = [
    StopReason::MaxTokens,
    StopReason::StopToken,
    StopReason::StopString,
    StopReason::Cancelled,
    StopReason::Callback,
];

/// The place of `s` in [`STOP_REASONS`]. An exhaustive match: a reason the engine adds
/// fails to compile here until it is listed.
pub const fn stop_rank(s: StopReason) -> usize {
    match s {
        StopReason::MaxTokens => 0,
        StopReason::StopToken => 1,
        StopReason::StopString => 2,
        StopReason::Cancelled => 3,
        StopReason::Callback => 4,
    }
}

const _: () = {
    let mut i = 0;
    while i < STOP_REASONS.len() {
        assert!(
            stop_rank(STOP_REASONS[i]) == i,
            "STOP_REASONS out of stop_rank order"
        );
        i += 1;
    }
};

/// [`ReplyStats::stop`] on disk and on the wire: the engine's own serde name (its type
/// serialises only; this reads the name back). An unknown name does not read.
pub mod stop_reason {
    use super::{StopReason, STOP_REASONS};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The serde name of `s` (`max_tokens`, …).
    pub fn name(s: StopReason) -> String {
        serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    pub fn serialize<S: Serializer>(s: &StopReason, ser: S) -> Result<S::Ok, S::Error> {
        s.serialize(ser)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<StopReason, D::Error> {
        let n = String::deserialize(de)?;
        STOP_REASONS
            .into_iter()
            .find(|s| name(*s) == n)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown stop reason `{n}`")))
    }
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

// ---------- ids ----------

/// Now, in ms since the Unix epoch (`created_ms`, `updated_ms`).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A new id: time-ordered, unique within the process.
pub fn new_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!(
        "{nanos:016x}{:04x}",
        N.fetch_add(1, Ordering::Relaxed) & 0xffff
    )
}

/// Ids come from the frontend: only our own hex ids name files.
pub(crate) fn check_id(id: &str) -> AppResult<&str> {
    if !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id)
    } else {
        Err(AppError::bad_request(format!("`{id}` is not an id")))
    }
}

// ---------- checks ----------

/// Parses a chat file named `<stem>.json`: JSON of a [`Chat`] whose id is `stem`, whose
/// message ids are ids ([`check_id`]) and unique (they name state files).
///
/// Errors: a sentence saying what is wrong, for people.
pub fn check_chat(stem: &str, bytes: &[u8]) -> Result<Chat, String> {
    let chat: Chat = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if chat.id != stem {
        return Err(format!(
            "the file says it is chat `{}`; its name says `{stem}`",
            chat.id
        ));
    }
    let mut seen = HashSet::new();
    for (i, m) in chat.messages.iter().enumerate() {
        check_id(&m.id).map_err(|e| format!("message {i}: {}", e.message))?;
        if !seen.insert(m.id.as_str()) {
            return Err(format!("message {i}: id `{}` appears twice", m.id));
        }
    }
    Ok(chat)
}

/// Parses a document file named `<stem>.json`: JSON of a [`Document`] whose id is `stem`.
pub fn check_document(stem: &str, bytes: &[u8]) -> Result<Document, String> {
    let doc: Document = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if doc.id != stem {
        return Err(format!(
            "the file says it is document `{}`; its name says `{stem}`",
            doc.id
        ));
    }
    Ok(doc)
}

/// Parses the benchmark history (a JSON list of `rwkv bench` reports).
pub fn check_history(bytes: &[u8]) -> Result<Vec<BenchReport>, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn temp_root() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("rwkv-records-{}", std::process::id()))
    }

    #[test]
    fn message_ids_must_be_ids_and_unique() {
        let mut chat = Store::new(temp_root()).create_chat(None, Default::default());
        // create_chat writes under a fresh temp root; only the value is used here.
        let chat = chat.as_mut().unwrap();
        let m = Message {
            id: "00ff".into(),
            role: Role::User,
            text: "hi".into(),
            stats: None,
            model: None,
            created_ms: 0,
        };
        chat.messages = vec![m.clone(), m.clone()];
        let bytes = serde_json::to_vec(&*chat).unwrap();
        let e = check_chat(&chat.id, &bytes).unwrap_err();
        assert!(e.contains("appears twice"), "{e}");
        chat.messages[1].id = "../x".into();
        let bytes = serde_json::to_vec(&*chat).unwrap();
        assert!(check_chat(&chat.id, &bytes)
            .unwrap_err()
            .contains("not an id"));
        chat.messages.truncate(1);
        let bytes = serde_json::to_vec(&*chat).unwrap();
        assert_eq!(
            check_chat(&chat.id, &bytes).unwrap().messages,
            chat.messages
        );
        std::fs::remove_dir_all(temp_root()).ok();
    }

    #[test]
    fn stop_reasons_keep_the_engines_names_and_read_back() {
        let names: Vec<String> = STOP_REASONS.into_iter().map(stop_reason::name).collect();
        assert_eq!(
            names,
            [
                "max_tokens",
                "stop_token",
                "stop_string",
                "cancelled",
                "callback"
            ]
        );
        for s in STOP_REASONS {
            let stats = ReplyStats {
                stop: s,
                ..Default::default()
            };
            let v = serde_json::to_value(&stats).unwrap();
            assert_eq!(v["stop"], serde_json::json!(stop_reason::name(s)));
            assert_eq!(serde_json::from_value::<ReplyStats>(v).unwrap(), stats);
        }
        let mut v = serde_json::to_value(ReplyStats::default()).unwrap();
        v["stop"] = serde_json::json!("sleepy");
        assert!(serde_json::from_value::<ReplyStats>(v).is_err());
    }
}
