//! Inline PTX the Metal translation emulates: the tensor-core product `mma.sync.aligned.m16n8k16.row.col`
//! (f32 accumulators, f16 or bf16 operands) and the asynchronous copies `cp.async.{ca,cg}.shared.global` with
//! their commit and wait groups, the PTX most hand-written attention and GEMM kernels carry. Each becomes a
//! call of `ptx.metal` (prepended to the header when used): the same results, not the speed (the product by
//! simd shuffles, the copies synchronous). Other PTX stays an error (T101, T103).

use super::analyze::{children, descendants, text};
use regex::Regex;
use std::sync::OnceLock;
use tree_sitter::Node;

/// The Metal helpers the emulated PTX calls.
pub(crate) const METAL: &str = include_str!("ptx.metal");

/// One `asm` statement: its template (string pieces joined) and its operands, outputs then inputs, as PTX
/// numbers them (`%0`, `%1`, ...).
pub(crate) struct Asm<'t> {
    template: String,
    operands: Vec<Node<'t>>,
}

/// What an `asm` statement is, when the Metal translation emulates it.
pub(crate) enum Ptx {
    Mma {
        bf16: bool,
        d: [usize; 4],
        a: [usize; 4],
        b: [usize; 2],
        c: [usize; 4],
    },
    CpAsync {
        dst: usize,
        src: usize,
        bytes: Operand,
        src_bytes: Option<Operand>,
    },
    /// `cp.async.commit_group`, `cp.async.wait_group N`, `cp.async.wait_all`: nothing to do once copies are
    /// synchronous.
    CpAsyncFence,
}

/// A size in a PTX template: a literal, or an operand.
pub(crate) enum Operand {
    Literal(u32),
    Operand(usize),
}

pub(crate) fn parse<'t>(n: Node<'t>, src: &str) -> Option<Asm<'t>> {
    if n.kind() != "gnu_asm_expression" {
        return None;
    }
    let code = n.child_by_field_name("assembly_code")?;
    let template = descendants(code)
        .into_iter()
        .filter(|s| s.kind() == "string_content")
        .map(|s| text(s, src))
        .collect::<String>()
        .replace("\\n", " ")
        .replace("\\t", " ");
    let mut operands = Vec::new();
    for field in ["output_operands", "input_operands"] {
        if let Some(list) = n.child_by_field_name(field) {
            for op in children(list).into_iter().filter(|c| c.is_named()) {
                if let Some(v) = op.child_by_field_name("value") {
                    operands.push(v);
                }
            }
        }
    }
    Some(Asm { template, operands })
}

fn operand_list(s: &str) -> Option<Vec<usize>> {
    s.split(',')
        .map(|x| x.trim().strip_prefix('%')?.parse().ok())
        .collect()
}

fn size(s: &str) -> Option<Operand> {
    match s.strip_prefix('%') {
        Some(k) => k.parse().ok().map(Operand::Operand),
        None => s.parse().ok().map(Operand::Literal),
    }
}

/// The emulated PTX `asm` is, if it is one (every operand it names present).
pub(crate) fn recognise(asm: &Asm) -> Option<Ptx> {
    static MMA: OnceLock<Regex> = OnceLock::new();
    static CP: OnceLock<Regex> = OnceLock::new();
    static FENCE: OnceLock<Regex> = OnceLock::new();
    let mma = MMA.get_or_init(|| {
        Regex::new(r"^\s*mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(f16|bf16)\.(f16|bf16)\.f32\s*\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*;?\s*$")
            .expect("a valid pattern")
    });
    let cp = CP.get_or_init(|| {
        Regex::new(r"^\s*cp\.async\.(?:ca|cg)\.shared\.global(?:\.[A-Za-z0-9_:]+)*\s*\[\s*%(\d+)\s*\]\s*,\s*\[\s*%(\d+)\s*\]\s*,\s*(\d+|%\d+)\s*(?:,\s*(\d+|%\d+)\s*)?;?\s*$")
            .expect("a valid pattern")
    });
    let fence = FENCE.get_or_init(|| {
        Regex::new(r"^\s*cp\.async\.(?:commit_group|wait_all|wait_group\s+(?:\d+|%\d+))\s*;?\s*$")
            .expect("a valid pattern")
    });
    let n = asm.operands.len();
    let named = |ks: &[usize]| ks.iter().all(|k| *k < n);
    if let Some(m) = mma.captures(&asm.template) {
        if m[1] != m[2] {
            return None;
        }
        let d: [usize; 4] = operand_list(&m[3])?.try_into().ok()?;
        let a: [usize; 4] = operand_list(&m[4])?.try_into().ok()?;
        let b: [usize; 2] = operand_list(&m[5])?.try_into().ok()?;
        let c: [usize; 4] = operand_list(&m[6])?.try_into().ok()?;
        return (named(&d) && named(&a) && named(&b) && named(&c)).then_some(Ptx::Mma {
            bf16: &m[1] == "bf16",
            d,
            a,
            b,
            c,
        });
    }
    if let Some(m) = cp.captures(&asm.template) {
        let (dst, src) = (m[1].parse().ok()?, m[2].parse().ok()?);
        let bytes = size(&m[3])?;
        let src_bytes = match m.get(4) {
            Some(x) => Some(size(x.as_str())?),
            None => None,
        };
        let mut ops = vec![dst, src];
        for o in [Some(&bytes), src_bytes.as_ref()].into_iter().flatten() {
            if let Operand::Operand(k) = o {
                ops.push(*k);
            }
        }
        return named(&ops).then_some(Ptx::CpAsync {
            dst,
            src,
            bytes,
            src_bytes,
        });
    }
    fence.is_match(&asm.template).then_some(Ptx::CpAsyncFence)
}

/// The Metal for the emulated PTX, its operands rendered by `render`.
pub(crate) fn metal(ptx: &Ptx, asm: &Asm, render: &mut dyn FnMut(Node) -> String) -> String {
    let mut op = |k: usize| render(asm.operands[k]);
    match ptx {
        Ptx::Mma { bf16, d, a, b, c } => {
            let a: Vec<String> = a.iter().map(|k| op(*k)).collect();
            let b: Vec<String> = b.iter().map(|k| op(*k)).collect();
            let c: Vec<String> = c.iter().map(|k| op(*k)).collect();
            let d: Vec<String> = d.iter().map(|k| op(*k)).collect();
            format!(
                "{{ const float4 ksearch_mma_d = ksearch_mma_m16n8k16<{bf16}>(uint4({}), uint2({}), float4({}), thread_index_in_simdgroup); {} = ksearch_mma_d.x; {} = ksearch_mma_d.y; {} = ksearch_mma_d.z; {} = ksearch_mma_d.w; }}",
                a.join(", "),
                b.join(", "),
                c.join(", "),
                d[0],
                d[1],
                d[2],
                d[3]
            )
        }
        Ptx::CpAsync {
            dst,
            src,
            bytes,
            src_bytes,
        } => {
            let mut size = |o: &Operand| match o {
                Operand::Literal(v) => v.to_string(),
                Operand::Operand(k) => format!("int({})", op(*k)),
            };
            let n = size(bytes);
            let from = src_bytes.as_ref().map_or_else(|| n.clone(), &mut size);
            format!(
                "ksearch_cp_async((threadgroup uchar*)({}), (const device uchar*)({}), {n}, {from})",
                op(*dst),
                op(*src)
            )
        }
        Ptx::CpAsyncFence => {
            "(void)0 /* cp.async group: the copies above were synchronous */".into()
        }
    }
}
