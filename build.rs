// The built-in tasks and the Python worker are embedded in the binary (src/builtin.rs);
// rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=tasks");
    println!("cargo:rerun-if-changed=recordings");
    println!("cargo:rerun-if-changed=python/ksearch_worker");
    println!("cargo:rerun-if-changed=python/requirements.txt");
}
