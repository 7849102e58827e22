//! The engine's state operations built on the state files: prefill (from zero or from a
//! parent), feed, read back, save to and load from `.rwkvstate`, export as `.npy`.

use std::path::{Path, PathBuf};

use super::fingerprint::ModelFingerprint;
use super::state_file::{
    read_state_file, read_state_header, write_state_file, StateArrays, StateHeader, StateLayout,
};
use crate::api::{Engine, Rows, SeqInput, StateId, Want};
use crate::error::{EngineError, Result};

impl Engine {
    /// This model's fingerprint (also in [`Engine::info`]).
    pub fn fingerprint(&self) -> ModelFingerprint {
        self.info().fingerprint
    }

    /// The layout of this model's states.
    pub fn state_layout(&self) -> StateLayout {
        StateLayout::of(self.config())
    }

    /// A new state holding `tokens` fed from the zero state (the head never runs).
    /// An empty `tokens` gives the zero state. The caller owns the state (free it with
    /// [`Engine::free_state`]).
    ///
    /// Errors: as [`Engine::forward`] (token id ≥ vocab, cancelled…); nothing is leaked.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<StateId> {
        let st = self.new_state()?;
        self.feed_or_free(st, tokens)
    }

    /// A new state: a fork of `parent` fed with `tokens` (`parent` is untouched).
    ///
    /// Errors: unknown `parent`; as [`Engine::prefill`].
    pub fn prefill_from(&mut self, parent: StateId, tokens: &[u32]) -> Result<StateId> {
        let st = self.fork_state(parent)?;
        self.feed_or_free(st, tokens)
    }

    /// Feeds `tokens` into the existing `state` (no outputs).
    ///
    /// Errors: as [`Engine::forward`]; an empty `tokens` does nothing.
    pub fn feed(&mut self, state: StateId, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Ok(());
        }
        self.forward(
            &[SeqInput {
                state,
                tokens,
                rows: Rows::None,
            }],
            Want {
                logits: false,
                embeddings: false,
            },
            None,
        )?;
        Ok(())
    }

    fn feed_or_free(&mut self, st: StateId, tokens: &[u32]) -> Result<StateId> {
        match self.feed(st, tokens) {
            Ok(()) => Ok(st),
            Err(e) => {
                let _ = self.free_state(st);
                Err(e)
            }
        }
    }

    /// Reads a whole state back to the host (`state_len()` f32, layout 1).
    ///
    /// Errors: unknown state; [`EngineError::OutputTooLarge`] when one state exceeds
    /// [`crate::output::MAX_OUTPUT_BYTES`]; GPU read-back errors.
    pub fn read_state_vec(&self, id: StateId) -> Result<Vec<f32>> {
        let n = self.state_len();
        let mut v = crate::output::vec(|| format!("a state of {n} values"), n)?;
        v.resize(n, 0.0);
        self.read_state(id, &mut v)?;
        Ok(v)
    }

    /// Saves state `id` to `path` as a `.rwkvstate` file, recording `tokens` (how many
    /// tokens the state holds; 0 = unknown). Returns the header written.
    ///
    /// Errors: unknown state, [`EngineError::Io`], GPU read-back errors.
    pub fn save_state(
        &self,
        id: StateId,
        tokens: u64,
        path: impl AsRef<Path>,
    ) -> Result<StateHeader> {
        let data = self.read_state_vec(id)?;
        write_state_file(path, self.fingerprint(), self.state_layout(), tokens, &data)
    }

    /// Loads a `.rwkvstate` file into a new state.
    ///
    /// Errors: [`EngineError::Malformed`] (not a state file, another format version,
    /// truncated, corrupt); [`EngineError::State`] when the file was made by another
    /// model (fingerprint) or has another layout.
    pub fn load_state(&mut self, path: impl AsRef<Path>) -> Result<StateId> {
        Ok(self.load_state_with_header(path)?.0)
    }

    /// [`Engine::load_state`], also returning the file's header (token count…).
    pub fn load_state_with_header(
        &mut self,
        path: impl AsRef<Path>,
    ) -> Result<(StateId, StateHeader)> {
        let path = path.as_ref();
        // Model checks first: a foreign file is rejected before its data is read.
        let header = read_state_header(path)?;
        self.check_header(path, &header)?;
        let (header, data) = read_state_file(path)?;
        self.check_header(path, &header)?;
        let st = self.new_state()?;
        if let Err(e) = self.write_state(st, &data) {
            let _ = self.free_state(st);
            return Err(e);
        }
        Ok((st, header))
    }

    fn check_header(&self, path: &Path, h: &StateHeader) -> Result<()> {
        let mine = self.fingerprint();
        if h.fingerprint != mine {
            return Err(EngineError::State {
                what: format!(
                    "{}: made by another model (fingerprint {}…, this model {}…); states \
                     only load into the model that made them",
                    path.display(),
                    h.fingerprint.short(),
                    mine.short()
                ),
            });
        }
        let want = self.state_layout();
        if h.layout != want {
            return Err(EngineError::State {
                what: format!(
                    "{}: layout {:?} differs from this model's {:?}",
                    path.display(),
                    h.layout,
                    want
                ),
            });
        }
        Ok(())
    }

    /// Reads state `id` and splits it into the fixtures' three arrays.
    pub fn state_arrays(&self, id: StateId) -> Result<StateArrays> {
        StateArrays::split(&self.state_layout(), &self.read_state_vec(id)?)
    }

    /// Writes state `id` as the fixtures' three `.npy` files into `dir` (see
    /// [`StateArrays::write_npy`]). Returns the paths.
    pub fn export_state_npy(&self, id: StateId, dir: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
        self.state_arrays(id)?.write_npy(&self.state_layout(), dir)
    }
}
