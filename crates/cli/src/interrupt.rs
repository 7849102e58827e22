//! Ctrl-C (SIGINT) for the commands that generate: the first one stops the running
//! generation at the next token — the engine loses nothing, `generate` prints its stats
//! and exits with status 130, `chat` ends the reply and asks for the next message — and
//! a Ctrl-C while nothing is generating (or a second one before the first took effect)
//! exits at once with status 130, as a terminal program should.
//!
//! The handler is installed through the `ctrlc` crate, which replaces an inherited
//! SIG_IGN too: a backgrounded `rwkv generate` still stops on `kill -INT`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use rwkv_engine::CancelToken;

/// Exit status of a command ended by SIGINT (128 + 2, the shell's convention).
pub const EXIT_INTERRUPTED: u8 = 130;

struct Interrupt {
    /// The generation a Ctrl-C stops; a fresh token per generation.
    current: std::sync::Mutex<Option<CancelToken>>,
    /// Set by the handler; read after a generation to tell a Ctrl-C from other stops.
    hit: AtomicBool,
}

static INTERRUPT: OnceLock<Interrupt> = OnceLock::new();

fn on_sigint() {
    let Some(i) = INTERRUPT.get() else {
        std::process::exit(EXIT_INTERRUPTED.into());
    };
    i.hit.store(true, Ordering::SeqCst);
    let running = match i.current.lock() {
        Ok(mut c) => c.take(),
        Err(_) => None,
    };
    match running {
        Some(t) if !t.is_cancelled() => t.cancel(),
        _ => std::process::exit(EXIT_INTERRUPTED.into()),
    }
}

/// Installs the handler (once per process; later calls do nothing).
///
/// Errors: the OS refused the handler (the message says why).
pub fn install() -> anyhow::Result<()> {
    if INTERRUPT.get().is_some() {
        return Ok(());
    }
    let _ = INTERRUPT.set(Interrupt {
        current: std::sync::Mutex::new(None),
        hit: AtomicBool::new(false),
    });
    ctrlc::set_handler(on_sigint)
        .map_err(|e| anyhow::anyhow!("cannot install the Ctrl-C handler: {e}"))
}

/// A generation that Ctrl-C cancels while this guard lives: `token()` goes to the engine.
pub struct Armed {
    token: CancelToken,
}

impl Armed {
    /// Arms Ctrl-C for one generation (a new, uncancelled token).
    pub fn new() -> Self {
        let token = CancelToken::new();
        if let Some(i) = INTERRUPT.get() {
            i.hit.store(false, Ordering::SeqCst);
            if let Ok(mut c) = i.current.lock() {
                *c = Some(token.clone());
            }
        }
        Armed { token }
    }

    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// Whether a Ctrl-C arrived while armed.
    pub fn interrupted(&self) -> bool {
        INTERRUPT
            .get()
            .is_some_and(|i| i.hit.load(Ordering::SeqCst))
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        // Disarmed: the next Ctrl-C exits.
        if let Some(i) = INTERRUPT.get() {
            if let Ok(mut c) = i.current.lock() {
                *c = None;
            }
        }
    }
}

/// The error a command returns after a Ctrl-C stopped it: `main` exits with
/// [`EXIT_INTERRUPTED`] and prints nothing more.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}
