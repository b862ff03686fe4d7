//! The seam planner: consecutive capturable stages form one captured segment; a seam is the
//! boundary between two segments, with the values that cross it.

use super::{StepDag, ValueRef};

/// A run of stages executed the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub captured: bool,
    /// Stage indices, in execution order.
    pub stages: Vec<usize>,
}

/// The boundary after segment `after`: values made before it and read after it. These are the
/// buffers a captured segment must keep stable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seam {
    pub after: usize,
    pub values: Vec<ValueRef>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub segments: Vec<Segment>,
    pub seams: Vec<Seam>,
}

pub(super) fn plan(dag: &StepDag, capture_enabled: bool) -> Plan {
    let mut segments: Vec<Segment> = Vec::new();
    for &stage in &dag.order {
        let captured = capture_enabled && dag.stages[stage].capture;
        match segments.last_mut() {
            Some(seg) if seg.captured == captured => seg.stages.push(stage),
            _ => segments.push(Segment { captured, stages: vec![stage] }),
        }
    }

    let segment_of: Vec<usize> = {
        let mut s = vec![0; dag.stages.len()];
        for (i, seg) in segments.iter().enumerate() {
            for &stage in &seg.stages {
                s[stage] = i;
            }
        }
        s
    };
    let seams = (0..segments.len().saturating_sub(1))
        .map(|after| {
            let mut values: Vec<ValueRef> = Vec::new();
            for (reader, stage) in dag.stages.iter().enumerate() {
                for &input in &stage.inputs {
                    if segment_of[input.stage] <= after && segment_of[reader] > after && !values.contains(&input) {
                        values.push(input);
                    }
                }
            }
            values.sort();
            Seam { after, values }
        })
        .collect();
    Plan { segments, seams }
}
