//! `--dry-run`: the resolved settings, the device and the step plan, as plain text.

use std::fmt::Write;

use libreyolo_families::ParamStore;

use crate::dag::StepDag;
use crate::device::ResolvedDevice;
use crate::manifest::LoadedManifest;

pub fn report(loaded: &LoadedManifest, dag: &StepDag, device: &ResolvedDevice, params: &ParamStore, nc: usize) -> String {
    let m = &loaded.manifest;
    let mut out = String::new();
    let _ = writeln!(out, "# dry run of {}", loaded.source.path.display());
    for o in &loaded.source.overrides {
        let _ = writeln!(out, "# override: {} -> {}", o.arg, o.path);
    }
    let _ = writeln!(out, "\n## settings (resolved)\n");
    // Stages and layers are summarised below; the settings dump leaves them out.
    let mut settings = toml::Table::try_from(m).expect("the manifest serializes");
    settings.remove("stage");
    if let Some(model) = settings.get_mut("model").and_then(|v| v.as_table_mut()) {
        model.remove("layers");
    }
    let _ = writeln!(out, "{}", toml::to_string_pretty(&settings).expect("the manifest serializes").trim_end());

    let _ = writeln!(out, "\n## device\n\n{}", device.describe());

    let _ = writeln!(
        out,
        "\n## network\n\n{} layers, {} tensors, {} parameters (nc={nc}{})",
        m.model.layers.len(),
        params.len(),
        params.num_parameters(),
        if m.model.aux_weight > 0.0 { ", with the PGI auxiliary branch" } else { "" }
    );

    let plan = dag.plan(m.capture.enabled);
    let _ = writeln!(out, "\n## plan\n");
    let _ = writeln!(
        out,
        "{} stages, {} segments, {} seams; capture {}",
        dag.stages.len(),
        plan.segments.len(),
        plan.seams.len(),
        if m.capture.enabled {
            format!("on (threshold {}, max_graphs {})", m.capture.threshold, m.capture.max_graphs)
        } else {
            "off (capture.enabled=false / cuda_graph=false: every stage runs eager)".to_string()
        }
    );
    let _ = writeln!(out, "\nstages, in execution order:");
    let name_w = dag.stages.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let kind_w = dag.stages.iter().map(|s| s.kind.name.len()).max().unwrap_or(0);
    for (n, &i) in dag.order.iter().enumerate() {
        let s = &dag.stages[i];
        let inputs: Vec<String> = s.inputs.iter().map(|v| dag.name(*v)).collect();
        let mark = if s.capture { "capture" } else { "eager" };
        let _ = writeln!(
            out,
            "  {:>2}. {:name_w$}  {:kind_w$}  {:7}  <- {}{}",
            n + 1,
            s.name,
            s.kind.name,
            mark,
            if inputs.is_empty() { "(none)".to_string() } else { inputs.join(", ") },
            if s.recapture_on.is_empty() { String::new() } else { format!("  (re-captured on {})", s.recapture_on.join(", ")) }
        );
        if let Some(layer) = &s.until {
            let layers = &m.model.layers;
            let cut = layers.iter().position(|l| &l.name == layer).map_or(0, |i| i + 1);
            let names = |part: &[libreyolo_families::LayerSpec]| match part {
                [] => "none".to_string(),
                [one] => format!("`{}`", one.name),
                [first, .., last] => format!("{} layers, `{}` .. `{}`", part.len(), first.name, last.name),
            };
            let _ = writeln!(out, "      network seam after `{layer}`: {} with this stage; {} eager with the loss, between the graphs", names(&layers[..cut]), names(&layers[cut..]));
        }
    }
    let _ = writeln!(out, "\nsegments:");
    for (n, seg) in plan.segments.iter().enumerate() {
        let names: Vec<&str> = seg.stages.iter().map(|&i| dag.stages[i].name.as_str()).collect();
        let _ = writeln!(out, "  #{} {:8} [{}]", n + 1, if seg.captured { "captured" } else { "eager" }, names.join(", "));
    }
    let _ = writeln!(out, "\nseams:");
    if plan.seams.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for seam in &plan.seams {
        let values: Vec<String> = seam.values.iter().map(|v| dag.name(*v)).collect();
        let _ = writeln!(
            out,
            "  #{} | #{}  {}",
            seam.after + 1,
            seam.after + 2,
            if values.is_empty() { "(ordering only)".to_string() } else { values.join(", ") }
        );
    }
    if m.capture.enabled {
        let launch = crate::distributed::launch().ok().flatten();
        let world = crate::distributed::world_size(launch.as_ref(), device.ids.len());
        let _ = writeln!(
            out,
            "\nthis build: {}",
            match crate::train::capture_plan::capture_support(loaded, dag, device, world, launch.is_some()) {
                Ok(crate::train::capture_plan::CaptureSupport::WholeStep) => "captures the whole step (forward, loss, backward, optimizer, EMA) as one graph".to_string(),
                Ok(crate::train::capture_plan::CaptureSupport::Segment) => "captures forward + loss + backward as one graph; optimizer, EMA and schedule eager".to_string(),
                Ok(crate::train::capture_plan::CaptureSupport::TwoGraphs) if dag.network_seam().is_some() => format!(
                    "captures the forward and the backward of the layers up to `{}` as two graphs, the layers after it and the loss eager between them; optimizer, EMA and schedule eager",
                    dag.network_seam().unwrap_or_default()
                ),
                Ok(crate::train::capture_plan::CaptureSupport::TwoGraphs) => "captures the forward and the backward as two graphs with the loss eager between them (LibreYOLO's contract); optimizer, EMA and schedule eager".to_string(),
                Ok(crate::train::capture_plan::CaptureSupport::TwoGraphsAndUpdate) => {
                    "captures the forward and the backward as two graphs with the loss eager between them (LibreYOLO's contract), then the update (BatchNorm statistics, optimizer, EMA) as a third graph; a data-parallel rank's gradient all-reduce runs eager before it; the schedule eager".to_string()
                }
                Err(why) => format!("cuda_graph=true ignored ({why}); training runs eager"),
            }
        );
    }
    out
}
