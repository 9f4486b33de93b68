//! Overloads that differ only in address spaces. Metal overloads on them (`f(device float*)` beside
//! `f(threadgroup float*)`, a constructor `T() threadgroup` beside `T()`, an operator `const device`
//! beside `const`); the shim erases address spaces, so to the C++ compiler they are one function defined
//! several times. Clang then marks the class invalid, and everything that uses it fails after it (a
//! `static_assert` on a `constexpr` member, every later use of the type). So before compiling, each such
//! group keeps one member, the one with the fewest address-space words, and the others are blanked
//! (lines kept). The rules read the original source and still see every overload.

use super::lex;

/// The words that name an address space.
const SPACES: [&str; 4] = ["device", "threadgroup", "constant", "thread"];

/// One declaration at one scope: its tokens `[first, last]`, and where its signature ends.
struct Item {
    first: usize,
    last: usize,
    /// The tokens of the head (a function's through its parameter list and the qualifiers of `this`, a
    /// class's up to its body).
    head_end: usize,
    /// A function or a class definition: what can have address-space variants.
    variant: bool,
}

/// The unit with every address-space variant of an overload blanked but one.
pub fn variants_dropped(unit: &str) -> String {
    let lex::View {
        toks,
        directives: pp,
        ..
    } = lex::view(unit);
    if toks.is_empty() {
        return unit.to_string();
    }
    let pp_lines: Vec<usize> = pp.iter().map(|(l, _)| *l).collect();
    let mut drop: Vec<(usize, usize)> = Vec::new();
    scope(&toks, 0, toks.len(), &pp_lines, &mut drop);
    if drop.is_empty() {
        return unit.to_string();
    }
    let mut chars: Vec<char> = unit.chars().collect();
    for (a, b) in drop {
        let from = toks[a].pos;
        let to = (toks[b].pos + toks[b].text.chars().count()).min(chars.len());
        for c in &mut chars[from..to] {
            if *c != '\n' && *c != '\\' {
                *c = ' ';
            }
        }
    }
    chars.into_iter().collect()
}

/// The items of the tokens `[from, to)` of one scope, each group of variants reduced to one; class and
/// namespace bodies are scopes of their own.
fn scope(toks: &[lex::Tok], from: usize, to: usize, pp: &[usize], drop: &mut Vec<(usize, usize)>) {
    let items = split(toks, from, to, pp, drop);
    // Keyed by the whole item with its address spaces erased (the body too: a member dropped has the body
    // of the one kept, so no error of its own goes unseen); the first of a group is the candidate kept.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (k, it) in items.iter().enumerate() {
        // A kernel is a function MLX or the host looks up by name: never one of several.
        if !it.variant || toks[it.first..it.head_end].iter().any(|t| t.is("kernel")) {
            continue;
        }
        let key = format!(
            "{}\u{0}{}",
            erased(&toks[it.first..it.head_end]),
            erased(&toks[it.head_end..=it.last])
        );
        let g = *index.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(k);
    }
    for members in groups.iter().filter(|m| m.len() > 1) {
        let words = |k: usize| {
            let it = &items[k];
            toks[it.first..it.head_end]
                .iter()
                .filter(|t| SPACES.contains(&t.text.as_str()) && t.text != "thread")
                .count()
        };
        let keep = *members.iter().min_by_key(|k| words(**k)).expect("a group");
        let metal = |k: usize| {
            let it = &items[k];
            metal_signature(&toks[it.first..it.head_end])
        };
        for &k in members.iter().filter(|k| **k != keep) {
            // The same signature to Metal (`const constant` is `constant`, `thread` is implied) is a real
            // redefinition, refused on a Mac too: both stay and the compiler says so. Between two branches
            // of an `#if` only one is compiled: both stay.
            let (a, b) = (items[k.min(keep)].last, items[k.max(keep)].first);
            let first_pp = pp.partition_point(|l| *l < toks[a].line);
            let split_by_pp = pp.get(first_pp).is_some_and(|l| *l <= toks[b].line);
            if metal(k) != metal(keep) && !split_by_pp {
                drop.push((items[k].first, items[k].last));
            }
        }
    }
}

/// A signature as Metal reads it: `thread` implied, `const` beside `constant` implied, the order of
/// qualifiers in a run (`const device` or `device const`) ignored.
fn metal_signature(toks: &[lex::Tok]) -> String {
    const QUALIFIERS: [&str; 5] = ["const", "volatile", "device", "constant", "threadgroup"];
    let mut out: Vec<String> = Vec::new();
    let mut run: Vec<&str> = Vec::new();
    let flush = |run: &mut Vec<&str>, out: &mut Vec<String>| {
        if run.contains(&"constant") {
            run.retain(|w| *w != "const");
        }
        run.sort_unstable();
        run.dedup();
        out.extend(run.drain(..).map(str::to_string));
    };
    for t in toks {
        let w = t.text.as_str();
        if w == "thread" {
            continue;
        }
        if QUALIFIERS.contains(&w) {
            run.push(w);
        } else {
            flush(&mut run, &mut out);
            out.push(w.to_string());
        }
    }
    flush(&mut run, &mut out);
    out.join(" ")
}

/// Splits a scope into items; recurses into class and namespace bodies.
fn split(
    toks: &[lex::Tok],
    from: usize,
    to: usize,
    pp: &[usize],
    drop: &mut Vec<(usize, usize)>,
) -> Vec<Item> {
    let mut items = Vec::new();
    let mut i = from;
    while i < to {
        // Access specifiers belong to no item.
        if matches!(toks[i].text.as_str(), "public" | "private" | "protected")
            && toks.get(i + 1).is_some_and(|t| t.is(":"))
        {
            i += 2;
            continue;
        }
        if toks[i].is(";") {
            i += 1;
            continue;
        }
        let first = i;
        let (mut paren, mut init_list) = (0usize, false);
        // Depth inside `template <...>`, where `=` is a default and `class` a parameter.
        let mut angles = 0usize;
        let mut head_end = None;
        let mut function = false;
        let mut class_head = false;
        let mut class_like = false;
        let mut initializer = false;
        let mut last = to - 1;
        while i < to {
            let t = toks[i].text.as_str();
            if paren == 0 && (angles > 0 || (t == "<" && i > 0 && toks[i - 1].is("template"))) {
                match t {
                    "<" => angles += 1,
                    ">" => angles -= 1,
                    ">>" => angles = angles.saturating_sub(2),
                    _ => {}
                }
                if angles > 0 || matches!(t, ">" | ">>") {
                    i += 1;
                    continue;
                }
            }
            match t {
                "(" | "[" => {
                    if paren == 0 && t == "(" && !initializer && !class_like {
                        function = true;
                    }
                    paren += 1;
                }
                ")" | "]" => paren = paren.saturating_sub(1),
                "struct" | "class" | "union" | "enum" | "namespace" | "extern" if paren == 0 => {
                    class_like |= !function;
                }
                "=" if paren == 0 => {
                    if head_end.is_none() && function {
                        head_end = Some(i);
                    }
                    if !function {
                        initializer = true;
                    }
                }
                ":" if paren == 0 && function => {
                    // A constructor's member initializers.
                    if head_end.is_none() {
                        head_end = Some(i);
                    }
                    init_list = true;
                }
                ";" if paren == 0 => {
                    last = i;
                    break;
                }
                "{" if paren == 0 => {
                    let close = lex::matching(toks, i).min(to - 1);
                    let prev = &toks[i.saturating_sub(1)];
                    let member_init = init_list
                        && i > first
                        && (prev.is_ident() || prev.is(">"))
                        && !matches!(
                            prev.text.as_str(),
                            "const" | "noexcept" | "override" | "final"
                        );
                    if initializer || member_init {
                        i = close + 1;
                        continue;
                    }
                    if head_end.is_none() && function {
                        head_end = Some(i);
                    }
                    if class_like && !function {
                        let ns = toks[first..i]
                            .iter()
                            .any(|t| t.is("namespace") || t.is("extern"));
                        scope(toks, i + 1, close, pp, drop);
                        if !ns && head_end.is_none() {
                            // A class's head: its specializations on a pointer's address space
                            // (`pointer_element<device T*>`) are variants too.
                            head_end = Some(i);
                            class_head = !toks[first..i].iter().any(|t| t.is("enum"));
                        }
                        if ns {
                            last = close;
                            break;
                        }
                        // `struct S {...} s;` ends at its `;`.
                        i = close + 1;
                        continue;
                    }
                    last = close;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        if i >= to {
            last = to - 1;
        }
        let head_end = head_end.unwrap_or(last);
        items.push(Item {
            first,
            last,
            head_end,
            variant: (function && !class_like) || class_head,
        });
        i = last + 1;
    }
    items
}

/// The signature as the shim reads it: address spaces erased, `constant` read as `const` (but as nothing
/// where it qualifies `this`, after the parameters), a `const` written twice in a row once.
fn erased(toks: &[lex::Tok]) -> String {
    let mut out: Vec<&str> = Vec::new();
    for t in toks {
        let w = match t.text.as_str() {
            "constant" if out.last().is_some_and(|w| *w == ")" || *w == "const") => continue,
            "constant" => "const",
            "device" | "threadgroup" | "thread" => continue,
            w => w,
        };
        if w == "const" && out.last() == Some(&"const") {
            continue;
        }
        out.push(w);
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::variants_dropped;

    fn kept(src: &str) -> String {
        let out = variants_dropped(src);
        assert_eq!(out.lines().count(), src.lines().count(), "lines are kept");
        out.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn member_variants_by_address_space_keep_the_plain_one() {
        let src = "template <typename T> struct C {\n  T r;\n  constexpr C() threadgroup : r(0) {}\n  constexpr C() : r(0) {}\n  constexpr C() device : r(0) {}\n  operator float() const device { return r; }\n  operator float() const { return r; }\n};\n";
        let out = kept(src);
        assert_eq!(
            out,
            "template <typename T> struct C { T r; constexpr C() : r(0) {} operator float() const { return r; } };"
        );
    }

    #[test]
    fn overloads_on_parameter_spaces_keep_one_and_real_redefinitions_stay() {
        let src = "void f(device float* x) { x[0] = 1; }\nvoid f(threadgroup float* x) { x[0] = 1; }\nvoid g(const constant float* a);\nvoid g(const device float* a);\nint h(int a) { return a; }\nint h(int a) { return a; }\n";
        let out = kept(src);
        assert_eq!(out.matches("void f").count(), 1, "{out}");
        assert_eq!(out.matches("void g").count(), 1, "{out}");
        assert_eq!(out.matches("int h").count(), 2, "{out}");
        // Bodies that differ both stay: an error in either is the compiler's to see.
        let differ = "float f(threadgroup float* x) { return x[1]; }\nfloat f(device float* x) { return x[0] + nope; }\n";
        assert_eq!(variants_dropped(differ), differ);
        // The same to Metal however spelled: a real redefinition, both stay.
        for same in [
            "float g(constant float* x) { return 1; }\nfloat g(const constant float* x) { return 1; }\n",
            "float h(device const float* x) { return 1; }\nfloat h(const device float* x) { return 1; }\n",
            "float f(float* x) { return 1; }\nfloat f(thread float* x) { return 1; }\n",
        ] {
            assert_eq!(variants_dropped(same), same);
        }
        // Kernels are never reduced.
        let kernels =
            "kernel void k(device const float* x) { }\nkernel void k(constant float* x) { }\n";
        assert_eq!(variants_dropped(kernels), kernels);
    }

    #[test]
    fn template_members_with_defaulted_parameters_are_one_item_each() {
        let src = "template <typename T> struct C {\n  T r;\n  template <typename U, typename = typename enable_if<is_same_v<U, T>>::type>\n  constexpr C(U x) thread : r(x) {}\n  template <typename U, typename = typename enable_if<is_same_v<U, T>>::type>\n  constexpr C(U x) device : r(x) {}\n  constexpr C(vec<T, 2> v) thread : r(v.x) {};\n  constexpr C(vec<T, 2> v) constant : r(v.x) {};\n};\n";
        let out = kept(src);
        assert_eq!(out.matches("C(U x)").count(), 1, "{out}");
        assert_eq!(out.matches("C(vec<T, 2> v)").count(), 1, "{out}");
        assert!(
            !out.contains("device") && !out.contains("constant"),
            "{out}"
        );
    }

    #[test]
    fn class_specializations_on_a_pointers_space_keep_one() {
        let src = "template <typename T> struct pe;\ntemplate <typename T> struct pe<device T*> { using type = T; };\ntemplate <typename T> struct pe<constant T*> { using type = T; };\ntemplate <typename T> struct pe<threadgroup T*> { using type = T; };\ntemplate <typename T> struct pe<thread T*> { using type = T; };\nenum class E { a };\n";
        let out = kept(src);
        assert!(
            out.contains("struct pe<thread T*>") && out.contains("struct pe<constant T*>"),
            "{out}"
        );
        assert_eq!(out.matches("using type").count(), 2, "{out}");
    }

    #[test]
    fn a_file_that_starts_with_a_brace_or_a_bracket_does_not_panic() {
        for src in [
            "{ } <",
            "< template",
            "{",
            "}",
            ") :",
            "template <",
            "f() : {",
        ] {
            variants_dropped(src);
        }
    }

    #[test]
    fn variants_in_two_branches_of_an_if_both_stay() {
        let src =
            "#if A\nvoid f(device float* x) {}\n#else\nvoid f(threadgroup float* x) {}\n#endif\n";
        assert_eq!(variants_dropped(src), src);
    }

    #[test]
    fn namespaces_are_scopes_and_other_items_are_untouched() {
        let src = "namespace n {\nconstant int k = 3;\nstruct S { float v; };\ninline float f(device S& s) { return s.v; }\ninline float f(thread S& s) { return s.v; }\n}\nint a[2] = {1, 2};\n";
        let out = kept(src);
        assert_eq!(out.matches("inline float f").count(), 1, "{out}");
        assert!(
            out.contains("f(thread S& s)"),
            "the plain one is kept: {out}"
        );
        assert!(out.contains("constant int k = 3;") && out.contains("int a[2] = {1, 2};"));
    }
}
