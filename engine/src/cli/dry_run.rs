//! `--dry-run`: the resolved settings, the device and the step plan, as plain text.

use std::fmt::Write;

use libreyolo_families::ParamStore;

use crate::dag::StepDag;
use crate::device::ResolvedDevice;
use crate::manifest::LoadedManifest;

/// How a dataset carries its labels, in words.
pub fn layout_name(layout: libreyolo_stages::data::Layout) -> &'static str {
    match layout {
        libreyolo_stages::data::Layout::Yolo => "a YOLO dataset YAML",
        libreyolo_stages::data::Layout::Folder => "an ImageFolder directory",
    }
}

/// The report; `data`: the dataset in a line (or why it cannot be read).
pub fn report(loaded: &LoadedManifest, dag: &StepDag, device: &ResolvedDevice, params: &ParamStore, nc: usize, data: &str) -> String {
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
    let _ = writeln!(out, "\n## data\n\n{data}");

    let _ = writeln!(
        out,
        "\n## network\n\n{} layers, {} tensors, {} parameters (nc={nc}{})",
        m.model.layers.len(),
        params.len(),
        params.num_parameters(),
        if m.model.aux_weight > 0.0 && m.model.layers.iter().any(|l| l.aux) { ", with the PGI auxiliary branch" } else { "" }
    );

    // The run's GPUs: a torchrun-style launch's world, else the device's.
    let launch = crate::distributed::launch().ok().flatten();
    let world = crate::distributed::world_size(launch.as_ref(), device.ids.len());
    let wanted = crate::compile::capture_wanted(&m.capture, device.backend, world);
    let plan = dag.plan(wanted);
    let _ = writeln!(out, "\n## plan\n");
    let _ = writeln!(
        out,
        "{} stages, {} segments, {} seams; capture {}",
        dag.stages.len(),
        plan.segments.len(),
        plan.seams.len(),
        if wanted {
            format!(
                "{} (threshold {}, max_graphs {})",
                match m.capture.enabled {
                    crate::manifest::CaptureMode::Auto => "auto",
                    crate::manifest::CaptureMode::On => "on",
                    crate::manifest::CaptureMode::Off => "on (the compile mode's CUDA graphs)",
                },
                m.capture.threshold,
                m.capture.max_graphs
            )
        } else {
            "off (capture.enabled=false / cuda_graph=false: every stage runs eager)".to_string()
        }
    );
    if let Some(line) = crate::compile::describe(m.capture.compile, device.backend, world) {
        let _ = writeln!(out, "{line}");
    }
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
            let _ = writeln!(
                out,
                "      network seam after `{layer}`: {} with this stage; {} eager with the loss, between the graphs",
                names(&layers[..cut]),
                names(&layers[cut..])
            );
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
        let _ =
            writeln!(out, "  #{} | #{}  {}", seam.after + 1, seam.after + 2, if values.is_empty() { "(ordering only)".to_string() } else { values.join(", ") });
    }
    let _ = write!(out, "{}", program_report(loaded, dag, device, world, launch.is_some()));
    out
}

/// The compiled program of this run over `world` GPUs (`processes`: one process each): each
/// item, how it runs, and the graphs of its region.
fn program_report(loaded: &LoadedManifest, dag: &StepDag, device: &ResolvedDevice, world: usize, processes: bool) -> String {
    let m = &loaded.manifest;
    let mut out = String::new();
    let accumulate = crate::train::accumulation(m.optim.nbs, crate::train::nominal_batch(m.run.batch));
    let opts = crate::train::setup::program_options(loaded, device.backend, world, processes, accumulate);
    let program = crate::step::Program::compile(dag, &opts);
    let _ = writeln!(out, "\n## program (what this run executes)\n");
    let graph_of = |s: usize| {
        program
            .region
            .as_ref()
            .filter(|r| r.contains(&s) && program.segments[s].graph)
            .map(|r| r.clone().filter(|&x| program.segments[x].graph && x <= s).count())
    };
    let width = (0..program.items.len()).map(|i| program.item_name(i).len()).max().unwrap_or(0);
    for (s, seg) in program.segments.iter().enumerate() {
        for i in seg.items.clone() {
            let how = match graph_of(s) {
                Some(g) => format!("graph {g}{}", if program.items[i].forced { " (its part of the forward was captured)" } else { "" }),
                None => "eager".into(),
            };
            let _ = writeln!(out, "  {:>2}. {:width$}  {how}", i + 1, program.item_name(i));
        }
    }
    let _ = writeln!(out, "\nautodiff parts: {} (a backward item per part, last part first)", program.pieces);
    for note in &program.notes {
        let _ = writeln!(out, "note: {note}");
    }
    if opts.capture {
        let _ = writeln!(
            out,
            "\nthis build: {}",
            match &program.why_eager {
                Some(why) if m.capture.enabled == crate::manifest::CaptureMode::Auto => format!("cuda_graph=auto: trains eager ({why})"),
                Some(why) => format!("cuda_graph=true ignored ({why}); training runs eager"),
                None => format!("captures {} graph(s) per input shape: {}", program.graphs(), program.describe_region()),
            }
        );
    }
    out
}
