//! The kernel MLX writes around a body: `mx.fast.metal_kernel`'s generated signature (research notes,
//! mlx.md §1.1), rebuilt here so the body can be compiled as MLX would compile it.
//!
//! Order and spelling follow MLX's `write_signature`: template parameters as passed (ints, then types), then
//! buffers numbered inputs first, each array input followed by its `_shape`/`_strides`/`_ndim` buffers when
//! the body mentions them, scalars as `const constant int32_t&`, arrays of fewer than 8 elements in the
//! `constant` address space, outputs as `device T*` (`device atomic<T>*` with `atomic_outputs`), and then the
//! thread attributes whose names occur in the body (plain substring match, as MLX does), sorted by name.

use ksearch_model::dtype::Dtype;

/// Attributes MLX can inject, with their types.
pub const ATTRIBUTES: [(&str, &str); 20] = [
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
];

/// Attributes whose value differs between the threads of one threadgroup (control flow on them diverges).
pub const VARYING: [&str; 7] = [
    "thread_position_in_grid",
    "thread_position_in_threadgroup",
    "thread_index_in_threadgroup",
    "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup",
    "thread_index_in_quadgroup",
    "quadgroup_index_in_threadgroup",
];

/// One kernel input as MLX receives it.
#[derive(Debug, Clone)]
pub enum Input {
    /// A tensor: its element type and element count (None: unknown, taken as large).
    Array {
        name: String,
        dtype: Dtype,
        elements: Option<i64>,
    },
    /// A plan scalar (a Python int: `int32`).
    Scalar { name: String },
}

impl Input {
    pub fn name(&self) -> &str {
        match self {
            Input::Array { name, .. } | Input::Scalar { name } => name,
        }
    }
}

/// Everything MLX needs to write one launch's kernel.
#[derive(Debug, Clone)]
pub struct KernelSpec {
    pub name: String,
    pub inputs: Vec<Input>,
    pub outputs: Vec<(String, Dtype)>,
    pub atomic_outputs: bool,
    /// Integer template arguments in order, then type arguments (name, dtype).
    pub template_ints: Vec<(String, i64)>,
    pub template_types: Vec<(String, Dtype)>,
}

/// Metal spelling of a dtype in MLX's generated code.
pub fn metal_type(d: Dtype) -> &'static str {
    match d.name() {
        "float32" => "float",
        "float16" => "float16_t",
        "bfloat16" => "bfloat16_t",
        "float64" => "double",
        "int8" => "int8_t",
        "int16" => "int16_t",
        "int32" => "int32_t",
        "int64" => "int64_t",
        "uint8" => "uint8_t",
        "uint32" => "uint32_t",
        "bool" => "bool",
        _ => "float",
    }
}

/// A parameter of the generated signature.
#[derive(Debug, Clone)]
pub struct Param {
    pub decl: String,
    pub name: String,
    /// `device`, `constant`, or `thread` for attributes.
    pub space: &'static str,
    /// A pointer (not a reference or value).
    pub pointer: bool,
    pub buffer: bool,
}

impl KernelSpec {
    pub fn mlx_name(&self) -> String {
        format!("custom_kernel_{}", self.name)
    }

    /// The parameters MLX writes for `body`.
    pub fn params(&self, body: &str) -> Vec<Param> {
        let mut out = Vec::new();
        let mut push = |decl: String, name: &str, space, pointer, buffer| {
            out.push(Param {
                decl,
                name: name.to_string(),
                space,
                pointer,
                buffer,
            })
        };
        let mut b = 0;
        for i in &self.inputs {
            match i {
                Input::Array {
                    name,
                    dtype,
                    elements,
                } => {
                    let small = elements.is_some_and(|n| n < 8);
                    let space = if small { "constant" } else { "device" };
                    push(
                        format!(
                            "const {space} {}* {name} [[buffer({b})]]",
                            metal_type(*dtype)
                        ),
                        name,
                        space,
                        true,
                        true,
                    );
                    b += 1;
                    for (suffix, ty, ptr) in [
                        ("_shape", "int*", true),
                        ("_strides", "int64_t*", true),
                        ("_ndim", "int&", false),
                    ] {
                        let n = format!("{name}{suffix}");
                        if body.contains(&n) {
                            push(
                                format!("const constant {ty} {n} [[buffer({b})]]"),
                                &n,
                                "constant",
                                ptr,
                                true,
                            );
                            b += 1;
                        }
                    }
                }
                Input::Scalar { name } => {
                    push(
                        format!("const constant int32_t& {name} [[buffer({b})]]"),
                        name,
                        "constant",
                        false,
                        true,
                    );
                    b += 1;
                }
            }
        }
        for (name, d) in &self.outputs {
            let ty = if self.atomic_outputs {
                format!("atomic<{}>", metal_type(*d))
            } else {
                metal_type(*d).to_string()
            };
            push(
                format!("device {ty}* {name} [[buffer({b})]]"),
                name,
                "device",
                true,
                true,
            );
            b += 1;
        }
        for (attr, ty) in ATTRIBUTES {
            if body.contains(attr) {
                push(
                    format!("{ty} {attr} [[{attr}]]"),
                    attr,
                    "thread",
                    false,
                    false,
                );
            }
        }
        out
    }

    fn template_args(&self) -> (String, String) {
        let mut params = Vec::new();
        let mut args = Vec::new();
        for (n, v) in &self.template_ints {
            params.push(format!("int {n}"));
            args.push(v.to_string());
        }
        for (n, d) in &self.template_types {
            params.push(format!("typename {n}"));
            args.push(metal_type(*d).to_string());
        }
        (params.join(", "), args.join(", "))
    }

    /// The kernel's source as MLX generates it (without MLX's prelude), with `#line` directives so that
    /// compiler messages name the candidate's files and lines. `body` may carry probes added by the
    /// checker; `header` is the candidate's header file (name, text), if any.
    pub fn unit(&self, header: Option<(&str, &str)>, body_file: &str, body: &str) -> String {
        let mut s = String::from("#include \"mlx_prelude.h\"\n");
        if let Some((file, text)) = header {
            s.push_str(&format!("#line 1 \"{file}\"\n{text}\n"));
        }
        let name = self.mlx_name();
        let (tparams, targs) = self.template_args();
        s.push_str("#line 1 \"<signature>\"\n");
        if !tparams.is_empty() {
            s.push_str(&format!("template <{tparams}>\n"));
        }
        let params: Vec<String> = self
            .params(body)
            .into_iter()
            .map(|p| format!("  {}", p.decl))
            .collect();
        s.push_str(&format!(
            "[[kernel]] void {name}(\n{}) {{\n",
            params.join(",\n")
        ));
        s.push_str(&format!("#line 1 \"{body_file}\"\n{body}\n"));
        s.push_str("#line 1 \"<instantiation>\"\n}\n");
        if !targs.is_empty() {
            s.push_str(&format!(
                "template [[host_name(\"{name}\")]] [[kernel]] decltype({name}<{targs}>) {name}<{targs}>;\n"
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> KernelSpec {
        KernelSpec {
            name: "k".into(),
            inputs: vec![
                Input::Array {
                    name: "inp".into(),
                    dtype: Dtype::Float16,
                    elements: Some(64),
                },
                Input::Array {
                    name: "small".into(),
                    dtype: Dtype::Int32,
                    elements: Some(7),
                },
                Input::Scalar { name: "n".into() },
            ],
            outputs: vec![("out".into(), Dtype::Float32)],
            atomic_outputs: false,
            template_ints: vec![("N".into(), 4)],
            template_types: vec![("T".into(), Dtype::Bfloat16)],
        }
    }

    #[test]
    fn signature_follows_mlx_conventions() {
        let body = "uint i = thread_position_in_grid.x; out[i] = inp[i] + inp_shape[0] + small[0] + n + threads_per_simdgroup;";
        let u = spec().unit(None, "k.metal", body);
        for want in [
            "template <int N, typename T>",
            "const device float16_t* inp [[buffer(0)]]",
            "const constant int* inp_shape [[buffer(1)]]",
            "const constant int32_t* small [[buffer(2)]]",
            "const constant int32_t& n [[buffer(3)]]",
            "device float* out [[buffer(4)]]",
            "uint3 thread_position_in_grid [[thread_position_in_grid]],\n  uint threads_per_simdgroup [[threads_per_simdgroup]]) {",
            "decltype(custom_kernel_k<4, bfloat16_t>)",
        ] {
            assert!(u.contains(want), "missing `{want}` in\n{u}");
        }
        assert!(
            !u.contains("inp_strides"),
            "strides are not mentioned:\n{u}"
        );
    }

    #[test]
    fn atomic_outputs_become_atomic_pointers() {
        let mut s = spec();
        s.atomic_outputs = true;
        assert!(
            s.unit(None, "k.metal", "")
                .contains("device atomic<float>* out [[buffer(3)]]")
        );
    }
}
