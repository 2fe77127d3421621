/**
 * The conformance kit against this package's conformance child:
 * `$WFHOST_CONFORMANCE -- node dist/conformance-child.js` must exit 0. The
 * kit is the workspace binary `wfhost-conformance` (default
 * `../../target/debug/wfhost-conformance`: build it with `cargo build
 * --workspace --bins`). `WFHOST_CONFORMANCE=skip` skips this test, visibly.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const setting = process.env["WFHOST_CONFORMANCE"];
const kit = setting ?? resolve(here, "../../../target/debug/wfhost-conformance");
const child = join(here, "../dist/conformance-child.js");

test("the conformance kit passes against dist/conformance-child.js", { skip: setting === "skip" && "WFHOST_CONFORMANCE=skip" }, () => {
  assert.ok(
    existsSync(kit),
    `the conformance kit ${kit} is missing: build it with \`cargo build --workspace --bins\` at the repository root, or point WFHOST_CONFORMANCE at it`,
  );
  const run = spawnSync(kit, ["--", process.execPath, child], { encoding: "utf8", timeout: 300_000 });
  // The kit's table, one line per scenario, for the log.
  process.stdout.write(`${run.stdout}${run.stderr}`);
  assert.equal(run.error, undefined, `the kit did not run: ${String(run.error)}`);
  assert.equal(run.status, 0, `the kit failed (exit ${run.status}):\n${run.stdout}${run.stderr}`);
});
