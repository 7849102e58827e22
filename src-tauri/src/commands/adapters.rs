//! The Model view's adapter list: LoRA and initial-state files the user added
//! ([`library`]: the list on disk; `worker/adapters.rs`: the files loaded on the engine).

use std::path::Path;

use rwkv_engine::LoraAdapter;
use tauri::State;

use crate::error::AppResult;
use crate::library::{self, Library, LoraEntry, StateEntry};
use crate::scope::{Access, UserFiles};
use crate::store::Store;
use crate::worker::EngineHandle;

#[tauri::command]
pub async fn adapter_library(store: State<'_, Store>) -> AppResult<Library> {
    library::load(&store)
}

/// Adds a LoRA file the user chose: reads it, loads it on the loaded model (if any: a
/// file that does not fit fails here, with the tensor named), lists it enabled at its
/// default scale.
#[tauri::command]
pub async fn lora_add(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    files: State<'_, UserFiles>,
    path: String,
) -> AppResult<Library> {
    let p = files.check(&path, Access::Read)?;
    let entry = engine
        .run(move |w| {
            w.hold_engine()?;
            let adapter = match w.engine.as_mut() {
                Some(eng) => w.adapters.load_lora(eng, &p)?,
                None => LoraAdapter::open(&p)?,
            };
            Ok(LoraEntry::describe(&p, &adapter))
        })
        .await?;
    Ok(library::edit(&store, |lib| {
        lib.add_lora(entry);
        Ok(())
    })?
    .0)
}

/// Adds an initial-state file the user chose and makes it the one new chats start from.
/// With a model loaded, its shape is checked against the model here.
#[tauri::command]
pub async fn init_state_add(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    files: State<'_, UserFiles>,
    path: String,
) -> AppResult<Library> {
    let p = files.check(&path, Access::Read)?;
    let entry = engine
        .run(move |w| {
            let state = w.adapters.init_state(&p)?;
            if let Some(info) = w.model_info() {
                state.check(&info.config)?;
            }
            Ok(StateEntry::describe(&p, &state))
        })
        .await?;
    Ok(library::edit(&store, |lib| {
        lib.add_state(entry);
        Ok(())
    })?
    .0)
}

/// Sets a listed LoRA's scale and whether new chats use it.
#[tauri::command]
pub async fn lora_update(
    store: State<'_, Store>,
    path: String,
    scale: f32,
    enabled: bool,
) -> AppResult<Library> {
    Ok(library::edit(&store, |lib| lib.update_lora(&path, scale, enabled))?.0)
}

/// Chooses the initial state new chats start from (`null`: the zero state).
#[tauri::command]
pub async fn init_state_use(store: State<'_, Store>, path: Option<String>) -> AppResult<Library> {
    Ok(library::edit(&store, |lib| lib.use_state(path.as_deref()))?.0)
}

/// Removes a LoRA or initial state from the list (and a LoRA from the GPU). Chats that use
/// it keep their copy of the path and load it again when they next run.
#[tauri::command]
pub async fn adapter_remove(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    path: String,
) -> AppResult<Library> {
    let (lib, was_lora) = library::edit(&store, |lib| lib.remove(&path))?;
    if was_lora {
        engine
            .run(move |w| {
                w.hold_engine()?;
                if let Some(eng) = w.engine.as_mut() {
                    w.adapters.unload_lora(eng, Path::new(&path));
                }
                Ok(())
            })
            .await?;
    }
    Ok(lib)
}
