//! Node for the tests that host the TypeScript SDK's children: where
//! `node` is, and the example, checked to be built.

use std::path::{Path, PathBuf};

/// The repository root (the tests crate lives in `tests/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// `examples/node-orders`, checked to be ready to run: the SDK's `dist/`
/// is built and the example's `node_modules` link to it exists.
pub fn example_dir() -> PathBuf {
    let root = repo();
    let built = root.join("sdk/typescript/dist/index.js");
    let linked = root.join("examples/node-orders/node_modules/@wfhost/child/package.json");
    assert!(
        built.exists() && linked.exists(),
        "the Node SDK is not built or the example's dependencies are missing ({} or {} is absent): \
         run `scripts/test`, or by hand: (cd sdk/typescript && npm ci && npm run build) && (cd examples/node-orders && npm ci)",
        built.display(),
        linked.display()
    );
    root.join("examples/node-orders")
}

/// The absolute path of `node` on PATH.
pub fn node() -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("node"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("node is not on PATH: install Node 20 or later"))
        .display()
        .to_string()
}
