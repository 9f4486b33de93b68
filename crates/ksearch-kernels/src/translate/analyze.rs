//! The CUDA analyzer: tree-sitter-cuda syntax tree → per-kernel facts (parameters and their roles,
//! constructs used, shared memory, launch bounds) and a brief for people and LLMs.

use super::launch::{self, HostLaunch};
use ksearch_model::target::Target;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::{Node, Parser, Tree};

#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub kernels: Vec<KernelAnalysis>,
    /// `__device__` helper functions, by name.
    pub device_functions: Vec<String>,
    /// Integer constants the file defines (`#define`, `constexpr`/`const` ints).
    pub constants: BTreeMap<String, i64>,
    /// Host `<<<...>>>` launches found in the file.
    pub launches: Vec<HostLaunch>,
    /// Lines where tree-sitter found syntax it could not parse.
    pub parse_error_lines: Vec<usize>,
    pub lines: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamRole {
    Input,
    Output,
    /// Read and written: MLX outputs never alias inputs, so it becomes an input and an output.
    InOut,
    /// An integer scalar (a plan scalar, int32). A floating-point scalar is an `Input` of one element.
    Scalar,
}

#[derive(Debug, Clone, Serialize)]
pub struct Param {
    pub name: String,
    /// The element type as written (`float`, `T`, `__half`, `float4`).
    pub elem_type: String,
    pub pointer: bool,
    pub is_const: bool,
    pub role: ParamRole,
    /// The kernel updates it with atomics.
    pub atomic: bool,
    /// Its first access is an update (`+=`): the caller must have initialised it (to zero, assumed).
    pub accumulates: bool,
    /// Declared `const` (so an input) yet seen written: through a cast, or a pattern the analysis misread.
    pub const_written: bool,
    /// In place, and read after this kernel's own write to it (or the pointer moved): split into an input and
    /// an output, that read would see the old value (or the output half would not move).
    pub read_after_write: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SharedArray {
    pub name: String,
    pub elem_type: String,
    /// Array extents as written.
    pub dims: Vec<String>,
    /// Size in bytes when every extent is a known constant.
    pub bytes: Option<u64>,
    pub dynamic: bool,
    /// Updated with atomics.
    pub atomic: bool,
    pub line: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct KernelAnalysis {
    pub name: String,
    pub line: usize,
    pub end_line: usize,
    pub params: Vec<Param>,
    pub template_ints: Vec<String>,
    /// Every template parameter in declaration order (a launch's `<...>` values follow it).
    pub template_order: Vec<String>,
    pub template_types: Vec<String>,
    /// Template parameters that are neither types nor integers (a function pointer, an object): MLX's
    /// template arguments cannot carry them.
    pub template_other: Vec<String>,
    /// construct → occurrences.
    pub constructs: BTreeMap<String, usize>,
    pub shared: Vec<SharedArray>,
    /// Static shared memory in bytes, when every array's size is known.
    pub shared_bytes: Option<u64>,
    pub launch_bounds: Option<i64>,
    pub device_calls: Vec<String>,
    /// Axes (0 = x) whose thread or block index the kernel reads.
    pub axes: Vec<usize>,
    /// The kernel computes `blockIdx * blockDim + threadIdx` (one thread per element).
    pub global_id: bool,
    pub grid_stride: bool,
    /// Scalars compared against an index (`i < n`): the extent each axis covers, when found.
    pub guards: BTreeMap<usize, String>,
    /// Concept-map rows (`knowledge/concept_map.toml` ids) that apply.
    pub concepts: Vec<String>,
    pub brief: String,
    /// Some work is guarded by `threadIdx.x < X`: shared arrays then need not match the threadgroup size.
    #[serde(skip)]
    pub thread_guard: bool,
    #[serde(skip)]
    pub def_range: (usize, usize),
}

impl KernelAnalysis {
    pub fn uses(&self, construct: &str) -> bool {
        self.constructs.get(construct).copied().unwrap_or(0) > 0
    }
}

pub(crate) fn parse(src: &str) -> Tree {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_cuda::LANGUAGE.into())
        .expect("tree-sitter-cuda matches the tree-sitter version");
    parser.parse(src, None).expect("parsing without a timeout")
}

pub(crate) fn text<'a>(n: Node, src: &'a str) -> &'a str {
    &src[n.byte_range()]
}

pub(crate) fn line(n: Node) -> usize {
    n.start_position().row + 1
}

pub(crate) fn children(n: Node) -> Vec<Node> {
    let mut c = n.walk();
    n.children(&mut c).collect()
}

/// Every node of the subtree, depth first.
pub(crate) fn descendants(n: Node) -> Vec<Node> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        out.push(x);
        let mut ch = children(x);
        ch.reverse();
        stack.extend(ch);
    }
    out
}

/// Is `f` a function definition carrying the CUDA qualifier `q` (`__global__`, `__device__`)?
pub(crate) fn has_qualifier(f: Node, src: &str, q: &str) -> bool {
    let head_end = f
        .child_by_field_name("declarator")
        .map(|d| d.start_byte())
        .unwrap_or(f.start_byte());
    let head = &src[f.start_byte()..head_end];
    head.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == q)
}

/// The function's name and parameter list.
pub(crate) fn function_parts<'t>(f: Node<'t>, src: &str) -> Option<(String, Node<'t>)> {
    let mut d = f.child_by_field_name("declarator")?;
    loop {
        match d.kind() {
            "function_declarator" => {
                let name = d.child_by_field_name("declarator")?;
                let params = d.child_by_field_name("parameters")?;
                let name = text(name, src);
                let name = name.rsplit("::").next().unwrap_or(name).to_string();
                return Some((name, params));
            }
            _ => d = d.child_by_field_name("declarator")?,
        }
    }
}

/// A function template's parameters, by kind, and all of them in declaration order.
#[derive(Default)]
struct TemplateParams {
    ints: Vec<String>,
    types: Vec<String>,
    /// Neither a type nor an integer: `void (*op)(float)`, `float& r`.
    other: Vec<String>,
    order: Vec<String>,
}

/// `template <...>` parameters of a function definition.
fn template_params(f: Node, src: &str) -> TemplateParams {
    let mut tp = TemplateParams::default();
    let Some(t) = f.parent().filter(|p| p.kind() == "template_declaration") else {
        return tp;
    };
    let Some(list) = t.child_by_field_name("parameters") else {
        return tp;
    };
    let TemplateParams {
        ints,
        types,
        other,
        order,
    } = &mut tp;
    for p in children(list) {
        match p.kind() {
            "type_parameter_declaration" | "optional_type_parameter_declaration" => {
                if let Some(n) = descendants(p)
                    .into_iter()
                    .find(|n| n.kind() == "type_identifier")
                {
                    types.push(text(n, src).to_string());
                    order.push(text(n, src).to_string());
                }
            }
            "parameter_declaration" | "optional_parameter_declaration" => {
                let Some(d) = p.child_by_field_name("declarator") else {
                    continue;
                };
                let pointer = p
                    .child_by_field_name("type")
                    .is_some_and(|t| text(t, src).contains('*'));
                if d.kind() == "identifier" && !pointer {
                    ints.push(text(d, src).to_string());
                    order.push(text(d, src).to_string());
                } else {
                    // A function pointer's name sits inside its declarator: `(*op)(float)`.
                    let name = descendants(d)
                        .into_iter()
                        .find(|n| n.kind() == "identifier")
                        .map(|n| text(n, src).to_string())
                        .unwrap_or_else(|| text(d, src).to_string());
                    other.push(name.clone());
                    order.push(name);
                }
            }
            // Variadic and template-template parameters: none is an MLX template argument, and each holds
            // a place in a launch's `<...>` values.
            k if p.is_named() && k != "comment" => {
                let name = descendants(p)
                    .into_iter()
                    .rfind(|n| matches!(n.kind(), "identifier" | "type_identifier"))
                    .map(|n| text(n, src).to_string())
                    .unwrap_or_else(|| text(p, src).to_string());
                other.push(name.clone());
                order.push(name);
            }
            _ => {}
        }
    }
    tp
}

/// A declaration's parameter: name, element type, pointer, const.
pub(crate) fn param_info(p: Node, src: &str) -> Option<(String, String, bool, bool)> {
    let ty = p.child_by_field_name("type")?;
    let mut is_const = false;
    for c in children(p) {
        if c.kind() == "type_qualifier" && text(c, src) == "const" {
            is_const = true;
        }
    }
    let mut d = p.child_by_field_name("declarator")?;
    let mut pointer = false;
    loop {
        match d.kind() {
            "pointer_declarator" | "reference_declarator" | "array_declarator" => {
                pointer |= d.kind() != "reference_declarator";
                d = match d.child_by_field_name("declarator") {
                    Some(x) => x,
                    None => children(d).into_iter().find(|c| c.kind() == "identifier")?,
                };
            }
            "identifier" => break,
            _ => d = children(d).into_iter().find(|c| c.is_named())?,
        }
    }
    Some((
        text(d, src).to_string(),
        text(ty, src).to_string(),
        pointer,
        is_const,
    ))
}

pub(crate) fn type_size(t: &str) -> Option<u64> {
    let t = t
        .trim()
        .trim_start_matches("const ")
        .trim_start_matches("volatile ")
        .trim();
    Some(match t {
        "char" | "bool" | "int8_t" | "uint8_t" | "unsigned char" | "signed char" => 1,
        t if ksearch_model::dialect::bytes_of(t).is_some() => {
            ksearch_model::dialect::bytes_of(t)? as u64
        }
        "short" | "int16_t" | "uint16_t" | "bfloat16" | "unsigned short" => 2,
        "int" | "unsigned" | "unsigned int" | "uint" | "float" | "int32_t" | "uint32_t" => 4,
        "double" | "long" | "long long" | "unsigned long long" | "int64_t" | "uint64_t"
        | "size_t" | "float2" | "int2" | "uint2" | "half4" => 8,
        "float3" | "int3" | "uint3" => 12,
        "float4" | "int4" | "uint4" | "double2" => 16,
        _ => return None,
    })
}

/// Integer value of a constant expression, with the file's constants.
pub(crate) fn eval(n: Node, src: &str, consts: &BTreeMap<String, i64>) -> Option<i64> {
    match n.kind() {
        "number_literal" => parse_int(text(n, src)),
        "identifier" => consts.get(text(n, src)).copied(),
        "parenthesized_expression" => eval(n.named_child(0)?, src, consts),
        "cast_expression" => eval(n.child_by_field_name("value")?, src, consts),
        "sizeof_expression" => {
            let t = n.child_by_field_name("type")?;
            type_size(text(t, src)).map(|v| v as i64)
        }
        "unary_expression" => {
            let v = eval(n.child_by_field_name("argument")?, src, consts)?;
            match text(n.child_by_field_name("operator")?, src) {
                "-" => Some(-v),
                "+" => Some(v),
                _ => None,
            }
        }
        "binary_expression" => {
            let a = eval(n.child_by_field_name("left")?, src, consts)?;
            let b = eval(n.child_by_field_name("right")?, src, consts)?;
            match text(n.child_by_field_name("operator")?, src) {
                "+" => a.checked_add(b),
                "-" => a.checked_sub(b),
                "*" => a.checked_mul(b),
                "/" => a.checked_div(b),
                "%" => a.checked_rem(b),
                "<<" => a.checked_shl(u32::try_from(b).ok()?),
                ">>" => a.checked_shr(u32::try_from(b).ok()?),
                "&" => Some(a & b),
                "|" => Some(a | b),
                _ => None,
            }
        }
        _ => None,
    }
}

pub(crate) fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return i64::from_str_radix(h, 16).ok();
    }
    s.parse().ok()
}

/// `#define NAME <int expr>` and `constexpr`/`const` int globals (and `static constexpr` in bodies).
fn constants(root: Node, src: &str) -> BTreeMap<String, i64> {
    let mut consts = BTreeMap::new();
    // `#define`s by their text (the parser loses some inside code it cannot read, such as a header's
    // unparsed macros), in file order, then `const`/`constexpr` declarations, which may use them.
    for (_, d) in crate::check::lex::directives(src) {
        let Some((name, rest)) = super::includes::define_of(&d) else {
            continue;
        };
        // The directive's text still holds its comments.
        let value = rest.split("//").next().unwrap_or("");
        let value = value.split("/*").next().unwrap_or("").trim();
        // Function-like macros (`F(x)`) and empty ones are not constants.
        if consts.contains_key(name) || rest.starts_with('(') || value.is_empty() {
            continue;
        }
        let snippet = format!("int __v = ({value});");
        let tree = parse(&snippet);
        if let Some(v) = descendants(tree.root_node())
            .into_iter()
            .find(|x| x.kind() == "init_declarator")
            .and_then(|d| d.child_by_field_name("value"))
            .and_then(|v| eval(v, &snippet, &consts))
        {
            consts.insert(name.to_string(), v);
        }
    }
    for n in descendants(root) {
        if n.kind() != "declaration" {
            continue;
        }
        let is_const = children(n).iter().any(|c| {
            c.kind() == "type_qualifier" && matches!(text(*c, src), "const" | "constexpr")
        });
        if !is_const {
            continue;
        }
        for d in children(n) {
            if d.kind() != "init_declarator" {
                continue;
            }
            let (Some(name), Some(value)) = (
                d.child_by_field_name("declarator"),
                d.child_by_field_name("value"),
            ) else {
                continue;
            };
            if name.kind() == "identifier"
                && let Some(v) = eval(value, src, &consts)
            {
                consts.insert(text(name, src).to_string(), v);
            }
        }
    }
    consts
}

/// `threadIdx.x` etc.: (built-in, axis).
pub(crate) fn builtin_index(n: Node, src: &str) -> Option<(&'static str, usize)> {
    if n.kind() != "field_expression" {
        return None;
    }
    let arg = n.child_by_field_name("argument")?;
    let field = n.child_by_field_name("field")?;
    let b = match text(arg, src) {
        "threadIdx" => "threadIdx",
        "blockIdx" => "blockIdx",
        "blockDim" => "blockDim",
        "gridDim" => "gridDim",
        _ => return None,
    };
    let axis = match text(field, src) {
        "x" => 0,
        "y" => 1,
        "z" => 2,
        _ => return None,
    };
    Some((b, axis))
}

fn strip_parens(mut n: Node) -> Node {
    while n.kind() == "parenthesized_expression" {
        match n.named_child(0) {
            Some(c) => n = c,
            None => break,
        }
    }
    n
}

fn binary_parts<'t>(n: Node<'t>, src: &str) -> Option<(Node<'t>, &'static str, Node<'t>)> {
    if n.kind() != "binary_expression" {
        return None;
    }
    let op = match text(n.child_by_field_name("operator")?, src) {
        "+" => "+",
        "*" => "*",
        "/" => "/",
        "%" => "%",
        "&" => "&",
        ">>" => ">>",
        _ => return None,
    };
    Some((
        strip_parens(n.child_by_field_name("left")?),
        op,
        strip_parens(n.child_by_field_name("right")?),
    ))
}

/// `a * b` where {a, b} are the built-ins `x` and `y` of one axis (either order).
fn product_of(n: Node, src: &str, x: &str, y: &str) -> Option<usize> {
    let (l, op, r) = binary_parts(strip_parens(n), src)?;
    if op != "*" {
        return None;
    }
    let (a, ax) = builtin_index(l, src)?;
    let (b, bx) = builtin_index(r, src)?;
    ((a == x && b == y || a == y && b == x) && ax == bx).then_some(ax)
}

/// `blockIdx.a * blockDim.a + threadIdx.a` (any order): the global thread index on axis `a`.
pub(crate) fn global_id(n: Node, src: &str) -> Option<usize> {
    let (l, op, r) = binary_parts(strip_parens(n), src)?;
    if op != "+" {
        return None;
    }
    for (p, t) in [(l, r), (r, l)] {
        if let (Some(ax), Some(("threadIdx", tx))) = (
            product_of(p, src, "blockIdx", "blockDim"),
            builtin_index(t, src),
        ) && ax == tx
        {
            return Some(ax);
        }
    }
    None
}

/// `blockIdx.a * E + threadIdx.a` for any `E` (a tile size): a global index on axis `a`.
pub(crate) fn tiled_global_id(n: Node, src: &str) -> Option<usize> {
    let (l, op, r) = binary_parts(strip_parens(n), src)?;
    if op != "+" {
        return None;
    }
    for (p, t) in [(l, r), (r, l)] {
        let Some(("threadIdx", tx)) = builtin_index(t, src) else {
            continue;
        };
        if let Some((a, "*", b)) = binary_parts(p, src) {
            for side in [a, b] {
                if builtin_index(side, src) == Some(("blockIdx", tx)) {
                    return Some(tx);
                }
            }
        }
    }
    None
}

/// `blockDim.a * gridDim.a`: the grid-stride step on axis `a`.
pub(crate) fn grid_stride(n: Node, src: &str) -> Option<usize> {
    product_of(n, src, "blockDim", "gridDim")
}

/// `threadIdx.x % 32` / `& 31` → Some(true) (lane); `threadIdx.x / 32` / `>> 5` → Some(false) (warp).
pub(crate) fn lane_or_warp(n: Node, src: &str) -> Option<bool> {
    let (l, op, r) = binary_parts(strip_parens(n), src)?;
    if builtin_index(l, src) != Some(("threadIdx", 0)) {
        return None;
    }
    let r = text(r, src);
    match (op, r) {
        ("%", "32" | "warpSize" | "WARP_SIZE") | ("&", "31" | "0x1f" | "0x1F") => Some(true),
        ("/", "32" | "warpSize" | "WARP_SIZE") | (">>", "5") => Some(false),
        _ => None,
    }
}

pub(crate) const VECTOR_TYPES: &[&str] = &[
    "float2",
    "float3",
    "float4",
    "int2",
    "int3",
    "int4",
    "uint2",
    "uint3",
    "uint4",
    "half2",
    "__half2",
    "double2",
    "char4",
    "uchar4",
    "short2",
    "__nv_bfloat162",
];

/// The pointer parameter (or alias of one) an lvalue writes through.
pub(crate) fn lvalue_base(
    n: Node,
    src: &str,
    aliases: &BTreeMap<String, String>,
) -> Option<String> {
    let n = strip_parens(n);
    match n.kind() {
        "identifier" => {
            let t = text(n, src);
            Some(aliases.get(t).cloned().unwrap_or_else(|| t.to_string()))
        }
        "subscript_expression" | "field_expression" => {
            lvalue_base(n.child_by_field_name("argument")?, src, aliases)
        }
        "pointer_expression" => lvalue_base(n.child_by_field_name("argument")?, src, aliases),
        // `*dst++ = v` stores through `dst`
        "update_expression" => lvalue_base(n.child_by_field_name("argument")?, src, aliases),
        "binary_expression" => lvalue_base(n.child_by_field_name("left")?, src, aliases)
            .or_else(|| lvalue_base(n.child_by_field_name("right")?, src, aliases)),
        "cast_expression" => lvalue_base(n.child_by_field_name("value")?, src, aliases),
        "call_expression" => {
            // reinterpret_cast<float4*>(p)[i]
            let args = n.child_by_field_name("arguments")?;
            lvalue_base(args.named_child(0)?, src, aliases)
        }
        _ => None,
    }
}

pub(crate) fn call_name(n: Node, src: &str) -> Option<String> {
    let f = n.child_by_field_name("function")?;
    let t = match f.kind() {
        "template_function" => text(f.child_by_field_name("name")?, src),
        _ => text(f, src),
    };
    Some(t.to_string())
}

/// The function a call names without its namespaces (`ns::f<T>(x)` → `f`), and the node of the template
/// arguments it writes, if any: how a call of one of the file's own helpers is recognised.
pub(crate) fn callee<'t>(n: Node<'t>, src: &str) -> Option<(String, Option<Node<'t>>)> {
    let mut f = n.child_by_field_name("function")?;
    while f.kind() == "qualified_identifier" {
        f = f.child_by_field_name("name")?;
    }
    if f.kind() == "template_function" {
        let name = text(f.child_by_field_name("name")?, src).to_string();
        return Some((name, f.child_by_field_name("arguments")));
    }
    (f.kind() == "identifier").then(|| (text(f, src).to_string(), None))
}

/// Calls that store through their first argument without reading it.
pub(crate) fn is_store(name: &str) -> bool {
    name.ends_with("store_matrix_sync") || name.starts_with("__st")
}

pub(crate) fn is_atomic(name: &str) -> bool {
    name.starts_with("atomic")
        && name.len() > 6
        && name[6..].starts_with(|c: char| c.is_uppercase())
}

/// A scalar parameter's type is a floating-point one (`float`, `half`, `double`, or a template type).
fn is_float_scalar(elem_type: &str, template_types: &[String]) -> bool {
    let t = elem_type.trim_start_matches("const ").trim();
    super::dtype_of(t).is_some_and(|d| d.is_float()) || template_types.iter().any(|x| x == t)
}

/// Whether an assignment or update target is a pointer itself (a parameter or an alias of one), not what it
/// points to: `A += row * K;`, `p++`, `A = A + off` move the pointer and store nothing.
pub(crate) fn reseats_pointer(
    left: Node,
    src: &str,
    pointers: &BTreeSet<String>,
    aliases: &BTreeMap<String, String>,
) -> bool {
    let n = strip_parens(left);
    n.kind() == "identifier" && {
        let t = text(n, src);
        pointers.contains(t) || aliases.contains_key(t)
    }
}

/// Local pointers initialised from a parameter: alias → parameter.
pub(crate) fn pointer_aliases(
    body: Node,
    src: &str,
    params: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let mut aliases = BTreeMap::new();
    for n in descendants(body) {
        if n.kind() != "init_declarator" {
            continue;
        }
        let (Some(d), Some(v)) = (
            n.child_by_field_name("declarator"),
            n.child_by_field_name("value"),
        ) else {
            continue;
        };
        if d.kind() != "pointer_declarator" {
            continue;
        }
        let Some(name) = descendants(d)
            .into_iter()
            .find(|x| x.kind() == "identifier")
        else {
            continue;
        };
        if let Some(base) = lvalue_base(v, src, &aliases)
            && params.contains(&base)
        {
            aliases.insert(text(name, src).to_string(), base);
        }
    }
    aliases
}

pub fn analyze(src: &str) -> Analysis {
    let tree = parse(src);
    analyze_tree(&tree, src)
}

pub(crate) fn analyze_tree(tree: &Tree, src: &str) -> Analysis {
    let root = tree.root_node();
    let consts = constants(root, src);
    let mut kernels = Vec::new();
    let mut device_functions = Vec::new();
    let mut device_sigs: BTreeMap<String, Vec<(bool, bool)>> = BTreeMap::new();
    let defs: Vec<Node> = descendants(root)
        .into_iter()
        .filter(|n| n.kind() == "function_definition")
        .collect();
    for f in &defs {
        if has_qualifier(*f, src, "__device__")
            && !has_qualifier(*f, src, "__global__")
            && let Some((name, params)) = function_parts(*f, src)
        {
            let sig = children(params)
                .into_iter()
                .filter(|p| p.kind() == "parameter_declaration")
                .filter_map(|p| param_info(p, src))
                .map(|(_, _, ptr, c)| (ptr, c))
                .collect();
            device_sigs.insert(name.clone(), sig);
            device_functions.push(name);
        }
    }
    for f in &defs {
        if has_qualifier(*f, src, "__global__")
            && let Some(k) = analyze_kernel(*f, src, &consts, &device_sigs)
        {
            kernels.push(k);
        }
    }
    let launches = launch::host_launches(root, src, &consts, &kernels);
    let parse_error_lines = descendants(root)
        .into_iter()
        .filter(|n| n.is_error() || n.is_missing())
        .map(line)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    Analysis {
        kernels,
        device_functions,
        constants: consts,
        launches,
        parse_error_lines,
        lines: src.lines().count(),
    }
}

/// What one walk over a kernel's body collects: `analyze_kernel`'s visitor, one method per kind of node.
struct BodyWalk<'s> {
    src: &'s str,
    name: &'s str,
    consts: &'s BTreeMap<String, i64>,
    device_sigs: &'s BTreeMap<String, Vec<(bool, bool)>>,
    pointer_names: &'s BTreeSet<String>,
    aliases: &'s BTreeMap<String, String>,
    constructs: BTreeMap<String, usize>,
    written: BTreeSet<String>,
    /// Pointers moved (`A += row * K`), nothing stored through them.
    reseated: BTreeSet<String>,
    read: BTreeSet<String>,
    atomic_targets: BTreeSet<String>,
    shared: Vec<SharedArray>,
    device_calls: BTreeSet<String>,
    axes: BTreeSet<usize>,
    gid: bool,
    stride: bool,
    /// Positions of identifiers that are written (not read) by a plain assignment.
    lhs_positions: BTreeSet<usize>,
}

impl<'s> BodyWalk<'s> {
    fn new(
        src: &'s str,
        name: &'s str,
        consts: &'s BTreeMap<String, i64>,
        device_sigs: &'s BTreeMap<String, Vec<(bool, bool)>>,
        pointer_names: &'s BTreeSet<String>,
        aliases: &'s BTreeMap<String, String>,
    ) -> Self {
        BodyWalk {
            src,
            name,
            consts,
            device_sigs,
            pointer_names,
            aliases,
            constructs: BTreeMap::new(),
            written: BTreeSet::new(),
            reseated: BTreeSet::new(),
            read: BTreeSet::new(),
            atomic_targets: BTreeSet::new(),
            shared: Vec::new(),
            device_calls: BTreeSet::new(),
            axes: BTreeSet::new(),
            gid: false,
            stride: false,
            lhs_positions: BTreeSet::new(),
        }
    }

    fn bump(&mut self, c: &str) {
        *self.constructs.entry(c.to_string()).or_default() += 1;
    }

    /// One node of the body; None where the tree lacks a part the grammar promises.
    fn visit(&mut self, n: Node) -> Option<()> {
        match n.kind() {
            "field_expression" => self.field(n),
            "binary_expression" => self.binary(n),
            "assignment_expression" => return self.assignment(n),
            "update_expression" => self.update(n),
            "declaration" => self.declaration(n),
            "call_expression" => self.call(n),
            "gnu_asm_expression" => self.asm(n),
            "namespace_identifier" => self.namespace(n),
            "type_identifier" | "primitive_type" => self.type_name(n),
            "new_expression" => self.bump("device_malloc"),
            "identifier" => self.identifier(n),
            _ => {}
        }
        Some(())
    }

    /// A built-in index (`threadIdx.x`, `blockIdx.y`, ...): its axis and kind.
    fn field(&mut self, n: Node) {
        let src = self.src;
        if let Some((b, ax)) = builtin_index(n, src) {
            self.axes.insert(ax);
            self.bump(match b {
                "threadIdx" => "thread_index",
                "blockIdx" => "block_index",
                "blockDim" => "block_dim",
                _ => "grid_dim",
            });
        }
    }

    /// The global-index, grid-stride and lane/warp idioms.
    fn binary(&mut self, n: Node) {
        let src = self.src;
        if global_id(n, src).is_some() {
            self.gid = true;
            self.bump("global_thread_id");
        } else if tiled_global_id(n, src).is_some() {
            // blockIdx.y * TILE + threadIdx.y: one thread per element as well.
            self.gid = true;
        }
        if grid_stride(n, src).is_some() {
            self.stride = true;
            self.bump("grid_stride_loop");
        }
        if lane_or_warp(n, src).is_some() {
            self.bump("lane_warp_id");
        }
    }

    /// A store through a pointer (or a pointer moved); the left side's positions are writes, not reads.
    fn assignment(&mut self, n: Node) -> Option<()> {
        let (src, pointer_names, aliases) = (self.src, self.pointer_names, self.aliases);
        let left = n.child_by_field_name("left")?;
        if reseats_pointer(left, src, pointer_names, aliases) {
            // `A += row * K`: the pointer moves, nothing is stored.
            self.reseated.extend(lvalue_base(left, src, aliases));
            return Some(());
        }
        if let Some(b) = lvalue_base(left, src, aliases) {
            self.written.insert(b.clone());
            let op = n.child_by_field_name("operator").map(|o| text(o, src));
            if op == Some("=") {
                self.lhs_positions.insert(strip_parens(left).start_byte());
                if let Some(first) = descendants(left).into_iter().find(|x| {
                    x.kind() == "identifier"
                        && (pointer_names.contains(text(*x, src))
                            || aliases.contains_key(text(*x, src)))
                }) {
                    self.lhs_positions.insert(first.start_byte());
                }
            }
        }
        Some(())
    }

    /// `p[i]++` stores; `p++` moves the pointer.
    fn update(&mut self, n: Node) {
        let (src, pointer_names, aliases) = (self.src, self.pointer_names, self.aliases);
        if let Some(a) = n
            .child_by_field_name("argument")
            .filter(|a| reseats_pointer(*a, src, pointer_names, aliases))
        {
            self.reseated.extend(lvalue_base(a, src, aliases));
        } else if let Some(b) = n
            .child_by_field_name("argument")
            .and_then(|a| lvalue_base(a, src, aliases))
        {
            self.written.insert(b);
        }
    }

    /// A `__shared__` array: its element type, dimensions and static size.
    fn declaration(&mut self, n: Node) {
        let src = self.src;
        let consts = self.consts;
        let is_shared = children(n)
            .iter()
            .any(|c| c.kind() == "type_qualifier" && text(*c, src) == "__shared__")
            || text(n, src).starts_with("__shared__");
        if is_shared {
            let dynamic = children(n)
                .iter()
                .any(|c| c.kind() == "storage_class_specifier" && text(*c, src) == "extern");
            let ty = n
                .child_by_field_name("type")
                .map(|t| text(t, src).to_string())
                .unwrap_or_default();
            for d in children(n)
                .into_iter()
                .filter(|c| c.kind().ends_with("declarator") || c.kind() == "identifier")
            {
                let mut dims = Vec::new();
                let mut bytes = type_size(&ty);
                let mut cur = d;
                let mut nm = None;
                loop {
                    match cur.kind() {
                        "array_declarator" => {
                            match cur.child_by_field_name("size") {
                                Some(s) => {
                                    dims.insert(0, text(s, src).to_string());
                                    bytes =
                                        bytes.zip(eval(s, src, consts)).map(|(b, v)| b * v as u64);
                                }
                                None => {
                                    dims.insert(0, String::new());
                                    bytes = None;
                                }
                            }
                            cur = cur.child_by_field_name("declarator").unwrap_or(cur);
                        }
                        "init_declarator" => {
                            cur = cur.child_by_field_name("declarator").unwrap_or(cur);
                        }
                        "identifier" => {
                            nm = Some(text(cur, src).to_string());
                            break;
                        }
                        _ => break,
                    }
                }
                if let Some(nm) = nm {
                    self.bump(if dynamic {
                        "shared_dynamic"
                    } else {
                        "shared_static"
                    });
                    self.shared.push(SharedArray {
                        name: nm,
                        elem_type: ty.clone(),
                        dims,
                        bytes: if dynamic { None } else { bytes },
                        dynamic,
                        atomic: false,
                        line: line(n),
                    });
                }
            }
        }
    }

    /// Barriers, warp functions, atomics (their targets written), device calls (their non-const pointer arguments written), and the calls with no Metal equivalent.
    fn call(&mut self, n: Node) {
        let (src, pointer_names, aliases) = (self.src, self.pointer_names, self.aliases);
        let device_sigs = self.device_sigs;
        let name = self.name;
        let Some(cname) = call_name(n, src) else {
            return;
        };
        let args: Vec<Node> = n
            .child_by_field_name("arguments")
            .map(|a| children(a).into_iter().filter(|c| c.is_named()).collect())
            .unwrap_or_default();
        if children(n).iter().any(|c| c.kind() == "kernel_call_syntax") {
            self.bump("dynamic_parallelism");
            return;
        }
        match cname.as_str() {
            "__syncthreads" => self.bump("syncthreads"),
            "__syncwarp" => self.bump("syncwarp"),
            "__syncthreads_count" | "__syncthreads_and" | "__syncthreads_or" => {
                self.bump("syncthreads_reduce")
            }
            "__shfl_down_sync" | "__shfl_up_sync" => self.bump("shuffle_down_up"),
            "__shfl_xor_sync" => self.bump("shuffle_xor"),
            "__shfl_sync" => self.bump("shuffle_indexed"),
            "__ballot_sync" | "__any_sync" | "__all_sync" => self.bump("warp_vote"),
            "__activemask" => self.bump("activemask"),
            "__ldg" => self.bump("ldg"),
            "printf" => self.bump("printf"),
            "__threadfence" | "__threadfence_block" | "__threadfence_system" => {
                self.bump("threadfence")
            }
            "clock" | "clock64" => self.bump("clock"),
            "malloc" | "free" => self.bump("device_malloc"),
            c if c == name => self.bump("recursion"),
            c if c.starts_with("__pipeline_") || c.contains("memcpy_async") => {
                self.bump("async_copy")
            }
            c if c.starts_with("tex") || c.starts_with("surf") => self.bump("texture"),
            c if is_atomic(c) => {
                if let Some(b) = args.first().and_then(|a| lvalue_base(*a, src, aliases)) {
                    self.atomic_targets.insert(b.clone());
                    if pointer_names.contains(&b) {
                        self.written.insert(b);
                        self.bump("atomic_global");
                    } else {
                        self.bump("atomic_shared");
                    }
                }
                if matches!(c, "atomicCAS" | "atomicCAS_system") {
                    self.bump("atomic_cas");
                }
            }
            c if c.starts_with("__") && super::rules().metal_functions.contains_key(c) => {
                self.bump("fast_math")
            }
            c if c.ends_with("store_matrix_sync") || c.starts_with("__st") => {
                // wmma::store_matrix_sync(ptr, ...), __stcs(ptr, v): stores through the first argument.
                if c.contains("wmma") || c.ends_with("store_matrix_sync") {
                    self.bump("wmma");
                }
                if let Some(b) = args.first().and_then(|a| lvalue_base(*a, src, aliases)) {
                    self.written.insert(b);
                }
            }
            c => {
                if let Some(sig) = device_sigs.get(c) {
                    self.device_calls.insert(c.to_string());
                    self.bump("device_call");
                    for (a, (ptr, is_const)) in args.iter().zip(sig) {
                        if *ptr
                            && !*is_const
                            && let Some(b) = lvalue_base(*a, src, aliases)
                        {
                            self.written.insert(b);
                        }
                    }
                }
            }
        }
    }

    /// Inline PTX: asynchronous copies, tensor-core instructions, or other assembly.
    fn asm(&mut self, n: Node) {
        let src = self.src;
        let t = text(n, src);
        if t.contains("cp.async") {
            self.bump("async_copy");
        } else if t.contains("mma") || t.contains("ldmatrix") {
            self.bump("mma_asm");
        } else {
            self.bump("inline_asm");
        }
    }

    /// `wmma::` and cooperative groups.
    fn namespace(&mut self, n: Node) {
        let src = self.src;
        match text(n, src) {
            "wmma" => self.bump("wmma"),
            "cooperative_groups" | "cg" => self.bump("cooperative_groups"),
            _ => {}
        }
    }

    /// 16-bit floats, doubles, textures, vector types.
    fn type_name(&mut self, n: Node) {
        let src = self.src;
        match text(n, src) {
            t if let Some(family) = ksearch_model::dialect::half_family(t) => {
                self.bump(match family {
                    ksearch_model::dtype::Dtype::Bfloat16 => "bfloat16",
                    _ => "half",
                })
            }
            "double" => self.bump("double"),
            "cudaTextureObject_t" | "cudaSurfaceObject_t" => self.bump("texture"),
            t if VECTOR_TYPES.contains(&t) => self.bump("vector_type"),
            _ => {}
        }
    }

    /// A pointer (or an alias of one) read, unless it is a write's target.
    fn identifier(&mut self, n: Node) {
        let (src, pointer_names, aliases) = (self.src, self.pointer_names, self.aliases);
        let t = text(n, src);
        if (pointer_names.contains(t) || aliases.contains_key(t))
            && !self.lhs_positions.contains(&n.start_byte())
            && !in_atomic_target(n, src)
        {
            self.read
                .insert(aliases.get(t).cloned().unwrap_or_else(|| t.to_string()));
        }
    }
}

/// A kernel's parameters as declared, each with its first role: a pointer (or a floating-point scalar,
/// which a plan's int32 scalars cannot carry: an input of one element) is an input until the body
/// says otherwise, anything else a scalar.
fn kernel_params(plist: Node, src: &str, template_types: &[String]) -> Vec<Param> {
    children(plist)
        .into_iter()
        .filter(|p| p.kind() == "parameter_declaration")
        .filter_map(|p| param_info(p, src))
        .map(|(name, elem_type, pointer, is_const)| Param {
            role: if pointer || is_float_scalar(&elem_type, template_types) {
                ParamRole::Input
            } else {
                ParamRole::Scalar
            },
            name,
            elem_type,
            pointer,
            is_const,
            atomic: false,
            accumulates: false,
            const_written: false,
            read_after_write: false,
        })
        .collect()
}

fn analyze_kernel(
    f: Node,
    src: &str,
    consts: &BTreeMap<String, i64>,
    device_sigs: &BTreeMap<String, Vec<(bool, bool)>>,
) -> Option<KernelAnalysis> {
    let (name, plist) = function_parts(f, src)?;
    let body = f.child_by_field_name("body")?;
    let TemplateParams {
        ints: template_ints,
        types: template_types,
        other: template_other,
        order: template_order,
    } = template_params(f, src);
    let mut params = kernel_params(plist, src, &template_types);
    let pointer_names: BTreeSet<String> = params
        .iter()
        .filter(|p| p.pointer)
        .map(|p| p.name.clone())
        .collect();
    let aliases = pointer_aliases(body, src, &pointer_names);
    let mut walk = BodyWalk::new(src, &name, consts, device_sigs, &pointer_names, &aliases);
    let launch_bounds = descendants(f)
        .into_iter()
        .find(|n| n.kind() == "launch_bounds")
        .and_then(|lb| lb.named_child(0))
        .and_then(|v| eval(v, src, consts));
    if launch_bounds.is_some() {
        walk.bump("launch_bounds");
    }
    for p in &params {
        if !p.pointer {
            walk.bump("scalar_param");
        }
    }
    for n in descendants(body) {
        walk.visit(n)?;
    }
    let BodyWalk {
        constructs,
        written,
        reseated,
        mut read,
        atomic_targets,
        mut shared,
        device_calls,
        axes,
        gid,
        stride,
        ..
    } = walk;
    // Aliases defined by `T* a = p + off` read `p` at their definition only; that is not a data read.
    for (alias, base) in &aliases {
        if !read_through(body, src, alias) && !read_through_direct(body, src, base, &aliases) {
            read.remove(base);
        }
    }
    // Every access in execution order, for the roles.
    let mut events = Vec::new();
    access_events(
        body,
        src,
        &aliases,
        &pointer_names,
        device_sigs,
        &mut events,
    );
    assign_roles(
        &mut params,
        &events,
        &Accesses {
            written: &written,
            read: &read,
            reseated: &reseated,
            atomic_targets: &atomic_targets,
        },
    );
    for s in shared.iter_mut() {
        s.atomic = atomic_targets.contains(&s.name);
    }
    let shared_bytes = shared
        .iter()
        .filter(|s| !s.dynamic)
        .try_fold(0u64, |acc, s| s.bytes.map(|b| acc + b));
    let guards = find_guards(body, src, &params, consts);
    let mut k = KernelAnalysis {
        name,
        line: line(f),
        end_line: f.end_position().row + 1,
        params,
        template_ints,
        template_types,
        template_other,
        template_order,
        constructs,
        shared,
        shared_bytes,
        launch_bounds,
        device_calls: device_calls.into_iter().collect(),
        axes: axes.into_iter().collect(),
        global_id: gid,
        grid_stride: stride,
        guards,
        concepts: Vec::new(),
        brief: String::new(),
        thread_guard: descendants(body).into_iter().any(|n| {
            n.kind() == "binary_expression"
                && matches!(
                    n.child_by_field_name("operator").map(|o| text(o, src)),
                    Some("<" | ">=")
                )
                && n.child_by_field_name("left")
                    .and_then(|l| builtin_index(strip_parens(l), src))
                    .is_some_and(|(b, _)| b == "threadIdx")
        }),
        def_range: (f.start_byte(), f.end_byte()),
    };
    count_signature_constructs(&mut k);
    k.concepts = concepts_of(&k.constructs);
    k.brief = brief(&k, Target::MlxMetal);
    Some(k)
}

/// What the body does with each pointer, as the walk saw it.
struct Accesses<'a> {
    written: &'a BTreeSet<String>,
    read: &'a BTreeSet<String>,
    reseated: &'a BTreeSet<String>,
    atomic_targets: &'a BTreeSet<String>,
}

/// Each pointer parameter's role. The first access in execution order (`events`) decides what a written
/// pointer is: written first, an output (later reads see the kernel's own writes); updated first (`+=`),
/// an output the host zeroed; read first, in place (the old values come from the caller).
fn assign_roles(params: &mut [Param], events: &[(String, Access)], acc: &Accesses<'_>) {
    let Accesses {
        written,
        read,
        reseated,
        atomic_targets,
    } = *acc;
    for p in params.iter_mut().filter(|p| p.pointer) {
        p.atomic = atomic_targets.contains(&p.name);
        let first = events.iter().find(|(n, _)| n == &p.name).map(|e| e.1);
        // A `const` pointer is never an output: a write the analysis saw is reported, not believed.
        p.const_written = p.is_const && written.contains(&p.name);
        let writes = written.contains(&p.name) && !p.is_const;
        p.role = match (writes, read.contains(&p.name), first) {
            (false, _, _) => ParamRole::Input,
            (true, _, _) if p.atomic => ParamRole::Output,
            (true, true, Some(Access::Read)) => ParamRole::InOut,
            (true, _, Some(Access::Update)) => {
                p.accumulates = true;
                ParamRole::Output
            }
            (true, _, _) => ParamRole::Output,
        };
    }
    for p in params.iter_mut().filter(|p| p.role == ParamRole::InOut) {
        // Moving the pointer would move the input half only; a read, or an update (`x_out[i] = x[i] + v`),
        // after the thread's own write would see the old value.
        let mut wrote = false;
        let mut stale = false;
        for (_, a) in events.iter().filter(|(n, _)| n == &p.name) {
            stale |= wrote && matches!(a, Access::Read | Access::Update);
            wrote |= matches!(a, Access::Write | Access::Update);
        }
        p.read_after_write = reseated.contains(&p.name) || stale;
    }
}

/// Constructs the signature shows: in-place parameters, template types and ints.
fn count_signature_constructs(k: &mut KernelAnalysis) {
    if k.params.iter().any(|p| p.role == ParamRole::InOut) {
        *k.constructs.entry("inplace".into()).or_default() += 1;
    }
    if k.template_types.is_empty() {
    } else {
        *k.constructs.entry("template_type".into()).or_default() += k.template_types.len();
    }
    if !k.template_ints.is_empty() {
        *k.constructs.entry("template_int".into()).or_default() += k.template_ints.len();
    }
}

/// The knowledge concepts the constructs call for, in first-seen order, the launch grid's always first.
fn concepts_of(constructs: &BTreeMap<String, usize>) -> Vec<String> {
    let mut concepts = vec!["launch_grid_counts_threads".to_string()];
    for c in constructs.keys() {
        for id in super::rules().concepts.get(c).into_iter().flatten() {
            if !concepts.contains(id) {
                concepts.push(id.clone());
            }
        }
    }
    concepts
}

/// Is identifier `n` the target pointer of an atomic call (`atomicAdd(&p[i], v)`)?
fn in_atomic_target(n: Node, src: &str) -> bool {
    let mut cur = n;
    while let Some(p) = cur.parent() {
        if p.kind() == "argument_list" {
            let first = p.named_child(0).map(|c| c.id()) == Some(cur.id());
            return first
                && p.parent()
                    .and_then(|c| call_name(c, src))
                    .is_some_and(|c| is_atomic(&c) || is_store(&c));
        }
        if !matches!(
            p.kind(),
            "subscript_expression"
                | "pointer_expression"
                | "parenthesized_expression"
                | "binary_expression"
        ) {
            return false;
        }
        cur = p;
    }
    false
}

/// Whether `alias` is read anywhere other than as an assignment target.
fn read_through(body: Node, src: &str, alias: &str) -> bool {
    descendants(body).into_iter().any(|n| {
        n.kind() == "identifier"
            && text(n, src) == alias
            && !is_assign_target(n)
            && !is_declarator(n)
            && !in_atomic_target(n, src)
    })
}

/// Whether parameter `base` itself is read other than to initialise an alias or as an assignment target.
fn read_through_direct(
    body: Node,
    src: &str,
    base: &str,
    aliases: &BTreeMap<String, String>,
) -> bool {
    descendants(body).into_iter().any(|n| {
        n.kind() == "identifier"
            && text(n, src) == base
            && !is_assign_target(n)
            && !in_atomic_target(n, src)
            && !in_alias_init(n, src, aliases)
    })
}

fn is_declarator(n: Node) -> bool {
    n.parent().is_some_and(|p| {
        matches!(
            p.kind(),
            "pointer_declarator" | "init_declarator" | "array_declarator"
        ) && p.child_by_field_name("declarator").map(|d| d.id()) == Some(n.id())
    })
}

fn is_assign_target(n: Node) -> bool {
    let mut cur = n;
    while let Some(p) = cur.parent() {
        match p.kind() {
            "assignment_expression" => {
                return p.child_by_field_name("left").map(|l| l.id()) == Some(cur.id())
                    && p.child_by_field_name("operator").map(|o| o.kind()) == Some("=");
            }
            "subscript_expression"
            | "parenthesized_expression"
            | "pointer_expression"
            | "field_expression" => {
                if p.kind() == "subscript_expression"
                    && p.child_by_field_name("argument").map(|a| a.id()) != Some(cur.id())
                {
                    return false;
                }
                cur = p;
            }
            _ => return false,
        }
    }
    false
}

fn in_alias_init(n: Node, src: &str, aliases: &BTreeMap<String, String>) -> bool {
    let mut cur = n;
    while let Some(p) = cur.parent() {
        if p.kind() == "init_declarator" {
            return p
                .child_by_field_name("declarator")
                .and_then(|d| {
                    descendants(d)
                        .into_iter()
                        .find(|x| x.kind() == "identifier")
                })
                .is_some_and(|i| aliases.contains_key(text(i, src)));
        }
        if matches!(p.kind(), "compound_statement" | "expression_statement") {
            return false;
        }
        cur = p;
    }
    false
}

/// Scalars an index is compared against: `i < n` where `i` is a global id (or a variable set from one),
/// or `blockIdx.a < rows`, `row >= rows` with `row = blockIdx.a`.
/// A bound made of scalar parameters and constants with `+ - * /`, as a plan expression (`/` on integers
/// is `//` there), or None.
fn extent_expr(
    n: Node,
    src: &str,
    scalars: &BTreeSet<&str>,
    consts: &BTreeMap<String, i64>,
    depth: usize,
) -> Option<String> {
    let n = strip_parens(n);
    if depth > 8 {
        return None;
    }
    if let Some(v) = eval(n, src, consts) {
        return Some(v.to_string());
    }
    match n.kind() {
        "identifier" if scalars.contains(text(n, src)) => Some(text(n, src).to_string()),
        "binary_expression" => {
            let op = text(n.child_by_field_name("operator")?, src);
            let op = match op {
                "*" | "+" | "-" => op,
                "/" => "//",
                _ => return None,
            };
            let l = extent_expr(
                n.child_by_field_name("left")?,
                src,
                scalars,
                consts,
                depth + 1,
            )?;
            let r = extent_expr(
                n.child_by_field_name("right")?,
                src,
                scalars,
                consts,
                depth + 1,
            )?;
            let wrap = |e: String| {
                if e.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    e
                } else {
                    format!("({e})")
                }
            };
            Some(format!("{} {op} {}", wrap(l), wrap(r)))
        }
        _ => None,
    }
}

fn find_guards(
    body: Node,
    src: &str,
    params: &[Param],
    consts: &BTreeMap<String, i64>,
) -> BTreeMap<usize, String> {
    let scalars: BTreeSet<&str> = params
        .iter()
        .filter(|p| !p.pointer)
        .map(|p| p.name.as_str())
        .collect();
    // variable → axis it indexes (global id or block index)
    let mut vars: BTreeMap<String, usize> = BTreeMap::new();
    let axis_of = |v: Node, vars: &BTreeMap<String, usize>| -> Option<usize> {
        let v = strip_parens(v);
        global_id(v, src)
            .or_else(|| tiled_global_id(v, src))
            .or_else(|| match builtin_index(v, src) {
                Some(("blockIdx", a)) => Some(a),
                _ => None,
            })
            .or_else(|| {
                (v.kind() == "identifier")
                    .then(|| vars.get(text(v, src)).copied())
                    .flatten()
            })
    };
    let mut guards = BTreeMap::new();
    for n in descendants(body) {
        match n.kind() {
            "init_declarator" | "assignment_expression" => {
                let (d, v) = if n.kind() == "init_declarator" {
                    (
                        n.child_by_field_name("declarator"),
                        n.child_by_field_name("value"),
                    )
                } else {
                    (
                        n.child_by_field_name("left"),
                        n.child_by_field_name("right"),
                    )
                };
                if let (Some(d), Some(v)) = (d, v)
                    && d.kind() == "identifier"
                    && let Some(a) = axis_of(v, &vars)
                {
                    vars.insert(text(d, src).to_string(), a);
                }
            }
            "binary_expression" => {
                let Some(op) = n.child_by_field_name("operator").map(|o| text(o, src)) else {
                    continue;
                };
                let (Some(l), Some(r)) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("right"),
                ) else {
                    continue;
                };
                let (idx, bound) = match op {
                    "<" | ">=" => (l, r),
                    ">" | "<=" => (r, l),
                    _ => continue,
                };
                let bound = strip_parens(bound);
                // Scalar parameters and constants (`#define N 4096`, literals), alone or in arithmetic
                // (`i < B * T`): the extent as a plan expression.
                let extent = extent_expr(bound, src, &scalars, consts, 0)
                    .filter(|e| e.parse::<i64>().map_or(true, |v| v > 0));
                if let Some(e) = extent
                    && let Some(a) = axis_of(idx, &vars)
                {
                    guards.entry(a).or_insert(e);
                }
            }
            _ => {}
        }
    }
    guards
}

/// What the kernel does and how it maps to MLX on `target`, in a few sentences.
#[expect(
    clippy::too_many_lines,
    reason = "one sentence per property of the kernel, in the order a reader asks"
)]
pub(crate) fn brief(k: &KernelAnalysis, target: Target) -> String {
    let names = |r: ParamRole| {
        k.params
            .iter()
            .filter(|p| p.role == r)
            .map(|p| format!("{} ({})", p.name, p.elem_type))
            .collect::<Vec<_>>()
    };
    let (ins, outs, io, sc) = (
        names(ParamRole::Input),
        names(ParamRole::Output),
        names(ParamRole::InOut),
        names(ParamRole::Scalar),
    );
    let mut s = format!(
        "CUDA kernel `{}` (lines {}-{}): ",
        k.name, k.line, k.end_line
    );
    let list = |v: &[String]| {
        if v.is_empty() {
            "nothing".to_string()
        } else {
            v.join(", ")
        }
    };
    s.push_str(&format!("reads {}; writes {}", list(&ins), list(&outs)));
    if !io.is_empty() {
        s.push_str(&format!("; updates in place {}", io.join(", ")));
    }
    if !sc.is_empty() {
        s.push_str(&format!("; scalars {}", sc.join(", ")));
    }
    s.push_str(".\n");
    let mut how = Vec::new();
    if k.grid_stride {
        how.push("a grid-stride loop over the elements".to_string());
    } else if k.global_id {
        how.push("one thread per element (global index blockIdx*blockDim+threadIdx)".to_string());
    } else if k.uses("block_index") {
        how.push(
            "one block per row or tile (blockIdx picks it, threads cooperate inside)".to_string(),
        );
    }
    if !k.guards.is_empty() {
        let g: Vec<String> = k
            .guards
            .iter()
            .map(|(a, n)| format!("{} < {n}", ["x", "y", "z"][*a]))
            .collect();
        how.push(format!("bounds guards {}", g.join(", ")));
    }
    if !k.shared.is_empty() {
        let bytes = match k.shared_bytes {
            Some(b) => format!("{b} B"),
            None => "size not constant".into(),
        };
        let dynamic = if k.uses("shared_dynamic") {
            ", dynamic extern __shared__"
        } else {
            ""
        };
        how.push(format!(
            "shared memory {} ({bytes}{dynamic})",
            k.shared
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let count = |c: &str| k.constructs.get(c).copied().unwrap_or(0);
    if count("syncthreads") > 0 {
        how.push(format!("{} block barrier(s)", count("syncthreads")));
    }
    let shuffles = count("shuffle_down_up") + count("shuffle_xor") + count("shuffle_indexed");
    if shuffles > 0 {
        how.push(format!(
            "{shuffles} warp shuffle(s) (a warp-level reduction or exchange)"
        ));
    }
    if count("warp_vote") > 0 {
        how.push("warp votes".into());
    }
    if count("atomic_global") + count("atomic_shared") > 0 {
        how.push(format!(
            "atomics ({} on global, {} on shared memory)",
            count("atomic_global"),
            count("atomic_shared")
        ));
    }
    for (c, what) in [
        ("wmma", "tensor cores through wmma"),
        ("mma_asm", "tensor cores through mma.sync PTX"),
        ("async_copy", "asynchronous copies (cp.async)"),
        ("cooperative_groups", "cooperative groups"),
        ("half", "half precision"),
        ("bfloat16", "bfloat16"),
        ("vector_type", "vector types (float4 ...)"),
        ("fast_math", "fast math intrinsics"),
        ("double", "double precision"),
    ] {
        if count(c) > 0 {
            how.push(what.into());
        }
    }
    if let Some(b) = k.launch_bounds {
        how.push(format!("__launch_bounds__({b})"));
    }
    if !k.device_calls.is_empty() {
        how.push(format!("calls {}", k.device_calls.join(", ")));
    }
    if !how.is_empty() {
        s.push_str(&format!("It uses {}.\n", how.join("; ")));
    }
    let concepts = &crate::knowledge::get().concepts;
    s.push_str(&format!("How it maps to {target}:\n"));
    for id in &k.concepts {
        if let Some(c) = concepts.iter().find(|c| &c.id == id) {
            let there = match target {
                Target::MlxCuda if !c.mlx_cuda.is_empty() => c.mlx_cuda.as_str(),
                Target::MlxCuda => c.cuda.as_str(),
                _ => c.metal.as_str(),
            };
            s.push_str(&format!("- {} → {} ({})\n", c.cuda, there, c.constraint));
        }
    }
    s
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Access {
    Read,
    Write,
    Update,
}

/// Accesses to pointer parameters in execution order (an assignment's right side before its target).
fn access_events(
    n: Node,
    src: &str,
    aliases: &BTreeMap<String, String>,
    pointers: &BTreeSet<String>,
    device_sigs: &BTreeMap<String, Vec<(bool, bool)>>,
    out: &mut Vec<(String, Access)>,
) {
    let base_of = |x: Node| lvalue_base(x, src, aliases).filter(|b| pointers.contains(b));
    let rec = |x: Node, out: &mut Vec<(String, Access)>| {
        access_events(x, src, aliases, pointers, device_sigs, out)
    };
    match n.kind() {
        "assignment_expression" => {
            let Some(l) = n.child_by_field_name("left") else {
                return;
            };
            if reseats_pointer(l, src, pointers, aliases) {
                // The pointer moves (`C = C + off`): its own name on the right is no read of its data.
                let moved = base_of(l);
                let mut right = Vec::new();
                if let Some(r) = n.child_by_field_name("right") {
                    rec(r, &mut right);
                }
                out.extend(right.into_iter().filter(|(b, _)| Some(b) != moved.as_ref()));
                return;
            }
            if let Some(r) = n.child_by_field_name("right") {
                rec(r, out);
            }
            match base_of(l) {
                Some(b) => {
                    // Indices are read; the target itself is written (or updated).
                    for c in descendants(l)
                        .into_iter()
                        .filter(|c| c.kind() == "subscript_argument_list")
                    {
                        rec(c, out);
                    }
                    let op = n.child_by_field_name("operator").map(|o| text(o, src));
                    out.push((
                        b,
                        if op == Some("=") {
                            Access::Write
                        } else {
                            Access::Update
                        },
                    ));
                }
                None => rec(l, out),
            }
        }
        "update_expression" => match n
            .child_by_field_name("argument")
            .filter(|a| !reseats_pointer(*a, src, pointers, aliases))
            .and_then(base_of)
        {
            Some(b) => out.push((b, Access::Update)),
            None => {
                for c in children(n) {
                    rec(c, out);
                }
            }
        },
        "call_expression" => {
            let name = call_name(n, src).unwrap_or_default();
            let args: Vec<Node> = n
                .child_by_field_name("arguments")
                .map(|a| children(a).into_iter().filter(|c| c.is_named()).collect())
                .unwrap_or_default();
            for (i, a) in args.iter().enumerate() {
                let writes = (i == 0 && (is_atomic(&name) || is_store(&name)))
                    || device_sigs
                        .get(&name)
                        .and_then(|sig| sig.get(i))
                        .is_some_and(|(ptr, c)| *ptr && !*c);
                match (writes, base_of(*a)) {
                    (true, Some(b)) if is_atomic(&name) => out.push((b, Access::Update)),
                    (true, Some(b)) => out.push((b, Access::Write)),
                    _ => rec(*a, out),
                }
            }
        }
        "init_declarator" => {
            // `T* a = p + off` makes an alias, it reads no data.
            let is_alias = n
                .child_by_field_name("declarator")
                .and_then(|d| {
                    descendants(d)
                        .into_iter()
                        .find(|x| x.kind() == "identifier")
                })
                .is_some_and(|i| aliases.contains_key(text(i, src)));
            if !is_alias && let Some(v) = n.child_by_field_name("value") {
                rec(v, out);
            }
        }
        "identifier" => {
            let t = text(n, src);
            let b = aliases
                .get(t)
                .cloned()
                .or_else(|| pointers.contains(t).then(|| t.to_string()));
            if let Some(b) = b {
                out.push((b, Access::Read));
            }
        }
        _ => {
            for c in children(n) {
                rec(c, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = include_str!("../../../../tests/translate/reduce_shared.cu");

    #[test]
    fn constants_shared_bytes_and_roles() {
        let a = analyze(SRC);
        assert_eq!(a.constants["BLOCK"], 256);
        let k = &a.kernels[0];
        assert_eq!(k.name, "reduce_sum");
        assert_eq!(k.shared[0].bytes, Some(1024));
        let role = |n: &str| k.params.iter().find(|p| p.name == n).unwrap().role;
        assert_eq!(role("in"), ParamRole::Input);
        assert_eq!(role("partial"), ParamRole::Output);
        assert_eq!(role("n"), ParamRole::Scalar);
        assert!(k.global_id && k.guards[&0] == "n");
        assert_eq!(k.constructs["syncthreads"], 2);
    }

    #[test]
    fn every_rules_entry_is_complete() {
        let r = super::super::rules();
        let mut codes: Vec<&str> = r.code.iter().map(|c| c.code.as_str()).collect();
        let n = codes.len();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), n, "codes are unique");
        for c in &r.code {
            assert!(!c.title.is_empty() && !c.fix.is_empty(), "{}", c.code);
        }
        let concepts = &crate::knowledge::get().concepts;
        for ids in r.concepts.values() {
            for id in ids {
                assert!(concepts.iter().any(|c| &c.id == id), "unknown concept {id}");
            }
        }
    }
}
