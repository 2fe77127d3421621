//! The `wfhost-child` binary is linked as a fixed-address (non-PIE)
//! executable. A plain command's wrapper (`wfhost-child exec`) sits beside
//! every hosted command, so its private memory is multiplied by the fleet
//! (issue 16: at most 0.15 MiB PSS each). In a position-independent
//! executable the loader writes every absolute pointer of the binary's
//! read-only data at start-up (vtables, string tables: 32 KiB of this
//! binary), which makes those pages private to each process; linked at a
//! fixed address they stay clean pages of the file, shared by every
//! wrapper. The libraries, the stack and the heap keep their randomised
//! addresses.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bin=wfhost-child=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
