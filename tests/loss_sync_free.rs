//! The YOLOv9 loss is sync-free: it runs to completion on a device where nothing executes
//! and any read of a computed tensor fails. (Its numbers are checked in yolo9_parity.rs.)

use burn::tensor::{Device, Tensor, TensorData};
use libreyolo_run::parity::fixture::{self, Fixture};
use libreyolo_stages::loss::Yolo9Loss;

/// On a capture device nothing executes: a tensor computed there has no value, and reading it
/// fails. The loss runs to completion on such inputs, so it never reads back.
#[test]
fn the_loss_never_reads_back() {
    let device = Device::capture();
    let fx = Fixture::io(&fixture::default_dir()).unwrap();
    let host_targets = fx.get("targets");
    let shapes = [(32, 32), (16, 16), (8, 8)];
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut result = None;
        let _ = device.capture_scope(|scope| {
            // `add_scalar` makes every input the output of an operation: it has no value on
            // this device, so any read of it (or of anything derived from it) fails.
            let maps: Vec<Tensor<4>> = shapes.iter().map(|&(h, w)| Tensor::<4>::zeros([2, 144, h, w], &device).add_scalar(0.5)).collect();
            let t = &host_targets;
            let targets = Tensor::<3>::from_data(TensorData::new(t.to_f32(), [t.shape[0], t.shape[1], t.shape[2]]), &device).add_scalar(0.0);
            let terms = Yolo9Loss::libreyolo_default(80).compute(&maps, &[8, 16, 32], targets);
            result = Some(terms.total.dims());
            scope.complete([], [])
        });
        result
    }));
    match ran {
        Ok(Some(dims)) => assert_eq!(dims, [1]),
        Ok(None) => panic!("the capture scope did not run"),
        Err(payload) => {
            let msg = payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("the loss failed on the capture device (a read back to the host fails there): {msg:?}")
        }
    }
}

/// The check above can fail: reading a computed tensor on the capture device panics.
#[test]
fn a_read_on_the_capture_device_is_caught() {
    let device = Device::capture();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = device.capture_scope(|scope| {
            let t = Tensor::<1>::zeros([4], &device).add_scalar(1.0);
            let _ = t.sum().into_data();
            scope.complete([], [])
        });
    }));
    assert!(ran.is_err(), "reading a computed tensor on the capture device must fail");
}
