//! Out of memory raised by the GPU driver itself (issue 14, part 3), through the command
//! layer. Not the engine's own budget or binding checks (`gpu_faults.rs`): the driver's
//! allocation really fails. On lavapipe (Mesa's CPU Vulkan driver) GPU memory is this
//! process's memory, so the test lowers the process's data limit (`RLIMIT_DATA`) to what it
//! uses plus a margin just around the step that allocates, and raises it back right after:
//! Mesa's allocation fails, `vkAllocateMemory` returns `VK_ERROR_OUT_OF_DEVICE_MEMORY`, and
//! wgpu reports `OutOfMemory`.
//! - **At load**: a model whose weights need more than the margin → `too_large` naming the
//!   file, the adapter and "ran out of memory"; no model is loaded, the chat is as it was,
//!   the bundled model loads again and the chat goes on.
//! - **In a pass**: the state slots must grow (a new set of working buffers) under the
//!   limit → that state is refused with `too_large` "… ran out of memory …" where the
//!   buffers are made, the engine keeps its slots, and the next turn runs without a
//!   reload. (An allocation refused outside such a place makes the device unusable:
//!   `gpu` "… ran out of memory … reload the model", `GpuContext::out_of_memory`.)
//!
//! One test in its own binary: the limit holds for the whole process, so nothing else may
//! allocate meanwhile. A real GPU keeps its memory outside the process, where this limit
//! cannot reach: there the test says so and stops (`scripts/gpu-oom.sh` provokes a real
//! NVIDIA out-of-memory instead).

mod limits;
mod support;

use serde_json::{json, Value};
use support::{scratch, test_app, TestApp};
use tauri::async_runtime::block_on;

const MIB: u64 = 1 << 20;

fn messages(t: &TestApp, id: &str) -> Value {
    t.ok("chat_get", json!({ "id": id }))["messages"].clone()
}

#[test]
fn driver_out_of_memory_at_load_and_in_a_pass_is_an_error_and_a_reload_recovers() {
    let t = test_app("driver-oom");
    let info = t.load_default();
    if info["adapter"]["device_type"] != "Cpu" {
        eprintln!(
            "skipped: {} keeps GPU memory outside this process (scripts/gpu-oom.sh provokes a \
             real out-of-memory there)",
            info["adapter"]["name"]
        );
        return;
    }
    let c = t.ok("chat_create", json!({}));
    let id = c["id"].as_str().expect("id").to_string();
    t.set_max_tokens(&id, 6);
    t.send(&id, "Hello").expect("first turn");
    let before = messages(&t, &id);
    assert_eq!(before.as_array().map(Vec::len), Some(2));

    // --- At load: 2 layers × 1024 with the World vocabulary, F16: 2 × 128 MiB of
    // embedding and head alone, against a margin of 64 MiB.
    let dir = scratch("driver-oom-model");
    let big = dir.join("big.gguf");
    let report =
        rwkv_synth::write(&rwkv_synth::SynthOptions::new(2, 1024), &big).expect("synth model");
    assert!(report.bytes > 256 * MIB, "{} bytes", report.bytes);
    t.allow(&big);
    let e = limits::with_data_margin(64 * MIB, || t.load(Some(&big)))
        .expect_err("the weights cannot fit the limit");
    eprintln!("at load: {e}");
    assert_eq!(e["code"], "too_large", "{e}");
    let m = e["message"].as_str().expect("message");
    assert!(m.contains("ran out of memory allocating"), "{e}");
    assert!(m.contains("big.gguf") && m.contains("llvmpipe"), "{e}");
    // The old model was freed before the new one; none is loaded, the chat is untouched.
    assert_eq!(t.ok("model_info", json!({})), Value::Null);
    assert_eq!(messages(&t, &id), before);
    t.load_default();
    let m = t.send(&id, "Again").expect("a turn after the failed load");
    assert_eq!(m["stats"]["resumed"], true, "{m}");
    let before = messages(&t, &id);
    assert_eq!(before.as_array().map(Vec::len), Some(4));
    let _ = std::fs::remove_dir_all(&dir);

    // --- In a pass: a state beyond the engine's slots makes it double them, which builds a
    // new set of working buffers (tens of MiB for the demo model) against a margin of 16 MiB.
    // The refusal is caught where the buffers are made: that state is refused with
    // `too_large`, the engine keeps its slots (and the states in them) and goes on.
    let made = limits::with_data_margin(16 * MIB, || {
        block_on(t.engine().run(|w| {
            let eng = w.engine()?;
            let mut ids = Vec::new();
            let mut refused = None;
            for _ in 0..256 {
                match eng.new_state() {
                    Ok(s) => ids.push(s),
                    Err(e) => {
                        refused = Some((e.code().to_string(), e.to_string()));
                        break;
                    }
                }
            }
            for s in &ids {
                eng.free_state(*s)?;
            }
            Ok((ids.len(), refused))
        }))
    })
    .expect("engine job");
    eprintln!("in a pass: {made:?} (states made, the refusal)");
    let (code, msg) = made.1.expect("a state beyond the slots was refused");
    assert_eq!(code, "too_large", "{msg}");
    assert!(msg.contains("ran out of memory"), "{msg}");
    // Nothing was lost and no reload is needed: the next turn runs on the same engine.
    assert_eq!(messages(&t, &id), before);
    let m = t
        .send(&id, "And again")
        .expect("a turn after the refused state");
    assert_eq!(m["stats"]["resumed"], true, "{m}");
    let after = messages(&t, &id);
    assert_eq!(after.as_array().map(Vec::len), Some(6));
    assert_eq!(
        after.as_array().expect("messages")[..4],
        before.as_array().expect("messages")[..]
    );
}
