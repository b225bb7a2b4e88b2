// Keep the mock resident after dlclose (RTLD_NODELETE), like the real libnvidia-ml in a
// process: nvml-wrapper dlcloses the library when an init fails or an `Nvml` is dropped,
// and a retry must find the same clock, call counts and loaded scenario, not a fresh copy.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
