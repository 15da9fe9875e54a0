//! Copies checkpoint tensors into a model's `VarMap`, checking names and shapes.
use candle_core::Tensor;
use candle_nn::VarMap;

use crate::error::{ModelError, Result};

/// Sets every variable of `varmap` from `fetch(name)`, in name order.
///
/// `fetch` returns `Ok(None)` for a tensor the checkpoint lacks, which is reported as
/// [`ModelError::MissingTensor`]; a tensor of another shape is a [`ModelError::ShapeMismatch`].
pub fn assign(
    varmap: &VarMap,
    mut fetch: impl FnMut(&str) -> Result<Option<Tensor>>,
) -> Result<()> {
    let data = varmap.data().lock().expect("varmap lock poisoned");
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for name in names {
        let var = &data[name];
        let tensor = fetch(name)?.ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
        if tensor.dims() != var.dims() {
            return Err(ModelError::ShapeMismatch {
                tensor: name.clone(),
                expected: var.dims().to_vec(),
                found: tensor.dims().to_vec(),
            });
        }
        var.set(&tensor.to_dtype(var.dtype())?.to_device(var.device())?)?;
    }
    Ok(())
}
