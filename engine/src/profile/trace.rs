//! `profile_trace.json` in the Chrome trace-event format (opens in Perfetto and
//! chrome://tracing): complete (`"ph": "X"`) events in microseconds, one process for the host
//! (a track for steps, one for phases) and one for the device (one track per stream: kernels).

use serde_json::{Value, json};

use super::analysis::Profile;

const HOST: u32 = 1;
const DEVICE: u32 = 2;
const STEPS: u32 = 1;
const PHASES: u32 = 2;
const STREAM: u32 = 1;

fn us(ms: f64) -> f64 {
    (ms * 1000.0 * 1000.0).round() / 1000.0
}

/// The trace of `p`'s measured steps and kernels.
pub fn build(p: &Profile) -> Value {
    let mut events = vec![
        json!({"ph": "M", "name": "process_name", "pid": HOST, "tid": 0, "args": {"name": "host"}}),
        json!({"ph": "M", "name": "thread_name", "pid": HOST, "tid": STEPS, "args": {"name": "steps"}}),
        json!({"ph": "M", "name": "thread_name", "pid": HOST, "tid": PHASES, "args": {"name": "phases (stages)"}}),
        json!({"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": p.meta.device}}),
        json!({"ph": "M", "name": "thread_name", "pid": DEVICE, "tid": STREAM, "args": {"name": "stream 0: kernels"}}),
    ];
    for s in &p.measurements.steps {
        events.push(json!({
            "ph": "X", "cat": "step", "name": format!("ProfilerStep#{}", s.index),
            "ts": us(s.start_ms), "dur": us(s.dur_ms), "pid": HOST, "tid": STEPS,
            "args": {"synced": s.synced, "dataload_ms": s.dataload_ms},
        }));
        if s.dataload_ms > 0.0 {
            events.push(json!({
                "ph": "X", "cat": "phase", "name": "step/dataload",
                "ts": us(s.start_ms), "dur": us(s.dataload_ms), "pid": HOST, "tid": PHASES, "args": {"step": s.index},
            }));
        }
        for ph in &s.phases {
            events.push(json!({
                "ph": "X", "cat": "phase", "name": format!("step/{}", ph.phase),
                "ts": us(ph.start_ms), "dur": us(ph.dur_ms), "pid": HOST, "tid": PHASES,
                "args": {"step": s.index, "synced": s.synced},
            }));
        }
    }
    for k in &p.measurements.kernels {
        events.push(json!({
            "ph": "X", "cat": "kernel", "name": super::analysis::friendly(&k.name),
            "ts": us(k.start_ms), "dur": us(k.dur_ms), "pid": DEVICE, "tid": STREAM,
            "args": {"phase": k.phase, "step": k.step, "raw_name": k.name},
        }));
    }
    json!({
        "displayTimeUnit": "ms",
        "traceName": format!("libreyolo-run profile: {}", p.meta.model),
        "otherData": {"schema": super::analysis::SCHEMA, "bound": p.bound, "manifest": p.meta.manifest},
        "traceEvents": events,
    })
}

/// Checks `trace` against the trace-event format's rules for the events it uses: an object
/// with a `traceEvents` array; every event has a phase, a name, integer pid and tid; complete
/// events carry numeric `ts` and a non-negative `dur`; metadata events carry `args.name`.
pub fn validate(trace: &Value) -> Result<usize, String> {
    let events = trace.get("traceEvents").and_then(Value::as_array).ok_or("no traceEvents array")?;
    for (i, e) in events.iter().enumerate() {
        let field = |k: &str| e.get(k).ok_or_else(|| format!("event {i} has no `{k}`: {e}"));
        let ph = field("ph")?.as_str().ok_or_else(|| format!("event {i}: `ph` is not a string"))?;
        field("name")?.as_str().ok_or_else(|| format!("event {i}: `name` is not a string"))?;
        field("pid")?.as_u64().ok_or_else(|| format!("event {i}: `pid` is not an integer"))?;
        field("tid")?.as_u64().ok_or_else(|| format!("event {i}: `tid` is not an integer"))?;
        match ph {
            "X" => {
                field("ts")?.as_f64().ok_or_else(|| format!("event {i}: `ts` is not a number"))?;
                let dur = field("dur")?.as_f64().ok_or_else(|| format!("event {i}: `dur` is not a number"))?;
                if dur < 0.0 {
                    return Err(format!("event {i}: negative duration"));
                }
            }
            "M" => {
                e.get("args").and_then(|a| a.get("name")).and_then(Value::as_str).ok_or_else(|| format!("metadata event {i} has no args.name"))?;
            }
            other => return Err(format!("event {i}: unexpected phase `{other}`")),
        }
    }
    Ok(events.len())
}
