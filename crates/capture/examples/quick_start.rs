//! Capture a two-kernel step once, then replay it per input written in place.
use capture_graphs::mock::MockBackend;
use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
fn main() -> capture_graphs::Result<()> {
    let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    let s = StreamId::new(0);
    let [x, t, y] = [dev.alloc(s, 16)?, dev.alloc(s, 16)?, dev.alloc(s, 16)?];
    let (add, mul) = (Builtin::AddScalar, Builtin::MulScalar);
    let (k_add, k_mul) = (dev.builtin(add), dev.builtin(mul));
    let x_to_t = [Arg::read(&x), Arg::write(&t)];
    let t_to_y = [Arg::read(&t), Arg::write(&y)];
    dev.write_values(s, &x, 0, &[0.0f32; 4])?; // typed host I/O: any plain-old-data slice
    let step = dev.capture(s, |d| {
        d.launch(s, &k_add, [1, 1, 1], &x_to_t, &add.info(4, 1.0))?; // run, then recorded
        d.launch(s, &k_mul, [1, 1, 1], &t_to_y, &mul.info(4, 10.0))
    })?;
    for token in 1..=3 {
        dev.write_values(s, &x, 0, &[token as f32; 4])?; // a new input, in the same buffer
        dev.replay(s, &step, 1)?; // both kernels, one dispatch
        let y_host: Vec<f32> = dev.read_values(s, &y)?; // or read_values_into your buffer
        assert_eq!(y_host, [(token as f32 + 1.0) * 10.0; 4]);
    }
    println!("{}", dev.memory_report());
    dev.drop_graph(step)
}
