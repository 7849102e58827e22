//! The RWKV chat template, rendered to tokens message by message so that a conversation's
//! next turn extends the previous turn's tokens exactly (the conversation cache then
//! finds the state after them), and [`ReplyMemory`]: the tokens this server generated for
//! each reply text, reused when a client sends that reply back as history.
//!
//! Template (RWKV World / G1, as the app's chat and `rwkv chat`):
//! `System: {text}\n\nUser: {text}\n\nAssistant: {reply}\n\n…User: {text}\n\nAssistant:`.
//! A reply ends at the blank line (stop `\n\n`); inside a message, blank lines are
//! folded to single newlines so that no message can end a turn early.

use std::collections::{HashMap, VecDeque};

use rwkv_engine::Tokenizer;

use crate::error::ApiError;
use crate::openai::request::{Content, Message, Role};

/// What ends a chat reply.
pub const CHAT_STOP: &str = "\n\n";
/// The generation prompt: the reply starts after it.
pub const ASSISTANT_PREFIX: &str = "Assistant:";

/// A message's text: the string, or its text parts joined; blank lines folded, trimmed.
///
/// Errors: 400 for a non-text part (images and audio are not supported).
pub fn message_text(m: &Message, index: usize) -> Result<String, ApiError> {
    let raw = match &m.content {
        None => String::new(),
        Some(Content::Text(s)) => s.clone(),
        Some(Content::Parts(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                if p.kind != "text" {
                    return Err(ApiError::invalid(
                        Some(&format!("messages[{index}].content[{j}].type")),
                        format!(
                            "content part type `{}` is not supported (text only)",
                            p.kind
                        ),
                    ));
                }
                out.push_str(p.text.as_deref().unwrap_or(""));
            }
            out
        }
    };
    Ok(fold(&raw))
}

/// Trims and folds runs of blank lines to one newline (`\r\n` as `\n`).
pub fn fold(text: &str) -> String {
    let t = text.replace("\r\n", "\n");
    let mut out = String::with_capacity(t.len());
    for line in t.trim().split('\n') {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(line);
    }
    out
}

/// The tokens of `messages` followed by the generation prompt, message by message, after
/// `preamble` as a system message (the tools' description). Assistant messages whose
/// text this server generated reuse the generated tokens; their tool calls are rendered
/// as the `<tool_call>` text the model writes.
///
/// Errors: 400 for no messages, a last message from the assistant, a non-text part.
pub fn render_chat(
    tok: &Tokenizer,
    preamble: Option<&str>,
    messages: &[Message],
    memory: &ReplyMemory,
) -> Result<Vec<u32>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid(Some("messages"), "`messages` is empty"));
    }
    let mut out = Vec::new();
    if let Some(p) = preamble {
        tok.encode_into(format!("System: {}\n\n", fold(p)).as_bytes(), &mut out);
    }
    for (i, m) in messages.iter().enumerate() {
        let mut text = message_text(m, i)?;
        if let (Role::Assistant, Some(calls)) = (m.role, &m.tool_calls) {
            // The reply the model wrote for its call (see crate::structured).
            for c in calls {
                text.push_str(&crate::structured::call_text(
                    &c.function.name,
                    &c.function.arguments,
                ));
            }
        }
        match m.role {
            Role::System | Role::Developer => {
                tok.encode_into(format!("System: {text}\n\n").as_bytes(), &mut out)
            }
            Role::User => tok.encode_into(format!("User: {text}\n\n").as_bytes(), &mut out),
            Role::Tool => {
                let name = m.name.as_deref().unwrap_or("tool");
                tok.encode_into(format!("Tool ({name}): {text}\n\n").as_bytes(), &mut out)
            }
            Role::Assistant => {
                tok.encode_into(ASSISTANT_PREFIX.as_bytes(), &mut out);
                match memory.get(&text) {
                    Some(ids) => out.extend_from_slice(ids),
                    None => tok.encode_into(format!(" {text}{CHAT_STOP}").as_bytes(), &mut out),
                }
            }
        }
    }
    tok.encode_into(ASSISTANT_PREFIX.as_bytes(), &mut out);
    Ok(out)
}

/// Reply text → the tokens generated for it (the reply and the stop tokens after it),
/// the most recent `cap` replies.
#[derive(Debug)]
pub struct ReplyMemory {
    map: HashMap<String, Vec<u32>>,
    order: VecDeque<String>,
    cap: usize,
}

impl ReplyMemory {
    pub fn new(cap: usize) -> Self {
        ReplyMemory {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    pub fn get(&self, text: &str) -> Option<&[u32]> {
        self.map.get(text).map(Vec::as_slice)
    }

    /// Remembers that `tokens` were generated for the reply `text` (as returned).
    pub fn put(&mut self, text: String, tokens: Vec<u32>) {
        if self.cap == 0 || text.is_empty() {
            return;
        }
        if self.map.insert(text.clone(), tokens).is_none() {
            self.order.push_back(text);
            while self.order.len() > self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, text: &str) -> Message {
        serde_json::from_value(serde_json::json!({"role": role, "content": text})).unwrap()
    }

    #[test]
    fn each_turn_extends_the_last_turns_tokens() {
        let tok = Tokenizer::world().unwrap();
        let mut mem = ReplyMemory::new(8);
        let t1 = vec![msg("system", "Be brief."), msg("user", "Hi\n\n\nthere ")];
        let p1 = render_chat(&tok, None, &t1, &mem).unwrap();
        let text = String::from_utf8(tok.decode(&p1).unwrap()).unwrap();
        assert_eq!(text, "System: Be brief.\n\nUser: Hi\nthere\n\nAssistant:");
        // The reply as generated: odd token boundaries, remembered by its text.
        let reply: Vec<u32> = tok
            .encode(" Hel")
            .into_iter()
            .chain(tok.encode("lo!\n\n"))
            .collect();
        mem.put("Hello!".into(), reply.clone());
        let mut t2 = t1.clone();
        t2.push(msg("assistant", "Hello!"));
        t2.push(msg("user", "Again"));
        let p2 = render_chat(&tok, None, &t2, &mem).unwrap();
        assert_eq!(&p2[..p1.len()], &p1[..]);
        assert_eq!(&p2[p1.len()..p1.len() + reply.len()], &reply[..]);
        // Unknown replies are tokenized as text.
        let t3 = vec![msg("user", "a"), msg("assistant", "b"), msg("user", "c")];
        let p3 = render_chat(&tok, None, &t3, &mem).unwrap();
        let text = String::from_utf8(tok.decode(&p3).unwrap()).unwrap();
        assert_eq!(text, "User: a\n\nAssistant: b\n\nUser: c\n\nAssistant:");
        assert!(render_chat(&tok, None, &[], &mem).is_err());
    }

    #[test]
    fn memory_keeps_the_most_recent() {
        let mut m = ReplyMemory::new(2);
        m.put("a".into(), vec![1]);
        m.put("b".into(), vec![2]);
        m.put("c".into(), vec![3]);
        assert!(m.get("a").is_none());
        assert_eq!(m.get("c"), Some(&[3u32][..]));
        assert_eq!(m.len(), 2);
    }
}
