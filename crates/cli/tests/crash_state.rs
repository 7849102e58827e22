//! `rwkv state save` killed with SIGKILL at random moments, over and over, onto the same
//! `.rwkvstate` path: after each kill the file there is the old state or the new one,
//! whole (header, checksum, values), never a mix or a stub; a leftover `<file>.tmp` is
//! never what a later `rwkv state inspect` reads. `RWKV_CRASH_KILLS` kills (default 6, CI);
//! the full run (60) is recorded in docs/reliability.md. Unix only (SIGKILL).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rwkv_engine::format::read_state_file;
use rwkv_engine::Tokenizer;
use support::demo_model;

fn save(model: &Path, text: &str, out: &Path) -> Command {
    let mut c = support::rwkv_cmd();
    c.args(["state", "save", "--model"])
        .arg(model)
        .args(["--text", text, "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

#[cfg(unix)]
#[test]
fn state_save_killed_at_random_leaves_old_or_new_never_half() {
    let kills: u64 = std::env::var("RWKV_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let dir = std::env::temp_dir().join(format!("rwkv-cli-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("doc.rwkvstate");
    let model = demo_model();

    // Each round's text has its own length: the header's token count says whose state is
    // there, which must be the last complete one's or this round's.
    let tok = Tokenizer::world().unwrap();
    let text_of =
        |round: u64| "The lighthouse keeper climbed the stairs. ".repeat(1 + round as usize % 12);
    let st = save(&model, "The lighthouse keeper", &out)
        .status()
        .unwrap();
    assert!(st.success(), "the first save completes");
    let (h0, _) = read_state_file(&out).unwrap();
    let mut last = h0.tokens;

    let mut seen_new = 0;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let t0 = Instant::now();
    let mut ms_done = Vec::new();
    for round in 0..kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let text = text_of(round);
        let this = tok.encode(&text).len() as u64;
        let started = Instant::now();
        let mut child = save(&model, &text, &out).spawn().unwrap();
        // Kill somewhere in 20 ms … 1.2 s: before, during or after the write.
        let wait = Duration::from_millis(20 + seed % 1180);
        let mut finished = false;
        while started.elapsed() < wait {
            if let Some(st) = child.try_wait().unwrap() {
                assert!(st.success(), "round {round}: save failed by itself");
                ms_done.push(started.elapsed().as_millis());
                finished = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if !finished {
            child.kill().unwrap();
        }
        // Reaps it (a no-op when it already ended).
        let _ = child.wait();
        let (h, values) = read_state_file(&out)
            .unwrap_or_else(|e| panic!("round {round}: the state file is damaged: {e}"));
        assert_eq!(h.layout, h0.layout);
        assert_eq!(values.len() as u64, h.values);
        assert!(
            h.tokens == last || h.tokens == this,
            "round {round}: a state of {} tokens; expected the old {last} or the new {this}",
            h.tokens
        );
        if h.tokens == this && this != last {
            seen_new += 1;
        }
        last = h.tokens;
        // The CLI reads the file itself, whatever temporary lies beside it.
        let mut cmd = support::rwkv_cmd();
        cmd.args(["state", "inspect", "--json"]).arg(&out);
        let inspect = support::output(cmd);
        assert!(inspect.status.success(), "round {round}: inspect failed");
        let j: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
        assert_eq!(j["tokens"], h.tokens, "round {round}");
    }
    eprintln!(
        "cli crash: {kills} rounds in {:.0} s, {} saves completed before the kill \
         ({ms_done:?} ms), the new state found {seen_new} times, temporary left: {}",
        t0.elapsed().as_secs_f64(),
        ms_done.len(),
        dir.join("doc.rwkvstate.tmp").exists()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
