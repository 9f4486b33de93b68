//! Threadgroup storage of helpers, for Metal. CUDA lets a `__device__` function declare `__shared__`
//! variables (one per block for each instantiation of the function: a block-reduction helper's scratch, a
//! decode step's partial sums); Metal allows threadgroup variables only in a kernel's own scope. So the shared
//! variables of such a helper become the members of a struct over the helper's template parameters, which a
//! kernel calling it declares in threadgroup memory and passes by reference as a last argument; the helper
//! binds the old names to the members, so its body is otherwise unchanged. A helper that calls one with
//! storage holds that storage as a member of its own, so a kernel declares one struct per helper (and
//! template arguments) it calls directly.
//!
//! One difference from CUDA: a helper reached along two call paths (directly and through another helper)
//! gets one copy per path, where CUDA has one per block. Helpers that keep nothing in shared memory between
//! calls (the usual ones) compute the same; the copies cost threadgroup memory, which the checker counts.
//! What cannot be named this way is reported (T037): a call whose template arguments are deduced, a local
//! of the kernel in the template arguments, `extern __shared__` or a shared pointer in a helper, a helper
//! defined twice (overloads, namespaces) or after its caller.

use super::analyze::{callee, children, descendants, function_parts, has_qualifier, line, text};
use super::emit::{declared_name, item_function, words};
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

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
    /// Template parameters, and how many of them have no default.
    total: usize,
    required: usize,
    /// The struct's name (`NAME_threadgroup`, unless the source uses that name).
    pub struct_name: String,
    /// The body's constant declarations the extents and the nested storage need (CUDA text), in order.
    pub constexprs: Vec<String>,
    pub own: Vec<SharedVar>,
    /// The `__shared__` declarations (node ids), replaced by bindings to the members.
    pub decls: BTreeMap<usize, Vec<SharedVar>>,
    /// The storage of the helpers it calls, held as members.
    pub uses: Vec<Use>,
    /// Where its definition starts (a member's type must be defined before the struct holding it).
    start: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Storage {
    pub helpers: BTreeMap<String, HelperStorage>,
    /// By function: (line, detail) of what cannot be hoisted there. Reported when the function is
    /// translated (a header's helper no kernel uses is not).
    pub problems: BTreeMap<String, Vec<(usize, String)>>,
    /// The parameter (and helper-side prefix) storage travels by: `shared_storage`, unless the source uses it.
    pub param: String,
    /// Every identifier of the source: generated names avoid them.
    taken: BTreeSet<String>,
    /// What each kernel calls, as `read` found it (for its declarations and arguments).
    kernel_uses: BTreeMap<String, Vec<Use>>,
}

/// A function of the file: its name, the file-scope item holding it, the definition, whether a kernel.
struct Function<'t> {
    name: String,
    item: Node<'t>,
    def: Node<'t>,
    kernel: bool,
}

fn functions<'t>(top: &[Node<'t>], src: &str) -> Vec<Function<'t>> {
    let mut out = Vec::new();
    for c in top.iter().copied() {
        let Some(f) = item_function(c) else { continue };
        let kernel = has_qualifier(f, src, "__global__");
        if !kernel && !has_qualifier(f, src, "__device__") {
            continue;
        }
        if let Some((name, _)) = function_parts(f, src) {
            out.push(Function {
                name,
                item: c,
                def: f,
                kernel,
            });
        }
    }
    out
}

impl Storage {
    /// The storage of every `__device__` helper among `top` (file-scope items), helpers calling helpers
    /// included, and what cannot be hoisted.
    pub fn read(top: &[Node], src: &str) -> Self {
        let taken: BTreeSet<String> = words(src).map(str::to_string).collect();
        let mut out = Storage {
            param: fresh("shared_storage", &taken),
            taken,
            ..Default::default()
        };
        let fns = functions(top, src);
        let mut defined: BTreeMap<&str, usize> = BTreeMap::new();
        for f in fns.iter().filter(|f| !f.kernel) {
            *defined.entry(f.name.as_str()).or_default() += 1;
        }
        for f in fns.iter().filter(|f| !f.kernel) {
            let mut problems = Vec::new();
            if let Some(mut h) = own_storage(f.item, f.def, src, &mut problems) {
                if defined[f.name.as_str()] > 1 {
                    problems.push((
                        line(f.def),
                        format!("`{}` is defined more than once (overloads or namespaces) and has __shared__ variables", f.name),
                    ));
                } else {
                    h.struct_name = fresh(&format!("{}_threadgroup", f.name), &out.taken);
                    out.helpers.insert(f.name.clone(), h);
                }
            }
            out.problem(&f.name, problems);
        }
        // Helpers calling helpers with storage: until nothing changes (bounded by the number of helpers).
        for _ in 0..=fns.len() {
            let mut changed = false;
            for f in fns.iter().filter(|f| !f.kernel) {
                let uses = out.uses_of(f.def, src, &mut Vec::new());
                if defined[f.name.as_str()] > 1 {
                    if !uses.is_empty() {
                        out.problem(
                            &f.name,
                            vec![(
                                line(f.def),
                                format!("`{}` is defined more than once (overloads or namespaces) and calls helpers with __shared__ variables", f.name),
                            )],
                        );
                    }
                    continue;
                }
                if uses.is_empty() {
                    continue;
                }
                if !out.helpers.contains_key(&f.name) {
                    let mut problems = Vec::new();
                    let mut h = template_parts(f.item, src, &mut problems);
                    h.start = f.def.start_byte();
                    h.struct_name = fresh(&format!("{}_threadgroup", f.name), &out.taken);
                    out.helpers.insert(f.name.clone(), h);
                    out.problem(&f.name, problems);
                }
                let h = out.helpers.get_mut(&f.name).expect("inserted above");
                if h.uses != uses {
                    h.uses = uses;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for f in &fns {
            // The constants the struct needs, now that its members are known.
            if let Some(h) = out.helpers.get_mut(&f.name)
                && let Some(body) = f.def.child_by_field_name("body")
            {
                let mut wanted: BTreeSet<String> = h
                    .own
                    .iter()
                    .flat_map(|v| words(&v.extents).map(str::to_string).collect::<Vec<_>>())
                    .collect();
                wanted.extend(
                    h.uses
                        .iter()
                        .flat_map(|u| words(&u.targs).map(str::to_string).collect::<Vec<_>>()),
                );
                h.constexprs = needed_constants(body, src, wanted);
            }
            let mut problems = Vec::new();
            let uses = out.uses_of(f.def, src, &mut problems);
            out.placement(f, &uses, src, &mut problems);
            out.problem(&f.name, problems);
            if f.kernel {
                out.kernel_uses.insert(f.name.clone(), uses);
            }
        }
        for p in out.problems.values_mut() {
            p.sort();
            p.dedup();
        }
        out
    }

    fn problem(&mut self, name: &str, problems: Vec<(usize, String)>) {
        if !problems.is_empty() {
            self.problems
                .entry(name.to_string())
                .or_default()
                .extend(problems);
        }
    }

    /// Where `f`'s uses of storage cannot be placed: a kernel declares its storage first, so its template
    /// arguments may name no local of the kernel; a helper's struct holds its callees' structs, so those
    /// must be defined before it, and its template arguments may name only the helper's constants.
    fn placement(
        &self,
        f: &Function,
        uses: &[Use],
        src: &str,
        problems: &mut Vec<(usize, String)>,
    ) {
        let Some(body) = f.def.child_by_field_name("body") else {
            return;
        };
        let locals = local_names(body, src);
        let constants: BTreeSet<String> = self
            .helpers
            .get(&f.name)
            .map(|h| {
                h.constexprs
                    .iter()
                    .flat_map(|c| {
                        unqualified(c)
                            .split(',')
                            .filter_map(|part| words(part.split('=').next()?).last())
                            .map(str::to_string)
                            .collect::<Vec<_>>()
                    })
                    .collect()
            })
            .unwrap_or_default();
        for u in uses {
            let named: Vec<&str> = words(&u.targs)
                .filter(|w| locals.contains(*w) && (f.kernel || !constants.contains(*w)))
                .collect();
            if let Some(w) = named.first() {
                problems.push((
                    line(f.def),
                    format!(
                        "the template arguments `{}` of `{}` name `{w}`, a local of `{}` that the storage declared for it cannot see",
                        u.targs, u.callee, f.name
                    ),
                ));
            }
            if !f.kernel
                && let Some(callee) = self.helpers.get(&u.callee)
                && callee.start > f.def.start_byte()
            {
                problems.push((
                    line(f.def),
                    format!("`{}` is defined after `{}`, which calls it (its storage must be defined first)", u.callee, f.name),
                ));
            }
        }
    }

    /// The storage kernel `name` needs for the helpers it calls, each with its name.
    pub fn kernel_uses(&self, name: &str) -> Vec<Use> {
        self.kernel_uses.get(name).cloned().unwrap_or_default()
    }

    /// The calls in `f` of helpers with storage, one `Use` per helper and template arguments, named in
    /// order (`reduce_tg`, then `reduce_tg1` for other template arguments of the same helper); a call whose
    /// template arguments are deduced, wholly or in part, cannot name the struct: a problem.
    fn uses_of(&self, f: Node, src: &str, problems: &mut Vec<(usize, String)>) -> Vec<Use> {
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
            let Some(h) = self.helpers.get(&callee) else {
                continue;
            };
            let mut targs = call_targs(n, src);
            if targs.is_empty() && h.total > 0 {
                targs = "<>".into(); // every template parameter defaulted: the struct's type is `S<>`
            }
            // The template arguments written, counted on the syntax tree (`f<(N < 4), T>` is two).
            let given = super::analyze::callee(n, src)
                .and_then(|(_, a)| a)
                .map_or(0, |a| children(a).iter().filter(|c| c.is_named()).count());
            if given < h.required && h.total > 0 {
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
            let base = if same == 0 {
                format!("{callee}_tg")
            } else {
                format!("{callee}_tg{same}")
            };
            out.push(Use {
                callee,
                targs,
                name: fresh(&base, &self.taken),
            });
        }
        out
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
        s.push_str(&format!("struct {} {{\n", h.struct_name));
        for c in &h.constexprs {
            // Metal's static members live in the constant address space (as MLX's own kernels write them).
            s.push_str(&format!(
                "  static constant constexpr {}\n",
                metal(&unqualified(c))
            ));
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
            let callee = &self.helpers.get(&u.callee)?.struct_name;
            s.push_str(&format!("  {callee}{} {};\n", metal(&u.targs), u.name));
        }
        s.push_str("};\n\n");
        Some(s)
    }

    /// The parameter helper `name` gets: its storage, by reference.
    pub fn param(&self, name: &str) -> Option<String> {
        let h = self.helpers.get(name)?;
        Some(format!(
            "threadgroup {}{}& {}",
            h.struct_name, h.self_args, self.param
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
                    format!("{ty}& {n} = {p}.{n};", n = v.name, p = self.param)
                } else {
                    format!(
                        "{ty} (&{n}){} = {p}.{n};",
                        metal(&v.extents),
                        n = v.name,
                        p = self.param
                    )
                }
            })
            .collect();
        Some(lines.join(" "))
    }

    /// A kernel's declarations of the storage of the helpers it calls.
    pub fn kernel_decls(&self, uses: &[Use], metal: &dyn Fn(&str) -> String) -> String {
        uses.iter()
            .filter_map(|u| {
                Some(format!(
                    "threadgroup {}{} {}; // the __shared__ variables of `{}` (and of the helpers it calls)\n",
                    self.helpers.get(&u.callee)?.struct_name,
                    metal(&u.targs),
                    u.name,
                    u.callee
                ))
            })
            .collect()
    }
}

/// The argument a call passes for the storage of `callee` with template arguments `targs`: the kernel's
/// variable, or (`param`: in a helper) the member of the calling helper's storage.
pub(crate) fn argument(
    uses: &[Use],
    callee: &str,
    targs: &str,
    param: Option<&str>,
) -> Option<String> {
    let u = uses
        .iter()
        .find(|u| u.callee == callee && key(&u.targs) == key(targs))?;
    Some(match param {
        Some(p) => format!("{p}.{}", u.name),
        None => u.name.clone(),
    })
}

/// The template arguments written at a call (`<T, D>`), or empty.
pub(crate) fn call_targs(call: Node, src: &str) -> String {
    callee(call, src)
        .and_then(|(_, a)| a)
        .map(|a| text(a, src).to_string())
        .unwrap_or_default()
}

/// `base`, or `base_`, `base__`, ...: the first the source does not use.
fn fresh(base: &str, taken: &BTreeSet<String>) -> String {
    let mut name = base.to_string();
    while taken.contains(&name) {
        name.push('_');
    }
    name
}

/// Template arguments compared without spaces; `<>` (every parameter defaulted) as none written.
fn key(targs: &str) -> String {
    let k: String = targs.chars().filter(|c| !c.is_whitespace()).collect();
    if k == "<>" { String::new() } else { k }
}

/// The helper's template head, its parameters as arguments, and how many have no default.
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
        h.total += 1;
        if !p.kind().starts_with("optional") {
            h.required += 1;
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
            if src[decl.start_byte()..name.start_byte()].contains(['*', '&']) {
                problems.push((
                    line(d),
                    format!(
                        "a __shared__ pointer or reference (`{}`) in a helper",
                        text(decl, src)
                    ),
                ));
                continue;
            }
            vars.push(SharedVar {
                name: text(name, src).to_string(),
                elem: text(ty, src).to_string(),
                qualifiers: qualifiers.clone(),
                extents: src[name.end_byte()..decl.end_byte()].trim().to_string(),
            });
        }
        h.own.extend(vars.iter().cloned());
        h.decls.insert(d.id(), vars);
    }
    if h.own.is_empty() {
        return None;
    }
    let t = template_parts(item, src, problems);
    (h.template_head, h.self_args, h.total, h.required) =
        (t.template_head, t.self_args, t.total, t.required);
    h.start = f.start_byte();
    Some(h)
}

fn is_shared(d: Node, src: &str) -> bool {
    children(d)
        .iter()
        .any(|c| c.kind() == "type_qualifier" && text(*c, src) == "__shared__")
}

/// The body-level constant declarations (`constexpr`, or `const` of a value) that `wanted` names use,
/// directly or through one another, in source order.
fn needed_constants(body: Node, src: &str, mut wanted: BTreeSet<String>) -> Vec<String> {
    let decls: Vec<(BTreeSet<String>, String)> = children(body)
        .into_iter()
        .filter(|d| d.kind() == "declaration" && !is_shared(*d, src))
        .filter(|d| {
            words(text(*d, src)).any(|w| w == "constexpr" || w == "const")
                && !descendants(*d)
                    .iter()
                    .any(|x| x.kind() == "pointer_declarator")
        })
        .map(|d| (declared_names(d, src), text(d, src).to_string()))
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

/// The names a declaration declares: `int a = 1, b[N] = {}, *c;` → a, b, c.
fn declared_names(d: Node, src: &str) -> BTreeSet<String> {
    children(d)
        .into_iter()
        .filter_map(|c| declared_name(c, src))
        .collect()
}

/// A constant declaration without its leading `static`, `constexpr` and `const`: `int N = 4;`.
fn unqualified(c: &str) -> String {
    let mut rest = c.trim();
    loop {
        let next = ["static ", "constexpr ", "const "]
            .iter()
            .find_map(|q| rest.strip_prefix(q));
        match next {
            Some(r) => rest = r.trim_start(),
            None => return rest.to_string(),
        }
    }
}

/// The names the body of a function declares anywhere (its locals).
fn local_names(body: Node, src: &str) -> BTreeSet<String> {
    descendants(body)
        .into_iter()
        .filter(|d| d.kind() == "declaration")
        .flat_map(|d| declared_names(d, src))
        .collect()
}
