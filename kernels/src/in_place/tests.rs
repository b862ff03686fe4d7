//! The updates on the CPU against the formulas written out element by element (torch's
//! `SGD` with dampening 0 and `AdamW`, and the weighted sum).

use burn::tensor::{Device, Tensor, TensorData};

use super::{AdamWConstants, AdamWScalars, adamw_many, blend_const, blend_many, running_stats, sgd_many};

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{got:?} != {want:?}");
    }
}

/// torch.optim.SGD's update of one element (dampening 0), in f64.
fn torch_sgd(p: f64, buf: f64, g: f64, lr: f64, momentum: f64, wd: f64, nesterov: bool) -> (f64, f64) {
    let g = g + wd * p;
    let buf = momentum * buf + g;
    let step = if nesterov { g + momentum * buf } else { buf };
    (p - lr * step, buf)
}

#[test]
fn sgd_is_torchs_update_with_and_without_nesterov_and_decay() {
    let device = Device::flex();
    let p0 = [0.5f32, -1.25, 2.0, 0.0, 3.5, -0.75];
    let b0 = [0.1f32, 0.0, -0.2, 0.3, 0.05, -0.4];
    let g0 = [1.0f32, -2.0, 0.25, 0.5, -0.125, 4.0];
    let (lr, momentum) = (0.01, 0.937);
    for (wd, nesterov) in [(0.0, false), (5e-4, false), (0.0, true), (5e-4, true)] {
        let param = Tensor::<4>::from_data(TensorData::new(p0.to_vec(), [1, 2, 3, 1]), &device);
        let buffer = Tensor::<1>::from_data(TensorData::new(b0.to_vec(), [6]), &device);
        let grad = Tensor::<1>::from_data(TensorData::new(g0.to_vec(), [6]), &device);
        let scalar = |v: f64| Tensor::<1>::from_data(TensorData::new(vec![v as f32], [1]), &device);
        let (mut p, mut b) =
            sgd_many(vec![param.into_dispatch()], vec![buffer.into_dispatch()], vec![grad.into_dispatch()], &scalar(lr), &scalar(momentum), wd, nesterov);
        let (p, b) = (Tensor::<4>::from_dispatch(p.remove(0)), Tensor::<1>::from_dispatch(b.remove(0)));
        assert_eq!(p.dims(), [1, 2, 3, 1], "the parameter keeps its shape");
        let want: Vec<(f64, f64)> = (0..6).map(|i| torch_sgd(p0[i] as f64, b0[i] as f64, g0[i] as f64, lr, momentum, wd, nesterov)).collect();
        close(&values(p), &want.iter().map(|w| w.0 as f32).collect::<Vec<_>>());
        close(&values(b), &want.iter().map(|w| w.1 as f32).collect::<Vec<_>>());
    }
}

/// The list form is torch's update of each parameter with its own buffer and gradient, whatever
/// its rank, for more parameters than one GPU launch takes; results in order.
#[test]
fn sgd_many_updates_each_parameter_in_order() {
    let device = Device::flex();
    let scalar = |v: f64| Tensor::<1>::from_data(TensorData::new(vec![v as f32], [1]), &device);
    let (lr, momentum, wd) = (0.01, 0.937, 5e-4);
    let lens: Vec<usize> = (1..=18).map(|k| k * 11 % 29 + 1).collect();
    let data = |seed: usize, n: usize| (0..n).map(|i| ((seed * 17 + i * 5) % 23) as f32 / 4.0 - 2.5).collect::<Vec<f32>>();
    let flat = |seed: usize, n: usize| Tensor::<1>::from_data(TensorData::new(data(seed, n), [n]), &device);
    let params = lens.iter().enumerate().map(|(k, &n)| if k % 2 == 0 { flat(k, n).into_dispatch() } else { flat(k, n).reshape([n, 1]).into_dispatch() });
    let buffers = lens.iter().enumerate().map(|(k, &n)| flat(k + 50, n).into_dispatch());
    let grads = lens.iter().enumerate().map(|(k, &n)| flat(k + 100, n).into_dispatch());
    let (params, buffers) = sgd_many(params.collect(), buffers.collect(), grads.collect(), &scalar(lr), &scalar(momentum), wd, true);
    assert_eq!((params.len(), buffers.len()), (lens.len(), lens.len()));
    for (k, ((p, b), &n)) in params.into_iter().zip(buffers).zip(&lens).enumerate() {
        let p = if k % 2 == 0 { values(Tensor::<1>::from_dispatch(p)) } else { values(Tensor::<2>::from_dispatch(p)) };
        let want: Vec<(f64, f64)> =
            (0..n).map(|i| torch_sgd(data(k, n)[i] as f64, data(k + 50, n)[i] as f64, data(k + 100, n)[i] as f64, lr, momentum, wd, true)).collect();
        close(&p, &want.iter().map(|w| w.0 as f32).collect::<Vec<_>>());
        close(&values(Tensor::<1>::from_dispatch(b)), &want.iter().map(|w| w.1 as f32).collect::<Vec<_>>());
    }
}

/// torch.optim.AdamW's update of one element at step `t` (decoupled decay first), in f64:
/// (param, exp_avg, exp_avg_sq).
#[allow(clippy::too_many_arguments)]
fn torch_adamw(p: f64, m: f64, v: f64, g: f64, lr: f64, beta1: f64, t: i32, wd: f64) -> (f64, f64, f64) {
    let (beta2, eps) = (0.999, 1e-8);
    let p = p * (1.0 - lr * wd);
    let m = beta1 * m + (1.0 - beta1) * g;
    let v = beta2 * v + (1.0 - beta2) * g * g;
    let (m_hat, v_hat) = (m / (1.0 - beta1.powi(t)), v / (1.0 - f64::powi(beta2, t)));
    (p - lr * m_hat / (v_hat.sqrt() + eps), m, v)
}

/// The list form is torch's AdamW of each parameter with its own moments and gradient, whatever
/// its rank, for more parameters than one GPU launch takes, with and without decay; results in
/// order. The bias corrections are those of step 3.
#[test]
#[allow(clippy::type_complexity)]
fn adamw_many_is_torchs_update_of_each_parameter_in_order() {
    let device = Device::flex();
    let scalar = |v: f64| Tensor::<1>::from_data(TensorData::new(vec![v as f32], [1]), &device);
    let (lr, beta1, t): (f64, f64, i32) = (0.002, 0.9, 3);
    let lens: Vec<usize> = (1..=18).map(|k| k * 7 % 31 + 1).collect();
    let data = |seed: usize, n: usize| (0..n).map(|i| ((seed * 13 + i * 7) % 19) as f32 / 4.0 - 2.0).collect::<Vec<f32>>();
    let flat = |seed: usize, n: usize| Tensor::<1>::from_data(TensorData::new(data(seed, n), [n]), &device);
    let squares = |seed: usize, n: usize| flat(seed, n).abs();
    let (bias1, bias2) = (scalar(1.0 - beta1.powi(t)), scalar(1.0 - 0.999f64.powi(t)));
    let (lr_t, beta1_t, one_minus) = (scalar(lr), scalar(beta1), scalar(1.0 - beta1));
    let s = AdamWScalars { lr: &lr_t, beta1: &beta1_t, one_minus_beta1: &one_minus, bias1: &bias1, bias2: &bias2 };
    for wd in [0.0, 0.05] {
        let params = lens.iter().enumerate().map(|(k, &n)| if k % 2 == 0 { flat(k, n).into_dispatch() } else { flat(k, n).reshape([n, 1]).into_dispatch() });
        let exp_avgs = lens.iter().enumerate().map(|(k, &n)| flat(k + 50, n).into_dispatch());
        let exp_avg_sqs = lens.iter().enumerate().map(|(k, &n)| squares(k + 70, n).into_dispatch());
        let grads = lens.iter().enumerate().map(|(k, &n)| flat(k + 100, n).into_dispatch());
        let c = AdamWConstants { beta2: 0.999, eps: 1e-8, weight_decay: wd };
        let (params, exp_avgs, exp_avg_sqs) = adamw_many(params.collect(), exp_avgs.collect(), exp_avg_sqs.collect(), grads.collect(), &s, c);
        assert_eq!((params.len(), exp_avgs.len(), exp_avg_sqs.len()), (lens.len(), lens.len(), lens.len()));
        for (k, (((p, m), v), &n)) in params.into_iter().zip(exp_avgs).zip(exp_avg_sqs).zip(&lens).enumerate() {
            let p = if k % 2 == 0 { values(Tensor::<1>::from_dispatch(p)) } else { values(Tensor::<2>::from_dispatch(p)) };
            let v0: Vec<f32> = data(k + 70, n).iter().map(|x| x.abs()).collect();
            let want: Vec<(f64, f64, f64)> = (0..n)
                .map(|i| torch_adamw(data(k, n)[i] as f64, data(k + 50, n)[i] as f64, v0[i] as f64, data(k + 100, n)[i] as f64, lr, beta1, t, wd))
                .collect();
            close(&p, &want.iter().map(|w| w.0 as f32).collect::<Vec<_>>());
            close(&values(Tensor::<1>::from_dispatch(m)), &want.iter().map(|w| w.1 as f32).collect::<Vec<_>>());
            close(&values(Tensor::<1>::from_dispatch(v)), &want.iter().map(|w| w.2 as f32).collect::<Vec<_>>());
        }
    }
}

#[test]
fn blend_weights_target_and_source() {
    let device = Device::flex();
    let t0 = [1.0f32, -2.0, 3.0, 0.5];
    let s0 = [0.0f32, 4.0, -1.0, 0.5];
    let target = || Tensor::<2>::from_data(TensorData::new(t0.to_vec(), [2, 2]), &device);
    let source = || Tensor::<2>::from_data(TensorData::new(s0.to_vec(), [2, 2]), &device);
    let (keep, take) = (0.97f64, 0.03f64);
    let want: Vec<f32> = (0..4).map(|i| (t0[i] as f64 * keep + s0[i] as f64 * take) as f32).collect();
    let scalar = |v: f64| Tensor::<1>::from_data(TensorData::new(vec![v as f32], [1]), &device);
    let blended = blend_many(vec![target().into_dispatch()], vec![source().into_dispatch()], &scalar(keep), &scalar(take));
    close(&values(Tensor::<2>::from_dispatch(blended.into_iter().next().expect("one result"))), &want);
    close(&values(blend_const(target(), source(), keep, take)), &want);
}

/// The list form blends each target with the source at its index, whatever the ranks and
/// lengths of the list (more pairs than one GPU launch takes), and returns them in order.
#[test]
fn blend_many_blends_each_pair_in_order() {
    let device = Device::flex();
    let scalar = |v: f64| Tensor::<1>::from_data(TensorData::new(vec![v as f32], [1]), &device);
    let (keep, take) = (0.9f64, 0.1f64);
    let lens: Vec<usize> = (1..=20).map(|k| k * 13 % 37 + 1).collect();
    let data = |seed: usize, n: usize| (0..n).map(|i| ((seed * 31 + i * 7) % 19) as f32 - 9.0).collect::<Vec<f32>>();
    let targets = lens.iter().enumerate().map(|(k, &n)| {
        let t = Tensor::<1>::from_data(TensorData::new(data(k, n), [n]), &device);
        if k % 2 == 0 { t.into_dispatch() } else { t.reshape([1, n]).into_dispatch() }
    });
    let sources = lens.iter().enumerate().map(|(k, &n)| {
        let t = Tensor::<1>::from_data(TensorData::new(data(k + 100, n), [n]), &device);
        if k % 2 == 0 { t.into_dispatch() } else { t.reshape([1, n]).into_dispatch() }
    });
    let blended = blend_many(targets.collect(), sources.collect(), &scalar(keep), &scalar(take));
    assert_eq!(blended.len(), lens.len());
    for (k, (p, &n)) in blended.into_iter().zip(&lens).enumerate() {
        let got: Vec<f32> = if k % 2 == 0 { values(Tensor::<1>::from_dispatch(p)) } else { values(Tensor::<2>::from_dispatch(p)) };
        let want: Vec<f32> = data(k, n).iter().zip(data(k + 100, n)).map(|(&t, s)| (t as f64 * keep + s as f64 * take) as f32).collect();
        close(&got, &want);
    }
}

/// PyTorch's BatchNorm2d running statistics after one batch of n values a channel:
/// `(1 - momentum) * running + momentum * batch`, the variance unbiased (times n / (n - 1)), both
/// read from the rows of the fused BatchNorm's `[5, C]` statistics (the other rows ignored).
#[test]
fn running_stats_follow_torchs_rule_from_the_statistics_rows() {
    let device = Device::flex();
    let (m0, v0) = ([0.5f32, -1.0, 2.0], [1.0f32, 0.25, 4.0]);
    let (batch_mean, batch_var) = ([1.5f32, 0.0, -2.0], [0.5f32, 2.0, 1.0]);
    let mut rows = batch_mean.to_vec();
    rows.extend(batch_var);
    rows.extend([9.0f32; 9]); // rstd, scale, shift: not read
    let stats = Tensor::<2>::from_data(TensorData::new(rows, [5, 3]), &device);
    let vector = |v: [f32; 3]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [3]), &device);
    let (momentum, n) = (0.03f64, 8.0f64);
    let (mean, var) = running_stats(vector(m0), vector(v0), &stats, momentum, n / (n - 1.0));
    let rule = |r: f32, b: f64| ((1.0 - momentum) * r as f64 + momentum * b) as f32;
    close(&values(mean), &(0..3).map(|i| rule(m0[i], batch_mean[i] as f64)).collect::<Vec<_>>());
    close(&values(var), &(0..3).map(|i| rule(v0[i], batch_var[i] as f64 * n / (n - 1.0))).collect::<Vec<_>>());
}
