//! Cooperative groups a Metal translation can carry, and CUDA's cache-hinted loads and stores.
//!
//! A thread block group (`cg::this_thread_block()`) is the threadgroup, and a tile of 32
//! (`cg::tiled_partition<32>(block)`) is a SIMD group: Apple GPUs run 32 lanes per SIMD group, taken from
//! consecutive thread indices of the threadgroup as a CUDA warp is. So the group objects go, and their
//! operations become Metal built-ins (`block.sync()` → `threadgroup_barrier`, `cg::reduce(warp, v,
//! cg::plus<float>())` → `simd_sum(v)`, `warp.shfl_down(v, 1)` → `simd_shuffle_down(v, 1)`). Tiles of other
//! sizes, grid groups and anything else stay T104 errors.

use super::analyze::{call_name, text};
use regex::Regex;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use tree_sitter::Node;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// The thread block: the threadgroup.
    Block,
    /// A tile of 32 threads: a SIMD group.
    Warp,
}

impl Group {
    pub fn describe(self) -> &'static str {
        match self {
            Group::Block => "thread block group, the threadgroup",
            Group::Warp => "tile of 32 threads, a SIMD group",
        }
    }
}

fn patterns() -> &'static [(Group, Regex); 2] {
    static P: OnceLock<[(Group, Regex); 2]> = OnceLock::new();
    P.get_or_init(|| {
        let ns = r"(?:cg|cooperative_groups)::";
        let lhs = |ty: &str| format!(r"(?:\b{ns}{ty}|\bauto|\bconst\s+auto)\s*&?\s*\b(\w+)\s*=\s*");
        [
            (
                Group::Block,
                Regex::new(&format!(
                    r"{}{ns}this_thread_block\s*\(\s*\)",
                    lhs("thread_block")
                ))
                .expect("a valid pattern"),
            ),
            (
                Group::Warp,
                Regex::new(&format!(
                    r"{}{ns}tiled_partition\s*<\s*32\s*>\s*\(\s*[\w:]+\s*(?:\(\s*\))?\s*\)",
                    lhs(r"thread_block_tile\s*<\s*32\s*>")
                ))
                .expect("a valid pattern"),
            ),
        ]
    })
}

/// Every group the source declares in a form the translation maps, by name.
pub fn declared(src: &str) -> BTreeMap<String, Group> {
    let mut out = BTreeMap::new();
    if !src.contains("this_thread_block") && !src.contains("tiled_partition") {
        return out;
    }
    for (group, re) in patterns() {
        for c in re.captures_iter(src) {
            out.insert(c[1].to_string(), *group);
        }
    }
    out
}

/// `n` declares a mapped group (and nothing else): its name and kind.
pub fn declaration(
    n: Node,
    src: &str,
    groups: &BTreeMap<String, Group>,
) -> Option<(String, Group)> {
    // tree-sitter may read `cg::thread_block_tile<32> warp = ...` as an expression (`<` and `>` compared).
    if !matches!(n.kind(), "declaration" | "expression_statement") {
        return None;
    }
    let t = text(n, src).trim().trim_end_matches(';').trim();
    patterns().iter().find_map(|(group, re)| {
        let c = re.captures(t)?;
        let whole = c.get(0)?;
        (whole.start() == 0 && whole.end() == t.len() && groups.get(&c[1]) == Some(group))
            .then(|| (c[1].to_string(), *group))
    })
}

/// `group.method(...)` on a mapped group: the group and the method's name.
pub fn method(n: Node, src: &str, groups: &BTreeMap<String, Group>) -> Option<(Group, String)> {
    let f = n.child_by_field_name("function")?;
    if f.kind() != "field_expression" {
        return None;
    }
    let obj = f.child_by_field_name("argument")?;
    let field = f.child_by_field_name("field")?;
    let group = *groups.get(text(obj, src))?;
    (obj.kind() == "identifier").then(|| (group, text(field, src).to_string()))
}

/// The Metal built-in for a group method, and whether it keeps the call's arguments.
pub fn metal_method(group: Group, method: &str) -> Option<(&'static str, bool)> {
    Some(match (group, method) {
        (Group::Block, "sync") => ("threadgroup_barrier(mem_flags::mem_threadgroup)", false),
        (Group::Block, "thread_rank") => ("thread_index_in_threadgroup", false),
        (Group::Block, "size" | "num_threads") => (
            "(threads_per_threadgroup.x * threads_per_threadgroup.y * threads_per_threadgroup.z)",
            false,
        ),
        (Group::Warp, "sync") => ("simdgroup_barrier(mem_flags::mem_threadgroup)", false),
        (Group::Warp, "thread_rank") => ("thread_index_in_simdgroup", false),
        (Group::Warp, "meta_group_rank") => ("simdgroup_index_in_threadgroup", false),
        (Group::Warp, "meta_group_size") => ("simdgroups_per_threadgroup", false),
        (Group::Warp, "size" | "num_threads") => ("32", false),
        (Group::Warp, "shfl") => ("simd_shuffle", true),
        (Group::Warp, "shfl_down") => ("simd_shuffle_down", true),
        (Group::Warp, "shfl_up") => ("simd_shuffle_up", true),
        (Group::Warp, "shfl_xor") => ("simd_shuffle_xor", true),
        (Group::Warp, "any") => ("simd_any", true),
        (Group::Warp, "all") => ("simd_all", true),
        _ => return None,
    })
}

fn plain_name(n: Node, src: &str) -> Option<String> {
    let name = call_name(n, src)?;
    let name: String = name.chars().filter(|c| !c.is_whitespace()).collect();
    Some(name.split('<').next().unwrap_or("").to_string())
}

/// `cg::reduce(warp, v, op)` or `cg::sync(group)`: the Metal function, and the value it applies to.
pub fn collective<'t>(
    n: Node<'t>,
    src: &str,
    groups: &BTreeMap<String, Group>,
) -> Option<(&'static str, Option<Node<'t>>)> {
    let name = plain_name(n, src)?;
    let short = name
        .strip_prefix("cg::")
        .or_else(|| name.strip_prefix("cooperative_groups::"))?;
    let a = super::emit::args(n);
    let group = *groups.get(text(*a.first()?, src))?;
    match (short, group, a.len()) {
        ("sync", Group::Block, 1) => {
            Some(("threadgroup_barrier(mem_flags::mem_threadgroup)", None))
        }
        ("sync", Group::Warp, 1) => Some(("simdgroup_barrier(mem_flags::mem_threadgroup)", None)),
        ("reduce", Group::Warp, 3) => {
            let op: String = text(a[2], src).split_whitespace().collect();
            let op = op
                .strip_prefix("cg::")
                .or_else(|| op.strip_prefix("cooperative_groups::"))?;
            let f = match op.split('<').next()? {
                "plus" => "simd_sum",
                "greater" => "simd_max",
                "less" => "simd_min",
                "bit_and" => "simd_and",
                "bit_or" => "simd_or",
                "bit_xor" => "simd_xor",
                _ => return None,
            };
            Some((f, Some(a[1])))
        }
        _ => None,
    }
}

/// A `cg`/`cooperative_groups` name inside a construct the translation maps (a group declaration, a
/// collective, a reduction's operator).
pub fn mapped_use(n: Node, src: &str, groups: &BTreeMap<String, Group>) -> bool {
    let mut cur = n.parent();
    while let Some(p) = cur {
        if p.kind() == "call_expression" && collective(p, src, groups).is_some() {
            return true;
        }
        if declaration(p, src, groups).is_some() {
            return true;
        }
        if matches!(p.kind(), "expression_statement" | "compound_statement") {
            return false;
        }
        cur = p.parent();
    }
    false
}

/// CUDA's cache-hinted loads and stores (`__ldg`, `__ldcs`, `__stcs`, ...): on Metal plain accesses.
pub fn is_cache_hint(name: &str) -> bool {
    matches!(
        name,
        "__ldg"
            | "__ldcs"
            | "__ldcg"
            | "__ldca"
            | "__ldlu"
            | "__ldcv"
            | "__stcs"
            | "__stcg"
            | "__stwb"
            | "__stwt"
    )
}
