//! The command layer of the real app through Tauri's IPC (mock runtime), shared by the
//! app's tests (`commands.rs` and the reliability tests), and their small helpers: arguments exactly as `src/lib/api.ts` sends them, errors as the UI
//! receives them (`{ code, message, details }`), the real engine on the bundled model.
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};

use rwkv_studio_lib::scope::{Access, UserFiles};
use rwkv_studio_lib::worker::EngineHandle;
use rwkv_studio_lib::{default_model_path, manage_state, register};
use serde_json::{json, Value};
use tauri::ipc::{CallbackFn, InvokeBody, InvokeResponseBody};
use tauri::test::{
    get_ipc_response, mock_builder, mock_context, noop_assets, MockRuntime, INVOKE_KEY,
};
use tauri::webview::InvokeRequest;
use tauri::{App, Manager, WebviewWindow, WebviewWindowBuilder};

/// The app (not `Sync`) and its window's IPC (`Sync`: threads share it through
/// `Deref`, e.g. `let ipc: &Ipc = &t;`).
pub struct TestApp {
    pub app: App<MockRuntime>,
    pub ipc: Ipc,
    /// The app's data folder.
    pub data: PathBuf,
    /// Removed on drop, when set.
    pub cleanup: Option<PathBuf>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(d) = &self.cleanup {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl TestApp {
    /// The test's scratch folder, which holds the data folder: room for its own files.
    pub fn dir(&self) -> &Path {
        self.data.parent().unwrap_or(&self.data)
    }
}

/// `name`'s value in the environment as a number, else `default` (the long tests' sizes:
/// `RWKV_SOAK_TURNS`, `RWKV_LONG_CHAT_TOKENS`, …).
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn model() -> PathBuf {
    default_model_path(None)
}

/// A scratch folder for test `name`, emptied.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rwkv-rel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The app over data folder `data` (opened as the app opens it: recovery first).
pub fn app_at(data: &Path) -> TestApp {
    let app = register(mock_builder())
        .build(mock_context(noop_assets()))
        .expect("mock app");
    manage_state(&app, data.to_path_buf(), model()).expect("managed state");
    let window = WebviewWindowBuilder::new(&app, "main", Default::default())
        .build()
        .expect("mock window");
    TestApp {
        app,
        ipc: Ipc { window },
        data: data.to_path_buf(),
        cleanup: None,
    }
}

/// The app over a fresh data folder, removed at the end.
pub fn test_app(name: &str) -> TestApp {
    let dir = scratch(name);
    let mut t = app_at(&dir.join("data"));
    t.cleanup = Some(dir);
    t
}

impl std::ops::Deref for TestApp {
    type Target = Ipc;
    fn deref(&self) -> &Ipc {
        &self.ipc
    }
}

/// Calls into the app as its webview does.
pub struct Ipc {
    pub window: WebviewWindow<MockRuntime>,
}

impl Ipc {
    /// The engine's job queue (for test hooks that run on the engine thread).
    pub fn engine(&self) -> tauri::State<'_, EngineHandle> {
        self.window.state::<EngineHandle>()
    }

    /// Invokes `cmd` with `args` exactly as `invoke(cmd, args)` in `src/lib/api.ts` does.
    pub fn call_raw(&self, cmd: &str, args: Value) -> Result<InvokeResponseBody, Value> {
        get_ipc_response(
            &self.window,
            InvokeRequest {
                cmd: cmd.into(),
                callback: CallbackFn(0),
                error: CallbackFn(1),
                url: "tauri://localhost".parse().expect("url"),
                body: InvokeBody::Json(args),
                headers: Default::default(),
                invoke_key: INVOKE_KEY.to_string(),
            },
        )
    }

    pub fn call(&self, cmd: &str, args: Value) -> Result<Value, Value> {
        self.call_raw(cmd, args)
            .map(|b| b.deserialize::<Value>().expect("JSON response"))
    }

    pub fn ok(&self, cmd: &str, args: Value) -> Value {
        match self.call(cmd, args) {
            Ok(v) => v,
            Err(e) => panic!("{cmd} failed: {e}"),
        }
    }

    pub fn err(&self, cmd: &str, args: Value) -> Value {
        match self.call(cmd, args) {
            Ok(v) => panic!("{cmd} should fail, gave {v}"),
            Err(e) => e,
        }
    }

    /// `p` as if picked in an open dialog (or dropped): readable.
    pub fn allow(&self, p: &Path) {
        self.window.state::<UserFiles>().allow(p, Access::Read);
    }

    /// `p` as if picked in a save dialog: writable.
    pub fn allow_write(&self, p: &Path) {
        self.window.state::<UserFiles>().allow(p, Access::Write);
    }

    pub fn load(&self, path: Option<&Path>) -> Result<Value, Value> {
        self.call(
            "model_load",
            json!({ "path": path, "adapter": null, "onProgress": "__CHANNEL__:1" }),
        )
    }

    pub fn load_default(&self) -> Value {
        self.load(None).expect("the bundled model loads")
    }

    /// The bundled model on adapter `index`: the process's device for that choice, apart
    /// from the automatic choice's one that the other tests of this process share.
    pub fn load_default_on(&self, index: usize) -> Value {
        self.call(
            "model_load",
            json!({ "path": null, "adapter": index, "onProgress": "__CHANNEL__:1" }),
        )
        .expect("the bundled model loads")
    }

    pub fn send(&self, chat: &str, text: &str) -> Result<Value, Value> {
        self.call(
            "chat_send",
            json!({ "id": chat, "text": text, "onEvent": "__CHANNEL__:2" }),
        )
    }

    /// Sets the chat's reply length (greedy, stops at the template's blank line).
    pub fn set_max_tokens(&self, chat: &str, max_tokens: usize) {
        self.ok(
            "chat_settings",
            json!({ "id": chat, "settings": {
                "max_tokens": max_tokens,
                "sampler": { "temperature": 0.0, "stop_strings": ["\n\n"] } } }),
        );
    }
}
