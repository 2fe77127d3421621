/**
 * Finding the control socket from the supervisor's config file: a minimal
 * TOML reader for the one key a client needs, `state_dir` in the
 * `[supervisor]` table (relative to the file's directory; the default is
 * `/var/lib/wfhost`), as `docs/control.md` says.
 */

import { readFileSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";

/** The supervisor's default `state_dir`. */
export const DEFAULT_STATE_DIR = "/var/lib/wfhost";
/** The socket's file name inside its directory. */
export const SOCKET_NAME = "wfhost.sock";

/** A config file the client cannot use; `code` 2 as the CLI's usage errors. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/** The value of a TOML basic ("…") or literal ('…') string at the start of `text`, and what follows it. */
function readString(text: string, where: string): { value: string; rest: string } {
  if (text.startsWith("'")) {
    const end = text.indexOf("'", 1);
    if (end < 0) throw new ConfigError(`${where}: the string is not closed`);
    return { value: text.slice(1, end), rest: text.slice(end + 1) };
  }
  if (!text.startsWith('"')) throw new ConfigError(`${where}: state_dir must be a string, e.g. state_dir = "state"`);
  let value = "";
  for (let i = 1; i < text.length; i++) {
    const c = text[i] as string;
    if (c === '"') return { value, rest: text.slice(i + 1) };
    if (c !== "\\") {
      value += c;
      continue;
    }
    const e = text[++i];
    const simple: Record<string, string> = { b: "\b", t: "\t", n: "\n", f: "\f", r: "\r", '"': '"', "\\": "\\" };
    if (e !== undefined && e in simple) {
      value += simple[e];
    } else if (e === "u" || e === "U") {
      const n = e === "u" ? 4 : 8;
      const hex = text.slice(i + 1, i + 1 + n);
      if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length !== n) throw new ConfigError(`${where}: bad \\${e} escape`);
      value += String.fromCodePoint(parseInt(hex, 16));
      i += n;
    } else {
      throw new ConfigError(`${where}: unknown escape \\${e ?? ""}`);
    }
  }
  throw new ConfigError(`${where}: the string is not closed`);
}

/** `state_dir` as the config file at `path` sets it, resolved against the file's directory. */
export function stateDirOf(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new ConfigError(`cannot read the config file ${path}: ${(e as Error).message}`);
  }
  let table = "";
  let found: string | null = null;
  text.split(/\r?\n/).forEach((raw, n) => {
    const line = raw.trim();
    const where = `${path}:${n + 1}`;
    if (line === "" || line.startsWith("#")) return;
    const header = /^\[\[?\s*([A-Za-z0-9_.\-"' ]+?)\s*\]\]?\s*(#.*)?$/.exec(line);
    if (header) {
      table = (header[1] as string).replace(/["'\s]/g, "");
      return;
    }
    const key = /^(state_dir|supervisor\s*\.\s*state_dir)\s*=\s*(.*)$/.exec(line);
    if (!key) return;
    const inSupervisor = key[1] === "state_dir" ? table === "supervisor" : table === "";
    if (!inSupervisor) return;
    const { value, rest } = readString((key[2] as string).trim(), where);
    if (!/^\s*(#.*)?$/.test(rest)) throw new ConfigError(`${where}: unexpected text after state_dir's value`);
    found = value;
  });
  const dir = found ?? DEFAULT_STATE_DIR;
  return isAbsolute(dir) ? dir : resolve(dirname(resolve(path)), dir);
}

/** The control socket of the supervisor configured by the file at `path`. */
export function socketOf(configPath: string): string {
  return join(stateDirOf(configPath), SOCKET_NAME);
}
