//! Threadgroup storage of helpers, for Metal. CUDA lets a `__device__` function declare `__shared__`
//! variables (one per block for each instantiation of the function: a block-reduction helper's scratch, a
//! decode step's partial sums); Metal allows threadgroup variables only in a kernel's own scope. So the shared
//! variables of such a helper become the members of a struct over the helper's template parameters, which a
//! kernel calling it declares in threadgroup memory and passes by reference as a last argument; the helper
//! binds the old names to the members, so its body is otherwise unchanged. A helper that calls one with
//! storage holds that storage as a member of its own, so a kernel declares one struct per helper (and
//! template arguments) it calls directly.

use super::analyze::{callee, children, descendants, function_parts, has_qualifier, line, text};
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

/// The name of the parameter (and, in a helper, of the struct) through which storage travels.
pub(crate) const PARAM: &str = "shared_storage";

/// A `__shared__` variable of a helper: its name, element type, qualifiers and array extents (CUDA text,
/// e.g. `[NW][G]`; empty for a scalar).
#[derive(Debug, Clone)]
pub(crate) struct SharedVar {
    pub name: String,
    pub elem: String,
    pub qualifiers: String,
    pub extents: String,
}

/// The storage of a helper called from a function: which helper, with which template arguments (as
/// written at the call, `<T, 128>`; empty for a helper that is not a template), under which name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Use {
    pub callee: String,
    pub targs: String,
    pub name: String,
}

/// What one helper with storage needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct HelperStorage {
    /// `template <typename T, int D>` (the helper's own), or empty.
    pub template_head: String,
    /// The helper's template parameters as arguments, `<T, D>`, or empty.
    pub self_args: String,
    /// The body's `constexpr` declarations the extents need (CUDA text), in source order.
    pub constexprs: Vec<String>,
    pub own: Vec<SharedVar>,
    /// The `__shared__` declarations (node ids), replaced by bindings to the members.
    pub decls: BTreeMap<usize, Vec<SharedVar>>,
    /// The storage of the helpers it calls, held as members.
    pub uses: Vec<Use>,
}

#[derive(Debug, Default)]
pub(crate) struct Storage {
    pub helpers: BTreeMap<String, HelperStorage>,
    /// By function: (line, detail) of what cannot be hoisted there: a call with deduced template
    /// arguments, `extern` (dynamic) shared memory in a helper, a variadic template. Reported when the
    /// function is translated (a header's helper no kernel uses is not).
    pub problems: BTreeMap<String, Vec<(usize, String)>>,
}

impl Storage {
    /// The storage of every `__device__` helper among `top` (file-scope items), helpers calling helpers
    /// included.
    pub fn read(top: &[Node], src: &str) -> Self {
        let mut out = Storage::default();
        let mut fns: Vec<(String, Node, Node)> = Vec::new(); // (name, item, function)
        for c in top.iter().copied() {
            let f = if c.kind() == "template_declaration" {
                children(c)
                    .into_iter()
                    .find(|x| x.kind() == "function_definition")
            } else {
                Some(c).filter(|c| c.kind() == "function_definition")
            };
            let Some(f) = f else { continue };
            if !has_qualifier(f, src, "__device__") || has_qualifier(f, src, "__global__") {
                continue;
            }
            let Some((name, _)) = function_parts(f, src) else {
                continue;
            };
            let mut problems = Vec::new();
            if let Some(h) = own_storage(c, f, src, &mut problems) {
                out.helpers.insert(name.clone(), h);
            }
            out.problems
                .entry(name.clone())
                .or_default()
                .extend(problems);
            fns.push((name, c, f));
        }
        // Helpers calling helpers with storage: until nothing changes (bounded by the number of helpers).
        for _ in 0..=fns.len() {
            let mut changed = false;
            for (name, c, f) in &fns {
                let uses = uses_in(*f, src, &out.helpers, &mut Vec::new());
                if uses.is_empty() {
                    continue;
                }
                let entry = out.helpers.entry(name.clone()).or_insert_with(|| {
                    let mut problems = Vec::new();
                    let h = template_parts(*c, src, &mut problems);
                    out.problems
                        .entry(name.clone())
                        .or_default()
                        .extend(problems);
                    h
                });
                if entry.uses != uses {
                    entry.uses = uses;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // Each problem once (the loop above met the deduced calls on every round), kernels' calls included.
        for c in top.iter().copied() {
            let f = if c.kind() == "template_declaration" {
                children(c)
                    .into_iter()
                    .find(|x| x.kind() == "function_definition")
            } else {
                Some(c).filter(|c| c.kind() == "function_definition")
            };
            if let Some(f) = f
                && let Some((name, _)) = function_parts(f, src)
            {
                let mut problems = Vec::new();
                uses_in(f, src, &out.helpers, &mut problems);
                out.problems.entry(name).or_default().extend(problems);
            }
        }
        for p in out.problems.values_mut() {
            p.sort();
            p.dedup();
        }
        out
    }

    /// The storage `f` (a kernel or helper) needs for the helpers it calls, each with its name.
    pub fn uses(&self, f: Node, src: &str) -> Vec<Use> {
        uses_in(f, src, &self.helpers, &mut Vec::new())
    }

    /// The struct holding helper `name`'s storage, placed before the helper; `metal` renders CUDA text
    /// (types, extents) as Metal.
    pub fn struct_def(&self, name: &str, metal: &dyn Fn(&str) -> String) -> Option<String> {
        let h = self.helpers.get(name)?;
        let mut s = format!(
            "// `{name}`'s __shared__ variables: Metal declares threadgroup memory only in kernels, so each kernel\n\
             // calling `{name}` declares this struct in threadgroup memory and passes it by reference.\n"
        );
        if !h.template_head.is_empty() {
            s.push_str(&metal(&h.template_head));
            s.push('\n');
        }
        s.push_str(&format!("struct {} {{\n", struct_name(name)));
        for c in &h.constexprs {
            // Metal's static members live in the constant address space (as MLX's own kernels write them).
            let c = c.trim().trim_start_matches("static ").trim_start();
            s.push_str(&format!("  static constant {}\n", metal(c)));
        }
        for v in &h.own {
            s.push_str(&format!(
                "  {}{} {}{};\n",
                v.qualifiers,
                metal(&v.elem),
                v.name,
                metal(&v.extents)
            ));
        }
        for u in &h.uses {
            s.push_str(&format!(
                "  {}{} {};\n",
                struct_name(&u.callee),
                metal(&u.targs),
                u.name
            ));
        }
        s.push_str("};\n\n");
        Some(s)
    }

    /// The parameter helper `name` gets: its storage, by reference.
    pub fn param(&self, name: &str) -> Option<String> {
        let h = self.helpers.get(name)?;
        Some(format!(
            "threadgroup {}{}& {PARAM}",
            struct_name(name),
            h.self_args
        ))
    }

    /// What replaces one of helper `name`'s `__shared__` declarations: a reference to each member under
    /// the variable's old name.
    pub fn bindings(
        &self,
        name: &str,
        decl: usize,
        metal: &dyn Fn(&str) -> String,
    ) -> Option<String> {
        let vars = self.helpers.get(name)?.decls.get(&decl)?;
        let lines: Vec<String> = vars
            .iter()
            .map(|v| {
                let ty = format!("threadgroup {}{}", v.qualifiers, metal(&v.elem));
                if v.extents.is_empty() {
                    format!("{ty}& {n} = {PARAM}.{n};", n = v.name)
                } else {
                    format!(
                        "{ty} (&{n}){} = {PARAM}.{n};",
                        metal(&v.extents),
                        n = v.name
                    )
                }
            })
            .collect();
        Some(lines.join(" "))
    }

    /// A kernel's declarations of the storage of the helpers it calls.
    pub fn kernel_decls(uses: &[Use], metal: &dyn Fn(&str) -> String) -> String {
        uses.iter()
            .map(|u| {
                format!(
                    "threadgroup {}{} {}; // the __shared__ variables of `{}` (and of the helpers it calls)\n",
                    struct_name(&u.callee),
                    metal(&u.targs),
                    u.name,
                    u.callee
                )
            })
            .collect()
    }
}

/// The argument a call passes for the storage of `callee` with template arguments `targs`: the kernel's
/// variable, or the member of the calling helper's storage.
pub(crate) fn argument(uses: &[Use], callee: &str, targs: &str, in_helper: bool) -> Option<String> {
    let u = uses
        .iter()
        .find(|u| u.callee == callee && key(&u.targs) == key(targs))?;
    Some(if in_helper {
        format!("{PARAM}.{}", u.name)
    } else {
        u.name.clone()
    })
}

/// The template arguments written at a call (`<T, D>`), or empty.
pub(crate) fn call_targs(call: Node, src: &str) -> String {
    callee(call, src)
        .and_then(|(_, a)| a)
        .map(|a| text(a, src).to_string())
        .unwrap_or_default()
}

fn struct_name(helper: &str) -> String {
    format!("{helper}_threadgroup")
}

fn key(targs: &str) -> String {
    targs.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The helper's template head and its parameters as arguments.
fn template_parts(item: Node, src: &str, problems: &mut Vec<(usize, String)>) -> HelperStorage {
    let mut h = HelperStorage::default();
    if item.kind() != "template_declaration" {
        return h;
    }
    let Some(params) = item.child_by_field_name("parameters") else {
        return h;
    };
    let mut names = Vec::new();
    for p in children(params).into_iter().filter(|p| p.is_named()) {
        if p.kind().starts_with("variadic") {
            problems.push((line(p), "a variadic template".into()));
        }
        let name = p
            .child_by_field_name("name")
            .or_else(|| p.child_by_field_name("declarator"))
            .or_else(|| {
                children(p)
                    .into_iter()
                    .rev()
                    .find(|x| x.kind() == "type_identifier" || x.kind() == "identifier")
            });
        if let Some(n) = name {
            names.push(text(n, src).to_string());
        }
    }
    h.template_head = format!("template {}", text(params, src));
    h.self_args = format!("<{}>", names.join(", "));
    h
}

/// A helper's own `__shared__` variables, or None when it declares none.
fn own_storage(
    item: Node,
    f: Node,
    src: &str,
    problems: &mut Vec<(usize, String)>,
) -> Option<HelperStorage> {
    let body = f.child_by_field_name("body")?;
    let mut h = HelperStorage::default();
    let mut last = 0;
    for d in descendants(body) {
        if d.kind() != "declaration" || !is_shared(d, src) {
            continue;
        }
        if children(d)
            .iter()
            .any(|c| c.kind() == "storage_class_specifier" && text(*c, src) == "extern")
        {
            problems.push((
                line(d),
                "`extern __shared__` (dynamic shared memory) in a helper".into(),
            ));
            continue;
        }
        let Some(ty) = d.child_by_field_name("type") else {
            continue;
        };
        let qualifiers: String = children(d)
            .into_iter()
            .filter(|c| c.kind() == "type_qualifier" && !text(*c, src).starts_with("__"))
            .map(|c| format!("{} ", text(c, src)))
            .collect();
        let mut vars = Vec::new();
        for decl in children(d)
            .into_iter()
            .filter(|c| c.is_named() && c.id() != ty.id() && c.kind() != "type_qualifier")
            .filter(|c| c.kind() != "storage_class_specifier")
        {
            let Some(name) = descendants(decl)
                .into_iter()
                .filter(|x| x.kind() == "identifier")
                .min_by_key(|x| x.start_byte())
            else {
                continue;
            };
            let name_text = text(name, src).to_string();
            let extents = src[name.end_byte()..decl.end_byte()].trim().to_string();
            vars.push(SharedVar {
                name: name_text,
                elem: text(ty, src).to_string(),
                qualifiers: qualifiers.clone(),
                extents,
            });
        }
        h.own.extend(vars.iter().cloned());
        h.decls.insert(d.id(), vars);
        last = last.max(d.start_byte());
    }
    if h.own.is_empty() {
        return None;
    }
    let t = template_parts(item, src, problems);
    (h.template_head, h.self_args) = (t.template_head, t.self_args);
    h.constexprs = needed_constexprs(body, src, last, &h.own);
    Some(h)
}

fn is_shared(d: Node, src: &str) -> bool {
    children(d)
        .iter()
        .any(|c| c.kind() == "type_qualifier" && text(*c, src) == "__shared__")
}

/// The body-level `constexpr` declarations before byte `before` that the extents use, directly or through
/// one another.
fn needed_constexprs(body: Node, src: &str, before: usize, own: &[SharedVar]) -> Vec<String> {
    let decls: Vec<(BTreeSet<String>, String)> = children(body)
        .into_iter()
        .filter(|d| d.kind() == "declaration" && d.start_byte() < before)
        .map(|d| text(d, src))
        .filter(|t| words(t).any(|w| w == "constexpr"))
        .map(|t| {
            let declared = t
                .split(',')
                .filter_map(|part| part.split('=').next())
                .filter_map(|lhs| words(lhs).last())
                .map(str::to_string)
                .collect();
            (declared, t.to_string())
        })
        .collect();
    let mut wanted: BTreeSet<String> = own
        .iter()
        .flat_map(|v| words(&v.extents).map(str::to_string).collect::<Vec<_>>())
        .collect();
    let mut keep = vec![false; decls.len()];
    // Backwards: a declaration kept makes the names its initialisers use wanted too.
    for (i, (declared, t)) in decls.iter().enumerate().rev() {
        if declared.iter().any(|n| wanted.contains(n)) {
            keep[i] = true;
            wanted.extend(words(t).map(str::to_string));
        }
    }
    decls
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|((_, t), _)| t)
        .collect()
}

fn words(t: &str) -> impl Iterator<Item = &str> {
    t.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// The calls in `f` of helpers with storage, one `Use` per helper and template arguments, named in
/// order (`reduce_tg`, then `reduce_tg1` for other template arguments of the same helper); a call whose
/// template arguments are deduced cannot name the struct: a problem.
fn uses_in(
    f: Node,
    src: &str,
    helpers: &BTreeMap<String, HelperStorage>,
    problems: &mut Vec<(usize, String)>,
) -> Vec<Use> {
    let mut out: Vec<Use> = Vec::new();
    let Some(body) = f.child_by_field_name("body") else {
        return out;
    };
    let mut calls: Vec<Node> = descendants(body)
        .into_iter()
        .filter(|n| n.kind() == "call_expression")
        .collect();
    calls.sort_by_key(|n| n.start_byte());
    for n in calls {
        let Some((callee, _)) = callee(n, src) else {
            continue;
        };
        let Some(h) = helpers.get(&callee) else {
            continue;
        };
        let targs = call_targs(n, src);
        if targs.is_empty() && !h.template_head.is_empty() {
            problems.push((
                line(n),
                format!("`{callee}` (a template with __shared__ variables) is called with deduced template arguments"),
            ));
            continue;
        }
        if out
            .iter()
            .any(|u| u.callee == callee && key(&u.targs) == key(&targs))
        {
            continue;
        }
        let same = out.iter().filter(|u| u.callee == callee).count();
        let name = if same == 0 {
            format!("{callee}_tg")
        } else {
            format!("{callee}_tg{same}")
        };
        out.push(Use {
            callee,
            targs,
            name,
        });
    }
    out
}
