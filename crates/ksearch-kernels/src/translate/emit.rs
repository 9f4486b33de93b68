//! The translator: an analysed CUDA file → a candidate (plan + body-only kernel sources) for
//! `mlx-metal` or `mlx-cuda`. It renders the syntax tree back to text, rewriting node by node; a
//! statement holding a construct it cannot translate becomes a `// TODO(Txxx)` comment that keeps the
//! original code, and a diagnostic says why.

use super::analyze::{
    self, Analysis, KernelAnalysis, ParamRole, builtin_index, call_name, children, descendants,
    function_parts, global_id, grid_stride, has_qualifier, is_atomic, lane_or_warp, line,
    lvalue_base, text, type_size,
};
use super::includes::Flat;
use super::launch::HostLaunch;
use super::storage::{self, Storage, Use};
use super::{Diagnostic, Severity, Stats, diag, rules};
use ksearch_model::candidate::{Candidate, KernelDecl, Launch, Plan, Tunable};
use ksearch_model::expr::ExprField;
use ksearch_model::target::Target;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

/// Parameter roles by kernel name, in parameter order (`translate_candidate`: from a plan's launches).
pub type Roles = BTreeMap<String, Vec<analyze::ParamRole>>;

#[derive(Debug, Clone, Serialize)]
pub struct Translation {
    pub target: Target,
    #[serde(flatten)]
    pub analysis: Analysis,
    pub stats: Stats,
    pub diagnostics: Vec<Diagnostic>,
    /// None when nothing meaningful could be written (no kernel, or no output).
    #[serde(skip)]
    pub candidate: Option<Candidate>,
}

impl Translation {
    pub fn errors(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }
}

/// Names MLX injects into Metal kernels by substring match, and Metal keywords: never local names.
const METAL_RESERVED: &[&str] = &[
    "thread_position_in_grid",
    "thread_position_in_threadgroup",
    "thread_index_in_threadgroup",
    "threadgroup_position_in_grid",
    "threads_per_threadgroup",
    "threadgroups_per_grid",
    "threads_per_grid",
    "grid_origin",
    "grid_size",
    "simdgroup_index_in_threadgroup",
    "thread_index_in_simdgroup",
    "threads_per_simdgroup",
    "simdgroups_per_threadgroup",
    "thread_execution_width",
    "device",
    "constant",
    "threadgroup",
    "thread",
    "kernel",
    "vertex",
    "fragment",
    "sampler",
    "texture",
];

/// C math functions with no Metal counterpart (their `f` forms), reported with T112.
const NO_METAL_MATH: &[&str] = &[
    "erff",
    "erfcf",
    "erfinvf",
    "erfcinvf",
    "lgammaf",
    "tgammaf",
    "normcdff",
    "normcdfinvf",
    "expm1f",
    "log1pf",
    "cbrtf",
    "hypotf",
    "sincosf",
    "sincospif",
    "j0f",
    "j1f",
    "y0f",
    "y1f",
    "erf",
    "erfc",
    "lgamma",
    "tgamma",
    "expm1",
    "log1p",
    "cbrt",
    "hypot",
];

struct Rw<'a> {
    src: &'a str,
    target: Target,
    kernel: Option<&'a KernelAnalysis>,
    /// shared array → element type
    shared: BTreeMap<String, String>,
    atomic_shared: BTreeSet<String>,
    atomic_outputs: BTreeSet<String>,
    int_scalars: BTreeSet<String>,
    /// Floating-point scalars, passed as one-element input tensors: read as `name[0]`.
    tensor_scalars: BTreeSet<String>,
    inout: BTreeSet<String>,
    pointers: BTreeSet<String>,
    /// Identifier start byte → replacement (renames of one occurrence).
    rename_at: BTreeMap<usize, String>,
    /// Dynamic shared arrays (Metal): name → the template int sizing it.
    dyn_shared: BTreeMap<String, String>,
    fn_name: String,
    /// Metal helpers: the MLX attributes each one uses, passed as extra trailing arguments.
    helper_attrs: BTreeMap<String, Vec<String>>,
    /// Node id → replacement text (a helper's parameter list).
    replace_node: BTreeMap<usize, String>,
    diags: Vec<Diagnostic>,
    blocked: BTreeMap<String, usize>,
    noted: BTreeSet<String>,
    /// Names declared by statements that became TODOs: later uses cannot be translated either.
    dead: BTreeMap<String, &'static str>,
    /// Cooperative groups the Metal translation maps (`groups.rs`): name → what the group is.
    groups: BTreeMap<String, super::groups::Group>,
    /// Metal: the threadgroup storage of the helpers this function calls (`storage.rs`), passed as a last
    /// argument.
    storage_uses: Vec<Use>,
    /// In a helper with storage: the parameter holding it (its members are what it passes on).
    storage_param: Option<String>,
    /// Metal: inline PTX was emulated (ptx.rs): the header needs ptx.metal.
    ptx_used: bool,
}

impl<'a> Rw<'a> {
    fn metal(&self) -> bool {
        self.target == Target::MlxMetal
    }

    fn note(&mut self, code: &str, line: usize, detail: String) {
        let key = format!("{code}:{}:{detail}", self.fn_name);
        if self.noted.insert(key) {
            let d = diag(self.target, code, line, Some(&self.fn_name.clone()), detail);
            self.diags.push(d);
        }
    }

    fn severity(&self, code: &str) -> Severity {
        let i = super::code_info(code);
        if self.metal() { i.metal } else { i.cuda }
    }

    /// A construct in `n` itself that cannot be translated on this target: (code, construct, detail). Long
    /// by design: one match over node kinds, each arm one construct and its diagnostic, read as a table.
    #[expect(
        clippy::too_many_lines,
        reason = "one match over node kinds, each arm a construct and its diagnostic"
    )]
    fn blocker(&self, n: Node) -> Option<(&'static str, &'static str, String)> {
        let src = self.src;
        let t = text(n, src);
        if self.metal()
            && super::ptx::parse(n, src)
                .as_ref()
                .and_then(super::ptx::recognise)
                .is_some()
        {
            return None; // PTX the translation emulates (ptx.rs)
        }
        let found = match n.kind() {
            "identifier" if self.dead.contains_key(t) && !is_decl_name(n) => {
                let code = self.dead[t];
                (
                    code,
                    "dependent",
                    format!("uses `{t}`, declared in a statement that was not translated"),
                )
            }
            "gnu_asm_expression" => {
                if t.contains("cp.async") {
                    ("T101", "async_copy", "inline PTX cp.async".to_string())
                } else if t.contains("mma") || t.contains("ldmatrix") {
                    (
                        "T103",
                        "mma_asm",
                        "inline PTX mma.sync/ldmatrix".to_string(),
                    )
                } else {
                    ("T103", "inline_asm", "inline PTX".to_string())
                }
            }
            "namespace_identifier" if t == "cuda" => {
                // libcu++ in device code: pipelines and barriers are async copies; the rest is unknown here.
                let ctx = n.parent().map(|p| text(p, src)).unwrap_or("");
                if ["pipeline", "barrier", "memcpy_async", "aligned_size"]
                    .iter()
                    .any(|w| ctx.contains(w))
                {
                    (
                        "T101",
                        "async_copy",
                        format!("`{}`", first_line(n.parent()?, src)),
                    )
                } else {
                    (
                        "T112",
                        "unknown_function",
                        format!("`{}`", first_line(n.parent()?, src)),
                    )
                }
            }
            "namespace_identifier" if t == "wmma" => {
                ("T102", "wmma", "wmma fragment or operation".to_string())
            }
            "namespace_identifier"
                if (t == "cooperative_groups" || t == "cg")
                    && !(self.metal() && super::groups::mapped_use(n, src, &self.groups)) =>
            {
                (
                    "T104",
                    "cooperative_groups",
                    format!("`{}`", first_line(n, src)),
                )
            }
            "type_identifier" if matches!(t, "cudaTextureObject_t" | "cudaSurfaceObject_t") => {
                ("T107", "texture", t.to_string())
            }
            "new_expression" => ("T113", "device_malloc", "new".to_string()),
            "call_expression" => {
                let name = call_name(n, src)?;
                let args = args(n);
                if self.metal()
                    && let Some((group, method)) = super::groups::method(n, src, &self.groups)
                    && super::groups::metal_method(group, &method).is_none()
                {
                    return Some((
                        "T104",
                        "cooperative_groups",
                        format!("`{name}()` on a {}", group.describe()),
                    ));
                }
                if children(n).iter().any(|c| c.kind() == "kernel_call_syntax") {
                    ("T105", "dynamic_parallelism", format!("launch of `{name}`"))
                } else if name.starts_with("__pipeline_") || name.contains("memcpy_async") {
                    ("T101", "async_copy", format!("`{name}`"))
                } else if name == "printf" {
                    ("T108", "printf", String::new())
                } else if name == self.fn_name {
                    ("T109", "recursion", format!("`{name}` calls itself"))
                } else if name.starts_with("tex") || name.starts_with("surf") {
                    ("T107", "texture", format!("`{name}`"))
                } else if matches!(name.as_str(), "clock" | "clock64") {
                    ("T114", "clock", format!("`{name}`"))
                } else if matches!(name.as_str(), "malloc" | "free") {
                    ("T113", "device_malloc", format!("`{name}`"))
                } else if name.starts_with("__syncthreads_") {
                    ("T115", "syncthreads_reduce", format!("`{name}`"))
                } else if name == "__activemask" {
                    ("T106", "activemask", "__activemask()".to_string())
                } else if name.starts_with("__shfl") && name.ends_with("_sync")
                    || matches!(name.as_str(), "__ballot_sync" | "__any_sync" | "__all_sync")
                {
                    let mask = args.first().map(|m| text(*m, src)).unwrap_or("");
                    if !self.full_mask(mask) {
                        ("T106", "warp_mask", format!("`{name}` with mask `{mask}`"))
                    } else if name.starts_with("__shfl")
                        && args.len() > 3
                        && !matches!(text(args[3], src), "32" | "warpSize" | "WARP_SIZE")
                    {
                        (
                            "T111",
                            "shuffle_width",
                            format!("`{name}` with width `{}`", text(args[3], src)),
                        )
                    } else {
                        return None;
                    }
                } else if name.starts_with("__shfl") && !name.ends_with("_sync")
                    || matches!(name.as_str(), "__ballot" | "__any" | "__all")
                {
                    (
                        "T106",
                        "warp_mask",
                        format!("`{name}` (pre-CUDA-9 form without a mask)"),
                    )
                } else if is_atomic(&name) {
                    let (ty, shared) = self.atomic_target_type(args.first().copied());
                    let float = matches!(ty.as_str(), "float" | "double")
                        || ksearch_model::dialect::dtype_of(&ty).is_some();
                    if !matches!(
                        name.as_str(),
                        "atomicAdd"
                            | "atomicSub"
                            | "atomicMax"
                            | "atomicMin"
                            | "atomicExch"
                            | "atomicAnd"
                            | "atomicOr"
                            | "atomicXor"
                    ) {
                        ("T110", "atomic_other", format!("`{name}`"))
                    } else if shared && float {
                        (
                            "T116",
                            "atomic_shared",
                            format!("`{name}` on threadgroup {ty}"),
                        )
                    } else if float
                        && (name != "atomicAdd" && name != "atomicSub" && name != "atomicExch"
                            || ty != "float")
                    {
                        ("T110", "atomic_other", format!("`{name}` on {ty}"))
                    } else {
                        return None;
                    }
                } else if NO_METAL_MATH.contains(&name.as_str())
                    || name.starts_with("__")
                        && !rules().metal_functions.contains_key(&name)
                        && !rules().metal_operators.contains_key(&name)
                        && !matches!(
                            name.as_str(),
                            "__syncthreads"
                                | "__syncwarp"
                                | "__threadfence"
                                | "__threadfence_block"
                                | "__cvta_generic_to_shared"
                        )
                        && !super::groups::is_cache_hint(&name)
                {
                    ("T112", "unknown_function", format!("`{name}`"))
                } else {
                    return None;
                }
            }
            _ => return None,
        };
        Some(found)
    }

    fn full_mask(&self, m: &str) -> bool {
        let m = m.trim();
        if matches!(
            m.to_ascii_lowercase().as_str(),
            "0xffffffff" | "0xffffffffu" | "-1" | "~0" | "~0u" | "0xffffffffull"
        ) {
            return true;
        }
        // A named constant such as FULL_MASK.
        analyze::parse_int(m).is_none()
            && m.chars().all(|c| c.is_alphanumeric() || c == '_')
            && m.to_ascii_lowercase().contains("full")
    }

    /// Element type of an atomic's target and whether it is shared memory.
    fn atomic_target_type(&self, arg: Option<Node>) -> (String, bool) {
        let Some(base) = arg.and_then(|a| lvalue_base(a, self.src, &BTreeMap::new())) else {
            return (String::new(), false);
        };
        if let Some(t) = self.shared.get(&base) {
            return (t.clone(), true);
        }
        let ty = self
            .kernel
            .and_then(|k| k.params.iter().find(|p| p.name == base))
            .map(|p| p.elem_type.clone())
            .unwrap_or_default();
        (ty, false)
    }

    /// Renders a statement; a statement holding an untranslatable construct becomes a TODO comment.
    fn statement(&mut self, n: Node) -> String {
        if self.metal()
            && let Some((name, group)) = super::groups::declaration(n, self.src, &self.groups)
        {
            self.note("T032", line(n), format!("`{name}`: {}", group.describe()));
            return format!(
                "// `{name}`: {} (a cooperative group in CUDA)",
                group.describe()
            );
        }
        let mut blockers = Vec::new();
        for d in descendants(n) {
            if let Some(b) = self.blocker(d)
                && self.severity(b.0) == Severity::Error
            {
                blockers.push((b, line(d)));
            }
        }
        if blockers.is_empty() {
            // Warnings for constructs kept as they are.
            for d in descendants(n) {
                if let Some((code, _, detail)) = self.blocker(d) {
                    self.note(code, line(d), detail);
                }
            }
            return self.render_inner(n);
        }
        let codes: BTreeSet<&str> = blockers.iter().map(|((c, _, _), _)| *c).collect();
        for ((code, construct, detail), l) in &blockers {
            *self.blocked.entry(construct.to_string()).or_default() += 1;
            self.note(code, *l, detail.clone());
        }
        if n.kind() == "declaration" {
            let code = blockers[0].0.0;
            for d in children(n) {
                if let Some(id) = declared_name(d, self.src) {
                    self.dead.insert(id, code);
                }
            }
        }
        let indent = " ".repeat(n.start_position().column);
        let tags: Vec<String> = codes.iter().map(|c| format!("TODO({c})")).collect();
        let mut out = format!(
            "// {}: not translated, see docs/translate.md; the CUDA was:",
            tags.join(" ")
        );
        for l in text(n, self.src).lines() {
            out.push('\n');
            out.push_str(&indent);
            out.push_str("// ");
            out.push_str(l.trim_start());
        }
        // The body of an if/for/while: keep it a statement, so the next line does not become the body.
        if n.parent()
            .is_some_and(|p| p.kind() != "compound_statement" && p.kind() != "translation_unit")
        {
            out = format!("{{ {out}\n{indent}}}");
        }
        out
    }

    fn render(&mut self, n: Node) -> String {
        if matches!(
            n.kind(),
            "expression_statement" | "declaration" | "return_statement"
        ) {
            return self.statement(n);
        }
        self.render_inner(n)
    }

    /// Source text of `n` with each child rendered (gaps between children kept verbatim).
    fn splice(&mut self, n: Node) -> String {
        let ch = children(n);
        if ch.is_empty() {
            return text(n, self.src).to_string();
        }
        let mut out = String::new();
        let mut pos = n.start_byte();
        for c in ch {
            out.push_str(&self.src[pos..c.start_byte()]);
            out.push_str(&self.render(c));
            pos = c.end_byte();
        }
        out.push_str(&self.src[pos..n.end_byte()]);
        out
    }

    fn render_inner(&mut self, n: Node) -> String {
        if let Some(s) = self.replace_node.get(&n.id()) {
            return s.clone();
        }
        if let Some(s) = self.rewrite(n) {
            return s;
        }
        self.splice(n)
    }

    /// The rewrite of one node, or None to render its children. Long by design: one match over node
    /// kinds, each arm a CUDA construct and its Metal spelling.
    #[expect(
        clippy::too_many_lines,
        reason = "one match over node kinds, each arm a CUDA construct and its Metal spelling"
    )]
    fn rewrite(&mut self, n: Node) -> Option<String> {
        let src = self.src;
        let t = text(n, src);
        if let Some(r) = self.rename_at.get(&n.start_byte())
            && n.kind() == "identifier"
        {
            return Some(r.clone());
        }
        if self.metal()
            && let Some(asm) = super::ptx::parse(n, src)
            && let Some(ptx) = super::ptx::recognise(&asm)
        {
            self.ptx_used = true;
            return Some(super::ptx::metal(&ptx, &asm, &mut |x| self.render(x)));
        }
        match n.kind() {
            "identifier" => {
                if (self.tensor_scalars.contains(t)
                    || (self.int_scalars.contains(t) && self.target == Target::MlxCuda))
                    && !is_decl_name(n)
                {
                    return Some(format!("{t}[0]"));
                }
                if self.metal() {
                    if t == "warpSize" {
                        return Some("32".into());
                    }
                    if t == "CUDART_INF_F" {
                        return Some("INFINITY".into());
                    }
                    if METAL_RESERVED.contains(&t)
                        && !self.pointers.contains(t)
                        && !self.int_scalars.contains(t)
                        && !self.tensor_scalars.contains(t)
                    {
                        self.note("T025", line(n), format!("`{t}` renamed to `{t}_`"));
                        return Some(format!("{t}_"));
                    }
                }
                None
            }
            "type_identifier" | "primitive_type" | "sized_type_specifier" if self.metal() => {
                if let Some(m) = ksearch_model::dialect::metal_of(t).filter(|m| *m != t) {
                    return Some(m.to_string());
                }
                let r = match t {
                    "double" => {
                        self.note("T020", line(n), String::new());
                        "float"
                    }
                    "long long" | "long long int" => "long",
                    "unsigned long long" | "unsigned long long int" => "ulong",
                    _ => return None,
                };
                Some(r.to_string())
            }
            "type_qualifier" if self.metal() => match t {
                "volatile" => {
                    self.note("T027", line(n), String::new());
                    None
                }
                "__restrict__" | "__restrict" => Some(String::new()),
                "__shared__" => Some("threadgroup".into()),
                _ => None,
            },
            "field_expression" if self.metal() => {
                let (b, ax) = builtin_index(n, src)?;
                let axis = ["x", "y", "z"][ax];
                let name = match b {
                    "threadIdx" => "thread_position_in_threadgroup",
                    "blockIdx" => "threadgroup_position_in_grid",
                    "blockDim" => "threads_per_threadgroup",
                    _ => "threadgroups_per_grid",
                };
                Some(format!("{name}.{axis}"))
            }
            "subscript_expression" if self.metal() => {
                // A plain read of an atomic array.
                let base = n.child_by_field_name("argument")?;
                let name = text(base, src);
                let atomic = (self.atomic_outputs.contains(name)
                    || self.atomic_shared.contains(name))
                    && base.kind() == "identifier";
                if atomic && !self.in_atomic_call(n) && !is_lhs(n) {
                    return Some(format!(
                        "atomic_load_explicit(&{}, memory_order_relaxed)",
                        self.splice(n)
                    ));
                }
                None
            }
            "binary_expression" if self.metal() => {
                if let Some(ax) = global_id(n, src) {
                    return Some(format!("thread_position_in_grid.{}", ["x", "y", "z"][ax]));
                }
                if let Some(ax) = grid_stride(n, src) {
                    return Some(format!("threads_per_grid.{}", ["x", "y", "z"][ax]));
                }
                match lane_or_warp(n, src) {
                    Some(true) => Some("thread_index_in_simdgroup".into()),
                    Some(false) => Some("simdgroup_index_in_threadgroup".into()),
                    None => None,
                }
            }
            "assignment_expression" => self.assignment(n),
            "cast_expression" if self.metal() => {
                let ty = n.child_by_field_name("type")?;
                let tt = text(ty, src);
                if !tt.contains('*')
                    || ["device", "threadgroup", "constant", "thread"]
                        .iter()
                        .any(|s| tt.contains(s))
                {
                    return None;
                }
                let value = n.child_by_field_name("value")?;
                let base = lvalue_base(value, src, &BTreeMap::new()).unwrap_or_default();
                let space = if self.shared.contains_key(&base) {
                    "threadgroup"
                } else {
                    "device"
                };
                let mt = self.metal_type(tt);
                let mt = match mt.strip_prefix("const ") {
                    Some(rest) => format!("const {space} {rest}"),
                    None => format!("{space} {mt}"),
                };
                Some(format!("({mt}){}", self.render(value)))
            }
            "call_expression" if self.metal() => self.metal_call(n),
            "call_expression" => self.const_cast_of_input(n),
            "declaration" if self.metal() => self.metal_declaration(n),
            "preproc_call" => None,
            _ => None,
        }
    }

    /// mlx-cuda: MLX passes inputs as `const T*`, so `reinterpret_cast<float4*>(x)` of an input no longer
    /// compiles (a reinterpret_cast cannot drop `const`): the cast keeps the `const`.
    fn const_cast_of_input(&mut self, n: Node) -> Option<String> {
        let src = self.src;
        let f = n.child_by_field_name("function")?;
        if f.kind() != "template_function"
            || text(f.child_by_field_name("name")?, src) != "reinterpret_cast"
        {
            return None;
        }
        let targs = f.child_by_field_name("arguments")?;
        let ty = text(targs, src)
            .trim_start_matches('<')
            .trim_end_matches('>')
            .trim();
        if !ty.ends_with('*') || ty.starts_with("const ") {
            return None;
        }
        let inner = *args(n).first()?;
        let base = lvalue_base(inner, src, &BTreeMap::new())?;
        let input = self
            .kernel?
            .params
            .iter()
            .any(|p| p.name == base && p.pointer && p.role == ParamRole::Input);
        if !input {
            return None;
        }
        Some(format!(
            "reinterpret_cast<const {ty}>({})",
            self.render(inner)
        ))
    }

    fn in_atomic_call(&self, n: Node) -> bool {
        let mut cur = n;
        while let Some(p) = cur.parent() {
            match p.kind() {
                "pointer_expression" | "parenthesized_expression" => cur = p,
                "argument_list" => {
                    return p.named_child(0).map(|c| c.id()) == Some(cur.id())
                        && p.parent()
                            .and_then(|c| call_name(c, self.src))
                            .is_some_and(|c| is_atomic(&c));
                }
                _ => return false,
            }
        }
        false
    }

    fn assignment(&mut self, n: Node) -> Option<String> {
        let src = self.src;
        let left = n.child_by_field_name("left")?;
        let right = n.child_by_field_name("right")?;
        let op = text(n.child_by_field_name("operator")?, src).to_string();
        let base = lvalue_base(left, src, &BTreeMap::new())?;
        let base_node = descendants(left)
            .into_iter()
            .find(|x| x.kind() == "identifier" && text(*x, src) == base)?;
        if self.inout.contains(&base) {
            // In-place parameter: writes go to `<name>_out`, reads stay on the input.
            let read = self.render(left);
            self.rename_at
                .insert(base_node.start_byte(), format!("{base}_out"));
            let write = self.render(left);
            let rhs = self.render(right);
            return Some(if op == "=" {
                format!("{write} = {rhs}")
            } else {
                let bop = op.trim_end_matches('=');
                format!("{write} = {read} {bop} ({rhs})")
            });
        }
        if self.metal()
            && (self.atomic_outputs.contains(&base) || self.atomic_shared.contains(&base))
            && left.kind() == "subscript_expression"
        {
            let target = self.splice(left);
            let rhs = self.render(right);
            let f = match op.as_str() {
                "=" => {
                    return Some(format!(
                        "atomic_store_explicit(&{target}, {rhs}, memory_order_relaxed)"
                    ));
                }
                "+=" => "atomic_fetch_add_explicit",
                "-=" => "atomic_fetch_sub_explicit",
                "|=" => "atomic_fetch_or_explicit",
                "&=" => "atomic_fetch_and_explicit",
                "^=" => "atomic_fetch_xor_explicit",
                _ => {
                    // No atomic form (`*=`, `/=`, shifts): load, combine, store; each element has one writer here.
                    let bop = op.trim_end_matches('=');
                    return Some(format!(
                        "atomic_store_explicit(&{target}, atomic_load_explicit(&{target}, memory_order_relaxed) {bop} ({rhs}), memory_order_relaxed)"
                    ));
                }
            };
            return Some(format!("{f}(&{target}, {rhs}, memory_order_relaxed)"));
        }
        None
    }

    /// A CUDA call as Metal spells it: cooperative-group methods, warp functions, atomics, math. Long by
    /// design: one match over the call's name, a table of small cases read top to bottom.
    #[expect(
        clippy::too_many_lines,
        reason = "one match over the call's name, a table of small cases"
    )]
    fn metal_call(&mut self, n: Node) -> Option<String> {
        let src = self.src;
        let name = call_name(n, src)?;
        let a = args(n);
        let r = |s: &mut Self, i: usize| -> String {
            a.get(i).map(|x| s.render(*x)).unwrap_or_default()
        };
        if let Some((group, method)) = super::groups::method(n, src, &self.groups) {
            let (f, takes_args) = super::groups::metal_method(group, &method)?;
            self.note(
                "T032",
                line(n),
                format!("`{method}()` on a {}", group.describe()),
            );
            if !takes_args {
                return Some(f.to_string());
            }
            let rendered: Vec<String> = a.iter().map(|x| self.render(*x)).collect();
            return Some(format!("{f}({})", rendered.join(", ")));
        }
        if let Some((f, value)) = super::groups::collective(n, src, &self.groups) {
            self.note("T032", line(n), format!("`{name}`"));
            return Some(match value {
                Some(v) => format!("{f}({})", self.render(v)),
                None => f.to_string(),
            });
        }
        if super::groups::is_cache_hint(&name) {
            // Cache hints: Metal has none; the plain load or store.
            let p = *a.first()?;
            let place = if p.kind() == "pointer_expression" && text(p, src).starts_with('&') {
                self.render(p.child_by_field_name("argument")?)
            } else {
                format!("*({})", self.render(p))
            };
            return Some(match a.get(1) {
                Some(v) if name.starts_with("__st") => format!("{place} = {}", self.render(*v)),
                _ => place,
            });
        }
        let out = match name.as_str() {
            // A shared address as cp.async takes it: on Metal, a threadgroup pointer (ptx.rs).
            "__cvta_generic_to_shared" => format!("((threadgroup uchar*)({}))", r(self, 0)),
            "__syncthreads" => "threadgroup_barrier(mem_flags::mem_threadgroup)".to_string(),
            "__syncwarp" => "simdgroup_barrier(mem_flags::mem_threadgroup)".to_string(),
            "__threadfence" | "__threadfence_block" => {
                self.note("T024", line(n), format!("`{name}`"));
                "threadgroup_barrier(mem_flags::mem_device)".to_string()
            }
            "__shfl_down_sync" | "__shfl_up_sync" | "__shfl_xor_sync" | "__shfl_sync" => {
                self.note("T021", line(n), String::new());
                let f = match name.as_str() {
                    "__shfl_down_sync" => "simd_shuffle_down",
                    "__shfl_up_sync" => "simd_shuffle_up",
                    "__shfl_xor_sync" => "simd_shuffle_xor",
                    _ => "simd_shuffle",
                };
                format!("{f}({}, {})", r(self, 1), r(self, 2))
            }
            "__any_sync" => {
                self.note("T021", line(n), String::new());
                format!("simd_any({})", r(self, 1))
            }
            "__all_sync" => {
                self.note("T021", line(n), String::new());
                format!("simd_all({})", r(self, 1))
            }
            "__ballot_sync" => {
                self.note("T021", line(n), String::new());
                format!("uint(ulong(simd_ballot({})))", r(self, 1))
            }
            "reinterpret_cast" | "static_cast" => {
                let f = n.child_by_field_name("function")?;
                let targs = f.child_by_field_name("arguments")?;
                let ty = text(targs, src)
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .trim();
                let inner = *a.first()?;
                let rendered = self.render(inner);
                if !ty.contains('*') || ty.contains("device") || ty.contains("threadgroup") {
                    return None;
                }
                let base = lvalue_base(inner, src, &BTreeMap::new()).unwrap_or_default();
                let space = if self.shared.contains_key(&base) {
                    "threadgroup"
                } else {
                    "device"
                };
                let ty = self.metal_type(ty);
                let ty = match ty.strip_prefix("const ") {
                    Some(rest) => format!("const {space} {rest}"),
                    None => format!("{space} {ty}"),
                };
                format!("(({ty})({rendered}))")
            }
            c if is_atomic(c) => {
                let f = match c {
                    "atomicAdd" => "atomic_fetch_add_explicit",
                    "atomicSub" => "atomic_fetch_sub_explicit",
                    "atomicMax" => "atomic_fetch_max_explicit",
                    "atomicMin" => "atomic_fetch_min_explicit",
                    "atomicExch" => "atomic_exchange_explicit",
                    "atomicAnd" => "atomic_fetch_and_explicit",
                    "atomicOr" => "atomic_fetch_or_explicit",
                    "atomicXor" => "atomic_fetch_xor_explicit",
                    _ => return None,
                };
                let target = *a.first()?;
                let t = match target.kind() {
                    "pointer_expression" if text(target, src).starts_with('&') => {
                        format!("&{}", self.splice(target.child_by_field_name("argument")?))
                    }
                    _ => self.render(target),
                };
                format!("{f}({t}, {}, memory_order_relaxed)", r(self, 1))
            }
            _ if analyze::callee(n, src).is_some_and(|(c, _)| {
                self.helper_attrs.contains_key(&c)
                    || self.storage_uses.iter().any(|u| u.callee == c)
            }) =>
            {
                // One of the file's helpers (`ns::f<...>` too): the attributes and storage it takes.
                let (c, _) = analyze::callee(n, src)?;
                let f = n.child_by_field_name("function")?;
                let mut rendered: Vec<String> = a.iter().map(|x| self.render(*x)).collect();
                rendered.extend(self.helper_attrs.get(&c).into_iter().flatten().cloned());
                let targs = storage::call_targs(n, src);
                rendered.extend(storage::argument(
                    &self.storage_uses,
                    &c,
                    &targs,
                    self.storage_param.as_deref(),
                ));
                format!("{}({})", self.render(f), rendered.join(", "))
            }
            c if rules().metal_operators.contains_key(c) && a.len() == 2 => {
                let op = &rules().metal_operators[c];
                format!("({} {op} {})", r(self, 0), r(self, 1))
            }
            c => {
                let m = rules().metal_functions.get(c)?;
                let rendered: Vec<String> = a.iter().map(|x| self.render(*x)).collect();
                format!("{m}({})", rendered.join(", "))
            }
        };
        Some(out)
    }

    fn metal_type(&self, t: &str) -> String {
        metal_text(t)
    }

    fn metal_declaration(&mut self, n: Node) -> Option<String> {
        let src = self.src;
        // `unsigned d = __cvta_generic_to_shared(p);` (a shared address for cp.async): a threadgroup pointer.
        if let Some(call) = descendants(n).into_iter().find(|c| {
            c.kind() == "call_expression"
                && call_name(*c, src).as_deref() == Some("__cvta_generic_to_shared")
        }) && let Some(name) = children(n).into_iter().find_map(|d| declared_name(d, src))
        {
            let arg = self.render(*args(call).first()?);
            return Some(format!(
                "threadgroup uchar* {name} = (threadgroup uchar*)({arg});"
            ));
        }
        let is_shared = children(n)
            .iter()
            .any(|c| c.kind() == "type_qualifier" && text(*c, src) == "__shared__");
        let ty = n.child_by_field_name("type")?;
        if is_shared {
            let dynamic = children(n)
                .iter()
                .any(|c| c.kind() == "storage_class_specifier" && text(*c, src) == "extern");
            let name = descendants(n)
                .into_iter()
                .find(|x| x.kind() == "identifier")
                .map(|x| text(x, src).to_string())?;
            let mut elem = self.metal_type(text(ty, src));
            if self.atomic_shared.contains(&name) {
                elem = match elem.as_str() {
                    "int" | "int32_t" => "atomic_int".into(),
                    "unsigned" | "unsigned int" | "uint" | "uint32_t" => "atomic_uint".into(),
                    _ => elem,
                };
            }
            if dynamic {
                let size = self.dyn_shared.get(&name)?.clone();
                return Some(format!("threadgroup {elem} {name}[{size}];"));
            }
            let decls: Vec<String> = children(n)
                .into_iter()
                .filter(|c| c.kind().ends_with("declarator") || c.kind() == "identifier")
                .map(|c| self.render(c))
                .collect();
            let (aligned, qualifiers): (Vec<String>, Vec<String>) = children(n)
                .into_iter()
                .filter(|c| c.kind() == "type_qualifier" && !matches!(text(*c, src), "__shared__"))
                .map(|c| text(c, src).to_string())
                .partition(|q| q.starts_with("alignas"));
            let q = if qualifiers.is_empty() {
                String::new()
            } else {
                format!("{} ", qualifiers.join(" "))
            };
            // `alignas(16)` (CUDA's `__align__`) leads the declaration, where every C++ compiler takes it.
            let a: String = aligned.iter().map(|x| format!("{x} ")).collect();
            return Some(format!("{a}threadgroup {q}{elem} {};", decls.join(", ")));
        }
        // Local pointers need an address space.
        let pointer_decl = children(n).into_iter().find(|c| {
            c.kind() == "pointer_declarator"
                || c.kind() == "init_declarator"
                    && c.child_by_field_name("declarator")
                        .is_some_and(|d| d.kind() == "pointer_declarator")
        })?;
        let ty_text = text(ty, src);
        if matches!(ty_text, "device" | "threadgroup" | "constant" | "thread") {
            return None;
        }
        let init = if pointer_decl.kind() == "init_declarator" {
            pointer_decl.child_by_field_name("value")
        } else {
            None
        };
        let base = init.and_then(|v| lvalue_base(v, src, &BTreeMap::new()));
        let space = match &base {
            Some(b) if self.shared.contains_key(b) => "threadgroup",
            Some(b) if self.pointers.contains(b) => "device",
            _ => "device",
        };
        let mut out = String::new();
        let mut pos = n.start_byte();
        for c in children(n) {
            out.push_str(&src[pos..c.start_byte()]);
            if c.id() == ty.id() {
                out.push_str(space);
                out.push(' ');
            }
            out.push_str(&self.render(c));
            pos = c.end_byte();
        }
        out.push_str(&src[pos..n.end_byte()]);
        Some(out)
    }
}

fn first_line(n: Node, src: &str) -> String {
    text(n, src).lines().next().unwrap_or("").trim().to_string()
}

pub(super) fn args(n: Node) -> Vec<Node> {
    n.child_by_field_name("arguments")
        .map(|a| {
            children(a)
                .into_iter()
                .filter(|c| c.is_named() && c.kind() != "comment")
                .collect()
        })
        .unwrap_or_default()
}

fn is_decl_name(n: Node) -> bool {
    n.parent().is_some_and(|p| {
        matches!(
            p.kind(),
            "init_declarator"
                | "pointer_declarator"
                | "array_declarator"
                | "parameter_declaration"
                | "declaration"
        ) && p.child_by_field_name("declarator").map(|d| d.id()) == Some(n.id())
    })
}

fn is_lhs(n: Node) -> bool {
    n.parent().is_some_and(|p| {
        p.kind() == "assignment_expression"
            && p.child_by_field_name("left").map(|l| l.id()) == Some(n.id())
            || p.kind() == "pointer_expression"
    })
}

/// Body text without the outer braces, dedented by one level.
fn strip_braces(s: &str) -> String {
    let s = s.trim();
    let s = s.strip_prefix('{').unwrap_or(s);
    let s = s.strip_suffix('}').unwrap_or(s);
    let lines: Vec<&str> = s.lines().collect();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for l in lines {
        if l.trim().is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            continue;
        }
        out.push_str(l.get(indent..).unwrap_or(l.trim_start()));
        out.push('\n');
    }
    out.trim_end().to_string() + "\n"
}

/// A file-scope type definition for the header: its `;` restored, and on Metal without CUDA's function
/// qualifiers (member functions are plain functions there).
fn file_scope_type(t: &str, metal: bool) -> String {
    let mut s = t.trim_end().to_string();
    if !s.ends_with(';') {
        s.push(';');
    }
    if metal {
        for q in [
            "__device__ ",
            "__host__ ",
            "__forceinline__ ",
            "__inline__ ",
        ] {
            s = s.replace(q, "");
        }
    }
    s + "\n"
}

/// The function a file-scope item defines (itself, or the one a template declares).
pub(super) fn item_function(c: Node) -> Option<Node> {
    match c.kind() {
        "function_definition" => Some(c),
        "template_declaration" => children(c)
            .into_iter()
            .find(|x| x.kind() == "function_definition"),
        _ => None,
    }
}

/// A file-scope declaration of constants (`const`, `constexpr`, `static const`, ...), which the header carries.
fn is_const_declaration(t: &str) -> bool {
    let t = t.trim_start_matches("static ");
    t.starts_with("const") || t.starts_with("constexpr")
}

/// A `__device__`/`__constant__` variable that is a constant with its value in the declaration (`const` or
/// `constexpr`, not a pointer, an initializer): the declaration without its CUDA qualifiers, else None.
fn device_constant(t: &str) -> Option<String> {
    let (decl, _) = t.split_once('=')?;
    let quals = [
        "__device__",
        "__constant__",
        "static",
        "const",
        "constexpr",
        "inline",
    ];
    let constant = decl
        .split_whitespace()
        .any(|w| w == "const" || w == "constexpr");
    if !constant || decl.contains('*') || decl.contains('&') {
        return None;
    }
    let rest: Vec<&str> = t
        .split_whitespace()
        .skip_while(|w| quals.contains(w))
        .collect();
    Some(rest.join(" "))
}

/// Namespaces of CUDA's and C++'s libraries: a file that adds to them (a specialization in `std`) does not
/// make their qualifiers go.
const LIBRARY_NAMESPACES: &[&str] = &[
    "std",
    "cuda",
    "cub",
    "thrust",
    "cooperative_groups",
    "cg",
    "nvcuda",
    "wmma",
    "cute",
    "cutlass",
];

/// `code` with the qualifiers of the flattened `namespaces` removed (`ns::f` → `f`) and their using
/// declarations dropped, token by token (strings and comments untouched); a name in `ambiguous` keeps its
/// qualifier.
fn unqualify(code: &str, namespaces: &BTreeSet<String>, ambiguous: &BTreeSet<String>) -> String {
    if namespaces.is_empty() {
        return code.to_string();
    }
    let re =
        regex::Regex::new(r"(?m)^[ \t]*using[ \t]+(namespace[ \t]+)?(\w+)(::\w+)*[ \t]*;[ \t]*\n?")
            .expect("a valid pattern");
    let code = re.replace_all(code, |c: &regex::Captures| {
        let last = c.get(3).map(|m| m.as_str().trim_start_matches("::"));
        if namespaces.contains(&c[2]) && !last.is_some_and(|l| ambiguous.contains(l)) {
            String::new()
        } else {
            c[0].to_string()
        }
    });
    let toks = ksearch_model::cpplex::lex(&code);
    let punct = |i: usize, p: &str| {
        toks.get(i)
            .is_some_and(|t| t.kind == ksearch_model::cpplex::Kind::Punct && t.text == p)
    };
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        if t.kind == ksearch_model::cpplex::Kind::Ident && namespaces.contains(&t.text) {
            // `::` as one token or two; then the name it qualifies.
            let skip = if punct(i + 1, "::") {
                2
            } else if punct(i + 1, ":") && punct(i + 2, ":") {
                3
            } else {
                0
            };
            let named = toks[i + skip..]
                .iter()
                .find(|t| t.kind != ksearch_model::cpplex::Kind::Space)
                .filter(|t| t.kind == ksearch_model::cpplex::Kind::Ident);
            if skip > 0 && !named.is_some_and(|n| ambiguous.contains(&n.text)) {
                i += skip;
                continue;
            }
        }
        out.push_str(&t.text);
        i += 1;
    }
    out
}

/// A `__global__` function (or a template of one).
fn is_kernel(c: Node, src: &str) -> bool {
    item_function(c).is_some_and(|f| has_qualifier(f, src, "__global__"))
}

/// The names a file-scope item declares: a function's, a macro's, a type's (an enum's values too), a
/// variable's.
fn declared_names(c: Node, src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut add = |n: Option<Node>| {
        if let Some(n) = n {
            out.insert(text(n, src).to_string());
        }
    };
    match c.kind() {
        "function_definition" => {
            if let Some((name, _)) = function_parts(c, src) {
                // `ns::f` defines `f`
                out.insert(name.rsplit("::").next().unwrap_or(&name).to_string());
            }
        }
        "template_declaration" => {
            for x in children(c).into_iter().skip(1) {
                out.extend(declared_names(x, src));
            }
        }
        "preproc_def"
        | "preproc_function_def"
        | "struct_specifier"
        | "class_specifier"
        | "union_specifier"
        | "alias_declaration" => {
            // A specialization (`struct tile<16, 16, half2>`) declares its template's name: it is carried
            // with the template, which code that uses the specialization names by that name alone.
            if let Some(n) = c.child_by_field_name("name") {
                let t = text(n, src);
                out.insert(t.split('<').next().unwrap_or(t).trim().to_string());
            }
        }
        "enum_specifier" => {
            add(c.child_by_field_name("name"));
            for e in descendants(c)
                .into_iter()
                .filter(|e| e.kind() == "enumerator")
            {
                add(e.child_by_field_name("name"));
            }
        }
        "type_definition" | "declaration" => {
            if let Some(t) = c.child_by_field_name("type") {
                out.extend(declared_names(t, src));
            }
            let mut cur = c.walk();
            for d in c.children_by_field_name("declarator", &mut cur) {
                // The declared name is the first identifier of the declarator (`*p`, `a[4] = {...}`).
                if let Some(n) = std::iter::once(d).chain(descendants(d)).find(|n| {
                    matches!(
                        n.kind(),
                        "identifier" | "type_identifier" | "field_identifier"
                    )
                }) {
                    out.insert(text(n, src).to_string());
                }
            }
        }
        _ => {}
    }
    out
}

/// Whether a file-scope item is of a kind the translation carries: kernels, `__device__` helpers, macros,
/// types, constants and device variables; not host functions, their declarations, or host variables.
fn carried(c: Node, src: &str) -> bool {
    if let Some(f) = item_function(c) {
        return has_qualifier(f, src, "__device__") || has_qualifier(f, src, "__global__");
    }
    match c.kind() {
        "declaration" if is_prototype(c) => false,
        "declaration" => {
            let t = text(c, src);
            t.contains("__constant__") || t.contains("__device__") || is_const_declaration(t)
        }
        "preproc_include" | "using_declaration" => false,
        _ => true,
    }
}

/// A declaration of functions only (`__device__ float f(float);`).
fn is_prototype(c: Node) -> bool {
    let mut cur = c.walk();
    let mut declarators = c.children_by_field_name("declarator", &mut cur).peekable();
    declarators.peek().is_some() && declarators.all(|d| d.kind() == "function_declarator")
}

/// The words of a piece of code that could name something (identifiers, macro names).
pub(super) fn words(t: &str) -> impl Iterator<Item = &str> {
    t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// The header items (by node id) that the translated file's own items and kernels use, directly or
/// through other header items. Words stand for uses: a name in a comment or a string keeps an item too,
/// which costs a few lines, never a missing definition.
fn used_from_headers<'s>(
    top: &[Node],
    src: &'s str,
    from_header: &dyn Fn(Node) -> bool,
    macros: &'s [(String, String)],
) -> (BTreeSet<usize>, BTreeSet<&'s str>) {
    let mut wanted: BTreeSet<&str> = BTreeSet::new();
    let mut pending: Vec<(usize, BTreeSet<String>, Node)> = Vec::new();
    // Host code is never carried, so what it names (the library's host types) is not needed.
    for c in top.iter().copied().filter(|c| carried(*c, src)) {
        if from_header(c) && !is_kernel(c, src) {
            pending.push((c.id(), declared_names(c, src), c));
        } else {
            wanted.extend(words(text(c, src)));
        }
    }
    let mut used = BTreeSet::new();
    let mut used_macros: BTreeSet<&str> = BTreeSet::new();
    loop {
        let before = used.len() + used_macros.len();
        let mut rest = Vec::new();
        for (id, names, c) in pending {
            if names.iter().any(|n| wanted.contains(n.as_str())) {
                used.insert(id);
                wanted.extend(words(text(c, src)));
            } else {
                rest.push((id, names, c));
            }
        }
        pending = rest;
        for (name, def) in macros {
            if !used_macros.contains(name.as_str()) && wanted.contains(name.as_str()) {
                used_macros.insert(name);
                wanted.extend(words(def));
            }
        }
        if used.len() + used_macros.len() == before {
            return (used, used_macros);
        }
    }
}

/// The `#define`s of headers read in, by their text (name, the directive joined over its lines), for the
/// names defined once in the live text: the parser loses some of them inside code it cannot read (a
/// library's table macros), and a macro is what a launch's sizes and a kernel's body most often take from
/// a header. Macros built on CUDA's indices are left to the syntax tree (they go into kernel bodies on Metal).
fn header_macros(src: &str, flat: &Flat) -> Vec<(String, String)> {
    let directives = crate::check::lex::directives(src);
    let mut found: Vec<(String, String)> = Vec::new();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for (line, d) in directives {
        let Some((name, _)) = super::includes::define_of(&d) else {
            continue;
        };
        let name = name.to_string();
        *count.entry(name.clone()).or_default() += 1;
        let builtins = [
            "threadIdx",
            "blockIdx",
            "blockDim",
            "gridDim",
            "__syncthreads",
        ];
        if flat.from_header(line - 1) && !builtins.iter().any(|b| d.contains(b)) {
            found.push((name, d.trim().to_string()));
        }
    }
    found.retain(|(n, _)| count.get(n) == Some(&1));
    found
}

fn ceil_to(extent: &str, tg: &str) -> String {
    let e = if extent.chars().all(|c| c.is_alphanumeric() || c == '_') {
        extent.to_string()
    } else {
        format!("({extent})")
    };
    format!("(({e} + {tg} - 1) // {tg}) * {tg}")
}

pub fn translate(src: &str, stem: &str, target: Target) -> Translation {
    let src = &*super::macros::expand(src);
    translate_tree(&analyze::parse(src), src, stem, target, None, None)
}

/// `translate` of a source already parsed; `flat` says which of its lines came from headers read in.
pub(crate) fn translate_tree(
    tree: &tree_sitter::Tree,
    src: &str,
    stem: &str,
    target: Target,
    flat: Option<&Flat>,
    roles: Option<&Roles>,
) -> Translation {
    let mut analysis = analyze::analyze_tree(tree, src);
    // Roles a plan gives (a cuda candidate's launches) stand over what the analyzer saw: an output written
    // only inside a helper is still the launch's output.
    for k in analysis.kernels.iter_mut() {
        if let Some(given) = roles.and_then(|r| r.get(&k.name))
            && given.len() == k.params.len()
        {
            for (p, role) in k.params.iter_mut().zip(given) {
                p.role = *role;
            }
        }
        k.brief = analyze::brief(k, target);
    }
    let root = tree.root_node();
    let mut e = Emitter::new(src, target);
    for l in &analysis.parse_error_lines {
        e.diags
            .push(diag(target, "T001", *l, None, format!("line {l}")));
    }
    let mut stats = Stats {
        lines: analysis.lines,
        kernels: analysis.kernels.len(),
        ..Default::default()
    };
    if analysis.kernels.is_empty() {
        e.diags.push(diag(target, "T002", 0, None, ""));
        return Translation {
            target,
            analysis,
            stats,
            diagnostics: e.diags,
            candidate: None,
        };
    }
    let scope = FileScope::read(root, src);
    let spaces = call_site_spaces(&analysis, &scope.top, root, src);
    if e.metal {
        e.helper_attrs = helper_attributes(&scope.top, src, target, &e.groups);
        e.storage = Storage::read(&scope.top, src);
    }
    e.header_items(&scope.top, flat, &spaces);
    if analysis.kernels.len() > 1 {
        e.diags.push(diag(
            target,
            "T026",
            0,
            None,
            format!("{} kernels", analysis.kernels.len()),
        ));
    }
    let mut parts = PlanParts::default();
    for ki in launch_order(&analysis) {
        let k = &analysis.kernels[ki];
        let host = analysis.launches.iter().find(|l| l.kernel == k.name);
        stats.kernel_lines += k.end_line - k.line + 1;
        e.kernel(k, host, root, &scope, &mut parts);
    }
    e.record(&mut stats);
    let candidate = e.finish(stem, &scope, parts);
    let mut diags = e.diags;
    diags.sort_by_key(|d| (d.line, d.code.clone()));
    Translation {
        target,
        analysis,
        stats,
        diagnostics: diags,
        candidate,
    }
}

/// Address space of each helper pointer parameter, by (helper, index) (`call_site_spaces`).
type Spaces = BTreeMap<(String, usize), Option<&'static str>>;

/// The file-scope items of a source, with those of `extern "C" { }` blocks and namespaces flattened (one
/// level deep at a time, so nested namespaces work too), in file order.
struct FileScope<'t> {
    top: Vec<Node<'t>>,
    /// Names of the namespaces flattened: `ns::f` and `using ns::f;` in what is written name the flattened `f`.
    namespaces: BTreeSet<String>,
    /// Names declared in two scopes (`q::deq(int)` and a global `deq(float)`): they keep their qualifier.
    /// Without it a call could bind to the other one and compute something else; with it, the compiler says so.
    ambiguous: BTreeSet<String>,
}

impl<'t> FileScope<'t> {
    fn read(root: Node<'t>, src: &str) -> Self {
        let mut top = Vec::new();
        let mut pending: Vec<(Node, String)> = children(root)
            .into_iter()
            .map(|c| (c, String::new()))
            .collect();
        pending.reverse();
        let mut namespaces = BTreeSet::new();
        // The scopes (namespaces, "" for the file's) each flattened name was declared in.
        let mut scopes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        while let Some((c, scope)) = pending.pop() {
            if c.kind() == "namespace_definition" {
                let name = c
                    .child_by_field_name("name")
                    .map(|n| text(n, src).to_string())
                    .unwrap_or_default();
                // A library's namespace (`namespace std { template<> struct ... }`) keeps its qualifiers.
                if !name.is_empty() && !LIBRARY_NAMESPACES.contains(&name.as_str()) {
                    namespaces.insert(name.clone());
                }
                if let Some(b) = c.child_by_field_name("body") {
                    let inner_scope = format!("{scope}::{name}");
                    let mut inner: Vec<(Node, String)> = children(b)
                        .into_iter()
                        .map(|c| (c, inner_scope.clone()))
                        .collect();
                    inner.reverse();
                    pending.extend(inner);
                }
            } else if c.kind() == "linkage_specification" {
                if let Some(b) = c.child_by_field_name("body") {
                    let items = if b.kind() == "declaration_list" {
                        children(b)
                    } else {
                        vec![b]
                    };
                    for item in items {
                        for n in declared_names(item, src) {
                            scopes.entry(n).or_default().insert(scope.clone());
                        }
                        top.push(item);
                    }
                }
            } else {
                for n in declared_names(c, src) {
                    scopes.entry(n).or_default().insert(scope.clone());
                }
                top.push(c);
            }
        }
        let ambiguous = scopes
            .into_iter()
            .filter(|(_, s)| s.len() > 1)
            .map(|(n, _)| n)
            .collect();
        FileScope {
            top,
            namespaces,
            ambiguous,
        }
    }
}

/// Kernels in host launch order when there is one, then the others in file order.
fn launch_order(analysis: &Analysis) -> Vec<usize> {
    let mut order: Vec<usize> = Vec::new();
    for l in &analysis.launches {
        if let Some(i) = analysis.kernels.iter().position(|k| k.name == l.kernel)
            && !order.contains(&i)
        {
            order.push(i);
        }
    }
    for i in 0..analysis.kernels.len() {
        if !order.contains(&i) {
            order.push(i);
        }
    }
    order
}

/// What the kernels of a file add to the plan.
#[derive(Default)]
struct PlanParts {
    files: BTreeMap<String, String>,
    kernels: Vec<KernelDecl>,
    launches: Vec<Launch>,
    tunables: BTreeMap<String, Tunable>,
    /// How each kernel's launch shape was found, for the plan's description.
    assumptions: Vec<String>,
}

/// What translating one file accumulates as it goes: the diagnostics (in the order they are met; sorted by
/// line at the end), the header, and the constructs met and those left untranslated (the stats).
struct Emitter<'s> {
    src: &'s str,
    target: Target,
    metal: bool,
    diags: Vec<Diagnostic>,
    blocked: BTreeMap<String, usize>,
    seen: BTreeMap<String, usize>,
    /// Constants, macros, types and `__device__` helpers, in file order.
    header: String,
    device_lines: usize,
    /// Metal: macros built on CUDA indices, translated, for the top of the kernels that use them (MLX adds a
    /// thread attribute to the signature only if the body names it).
    body_macros: Vec<(String, String)>,
    /// Metal: the MLX attributes each helper uses (`helper_attributes`).
    helper_attrs: BTreeMap<String, Vec<String>>,
    /// Metal: the cooperative groups the file declares (`groups::declared`), read once for every rewriter.
    groups: Groups,
    /// Metal: the `__shared__` variables of helpers, hoisted into structs the kernels declare (`storage.rs`).
    storage: Storage,
    /// Metal: inline PTX was emulated: the header starts with ptx.metal (`ptx.rs`).
    ptx_used: bool,
}

/// Cooperative-group names and their kinds.
type Groups = BTreeMap<String, super::groups::Group>;

/// The cooperative groups a rewriter of `src` maps (Metal only).
fn declared_groups(src: &str, target: Target) -> Groups {
    if target == Target::MlxMetal {
        super::groups::declared(src)
    } else {
        Groups::new()
    }
}

impl<'s> Emitter<'s> {
    fn new(src: &'s str, target: Target) -> Self {
        Emitter {
            src,
            target,
            metal: target == Target::MlxMetal,
            diags: Vec::new(),
            blocked: BTreeMap::new(),
            seen: BTreeMap::new(),
            header: String::new(),
            device_lines: 0,
            body_macros: Vec::new(),
            helper_attrs: BTreeMap::new(),
            groups: declared_groups(src, target),
            storage: Storage::default(),
            ptx_used: false,
        }
    }

    /// Metal: what keeps function `name`'s shared memory (or that of the helpers it calls) from becoming
    /// threadgroup storage (T037).
    fn storage_problems(&mut self, name: &str, kernel: Option<&str>) {
        if !self.metal {
            return;
        }
        // Taken, not read: overloads of one name are translated one by one, their problems said once.
        for (l, detail) in self.storage.problems.remove(name).unwrap_or_default() {
            self.diags
                .push(diag(self.target, "T037", l, kernel, detail));
        }
    }

    /// A kernel's diagnostic.
    fn kd(&mut self, k: &KernelAnalysis, code: &str, line: usize, detail: String) {
        self.diags
            .push(diag(self.target, code, line, Some(&k.name), detail));
    }

    /// What a rewriter left: its diagnostics, and the constructs it could not translate.
    fn absorb(&mut self, rw: Rw) {
        self.ptx_used |= rw.ptx_used;
        for (k, v) in rw.blocked {
            *self.blocked.entry(k).or_default() += v;
        }
        self.diags.extend(rw.diags);
    }

    fn push_line(&mut self, t: &str) {
        self.header.push_str(t.trim_end());
        self.header.push('\n');
    }

    /// The header, from the file-scope items. What came from a header read in is carried only when the
    /// kernels use it (headers hold host code too); its macros are carried by their text, ahead of the rest.
    fn header_items(&mut self, top: &[Node], flat: Option<&Flat>, spaces: &Spaces) {
        let src = self.src;
        let from_header = |n: Node| flat.is_some_and(|f| f.from_header(n.start_position().row));
        let macros_of_headers = match flat {
            Some(f) if !f.headers.is_empty() => header_macros(src, f),
            _ => Vec::new(),
        };
        let (used, used_macros) = if top.iter().any(|c| from_header(*c)) {
            used_from_headers(top, src, &from_header, &macros_of_headers)
        } else {
            (BTreeSet::new(), BTreeSet::new())
        };
        let carried_by_text: BTreeSet<&str> =
            macros_of_headers.iter().map(|(n, _)| n.as_str()).collect();
        for (name, def) in &macros_of_headers {
            if used_macros.contains(name.as_str()) {
                self.header.push_str(def);
                self.header.push('\n');
            }
        }
        for c in top.iter().copied() {
            if from_header(c) {
                // A header's CUDA includes (`<mma.h>`) and `using` lines are kept as the file's own would be.
                let kept_anyway = is_kernel(c, src)
                    || c.kind() == "using_declaration"
                    || c.kind() == "preproc_include"
                        && c.child_by_field_name("path")
                            .is_some_and(|p| p.kind() == "system_lib_string");
                if !used.contains(&c.id()) && !kept_anyway {
                    if c.kind() == "preproc_include"
                        && c.child_by_field_name("path")
                            .is_some_and(|p| p.kind() == "string_literal")
                    {
                        // A header's own include found nowhere: it matters only if the kernels need what it
                        // holds (then the translation does not compile), so a warning, not T033's error.
                        let mut d = diag(
                            self.target,
                            "T033",
                            line(c),
                            None,
                            format!("`{}` (in a header)", text(c, src).trim()),
                        );
                        d.severity = Severity::Warning;
                        self.diags.push(d);
                    }
                    continue;
                }
                if matches!(c.kind(), "preproc_def" | "preproc_function_def")
                    && c.child_by_field_name("name")
                        .is_some_and(|n| carried_by_text.contains(text(n, src)))
                {
                    continue;
                }
            }
            if let Some(f) = item_function(c) {
                if has_qualifier(f, src, "__device__") && !has_qualifier(f, src, "__global__") {
                    self.device_helper(c, f, spaces);
                }
                continue;
            }
            self.file_scope_item(c);
        }
    }

    /// A `__device__` helper into the header; on Metal a plain inline function whose pointer parameters
    /// take their call sites' address space, with the MLX attributes it uses appended.
    fn device_helper(&mut self, c: Node, f: Node, spaces: &Spaces) {
        let src = self.src;
        let name = function_parts(f, src).map(|p| p.0).unwrap_or_default();
        self.device_lines += f.end_position().row - f.start_position().row + 1;
        let mut rw = rewriter(src, self.target, None, &name, &self.groups);
        rw.helper_attrs = self.helper_attrs.clone();
        let storage = self
            .metal
            .then(|| self.storage.helpers.get(&name).cloned())
            .flatten();
        self.storage_problems(&name, None);
        if let Some(h) = &storage {
            // Its shared variables are members of the storage it is passed: each declaration becomes
            // references to them under the old names.
            for (id, vars) in &h.decls {
                if let Some(b) = self.storage.bindings(&name, *id, &metal_text) {
                    rw.replace_node.insert(*id, b);
                }
                for v in vars {
                    rw.shared.insert(v.name.clone(), v.elem.clone());
                }
            }
            rw.storage_uses = h.uses.clone();
            rw.storage_param = Some(self.storage.param.clone());
        }
        if self.metal
            && let Some((_, plist)) = function_parts(f, src)
        {
            let (mut list, unknown) =
                helper_params(&mut rw, plist, &name, spaces, &self.helper_attrs);
            if let Some(p) = self.storage.param(&name).filter(|_| storage.is_some()) {
                list.pop();
                list = if list == "(" {
                    format!("({p})")
                } else {
                    format!("{list}, {p})")
                };
            }
            rw.replace_node.insert(plist.id(), list);
            if unknown {
                rw.note("T023", line(f), format!("in `{name}`"));
            }
        }
        let mut s = rw.splice(c);
        if self.metal {
            s = metal_helper_head(&s);
        }
        self.absorb(rw);
        if storage.is_some()
            && let Some(def) = self.storage.struct_def(&name, &metal_text)
        {
            self.header.push_str(&def);
        }
        self.header.push_str(&s);
        self.header.push_str("\n\n");
    }

    /// A file-scope item other than a function: includes, macros, constants and types.
    fn file_scope_item(&mut self, c: Node) {
        let (src, metal) = (self.src, self.metal);
        let t = text(c, src);
        match c.kind() {
            "preproc_include" => {
                let keep = !metal
                    && [
                        "mma.h",
                        "cuda_pipeline",
                        "cuda/pipeline",
                        "cuda_fp16",
                        "cuda_bf16",
                        "cooperative_groups",
                        "cuda/barrier",
                    ]
                    .iter()
                    .any(|h| t.contains(h));
                if keep {
                    self.push_line(t);
                } else if let Some(path) = c.child_by_field_name("path")
                    && path.kind() == "string_literal"
                {
                    // A header of the project's own: its helpers and types are not in the translation, and
                    // the kernels that use them would not compile.
                    self.diags.push(diag(
                        self.target,
                        "T033",
                        line(c),
                        None,
                        format!("`{}`", t.trim()),
                    ));
                }
            }
            "preproc_def" | "preproc_function_def" => {
                let uses_builtins = [
                    "threadIdx",
                    "blockIdx",
                    "blockDim",
                    "gridDim",
                    "__syncthreads",
                ]
                .iter()
                .any(|b| t.contains(b));
                if metal && uses_builtins {
                    let name = c
                        .child_by_field_name("name")
                        .map(|n| text(n, src).to_string())
                        .unwrap_or_default();
                    self.body_macros.push((name, metal_macro(t.trim_end())));
                } else {
                    self.push_line(t);
                }
            }
            "declaration" => self.file_scope_declaration(c, t),
            "struct_specifier" | "class_specifier" | "union_specifier" | "enum_specifier"
            | "type_definition" | "alias_declaration" => {
                // tree-sitter leaves a type definition's closing `;` outside the specifier.
                self.header.push_str(&file_scope_type(t, metal));
            }
            "template_declaration"
                if children(c).iter().any(|x| {
                    matches!(
                        x.kind(),
                        "struct_specifier" | "class_specifier" | "alias_declaration"
                    ) || x.kind() == "declaration"
                        && children(*x)
                            .iter()
                            .any(|y| matches!(y.kind(), "struct_specifier" | "class_specifier"))
                }) =>
            {
                self.header.push_str(&file_scope_type(t, metal));
            }
            "using_declaration" if !metal => self.push_line(t),
            _ => {}
        }
    }

    /// A file-scope declaration: a constant is carried; a `__device__`/`__constant__` variable host code
    /// would set is not (T117).
    fn file_scope_declaration(&mut self, c: Node, t: &str) {
        // A prototype (`__device__ float f(float);`) declares no variable: its definition is carried.
        let is_device_var =
            (t.contains("__constant__") || t.contains("__device__")) && !is_prototype(c);
        if is_device_var && let Some(value) = device_constant(t) {
            // A constant the compiler knows (`__device__ const float a = -0.75f;`): no host code sets it,
            // so it is carried as a constant of the target.
            if self.metal {
                self.header
                    .push_str(&format!("constant constexpr {value}\n"));
            } else {
                self.push_line(t);
            }
        } else if is_device_var {
            let first = first_line(c, self.src);
            self.diags.push(diag(
                self.target,
                "T117",
                line(c),
                None,
                format!("`{first}`"),
            ));
            *self.blocked.entry("global_variable".into()).or_default() += 1;
            *self.seen.entry("global_variable".into()).or_default() += 1;
            self.header.push_str(
                "// TODO(T117): not translated, see docs/translate.md; the CUDA was:\n// ",
            );
            self.header.push_str(&first);
            self.header.push('\n');
        } else if is_const_declaration(t) {
            if self.metal {
                let body = t
                    .trim_start_matches("static ")
                    .trim_start_matches("constexpr ")
                    .trim_start_matches("const ");
                self.header
                    .push_str(&format!("constant constexpr {body}\n"));
            } else {
                self.push_line(t);
            }
        }
    }

    /// One kernel: its body (a file of the candidate) and its launch. A kernel with no output is left out
    /// of the plan (T003) before anything of it is rendered; the file's other kernels are written.
    fn kernel(
        &mut self,
        k: &KernelAnalysis,
        host: Option<&HostLaunch>,
        root: Node,
        scope: &FileScope,
        parts: &mut PlanParts,
    ) {
        for (c, v) in &k.constructs {
            *self.seen.entry(c.clone()).or_default() += v;
        }
        let outputs: Vec<String> = k
            .params
            .iter()
            .filter_map(|p| match p.role {
                ParamRole::Output => Some(p.name.clone()),
                ParamRole::InOut => Some(format!("{}_out", p.name)),
                _ => None,
            })
            .collect();
        // Roles first: a const parameter written (through a cast) may be why there is no output.
        for p in k.params.iter().filter(|p| p.const_written) {
            self.kd(k, "T028", k.line, format!("`{}`", p.name));
        }
        if outputs.is_empty() {
            self.kd(k, "T003", k.line, format!("kernel `{}`", k.name));
            return;
        }
        let Some(def) = root.descendant_for_byte_range(k.def_range.0, k.def_range.1) else {
            return;
        };
        if def.kind() != "function_definition" {
            return;
        }
        let Some(body) = def.child_by_field_name("body") else {
            return;
        };
        let mut rw = rewriter(self.src, self.target, Some(k), &k.name, &self.groups);
        rw.helper_attrs = self.helper_attrs.clone();
        if self.metal {
            rw.storage_uses = self.storage.kernel_uses(&k.name);
            self.storage_problems(&k.name, Some(&k.name));
        }
        let (shared_memory, smem_templates) =
            self.dynamic_shared(k, host, &mut rw, &mut parts.tunables);
        let rendered = rw.splice(body);
        let mut prologue = self.parameter_notes(k);
        prologue.push_str(&self.storage.kernel_decls(&rw.storage_uses, &metal_text));
        self.absorb(rw);
        for (name, def) in &self.body_macros {
            if contains_word(&rendered, name) {
                prologue.push_str(def);
                prologue.push('\n');
            }
        }
        let rendered = format!("{prologue}{}", strip_braces(&rendered));
        let live: String = rendered
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let writes =
            |p: &&super::analyze::Param| matches!(p.role, ParamRole::Output | ParamRole::InOut);
        let writes_left = k.params.iter().filter(writes).any(|p| {
            contains_word(&live, &p.name) || contains_word(&live, &format!("{}_out", p.name))
        });
        if !writes_left && k.params.iter().any(|p| writes(&p)) {
            self.kd(k, "T004", k.line, format!("kernel `{}`", k.name));
        }
        let source = format!("{}.{}", k.name, if self.metal { "metal" } else { "cu" });
        parts.files.insert(
            source.clone(),
            unqualify(&rendered, &scope.namespaces, &scope.ambiguous),
        );
        let template: Vec<String> = k
            .template_ints
            .iter()
            .chain(&smem_templates)
            .cloned()
            .collect();
        self.launch(k, host, outputs, source, template, shared_memory, parts);
    }

    /// Dynamic shared memory: on Metal a threadgroup array of a compile-time size (a template int of the
    /// launch's bytes, T019), on CUDA the launch's byte count (49152 assumed where no launch gives it, T011).
    /// Returns the CUDA launch's bytes and the Metal size templates.
    fn dynamic_shared(
        &mut self,
        k: &KernelAnalysis,
        host: Option<&HostLaunch>,
        rw: &mut Rw,
        tunables: &mut BTreeMap<String, Tunable>,
    ) -> (Option<String>, Vec<String>) {
        let mut shared_memory = None;
        let mut smem_templates: Vec<String> = Vec::new();
        for s in k.shared.iter().filter(|s| s.dynamic) {
            let elem = type_size(&s.elem_type).unwrap_or(4) as i64;
            let bytes = host
                .and_then(|h| h.shared_memory.clone())
                .or_else(|| k.shared_bytes.map(|_| "0".to_string()));
            if self.metal {
                let tname = format!("SMEM_{}", s.name.to_uppercase());
                let elems = bytes
                    .as_deref()
                    .and_then(|b| ksearch_model::expr::Expr::parse(b).ok())
                    .and_then(|e| e.eval_int(&ksearch_model::expr::Env::new()).ok())
                    .filter(|b| *b > 0)
                    .map(|b| b / elem)
                    .unwrap_or(1024);
                tunables.insert(
                    tname.clone(),
                    Tunable {
                        values: vec![elems],
                        default: elems,
                    },
                );
                rw.dyn_shared.insert(s.name.clone(), tname.clone());
                smem_templates.push(tname.clone());
                let detail = format!(
                    "`{}` became threadgroup {}[{tname}] with {tname} = {elems}",
                    s.name, s.elem_type
                );
                self.kd(k, "T019", s.line, detail);
            } else {
                match bytes.filter(|b| b != "0") {
                    Some(b) => shared_memory = Some(b),
                    None => {
                        shared_memory = Some("49152".to_string());
                        let detail = format!(
                            "dynamic shared memory of `{}` not found in a launch; assumed 49152 bytes",
                            s.name
                        );
                        self.kd(k, "T011", s.line, detail);
                    }
                }
            }
        }
        (shared_memory, smem_templates)
    }

    /// What a kernel's parameters and template say about its translation; returns the body's prologue (a
    /// TODO for each scalar that cannot be passed).
    fn parameter_notes(&mut self, k: &KernelAnalysis) -> String {
        // A floating-point scalar becomes a one-element input tensor (its value exactly, whatever the task
        // gives); any other scalar that is not an integer cannot be passed at all.
        let mut prologue = String::new();
        for p in k.params.iter().filter(|p| !p.pointer) {
            let int = super::dtype_of(&p.elem_type).is_some_and(|d| !d.is_float());
            match p.role {
                ParamRole::Input => self.kd(
                    k,
                    "T030",
                    k.line,
                    format!(
                        "`{} {}` → input `{1}` of one element, read as `{1}[0]`",
                        p.elem_type, p.name
                    ),
                ),
                _ if int => {}
                _ => {
                    self.kd(k, "T018", k.line, format!("`{} {}`", p.elem_type, p.name));
                    prologue.push_str(&format!(
                        "// TODO(T018): `{} {}` arrives as an int32 scalar in MLX plans; see docs/translate.md\n",
                        p.elem_type, p.name
                    ));
                    *self.blocked.entry("scalar_param".into()).or_default() += 1;
                }
            }
        }
        if let Some(b) = k.launch_bounds {
            self.kd(k, "T022", k.line, format!("__launch_bounds__({b})"));
        }
        for p in k
            .params
            .iter()
            .filter(|p| p.pointer && !p.is_const && p.role == ParamRole::Input)
        {
            self.kd(k, "T014", k.line, format!("`{}`", p.name));
        }
        for p in k.params.iter().filter(|p| p.read_after_write) {
            self.kd(k, "T029", k.line, format!("`{}`", p.name));
        }
        for p in k.params.iter().filter(|p| p.role == ParamRole::InOut) {
            let detail = format!(
                "`{}` is read from input `{0}` and written to output `{0}_out`",
                p.name
            );
            self.kd(k, "T015", k.line, detail);
        }
        for (code, names, what) in [
            ("T016", &k.template_ints, "tunable"),
            ("T017", &k.template_types, "type argument"),
        ] {
            for n in names {
                self.kd(k, code, k.line, format!("`{n}` → {what}"));
            }
        }
        for n in &k.template_other {
            self.kd(k, "T034", k.line, format!("`{n}`"));
        }
        if self.metal {
            for p in &k.params {
                if METAL_RESERVED.contains(&p.name.as_str()) {
                    self.kd(k, "T025", k.line, format!("parameter `{}`", p.name));
                }
            }
        }
        prologue
    }

    /// A kernel's declaration and launch in the plan: tensors named after its parameters, template ints as
    /// tunables of the values the file launches with, the grid and threadgroup `launch_shape` finds.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &mut self,
        k: &KernelAnalysis,
        host: Option<&HostLaunch>,
        outputs: Vec<String>,
        source: String,
        template: Vec<String>,
        shared_memory: Option<String>,
        parts: &mut PlanParts,
    ) {
        let named = |keep: &dyn Fn(&super::analyze::Param) -> bool| -> Vec<String> {
            k.params
                .iter()
                .filter(|p| keep(p))
                .map(|p| p.name.clone())
                .collect()
        };
        let inputs = named(&|p| matches!(p.role, ParamRole::Input | ParamRole::InOut));
        let scalars = named(&|p| p.role == ParamRole::Scalar);
        let atomic = k
            .params
            .iter()
            .any(|p| p.atomic && p.role != ParamRole::Input);
        let zeroed = atomic || k.params.iter().any(|p| p.accumulates);
        if zeroed {
            let names: Vec<&str> = k
                .params
                .iter()
                .filter(|p| p.atomic || p.accumulates)
                .map(|p| p.name.as_str())
                .collect();
            self.kd(
                k,
                "T013",
                k.line,
                format!("init_value = 0 for {}", names.join(", ")),
            );
        }
        for t in &k.template_ints {
            let i = k.template_order.iter().position(|x| x == t).unwrap_or(0);
            let v = host.and_then(|h| h.template_values.get(i).copied().flatten());
            let v = v.unwrap_or_else(|| {
                let detail = format!("template int `{t}` has no value in the file; assumed 128");
                self.kd(k, "T011", k.line, detail);
                128
            });
            parts.tunables.insert(
                t.clone(),
                Tunable {
                    values: vec![v],
                    default: v,
                },
            );
        }
        let mut type_args = BTreeMap::new();
        for t in &k.template_types {
            if let Some(p) = k.params.iter().find(|p| {
                p.role != ParamRole::Scalar && p.elem_type.trim_start_matches("const ").trim() == t
            }) {
                type_args.insert(t.clone(), p.name.clone());
            }
        }
        let (grid, threadgroup, how) = launch_shape(k, host, &mut self.diags, self.target);
        parts.assumptions.push(format!("{}: {how}", k.name));
        parts.kernels.push(KernelDecl {
            name: k.name.clone(),
            source,
            header: None,
        });
        let ef = |s: &str| ksearch_model::expr::Expr::parse(s).map(ExprField);
        let exprs = |v: &[String]| -> Option<Vec<ExprField>> {
            v.iter().map(|g| ef(g)).collect::<Result<_, _>>().ok()
        };
        parts.launches.push(Launch {
            kernel: k.name.clone(),
            inputs,
            outputs,
            scalars: scalars.iter().filter_map(|s| ef(s).ok()).collect(),
            grid: exprs(&grid),
            threadgroup: exprs(&threadgroup),
            template,
            type_args,
            shared_memory: shared_memory.and_then(|s| ef(&s).ok()),
            cluster: None,
            init_value: zeroed.then_some(0.0),
            atomic_outputs: atomic && self.metal,
            when: None,
        });
    }

    /// The stats of the constructs met: rendered `<<<>>>` host code and statements carry none; the
    /// constructs do, each translated unless blocked.
    fn record(&self, stats: &mut Stats) {
        for (c, n) in &self.seen {
            let not = self.blocked.get(c).copied().unwrap_or(0).min(*n);
            for i in 0..*n {
                stats.record(c, i >= not);
            }
        }
        for (c, n) in &self.blocked {
            let s = self.seen.get(c).copied().unwrap_or(0);
            for _ in s..*n {
                stats.record(c, false);
            }
        }
        stats.kernel_lines += self.device_lines;
    }

    /// The candidate: the header (with the definitions NVRTC lacks that the file uses) beside the kernels'
    /// files, and the plan; none when no kernel got a launch.
    fn finish(&mut self, stem: &str, scope: &FileScope, mut parts: PlanParts) -> Option<Candidate> {
        let (src, metal) = (self.src, self.metal);
        if metal && self.ptx_used {
            self.header
                .insert_str(0, &format!("{}\n", super::ptx::METAL));
        }
        let header = &mut self.header;
        if !metal && src.contains("FLT_MAX") && !header.contains("define FLT_MAX") {
            // NVRTC has no <float.h>.
            header.insert_str(
                0,
                "#ifndef FLT_MAX\n#define FLT_MAX 3.402823466e+38f\n#endif\n",
            );
        }
        if !metal && src.contains("INFINITY") && !header.contains("define INFINITY") {
            // Nor <math.h>'s INFINITY.
            header.insert_str(
                0,
                "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n",
            );
        }
        if !metal && contains_word(src, "uint") && !header.contains("typedef unsigned int uint") {
            // Metal's `uint` is no CUDA type: NVRTC needs it defined.
            header.insert_str(0, "typedef unsigned int uint;\n");
        }
        let header_name = format!("header.{}", if metal { "metal" } else { "cuh" });
        if !header.trim().is_empty() {
            let header = unqualify(header, &scope.namespaces, &scope.ambiguous);
            parts
                .files
                .insert(header_name.clone(), header.trim_end().to_string() + "\n");
            for k in parts.kernels.iter_mut() {
                k.header = Some(header_name.clone());
            }
        }
        let description = format!(
            "Translated from {stem}.cu by `ksearch translate --to {}`. Tensors and scalars are named after \
             the kernel parameters (make them the task's inputs, outputs and dims). Launch: {}.",
            self.target,
            parts.assumptions.join("; ")
        );
        (!parts.launches.is_empty()).then(|| Candidate {
            plan: Plan {
                name: stem.to_string(),
                target: self.target,
                description,
                constraints: Vec::new(),
                kernel: parts.kernels,
                buffer: Vec::new(),
                launch: parts.launches,
                tunable: parts.tunables,
            },
            files: parts.files,
        })
    }
}

/// A CUDA helper's head as Metal's: the function qualifiers before the parameter list go, and the
/// helper becomes a plain inline function.
/// CUDA text (a type, array extents, a template head) as Metal.
fn metal_text(t: &str) -> String {
    ksearch_model::dialect::metal_text(t).replace("__restrict__", "")
}

fn metal_helper_head(s: &str) -> String {
    let cut = s.find('(').unwrap_or(0);
    let head: String = s[..cut]
        .split_inclusive(char::is_whitespace)
        .filter(|w| {
            !matches!(
                w.trim(),
                "__device__"
                    | "__host__"
                    | "__forceinline__"
                    | "__noinline__"
                    | "__inline__"
                    | "__inline"
                    | "inline"
                    | "static"
            )
        })
        .collect();
    let s = format!("{head}{}", &s[cut..]);
    if !s.trim_start().starts_with("inline") && !s.trim_start().starts_with("template") {
        format!("inline {s}")
    } else {
        s
    }
}

fn rewriter<'a>(
    src: &'a str,
    target: Target,
    k: Option<&'a KernelAnalysis>,
    name: &str,
    groups: &Groups,
) -> Rw<'a> {
    let mut rw = Rw {
        src,
        target,
        kernel: k,
        shared: BTreeMap::new(),
        atomic_shared: BTreeSet::new(),
        atomic_outputs: BTreeSet::new(),
        int_scalars: BTreeSet::new(),
        tensor_scalars: BTreeSet::new(),
        inout: BTreeSet::new(),
        pointers: BTreeSet::new(),
        rename_at: BTreeMap::new(),
        dyn_shared: BTreeMap::new(),
        fn_name: name.to_string(),
        helper_attrs: BTreeMap::new(),
        replace_node: BTreeMap::new(),
        diags: Vec::new(),
        blocked: BTreeMap::new(),
        noted: BTreeSet::new(),
        dead: BTreeMap::new(),
        groups: groups.clone(),
        storage_uses: Vec::new(),
        storage_param: None,
        ptx_used: false,
    };
    if let Some(k) = k {
        for s in &k.shared {
            rw.shared.insert(s.name.clone(), s.elem_type.clone());
            if s.atomic {
                rw.atomic_shared.insert(s.name.clone());
            }
        }
        for p in &k.params {
            if p.pointer {
                rw.pointers.insert(p.name.clone());
            } else if p.role == ParamRole::Input {
                rw.tensor_scalars.insert(p.name.clone());
            } else {
                rw.int_scalars.insert(p.name.clone());
            }
            if p.role == ParamRole::InOut {
                rw.inout.insert(p.name.clone());
            }
        }
        if target == Target::MlxMetal
            && k.params
                .iter()
                .any(|p| p.atomic && p.role != ParamRole::Input)
        {
            // atomic_outputs makes every output atomic<T>: plain stores and loads must go through atomics too.
            for p in k.params.iter().filter(|p| p.role == ParamRole::Output) {
                rw.atomic_outputs.insert(p.name.clone());
            }
        }
    }
    rw
}

/// Grid (threads) and threadgroup of a kernel's launch, and how they were found.
fn launch_shape(
    k: &KernelAnalysis,
    host: Option<&HostLaunch>,
    diags: &mut Vec<Diagnostic>,
    target: Target,
) -> ([String; 3], [String; 3], String) {
    let kd =
        |code: &str, line: usize, detail: String| diag(target, code, line, Some(&k.name), detail);
    if let Some(h) = host {
        if let (Some(g), Some(t)) = (&h.grid, &h.threadgroup) {
            diags.push(kd(
                "T010",
                h.line,
                format!(
                    "line {}: grid [{}], threadgroup [{}]",
                    h.line,
                    g.join(", "),
                    t.join(", ")
                ),
            ));
            return (
                g.clone(),
                t.clone(),
                format!("from the <<<...>>> launch at line {}", h.line),
            );
        }
        for p in &h.problems {
            diags.push(kd("T012", h.line, p.clone()));
        }
    }
    // No usable launch: infer from the indexing.
    let two_d = k.axes.contains(&1);
    let tg: [String; 3] = if let Some(b) = k.launch_bounds {
        [b.to_string(), "1".into(), "1".into()]
    } else if two_d {
        ["16".into(), "16".into(), "1".into()]
    } else if let Some(s) = k
        .shared
        .iter()
        .filter(|_| !k.thread_guard)
        .filter(|s| !s.dynamic && s.dims.len() == 1)
        .filter_map(|s| s.bytes.zip(type_size(&s.elem_type)).map(|(b, e)| b / e))
        .find(|n| (32..=1024).contains(n) && n.is_power_of_two())
    {
        [s.to_string(), "1".into(), "1".into()]
    } else {
        ["256".into(), "1".into(), "1".into()]
    };
    let first_scalar = k
        .params
        .iter()
        .find(|p| p.role == ParamRole::Scalar)
        .map(|p| p.name.clone());
    let mut grid = ["1".to_string(), "1".to_string(), "1".to_string()];
    for ax in 0..3 {
        if !k.axes.contains(&ax) && ax > 0 {
            continue;
        }
        let extent = k.guards.get(&ax).cloned();
        // One block per row: the guard bounds the block index, so the grid is rows * threadgroup.
        let per_block = !k.global_id && !k.grid_stride && k.uses("block_index");
        grid[ax] = match (extent, per_block) {
            (Some(e), true) => format!("{e} * {}", tg[ax]),
            (Some(e), false) => ceil_to(&e, &tg[ax]),
            (None, _) if ax == 0 => match &first_scalar {
                Some(s) if per_block => format!("{s} * {}", tg[0]),
                Some(s) => ceil_to(s, &tg[0]),
                None => tg[0].clone(),
            },
            (None, _) => tg[ax].clone(),
        };
    }
    let grid = grid.map(|e| {
        ksearch_model::expr::Expr::parse(&e)
            .ok()
            .and_then(|x| x.eval_int(&ksearch_model::expr::Env::new()).ok())
            .map(|v| v.to_string())
            .unwrap_or(e)
    });
    let why = match host {
        Some(h) => format!(
            "the <<<...>>> launch at line {} could not be converted (T012)",
            h.line
        ),
        None => "no <<<...>>> launch in the file".to_string(),
    };
    let how = format!(
        "assumed grid [{}], threadgroup [{}] ({why})",
        grid.join(", "),
        tg.join(", ")
    );
    // A grid sized by the kernel's own bounds guards is an inference the plan's description states (and the
    // evaluator's poisoned outputs catch a grid too small): a warning. A grid with no guard to size it by, or
    // a guess made where the file's own launch could not be read, is not: an error, the translation unfinished.
    // A grid-stride loop covers its extent whatever the grid.
    let guarded = k.grid_stride
        || std::iter::once(0)
            .chain(k.axes.iter().copied())
            .all(|ax| k.guards.contains_key(&ax));
    let mut d = kd("T011", k.line, how.clone());
    if host.is_none() && guarded {
        d.severity = Severity::Warning;
        d.message = d.message.replacen(
            "a guess was written",
            "a grid was inferred from the kernel's bounds guards",
            1,
        );
    }
    diags.push(d);
    (grid, tg, how)
}

/// MLX attributes a Metal kernel body can name: (name, type).
const ATTRIBUTES: &[(&str, &str)] = &[
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threads_per_threadgroup", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("thread_index_in_simdgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
];

/// Address space of each helper pointer parameter, from the kernels' calls: (helper, index) → space,
/// `None` when call sites disagree.
fn call_site_spaces(a: &Analysis, top: &[Node], root: Node, src: &str) -> Spaces {
    // The callers: each kernel (its pointer parameters are device memory) and each helper (its pointer
    // parameters point where its own callers' arguments do: found round by round).
    let mut callers: Vec<(Node, Option<String>)> = a
        .kernels
        .iter()
        .filter_map(|k| root.descendant_for_byte_range(k.def_range.0, k.def_range.1))
        .filter(|d| d.kind() == "function_definition")
        .map(|d| (d, None))
        .collect();
    for c in top {
        let f = item_function(*c);
        if let Some(f) = f
            && has_qualifier(f, src, "__device__")
            && !has_qualifier(f, src, "__global__")
            && let Some((name, _)) = function_parts(f, src)
        {
            callers.push((f, Some(name)));
        }
    }
    let fields = array_fields(root, src);
    let mut out = Spaces::new();
    for _ in 0..=callers.len().min(8) {
        let mut next = Spaces::new();
        for (f, helper) in &callers {
            caller_spaces(*f, helper.as_deref(), a, src, &fields, &out, &mut next);
        }
        if next == out {
            break;
        }
        out = next;
    }
    out
}

/// What a name of a function holds, for the memory an argument built from it points to.
#[derive(Clone, Copy, PartialEq)]
enum Held {
    /// An object in this address space: an array (decaying to a pointer into it), or a shared scalar.
    Object(&'static str),
    /// A pointer into this address space.
    Pointer(&'static str),
    /// A pointer (or an array of pointers) whose memory is not known.
    Unknown,
    /// A scalar or a struct in thread memory: memory only when its address is taken (`&x`).
    Value,
}

/// The arguments function `f` (a kernel or helper) passes the file's helpers, by the memory each points to:
/// its shared variables are threadgroup memory, its local arrays and the addresses of its locals thread memory,
/// its pointer parameters point to device memory (a kernel's) or where its callers' arguments point (`known`,
/// a helper's), a local pointer (or an `auto` one) where its initialiser points.
fn caller_spaces(
    f: Node,
    helper: Option<&str>,
    a: &Analysis,
    src: &str,
    fields: &BTreeSet<String>,
    known: &Spaces,
    out: &mut Spaces,
) {
    let Some(body) = f.child_by_field_name("body") else {
        return;
    };
    let mut names: BTreeMap<String, Held> = BTreeMap::new();
    if let Some((_, plist)) = function_parts(f, src) {
        for (i, p) in children(plist)
            .into_iter()
            .filter(|p| p.kind() == "parameter_declaration")
            .enumerate()
        {
            let Some((name, _, pointer, _)) = analyze::param_info(p, src) else {
                continue;
            };
            let held = match (pointer, helper) {
                (false, _) => Held::Value,
                (true, None) => Held::Pointer("device"),
                (true, Some(h)) => match known.get(&(h.to_string(), i)) {
                    Some(Some(space)) => Held::Pointer(space),
                    _ => Held::Unknown,
                },
            };
            names.insert(name, held);
        }
    }
    let mut aliases: BTreeMap<String, Node> = BTreeMap::new();
    for d in descendants(body)
        .into_iter()
        .filter(|d| d.kind() == "declaration")
    {
        let shared = children(d)
            .iter()
            .any(|c| c.kind() == "type_qualifier" && text(*c, src) == "__shared__");
        let auto = d
            .child_by_field_name("type")
            .is_some_and(|t| text(t, src) == "auto");
        for decl in children(d) {
            let Some(name) = declared_name(decl, src) else {
                continue;
            };
            let inner = if decl.kind() == "init_declarator" {
                decl.child_by_field_name("declarator").unwrap_or(decl)
            } else {
                decl
            };
            let holds_pointers = descendants(inner)
                .iter()
                .any(|x| x.kind() == "pointer_declarator");
            let value = decl.child_by_field_name("value");
            let held = if holds_pointers && inner.kind() != "pointer_declarator" {
                Held::Unknown // an array of pointers
            } else if shared && inner.kind() != "pointer_declarator" {
                Held::Object("threadgroup")
            } else if inner.kind() == "array_declarator" {
                Held::Object("thread")
            } else if inner.kind() == "pointer_declarator"
                || auto && value.is_some_and(|v| pointer_form(v, &names, src))
            {
                if let Some(v) = value {
                    aliases.insert(name.clone(), v);
                }
                Held::Unknown
            } else {
                Held::Value
            };
            names.insert(name, held);
        }
    }
    // A local pointer points where its initialiser does (pointers to pointers in order, a few deep).
    for _ in 0..4 {
        for (name, v) in &aliases {
            if let Some(space) = arg_space(*v, &names, fields, src) {
                names.insert(name.clone(), Held::Pointer(space));
            }
        }
    }
    for n in descendants(body) {
        if n.kind() != "call_expression" {
            continue;
        }
        let Some((name, _)) = analyze::callee(n, src) else {
            continue;
        };
        if !a.device_functions.contains(&name) {
            continue;
        }
        for (i, arg) in args(n).into_iter().enumerate() {
            let space = match arg_space(arg, &names, fields, src) {
                Some(s) => s,
                // An expression whose memory is not known: device memory, as a parameter's would be.
                None if arg.kind() != "identifier"
                    && lvalue_base(arg, src, &BTreeMap::new()).is_some() =>
                {
                    "device"
                }
                None => continue,
            };
            out.entry((name.clone(), i))
                .and_modify(|s| {
                    if *s != Some(space) {
                        *s = None;
                    }
                })
                .or_insert(Some(space));
        }
    }
}

/// Whether an `auto` initialiser is a pointer (its name decays or points, an address, pointer arithmetic, a
/// cast) rather than a value read through one (`in[i]`).
fn pointer_form(v: Node, names: &BTreeMap<String, Held>, src: &str) -> bool {
    match v.kind() {
        "parenthesized_expression" => v
            .named_child(0)
            .is_some_and(|x| pointer_form(x, names, src)),
        "identifier" => matches!(
            names.get(text(v, src)),
            Some(Held::Object(_) | Held::Pointer(_) | Held::Unknown)
        ),
        "pointer_expression" => text(v, src).starts_with('&'),
        "binary_expression" => ["left", "right"].iter().any(|f| {
            v.child_by_field_name(f)
                .is_some_and(|x| pointer_form(x, names, src))
        }),
        "cast_expression" => true,
        "call_expression" => v
            .child_by_field_name("function")
            .is_some_and(|f| text(f, src).contains("_cast")),
        _ => false,
    }
}

/// The address space the pointer expression `n` points into, when its names say: `a + i` and `&a[i]` where
/// `a` is an array or a pointer, `&x` of a local, a row `rows[j]` of an array of arrays, an array field of a
/// local struct, casts.
fn arg_space(
    n: Node,
    names: &BTreeMap<String, Held>,
    fields: &BTreeSet<String>,
    src: &str,
) -> Option<&'static str> {
    match n.kind() {
        "parenthesized_expression" => arg_space(n.named_child(0)?, names, fields, src),
        "identifier" => match names.get(text(n, src)) {
            Some(Held::Object(s) | Held::Pointer(s)) => Some(*s),
            _ => None,
        },
        "pointer_expression" if text(n, src).starts_with('&') => {
            let inner = n.child_by_field_name("argument")?;
            match inner.kind() {
                // An element: in the array's memory, or where the pointer points.
                "subscript_expression" => {
                    arg_space(inner.child_by_field_name("argument")?, names, fields, src)
                }
                "identifier" => match names.get(text(inner, src)) {
                    Some(Held::Object(s)) => Some(*s),
                    // The address of a local value, or of a pointer variable itself: thread memory.
                    Some(_) => Some("thread"),
                    None => None,
                },
                // `&r.f`: a field of a local struct (a struct reached through a pointer is not known).
                "field_expression" if !text(inner, src).contains("->") => {
                    let base = lvalue_base(inner, src, &BTreeMap::new())?;
                    match names.get(&base) {
                        Some(Held::Value) => Some("thread"),
                        Some(Held::Object(s)) => Some(*s),
                        _ => None,
                    }
                }
                _ => None,
            }
        }
        "binary_expression" => arg_space(n.child_by_field_name("left")?, names, fields, src)
            .or_else(|| arg_space(n.child_by_field_name("right")?, names, fields, src)),
        // A row of an array of arrays decays to a pointer into the same memory (an element read through a
        // pointer is a value).
        "subscript_expression" => {
            let inner = n.child_by_field_name("argument")?;
            let base = lvalue_base(inner, src, &BTreeMap::new())?;
            match names.get(&base) {
                Some(Held::Object(s)) => Some(*s),
                _ => None,
            }
        }
        // `r.buf` of a local struct whose field is an array: thread memory (a pointer field is not known).
        "field_expression" if !text(n, src).contains("->") => {
            let base = lvalue_base(n, src, &BTreeMap::new())?;
            let field = text(n.child_by_field_name("field")?, src);
            (names.get(&base) == Some(&Held::Value) && fields.contains(field)).then_some("thread")
        }
        "cast_expression" => arg_space(n.child_by_field_name("value")?, names, fields, src),
        "call_expression" => {
            let f = n.child_by_field_name("function")?;
            let f = f.child_by_field_name("name").unwrap_or(f);
            if text(f, src).ends_with("_cast") {
                arg_space(*args(n).first()?, names, fields, src)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The fields the file's structs declare as arrays (`float buf[8];`): a local struct's such field is thread
/// memory.
fn array_fields(root: Node, src: &str) -> BTreeSet<String> {
    descendants(root)
        .into_iter()
        .filter(|d| d.kind() == "field_declaration")
        .flat_map(children)
        .filter(|d| d.kind() == "array_declarator")
        .filter_map(|d| d.child_by_field_name("declarator"))
        .map(|x| text(x, src).to_string())
        .collect()
}

/// The attributes each helper uses once translated, including through the helpers it calls.
fn helper_attributes(
    top: &[Node],
    src: &str,
    target: Target,
    groups: &Groups,
) -> BTreeMap<String, Vec<String>> {
    let mut attrs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Helpers calling helpers: iterate until nothing changes (bounded by the number of helpers).
    for _ in 0..=top.len().min(8) {
        let mut next = BTreeMap::new();
        for c in top {
            let f = item_function(*c);
            let Some(f) = f else { continue };
            if !has_qualifier(f, src, "__device__") || has_qualifier(f, src, "__global__") {
                continue;
            }
            let Some((name, plist)) = function_parts(f, src) else {
                continue;
            };
            let Some(body) = f.child_by_field_name("body") else {
                continue;
            };
            let mut rw = rewriter(src, target, None, &name, groups);
            rw.helper_attrs = attrs.clone();
            let text = rw.splice(body);
            let own: BTreeSet<String> = children(plist)
                .into_iter()
                .filter_map(|p| analyze::param_info(p, src).map(|i| i.0))
                .collect();
            let used: Vec<String> = ATTRIBUTES
                .iter()
                .filter(|(a, _)| contains_word(&text, a) && !own.contains(*a))
                .map(|(a, _)| a.to_string())
                .collect();
            if !used.is_empty() {
                next.insert(name, used);
            }
        }
        if next == attrs {
            break;
        }
        attrs = next;
    }
    attrs
}

fn contains_word(hay: &str, w: &str) -> bool {
    hay.match_indices(w).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + w.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// A Metal helper's parameter list: pointers get the address space their call sites pass (device when
/// unknown: the bool), and the MLX attributes it uses are appended.
fn helper_params(
    rw: &mut Rw,
    plist: Node,
    name: &str,
    spaces: &BTreeMap<(String, usize), Option<&'static str>>,
    attrs: &BTreeMap<String, Vec<String>>,
) -> (String, bool) {
    let src = rw.src;
    let mut parts = Vec::new();
    let mut unknown = false;
    for (i, p) in children(plist)
        .into_iter()
        .filter(|p| p.kind() == "parameter_declaration")
        .enumerate()
    {
        let pt = rw.render_inner(p);
        let pt = pt.trim().to_string();
        let is_ptr = analyze::param_info(p, src).is_some_and(|x| x.2) && pt.contains('*');
        if !is_ptr
            || pt.contains("device ")
            || pt.contains("threadgroup ")
            || pt.contains("thread ")
        {
            parts.push(pt);
            continue;
        }
        let space = match spaces.get(&(name.to_string(), i)) {
            Some(Some(s)) => *s,
            _ => {
                unknown = true;
                "device"
            }
        };
        parts.push(match pt.strip_prefix("const ") {
            Some(rest) => format!("const {space} {}", rest.trim()),
            None => format!("{space} {pt}"),
        });
    }
    for a in attrs.get(name).into_iter().flatten() {
        let ty = ATTRIBUTES
            .iter()
            .find(|x| x.0 == a)
            .map(|x| x.1)
            .unwrap_or("uint");
        parts.push(format!("{ty} {a}"));
    }
    (format!("({})", parts.join(", ")), unknown)
}

/// The name a declarator declares (`x`, `*p`, `a[4]`, `x = ...`).
pub(super) fn declared_name(d: Node, src: &str) -> Option<String> {
    match d.kind() {
        "identifier" => Some(text(d, src).to_string()),
        "init_declarator" | "pointer_declarator" | "array_declarator" | "reference_declarator" => {
            declared_name(
                d.child_by_field_name("declarator")
                    .or_else(|| d.named_child(0))?,
                src,
            )
        }
        _ => None,
    }
}

/// A macro's text with CUDA's index built-ins and barrier spelled the MLX Metal way.
fn metal_macro(t: &str) -> String {
    let mut out = t.to_string();
    for axis in ["x", "y", "z"] {
        for (from, to) in [
            (
                format!("blockIdx.{axis} * blockDim.{axis} + threadIdx.{axis}"),
                format!("thread_position_in_grid.{axis}"),
            ),
            (
                format!("threadIdx.{axis} + blockIdx.{axis} * blockDim.{axis}"),
                format!("thread_position_in_grid.{axis}"),
            ),
            (
                format!("blockDim.{axis} * gridDim.{axis}"),
                format!("threads_per_grid.{axis}"),
            ),
            (
                format!("gridDim.{axis} * blockDim.{axis}"),
                format!("threads_per_grid.{axis}"),
            ),
        ] {
            out = out.replace(&from, &to);
        }
    }
    for (from, to) in [
        ("threadIdx", "thread_position_in_threadgroup"),
        ("blockIdx", "threadgroup_position_in_grid"),
        ("blockDim", "threads_per_threadgroup"),
        ("gridDim", "threadgroups_per_grid"),
        (
            "__syncthreads()",
            "threadgroup_barrier(mem_flags::mem_threadgroup)",
        ),
    ] {
        out = out.replace(from, to);
    }
    out
}
