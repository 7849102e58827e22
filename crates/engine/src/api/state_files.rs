//! States as files: save to and load from `.rwkvstate` (the format is
//! `format/state_file.rs`, `docs/state-format.md`), export as the fixtures' `.npy` arrays.

use std::path::{Path, PathBuf};

use super::{Engine, StateId};
use crate::error::{EngineError, Result};
use crate::format::state_file::{
    read_state_file, read_state_header, write_state_file, StateArrays, StateHeader, StateLayout,
};
use crate::format::ModelFingerprint;

impl Engine {
    /// This model's fingerprint (also in [`Engine::info`]).
    pub fn fingerprint(&self) -> ModelFingerprint {
        self.info().fingerprint
    }

    /// The layout of this model's states.
    pub fn state_layout(&self) -> StateLayout {
        StateLayout::of(self.config())
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
