//! `timeline.html`: one self-contained page (no network) with the lanes of the measured window
//! (steps, phases on the host, uploads, kernels on the device), zoom and pan, and the verdict
//! panel. The data is embedded as `var DATA = {...}` in `timeline.html`'s template.

use serde_json::{Value, json};

use super::analysis::{Profile, friendly};

const TEMPLATE: &str = include_str!("timeline.html");
const LANES: [&str; 4] = ["steps", "phases · host", "uploads (data stage)", "kernels · device"];

/// The embedded data: events in ms from the first measured step.
pub fn data(p: &Profile) -> Value {
    let m = &p.measurements;
    let origin = m.steps.first().map(|s| s.start_ms).unwrap_or(0.0);
    let mut events = vec![];
    let mut end: f64 = 0.0;
    let mut push = |lane: usize, name: String, phase: Option<&str>, cat: &str, start: f64, dur: f64| {
        end = end.max(start + dur - origin);
        events.push(json!({"lane": lane, "name": name, "phase": phase, "cat": cat, "t": start - origin, "d": dur}));
    };
    for s in &m.steps {
        let label = format!("step {}{}", s.index, if s.synced { " (synced)" } else { "" });
        push(0, label, Some("step"), "step", s.start_ms, s.dur_ms);
        if s.dataload_ms > 0.0 {
            push(1, "dataload".into(), Some("dataload"), "phase", s.start_ms, s.dataload_ms);
        }
        for ph in &s.phases {
            push(1, ph.phase.clone(), Some(&ph.phase), "phase", ph.start_ms, ph.dur_ms);
            if ph.phase == "data" {
                push(2, "host→device".into(), Some("data"), "copy", ph.start_ms, ph.dur_ms);
            }
        }
    }
    for k in &m.kernels {
        push(3, friendly(&k.name), Some(&k.phase), "kernel", k.start_ms, k.dur_ms);
    }
    let mut analysis = serde_json::to_value(p).expect("profile serializes");
    if let Some(o) = analysis.as_object_mut() {
        o.remove("measurements");
        o.remove("kernels");
    }
    json!({"lanes": LANES, "events": events, "total_ms": end, "meta": p.meta, "analysis": analysis})
}

/// The page for `p`.
pub fn html(p: &Profile) -> String {
    // `</` inside a script would end it early.
    let json = data(p).to_string().replace("</", "<\\/");
    TEMPLATE.replacen("/*DATA*/null", &json, 1)
}
