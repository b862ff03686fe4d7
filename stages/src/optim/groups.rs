//! Parameter groups: the learning-rate scale and weight decay of each parameter.
//!
//! Without groups a parameter decays by its role, as LibreYOLO's YOLO trainers group them
//! (weights and embeddings decay; biases and norms do not). A manifest may declare groups as
//! LibreYOLO's DETR trainers do (`[[optim.groups]]`): a parameter takes the first group whose
//! every pattern matches its name (a regular expression found anywhere in it), with that group's
//! learning-rate scale and weight decay (the base decay where the group sets none); a parameter
//! no group takes has the base learning rate and the base weight decay, whatever its role — what
//! `torch.optim.AdamW(param_groups)` does with the last, catch-all group.

use std::collections::HashMap;

use libreyolo_families::{ParamId, ParamStore, Role};
use regex::Regex;

/// One declared group.
#[derive(Debug, Clone)]
pub struct Group {
    /// Every one must match the parameter's name.
    pub names: Vec<Regex>,
    pub lr_scale: f64,
    /// `None`: the base weight decay.
    pub weight_decay: Option<f64>,
}

/// The groups of one optimizer, with its base weight decay.
#[derive(Debug, Clone)]
pub struct Groups {
    pub weight_decay: f64,
    pub groups: Vec<Group>,
}

/// What a parameter's update uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hyper {
    pub lr_scale: f64,
    pub weight_decay: f64,
}

impl Groups {
    /// No declared groups: decay by role.
    pub fn by_role(weight_decay: f64) -> Self {
        Self { weight_decay, groups: vec![] }
    }

    /// The learning-rate scale and weight decay of the parameter `name` of `role`.
    pub fn of(&self, name: &str, role: Role) -> Hyper {
        if self.groups.is_empty() {
            return Hyper { lr_scale: 1.0, weight_decay: if role.decays() { self.weight_decay } else { 0.0 } };
        }
        match self.first_match(name).map(|i| &self.groups[i]) {
            Some(g) => Hyper { lr_scale: g.lr_scale, weight_decay: g.weight_decay.unwrap_or(self.weight_decay) },
            None => Hyper { lr_scale: 1.0, weight_decay: self.weight_decay },
        }
    }

    /// How many of `names` each group takes (a group that takes none is most likely a typo).
    pub fn counts<'a>(&self, names: impl Iterator<Item = &'a str>) -> Vec<usize> {
        let mut counts = vec![0; self.groups.len()];
        for i in names.filter_map(|name| self.first_match(name)) {
            counts[i] += 1;
        }
        counts
    }

    /// The first group whose every pattern matches `name`.
    fn first_match(&self, name: &str) -> Option<usize> {
        self.groups.iter().position(|g| g.names.iter().all(|r| r.is_match(name)))
    }
}

/// [`Groups`] with each parameter's [`Hyper`] kept from its first step: the patterns run once
/// a parameter, not once a step.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub groups: Groups,
    hypers: HashMap<ParamId, Hyper>,
}

impl Resolved {
    pub fn new(groups: Groups) -> Self {
        Self { groups, hypers: HashMap::new() }
    }

    /// The [`Hyper`] of the parameter `id` of `store`.
    pub fn of(&mut self, store: &ParamStore, id: ParamId) -> Hyper {
        let groups = &self.groups;
        *self.hypers.entry(id).or_insert_with(|| {
            let entry = store.entry(id);
            groups.of(&entry.name, entry.role)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LibreYOLO's RT-DETR groups (`RTDETRTrainer._setup_optimizer`), lookaheads as patterns that
    /// must all match.
    fn rtdetr() -> Groups {
        let g = |names: &[&str], lr_scale: f64, weight_decay: Option<f64>| Group {
            names: names.iter().map(|n| Regex::new(n).unwrap()).collect(),
            lr_scale,
            weight_decay,
        };
        Groups {
            weight_decay: 1e-4,
            groups: vec![g(&["backbone", "norm|bn"], 0.05, Some(0.0)), g(&["backbone"], 0.05, None), g(&["encoder|decoder", "norm|bias"], 1.0, Some(0.0))],
        }
    }

    #[test]
    fn the_first_matching_group_decides_and_the_rest_take_the_base() {
        let groups = rtdetr();
        let of = |name: &str, role: Role| groups.of(name, role);
        assert_eq!(of("backbone.conv1.conv1_1.norm.weight", Role::BnWeight), Hyper { lr_scale: 0.05, weight_decay: 0.0 });
        assert_eq!(of("backbone.res_layers.0.blocks.0.branch2a.conv.weight", Role::Weight), Hyper { lr_scale: 0.05, weight_decay: 1e-4 });
        assert_eq!(of("decoder.dec_score_head.0.bias", Role::Bias), Hyper { lr_scale: 1.0, weight_decay: 0.0 });
        // LibreYOLO's catch-all group: the LayerNorm after `enc_output` (no "norm" in its name)
        // decays, whatever its role
        assert_eq!(of("decoder.enc_output.1.weight", Role::NormWeight), Hyper { lr_scale: 1.0, weight_decay: 1e-4 });
        assert_eq!(of("decoder.enc_output.0.weight", Role::Weight), Hyper { lr_scale: 1.0, weight_decay: 1e-4 });
        let names = ["backbone.a.norm.weight", "backbone.a.conv.weight", "encoder.x.bias", "decoder.y.weight"];
        assert_eq!(groups.counts(names.into_iter()), vec![1, 1, 1]);
    }

    #[test]
    fn without_groups_a_parameter_decays_by_its_role() {
        let groups = Groups::by_role(5e-4);
        assert_eq!(groups.of("model.0.conv.weight", Role::Weight).weight_decay, 5e-4);
        assert_eq!(groups.of("model.0.bn.weight", Role::BnWeight).weight_decay, 0.0);
        assert_eq!(groups.of("model.0.conv.bias", Role::Bias), Hyper { lr_scale: 1.0, weight_decay: 0.0 });
    }
}
