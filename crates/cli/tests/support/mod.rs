//! The one test-support module of the CLI's integration tests: where the models and
//! fixtures are, and running the `rwkv` binary with a deadline (a hang fails the test
//! instead of stalling the run).
#![allow(dead_code)] // not every test binary uses every helper

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one `rwkv` run may take before the test fails as hung.
pub const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `../shared/fixtures` beside the checkout: the seeded-random models and the peers'
/// reference outputs.
pub fn fixtures() -> PathBuf {
    repo().join("../shared/fixtures")
}

/// `../shared/models` beside the checkout: the trained demo model's source files.
pub fn shared_models() -> PathBuf {
    repo().join("../shared/models")
}

/// The bundled demo model (Q4_K_M GGUF).
pub fn demo_model() -> PathBuf {
    repo().join("assets/models/rwkv7-demo-6x256-Q4_K_M.gguf")
}

/// The tiny seeded-random fixture model (SafeTensors, F16).
pub fn tiny() -> PathBuf {
    fixtures().join("rwkv7-tiny.safetensors")
}

/// An adapter fixture of `tests/fixtures/adapters`.
pub fn adapter_fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/adapters").join(name)
}

/// A command for the `rwkv` binary under test, run in the repository root.
pub fn rwkv_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rwkv"));
    c.current_dir(repo());
    c
}

/// Runs `cmd` to its end with stdout and stderr captured, failing the test (and killing
/// the process) if it runs past [`RUN_DEADLINE`].
pub fn output(mut cmd: Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let what = format!("{cmd:?}");
    let mut child = cmd.spawn().expect("start rwkv");
    let t0 = Instant::now();
    loop {
        if child.try_wait().expect("wait for rwkv").is_some() {
            return child.wait_with_output().expect("rwkv's output");
        }
        if t0.elapsed() > RUN_DEADLINE {
            let _ = child.kill();
            panic!("{what} hung (still running after {RUN_DEADLINE:?})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `rwkv args…` in the repository root, bounded: (success, stdout, stderr as text).
pub fn rwkv(args: &[&str]) -> (bool, String, String) {
    let mut c = rwkv_cmd();
    c.args(args);
    let out = output(c);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
