//! The model-based test on CUDA (a GPU, or the driver model in the test command's
//! `cuda-model` row): random programs from `capture_suite::model`, each on a fresh device
//! over the CUDA backend, checked op by op against the reference model. Cases:
//! `CAPTURE_PROPTEST_CASES`, a tenth of it (default 300); the threaded variant a
//! hundredth (default 20). A failure shrinks and its seed is kept in
//! `tests/it/model-regressions/`.

use capture_cuda::CudaBackend;
use capture_suite::model;

use crate::support;

fn backend() -> Option<CudaBackend> {
    let _suite = capture_suite::scenarios::suite_lock();
    match support::backend() {
        Ok(b) => Some(b),
        Err(why) => {
            println!("SKIP: model on CUDA: {why}");
            None
        }
    }
}

#[test]
fn model_on_cuda() {
    let Some(b) = backend() else {
        return;
    };
    model::drive(
        &format!("CUDA ({})", b.device_name()),
        model::cases_from_env(300, 10, 20),
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/model-regressions/cuda.txt"
        ),
        &model::program(),
        |program| model::check(|| b.clone(), program).map_err(|v| v.to_string()),
    );
}

#[test]
fn model_threads_on_cuda() {
    let Some(b) = backend() else {
        return;
    };
    model::drive(
        &format!("CUDA ({}, threads)", b.device_name()),
        model::cases_from_env(20, 100, 10),
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/model-regressions/threads.txt"
        ),
        &model::threads_program(),
        |program| model::check_threads(|| b.clone(), program).map_err(|v| v.to_string()),
    );
}
