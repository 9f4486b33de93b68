//! Host `<<<grid, block, smem>>>` launches → the plan's launch fields. MLX's `grid` counts threads, so
//! a launch of G blocks of B threads becomes grid G*B; host variables passed as kernel scalars are
//! renamed to the kernel's parameter names, which become the plan's scalars and dims.

use super::analyze::{KernelAnalysis, children, descendants, eval, line, parse_int, text};
use serde::Serialize;
use std::collections::BTreeMap;
use tree_sitter::Node;

#[derive(Debug, Clone, Serialize)]
pub struct HostLaunch {
    pub kernel: String,
    pub line: usize,
    /// Threads per axis as plan expressions, when every part converted.
    pub grid: Option<[String; 3]>,
    pub threadgroup: Option<[String; 3]>,
    /// Dynamic shared memory bytes (third launch argument) as a plan expression.
    pub shared_memory: Option<String>,
    /// Values of the kernel's template arguments, in order, where they are integer constants.
    pub template_values: Vec<Option<i64>>,
    /// Names of the host tensors passed for each kernel parameter (identifiers only).
    pub args: Vec<Option<String>>,
    /// Why a part could not be converted.
    pub problems: Vec<String>,
}

struct Ctx<'a> {
    src: &'a str,
    consts: &'a BTreeMap<String, i64>,
    /// host variable → kernel scalar parameter name
    scalars: BTreeMap<String, String>,
    /// host local variable → its initialiser
    locals: BTreeMap<String, Node<'a>>,
}

pub(crate) fn host_launches(
    root: Node,
    src: &str,
    consts: &BTreeMap<String, i64>,
    kernels: &[KernelAnalysis],
) -> Vec<HostLaunch> {
    let mut out = Vec::new();
    for call in descendants(root) {
        if call.kind() != "call_expression" {
            continue;
        }
        let Some(cfg) = children(call)
            .into_iter()
            .find(|c| c.kind() == "kernel_call_syntax")
        else {
            continue;
        };
        let Some(mut f) = call.child_by_field_name("function") else {
            continue;
        };
        // ns::kernel<T><<<...>>>: the last part of a qualified name.
        while f.kind() == "qualified_identifier" {
            match f.child_by_field_name("name") {
                Some(n) => f = n,
                None => break,
            }
        }
        let (name, targs) = match f.kind() {
            "template_function" => (
                f.child_by_field_name("name")
                    .map(|n| text(n, src))
                    .unwrap_or(""),
                f.child_by_field_name("arguments"),
            ),
            _ => (text(f, src), None),
        };
        let Some(k) = kernels.iter().find(|k| k.name == name) else {
            continue;
        };
        // Launches from device code are dynamic parallelism, reported by the translator.
        if k.def_range.0 <= call.start_byte() && call.end_byte() <= k.def_range.1 {
            continue;
        }
        let args: Vec<Node> = call
            .child_by_field_name("arguments")
            .map(|a| children(a).into_iter().filter(|c| c.is_named()).collect())
            .unwrap_or_default();
        let mut ctx = Ctx {
            src,
            consts,
            scalars: BTreeMap::new(),
            locals: host_locals(call, src),
        };
        let mut arg_names = Vec::new();
        for (a, p) in args.iter().zip(&k.params) {
            let name = (a.kind() == "identifier").then(|| text(*a, src).to_string());
            if !p.pointer
                && let Some(n) = &name
            {
                ctx.scalars.insert(n.clone(), p.name.clone());
            }
            arg_names.push(name);
        }
        let template_values = targs
            .map(|t| {
                children(t)
                    .into_iter()
                    .filter(|c| c.is_named())
                    .map(|c| eval(c, src, consts))
                    .collect()
            })
            .unwrap_or_default();
        let cfg_args: Vec<Node> = children(cfg).into_iter().filter(|c| c.is_named()).collect();
        let mut problems = Vec::new();
        let blocks = cfg_args.first().map(|g| dim3(*g, &ctx));
        let threads = cfg_args.get(1).map(|b| dim3(*b, &ctx));
        let threadgroup = match &threads {
            Some(Ok(t)) => Some(t.clone()),
            Some(Err(e)) => {
                problems.push(format!("block size: {e}"));
                None
            }
            None => None,
        };
        let grid = match (&blocks, &threadgroup) {
            (Some(Ok(g)), Some(t)) => Some([0, 1, 2].map(|i| times(&g[i], &t[i]))),
            (Some(Err(e)), _) => {
                problems.push(format!("grid size: {e}"));
                None
            }
            _ => None,
        };
        let shared_memory = match cfg_args.get(2) {
            Some(s) => match expr(*s, &ctx, 0) {
                Ok(e) if e == "0" => None,
                Ok(e) => Some(e),
                Err(e) => {
                    problems.push(format!("shared memory: {e}"));
                    None
                }
            },
            None => None,
        };
        // Constant parts become numbers: `(256 // 32) * 4` is 32.
        let fold = |e: String| -> String {
            ksearch_model::expr::Expr::parse(&e)
                .ok()
                .and_then(|x| x.eval_int(&ksearch_model::expr::Env::new()).ok())
                .map(|v| v.to_string())
                .unwrap_or(e)
        };
        let grid = grid.map(|g| g.map(fold));
        let threadgroup = threadgroup.map(|t| t.map(fold));
        let shared_memory = shared_memory.map(fold);
        out.push(HostLaunch {
            kernel: name.to_string(),
            line: line(call),
            grid,
            threadgroup,
            shared_memory,
            template_values,
            args: arg_names,
            problems,
        });
    }
    out
}

/// Local variables of the host function around `call`: name → initialiser (the last one wins).
fn host_locals<'a>(call: Node<'a>, src: &str) -> BTreeMap<String, Node<'a>> {
    let mut f = call;
    while let Some(p) = f.parent() {
        f = p;
        if p.kind() == "function_definition" {
            break;
        }
    }
    let mut locals = BTreeMap::new();
    for n in descendants(f) {
        if n.start_byte() >= call.start_byte() {
            break;
        }
        if n.kind() == "init_declarator"
            && let (Some(d), Some(v)) = (
                n.child_by_field_name("declarator"),
                n.child_by_field_name("value"),
            )
            && d.kind() == "identifier"
        {
            locals.insert(text(d, src).to_string(), v);
        }
        // dim3 block(THREADS): C++ parses it as a function declaration; keep the "parameters" as text.
        if n.kind() == "declaration"
            && n.child_by_field_name("type")
                .is_some_and(|t| text(t, src) == "dim3")
            && let Some(d) = n.child_by_field_name("declarator")
            && d.kind() == "function_declarator"
            && let (Some(name), Some(params)) = (
                d.child_by_field_name("declarator"),
                d.child_by_field_name("parameters"),
            )
        {
            locals.insert(text(name, src).to_string(), params);
        }
        // dim3 block(16, 16): a declarator with an argument list
        if n.kind() == "init_declarator"
            && let (Some(d), None) = (
                n.child_by_field_name("declarator"),
                n.child_by_field_name("value"),
            )
            && let Some(args) = children(n)
                .into_iter()
                .find(|c| c.kind() == "argument_list")
        {
            locals.insert(text(d, src).to_string(), args);
        }
    }
    locals
}

fn times(g: &str, t: &str) -> String {
    match (g, t) {
        ("1", t) => t.to_string(),
        (g, "1") => g.to_string(),
        (g, t) => format!("{} * {}", paren(g), paren(t)),
    }
}

fn paren(e: &str) -> String {
    if e.chars().all(|c| c.is_alphanumeric() || c == '_') || wrapped(e) {
        e.to_string()
    } else {
        format!("({e})")
    }
}

/// A `dim3` or integer launch argument → three plan expressions.
fn dim3(n: Node, ctx: &Ctx) -> Result<[String; 3], String> {
    let src = ctx.src;
    let components = |list: Node| -> Result<[String; 3], String> {
        let parts: Vec<Node> = children(list)
            .into_iter()
            .filter(|c| c.is_named())
            .collect();
        let mut out = ["1".to_string(), "1".to_string(), "1".to_string()];
        for (i, p) in parts.iter().take(3).enumerate() {
            out[i] = expr(*p, ctx, 0)?;
        }
        Ok(out)
    };
    match n.kind() {
        "call_expression"
            if text(n.child_by_field_name("function").unwrap_or(n), src) == "dim3" =>
        {
            components(
                n.child_by_field_name("arguments")
                    .ok_or("dim3 without arguments")?,
            )
        }
        "initializer_list" | "argument_list" => components(n),
        "parameter_list" => {
            // The extents of a `dim3 b(X, Y)` that parsed as a declaration: re-read each as an expression.
            let mut out = ["1".to_string(), "1".to_string(), "1".to_string()];
            for (i, p) in children(n)
                .into_iter()
                .filter(|c| c.is_named())
                .take(3)
                .enumerate()
            {
                let snippet = format!("int __v = ({});", text(p, src));
                let tree = super::analyze::parse(&snippet);
                let v = descendants(tree.root_node())
                    .into_iter()
                    .find(|x| x.kind() == "init_declarator")
                    .and_then(|d| d.child_by_field_name("value"))
                    .ok_or_else(|| format!("`{}` in a dim3", text(p, src)))?;
                let sub = Ctx {
                    src: &snippet,
                    consts: ctx.consts,
                    scalars: ctx.scalars.clone(),
                    locals: BTreeMap::new(),
                };
                out[i] = expr(v, &sub, 1)?;
            }
            Ok(out)
        }
        "compound_literal_expression" => {
            components(n.child_by_field_name("value").ok_or("empty dim3")?)
        }
        "identifier" => {
            let name = text(n, src);
            match ctx.locals.get(name) {
                Some(v)
                    if matches!(
                        v.kind(),
                        "parameter_list"
                            | "argument_list"
                            | "initializer_list"
                            | "call_expression"
                            | "compound_literal_expression"
                    ) =>
                {
                    dim3(*v, ctx)
                }
                _ => Ok([expr(n, ctx, 0)?, "1".into(), "1".into()]),
            }
        }
        _ => Ok([expr(n, ctx, 0)?, "1".into(), "1".into()]),
    }
}

/// A host integer expression → the plan's expression language (`/` on ints becomes `//`).
fn expr(n: Node, ctx: &Ctx, depth: usize) -> Result<String, String> {
    let src = ctx.src;
    if depth > 8 {
        return Err("expression too deeply nested".into());
    }
    if let Some(v) = eval(n, src, ctx.consts) {
        return Ok(v.to_string());
    }
    match n.kind() {
        "number_literal" => parse_int(text(n, src))
            .map(|v| v.to_string())
            .ok_or_else(|| format!("`{}` is not an integer", text(n, src))),
        "identifier" => {
            let name = text(n, src);
            if let Some(p) = ctx.scalars.get(name) {
                return Ok(p.clone());
            }
            if let Some(v) = ctx.locals.get(name) {
                return expr(*v, ctx, depth + 1).map(|e| paren(&e));
            }
            Err(format!(
                "`{name}` is neither a scalar argument of the kernel nor a constant"
            ))
        }
        "parenthesized_expression" => {
            let inner = n.named_child(0).ok_or("empty parentheses")?;
            Ok(paren(&expr(inner, ctx, depth + 1)?))
        }
        "field_expression" => {
            // block.x of a `dim3 block(...)`
            let arg = n.child_by_field_name("argument").ok_or("bad field")?;
            let field = n
                .child_by_field_name("field")
                .map(|f| text(f, src))
                .unwrap_or("");
            let i = ["x", "y", "z"]
                .iter()
                .position(|f| *f == field)
                .ok_or_else(|| format!("`{}` in a launch expression", text(n, src)))?;
            if arg.kind() == "identifier" && ctx.locals.contains_key(text(arg, src)) {
                let d = dim3(arg, ctx)?;
                return Ok(paren(&d[i]));
            }
            Err(format!("`{}` in a launch expression", text(n, src)))
        }
        "cast_expression" => expr(
            n.child_by_field_name("value").ok_or("empty cast")?,
            ctx,
            depth + 1,
        ),
        "binary_expression" => {
            let l = expr(
                n.child_by_field_name("left").ok_or("bad expression")?,
                ctx,
                depth + 1,
            )?;
            let r = expr(
                n.child_by_field_name("right").ok_or("bad expression")?,
                ctx,
                depth + 1,
            )?;
            let op = text(
                n.child_by_field_name("operator").ok_or("bad expression")?,
                src,
            );
            let op = match op {
                "+" | "-" | "*" | "%" => op,
                "/" => "//",
                _ => return Err(format!("operator `{op}` in a launch expression")),
            };
            Ok(format!("{l} {op} {r}"))
        }
        "call_expression" => {
            let f = n
                .child_by_field_name("function")
                .map(|f| text(f, src))
                .unwrap_or("");
            let args: Vec<String> = n
                .child_by_field_name("arguments")
                .map(|a| {
                    children(a)
                        .into_iter()
                        .filter(|c| c.is_named())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .into_iter()
                .map(|a| expr(a, ctx, depth + 1))
                .collect::<Result<_, _>>()?;
            let lower = f.to_lowercase();
            match (lower.as_str(), args.as_slice()) {
                ("min" | "std::min", [a, b]) => Ok(format!("min({a}, {b})")),
                ("max" | "std::max", [a, b]) => Ok(format!("max({a}, {b})")),
                (l, [a, b])
                    if l.contains("div")
                        && (l.contains("ceil") || l.contains("up") || l.starts_with("cdiv")) =>
                {
                    Ok(format!("({a} + {b} - 1) // {b}"))
                }
                _ => Err(format!("call `{f}` in a launch expression")),
            }
        }
        _ => Err(format!("`{}` in a launch expression", text(n, src))),
    }
}

/// `(...)` whose outer parentheses enclose the whole expression.
fn wrapped(e: &str) -> bool {
    if !(e.starts_with('(') && e.ends_with(')')) {
        return false;
    }
    let mut depth = 0;
    for (i, c) in e.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 && i != e.len() - 1 {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}
