//! GPU faults in the app (issue 14, part 3), through the command layer:
//! - the device is lost (destroyed from a test job on the engine thread, as a driver reset
//!   would): the next turn fails with a `gpu` error (the UI's error box then offers
//!   "Reload the model"), promptly, without a panic; the chat keeps every earlier message;
//!   reloading opens a new device (the process's lost one is replaced) and the chat goes
//!   on from its stored snapshot;
//! - a pass that cannot fit (more states than a binding holds a layer of): a `too_large` error, and
//!   the engine keeps working.

mod support;

use std::sync::mpsc;
use std::time::Duration;

use rwkv_studio_lib::error::AppError;
use serde_json::{json, Value};
use support::{test_app, Ipc, TestApp};
use tauri::async_runtime::block_on;

/// `f` on a thread; a hang (over 120 s) ends the whole test process with a message (a
/// scoped thread cannot be abandoned, and a hung test would otherwise never report).
fn bounded<T: Send>(what: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        s.spawn(move || {
            let _ = tx.send(f());
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(v) => v,
            // `f` panicked: the scope re-raises it.
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                eprintln!("{what} hung for 120 s");
                std::process::exit(101);
            }
        }
    })
}

fn engine_job<T: Send + 'static>(
    t: &TestApp,
    f: impl FnOnce(&mut rwkv_studio_lib::worker::Worker) -> Result<T, AppError> + Send + 'static,
) -> Result<T, AppError> {
    block_on(t.engine().run(f))
}

fn messages(t: &TestApp, id: &str) -> Value {
    t.ok("chat_get", json!({ "id": id }))["messages"].clone()
}

#[test]
fn a_lost_device_is_an_error_the_history_stays_and_a_reload_recovers() {
    let t = test_app("lost");
    // A device of its own (adapter 0, not the automatic choice): it gets destroyed, and
    // the app opens one device per adapter for the process, which the test beside
    // this one holds.
    t.load_default_on(0);
    let c = t.ok("chat_create", json!({}));
    let id = c["id"].as_str().expect("id").to_string();
    t.set_max_tokens(&id, 6);
    t.send(&id, "Hello").expect("first turn");
    let before = messages(&t, &id);
    assert_eq!(before.as_array().map(Vec::len), Some(2));

    engine_job(&t, |w| {
        w.engine()?.gpu().device.destroy();
        Ok(())
    })
    .expect("destroy");

    let ipc: &Ipc = &t;
    let e = bounded("a turn on a lost device", || ipc.send(&id, "Again"))
        .expect_err("a lost device cannot reply");
    assert_eq!(e["code"], "gpu", "{e}");
    assert!(
        e["message"].as_str().is_some_and(|m| m.contains("device")),
        "{e}"
    );
    // The failed turn was taken back; the history is as it was.
    assert_eq!(messages(&t, &id), before);
    // Other commands still answer (no dead worker).
    assert!(t.ok("model_info", json!({}))["path"].is_string());

    bounded("the reload", || ipc.load_default());
    let m = bounded("a turn after the reload", || ipc.send(&id, "Again")).expect("recovered");
    assert_eq!(m["role"], "assistant");
    assert_eq!(
        m["stats"]["resumed"], true,
        "continues from the stored snapshot"
    );
    let after = messages(&t, &id);
    assert_eq!(after.as_array().map(Vec::len), Some(4));
    assert_eq!(after[0], before[0]);
    assert_eq!(after[1], before[1]);
}

#[test]
fn a_pass_that_cannot_fit_is_too_large_and_the_engine_goes_on() {
    let t = test_app("oom");
    t.load_default();
    // Ask for states until one layer of all of them no longer fits one binding (lavapipe:
    // 128 MiB, 1,985 states of the demo model); a real GPU with a larger binding gives up at
    // the 4096th instead (the test's own bound).
    let (made, err) = engine_job(&t, |w| {
        let eng = w.engine()?;
        let mut ids = Vec::new();
        let err = loop {
            match eng.new_state() {
                Ok(s) if ids.len() < 4096 => ids.push(s),
                Ok(s) => {
                    ids.push(s);
                    break None;
                }
                Err(e) => break Some(AppError::from(e)),
            }
        };
        let n = ids.len();
        for s in ids {
            eng.free_state(s)?;
        }
        Ok((n, err))
    })
    .expect("job");
    eprintln!(
        "states made before the limit: {made} ({:?})",
        err.as_ref().map(|e| &e.message)
    );
    if let Some(e) = err {
        assert_eq!(e.code.as_str(), "too_large", "{e}");
        assert!(e.message.contains("binding"), "{e}");
        assert!(made > 1);
    }
    let c = t.ok("chat_create", json!({}));
    let id = c["id"].as_str().expect("id");
    t.set_max_tokens(id, 4);
    let m = t.send(id, "Still there?").expect("the engine goes on");
    assert_eq!(m["role"], "assistant");
}
