//! The CUDA expert seeds' device code run on the CPU: tests/back_translate_cpu/cuda_cpu.h emulates the CUDA
//! names (one std::thread per CUDA thread, blocks in turn), so index arithmetic, merges and the cross-block
//! protocol of a shipped kernel are checked here, not only on the H200. Only float32 instantiations run
//! (the emulation's half types are placeholders); the 16-bit paths still have to compile.
mod common;
use common::repo;
use ksearch::candidate::Candidate;

/// Compiles `driver` (under tests/cuda_seeds_cpu) with the system C++ compiler, the emulation and the
/// seed folder on the include path, runs it and returns its output.
fn run_driver(driver: &str, seed: &std::path::Path) -> String {
    let dir = repo().join("tests/cuda_seeds_cpu");
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("driver");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = std::process::Command::new(&cxx)
        .args(["-std=c++20", "-O1", "-pthread", "-w", "-I"])
        .arg(repo().join("tests/back_translate_cpu"))
        .arg("-I")
        .arg(seed)
        .arg(dir.join(driver))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("{cxx}: {e} (a C++20 compiler is needed; set CXX)"));
    assert!(
        out.status.success(),
        "{driver} does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = std::process::Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(run.status.success(), "{driver}:\n{text}");
    text
}

#[test]
fn attention_expert_decode_matches_softmax() {
    let seed = repo().join("tasks/attention/seeds/mlx-cuda/expert");
    // attention_decode.cpp instantiates the bodies with these template values, inputs and outputs; a plan
    // whose decode launches change needs the driver changed with it.
    let c = Candidate::load(&seed).unwrap();
    let decode: Vec<_> = c
        .plan
        .launch
        .iter()
        .filter(|l| l.when.as_ref().is_some_and(|w| w.0.src() == "Tq == 1"))
        .map(|l| (l.kernel.as_str(), l.template.clone(), l.outputs.clone()))
        .collect();
    // The driver launches with these grids and threadgroups (in threads, as MLX takes them).
    let dims: Vec<(Vec<&str>, Vec<&str>)> = c
        .plan
        .launch
        .iter()
        .filter(|l| l.when.as_ref().is_some_and(|w| w.0.src() == "Tq == 1"))
        .map(|l| {
            let grid = l.grid.as_ref().unwrap().iter().map(|e| e.0.src()).collect();
            let tg = l
                .threadgroup
                .as_ref()
                .unwrap()
                .iter()
                .map(|e| e.0.src())
                .collect();
            (grid, tg)
        })
        .collect();
    assert_eq!(
        dims,
        [
            (
                vec![
                    "NTD * ((Tk + CH - 1) // CH)",
                    "B * Hkv * ((Hq // Hkv + GH - 1) // GH)",
                    "1"
                ],
                vec!["NTD", "1", "1"]
            ),
            (vec!["128 * B * Hq", "1", "1"], vec!["128", "1", "1"]),
        ],
        "update the launches in tests/cuda_seeds_cpu/attention_decode.cpp"
    );
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        decode,
        [
            (
                "attn_decode_split",
                s(&["D", "NTD", "CH", "GH", "U", "Hq", "Hkv", "Tk"]),
                s(&["mpart", "lpart", "apart"])
            ),
            ("attn_decode_combine", s(&["D", "CH", "Tk"]), s(&["o"])),
        ],
        "update tests/cuda_seeds_cpu/attention_decode.cpp"
    );
    let out = run_driver("attention_decode.cpp", &seed);
    assert!(out.contains("decode agrees with the reference"), "{out}");
    assert_eq!(out.matches("worst error").count(), 7, "{out}");
}
